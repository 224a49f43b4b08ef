package apm

import (
	"math"
	"reflect"
	"testing"

	"github.com/nomad-gpu/nomad-gpu/bench/tracereplay"
	"github.com/nomad-gpu/nomad-gpu/bench/tracereplay/figures"
	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/internal/fgd"
)

var (
	mpsX  = DeviceSpec{Vendor: "nvidia", Type: "mps", Name: "GPU-X"}
	mig3g = DeviceSpec{Vendor: "nvidia", Type: "mig", Name: "3g.40gb"}
)

// fgdNodes, in pool p:
//
//	x: 2 H100 (x-0 held: 1 GPU); GPU-X as 4 MPS shares (2 held by one
//	   allocation, 1 by another)
//	y: 2 H100, none held; one GPU as 2 MIG 3g.40gb (1 held)
//
// Held requests: gpu×1, mps×2, mps×1, mig/3g.40gb×1.
// Capacity x: 2 + 4/4 = 3, y: 2 + 2·3/7; allocated x: 1 + 3/4, y: 3/7.
func fgdNodes() []Node {
	return []Node{
		node("x", "p", "", []UsedDevices{
			{h100, []string{"x-0"}},
			{mpsX, []string{"GPU-X-mps-0", "GPU-X-mps-1"}},
			{mpsX, []string{"GPU-X-mps-2"}},
		}, wholeGPUs("x", 2), slicedGroup("nvidia", "mps", "GPU-X", "GPU-X-mps", "0000:0a", 4, 20*gib)),
		node("y", "p", "", []UsedDevices{{mig3g, []string{"y3-0"}}},
			wholeGPUs("y", 2), slicedGroup("nvidia", "mig", "3g.40gb", "y3", "0000:0b", 2, 40*gib)),
	}
}

