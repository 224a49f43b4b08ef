package model

import (
	"flag"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/nomad-gpu/nomad-gpu/autoscaler/apm"
	"github.com/nomad-gpu/nomad-gpu/bench/tracereplay"
	"github.com/nomad-gpu/nomad-gpu/controller/sizing"
	"github.com/nomad-gpu/nomad-gpu/controller/sizing/history"
)

// beyondSim is a sim of gpu-queue on ready nodes of 4 GPUs with beyond
// d (trace time, compression 1) at now: running are the GPUs of jobs
// placed on each node at 0 (started, unless pending names them), queued
// the GPUs of jobs waiting since 0, in that order (priority 50, or
// prios), and hist the run times of complete runs of 4 GPUs that ended
// at 0 (the pool's history).
func beyondSim(t *testing.T, d time.Duration, running [][]int, pending map[int]bool, queued []int, prios map[int]int, hist []time.Duration, now time.Duration) *sim {
	t.Helper()
	o := autoscaled(tracereplay.AutoscaleGPUQueue, len(running), 1, 10)
	o.Cluster.GPUsPerNode = 4
	o.Policy.Beyond = d
	o.Compression = 1
	var jobs []tracereplay.Job
	var where []int32
	for n, gpus := range running {
		for _, g := range gpus {
			jobs = append(jobs, wjob("run-"+string(rune('a'+len(jobs))), 0, 100000*sec, g))
			where = append(where, int32(n))
		}
	}
	first := len(jobs)
	for i, g := range queued {
		j := wjob("queued-"+string(rune('a'+i)), 0, 100000*sec, g)
		if p, ok := prios[i]; ok {
			j = prio(j, p)
		}
		jobs = append(jobs, j)
	}
	tr := tracereplay.Trace{Jobs: jobs}
	if err := validate(tr, &o); err != nil {
		t.Fatal(err)
	}
	s := newSim(tr, o)
	for id := range first {
		s.place(int32(id), where[id], 0)
		if !pending[id] {
			s.handle(event{kind: evRun, id: int32(id), epoch: s.jobs[id].epoch})
		}
	}
	for id := first; id < len(jobs); id++ {
		s.jobs[id].evalAt = 0
		s.enqueue(int32(id))
	}
	for i, h := range hist {
		s.bey.hist = append(s.bey.hist, history.Run{
			Key: history.Key{Namespace: "default", Job: "past-" + string(rune('a'+i)), Group: "g", Task: "t"}, Slice: history.Slice{Kind: "gpu", Count: 4},
			Pool: forecastPool, Started: epoch.Add(-h), Finished: epoch, Outcome: history.OutcomeComplete,
		})
	}
	s.now = now
	return s
}

