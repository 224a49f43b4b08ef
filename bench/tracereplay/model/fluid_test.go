package model

import (
	"slices"
	"testing"
	"time"

	"github.com/nomad-gpu/nomad-gpu/bench/tracereplay"
)

// The fluid pool: exact fractions, no latency, the model's order
// (priority, then arrival, then trace order) and backfill.
func TestFluid(t *testing.T) {
	const m = time.Minute
	job := func(id string, at, dur time.Duration, gpus int, fraction float64, prio int) tracereplay.Job {
		return tracereplay.Job{ID: id, Arrival: at, Duration: dur, GPUs: gpus, Fraction: fraction, Priority: prio}
	}
	never := time.Duration(-1) // no run
	for _, tc := range []struct {
		name    string
		nodes   int // of 1 GPU each
		jobs    []tracereplay.Job
		horizon time.Duration
		starts  []time.Duration // per job, never: none by the horizon
		done    []bool
	}{
		{
			name: "fractions take exactly what they ask", nodes: 1,
			jobs:   []tracereplay.Job{job("a", 0, 10*m, 1, 0.25, 50), job("b", 0, 10*m, 1, 0.25, 50), job("c", 0, 10*m, 1, 0.5, 50), job("d", 0, 10*m, 1, 0.1, 50)},
			starts: []time.Duration{0, 0, 0, 10 * m}, done: []bool{true, true, true, true}, horizon: time.Hour,
		},
		{
			name: "one pool: no node boundary", nodes: 4,
			jobs:   []tracereplay.Job{job("a", 0, 10*m, 1, 0.5, 50), job("b", 0, 10*m, 1, 0.5, 50), job("c", 0, 10*m, 3, 1, 50)},
			starts: []time.Duration{0, 0, 0}, done: []bool{true, true, true}, horizon: time.Hour,
		},
		{
			name: "backfill: a job that fits passes one that does not", nodes: 2,
			jobs:   []tracereplay.Job{job("a", 0, 10*m, 1, 1, 50), job("b", m, 10*m, 2, 1, 50), job("c", 2*m, 5*m, 1, 1, 50)},
			starts: []time.Duration{0, 10 * m, 2 * m}, done: []bool{true, true, true}, horizon: time.Hour,
		},
		{
			name: "higher priority first", nodes: 1,
			jobs:   []tracereplay.Job{job("a", 0, 10*m, 1, 1, 50), job("b", m, 10*m, 1, 1, 30), job("c", 2*m, 10*m, 1, 1, 80)},
			starts: []time.Duration{0, 20 * m, 10 * m}, done: []bool{true, true, true}, horizon: time.Hour,
		},
		{
			name: "same priority: older first, then trace order", nodes: 1,
			jobs:   []tracereplay.Job{job("a", 0, 10*m, 1, 1, 50), job("b", m, 10*m, 1, 1, 50), job("c", m, 10*m, 1, 1, 50), job("d", 2*m, 10*m, 1, 1, 50)},
			starts: []time.Duration{0, 10 * m, 20 * m, 30 * m}, done: []bool{true, true, true, true}, horizon: time.Hour,
		},
		{
			name: "the horizon: open runs, unstarted jobs, late arrivals", nodes: 1,
			jobs:   []tracereplay.Job{job("a", 0, 40*m, 1, 1, 50), job("b", m, 10*m, 1, 1, 50), job("c", 31*m, 10*m, 1, 1, 50)},
			starts: []time.Duration{0, never, never}, done: []bool{false, false, false}, horizon: 30 * m,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := tracereplay.Trace{Jobs: tc.jobs}
			r, err := Fluid(tr, Options{
				Cluster: tracereplay.Cluster{Nodes: tc.nodes, MinNodes: tc.nodes, MaxNodes: tc.nodes, GPUsPerNode: 1},
				// Ignored: the pool has no latency.
				Latencies: tracereplay.Latencies{Start: time.Minute, Boot: time.Minute},
				Horizon:   tc.horizon,
			})
			if err != nil {
				t.Fatal(err)
			}
			var starts []time.Duration
			var done []bool
			for i, j := range r.Jobs {
				start := never
				if len(j.Runs) == 1 {
					start = j.Runs[0].Start
					if want := min(start+tc.jobs[i].Duration, tc.horizon); j.Runs[0].End != want || j.Runs[0].Open != (want == tc.horizon) {
						t.Errorf("%s: run %+v, want its end at %s", j.ID, j.Runs[0], want)
					}
				} else if len(j.Runs) > 1 {
					t.Errorf("%s: %d runs, want at most 1", j.ID, len(j.Runs))
				}
				starts, done = append(starts, start), append(done, j.Done)
				if j.Requested != tc.jobs[i].Requested() || j.Slice.GPUs != tc.jobs[i].Requested() {
					t.Errorf("%s: asks %v, holds %v; want %v both", j.ID, j.Requested, j.Slice.GPUs, tc.jobs[i].Requested())
				}
			}
			if !slices.Equal(starts, tc.starts) || !slices.Equal(done, tc.done) {
				t.Errorf("starts %v, done %v; want %v, %v", starts, done, tc.starts, tc.done)
			}
			if r.Config.Name != FluidName || r.Horizon != tc.horizon {
				t.Errorf("config %q, horizon %s", r.Config.Name, r.Horizon)
			}
		})
	}
}
