package sizing

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/controller/sizing/history"
	"github.com/nomad-gpu/nomad-gpu/controller/sizing/predict"
)

var fcNow = time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)

var (
	fcGPU1 = history.Slice{Kind: history.SliceGPU, Count: 1}
	fcGPU2 = history.Slice{Kind: history.SliceGPU, Count: 2}
	fcMIG  = history.Slice{Kind: history.SliceMIG, Count: 1, Profile: "1g.10gb"}
)

func fcKey(job string) history.Key {
	return history.Key{Namespace: "default", Job: job, Group: "g", Task: "t"}
}

// fcDone is a run of job on s in pool that ran secs and ended with o, the
// i-th of its history (finished i hours before fcNow).
func fcDone(job, pool string, s history.Slice, i int, secs float64, o history.Outcome) history.Run {
	fin := fcNow.Add(-time.Duration(i+1) * time.Hour)
	return history.Run{Key: fcKey(job), AllocID: fmt.Sprintf("%s-done-%d", job, i), Slice: s, Pool: pool,
		Created: fin.Add(-time.Duration(secs+10) * time.Second), Started: fin.Add(-time.Duration(secs * float64(time.Second))),
		Finished: fin, Outcome: o}
}

func fcHistory(job, pool string, s history.Slice, secs ...float64) []history.Run {
	var out []history.Run
	for i, v := range secs {
		out = append(out, fcDone(job, pool, s, i, v, history.OutcomeComplete))
	}
	return out
}

// fcRunning is an allocation of job holding s in pool, started ago (0:
// not started).
func fcRunning(job, pool, alloc string, s history.Slice, ago time.Duration) history.Run {
	r := history.Run{Key: fcKey(job), AllocID: alloc, Slice: s, Pool: pool, Created: fcNow.Add(-ago - time.Minute), Outcome: history.OutcomeRunning}
	if ago > 0 {
		r.Started = fcNow.Add(-ago)
	}
	return r
}

func fcCat(rs ...[]history.Run) []history.Run {
	var out []history.Run
	for _, r := range rs {
		out = append(out, r...)
	}
	return out
}

func fcEst(secs float64, basis string) predict.Estimate {
	return predict.Estimate{Seconds: secs, Basis: basis, Known: true}
}

func fcUnknown(basis string) predict.Estimate { return predict.Estimate{Basis: basis} }

func sameEstimate(a, b predict.Estimate) bool {
	return a.Known == b.Known && a.Basis == b.Basis && math.Abs(a.Seconds-b.Seconds) < 1e-6
}