// TestGPUFigures pins the GPU-equivalent figures of small snapshots,
// computed by hand (fgdNodes' comment for the nodes).
func TestGPUFigures(t *testing.T) {
	const capacity = 3 + 2 + 6.0/7
	const allocated = 1.75 + 3.0/7
	const free = 1.25 + 2 + 3.0/7
	queuedGPU2 := blocked("p", 2, ask("gpu", 2))
	drained := fgdNodes()
	drained[1].Eligible = false
	idle := fgdNodes()
	for i := range idle {
		idle[i].Used = nil
	}
	cases := []struct {
		name  string
		nodes []Node
		work  []Work
		want  GPUFigure
	}{
		{
			// Mix (6 requests): gpu×1 1/6, gpu×2 2/6, mps×1 1/6, mps×2 1/6,
			// mig/3g.40gb×1 1/6.
			// x (free: 1 GPU, 1 share = 1.25): gpu×1 leaves the share 0.25;
			// gpu×2 fits nothing 1.25; mps×1 leaves the GPU 1; mps×2 and
			// the MIG ask fit nothing 1.25 each → (0.25+2·1.25+1+1.25+1.25)/6.
			// y (free: 2 GPUs, one 3g = 17/7): both gpu asks leave the 3g
			// 3/7; neither mps ask fits 17/7; the MIG ask leaves the GPUs 2
			// → (3·3/7 + 2·17/7 + 2)/6 = 19/14.
			"held and queued", fgdNodes(), []Work{queuedGPU2},
			GPUFigure{capacity, allocated, free, 6.25/6 + 19.0/14},
		},
		{
			// Mix: the 4 held requests, 1/4 each.
			// x: (0.25 + 1 + 1.25 + 1.25)/4; y: (3/7 + 17/7 + 17/7 + 2)/4.
			"held only", fgdNodes(), nil,
			GPUFigure{capacity, allocated, free, 3.75/4 + 51.0/28},
		},
		{
			"no work at all: no fragmentation", idle, nil,
			GPUFigure{capacity, 0, capacity, 0},
		},
		{
			// Only queued work: one 1-share ask. x: all but its shares'
			// 4/4; y: nothing fits, all 2 + 6/7.
			"queued only", idle, []Work{blocked("p", 3, ask("nvidia/mps", 1))},
			GPUFigure{capacity, 0, capacity, 2 + 2 + 6.0/7},
		},
		{
			// y drained: no capacity; x as in "held and queued" with y's
			// held MIG request still in the mix.
			"a drained node has no capacity and no fragmentation", drained, []Work{queuedGPU2},
			GPUFigure{3, 1.75, 1.25, 6.25 / 6},
		},
		{
			// A pool-all job's ask counts; another pool's does not. Mix:
			// the 4 held, 2 × gpu×2 from pool all → as "held and queued".
			"pool all counts, another pool does not", fgdNodes(),
			[]Work{blocked("all", 2, ask("nvidia/gpu", 2)), blocked("q", 5, ask("nvidia/gpu", 8))},
			GPUFigure{capacity, allocated, free, 6.25/6 + 19.0/14},
		},
		{
			// Whole GPUs only: x with its GPUs alone, 1 of 2 held, and a
			// queued 2-GPU ask: the free GPU is of no use to half the mix.
			"whole GPUs only", []Node{node("x", "p", "", []UsedDevices{{h100, []string{"x-0"}}}, wholeGPUs("x", 2))},
			[]Work{blocked("p", 1, ask("nvidia/gpu", 2))},
			GPUFigure{2, 1, 1, 0.5},
		},
		{
			// Two models on one node: Nomad fills a request from one
			// device group, so 3 GPUs fit neither pair (all 4 free
			// count); 2 A100s fit the A100s only (the H100s count).
			"two models: a request takes one group", []Node{node("x", "p", "", nil, wholeGPUs("x", 2), devGroup("nvidia", "gpu", "A100", "a", 2, 0)[0])},
			[]Work{blocked("p", 1, ask("nvidia/gpu", 3)), blocked("p", 1, ask("nvidia/gpu/A100", 2))},
			GPUFigure{4, 0, 4, 0.5*4 + 0.5*2},
		},
		{
			// Another model asked: its request fits no group of these
			// nodes. Mix: 4 held + 1 → x: (0.25+1+1.25+1.25+1.25)/5;
			// y: (3/7+17/7+17/7+2+17/7)/5.
			"an incompatible model fits nowhere", fgdNodes(), []Work{blocked("p", 1, ask("nvidia/gpu/A100", 1))},
			GPUFigure{capacity, allocated, free, 5.0/5 + (68.0/7)/5},
		},
	}
	cases = append(cases, relayableCases()...)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := GPUFigures(&Snapshot{Now: t0, Nodes: c.nodes, Work: c.work})
			f := got[PoolKey{"p", "dc1"}]
			if len(got) != 1 || f == nil {
				t.Fatalf("figures %v", got)
			}
			for _, v := range []struct {
				name      string
				got, want float64
			}{
				{"capacity", f.Capacity, c.want.Capacity},
				{"allocated", f.Allocated, c.want.Allocated},
				{"free", f.Free, c.want.Free},
				{"fragmentation", f.Fragmentation, c.want.Fragmentation},
				{"ratio", f.FragmentationRatio(), c.want.FragmentationRatio()},
			} {
				if math.Abs(v.got-v.want) > 1e-12 {
					t.Errorf("%s %v, want %v", v.name, v.got, v.want)
				}
			}
		})
	}
	// The first case's ratio, by hand: (403/168) / (103/28).
	f := GPUFigures(&Snapshot{Now: t0, Nodes: fgdNodes(), Work: []Work{queuedGPU2}})[PoolKey{"p", "dc1"}]
	if r := f.FragmentationRatio(); math.Abs(r-403.0/618) > 1e-12 {
		t.Errorf("ratio %v, want 403/618", r)
	}
}

func TestRequestMixes(t *testing.T) {
	s := &Snapshot{Nodes: append(fgdNodes(), node("z", "q", "", nil, wholeGPUs("z", 1))),
		Work: []Work{
			blocked("p", 2, ask("gpu", 2)),          // no vendor: nvidia's; merges with held nvidia/gpu
			blocked("all", 1, ask("nvidia/gpu", 1)), // every pool
			blocked("p", 1, ask("nvidia/fpga", 1)),  // not a GPU
			blocked("p", 0, ask("nvidia/gpu", 4)),   // nothing unplaced
			{Source: FromPendingAlloc, Pool: "p", Allocs: 1, Asks: []DeviceAsk{{Device: h100, Count: 1}}}, // counted as held
		}}
	gpu := DeviceSpec{Vendor: "nvidia", Type: "gpu", Name: ""}
	mps := DeviceSpec{Vendor: "nvidia", Type: "mps", Name: ""}
	want := map[string][]RequestShape{
		"p": {
			{gpu, 1, 2.0 / 7}, {gpu, 2, 2.0 / 7}, {mig3g, 1, 1.0 / 7}, {mps, 1, 1.0 / 7}, {mps, 2, 1.0 / 7},
		},
		"q": {{gpu, 1, 1}},
	}
	if got := RequestMixes(s); !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
}

