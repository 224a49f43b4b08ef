package figures

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/nomad-gpu/nomad-gpu/bench/tracereplay"
)

const h = time.Hour

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// A 0.25-GPU job that holds a whole GPU for an hour of a two-hour run on
// one 1-GPU node: it holds 1 GPU, asks for 0.25 and keeps 80 % of that busy.
func TestUtilisationOnRequestedGPUs(t *testing.T) {
	r := tracereplay.Result{
		Config: tracereplay.Config{Name: "baseline"}, Cluster: tracereplay.Cluster{Nodes: 1, GPUsPerNode: 1},
		Horizon:  2 * h,
		Timeline: []tracereplay.Sample{{At: 0, Nodes: 1, GPUs: 1, Allocated: 1, Busy: 0.8}, {At: h, Nodes: 1, GPUs: 1}},
		Jobs: []tracereplay.JobRecord{{
			ID: "a", Requested: 0.25, Util: 80, Priority: 50, Done: true, Finish: h,
			Slice: tracereplay.Slice{Kind: "gpu", Count: 1, GPUs: 1},
			Runs:  []tracereplay.Run{{Start: 0, End: h, Node: "n0", Held: []tracereplay.Hold{{Kind: "gpu", Units: 1}}}},
		}},
	}
	f := Compute(r, Options{})
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"capacity GPU-hours", f.CapacityGPUHours, 2},
		{"allocated", f.AllocUtil, 0.5},
		{"useful", f.UsefulUtil, 0.125},
		{"busy", f.BusyUtil, 0.1},
		{"telemetry allocated", f.TelemetryAlloc, 0.5},
		{"telemetry busy", f.TelemetryBusy, 0.4},
	} {
		if !near(c.got, c.want) {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
}

// Two nodes of 2 whole GPUs and 1 MPS GPU of 4 shares. Node A holds a
// whole GPU and 3 shares; node B is empty. The mix: half the jobs ask for
// one share, a quarter for two, a quarter for 2 whole GPUs.
//
//	A: free 1 whole + 1 share = 1.25.
//	   1 share fits (the last share): the whole GPU is unusable, 1.0.
//	   2 shares fit nowhere: 1.25. 2 GPUs fit nowhere: 1.25.
//	   FGD = 0.5×1 + 0.25×1.25 + 0.25×1.25 = 1.125
//	B: free 3. Shares fit: the 2 whole GPUs are unusable, 2 (twice).
//	   2 GPUs fit: the MPS GPU is unusable, 1.
//	   FGD = 0.5×2 + 0.25×2 + 0.25×1 = 1.75
//
// FGD is 2.875 of a capacity of 6 and a free 4.25.
func TestFGDTwoNodes(t *testing.T) {
	cl := tracereplay.Cluster{Nodes: 2, GPUsPerNode: 3, MPSGPUs: 1, MPSShares: 4}
	mix := []Shape{
		{Slice: tracereplay.Slice{Kind: "mps", Count: 1, GPUs: 0.25}, Weight: 0.5},
		{Slice: tracereplay.Slice{Kind: "mps", Count: 2, GPUs: 0.5}, Weight: 0.25},
		{Slice: tracereplay.Slice{Kind: "gpu", Count: 2, GPUs: 2}, Weight: 0.25},
	}
	run := func(held tracereplay.Hold) []tracereplay.Run {
		return []tracereplay.Run{{Start: 0, End: h, Open: true, Node: "A", Held: []tracereplay.Hold{held}}}
	}
	r := tracereplay.Result{
		Config: tracereplay.Config{Features: tracereplay.Features{Slices: true}}, Cluster: cl, Horizon: h,
		Timeline: []tracereplay.Sample{{At: 0, Nodes: 2, GPUs: 6}},
		Jobs: []tracereplay.JobRecord{
			{ID: "whole", Requested: 1, Util: 50, Slice: tracereplay.Slice{Kind: "gpu", Count: 1, GPUs: 1}, Runs: run(tracereplay.Hold{Kind: "gpu", Units: 1})},
			{ID: "shares", Requested: 0.75, Util: 50, Slice: tracereplay.Slice{Kind: "mps", Count: 3, GPUs: 0.75}, Runs: run(tracereplay.Hold{Kind: "mps", GPU: "m0", Units: 3})},
		},
	}
	l := LayoutOf(cl, r.Config.Features)
	a := NodeUse{Whole: 1, MPS: map[string]int{"m0": 3}}
	if got := l.FGD(a, mix); !near(got, 1.125) {
		t.Errorf("FGD(A) = %v, want 1.125", got)
	}
	if got := l.FGD(NodeUse{}, mix); !near(got, 1.75) {
		t.Errorf("FGD(B) = %v, want 1.75", got)
	}
	f := Compute(r, Options{Mix: mix})
	if !near(f.FragCapacity, 2.875/6) || !near(f.FragFree, 2.875/4.25) {
		t.Errorf("fragmentation = %v of capacity, %v of free; want %v, %v", f.FragCapacity, f.FragFree, 2.875/6, 2.875/4.25)
	}
}

// FGD of an empty node in the baseline layout is 0 for any mix that fits
// it, and the mix follows the configuration's mapping of requests.
func TestMixOf(t *testing.T) {
	cl := tracereplay.Cluster{Nodes: 1, GPUsPerNode: 8, MPSGPUs: 2, MPSShares: 4}
	jobs := []tracereplay.Job{{GPUs: 1, Fraction: 0.25}, {GPUs: 1, Fraction: 0.25}, {GPUs: 2, Fraction: 1}, {GPUs: 1, Fraction: 1}}
	base := MixOf(jobs, cl, tracereplay.Features{})
	if len(base) != 2 || base[0].Count != 1 || !near(base[0].Weight, 0.75) || base[1].Count != 2 {
		t.Errorf("baseline mix = %+v, want gpu×1 0.75, gpu×2 0.25", base)
	}
	if got := LayoutOf(cl, tracereplay.Features{}).FGD(NodeUse{}, base); got != 0 {
		t.Errorf("baseline empty node FGD = %v, want 0", got)
	}
	sliced := MixOf(jobs, cl, tracereplay.Features{Slices: true})
	if len(sliced) != 3 || sliced[2].Kind != "mps" || !near(sliced[2].Weight, 0.5) {
		t.Errorf("sliced mix = %+v, want gpu×1, gpu×2, mps×1 (0.5)", sliced)
	}
}

// A job submitted 5 minutes late waits 20 minutes for its first start,
// is preempted after 30 minutes of work and waits 30 more: its wait is
// 50 minutes, with one re-wait. With its checkpoint committed at 25
// minutes of work and restored, it lost nothing; 5 minutes were done
// after the commit. Without a checkpoint it lost all 30.
func TestWaitsAndLostWork(t *testing.T) {
	job := func(checkpointed bool) tracereplay.JobRecord {
		first := tracereplay.Run{Start: 30 * time.Minute, End: time.Hour, Preempted: true, ProgressKnown: true,
			Reached: 30 * time.Minute, StopGap: 2 * time.Second}
		second := tracereplay.Run{Start: 90 * time.Minute, End: 2 * h, ProgressKnown: true}
		if checkpointed {
			first.Checkpointed, first.Saved, second.Restored = true, 25*time.Minute, 25*time.Minute
		}
		return tracereplay.JobRecord{ID: "j", Arrival: 5 * time.Minute, Submitted: 10 * time.Minute, Requested: 2, Util: 100, Priority: 80,
			Slice: tracereplay.Slice{Kind: "gpu", Count: 2, GPUs: 2}, Done: true, Finish: 2 * h,
			Runs: []tracereplay.Run{first, second}}
	}
	for _, c := range []struct {
		name           string
		checkpointed   bool
		lost, stopGap  float64 // GPU-hours
		stopGapP50Wall time.Duration
	}{
		{"checkpointed", true, 0, 2 * 5.0 / 60, 2 * time.Second},
		{"stock", false, 2 * 30.0 / 60, 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := tracereplay.Result{Cluster: tracereplay.Cluster{Nodes: 1, GPUsPerNode: 8}, Horizon: 3 * h,
				Timeline: []tracereplay.Sample{{GPUs: 8, Nodes: 1}}, Jobs: []tracereplay.JobRecord{job(c.checkpointed)}}
			f := Compute(r, Options{})
			if f.FirstWait.Mean != 20*time.Minute || f.Wait.Mean != 50*time.Minute || f.ReWaits != 1 || !near(f.ReWaitHours, 0.5) {
				t.Errorf("waits: first %s, whole %s, %d re-waits of %v h; want 20m, 50m, 1 of 0.5 h", f.FirstWait.Mean, f.Wait.Mean, f.ReWaits, f.ReWaitHours)
			}
			if f.WaitByTier[80].Mean != 50*time.Minute || f.WaitByKind[KindFewGPUs].N != 1 {
				t.Errorf("by tier %+v, by kind %+v; want tier 80 and kind %q holding it", f.WaitByTier, f.WaitByKind, KindFewGPUs)
			}
			if f.Preemptions != 1 || !near(f.LostGPUHours, c.lost) || !near(f.StopGapGPUHours, c.stopGap) || f.StopGapP50 != c.stopGapP50Wall {
				t.Errorf("preemptions %d, lost %v, stop gap %v GPU-h (p50 %s); want 1, %v, %v (%s)",
					f.Preemptions, f.LostGPUHours, f.StopGapGPUHours, f.StopGapP50, c.lost, c.stopGap, c.stopGapP50Wall)
			}
			if f.JCT.Mean != 110*time.Minute {
				t.Errorf("JCT = %s, want 1h50m (finish - submission)", f.JCT.Mean)
			}
		})
	}
}