func TestForecastTasks(t *testing.T) {
	type want struct {
		alloc              string
		state              string
		remaining, runtime predict.Estimate
	}
	cases := []struct {
		name string
		runs []history.Run
		want []want
	}{
		{"own history, conditional median",
			fcCat(fcHistory("train", "gpu", fcGPU1, 100, 200, 300), []history.Run{fcRunning("train", "gpu", "r1", fcGPU1, 150*time.Second)}),
			[]want{{"r1", TaskRunning, fcEst(100, "job p50 of 3 runs, 2 longer than 2m30s elapsed"), fcEst(250, "job p50 of 3 runs, 2 longer than 2m30s elapsed")}}},
		{"pending: the whole run time",
			fcCat(fcHistory("train", "gpu", fcGPU1, 100, 200, 300), []history.Run{fcRunning("train", "gpu", "p1", fcGPU1, 0)}),
			[]want{{"p1", TaskPending, fcEst(200, "job p50 of 3 runs"), fcEst(200, "job p50 of 3 runs")}}},
		{"no own history: the pool's of the same slice",
			fcCat(fcHistory("other", "gpu", fcGPU1, 10, 20, 30), fcHistory("wide", "gpu", fcGPU2, 1000, 1000, 1000),
				[]history.Run{fcRunning("train", "gpu", "r1", fcGPU1, 0)}),
			[]want{{"r1", TaskPending, fcEst(20, "pool p50 of 3 runs of gpu×1"), fcEst(20, "pool p50 of 3 runs of gpu×1")}}},
		{"another pool's history is not read",
			fcCat(fcHistory("train", "batch", fcGPU1, 100, 200, 300), []history.Run{fcRunning("train", "gpu", "r1", fcGPU1, 0)}),
			[]want{{"r1", TaskPending, fcUnknown("none"), fcUnknown("none")}}},
		{"no history, running: elapsed doubling",
			[]history.Run{fcRunning("train", "gpu", "r1", fcGPU1, 90*time.Second)},
			[]want{{"r1", TaskRunning, fcEst(90, "elapsed×2, no history"), fcEst(180, "elapsed×2, no history")}}},
		{"failed and preempted runs teach nothing",
			fcCat([]history.Run{
				fcDone("train", "gpu", fcGPU1, 0, 5, history.OutcomeFailed),
				fcDone("train", "gpu", fcGPU1, 1, 5, history.OutcomePreempted),
				fcDone("train", "gpu", fcGPU1, 2, 5, history.OutcomeOOM),
			}, []history.Run{fcRunning("train", "gpu", "p1", fcGPU1, 0)}),
			[]want{{"p1", TaskPending, fcUnknown("none"), fcUnknown("none")}}},
		{"own runs of any slice",
			fcCat(fcHistory("train", "gpu", fcMIG, 7, 7), []history.Run{fcDone("train", "gpu", fcGPU1, 5, 100, history.OutcomeComplete)},
				fcHistory("other", "gpu", fcGPU1, 50, 50, 50), []history.Run{fcRunning("train", "gpu", "p1", fcGPU1, 0)}),
			[]want{{"p1", TaskPending, fcEst(7, "job p50 of 3 runs"), fcEst(7, "job p50 of 3 runs")}}},
		{"too few own runs: the pool's, own runs of the kind among them",
			fcCat(fcHistory("train", "gpu", fcMIG, 7), []history.Run{fcDone("train", "gpu", fcGPU1, 5, 100, history.OutcomeComplete)},
				fcHistory("other", "gpu", fcGPU1, 50, 50), []history.Run{fcRunning("train", "gpu", "p1", fcGPU1, 0)}),
			[]want{{"p1", TaskPending, fcEst(50, "pool p50 of 3 runs of gpu×1"), fcEst(50, "pool p50 of 3 runs of gpu×1")}}},
		{"a task dead in a running allocation",
			func() []history.Run {
				r := fcRunning("train", "gpu", "r1", fcGPU1, time.Hour)
				r.Finished = r.Started.Add(10 * time.Minute)
				return []history.Run{r}
			}(),
			[]want{{"r1", TaskFinished, fcEst(0, "task finished"), fcEst(600, "task finished")}}},
		{"finished runs are history, not tasks", fcHistory("train", "gpu", fcGPU1, 100, 200, 300), nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := Forecast(ForecastInput{Runs: c.runs}, fcNow)
			if len(f.Tasks) != len(c.want) {
				t.Fatalf("%d tasks %+v, want %d", len(f.Tasks), f.Tasks, len(c.want))
			}
			for i, w := range c.want {
				g := f.Tasks[i]
				if g.AllocID != w.alloc || g.State != w.state || !sameEstimate(g.Remaining, w.remaining) || !sameEstimate(g.Runtime, w.runtime) {
					t.Errorf("task %+v\nwant alloc %s, %s, remaining %+v, runtime %+v", g, w.alloc, w.state, w.remaining, w.runtime)
				}
			}
		})
	}
}

func queued(job, pool string, prio, allocs int, since time.Duration, asks ...Ask) QueuedWork {
	return QueuedWork{Namespace: "default", Job: job, Group: "g", Task: "t", Pool: pool, Priority: prio,
		Since: fcNow.Add(-since), Allocs: allocs, Asks: asks}
}

