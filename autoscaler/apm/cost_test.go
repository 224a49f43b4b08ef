package apm

import (
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/contract"
)

// costNode is a ready node of pool/class with n whole H100s (IDs
// id-0..), the first unhealthy of them unhealthy, the IDs in held held.
func costNode(id, pool, class string, n, unhealthy int, held ...string) Node {
	var used []UsedDevices
	if len(held) > 0 {
		used = []UsedDevices{{h100, held}}
	}
	g := wholeGPUs(id, n)
	for i := range unhealthy {
		g.Instances[i].Healthy = false
	}
	return node(id, pool, class, used, g)
}

func withStatus(n Node, status string) Node { n.Status = status; return n }

func ineligible(n Node) Node { n.Eligible = false; return n }

// costStep is one refresh: at this many seconds, the cluster is nodes.
type costStep struct {
	at    float64
	nodes []Node
}

// TestCostAccumulation: the counters integrate each refresh's rates until
// the next one, and the last until the read.
func TestCostAccumulation(t *testing.T) {
	training := CostKey{"training", "gpu-base"}
	burst := CostKey{"training", "gpu-burst"}
	mps := CostKey{"mps", "l4"}
	mig := CostKey{"mig", "h100"}
	draining := LayoutGPU{UUID: "GPU-r", Current: "whole", State: contract.LayoutDraining}
	relaying := costNode("r", "training", "gpu-base", 2, 0, "r-0")
	relaying.Layouts = []LayoutGPU{{UUID: "GPU-r0", Current: "whole", State: contract.LayoutHeld}, {UUID: "GPU-r1", Current: "whole", State: contract.LayoutReady}, draining}
	cases := []struct {
		name  string
		steps []costStep
		read  float64 // seconds
		want  map[CostKey]CostTotals
	}{
		{"an allocation takes more GPUs between the refreshes",
			[]costStep{
				{0, []Node{costNode("a", "training", "gpu-base", 4, 0, "a-0")}},
				{60, []Node{costNode("a", "training", "gpu-base", 4, 0, "a-0", "a-1", "a-2")}},
			}, 120,
			map[CostKey]CostTotals{training: {NodeSeconds: 120, AllocatedGPUSeconds: 60 + 3*60, IdleGPUSeconds: 3*60 + 60}}},
		{"a node joins and another leaves",
			[]costStep{
				{0, []Node{costNode("a", "training", "gpu-base", 2, 0)}},
				{30, []Node{costNode("a", "training", "gpu-base", 2, 0), costNode("b", "training", "gpu-burst", 8, 0, "b-0", "b-1")}},
				{90, []Node{costNode("b", "training", "gpu-burst", 8, 0, "b-0", "b-1")}},
			}, 100,
			map[CostKey]CostTotals{
				training: {NodeSeconds: 90, IdleGPUSeconds: 2 * 90},
				burst:    {NodeSeconds: 70, AllocatedGPUSeconds: 2 * 70, IdleGPUSeconds: 6 * 70},
			}},
		{"an unhealthy GPU counts neither allocated nor idle",
			[]costStep{
				{0, []Node{costNode("a", "training", "gpu-base", 4, 1, "a-1")}},
				// a-0 recovers; a-1, still held, goes unhealthy.
				{10, []Node{withHealth(costNode("a", "training", "gpu-base", 4, 0, "a-1"), "a-1", false)}},
			}, 20,
			map[CostKey]CostTotals{training: {NodeSeconds: 20, AllocatedGPUSeconds: 10, IdleGPUSeconds: 2*10 + 3*10}}},
		{"a node not ready counts nothing; ineligible or draining it counts",
			[]costStep{
				{0, []Node{withStatus(costNode("a", "training", "gpu-base", 4, 0), "initializing"), withStatus(costNode("b", "training", "gpu-base", 4, 0), "down")}},
				{50, []Node{costNode("a", "training", "gpu-base", 4, 0, "a-0"), withStatus(costNode("b", "training", "gpu-base", 4, 0), "disconnected")}},
				{80, []Node{ineligible(costNode("a", "training", "gpu-base", 4, 0, "a-0")), withStatus(costNode("b", "training", "gpu-base", 4, 0), "down")}},
			}, 100,
			map[CostKey]CostTotals{training: {NodeSeconds: 50, AllocatedGPUSeconds: 50, IdleGPUSeconds: 3 * 50}}},
		{"MPS shares and MIG instances count as their part of a GPU",
			[]costStep{
				// mpsNode: 2 GPUs of 4 shares, 1 held; migNode: 2 GPUs
				// of 7 1g.10gb (2 held) and 2 3g.40gb (1 held).
				{0, []Node{mpsNode(), migNode()}},
				// Every share of GPU-A held.
				{40, []Node{withUsed(mpsNode(), UsedDevices{DeviceSpec{Vendor: "nvidia", Type: "mps", Name: "GPU-A"}, ids("GPU-A-mps", 0, 4)}), migNode()}},
			}, 100,
			map[CostKey]CostTotals{
				mps: {NodeSeconds: 100, AllocatedGPUSeconds: 0.25*40 + 1*60, IdleGPUSeconds: 1.75*40 + 1*60},
				mig: {NodeSeconds: 100, AllocatedGPUSeconds: 5.0 / 7 * 100, IdleGPUSeconds: 15.0 / 7 * 100},
			}},
		{"a GPU being relaid is idle",
			[]costStep{{0, []Node{relaying}}}, 10,
			map[CostKey]CostTotals{training: {NodeSeconds: 10, AllocatedGPUSeconds: 10, IdleGPUSeconds: 2 * 10}}},
		{"a node without GPUs counts nothing",
			[]costStep{{0, []Node{node("cpu", "training", "gpu-base", nil, DeviceGroup{DeviceSpec: DeviceSpec{Vendor: "xilinx", Type: "fpga"}, Instances: []DeviceInstance{{ID: "f", Healthy: true}}}), node("none", "training", "gpu-base", nil)}}}, 10,
			nil},
		{"a pool that had nodes keeps its totals, at 0 from its first refresh",
			[]costStep{
				{0, []Node{costNode("b", "training", "gpu-burst", 1, 0)}},
				{0, []Node{costNode("a", "training", "gpu-base", 1, 0)}},
			}, 30,
			map[CostKey]CostTotals{burst: {}, training: {NodeSeconds: 30, IdleGPUSeconds: 30}}},
		{"time going back counts nothing",
			[]costStep{
				{100, []Node{costNode("a", "training", "gpu-base", 1, 0)}},
				{50, []Node{costNode("a", "training", "gpu-base", 1, 0, "a-0")}},
			}, 110,
			map[CostKey]CostTotals{training: {NodeSeconds: 10, AllocatedGPUSeconds: 10}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var m costMeter
			gen := m.claim(t0)
			for _, st := range c.steps {
				m.observe(gen, at(st.at), CostRates(&Snapshot{Now: at(st.at), Nodes: st.nodes}))
			}
			got := m.read(at(c.read))
			if len(got) != len(c.want) {
				t.Errorf("keys %v, want %v", got, c.want)
			}
			for k, w := range c.want {
				g, ok := got[k]
				if !ok || !near(g.NodeSeconds, w.NodeSeconds) || !near(g.AllocatedGPUSeconds, w.AllocatedGPUSeconds) || !near(g.IdleGPUSeconds, w.IdleGPUSeconds) {
					t.Errorf("%v: %+v, want %+v", k, g, w)
				}
			}
			// A read counts up to its time: reading again then adds nothing.
			if again := m.read(at(c.read)); len(got) > 0 && again[training] != got[training] {
				t.Errorf("second read %+v, first %+v", again[training], got[training])
			}
		})
	}
}

