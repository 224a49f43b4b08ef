package report

import (
	"strings"
	"testing"
	"time"
)

// TestChoose: the cheapest point within the target (ties: the shorter
// wait); with none within it, the point of the least wait (ties: the
// cheaper), said not met.
func TestChoose(t *testing.T) {
	pt := func(base, max int, cost float64, wait time.Duration) PurchasePoint {
		return PurchasePoint{Base: base, Max: max, FrontierPoint: FrontierPoint{Cost: cost, Wait: wait}}
	}
	cases := []struct {
		name     string
		points   []PurchasePoint
		met      bool
		base, mx int
	}{
		{"cheapest within", []PurchasePoint{pt(1, 1, 100, 20*time.Minute), pt(2, 2, 200, 9*time.Minute), pt(3, 3, 300, 2*time.Minute)}, true, 2, 2},
		{"at the target counts", []PurchasePoint{pt(1, 1, 100, 10*time.Minute), pt(2, 2, 200, time.Minute)}, true, 1, 1},
		{"equal cost: the shorter wait", []PurchasePoint{pt(1, 3, 150, 8*time.Minute), pt(2, 2, 150, 5*time.Minute)}, true, 2, 2},
		{"a burst cheaper than more reserved", []PurchasePoint{pt(3, 3, 300, 5*time.Minute), pt(1, 4, 180, 9*time.Minute)}, true, 1, 4},
		{"none within: the least wait", []PurchasePoint{pt(1, 1, 100, 40*time.Minute), pt(2, 2, 200, 15*time.Minute), pt(3, 3, 300, 15*time.Minute)}, false, 2, 2},
	}
	for _, c := range cases {
		a := Choose("x", c.points, 10*time.Minute)
		if a.Met != c.met || a.Best.Base != c.base || a.Best.Max != c.mx || a.Tried != len(c.points) {
			t.Errorf("%s: met %v on %d–%d (tried %d), want met %v on %d–%d", c.name, a.Met, a.Best.Base, a.Best.Max, a.Tried, c.met, c.base, c.mx)
		}
	}
}

// TestPurchaseVerdict: nomad-gpu's cheapest met answer against stock
// Nomad's, and what it says when either or both miss the target.
func TestPurchaseVerdict(t *testing.T) {
	ans := func(name string, stock, ng, met bool, base, max int, cost float64) PurchaseAnswer {
		return PurchaseAnswer{Config: name, Stock: stock, NomadGPU: ng, Met: met, Best: PurchasePoint{Base: base, Max: max, FrontierPoint: FrontierPoint{Cost: cost}}}
	}
	cases := []struct {
		name    string
		answers []PurchaseAnswer
		want    string
	}{
		{"both", []PurchaseAnswer{ans("baseline", true, false, true, 6, 6, 800), ans("target-value", true, false, true, 4, 7, 700),
			ans("+layouts", false, false, true, 1, 1, 10), ans("nomad-gpu", false, true, true, 3, 6, 560), ans("nomad-gpu-fixed", false, true, false, 8, 8, 100)},
			"stock Nomad's cheapest cluster is 4 reserved nodes bursting to 7 (target-value) at 700; nomad-gpu's is 3 reserved nodes bursting to 6 (nomad-gpu) at 560: **0.80×**"},
		{"spot, and without", []PurchaseAnswer{ans("baseline", true, false, true, 6, 6, 800), ans("nomad-gpu", false, true, true, 3, 6, 600),
			{Config: "nomad-gpu-spot", NomadGPU: true, Spot: true, Met: true, Best: PurchasePoint{Base: 1, Max: 6, FrontierPoint: FrontierPoint{Cost: 400}}}},
			"(nomad-gpu-spot) at 400: **0.50×** stock Nomad's cost. Without spot nodes, 3 reserved nodes bursting to 6 (nomad-gpu) at 600: 0.75×."},
		{"stock misses", []PurchaseAnswer{ans("baseline", true, false, false, 8, 8, 900), ans("nomad-gpu-fixed", false, true, true, 1, 1, 100)},
			"no stock Nomad configuration meets it in the range; nomad-gpu's cheapest is 1 reserved node (nomad-gpu-fixed) at 100"},
		{"nomad-gpu misses", []PurchaseAnswer{ans("baseline", true, false, true, 2, 2, 200), ans("nomad-gpu", false, true, false, 1, 2, 100)},
			"no nomad-gpu configuration meets it"},
		{"neither", []PurchaseAnswer{ans("baseline", true, false, false, 2, 2, 200)}, "no configuration meets it in the range"},
	}
	for _, c := range cases {
		p := Purchase{Target: 10 * time.Minute, Answers: c.answers}
		if v := p.Verdict(); !strings.Contains(v, c.want) {
			t.Errorf("%s: verdict %q, want %q in it", c.name, v, c.want)
		}
		if md := p.Markdown("t", "w"); !strings.Contains(md, p.Verdict()) || strings.Count(md, "\n| ") != len(c.answers)+1 {
			t.Errorf("%s: markdown lacks the verdict or a row per answer:\n%s", c.name, md)
		}
	}
}

// TestPurchasePointAdd: a cluster pooled over windows adds its costs and
// hours, weighs the mean waits by their jobs, divides the summed cost by
// the summed useful GPU-hours, keeps no percentile, and refuses another
// cluster's point.
func TestPurchasePointAdd(t *testing.T) {
	p := PurchasePoint{Base: 2, Max: 4, UsefulGPUHours: 10, CostPerUsefulGPUHour: 10,
		FrontierPoint: FrontierPoint{Nodes: 4, Cost: 100, NodeHours: 5, Wait: 10 * time.Minute, WaitP95: time.Hour, Jobs: 1}}
	q := PurchasePoint{Base: 2, Max: 4, UsefulGPUHours: 30, CostPerUsefulGPUHour: 10,
		FrontierPoint: FrontierPoint{Nodes: 4, Cost: 300, NodeHours: 7, Wait: 2 * time.Minute, WaitP95: time.Hour, Jobs: 3}}
	if err := p.Add(q); err != nil {
		t.Fatal(err)
	}
	if p.Cost != 400 || p.NodeHours != 12 || p.UsefulGPUHours != 40 || p.CostPerUsefulGPUHour != 10 || p.Wait != 4*time.Minute || p.Jobs != 4 || p.WaitP95 != 0 {
		t.Errorf("pooled: %+v; want cost 400, 12 node-hours, 40 useful GPU-hours at 10, wait 4m over 4 jobs, no p95", p)
	}
	q.UsefulGPUHours = 0
	q.Cost = 100
	if err := p.Add(q); err != nil || p.CostPerUsefulGPUHour != 12.5 {
		t.Errorf("per useful GPU-hour: %v, err %v; want 500/40 = 12.5", p.CostPerUsefulGPUHour, err)
	}
	q.Max = 5
	if err := p.Add(q); err == nil || !strings.Contains(err.Error(), "2 reserved nodes bursting to 5 to pool into 2 reserved nodes bursting to 4") {
		t.Errorf("another cluster: %v; want it refused naming both", err)
	}
}