func TestForecastWaits(t *testing.T) {
	gpu := func(n int) Ask { return Ask{"nvidia/gpu", n} }
	// r100: a task holding one GPU with 100 s left (own history of 200 s
	// runs, 100 s elapsed).
	r100 := fcCat(fcHistory("long", "gpu", fcGPU1, 200, 200, 200), []history.Run{fcRunning("long", "gpu", "r100", fcGPU1, 100*time.Second)})
	// Queued "q" runs 50 s once started.
	q50 := fcHistory("q", "gpu", fcGPU1, 50, 50, 50)
	hi50 := fcHistory("hi", "gpu", fcGPU1, 50, 50, 50)
	type want struct {
		job           string
		wait, runtime predict.Estimate
	}
	cases := []struct {
		name   string
		runs   []history.Run
		free   map[string]predict.Capacity
		queued []QueuedWork
		want   []want
	}{
		{"fits now", q50, map[string]predict.Capacity{"gpu": {{Kind: "gpu"}: 2}},
			[]QueuedWork{queued("q", "gpu", 50, 1, time.Minute, gpu(1))},
			[]want{{"q", fcEst(0, "fits now"), fcEst(50, "job p50 of 3 runs")}}},
		{"waits for the running task", fcCat(r100, q50), nil,
			[]QueuedWork{queued("q", "gpu", 50, 1, time.Minute, gpu(1))},
			[]want{{"q", fcEst(100, "list schedule of 1 running, 0 ahead"), fcEst(50, "job p50 of 3 runs")}}},
		{"a group's allocations queue one after the other", fcCat(r100, q50), map[string]predict.Capacity{"gpu": {{Kind: "gpu"}: 1}},
			// The first starts now and ends at 50 s, freeing its GPU for the second.
			[]QueuedWork{queued("q", "gpu", 50, 2, time.Minute, gpu(1))},
			[]want{{"q", fcEst(50, "list schedule of 1 running, 1 ahead"), fcEst(50, "job p50 of 3 runs")}}},
		{"higher priority goes first", fcCat(r100, q50, hi50), map[string]predict.Capacity{"gpu": {{Kind: "gpu"}: 1}},
			[]QueuedWork{queued("q", "gpu", 50, 1, time.Hour, gpu(1)), queued("hi", "gpu", 80, 1, time.Minute, gpu(1))},
			[]want{
				{"hi", fcEst(0, "fits now"), fcEst(50, "job p50 of 3 runs")},
				{"q", fcEst(50, "list schedule of 1 running, 1 ahead"), fcEst(50, "job p50 of 3 runs")},
			}},
		{"other units neither take nor free its slices",
			fcCat(r100, q50, []history.Run{fcRunning("m", "gpu", "m1", fcMIG, time.Second)}),
			map[string]predict.Capacity{"gpu": {{Kind: "mig", Profile: "1g.10gb"}: 5}},
			[]QueuedWork{queued("q", "gpu", 50, 1, time.Minute, gpu(1)), queued("mq", "gpu", 90, 3, time.Hour, Ask{"nvidia/mig/1g.10gb", 1})},
			[]want{
				{"mq", fcEst(0, "fits now"), fcUnknown("none")},
				{"q", fcEst(100, "list schedule of 1 running, 0 ahead"), fcEst(50, "job p50 of 3 runs")},
			}},
		{"another pool's capacity does not help", fcCat(r100, q50), map[string]predict.Capacity{"batch": {{Kind: "gpu"}: 8}},
			[]QueuedWork{queued("q", "gpu", 50, 1, time.Minute, gpu(1))},
			[]want{{"q", fcEst(100, "list schedule of 1 running, 0 ahead"), fcEst(50, "job p50 of 3 runs")}}},
		{"held for good by a task of unknown run time",
			[]history.Run{fcRunning("x", "gpu", "x1", fcGPU1, 0)}, nil,
			[]QueuedWork{queued("q", "gpu", 50, 1, time.Minute, gpu(1))},
			[]want{{"q", fcUnknown("never fits: 1 tasks of unknown run time hold slices"), fcUnknown("none")}}},
		{"larger than the pool", r100, map[string]predict.Capacity{"gpu": {{Kind: "gpu"}: 1}},
			[]QueuedWork{queued("q", "gpu", 50, 1, time.Minute, gpu(4))},
			[]want{{"q", fcUnknown("ask of gpu×4 exceeds the pool's 2"), fcEst(200, "pool p50 of 3 runs of gpu")}}},
		{"two kinds of slice", q50, nil,
			[]QueuedWork{queued("q", "gpu", 50, 1, time.Minute, gpu(1), Ask{"nvidia/mps", 1})},
			[]want{{"q", fcUnknown("asks for gpu×1 and mps×1: more than one kind of slice"), fcUnknown("asks for gpu×1 and mps×1: more than one kind of slice")}}},
		{"node pool all", q50, nil,
			[]QueuedWork{queued("q", "all", 50, 1, time.Minute, gpu(1))},
			[]want{{"q", fcUnknown("no one node pool to schedule in"), fcUnknown("no one node pool to schedule in")}}},
		{"a group given twice is forecast once, the oldest", fcCat(r100, q50), map[string]predict.Capacity{"gpu": {{Kind: "gpu"}: 1}},
			[]QueuedWork{queued("q", "gpu", 50, 1, time.Minute, gpu(1)), queued("q", "gpu", 50, 2, time.Hour, gpu(1))},
			[]want{{"q", fcEst(50, "list schedule of 1 running, 1 ahead"), fcEst(50, "job p50 of 3 runs")}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := Forecast(ForecastInput{Runs: c.runs, Free: c.free, Queued: c.queued}, fcNow)
			if len(f.Queued) != len(c.want) {
				t.Fatalf("%d queued %+v, want %d", len(f.Queued), f.Queued, len(c.want))
			}
			for i, w := range c.want {
				g := f.Queued[i]
				if g.Job != w.job || !sameEstimate(g.Wait, w.wait) || !sameEstimate(g.Runtime, w.runtime) {
					t.Errorf("queued %s: wait %+v, runtime %+v\nwant %s: wait %+v, runtime %+v", g.Job, g.Wait, g.Runtime, w.job, w.wait, w.runtime)
				}
			}
		})
	}
}

