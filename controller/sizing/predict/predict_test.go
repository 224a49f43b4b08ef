package predict

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/nomad-gpu/nomad-gpu/controller/sizing/history"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

var (
	keyA = history.Key{Namespace: "default", Job: "train", Group: "g", Task: "a"}
	keyB = history.Key{Namespace: "default", Job: "other", Group: "g", Task: "b"}
	gpu1 = history.Slice{Kind: history.SliceGPU, Count: 1}
	gpu2 = history.Slice{Kind: history.SliceGPU, Count: 2}
	mps2 = history.Slice{Kind: history.SliceMPS, Count: 2}
	mig1 = history.Slice{Kind: history.SliceMIG, Count: 1, Profile: "1g.10gb"}
)

// run is a run of k on s that waited wait, ran secs and ended with o, the
// i-th of its history (later i finish later).
func run(k history.Key, s history.Slice, i int, wait, secs float64, o history.Outcome) history.Run {
	created := t0.Add(time.Duration(i) * time.Hour)
	started := created.Add(time.Duration(wait * float64(time.Second)))
	return history.Run{
		Key: k, AllocID: fmt.Sprintf("%s-%d", k.Task, i), Slice: s, Pool: "p",
		Created: created, Started: started,
		Finished: started.Add(time.Duration(secs * float64(time.Second))),
		Outcome:  o,
	}
}

func runs(k history.Key, s history.Slice, o history.Outcome, secs ...float64) []history.Run {
	var out []history.Run
	for i, v := range secs {
		out = append(out, run(k, s, i, 0, v, o))
	}
	return out
}

func cat(rs ...[]history.Run) []history.Run {
	var out []history.Run
	for _, r := range rs {
		out = append(out, r...)
	}
	return out
}

func TestRuntime(t *testing.T) {
	ok := history.OutcomeComplete
	// 30 runs: 15 of 100 s, then 15 of 1000 s. The last 20 have a median
	// of 1000 s; all 30 would have 550 s.
	many := make([]float64, 30)
	for i := range many {
		many[i] = 1000
		if i < 15 {
			many[i] = 100
		}
	}
	running := run(keyA, gpu1, 99, 0, 0, history.OutcomeRunning)
	running.Finished = time.Time{}
	for _, tc := range []struct {
		name    string
		key     history.Key
		slice   history.Slice
		elapsed time.Duration
		runs    []history.Run
		secs    float64
		basis   string
		known   bool
	}{
		{"job median, odd", keyA, gpu1, 0, runs(keyA, gpu1, ok, 10, 30, 20), 20, "job p50 of 3 runs", true},
		{"job median, even", keyA, gpu1, 0, runs(keyA, gpu1, ok, 10, 30, 20, 40), 25, "job p50 of 4 runs", true},
		{"job uses last 20 by finish", keyA, gpu1, 0, runs(keyA, gpu1, ok, many...), 1000, "job p50 of 20 runs", true},
		{"timeout counts", keyA, gpu1, 0, runs(keyA, gpu1, history.OutcomeTimeout, 5, 6, 7), 6, "job p50 of 3 runs", true},
		{"preempted and failed excluded, falls to pool",
			keyA, gpu1, 0,
			cat(runs(keyA, gpu1, history.OutcomePreempted, 1, 1, 1), runs(keyA, gpu1, history.OutcomeFailed, 1),
				runs(keyB, gpu1, ok, 50, 60, 70), []history.Run{running}),
			60, "pool p50 of 3 runs of gpu×1", true},
		{"too few job runs: pool same slice", keyA, mps2, 0,
			cat(runs(keyA, mps2, ok, 1000, 1000), runs(keyB, mps2, ok, 10, 20, 30), runs(keyB, gpu2, ok, 5, 5, 5)),
			30, "pool p50 of 5 runs of mps×2", true},
		{"pool same kind", keyA, gpu2, 0, runs(keyB, gpu1, ok, 10, 20, 30), 20, "pool p50 of 3 runs of gpu", true},
		{"mig profile must match for same slice", keyA, mig1, 0,
			cat(runs(keyB, history.Slice{Kind: "mig", Count: 1, Profile: "3g.40gb"}, ok, 7, 8, 9), runs(keyB, mig1, ok, 100, 100)),
			9, "pool p50 of 5 runs of mig", true},
		{"other kind does not count", keyA, mps2, 0, runs(keyB, gpu1, ok, 10, 20, 30), 0, "none", false},
		{"no history", keyA, gpu1, 0, nil, 0, "none", false},
		{"no history, running: doubling", keyA, gpu1, 90 * time.Second, nil, 90, "elapsed×2, no history", true},
		{"conditional median", keyA, gpu1, 25 * time.Second, runs(keyA, gpu1, ok, 10, 20, 30, 40, 50), 15, "job p50 of 5 runs, 3 longer than 25s elapsed", true},
		{"outlived all: doubling", keyA, gpu1, 60 * time.Second, runs(keyA, gpu1, ok, 10, 20, 30), 60, "elapsed×2: job p50 of 3 runs outlived, 1m0s elapsed", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Runtime(tc.key, tc.slice, tc.elapsed, tc.runs)
			if math.Abs(got.Seconds-tc.secs) > 1e-9 || got.Basis != tc.basis || got.Known != tc.known {
				t.Errorf("Runtime = %+v; want {Seconds:%v Basis:%s Known:%v}", got, tc.secs, tc.basis, tc.known)
			}
		})
	}
}

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		xs   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{3}, 3},
		{[]float64{3, 1, 2}, 2},
		{[]float64{4, 1, 3, 2}, 2.5},
	} {
		in := append([]float64(nil), tc.xs...)
		if got := Median(tc.xs); got != tc.want {
			t.Errorf("Median(%v) = %v; want %v", tc.xs, got, tc.want)
		}
		for i := range in {
			if in[i] != tc.xs[i] {
				t.Errorf("Median changed its input: %v", tc.xs)
			}
		}
	}
}

