package apm

import (
	"fmt"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/nomadview"
)

const gib = int64(1) << 30

// slicedGroup is a group of n instances (IDs prefix-0..) on one physical
// GPU (its PCI bus ID), each of mem bytes; gpu "" leaves the GPU to the
// read model's rule on the instance's ID, as SnapshotOf does.
func slicedGroup(vendor, typ, name, prefix, gpu string, n int, mem int64) DeviceGroup {
	g := DeviceGroup{DeviceSpec: DeviceSpec{Vendor: vendor, Type: typ, Name: name}, MemoryBytes: mem}
	for i := range n {
		id := fmt.Sprintf("%s-%d", prefix, i)
		nd := &api.NodeDevice{ID: id}
		if gpu != "" {
			nd.Locality = &api.NodeDeviceLocality{PciBusID: gpu}
		}
		// As the read model gives it (SnapshotOf).
		g.Instances = append(g.Instances, DeviceInstance{ID: id, Healthy: true, GPU: nomadview.PhysicalGPUOf(typ, nd)})
	}
	return g
}

// wholeGPUs is n healthy H100s of 80 GiB (IDs prefix-0..).
func wholeGPUs(prefix string, n int) DeviceGroup {
	g := gpus(prefix, n, 0)[0]
	g.MemoryBytes = 80 * gib
	return g
}

func ids(prefix string, from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf("%s-%d", prefix, i))
	}
	return out
}

func node(id, pool, class string, used []UsedDevices, groups ...DeviceGroup) Node {
	return Node{ID: id, Pool: pool, Datacenter: "dc1", Class: class, Status: "ready", Eligible: true, Devices: groups, Used: used}
}

func blocked(pool string, allocs int, asks ...DeviceAsk) Work {
	return Work{Source: FromBlockedEval, JobID: "j", Allocs: allocs, Asks: asks, Since: t0.Add(-time.Minute),
		Pool: pool, Datacenters: []string{"dc*"}, CapacityBlocked: true}
}

var h100 = DeviceSpec{Vendor: "nvidia", Type: "gpu", Name: "H100"}

// wholeGPUNodes: a 5 of 8 held, b 7 of 8 held, c none held; d is
// ineligible with 8 free; e has 2 unhealthy of 8 free.
func wholeGPUNodes() []Node {
	d := node("d", "gpu", "a100", nil, wholeGPUs("d", 8))
	d.Eligible = false
	e := node("e", "gpu", "a100", nil, gpus("e", 8, 2)[0])
	e.Devices[0].MemoryBytes = 80 * gib
	return []Node{
		node("a", "gpu", "a100", []UsedDevices{{h100, ids("a", 0, 5)}}, wholeGPUs("a", 8)),
		node("b", "gpu", "a100", []UsedDevices{{h100, ids("b", 0, 7)}}, wholeGPUs("b", 8)),
		node("c", "gpu", "a100", nil, wholeGPUs("c", 8)),
		d, e,
	}
}