// Preemptions count the runs a preemption stopped; preempting placements
// the allocations whose placement preempted any. "two at once": high's
// placement preempts a and b (2 preemptions, 1 placement). "chain": high
// preempts a, whose replacement preempts b (2 and 2). A record that did
// not count placements makes the figure unknown, not 0.
func TestPreemptingPlacements(t *testing.T) {
	preempted := []tracereplay.Run{{Start: 0, End: h, Preempted: true}, {Start: 2 * h, End: 3 * h}}
	once := []tracereplay.Run{{Start: h, End: 2 * h}}
	for _, c := range []struct {
		name               string
		recorded           bool
		high, a, b         int // preempting placements of each
		preemptions, known int
		wantKnown          bool
	}{
		{"two at once", true, 1, 0, 0, 2, 1, true},
		{"chain", true, 1, 1, 0, 2, 2, true},
		{"not recorded", false, 0, 0, 0, 2, 0, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			job := func(id string, placements int, runs []tracereplay.Run) tracereplay.JobRecord {
				return tracereplay.JobRecord{ID: id, Requested: 1, Util: 100, Slice: tracereplay.Slice{Kind: "gpu", Count: 1, GPUs: 1},
					Runs: runs, PreemptingPlacements: placements}
			}
			r := tracereplay.Result{Cluster: tracereplay.Cluster{Nodes: 1, GPUsPerNode: 2}, Horizon: 4 * h,
				Timeline: []tracereplay.Sample{{GPUs: 2, Nodes: 1}}, PlacementsRecorded: c.recorded,
				Jobs: []tracereplay.JobRecord{job("high", c.high, once), job("a", c.a, preempted), job("b", c.b, preempted)}}
			f := Compute(r, Options{})
			if f.Preemptions != c.preemptions || f.PreemptingPlacements != c.known || f.PreemptingPlacementsKnown != c.wantKnown {
				t.Errorf("preemptions %d, preempting placements %d (known %v); want %d, %d (%v)",
					f.Preemptions, f.PreemptingPlacements, f.PreemptingPlacementsKnown, c.preemptions, c.known, c.wantKnown)
			}
		})
	}
}