// TestForecastFromAllocations: the allocations Nomad lists, through
// RunsOf, give the forecast the run records would.
func TestForecastFromAllocations(t *testing.T) {
	dev := func(typ, name string, ids ...string) []*api.AllocatedDeviceResource {
		return []*api.AllocatedDeviceResource{{Vendor: "nvidia", Type: typ, Name: name, DeviceIDs: ids}}
	}
	alloc := func(id, job, node, status string, started, finished time.Time, devs []*api.AllocatedDeviceResource) *api.AllocationListStub {
		return &api.AllocationListStub{ID: id, Namespace: "default", JobID: job, TaskGroup: "g", NodeID: node, ClientStatus: status,
			CreateTime: started.Add(-time.Minute).UnixNano(),
			TaskStates: map[string]*api.TaskState{"t": {StartedAt: started, FinishedAt: finished}},
			AllocatedResources: &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{
				"t":       {Devices: devs},
				"sidecar": {},
			}}}
	}
	var allocs []*api.AllocationListStub
	for i, secs := range []int{600, 1200, 1800} {
		fin := fcNow.Add(-time.Duration(i+1) * time.Hour)
		allocs = append(allocs, alloc(fmt.Sprintf("done-%d", i), "train", "n1", "complete", fin.Add(-time.Duration(secs)*time.Second), fin, dev("gpu", "H100", "GPU-1")))
	}
	allocs = append(allocs,
		alloc("failed", "train", "n1", "failed", fcNow.Add(-3*time.Hour), fcNow.Add(-3*time.Hour+time.Second), dev("gpu", "H100", "GPU-1")),
		alloc("live", "train", "n1", "running", fcNow.Add(-15*time.Minute), time.Time{}, dev("gpu", "H100", "GPU-0")),
		alloc("cpu", "web", "n1", "running", fcNow.Add(-time.Minute), time.Time{}, nil),
	)
	runs := RunsOf(allocs, map[string]string{"n1": "gpu"}, map[JobID]*api.JobListStub{{"default", "train"}: {Priority: 70}})
	if len(runs) != 5 {
		t.Fatalf("%d runs, want 5 (not the sidecar, not the CPU job): %+v", len(runs), runs)
	}
	for _, r := range runs {
		if r.Pool != "gpu" || r.Priority != 70 || r.Key != fcKey("train") {
			t.Errorf("run %+v: want pool gpu, priority 70, key of train", r)
		}
	}
	f := Forecast(ForecastInput{Runs: runs, Free: map[string]predict.Capacity{"gpu": {{Kind: "gpu"}: 0}},
		Queued: []QueuedWork{queued("next", "gpu", 50, 1, time.Minute, Ask{"gpu", 1})}}, fcNow)
	if len(f.Tasks) != 1 {
		t.Fatalf("tasks %+v", f.Tasks)
	}
	// 15 min elapsed: of 10, 20, 30 min, the longer are 20 and 30; median 25 min.
	got := f.Tasks[0]
	if got.AllocID != "live" || got.Elapsed != 15*time.Minute ||
		!sameEstimate(got.Remaining, fcEst(600, "job p50 of 3 runs, 2 longer than 15m0s elapsed")) || got.Runtime.Seconds != 1500 {
		t.Errorf("live: %+v", got)
	}
	// next waits for live; it has no history of its own; the pool's
	// whole-GPU runs predict it.
	if w := f.Queued[0]; !sameEstimate(w.Wait, fcEst(600, "list schedule of 1 running, 0 ahead")) || !sameEstimate(w.Runtime, fcEst(1200, "pool p50 of 3 runs of gpu×1")) {
		t.Errorf("next: wait %+v, runtime %+v", w.Wait, w.Runtime)
	}
}

