package fgd

import (
	"math"
	"testing"
)

func TestFrag(t *testing.T) {
	share := 0.25
	// 1 free whole GPU; MPS GPU a with 1 free share, b with 3; a MIG
	// 3g instance free.
	node := Node{
		{Kind: "gpu", Groups: []Group{{Free: 1, Weight: 1}}},
		{Kind: "mps", OneGroup: true, Groups: []Group{{Free: 1, Weight: share}, {Free: 3, Weight: share}}},
		{Kind: "mig/3g.40gb", Groups: []Group{{Free: 1, Weight: 3.0 / 7}}},
	}
	free := 1 + 4*share + 3.0/7
	for _, c := range []struct {
		name  string
		shape Shape
		want  float64
	}{
		{"one whole GPU fits: shares and MIG unusable", Shape{Kind: "gpu", Count: 1}, free - 1},
		{"two whole GPUs fit nowhere: all free", Shape{Kind: "gpu", Count: 2}, free},
		{"one share: both MPS GPUs usable", Shape{Kind: "mps", Count: 1}, free - 4*share},
		{"two shares: only b, a's share is stranded", Shape{Kind: "mps", Count: 2}, free - 3*share},
		{"four shares of one GPU fit nowhere", Shape{Kind: "mps", Count: 4}, free},
		{"a MIG profile the node has", Shape{Kind: "mig/3g.40gb", Count: 1}, free - 3.0/7},
		{"a kind the node lacks", Shape{Kind: "mig/1g.10gb", Count: 1}, free},
	} {
		if got := node.Frag(c.shape); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("%s: Frag = %v, want %v", c.name, got, c.want)
		}
	}
	mix := []Shape{{Kind: "gpu", Count: 1, Weight: 0.5}, {Kind: "mps", Count: 2, Weight: 0.5}}
	if got, want := node.FGD(mix), 0.5*(free-1)+0.5*(free-3*share); math.Abs(got-want) > 1e-9 {
		t.Errorf("FGD = %v, want %v", got, want)
	}
	if got := (Node{}).FGD(mix); got != 0 {
		t.Errorf("FGD of a node without devices = %v, want 0", got)
	}
}

// TestFragConvertible: under layouts that follow the queue, free GPUs
// can become MPS shares; a partly used MPS GPU cannot become whole.
func TestFragConvertible(t *testing.T) {
	share := 1.0 / 8
	node := Node{
		{Kind: "gpu", Groups: []Group{{Free: 2, Weight: 1}}, Becomes: []Conversion{{Kind: "mps", Per: 8, OneGroup: true}}},
		{Kind: "mps", OneGroup: true, Groups: []Group{{Free: 3, Weight: share}}},
	}
	free := 2 + 3*share
	for _, c := range []struct {
		name  string
		shape Shape
		want  float64
	}{
		{"a whole GPU: the partly used MPS GPU's shares are stranded", Shape{Kind: "gpu", Count: 1}, 3 * share},
		{"two shares: the partial GPU and both free GPUs", Shape{Kind: "mps", Count: 2}, 0},
		{"four shares: only the free GPUs", Shape{Kind: "mps", Count: 4}, 3 * share},
		{"nine shares of one GPU fit nowhere", Shape{Kind: "mps", Count: 9}, free},
		{"three whole GPUs fit nowhere", Shape{Kind: "gpu", Count: 3}, free},
	} {
		if got := node.Frag(c.shape); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("%s: Frag = %v, want %v", c.name, got, c.want)
		}
	}
	// Without an MPS pool of its own, a node's free GPUs still serve
	// shares.
	whole := Node{{Kind: "gpu", Groups: []Group{{Free: 1, Weight: 1}}, Becomes: []Conversion{{Kind: "mps", Per: 8, OneGroup: true}}}}
	if got := whole.Frag(Shape{Kind: "mps", Count: 1}); got != 0 {
		t.Errorf("a free GPU that can become shares: Frag = %v, want 0", got)
	}
}
