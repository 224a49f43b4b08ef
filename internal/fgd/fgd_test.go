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