// TestForecastHistoryIsRuntimeOverThePool: the per-pool index gives the
// estimate predict.Runtime gives over all the pool's runs.
func TestForecastHistoryIsRuntimeOverThePool(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	slicesOf := []history.Slice{fcGPU1, fcGPU2, fcMIG, {Kind: history.SliceMPS, Count: 2}}
	outcomes := []history.Outcome{history.OutcomeComplete, history.OutcomeComplete, history.OutcomeTimeout, history.OutcomeFailed, history.OutcomeRunning}
	for trial := range 200 {
		var runs []history.Run
		for i := range rng.IntN(40) {
			job := fmt.Sprintf("j%d", rng.IntN(4))
			r := fcDone(job, []string{"a", "b"}[rng.IntN(2)], slicesOf[rng.IntN(len(slicesOf))], i, float64(1+rng.IntN(500)), outcomes[rng.IntN(len(outcomes))])
			runs = append(runs, r)
		}
		h := newForecastHistory(runs)
		k := fcKey(fmt.Sprintf("j%d", rng.IntN(5)))
		s := slicesOf[rng.IntN(len(slicesOf))]
		elapsed := time.Duration(rng.IntN(3)*rng.IntN(400)) * time.Second
		var pool []history.Run
		for _, r := range runs {
			if r.Pool == "a" {
				pool = append(pool, r)
			}
		}
		want := predict.Runtime(k, s, elapsed, pool)
		if got := h.runtime("a", k, s, elapsed); !sameEstimate(got, want) {
			t.Fatalf("trial %d: %s on %v, %v elapsed: got %+v, want %+v", trial, k, s, elapsed, got, want)
		}
	}
}