func TestStrandedWholeGPUs(t *testing.T) {
	key := CapacityKey{"gpu", "dc1", "nvidia/gpu/H100"}
	quota := blocked("gpu", 2, ask("nvidia/gpu", 7))
	quota.CapacityBlocked = false
	h100only := blocked("gpu", 1, ask("nvidia/gpu", 7))
	h100only.ClassRules = []ClassRule{{"!=", "a100"}}
	pending := Work{Source: FromPendingAlloc, Allocs: 1, Asks: []DeviceAsk{ask("nvidia/gpu", 7)}, Pool: "gpu"}
	cases := []struct {
		name     string
		work     []Work
		stranded int // on a (3 free), b (1), c (8), e (6)
	}{
		{"no queue: idle, not stranded", nil, 0},
		{"7 GPUs asked: a, b and e cannot take it, c can", []Work{blocked("gpu", 2, ask("nvidia/gpu", 7))}, 3 + 1 + 6},
		{"4 asked: a and b cannot", []Work{blocked("gpu", 2, ask("gpu", 4))}, 3 + 1},
		{"a 1-GPU ask in pool all fits everywhere", []Work{blocked("gpu", 2, ask("nvidia/gpu", 4)), blocked("all", 1, ask("nvidia/gpu", 1))}, 0},
		{"smallest ask decides: 2 fits a and e, not b", []Work{blocked("gpu", 1, ask("nvidia/gpu", 8)), blocked("gpu", 1, ask("nvidia/gpu", 2))}, 1},
		{"another pool's ask is no demand here", []Work{blocked("other", 1, ask("nvidia/gpu", 8))}, 0},
		{"quota-blocked work is no demand", []Work{quota}, 0},
		{"work whose class rules exclude the nodes is no demand", []Work{h100only}, 0},
		{"pending allocations are no demand", []Work{pending}, 0},
		{"datacenter that does not match is no demand", []Work{{Source: FromBlockedEval, Allocs: 1, Asks: []DeviceAsk{ask("gpu", 8)}, Pool: "gpu", Datacenters: []string{"eu*"}, CapacityBlocked: true}}, 0},
		{"only MIG asked: every free whole GPU is stranded", []Work{blocked("gpu", 3, ask("nvidia/mig/1g.10gb", 1))}, 3 + 1 + 8 + 6},
		{"another model asked: not compatible", []Work{blocked("gpu", 1, ask("nvidia/gpu/A100", 1))}, 3 + 1 + 8 + 6},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := &Snapshot{Now: t0, Nodes: wholeGPUNodes(), Work: c.work}
			f := CapacityFigures(s)[key]
			want := CapacityFigure{Devices: 8*3 + 6, Allocated: 12, Free: 3 + 1 + 8 + 6, FreeMemoryBytes: 18 * 80 * gib,
				StrandedDevices: c.stranded, Stranded: c.stranded, StrandedMemoryBytes: int64(c.stranded) * 80 * gib}
			if f == nil || *f != want {
				t.Fatalf("got %+v\nwant %+v", f, want)
			}
		})
	}
}

// migNode: GPU 0000:01 as 7 × 1g.10gb, 2 held; 0000:02 as 7 × 1g.10gb,
// none held; 0000:03 as 2 × 3g.40gb, 1 held.
func migNode() Node {
	return node("m", "mig", "h100", []UsedDevices{
		{DeviceSpec{Vendor: "nvidia", Type: "mig", Name: "1g.10gb"}, []string{"p1-0", "p1-1"}},
		{DeviceSpec{Vendor: "nvidia", Type: "mig", Name: "3g.40gb"}, []string{"p3-0"}},
	},
		mergeGroups(slicedGroup("nvidia", "mig", "1g.10gb", "p1", "0000:01", 7, 10*gib), slicedGroup("nvidia", "mig", "1g.10gb", "p2", "0000:02", 7, 10*gib)),
		slicedGroup("nvidia", "mig", "3g.40gb", "p3", "0000:03", 2, 40*gib),
	)
}

func mergeGroups(a, b DeviceGroup) DeviceGroup {
	a.Instances = append(a.Instances, b.Instances...)
	return a
}