func at(seconds float64) time.Time { return t0.Add(time.Duration(seconds * float64(time.Second))) }

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func withHealth(n Node, id string, healthy bool) Node {
	for gi := range n.Devices {
		for ii := range n.Devices[gi].Instances {
			if n.Devices[gi].Instances[ii].ID == id {
				n.Devices[gi].Instances[ii].Healthy = healthy
			}
		}
	}
	return n
}

func withUsed(n Node, u ...UsedDevices) Node { n.Used = u; return n }

// TestCostRatesOf: the cost meter's reading of a nomadview snapshot is
// CostRates of SnapshotOf's nodes; a node not ready is left out.
func TestCostRatesOf(t *testing.T) {
	v := viewFixture(t0)
	down := *v.Nodes[0]
	down.ID, down.Status = "n2", api.NodeStatusDown
	v.Nodes = append(v.Nodes, &down)
	got := CostRatesOf(v)
	want := map[CostKey]CostRate{{"gpu", "a100"}: {Nodes: 1, Allocated: 2}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("CostRatesOf %v, want %v", got, want)
	}
	if all := CostRates(SnapshotOf(v, false)); !reflect.DeepEqual(all, got) {
		t.Errorf("CostRates of SnapshotOf %v, CostRatesOf %v", all, got)
	}
}