// TestBeyond: nodes_needed{beyond=D} on hand-made states. One node of 4
// GPUs runs a 4-GPU job started at 0; at 1000s the history (three runs
// of 1200s) predicts it ends at 1200s, 200s on, where the queued 4-GPU job
// is placed.
func TestBeyond(t *testing.T) {
	busy := [][]int{{4}}
	hist := []time.Duration{1200 * sec, 1200 * sec, 1200 * sec}
	tests := []struct {
		name    string
		d       time.Duration
		running [][]int
		pending map[int]bool
		queued  []int
		prios   map[int]int
		hist    []time.Duration
		// plain is nodes_needed without beyond, want with it.
		plain, want int
	}{
		{name: "placed within D by the running work's predicted end: no node", d: 300 * sec, running: busy, queued: []int{4}, hist: hist, plain: 1, want: 0},
		{name: "placed just at D: no node", d: 200 * sec, running: busy, queued: []int{4}, hist: hist, plain: 1, want: 0},
		{name: "placed beyond D: a node", d: 199 * sec, running: busy, queued: []int{4}, hist: hist, plain: 1, want: 1},
		// Without history the running job, 1000s in, is taken to be half
		// done: it ends in 1000s.
		{name: "no history: a running job taken to be half done", d: 999 * sec, running: busy, queued: []int{4}, plain: 1, want: 1},
		{name: "no history: within D of half done", d: 1000 * sec, running: busy, queued: []int{4}, plain: 1, want: 0},
		// A job not started has no elapsed time to go by: with no history
		// its run time, and so the queued job's wait, is unknown.
		{name: "unknown wait counts", d: time.Hour, running: busy, pending: map[int]bool{0: true}, queued: []int{4}, plain: 1, want: 1},
		{name: "known once there is history", d: time.Hour, running: busy, pending: map[int]bool{0: true}, queued: []int{4}, hist: hist, plain: 1, want: 0},
		// The second queued job waits for the first's run (1200s) too.
		{name: "the queue ahead: the first within D, the second beyond", d: 300 * sec, running: busy, queued: []int{4, 4}, hist: hist, plain: 2, want: 1},
		{name: "a later job of a higher priority goes ahead", d: 300 * sec, running: busy, queued: []int{4, 2}, prios: map[int]int{1: 80}, hist: hist, plain: 2, want: 1},
		{name: "one queued behind a smaller one placed at the same end", d: 300 * sec, running: busy, queued: []int{2, 2}, hist: hist, plain: 1, want: 0},
		// The forecast's capacity is flat, as the APM's: two nodes' 2
		// free GPUs each make a 4-GPU ask "fit now", though no node fits
		// it.
		{name: "flat capacity: free GPUs on two nodes fit a 4-GPU ask now", d: 300 * sec, running: [][]int{{2}, {2}}, queued: []int{4}, hist: hist, plain: 1, want: 0},
		// Behind a job whose run time is unknown (no history of 2 GPUs nor
		// of any), the pending one holds its GPUs for good.
		{name: "unknown behind work of unknown run time", d: time.Hour, running: [][]int{{2, 2}}, pending: map[int]bool{1: true}, queued: []int{4}, plain: 1, want: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := beyondSim(t, tt.d, tt.running, tt.pending, tt.queued, tt.prios, tt.hist, 1000*sec)
			var oracle map[string]bool
			forecastCheck = func(in sizing.ForecastInput, now time.Time, d time.Duration, _ map[string]bool) {
				oracle = forecastWithin(in, now, d)
			}
			defer func() { forecastCheck = nil }()
			if got := s.nodesNeeded(); got != tt.plain {
				t.Errorf("nodes_needed = %d, want %d", got, tt.plain)
			}
			if got := s.nodesNeededBeyond(); got != tt.want {
				t.Errorf("nodes_needed{beyond=%s} = %d, want %d", tt.d, got, tt.want)
			}
			// sizing.Forecast itself places as many within D.
			if n := len(oracle); n != s.bey.leftOut {
				t.Errorf("sizing.Forecast places %d jobs within D (%v), the model left out %d", n, slices.Sorted(maps.Keys(oracle)), s.bey.leftOut)
			}
		})
	}
}