// The APM's pools are the trace replay's: for a node of 2 whole GPUs (1
// held) and an MPS GPU of 4 shares (3 held), its FGD over a mix is
// tracereplay/figures' for that layout and use, and package fgd's over
// the pools the brief of both names: whole GPUs, MPS shares by GPU.
// relayableCases: node x of 2 H100s (x-0 held) and GPU-X as 4 MPS
// shares, each GPU with a layout group; a queued whole GPU and a queued
// share, half the mix each (the held whole GPU is a third request).
func relayableCases() []struct {
	name  string
	nodes []Node
	work  []Work
	want  GPUFigure
} {
	x := func(sharesHeld int, state contract.LayoutState, pinned bool) []Node {
		used := []UsedDevices{{h100, []string{"x-0"}}}
		if sharesHeld > 0 {
			used = append(used, UsedDevices{mpsX, ids("GPU-X-mps", 0, sharesHeld)})
		}
		n := node("x", "p", "", used, wholeGPUs("x", 2), slicedGroup("nvidia", "mps", "GPU-X", "GPU-X-mps", "0000:0a", 4, 20*gib))
		for _, l := range []struct{ uuid, current string }{{"x-0", "whole"}, {"x-1", "whole"}, {"GPU-X", "mps:4"}} {
			n.Layouts = append(n.Layouts, LayoutGPU{UUID: l.uuid, Current: l.current, State: state, Pinned: pinned})
		}
		return []Node{n}
	}
	work := []Work{blocked("p", 1, ask("nvidia/gpu", 1)), blocked("p", 1, ask("nvidia/mps", 1))}
	held := func(n int) float64 { return float64(n) / 4 }
	type c = struct {
		name  string
		nodes []Node
		work  []Work
		want  GPUFigure
	}
	return []c{
		// Mix: gpu×1 2/3 (held and queued), mps×1 1/3. Free: x-1 and
		// GPU-X, both relayable: every request can use both: 0.
		{"layouts that follow the queue: idle GPUs serve every kind", x(0, contract.LayoutReady, false), work,
			GPUFigure{3, 1, 2, 0}},
		// Pinned: as laid, gpu×1 leaves GPU-X's shares (1), mps×1 x-1 (1).
		{"pinned GPUs are as laid", x(0, contract.LayoutReady, true), work,
			GPUFigure{3, 1, 2, 2.0/3*1 + 1.0/3*1}},
		// One share held: GPU-X cannot be made whole: gpu×1 leaves its 3
		// free shares; mps×1 uses them and x-1 as shares. Mix: gpu×1
		// 2/4, mps×1 2/4.
		{"a partly held MPS GPU is stranded for whole requests", x(1, contract.LayoutReady, false), work,
			GPUFigure{3, 1 + held(1), 1 + held(3), 0.5 * held(3)}},
		// x-1 has failed (its instance unhealthy, its layout group's
		// fault): capacity is x-0 (held) and GPU-X, which serves every
		// request as shares or whole: 0.
		{"a failed GPU is no capacity, and not relayable", func() []Node {
			n := x(0, contract.LayoutReady, false)
			n[0].Devices[0].Instances[1].Healthy = false
			n[0].Layouts[1].Fault = "XID 79 (GPU has fallen off the bus)"
			return n
		}(), work, GPUFigure{2, 1, 1, 0}},
		// Draining: its plugin is relaying it, as laid meanwhile.
		{"a GPU being relaid is as laid", x(0, contract.LayoutDraining, false), work,
			GPUFigure{3, 1, 2, 2.0/3*1 + 1.0/3*1}},
	}
}

func TestFGDMatchesTraceReplay(t *testing.T) {
	x := fgdNodes()[0]
	held := map[string]bool{}
	for _, u := range x.Used {
		for _, id := range u.IDs {
			held[id] = true
		}
	}
	groups, _, _ := nodeGPUs(&x, held)
	mix := []RequestShape{
		{DeviceSpec{Vendor: "nvidia", Type: "gpu", Name: ""}, 1, 0.2}, {DeviceSpec{Vendor: "nvidia", Type: "gpu", Name: ""}, 2, 0.3},
		{DeviceSpec{Vendor: "nvidia", Type: "mps", Name: ""}, 1, 0.25}, {DeviceSpec{Vendor: "nvidia", Type: "mps", Name: ""}, 2, 0.25},
	}
	var apm float64
	for _, m := range byDevice(mix) {
		apm += fgdNode(groups, m.dev).FGD(m.shapes)
	}

	layout := figures.Layout{Whole: 2, MPSGPUs: 1, Shares: 4}
	var trMix []figures.Shape
	for _, s := range mix {
		trMix = append(trMix, figures.Shape{Slice: tracereplay.Slice{Kind: s.Device.Type, Count: s.Count}, Weight: s.Weight})
	}
	tr := layout.FGD(figures.NodeUse{Whole: 1, MPS: map[string]int{"GPU-X": 3}}, trMix)

	pools := fgd.Node{
		{Kind: "nvidia/gpu", Groups: []fgd.Group{{Free: 1, Weight: 1}}},
		{Kind: "nvidia/mps", OneGroup: true, Groups: []fgd.Group{{Free: 1, Weight: 0.25}}},
	}
	var shapes []fgd.Shape
	for _, s := range mix {
		shapes = append(shapes, fgd.Shape{Kind: s.Device.String(), Count: s.Count, Weight: s.Weight})
	}
	direct := pools.FGD(shapes)

	// By hand: gpu×1 0.25, gpu×2 1.25, mps×1 1, mps×2 1.25.
	want := 0.2*0.25 + 0.3*1.25 + 0.25*1 + 0.25*1.25
	for name, v := range map[string]float64{"apm": apm, "trace replay": tr, "fgd": direct} {
		if math.Abs(v-want) > 1e-12 {
			t.Errorf("%s: FGD %v, want %v", name, v, want)
		}
	}
}