func est(secs float64) Estimate { return Estimate{Seconds: secs, Known: true} }

func TestWait(t *testing.T) {
	g := func(n int) history.Slice { return history.Slice{Kind: history.SliceGPU, Count: n} }
	q := func(id string, prio int, at int, s history.Slice, rt Estimate) QueuedTask {
		return QueuedTask{ID: id, Key: keyA, Slice: s, Priority: prio, Created: t0.Add(time.Duration(at) * time.Second), Runtime: rt}
	}
	r := func(s history.Slice, rem Estimate) RunningTask {
		return RunningTask{Key: keyB, Slice: s, Remaining: rem}
	}
	me := q("me", 50, 100, g(2), est(10))
	for _, tc := range []struct {
		name    string
		queued  QueuedTask
		running []RunningTask
		ahead   []QueuedTask
		free    Capacity
		secs    float64
		known   bool
		basis   string // prefix
	}{
		{"fits now", me, nil, nil, Capacity{{Kind: "gpu"}: 2}, 0, true, "fits now"},
		{"waits for the earliest release that makes room", me,
			[]RunningTask{r(g(1), est(30)), r(g(1), est(10)), r(g(2), est(50))}, nil,
			Capacity{{Kind: "gpu"}: 0}, 30, true, "list schedule of 3 running, 0 ahead"},
		{"ahead takes the slice first", me,
			[]RunningTask{r(g(2), est(10))},
			[]QueuedTask{q("a", 80, 200, g(2), est(100))},
			Capacity{{Kind: "gpu"}: 0}, 110, true, "list schedule"},
		{"ahead is sorted: higher priority first", me,
			[]RunningTask{r(g(2), est(10)), r(g(2), est(20))},
			// b (prio 80) takes the first 2 GPUs at 10 for 1000 s; a (prio
			// 60) the next at 20 for 5 s; me at 25.
			[]QueuedTask{q("a", 60, 0, g(2), est(5)), q("b", 80, 50, g(2), est(1000))},
			Capacity{}, 25, true, "list schedule"},
		{"no head-of-line blocking: a big ask ahead does not block a small one", me,
			[]RunningTask{r(g(2), est(10)), r(g(2), est(40))},
			[]QueuedTask{q("big", 80, 0, g(4), est(100))},
			Capacity{}, 10, true, "list schedule"},
		{"other units do not help", me,
			[]RunningTask{r(g(2), est(10))}, nil,
			Capacity{{Kind: "mps"}: 8, {Kind: "mig", Profile: "1g.10gb"}: 7}, 10, true, "list schedule"},
		{"mig by profile", q("m", 50, 0, mig1, est(1)),
			[]RunningTask{r(mig1, est(5))}, nil,
			Capacity{{Kind: "mig", Profile: "3g.40gb"}: 2}, 5, true, "list schedule"},
		{"ask exceeds the pool", me, []RunningTask{r(g(1), est(10))}, nil, Capacity{{Kind: "gpu"}: 0}, 0, false, "ask of gpu×2 exceeds the pool's 1"},
		{"blocked by a task of unknown remaining time", me,
			[]RunningTask{r(g(2), Estimate{})}, nil, Capacity{}, 0, false, "never fits"},
		{"blocked by an ahead task of unknown run time", me,
			[]RunningTask{r(g(2), est(10))}, []QueuedTask{q("a", 80, 0, g(2), Estimate{})}, Capacity{}, 0, false, "never fits"},
		{"simultaneous releases", me,
			[]RunningTask{r(g(1), est(7)), r(g(1), est(7))}, nil, Capacity{}, 7, true, "list schedule"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Wait(tc.queued, tc.running, tc.ahead, tc.free)
			if math.Abs(got.Seconds-tc.secs) > 1e-9 || got.Known != tc.known || !strings.HasPrefix(got.Basis, tc.basis) {
				t.Errorf("Wait = %+v; want {Seconds:%v Basis:%s… Known:%v}", got, tc.secs, tc.basis, tc.known)
			}
		})
	}
}