func TestStrandedMIG(t *testing.T) {
	k1 := CapacityKey{"mig", "dc1", "nvidia/mig/1g.10gb"}
	k3 := CapacityKey{"mig", "dc1", "nvidia/mig/3g.40gb"}
	cases := []struct {
		name   string
		work   []Work
		w1, w3 CapacityFigure
	}{
		{"no queue: slices on partly used GPUs only", nil,
			CapacityFigure{Devices: 14, Allocated: 2, Free: 12, FreeMemoryBytes: 120 * gib, StrandedSlices: 5, Stranded: 5, StrandedMemoryBytes: 50 * gib},
			CapacityFigure{Devices: 2, Allocated: 1, Free: 1, FreeMemoryBytes: 40 * gib, StrandedSlices: 1, Stranded: 1, StrandedMemoryBytes: 40 * gib}},
		{"two 3g.40gb asked: the 1g.10gb slices cannot serve it, nor the one free 3g.40gb", []Work{blocked("mig", 1, ask("nvidia/mig/3g.40gb", 2))},
			CapacityFigure{Devices: 14, Allocated: 2, Free: 12, FreeMemoryBytes: 120 * gib, StrandedDevices: 12, StrandedSlices: 5, Stranded: 12, StrandedMemoryBytes: 120 * gib},
			CapacityFigure{Devices: 2, Allocated: 1, Free: 1, FreeMemoryBytes: 40 * gib, StrandedDevices: 1, StrandedSlices: 1, Stranded: 1, StrandedMemoryBytes: 40 * gib}},
		{"any MIG slice asked: fits both groups", []Work{blocked("mig", 4, ask("nvidia/mig", 1))},
			CapacityFigure{Devices: 14, Allocated: 2, Free: 12, FreeMemoryBytes: 120 * gib, StrandedSlices: 5, Stranded: 5, StrandedMemoryBytes: 50 * gib},
			CapacityFigure{Devices: 2, Allocated: 1, Free: 1, FreeMemoryBytes: 40 * gib, StrandedSlices: 1, Stranded: 1, StrandedMemoryBytes: 40 * gib}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			figs := CapacityFigures(&Snapshot{Now: t0, Nodes: []Node{migNode()}, Work: c.work})
			if got := figs[k1]; got == nil || *got != c.w1 {
				t.Errorf("1g.10gb: got %+v\nwant %+v", got, c.w1)
			}
			if got := figs[k3]; got == nil || *got != c.w3 {
				t.Errorf("3g.40gb: got %+v\nwant %+v", got, c.w3)
			}
		})
	}
}

// mpsNode: GPU-A and GPU-B as 4 MPS shares of 20 GiB each (one group per
// GPU, named by its UUID); one share of GPU-A held.
func mpsNode() Node {
	return node("s", "mps", "l4", []UsedDevices{{DeviceSpec{Vendor: "nvidia", Type: "mps", Name: "GPU-A"}, []string{"GPU-A-mps-0"}}},
		slicedGroup("nvidia", "mps", "GPU-A", "GPU-A-mps", "GPU-A", 4, 20*gib),
		slicedGroup("nvidia", "mps", "GPU-B", "GPU-B-mps", "GPU-B", 4, 20*gib),
	)
}

func TestStrandedMPS(t *testing.T) {
	key := CapacityKey{"mps", "dc1", "nvidia/mps"} // both GPUs' groups under one label
	cases := []struct {
		name             string
		work             []Work
		unfit, stranded  int
		strandedMemBytes int64
	}{
		{"no queue", nil, 0, 3, 60 * gib},
		{"2 shares asked: fits both GPUs", []Work{blocked("mps", 1, ask("nvidia/mps", 2))}, 0, 3, 60 * gib},
		{"4 shares asked: only GPU-B can", []Work{blocked("mps", 1, ask("nvidia/mps", 4))}, 3, 3, 60 * gib},
		{"5 shares asked: neither", []Work{blocked("mps", 1, ask("nvidia/mps", 5))}, 7, 7, 140 * gib},
		{"a whole GPU asked: no share serves it", []Work{blocked("mps", 1, ask("nvidia/gpu", 1))}, 7, 7, 140 * gib},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := CapacityFigures(&Snapshot{Now: t0, Nodes: []Node{mpsNode()}, Work: c.work})[key]
			want := CapacityFigure{Devices: 8, Allocated: 1, Free: 7, FreeMemoryBytes: 140 * gib,
				StrandedDevices: c.unfit, StrandedSlices: 3, Stranded: c.stranded, StrandedMemoryBytes: c.strandedMemBytes}
			if f == nil || *f != want {
				t.Fatalf("got %+v\nwant %+v", f, want)
			}
		})
	}
}

