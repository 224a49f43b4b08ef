package figures

import (
	"math"
	"testing"
	"time"

	"github.com/nomad-gpu/nomad-gpu/bench/tracereplay"
)

// The queues' shares on a hand-made run, horizon 100s: a's job waits
// 0–10s and runs 10–100s on 2 GPUs; b's first job runs 0–50s on 1 GPU,
// its second waits 0–60s and runs 60–100s on 1. Both wait only in 0–10s,
// when b holds 1 GPU and a none: b 100 %. Then a's second job waits
// 20–100s: both wait in 20–60s too, a holding 2 and b 1 (then 0 from
// 50s): a 80 of 120 GPU-seconds.
func TestQueueShares(t *testing.T) {
	s := time.Second
	run := func(from, to time.Duration) []tracereplay.Run { return []tracereplay.Run{{Start: from, End: to}} }
	r := tracereplay.Result{Horizon: 100 * s, Cluster: tracereplay.Cluster{Teams: []tracereplay.TeamWeight{{Team: "a", Weight: 1}, {Team: "b", Weight: 1}}},
		Jobs: []tracereplay.JobRecord{
			{ID: "a1", Team: "a", Submitted: 0, Runs: run(10*s, 100*s), Slice: tracereplay.Slice{GPUs: 2}},
			{ID: "b1", Team: "b", Submitted: 0, Runs: run(0, 50*s), Done: true, Finish: 50 * s, Slice: tracereplay.Slice{GPUs: 1}},
			{ID: "b2", Team: "b", Submitted: 0, Runs: run(60*s, 100*s), Slice: tracereplay.Slice{GPUs: 1}},
		}}
	if sh := QueueShares(r); sh["a"] != 0 || sh["b"] != 1 {
		t.Errorf("shares %v; want b's alone (both wait only while a holds nothing)", sh)
	}
	r.Jobs = append(r.Jobs, tracereplay.JobRecord{ID: "a2", Team: "a", Submitted: 20 * s, Slice: tracereplay.Slice{GPUs: 1}})
	// Both wait in 0–10s (b: 1 GPU) and 20–60s (a: 2 GPUs; b: 1 to 50s).
	want := 80.0 / (80 + 10 + 30)
	if sh := QueueShares(r); math.Abs(sh["a"]-want) > 1e-9 || math.Abs(sh["b"]-(1-want)) > 1e-9 {
		t.Errorf("shares %v; want a %v", sh, want)
	}
	// A team with no job is no party to the shares, and has no figure
	// (a pool of windows takes only those where every team had jobs).
	r.Cluster.Teams = append(r.Cluster.Teams, tracereplay.TeamWeight{Team: "c", Weight: 1})
	if gs := QueueWaitGPUSeconds(r); len(gs) != 2 || gs["a"] != 80 || gs["b"] != 40 {
		t.Errorf("c with no job: GPU-seconds %v; want a 80, b 40, no c", gs)
	}
	r.Cluster.Teams = nil
	if sh := QueueShares(r); sh != nil {
		t.Errorf("without teams: %v, want none", sh)
	}
}