func TestAhead(t *testing.T) {
	mk := func(id string, prio, at int) QueuedTask {
		return QueuedTask{ID: id, Priority: prio, Created: t0.Add(time.Duration(at) * time.Second)}
	}
	me := mk("me", 50, 10)
	queue := []QueuedTask{mk("late-low", 30, 0), mk("old", 50, 5), me, mk("new", 50, 20), mk("high", 80, 30), mk("tie", 50, 10)}
	var ids []string
	for _, t := range Ahead(me, queue) {
		ids = append(ids, t.ID)
	}
	if got, want := strings.Join(ids, ","), "high,old"; got != want {
		t.Errorf("Ahead = %s; want %s", got, want)
	}
}

func TestBaselines(t *testing.T) {
	ok := history.OutcomeComplete
	for _, tc := range []struct {
		name  string
		runs  []history.Run
		secs  float64
		known bool
	}{
		{"none", nil, 0, false},
		{"mean of all outcomes and tasks", cat(runs(keyA, gpu1, ok, 10, 20), runs(keyB, mps2, history.OutcomePreempted, 60)), 30, true},
	} {
		t.Run("runtime "+tc.name, func(t *testing.T) {
			got := RuntimeBaseline(tc.runs)
			if got.Seconds != tc.secs || got.Known != tc.known {
				t.Errorf("RuntimeBaseline = %+v; want %v %v", got, tc.secs, tc.known)
			}
		})
	}

	var waits []history.Run
	for i := range 30 { // waits 0..29 s; the last 20 started are 10..29
		waits = append(waits, run(keyA, gpu1, i, float64(i), 1, ok))
	}
	notStarted := run(keyA, gpu1, 100, 0, 0, history.OutcomeRunning)
	notStarted.Started, notStarted.Finished = time.Time{}, time.Time{}
	for _, tc := range []struct {
		name  string
		runs  []history.Run
		secs  float64
		known bool
	}{
		{"none", nil, 0, false},
		{"not started does not count", []history.Run{notStarted}, 0, false},
		{"last 20 started", append(waits, notStarted), 19.5, true},
		{"few", waits[:3], 1, true},
	} {
		t.Run("wait "+tc.name, func(t *testing.T) {
			got := WaitBaseline(tc.runs)
			if math.Abs(got.Seconds-tc.secs) > 1e-9 || got.Known != tc.known {
				t.Errorf("WaitBaseline = %+v; want %v %v", got, tc.secs, tc.known)
			}
		})
	}
}

func TestMAPE(t *testing.T) {
	for _, tc := range []struct {
		name         string
		pred, actual []float64
		want         float64
	}{
		{"exact", []float64{1, 2}, []float64{1, 2}, 0},
		{"half off", []float64{50, 300}, []float64{100, 200}, 50},
		{"zero actual skipped", []float64{5, 110}, []float64{0, 100}, 10},
		{"NaN skipped", []float64{math.NaN(), 90}, []float64{1, 100}, 10},
		{"negative actual uses its size", []float64{-90}, []float64{-100}, 10},
		{"nothing left", []float64{1}, []float64{0}, math.NaN()},
		{"empty", nil, nil, math.NaN()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := MAPE(tc.pred, tc.actual)
			if math.IsNaN(tc.want) != math.IsNaN(got) || (!math.IsNaN(got) && math.Abs(got-tc.want) > 1e-9) {
				t.Errorf("MAPE = %v; want %v", got, tc.want)
			}
		})
	}
	defer func() {
		if recover() == nil {
			t.Error("MAPE of different lengths did not panic")
		}
	}()
	MAPE([]float64{1}, nil)
}