func TestCapacityUtilizationAndLoad(t *testing.T) {
	n := node("a", "gpu", "a100", []UsedDevices{{h100, []string{"a-0", "a-1"}}}, wholeGPUs("a", 4))
	down := node("z", "gpu", "a100", nil, wholeGPUs("z", 4))
	down.Status = "down"
	drain := node("d", "gpu", "a100", []UsedDevices{{h100, []string{"d-0"}}}, wholeGPUs("d", 2))
	drain.Eligible = false
	s := &Snapshot{Now: t0, Nodes: []Node{n, down, drain}, Util: map[string][]InstanceUtil{
		"a": {{h100, "a-0", 90}, {h100, "a-1", 50}, {h100, "a-2", 10}}, // a-3 reports nothing
		"z": {{h100, "z-0", 100}},                                      // down: not read
		"d": {{h100, "d-0", 40}, {h100, "d-1", 0}},                     // draining: util and load, no capacity
	}}
	f := CapacityFigures(s)[CapacityKey{"gpu", "dc1", "nvidia/gpu/H100"}]
	if f.Devices != 4 || f.Allocated != 2 || f.Free != 2 {
		t.Errorf("capacity %+v", f)
	}
	if u, ok := f.UtilizationRatio(); !ok || math.Abs(u-(90+50+10+40+0)/5.0/100) > 1e-12 {
		t.Errorf("utilization %v %v", u, ok)
	}
	if l, ok := f.LoadRatio(); !ok || math.Abs(l-(90+50+40)/3.0/100) > 1e-12 {
		t.Errorf("load %v %v", l, ok)
	}
	if f.AllocatedRatio() != 0.5 {
		t.Errorf("allocated ratio %v", f.AllocatedRatio())
	}
	// No stats: no utilisation, no load.
	s.Util = nil
	f = CapacityFigures(s)[CapacityKey{"gpu", "dc1", "nvidia/gpu/H100"}]
	if _, ok := f.UtilizationRatio(); ok {
		t.Error("utilization without stats")
	}
	if _, ok := f.LoadRatio(); ok {
		t.Error("load without stats")
	}
}

func TestFiguresEmpty(t *testing.T) {
	for _, s := range []*Snapshot{
		{Now: t0},
		{Now: t0, Nodes: []Node{{ID: "cpu", Pool: "cpu", Status: "ready", Eligible: true}}},   // no devices
		{Now: t0, Work: []Work{{Source: FromBlockedEval, Allocs: 3, Pool: "cpu", Since: t0}}}, // no device asks
	} {
		f := ComputeFigures(s, FigureOptions{})
		if len(f.Capacity)+len(f.GPUs)+len(f.Queue)+len(f.Tasks) != 0 {
			t.Errorf("%+v: figures %+v", s, f)
		}
	}
	// A pool whose only node is down has no capacity figure; one drained
	// has zeros.
	down := node("z", "gpu", "", nil, wholeGPUs("z", 4))
	down.Status = "down"
	drained := node("d", "drained", "", nil, wholeGPUs("d", 4))
	drained.Eligible = false
	f := CapacityFigures(&Snapshot{Now: t0, Nodes: []Node{down, drained}})
	if len(f) != 1 || *f[CapacityKey{"drained", "dc1", "nvidia/gpu/H100"}] != (CapacityFigure{}) {
		t.Errorf("got %+v", f)
	}
	g := GPUFigures(&Snapshot{Now: t0, Nodes: []Node{down, drained}})
	if len(g) != 1 || *g[PoolKey{"drained", "dc1"}] != (GPUFigure{}) {
		t.Errorf("got %+v", g)
	}
	c := &CapacityFigure{}
	if (&GPUFigure{}).FragmentationRatio() != 0 || c.AllocatedRatio() != 0 {
		t.Error("ratios of nothing are not 0")
	}
}