// TestBeyondHistory: the forecast learns from the runs that completed or
// that the controller stopped (a move), not from preempted ones, within
// the APM's finished window; off without beyond.
func TestBeyondHistory(t *testing.T) {
	if forecastWindow != apm.DefaultFinishedWindow || forecastMaxFinished != apm.DefaultFinishedMax {
		t.Errorf("window %s, at most %d runs; want the APM's defaults %s and %d", forecastWindow, forecastMaxFinished, apm.DefaultFinishedWindow, apm.DefaultFinishedMax)
	}
	s := beyondSim(t, 300*sec, [][]int{{1, 1, 1}}, nil, nil, nil, nil, 100*sec)
	s.recs[0].Runs[0].End = 100 * sec
	s.runEnded(0) // completed
	s.recs[1].Runs[0].End, s.recs[1].Runs[0].Moved = 100*sec, true
	s.runEnded(1) // moved
	s.recs[2].Runs[0].End, s.recs[2].Runs[0].Preempted = 100*sec, true
	s.runEnded(2) // preempted
	if len(s.bey.hist) != 2 || s.bey.hist[0].Key.Job != "run-a" || s.bey.hist[1].Key.Job != "run-b" {
		t.Fatalf("history %+v; want the completed and the moved run", s.bey.hist)
	}
	if r := s.bey.hist[1]; r.Finished.Sub(r.Started) != 100*sec || r.Outcome != history.OutcomeComplete || r.Slice != (history.Slice{Kind: "gpu", Count: 1}) {
		t.Errorf("moved run %+v; want a complete run of 100s of gpu×1", r)
	}
	in := s.forecastInput(func(g int) bool { return g == wholeGroup })
	if n := len(in.Runs); n != 2+3 { // the history and the three running
		t.Errorf("%d runs in the forecast's input, want 5", n)
	}
	s.now = s.bey.window + 101*sec
	if in := s.forecastInput(func(g int) bool { return g == wholeGroup }); len(in.Runs) != 3 {
		t.Errorf("%d runs in the forecast's input a window later, want the 3 running", len(in.Runs))
	}

	off := beyondSim(t, 0, [][]int{{1}}, nil, nil, nil, nil, 100*sec)
	off.recs[0].Runs[0].End = 100 * sec
	off.runEnded(0)
	if len(off.bey.hist) != 0 {
		t.Errorf("history without beyond: %d runs", len(off.bey.hist))
	}
}

// TestBeyondMatchesForecast: on the replay's samples, at every forecast
// of a run, servedWithin leaves out exactly the jobs sizing.Forecast's
// waits place within D, and beyond changes the run.
func TestBeyondMatchesForecast(t *testing.T) {
	for _, args := range [][]string{
		{"-beyond", "24s", "-configs", "+autoscale,nomad-gpu"},
		{"-beyond", "8s", "-configs", "+autoscale,nomad-gpu", "-start", "2017-10-05 00:00:00"},
		{"-beyond", "48s", "-configs", "+autoscale,nomad-gpu", "-busiest-min-gpus", "8"},
	} {
		var p tracereplay.Params
		fs := flag.NewFlagSet("bench-trace", flag.ContinueOnError)
		p.Register(fs)
		if err := fs.Parse(append([]string{"-compression", "25"}, args...)); err != nil {
			t.Fatal(err)
		}
		setup, err := p.Load()
		if err != nil {
			t.Fatal(err)
		}
		for _, cfg := range setup.Configs {
			checks, leftOut := 0, 0
			forecastCheck = func(in sizing.ForecastInput, now time.Time, d time.Duration, got map[string]bool) {
				checks++
				leftOut += len(got)
				if want := forecastWithin(in, now, d); !maps.Equal(got, want) {
					t.Errorf("%v %s at %s: left out %v, sizing.Forecast places within %s %v", args, cfg.Name, now.Sub(epoch), slices.Sorted(maps.Keys(got)), d, slices.Sorted(maps.Keys(want)))
				}
			}
			o := Options{Cluster: setup.Cluster, Config: cfg, Policy: setup.Policy, Latencies: tracereplay.DefaultLatencies(),
				Compression: setup.Compression, Horizon: setup.Horizon, Seed: setup.Seed}
			with, err := Run(setup.Trace, o)
			forecastCheck = nil
			if err != nil {
				t.Fatal(err)
			}
			if checks == 0 || leftOut == 0 {
				t.Errorf("%v %s: %d forecasts, %d jobs left out; want some", args, cfg.Name, checks, leftOut)
			}
			o.Policy.Beyond = 0
			without, err := Run(setup.Trace, o)
			if err != nil {
				t.Fatal(err)
			}
			if slices.EqualFunc(with.Timeline, without.Timeline, func(a, b tracereplay.Sample) bool { return a.Nodes == b.Nodes }) {
				t.Errorf("%v %s: the same nodes with and without beyond", args, cfg.Name)
			}
		}
	}
}