// TestCostMeterGenerations: a replaced cache's observations do not count;
// the claim stops its rates.
func TestCostMeterGenerations(t *testing.T) {
	k := CostKey{"training", "gpu-base"}
	one := map[CostKey]CostRate{k: {Nodes: 1, Allocated: 1}}
	two := map[CostKey]CostRate{k: {Nodes: 2, Idle: 2}}
	var m costMeter
	old := m.claim(at(0))
	m.observe(old, at(0), one)
	cur := m.claim(at(10)) // reconfigured: 10 s at one
	m.observe(old, at(20), two)
	if got := m.read(at(30)); got[k] != (CostTotals{NodeSeconds: 10, AllocatedGPUSeconds: 10}) {
		t.Fatalf("after the old cache's observation: %+v", got[k])
	}
	m.observe(cur, at(30), two)
	if got := m.read(at(40)); got[k] != (CostTotals{NodeSeconds: 30, AllocatedGPUSeconds: 10, IdleGPUSeconds: 20}) {
		t.Fatalf("after the new cache's: %+v", got[k])
	}
	m.claim(at(50)) // closed
	if got := m.read(at(100)); got[k] != (CostTotals{NodeSeconds: 50, AllocatedGPUSeconds: 10, IdleGPUSeconds: 40}) {
		t.Fatalf("after close: %+v", got[k])
	}
}

func TestParsePrices(t *testing.T) {
	p, err := ParsePrices(" training/gpu-burst=3.2, training/gpu-base = 2.1,training=2.5 ,inference=0")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		key   CostKey
		price float64
		ok    bool
	}{
		{CostKey{"training", "gpu-burst"}, 3.2, true},
		{CostKey{"training", "gpu-base"}, 2.1, true},
		{CostKey{"training", "other"}, 2.5, true}, // the pool's
		{CostKey{"training", ""}, 2.5, true},
		{CostKey{"inference", "l4"}, 0, true},
		{CostKey{"batch", "gpu-burst"}, 0, false},
		{CostKey{"gpu-burst", ""}, 0, false},
	}
	for _, c := range cases {
		if v, ok := p.Of(c.key); v != c.price || ok != c.ok {
			t.Errorf("%v: %v %v, want %v %v", c.key, v, ok, c.price, c.ok)
		}
	}
	if s := p.String(); s != "inference=0,training/gpu-base=2.1,training/gpu-burst=3.2,training=2.5" {
		t.Errorf("String: %s", s)
	}
	for _, s := range []string{"", "  "} {
		if p, err := ParsePrices(s); err != nil || !p.Empty() {
			t.Errorf("%q: %v %v", s, p, err)
		}
	}
	// Only a class's own entry or its pool's: no class alone.
	if p, _ := ParsePrices("training/gpu-burst=3"); !p.Empty() {
		if _, ok := p.Of(CostKey{"training", "gpu-base"}); ok {
			t.Error("a class entry priced another class")
		}
	}
}

// Prices the prices key refuses: the error names the key, says what is
// wrong, and what is allowed.
func TestParseConfigPrices(t *testing.T) {
	c, err := ParseConfig(map[string]string{"prices": "training/gpu-burst=3.2,training=2.5"})
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := c.Prices.Of(CostKey{"training", "gpu-burst"}); !ok || v != 3.2 {
		t.Errorf("prices: %v %v", v, ok)
	}
	if c, _ := ParseConfig(nil); !c.Prices.Empty() {
		t.Errorf("default prices: %v", c.Prices)
	}
	cases := []struct {
		v    string
		want string
	}{
		{"training", `"training" is not pool=price`},
		{"training=", `"training=" is not pool=price`},
		{"=2", `"=2" is not pool=price`},
		{"training=2,", `"" is not pool=price`},
		{"training=cheap", `price "cheap" is not a number at least 0`},
		{"training=-1", `price "-1" is not a number at least 0`},
		{"training=NaN", `price "NaN"`},
		{"training=+Inf", `price "+Inf"`},
		{"training/=2", `"training/" is not a pool or pool/class`},
		{"/gpu-burst=2", `"/gpu-burst" is not a pool or pool/class`},
		{"my pool=2", `"my pool" is not a pool or pool/class`},
		{"training=2,training=3", `"training" is priced twice`},
		{"training/a=2,training/a=3", `"training/a" is priced twice`},
	}
	for _, c := range cases {
		_, err := ParseConfig(map[string]string{"prices": c.v})
		if err == nil {
			t.Errorf("prices=%q: no error", c.v)
			continue
		}
		for _, w := range []string{`prices = "` + c.v + `"`, c.want, "pool/class=price", "node-hour"} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("prices=%q: error %q lacks %q", c.v, err, w)
			}
		}
	}
}