func TestTiers(t *testing.T) {
	cases := []struct {
		tiers Tiers
		p     int
		want  string
	}{
		{DefaultTiers, 100, "P0"}, {DefaultTiers, 70, "P0"}, {DefaultTiers, 69, "P1"}, {DefaultTiers, 50, "P1"},
		{DefaultTiers, 40, "P1"}, {DefaultTiers, 39, "P2"}, {DefaultTiers, 1, "P2"}, {DefaultTiers, 0, "unknown"},
		{DefaultTiers, 1000, "P0"},
		{Tiers{90, 50, 10}, 95, "P0"}, {Tiers{90, 50, 10}, 50, "P1"}, {Tiers{90, 50, 10}, 10, "P2"}, {Tiers{90, 50, 10}, 9, "P3"},
		{Tiers{}, 80, "P0"}, {Tiers{}, 0, "unknown"},
	}
	for _, c := range cases {
		if got := c.tiers.Tier(c.p); got != c.want {
			t.Errorf("%v.Tier(%d) = %q, want %q", c.tiers, c.p, got, c.want)
		}
	}
	if got := DefaultTiers.Names(); !reflect.DeepEqual(got, []string{"P0", "P1", "P2", "unknown"}) {
		t.Errorf("names %v", got)
	}
	for in, want := range map[string]Tiers{"70,40": {70, 40}, " 90 , 50,10 ": {90, 50, 10}, "1": {1}, "": {}} {
		got, err := ParseTiers(in)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("ParseTiers(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"40,70", "70,70", "x", "0", "-5", "70,,40", "70.5"} {
		if _, err := ParseTiers(in); err == nil {
			t.Errorf("ParseTiers(%q): no error", in)
		}
	}
}

func TestQueueFigures(t *testing.T) {
	w := func(src WorkSource, pool string, prio, allocs int, waited time.Duration, asks ...DeviceAsk) Work {
		return Work{Source: src, Pool: pool, Priority: prio, Allocs: allocs, Since: t0.Add(-waited), Asks: asks, CapacityBlocked: true}
	}
	s := &Snapshot{Now: t0, Work: []Work{
		w(FromBlockedEval, "gpu", 80, 3, 100*time.Second, ask("nvidia/gpu", 2)),
		w(FromBlockedEval, "gpu", 90, 1, 50*time.Second, ask("nvidia/gpu", 1), ask("nvidia/mig/1g.10gb", 1)),
		w(FromBlockedEval, "gpu", 50, 2, 10*time.Second, ask("gpu", 1)),
		w(FromPendingAlloc, "gpu", 10, 1, 5*time.Second, DeviceAsk{Device: DeviceSpec{Vendor: "nvidia", Type: "mps", Name: "GPU-X"}, Count: 2}),
		w(FromPendingAlloc, "gpu", 10, 1, 7*time.Second, DeviceAsk{Device: DeviceSpec{Vendor: "nvidia", Type: "mps", Name: "GPU-Y"}, Count: 1}),
		w(FromBlockedEval, "gpu", 0, 1, 0, ask("nvidia/gpu", 1)),
		w(FromBlockedEval, "gpu", 80, 5, time.Hour),                                                                // no devices
		w(FromBlockedEval, "gpu", 80, 0, time.Hour, ask("nvidia/gpu", 1)),                                          // nothing left queued
		{Source: FromBlockedEval, Pool: "batch", Priority: 40, Allocs: 2, Asks: []DeviceAsk{ask("nvidia/gpu", 4)}}, // no since: 0 wait
		{Source: FromBlockedEval, Pool: "big", Priority: 40, Allocs: 3, Asks: []DeviceAsk{ask("nvidia/gpu", 16)}, NeverFits: "never fits: asks 16 GPUs on one node, pool \"big\" nodes have at most 8"},
	}}
	want := map[QueueKey]QueueFigure{
		{"gpu", "nvidia/gpu", "P0", "blocked"}:         {Allocs: 4, Devices: 7, WaitMaxSeconds: 100, WaitSumSeconds: 350},
		{"gpu", "nvidia/mig/1g.10gb", "P0", "blocked"}: {Allocs: 1, Devices: 1, WaitMaxSeconds: 50, WaitSumSeconds: 50},
		{"gpu", "gpu", "P1", "blocked"}:                {Allocs: 2, Devices: 2, WaitMaxSeconds: 10, WaitSumSeconds: 20},
		{"gpu", "nvidia/mps", "P2", "pending"}:         {Allocs: 2, Devices: 3, WaitMaxSeconds: 7, WaitSumSeconds: 12},
		{"gpu", "nvidia/gpu", "unknown", "blocked"}:    {Allocs: 1, Devices: 1},
		{"batch", "nvidia/gpu", "P1", "blocked"}:       {Allocs: 2, Devices: 8},
		{"big", "nvidia/gpu", "P1", "blocked"}:         {Allocs: 3, Devices: 48, NeverFitAllocs: 3},
	}
	got := QueueFigures(s, DefaultTiers)
	if len(got) != len(want) {
		t.Errorf("%d keys, want %d: %v", len(got), len(want), got)
	}
	for k, w := range want {
		if g := got[k]; g == nil || *g != w {
			t.Errorf("%+v: got %+v, want %+v", k, g, w)
		}
	}
	if m := got[QueueKey{"gpu", "nvidia/gpu", "P0", "blocked"}].WaitMeanSeconds(); m != 87.5 {
		t.Errorf("mean wait %v", m)
	}
	// The figures agree with the queries: nvidia/gpu-compatible labels sum
	// to gpus_queued, and the longest wait is wait_max_seconds.
	sum := 0
	for k, f := range got {
		if k.Pool == "gpu" && DefaultDevice.Compatible(nomadview.ParseRequest(k.Device)) {
			sum += f.Devices
		}
	}
	if q := eval(t, "gpus_queued{pool=gpu}", s); float64(sum) != q {
		t.Errorf("queued devices %d, gpus_queued %v", sum, q)
	}
	if q := eval(t, "wait_max_seconds{pool=gpu}", s); q != 100 {
		t.Errorf("wait_max_seconds %v", q)
	}
}

// runs: allocations of pool gpu (P0 unless said) around t0, window 1h.
func runs() []AllocRun {
	r := func(id, pool string, prio int, status string, created, started, finished time.Duration) AllocRun {
		a := AllocRun{ID: id, Pool: pool, Priority: prio, Status: status, Created: t0.Add(-created)}
		if started > 0 {
			a.Started = t0.Add(-started)
		}
		if finished > 0 {
			a.Finished = t0.Add(-finished)
		}
		return a
	}
	m := time.Minute
	return []AllocRun{
		r("r1", "gpu", 80, "complete", 50*m, 45*m, 15*m),                      // wait 300, run 1800
		r("r2", "gpu", 80, "failed", 30*m, 29*m, 20*m),                        // wait 60, run 540
		r("r3", "gpu", 80, "lost", 10*m, 9*m, 1*m),                            // wait 60, run 480
		r("r4", "gpu", 80, "running", 5*m, 4*m, 0),                            // wait 60
		r("r5", "gpu", 80, "pending", 1*m, 0, 0),                              // nothing yet
		r("r6", "gpu", 80, "complete", 4*time.Hour, 3*time.Hour, 2*time.Hour), // outside the window
		r("r7", "gpu", 80, "complete", 3*time.Hour, 170*m, 30*m),              // run 8400; started before the window
		r("r8", "gpu", 80, "failed", 10*m, 0, 9*m),                            // failed before starting
		r("r9", "gpu", 30, "complete", 20*m, 19*m, 10*m),                      // P2: wait 60, run 540
		r("r10", "batch", 0, "failed", 20*m, 18*m, 17*m),                      // unknown tier
	}
}

func TestTaskFigures(t *testing.T) {
	got := TaskFigures(&Snapshot{Now: t0, Runs: runs()}, FigureOptions{Window: time.Hour})
	want := map[TaskKey]*TaskFigure{
		{"gpu", "P0"}:        {WaitSeconds: []float64{60, 60, 60, 300}, RunSeconds: []float64{480, 540, 1800, 8400}, Complete: 2, Failed: 2, Lost: 1},
		{"gpu", "P2"}:        {WaitSeconds: []float64{60}, RunSeconds: []float64{540}, Complete: 1},
		{"batch", "unknown"}: {WaitSeconds: []float64{120}, RunSeconds: []float64{60}, Failed: 1},
	}
	if !reflect.DeepEqual(got, want) {
		for k, v := range got {
			t.Logf("%+v: %+v", k, v)
		}
		t.Fatal("task figures differ")
	}
	p0 := got[TaskKey{"gpu", "P0"}]
	if p0.Finished() != 5 || p0.FailureRatio() != 3.0/5 {
		t.Errorf("finished %d failure %v", p0.Finished(), p0.FailureRatio())
	}
	if d := Summarize(p0.WaitSeconds); d != (Distribution{N: 4, P50: 60, P90: 300, P99: 300, Max: 300, Mean: 120}) {
		t.Errorf("wait %+v", d)
	}
	// A shorter window: r2 finished 20m ago and r1 15m ago fall out.
	got = TaskFigures(&Snapshot{Now: t0, Runs: runs()}, FigureOptions{Window: 12 * time.Minute})
	if p0 := got[TaskKey{"gpu", "P0"}]; p0.Complete != 0 || p0.Failed != 1 || p0.Lost != 1 || len(p0.WaitSeconds) != 2 {
		t.Errorf("12m window: %+v", p0)
	}
	// Custom tiers.
	got = TaskFigures(&Snapshot{Now: t0, Runs: runs()}, FigureOptions{Tiers: Tiers{20}})
	if len(got[TaskKey{"gpu", "P0"}].WaitSeconds) != 5 {
		t.Errorf("one tier above 20: %+v", got)
	}
	if (&TaskFigure{}).FailureRatio() != 0 {
		t.Error("failure ratio of nothing is not 0")
	}
}

func TestSummarize(t *testing.T) {
	var xs []float64
	for i := 1; i <= 100; i++ {
		xs = append(xs, float64(i))
	}
	cases := []struct {
		xs   []float64
		want Distribution
	}{
		{nil, Distribution{}},
		{[]float64{7}, Distribution{N: 1, P50: 7, P90: 7, P99: 7, Max: 7, Mean: 7}},
		{[]float64{1, 2}, Distribution{N: 2, P50: 1, P90: 2, P99: 2, Max: 2, Mean: 1.5}},
		{xs, Distribution{N: 100, P50: 50, P90: 90, P99: 99, Max: 100, Mean: 50.5}},
	}
	for _, c := range cases {
		if got := Summarize(c.xs); got != c.want {
			t.Errorf("%v: got %+v, want %+v", c.xs, got, c.want)
		}
	}
}

func TestDeviceLabel(t *testing.T) {
	for spec, want := range map[DeviceSpec]string{
		{Vendor: "nvidia", Type: "gpu", Name: "H100"}:     "nvidia/gpu/H100",
		{Vendor: "nvidia", Type: "mig", Name: "1g.10gb"}:  "nvidia/mig/1g.10gb",
		{Vendor: "nvidia", Type: "mps", Name: "GPU-1234"}: "nvidia/mps",
		{Vendor: "", Type: "gpu", Name: ""}:               "gpu",
		{Vendor: "nvidia", Type: "gpu", Name: ""}:         "nvidia/gpu",
		{Vendor: "amd", Type: "gpu", Name: "MI300X"}:      "amd/gpu/MI300X",
	} {
		if got := DeviceLabel(spec); got != want {
			t.Errorf("%+v: %q, want %q", spec, got, want)
		}
	}
}

func TestRunOf(t *testing.T) {
	ns := func(d time.Duration) int64 { return t0.Add(d).UnixNano() }
	s := &api.AllocationListStub{ID: "a", NodeID: "n", JobID: "j", ClientStatus: "failed",
		CreateTime: ns(-10 * time.Minute), ModifyTime: ns(-time.Minute),
		TaskStates: map[string]*api.TaskState{
			// Restarted: StartedAt is the last start; the oldest event kept is the first.
			"main": {StartedAt: t0.Add(-3 * time.Minute), FinishedAt: t0.Add(-2 * time.Minute), Restarts: 1,
				Events: []*api.TaskEvent{{Type: api.TaskStarted, Time: ns(-8 * time.Minute)}, {Type: api.TaskTerminated, Time: ns(-5 * time.Minute)}, {Type: api.TaskStarted, Time: ns(-3 * time.Minute)}}},
			"side": {StartedAt: t0.Add(-7 * time.Minute), FinishedAt: t0.Add(-90 * time.Second)},
			"none": nil,
		}}
	r := runOf(s)
	if !r.Created.Equal(t0.Add(-10*time.Minute)) || !r.Started.Equal(t0.Add(-8*time.Minute)) || !r.Finished.Equal(t0.Add(-90*time.Second)) || r.Status != "failed" {
		t.Errorf("got %+v", r)
	}
	// Never started: finished at its modify time.
	s = &api.AllocationListStub{ID: "b", ClientStatus: "failed", CreateTime: ns(-time.Minute), ModifyTime: ns(-30 * time.Second),
		TaskStates: map[string]*api.TaskState{"t": {}}}
	if r := runOf(s); !r.Started.IsZero() || !r.Finished.Equal(t0.Add(-30*time.Second)) {
		t.Errorf("never started: %+v", r)
	}
	// Running: no finish even if a task finished once (restart).
	s = &api.AllocationListStub{ID: "c", ClientStatus: "running", CreateTime: ns(-time.Minute),
		TaskStates: map[string]*api.TaskState{"t": {StartedAt: t0.Add(-20 * time.Second), FinishedAt: t0.Add(-30 * time.Second)}}}
	if r := runOf(s); !r.Finished.IsZero() || r.Terminal() || !r.Started.Equal(t0.Add(-20*time.Second)) {
		t.Errorf("running: %+v", r)
	}
}

func TestNodeDeviceReading(t *testing.T) {
	i := func(v int64) *int64 { return &v }
	f := func(v float64) *float64 { return &v }
	for _, c := range []struct {
		a    *api.Attribute
		want int64
	}{
		{nil, 0}, {&api.Attribute{IntVal: i(81559), Unit: "MiB"}, 81559 << 20}, {&api.Attribute{IntVal: i(80), Unit: "GiB"}, 80 << 30},
		{&api.Attribute{FloatVal: f(1.5), Unit: "GB"}, 1500000000}, {&api.Attribute{IntVal: i(5), Unit: ""}, 0},
		{&api.Attribute{IntVal: i(-1), Unit: "MiB"}, 0}, {&api.Attribute{Unit: "MiB"}, 0},
	} {
		if got := memoryBytes(c.a); got != c.want {
			t.Errorf("%+v: %d, want %d", c.a, got, c.want)
		}
	}
}

// An MPS share's "GPU utilization" (util_stat) is its task's utilisation of
// the share, as the device plugin reports it: gpu_util_pct and the
// utilisation and load ratios of nvidia/mps average the shares' own
// figures as they are (not scaled by the share's SM share, not the GPU's
// "Physical GPU utilization"), leaving out a share whose task is not
// measured (no "GPU utilization").
func TestMPSShareUtilization(t *testing.T) {
	pct := func(v float64) *api.StatValue { return &api.StatValue{FloatNumeratorVal: &v, Unit: "%"} }
	share := func(own *api.StatValue) *api.DeviceStats {
		a := map[string]*api.StatValue{"Physical GPU utilization": pct(20), "MPS thread percentage": pct(25)}
		if own != nil {
			a["GPU utilization"], a["MPS utilization"] = own, own
		}
		return &api.DeviceStats{Stats: &api.StatObject{Attributes: a}}
	}
	hs := &api.HostStats{DeviceStats: []*api.DeviceGroupStats{{Vendor: "nvidia", Type: "mps", Name: "GPU-A", InstanceStats: map[string]*api.DeviceStats{
		"GPU-A-mps-0": share(pct(80)), // the held share's task: 80 % of its share, 20 % of the GPU
		"GPU-A-mps-1": share(pct(0)),  // no task
		"GPU-A-mps-2": share(nil),     // a task the driver does not measure
		"GPU-A-mps-3": share(pct(0)),
	}}}}
	n := mpsNode()
	s := &Snapshot{Now: t0, Nodes: []Node{n}, Util: map[string][]InstanceUtil{n.ID: utilOf(hs, DefaultUtilStat)}}
	if got := eval(t, "gpu_util_pct{pool=mps,device=nvidia/mps}", s); math.Abs(got-80/3.0) > 1e-9 {
		t.Errorf("gpu_util_pct = %v, want the measured shares' mean %v", got, 80/3.0)
	}
	f := CapacityFigures(s)[CapacityKey{"mps", "dc1", "nvidia/mps"}]
	if u, ok := f.UtilizationRatio(); !ok || math.Abs(u-0.8/3) > 1e-12 {
		t.Errorf("utilization ratio %v %v, want %v", u, ok, 0.8/3)
	}
	if l, ok := f.LoadRatio(); !ok || math.Abs(l-0.8) > 1e-12 {
		t.Errorf("load ratio %v %v, want the held share's own 0.8", l, ok)
	}
}