func TestAskSlice(t *testing.T) {
	cases := []struct {
		asks    []Ask
		want    history.Slice
		wantErr string
	}{
		{[]Ask{{"gpu", 2}}, fcGPU2, ""},
		{[]Ask{{"nvidia/gpu/NVIDIA H100 80GB HBM3", 1}, {"gpu", 1}}, fcGPU2, ""},
		{[]Ask{{"nvidia/mig/1g.10gb", 1}, {"xilinx/fpga", 1}}, fcMIG, ""},
		{[]Ask{{"nvidia/mps/GPU-1234", 3}}, history.Slice{Kind: "mps", Count: 3}, ""},
		{[]Ask{{"amd/gpu", 1}, {"nvidia/gpu", 0}}, history.Slice{}, "asks for no GPU"},
		{[]Ask{{"nvidia/mig", 1}}, history.Slice{}, "asks for a MIG instance of any profile (nvidia/mig)"},
		{[]Ask{{"nvidia/mig/1g.10gb", 1}, {"nvidia/mig/3g.40gb", 1}}, history.Slice{}, "asks for mig 1g.10gb×1 and mig 3g.40gb×1: more than one kind of slice"},
		{nil, history.Slice{}, "asks for no GPU"},
	}
	for _, c := range cases {
		got, err := AskSlice(c.asks)
		if c.wantErr != "" {
			if err == nil || err.Error() != c.wantErr {
				t.Errorf("AskSlice(%v) error %v, want %q", c.asks, err, c.wantErr)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("AskSlice(%v) = %+v, %v; want %+v", c.asks, got, err, c.want)
		}
	}
}

// TestBasisKind: every basis predict writes has its kind; a change to
// predict's wording fails here, not silently in a metric label.
func TestBasisKind(t *testing.T) {
	hist := fcHistory("train", "gpu", fcGPU1, 10, 20, 30)
	poolOnly := fcHistory("other", "gpu", fcGPU1, 10, 20, 30)
	cases := []struct {
		e    predict.Estimate
		want string
	}{
		{predict.Runtime(fcKey("train"), fcGPU1, 0, hist), BasisJob},
		{predict.Runtime(fcKey("train"), fcGPU1, 15*time.Second, hist), BasisJob},
		{predict.Runtime(fcKey("train"), fcGPU1, 0, poolOnly), BasisPool},
		{predict.Runtime(fcKey("train"), fcGPU2, 0, poolOnly), BasisPool},
		{predict.Runtime(fcKey("train"), fcGPU1, time.Hour, hist), BasisElapsed},
		{predict.Runtime(fcKey("train"), fcGPU1, time.Hour, nil), BasisElapsed},
		{predict.Runtime(fcKey("train"), fcGPU1, 0, nil), BasisNone},
		{predict.Wait(predict.QueuedTask{Slice: fcGPU1}, nil, nil, predict.Capacity{{Kind: "gpu"}: 1}), BasisFitsNow},
		{predict.Wait(predict.QueuedTask{Slice: fcGPU1}, []predict.RunningTask{{Slice: fcGPU1, Remaining: fcEst(5, "x")}}, nil, nil), BasisSchedule},
		{predict.Wait(predict.QueuedTask{Slice: fcGPU2}, nil, nil, nil), BasisNone},
		{fcEst(0, "task finished"), BasisFinished},
		{fcEst(1, "something new"), BasisOther},
	}
	for _, c := range cases {
		if got := BasisKind(c.e); got != c.want {
			t.Errorf("BasisKind(%+v) = %s, want %s", c.e, got, c.want)
		}
	}
	if !strings.HasPrefix(UnitLabel(predict.Unit{Kind: "mig", Profile: "1g.10gb"}), "nvidia/mig/1g.10gb") || UnitLabel(predict.Unit{Kind: "mps"}) != "nvidia/mps" {
		t.Errorf("UnitLabel: %s, %s", UnitLabel(predict.Unit{Kind: "mig", Profile: "1g.10gb"}), UnitLabel(predict.Unit{Kind: "mps"}))
	}
}

func TestRunsOfOneRunPerTask(t *testing.T) {
	a := &api.AllocationListStub{ID: "a", Namespace: "default", JobID: "train", TaskGroup: "g", NodeID: "n1", ClientStatus: "running",
		AllocatedResources: &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{
			"t": {Devices: []*api.AllocatedDeviceResource{
				{Vendor: "nvidia", Type: "gpu", Name: "H100", DeviceIDs: []string{"GPU-1"}},
				{Vendor: "nvidia", Type: "gpu", Name: "A100", DeviceIDs: []string{"GPU-2", "GPU-3"}},
			}},
			"u": {Devices: []*api.AllocatedDeviceResource{
				{Vendor: "nvidia", Type: "mig", Name: "1g.10gb", DeviceIDs: []string{"MIG-1"}},
				{Vendor: "nvidia", Type: "mps", Name: "GPU-9", DeviceIDs: []string{"GPU-9-mps-0"}},
			}},
		}}}
	got := map[string]history.Slice{}
	for _, r := range RunsOf([]*api.AllocationListStub{a}, map[string]string{"n1": "gpu"}, nil) {
		if _, dup := got[r.Key.Task]; dup {
			t.Errorf("task %s twice", r.Key.Task)
		}
		got[r.Key.Task] = r.Slice
	}
	if got["t"] != (history.Slice{Kind: "gpu", Count: 3}) || got["u"] != fcMIG || len(got) != 2 {
		t.Errorf("runs %v: want t on gpu×3, u on its first group's mig 1g.10gb×1", got)
	}
	// The same run given twice (say, from two lists) is forecast once.
	runs := RunsOf([]*api.AllocationListStub{a}, nil, nil)
	if f := Forecast(ForecastInput{Runs: append(runs, runs...)}, fcNow); len(f.Tasks) != 2 {
		t.Errorf("%d task forecasts, want 2", len(f.Tasks))
	}
}