// A job preempted and not resumed by the horizon waits until it; one
// never started counts as unstarted with its wait so far; one submitted
// after the horizon is not measured.
func TestCensoredWaits(t *testing.T) {
	r := tracereplay.Result{Cluster: tracereplay.Cluster{Nodes: 1, GPUsPerNode: 8}, Horizon: 2 * h,
		Timeline: []tracereplay.Sample{{GPUs: 8, Nodes: 1}},
		Jobs: []tracereplay.JobRecord{
			{ID: "a", Submitted: 0, Runs: []tracereplay.Run{{Start: 0, End: h, Preempted: true}}},
			{ID: "b", Submitted: 30 * time.Minute},
			{ID: "c", Submitted: 3 * h},
		}}
	f := Compute(r, Options{})
	if f.Unstarted != 1 || f.Wait.N != 2 || f.Wait.Max != 90*time.Minute || f.Wait.Mean != 75*time.Minute {
		t.Errorf("unstarted %d, waits %+v; want 1, two waits of 1h and 1h30m", f.Unstarted, f.Wait)
	}
}

// JCT compares the jobs finished in every configuration: a job one
// configuration did not finish is in no configuration's JCT, whichever
// configuration comes first.
func TestJCTOverCommonSet(t *testing.T) {
	done := func(id string, finish time.Duration) tracereplay.JobRecord {
		return tracereplay.JobRecord{ID: id, Done: true, Finish: finish}
	}
	running := func(id string) tracereplay.JobRecord { return tracereplay.JobRecord{ID: id} }
	result := func(jobs ...tracereplay.JobRecord) tracereplay.Result {
		return tracereplay.Result{Horizon: 5 * h, Jobs: jobs}
	}
	for _, tc := range []struct {
		name   string
		rs     []tracereplay.Result
		common []string
		// per result: JCT mean and count, done
		means []time.Duration
		ns    []int
		dones []int
	}{
		{
			name:   "the second did not finish b",
			rs:     []tracereplay.Result{result(done("a", h), done("b", 2*h)), result(done("a", 3*h), running("b"))},
			common: []string{"a"}, means: []time.Duration{h, 3 * h}, ns: []int{1, 1}, dones: []int{2, 1},
		},
		{
			name:   "the first did not finish b",
			rs:     []tracereplay.Result{result(done("a", h), running("b")), result(done("a", 3*h), done("b", 2*h))},
			common: []string{"a"}, means: []time.Duration{h, 3 * h}, ns: []int{1, 1}, dones: []int{1, 2},
		},
		{
			name: "only the third did not finish a",
			rs: []tracereplay.Result{result(done("a", h), done("b", 2*h)), result(done("a", 2*h), done("b", 4*h)),
				result(running("a"), done("b", 3*h))},
			common: []string{"b"}, means: []time.Duration{2 * h, 4 * h, 3 * h}, ns: []int{1, 1, 1}, dones: []int{2, 2, 1},
		},
		{
			name:   "one configuration: its finished jobs",
			rs:     []tracereplay.Result{result(done("a", h), done("b", 3*h), running("c"))},
			common: []string{"a", "b"}, means: []time.Duration{2 * h}, ns: []int{2}, dones: []int{2},
		},
		{
			name:   "none finished everywhere",
			rs:     []tracereplay.Result{result(done("a", h), running("b")), result(running("a"), done("b", h))},
			common: []string{}, means: []time.Duration{0, 0}, ns: []int{0, 0}, dones: []int{1, 1},
		},
	} {
		common := CommonDone(tc.rs)
		got := []string{}
		for id := range common {
			if common[id] {
				got = append(got, id)
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, tc.common) {
			t.Errorf("%s: common %v, want %v", tc.name, got, tc.common)
		}
		for i, r := range tc.rs {
			f := Compute(r, Options{Common: common})
			if f.JCT.Mean != tc.means[i] || f.JCT.N != tc.ns[i] || f.Done != tc.dones[i] {
				t.Errorf("%s: result %d: JCT %s over %d, done %d; want %s over %d, done %d", tc.name, i, f.JCT.Mean, f.JCT.N, f.Done, tc.means[i], tc.ns[i], tc.dones[i])
			}
		}
	}
}

// Cost per useful GPU-hour divides the cost by the GPU-hours the jobs
// asked for, not those they held: a 0.25-GPU job holding a whole GPU
// makes 0.25 useful GPU-hours an hour.
func TestCostPerUsefulGPUHour(t *testing.T) {
	p := Prices{Reserved: 10, OnDemand: 30}
	cl := tracereplay.Cluster{Nodes: 1, MinNodes: 1, MaxNodes: 1, GPUsPerNode: 8}
	for _, c := range []struct {
		name      string
		requested float64
		slice     tracereplay.Slice
		want      float64 // cost 10 × 10 h = 100, over the useful GPU-hours
	}{
		{"a 0.25-GPU job on a whole GPU for 4h: 1 useful GPU-hour, 4 held", 0.25, tracereplay.Slice{Kind: "gpu", Count: 1, GPUs: 1}, 100},
		{"a 0.2-GPU job on 2 of 8 MPS shares for 4h: 0.8 useful, 1 held", 0.2, tracereplay.Slice{Kind: "mps", Count: 2, GPUs: 0.25}, 125},
		{"2 whole GPUs for 4h: 8 useful, 8 held", 2, tracereplay.Slice{Kind: "gpu", Count: 2, GPUs: 2}, 12.5},
		{"nothing useful: 0", 0, tracereplay.Slice{Kind: "gpu", Count: 1, GPUs: 1}, 0},
	} {
		r := tracereplay.Result{
			Config: tracereplay.Config{Name: "baseline"}, Cluster: cl, Horizon: 10 * h,
			Timeline: []tracereplay.Sample{{Nodes: 1, GPUs: 8}},
			Jobs: []tracereplay.JobRecord{{ID: "a", Requested: c.requested, Slice: c.slice, Done: true, Finish: 4 * h,
				Runs: []tracereplay.Run{{Start: 0, End: 4 * h}}}},
		}
		f := Compute(r, Options{Prices: p})
		if !near(f.Cost, 100) || !near(f.CostPerUsefulGPUHour, c.want) {
			t.Errorf("%s: cost %v, per useful GPU-hour %v; want 100, %v", c.name, f.Cost, f.CostPerUsefulGPUHour, c.want)
		}
	}
}

// The fixed part of a cluster is paid at the reserved price for the whole
// horizon, the node-hours above it on demand.
func TestCost(t *testing.T) {
	p := Prices{Reserved: 10, OnDemand: 30}
	cl := tracereplay.Cluster{Nodes: 2, MinNodes: 1, MaxNodes: 4, GPUsPerNode: 8}
	for _, c := range []struct {
		name  string
		cfg   tracereplay.Config
		nodes []tracereplay.Sample
		want  float64
	}{
		{"fixed 2 nodes for 10h", tracereplay.Config{}, []tracereplay.Sample{{Nodes: 2, GPUs: 16}}, 20 * 10},
		{"fixed like an autoscaled run: 3 nodes", tracereplay.Config{Nodes: 3}, []tracereplay.Sample{{Nodes: 3, GPUs: 24}}, 30 * 10},
		{"autoscaled: 1 reserved, 5 node-hours on demand", tracereplay.Config{Features: tracereplay.Features{Autoscale: tracereplay.AutoscaleGPUQueue}},
			[]tracereplay.Sample{{Nodes: 1, GPUs: 8}, {At: 5 * h, Nodes: 2, GPUs: 16}}, 10*10 + 5*30},
	} {
		r := tracereplay.Result{Config: c.cfg, Cluster: cl, Horizon: 10 * h, Timeline: c.nodes}
		if f := Compute(r, Options{Prices: p}); !near(f.Cost, c.want) {
			t.Errorf("%s: cost %v, want %v", c.name, f.Cost, c.want)
		}
	}
}

// With layouts that follow the queue, a node's GPUs change: each sample
// says which GPUs are MPS GPUs, a run's shares on a GPU no sample listed
// yet make it one, and every other GPU is whole. A GPU no run holds is
// free for both kinds (the planner relays it); as laid, it is its kind.
func TestFGDLayoutsFollowTheQueue(t *testing.T) {
	cl := tracereplay.Cluster{Nodes: 2, GPUsPerNode: 2, LayoutShares: 4}
	mix := []Shape{
		{Slice: tracereplay.Slice{Kind: "mps", Count: 1, GPUs: 0.25}, Weight: 0.5},
		{Slice: tracereplay.Slice{Kind: "gpu", Count: 2, GPUs: 2}, Weight: 0.5},
	}
	share := func(node, gpu string, from, to time.Duration) tracereplay.JobRecord {
		return tracereplay.JobRecord{ID: node + gpu, Requested: 0.25, Slice: tracereplay.Slice{Kind: "mps", Count: 1, GPUs: 0.25},
			Runs: []tracereplay.Run{{Start: from, End: to, Node: node, Held: []tracereplay.Hold{{Kind: "mps", GPU: gpu, Units: 1}}}}}
	}
	s := time.Second
	r := tracereplay.Result{
		Config: tracereplay.Config{Features: tracereplay.Features{Layouts: true}}, Cluster: cl, Horizon: 20 * s,
		Timeline: []tracereplay.Sample{
			{At: 0, Nodes: 2, GPUs: 4},
			{At: 10 * s, Nodes: 2, GPUs: 4, Layouts: []tracereplay.NodeLayout{{Node: "A", MPS: []tracereplay.MPSGPU{{GPU: "g1", Shares: 4, Free: 4}}}}},
		},
		Jobs: []tracereplay.JobRecord{share("B", "g0", 5*s, 8*s), share("A", "g1", 12*s, 20*s)},
	}
	for _, c := range []struct {
		at                time.Duration
		fgd, asLaid, free float64
		why               string
	}{
		{0, 0, 2, 4, "all whole: relayable, every shape fits; as laid a share fits nowhere"},
		{5 * s, 0.875, 2.375, 3.75, "B's g0 holds a share before a sample lists it: 2 GPUs no longer fit B"},
		{8 * s, 0, 2, 4, "g0 unheld and unlisted: whole again"},
		{10 * s, 0, 2.5, 4, "A's g1 is 4 free shares: relayable, so free for both; as laid 2 GPUs no longer fit A"},
		{12 * s, 0.875, 2.375, 3.75, "A's g1 holds a share: it cannot become whole"},
	} {
		for _, series := range []struct {
			name string
			ps   []FGDPoint
			want float64
		}{
			{"relayable", FGDSeries(r, mix), c.fgd},
			{"as laid", fgdSeries(r, Layout{Whole: 2, Shares: 4, dynamic: true, asLaid: true}, mix), c.asLaid},
		} {
			i := slices.IndexFunc(series.ps, func(p FGDPoint) bool { return p.At == c.at })
			if i < 0 || !near(series.ps[i].FGD, series.want) || !near(series.ps[i].Free, c.free) || series.ps[i].Capacity != 4 {
				t.Errorf("%s at %v (%s): %+v, want FGD %v free %v", series.name, c.at, c.why, series.ps, series.want, c.free)
			}
		}
	}
	frag, free := FGDIntegral(r, mix)
	if want := 0.875*3 + 0.875*8; !near(frag, want) || !near(free, 4*20-0.25*11) {
		t.Errorf("FGDIntegral = %v, %v; want %v, %v", frag, free, want, 4*20-0.25*11)
	}
	if got, want := FGDIntegralAsLaid(r, mix), 2*5+2.375*3+2*2+2.5*2+2.375*8; !near(got, want) {
		t.Errorf("FGDIntegralAsLaid = %v, want %v", got, want)
	}
	// A static layout (all whole here) ignores samples' layouts.
	r.Config.Features = tracereplay.Features{}
	for _, p := range FGDSeries(r, mix) {
		if !near(p.FGD, 2) {
			t.Errorf("without layouts: %+v, want FGD 2 throughout", p)
		}
	}
}

func TestRequestKind(t *testing.T) {
	for _, c := range []struct {
		requested float64
		want      string
	}{{0.25, KindFraction}, {1, KindOneGPU}, {2, KindFewGPUs}, {3, KindFewGPUs}, {4, KindManyGPUs}, {6, KindManyGPUs}} {
		if got := RequestKind(tracereplay.JobRecord{Requested: c.requested}); got != c.want {
			t.Errorf("%v GPUs: %q, want %q", c.requested, got, c.want)
		}
	}
	if got := RequestKind(tracereplay.JobRecord{Requested: 12, Slice: tracereplay.Slice{Kind: "gpu", Count: 6, Members: 2, GPUs: 12}}); got != KindGang {
		t.Errorf("a job of 2 members: %q, want %q", got, KindGang)
	}
}

// A gang of 3 members of 2 GPUs: partial placement is each member's time
// placed while another is not, from its placement (not its start) to its
// end, cut at the horizon.
func TestPartialPlacement(t *testing.T) {
	run := func(placed, start, end time.Duration) tracereplay.Run {
		return tracereplay.Run{Placed: placed, Start: start, End: end}
	}
	for _, c := range []struct {
		name    string
		members []tracereplay.Run
		want    time.Duration
	}{
		{"placed together", []tracereplay.Run{run(10, 11, 100), run(10, 12, 100), run(10, 11, 100)}, 0},
		// 0–50: 1 placed; 50–60: 2; 60–100 all three.
		{"one at a time", []tracereplay.Run{run(0, 1, 100), run(50, 51, 100), run(60, 61, 100)}, 50 + 2*10},
		// All three until 40; one stops, is placed again at 70: the other
		// two held 30 each in between.
		{"a member stopped", []tracereplay.Run{run(0, 1, 100), run(0, 1, 40), run(0, 1, 100), run(70, 71, 100)}, 2 * 30},
		// The horizon is 120.
		{"both past the horizon", []tracereplay.Run{run(20, 21, 200), run(20, 21, 200)}, 0},
		{"one waiting until 100", []tracereplay.Run{run(20, 21, 200), run(100, 101, 200)}, 80},
		{"one waiting past the horizon", []tracereplay.Run{run(20, 21, 200), run(150, 151, 200)}, 100},
	} {
		t.Run(c.name, func(t *testing.T) {
			members := 3
			if len(c.members) == 2 {
				members = 2
			}
			r := tracereplay.JobRecord{Slice: tracereplay.Slice{Kind: "gpu", Count: 2, Members: members, GPUs: float64(2 * members)}, MemberRuns: c.members}
			if got := PartialPlacement(r, 120); got != c.want {
				t.Errorf("PartialPlacement = %v member-time; want %v", got, c.want)
			}
		})
	}
	single := tracereplay.JobRecord{Slice: tracereplay.Slice{Kind: "gpu", Count: 4, GPUs: 4}, Runs: []tracereplay.Run{{Start: 0, End: 100}}}
	if got := PartialPlacement(single, 120); got != 0 {
		t.Errorf("a job of one allocation: %v; want 0", got)
	}
}

// A move is a stop like a preemption for the job's waits and lost work,
// counted apart, with its cost: the GPUs it held until it ran again.
func TestMoves(t *testing.T) {
	m := time.Minute
	job := tracereplay.JobRecord{ID: "j", Submitted: 0, Requested: 2, Slice: tracereplay.Slice{Kind: "gpu", Count: 2, GPUs: 2},
		Done: true, Finish: 60 * m, Runs: []tracereplay.Run{
			{Start: 5 * m, End: 20 * m, Moved: true, Checkpointed: true, ProgressKnown: true, Saved: 14 * m, Reached: 15 * m},
			{Start: 23 * m, End: 60 * m, ProgressKnown: true, Restored: 14 * m},
		}}
	r := tracereplay.Result{Cluster: tracereplay.Cluster{Nodes: 1, GPUsPerNode: 8}, Horizon: 2 * time.Hour,
		Timeline: []tracereplay.Sample{{GPUs: 8, Nodes: 1}}, Jobs: []tracereplay.JobRecord{job}}
	f := Compute(r, Options{})
	if f.Moves != 1 || f.Preemptions != 0 || !near(f.MoveGPUHours, 2*3.0/60) {
		t.Errorf("moves %d, preemptions %d, moving %v GPU-h; want 1, 0, %v", f.Moves, f.Preemptions, f.MoveGPUHours, 2*3.0/60)
	}
	if f.Wait.Mean != 8*m || f.ReWaits != 1 || f.LostGPUHours != 0 {
		t.Errorf("wait %s (%d re-waits), lost %v GPU-h; want 8m (1), 0", f.Wait.Mean, f.ReWaits, f.LostGPUHours)
	}
}

// A gang's members hold their GPUs from their placement, while they wait
// for their peers too; its useful time is while both run. One node of 8
// GPUs over 100s: member 0 placed at 0 (its task starts at 60, once its
// peer is placed at 50), member 1 placed at 50, both running to 100.
func TestGangHoldsFromPlacement(t *testing.T) {
	r := tracereplay.Result{
		Config: tracereplay.Config{Name: "baseline"}, Cluster: tracereplay.Cluster{Nodes: 1, GPUsPerNode: 8},
		Horizon: 100 * time.Second, Timeline: []tracereplay.Sample{{At: 0, Nodes: 1, GPUs: 8}},
		Jobs: []tracereplay.JobRecord{{
			ID: "g", Requested: 8, Util: 100, Slice: tracereplay.Slice{Kind: "gpu", Count: 4, Members: 2, GPUs: 8},
			Runs: []tracereplay.Run{{Start: 60 * time.Second, End: 100 * time.Second}},
			MemberRuns: []tracereplay.Run{
				{Placed: 0, Start: 60 * time.Second, End: 100 * time.Second},
				{Placed: 50 * time.Second, Start: 60 * time.Second, End: 100 * time.Second},
			},
		}},
	}
	f := Compute(r, Options{})
	// Held: 4 × 100 + 4 × 50 = 600 of 800 GPU-seconds; useful 8 × 40.
	if !near(f.AllocUtil, 0.75) || !near(f.UsefulUtil, 0.4) {
		t.Errorf("allocated %v, useful %v; want 0.75, 0.4", f.AllocUtil, f.UsefulUtil)
	}
	if want := 4 * 50.0 / 3600; !near(f.PartialGPUHours, want) {
		t.Errorf("partial %v GPU-hours; want %v", f.PartialGPUHours, want)
	}
}

// By team: each team's useful GPU-hours and its waits. Team a runs a
// 2-GPU job for 1 h after waiting 10 min and a 1-GPU job for 2 h after 30
// min; team b a 1-GPU job for 1 h after 20 min; a job of no team counts
// in neither.
func TestByTeam(t *testing.T) {
	job := func(id, team string, gpus float64, wait, run time.Duration) tracereplay.JobRecord {
		return tracereplay.JobRecord{ID: id, Team: team, Requested: gpus, Util: 100, Priority: 50, Submitted: 0, Done: true, Finish: wait + run,
			Slice: tracereplay.Slice{Kind: "gpu", Count: int(gpus), GPUs: gpus}, Runs: []tracereplay.Run{{Start: wait, End: wait + run, ProgressKnown: true}}}
	}
	r := tracereplay.Result{Cluster: tracereplay.Cluster{Nodes: 1, GPUsPerNode: 8}, Horizon: 5 * h, Timeline: []tracereplay.Sample{{GPUs: 8, Nodes: 1}},
		Jobs: []tracereplay.JobRecord{
			job("a1", "a", 2, 10*time.Minute, h), job("a2", "a", 1, 30*time.Minute, 2*h),
			job("b1", "b", 1, 20*time.Minute, h), job("none", "", 4, 0, h),
		}}
	f := Compute(r, Options{})
	if len(f.UsefulGPUHoursByTeam) != 2 || !near(f.UsefulGPUHoursByTeam["a"], 4) || !near(f.UsefulGPUHoursByTeam["b"], 1) {
		t.Errorf("useful GPU-hours by team %v; want a 4, b 1", f.UsefulGPUHoursByTeam)
	}
	if len(f.WaitByTeam) != 2 || f.WaitByTeam["a"].Mean != 20*time.Minute || f.WaitByTeam["a"].N != 2 || f.WaitByTeam["b"].Mean != 20*time.Minute {
		t.Errorf("waits by team %+v; want a 20m over 2, b 20m", f.WaitByTeam)
	}
}

// Each node is priced by its kind: the reserved minimum for the whole
// horizon, spot nodes' node-hours at the spot price, every other
// node-hour above the minimum on demand. Prices that differ from one
// another make a node priced as the wrong kind show.
func TestCostByNodeKind(t *testing.T) {
	p := Prices{Reserved: 10, OnDemand: 30, Spot: 7}
	cl := tracereplay.Cluster{Nodes: 2, MinNodes: 1, MaxNodes: 4, GPUsPerNode: 8}
	autoscaled := tracereplay.Config{Features: tracereplay.Features{Autoscale: tracereplay.AutoscaleGPUQueue}}
	spot := tracereplay.Config{Features: tracereplay.Features{Autoscale: tracereplay.AutoscaleGPUQueue, Preemption: true, Checkpoints: true, Spot: true}}
	for _, c := range []struct {
		name                        string
		cfg                         tracereplay.Config
		nodes                       []tracereplay.Sample
		reserved, onDemand, spotNHs float64
		cost                        float64
	}{
		{"reserved only: a fixed cluster of 2", tracereplay.Config{}, []tracereplay.Sample{{Nodes: 2, GPUs: 16}},
			20, 0, 0, 20 * 10},
		{"reserved only: an autoscaled pool at its minimum", autoscaled, []tracereplay.Sample{{Nodes: 1, GPUs: 8}},
			10, 0, 0, 10 * 10},
		{"reserved + on demand: 2 more nodes from 5h", autoscaled,
			[]tracereplay.Sample{{Nodes: 1, GPUs: 8}, {At: 5 * h, Nodes: 3, GPUs: 24}},
			10, 10, 0, 10*10 + 10*30},
		{"reserved + spot: 2 spot nodes throughout", spot, []tracereplay.Sample{{Nodes: 3, Spot: 2, GPUs: 24}},
			10, 0, 20, 10*10 + 20*7},
		// 2 spot nodes to 4h, none to 6h, then 2 spot and 1 on demand:
		// 30 node-hours, 16 of them spot, 4 on demand.
		{"reserved + spot + on demand", spot,
			[]tracereplay.Sample{{Nodes: 3, Spot: 2, GPUs: 24}, {At: 4 * h, Nodes: 1, GPUs: 8}, {At: 6 * h, Nodes: 4, Spot: 2, GPUs: 32}},
			10, 4, 16, 10*10 + 4*30 + 16*7},
	} {
		r := tracereplay.Result{Config: c.cfg, Cluster: cl, Horizon: 10 * h, Timeline: c.nodes,
			Jobs: []tracereplay.JobRecord{{ID: "a", Requested: 2, Slice: tracereplay.Slice{Kind: "gpu", Count: 2, GPUs: 2}, Runs: []tracereplay.Run{{Start: 0, End: 10 * h}}}}}
		f := Compute(r, Options{Prices: p})
		if !near(f.ReservedNodeHours, c.reserved) || !near(f.OnDemandNodeHours, c.onDemand) || !near(f.SpotNodeHours, c.spotNHs) ||
			!near(f.Cost, c.cost) || !near(f.CostPerUsefulGPUHour, c.cost/20) || !near(f.UsefulGPUHours, 20) {
			t.Errorf("%s: node-hours reserved %v, on demand %v, spot %v; cost %v (%v per useful GPU-hour); want %v, %v, %v; %v (%v)", c.name,
				f.ReservedNodeHours, f.OnDemandNodeHours, f.SpotNodeHours, f.Cost, f.CostPerUsefulGPUHour, c.reserved, c.onDemand, c.spotNHs, c.cost, c.cost/20)
		}
	}
}

// A run its spot node's reclaim stopped is a reclaim, neither a
// preemption nor a move: its re-wait counts in the waits and in the
// reclaim GPU-hours, and what it did not keep in the lost GPU-hours, and
// in those lost to reclaims.
func TestSpotReclaimFigures(t *testing.T) {
	gpu2 := tracereplay.Slice{Kind: "gpu", Count: 2, GPUs: 2}
	r := tracereplay.Result{Config: tracereplay.Config{Name: "nomad-gpu-spot"}, Horizon: 10 * h, Timeline: []tracereplay.Sample{{Nodes: 2, Spot: 1, GPUs: 16}},
		Jobs: []tracereplay.JobRecord{
			// Reclaimed at 2h, checkpointed: runs again at 2h30m from its commit.
			{ID: "a", Requested: 2, Slice: gpu2, Runs: []tracereplay.Run{
				{Start: 0, End: 2 * h, SpotReclaimed: true, Checkpointed: true, Saved: 2 * h, Reached: 2 * h, ProgressKnown: true},
				{Start: 2*h + 30*time.Minute, End: 5 * h, Restored: 2 * h, ProgressKnown: true}}},
			// Killed with its node before its commit: its hour is lost.
			{ID: "b", Requested: 1, Slice: tracereplay.Slice{Kind: "gpu", Count: 1, GPUs: 1}, Runs: []tracereplay.Run{
				{Start: 0, End: time.Hour, SpotReclaimed: true, Reached: time.Hour, ProgressKnown: true},
				{Start: 2 * time.Hour, End: 4 * h, Restored: 0, ProgressKnown: true}}},
			// Preempted without a checkpoint: lost, not to a reclaim.
			{ID: "c", Requested: 1, Slice: tracereplay.Slice{Kind: "gpu", Count: 1, GPUs: 1}, Runs: []tracereplay.Run{
				{Start: 0, End: 30 * time.Minute, Preempted: true, Reached: 30 * time.Minute, ProgressKnown: true},
				{Start: time.Hour, End: 3 * h, ProgressKnown: true}}},
		}}
	f := Compute(r, Options{})
	if f.SpotReclaims != 2 || f.Preemptions != 1 || f.Moves != 0 || !near(f.SpotReclaimGPUHours, 0.5*2+1*1) ||
		!near(f.LostGPUHours, 1.5) || !near(f.SpotLostGPUHours, 1) || f.ReWaits != 3 || !near(f.ReWaitHours, 0.5+1+0.5) {
		t.Errorf("reclaims %d, preemptions %d, moves %d, reclaim GPU-hours %v, lost %v (to reclaims %v), re-waits %d (%v h); want 2, 1, 0, 2, 1.5 (1), 3 (2 h)",
			f.SpotReclaims, f.Preemptions, f.Moves, f.SpotReclaimGPUHours, f.LostGPUHours, f.SpotLostGPUHours, f.ReWaits, f.ReWaitHours)
	}
}