func TestGPUWeights(t *testing.T) {
	for profile, want := range map[string]float64{
		"1g.10gb": 1.0 / 7, "3g.40gb": 3.0 / 7, "7g.80gb": 1, "1g.10gb+me": 1.0 / 7, "1g.10gb-me": 1.0 / 7,
		"1c.3g.40gb": 1.0 / 7, "2c.4g.40gb": 2.0 / 7, "4g.24gb": 4.0 / 7, "weird": 1, "": 1, "9g.90gb": 1,
	} {
		if got := GPUWeight(DeviceSpec{Vendor: "nvidia", Type: "mig", Name: profile}); math.Abs(got-want) > 1e-15 {
			t.Errorf("%q: %v, want %v", profile, got, want)
		}
	}
	if GPUWeight(h100) != 1 {
		t.Error("a whole GPU is not 1")
	}
	// MPS: one group per GPU, or (not as the device plugin makes them) one
	// group of two GPUs' shares told apart by their IDs; 1/shares each,
	// an unhealthy share still a part of its GPU; IDs that name no GPU
	// fall back to the group's name.
	two := mergeGroups(slicedGroup("nvidia", "mps", "", "GPU-A-mps", "", 4, 0), slicedGroup("nvidia", "mps", "", "GPU-B-mps", "", 2, 0))
	two.Instances[3].Healthy = false
	odd := slicedGroup("nvidia", "mps", "GPU-C", "share", "", 8, 0)
	n := node("n", "p", "", nil, two, odd)
	groups, capacity, allocated := nodeGPUs(&n, map[string]bool{"GPU-B-mps-0": true, "share-0": true, "share-1": true})
	want := []fgd.Group{{Free: 3, Weight: 0.25}, {Free: 1, Weight: 0.5}, {Free: 6, Weight: 0.125}}
	var got []fgd.Group
	for _, g := range groups {
		got = append(got, g.Group)
	}
	if !reflect.DeepEqual(got, want) || capacity != 0.75+1+1 || allocated != 0.5+0.25 {
		t.Errorf("groups %v capacity %v allocated %v", got, capacity, allocated)
	}
}

// With layouts that follow the queue the APM and the trace replay agree
// too: node x of relayableCases with one share of GPU-X held.
func TestFGDMatchesTraceReplayWithLayouts(t *testing.T) {
	x := relayableCases()[2].nodes[0]
	held := map[string]bool{}
	x.markHeld(held)
	groups, _, _ := nodeGPUs(&x, held)
	mix := []RequestShape{{DeviceSpec{Vendor: "nvidia", Type: "gpu"}, 1, 0.5}, {DeviceSpec{Vendor: "nvidia", Type: "mps"}, 1, 0.5}}
	var apm float64
	for _, m := range byDevice(mix) {
		apm += fgdNode(groups, m.dev).FGD(m.shapes)
	}
	var trMix []figures.Shape
	for _, s := range mix {
		trMix = append(trMix, figures.Shape{Slice: tracereplay.Slice{Kind: s.Device.Type, Count: s.Count}, Weight: s.Weight})
	}
	use := figures.NodeUse{Whole: 1, MPS: map[string]int{"GPU-X": 1}}
	layout := figures.LayoutOf(tracereplay.Cluster{GPUsPerNode: 3}, tracereplay.Features{Layouts: true}).
		At([]tracereplay.MPSGPU{{GPU: "GPU-X", Shares: 4}}, use)
	tr := layout.FGD(use, trMix)
	// By hand: a whole GPU leaves GPU-X's 3 free shares; a share uses
	// them or the free whole GPU made shares.
	if want := 0.5 * 0.75; math.Abs(apm-want) > 1e-12 || math.Abs(tr-want) > 1e-12 {
		t.Errorf("FGD: apm %v, trace replay %v; want %v", apm, tr, want)
	}
}
