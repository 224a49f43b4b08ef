package e2e

import (
	"testing"
	"time"

	"github.com/nomad-gpu/nomad-gpu/tracereplay"
	"github.com/nomad-gpu/nomad-gpu/tracereplay/figures"
)

// These tests need no cluster: they read task logs as the replay's
// record collector does.

// philly-81917 in the committed nomad-gpu replay (docs/bench-trace): run 1
// on gpu-5 committed 72025 ms of work when preempted; run 2 on gpu-7 was
// preempted 57 ms (wall) after its start and logged nothing at all (the
// checkpoint signal's default action killed its shell before its first
// line); run 3 on gpu-8 restored those same 72025 ms. Nothing was lost,
// but run 2's silence was read as "restored=-1" and the figure counted
// the whole 72 s checkpoint lost: 0.02 GPU-hours.
func TestReplayProgressUntoldRestoreIsUnknown(t *testing.T) {
	const compression = 25
	trace := func(d time.Duration) time.Duration { return d * compression }
	ms := func(n int64) time.Duration { return time.Duration(n) * time.Millisecond }
	runs := []tracereplay.Run{
		{Start: 4598854072025, End: 4671846555975, Preempted: true, Node: "gpu-5"},
		{Start: 4707855912775, End: 4709276204750, Preempted: true, Node: "gpu-7"},
		{Start: 4889417096050, End: 5240367336875, Preempted: true, Node: "gpu-8"},
		{Start: 7294645745500, End: 8604000000000, Open: true, Node: "gpu-9"},
	}
	logs := []string{
		"restored=0\nsim-load: for 4m0s (record x)\ncommitted=2881\n",
		"", // killed by SIGUSR1 before its first line
		"restored=2881\ncommitted=16901\n",
		"restored=16901\n",
	}
	for i := range runs {
		readProgress(logs[i], &runs[i], trace)
	}
	if r := runs[1]; r.ProgressKnown {
		t.Errorf("run 2 logged no restored=, yet its progress is known: restored %s, reached %s", r.Restored, r.Reached)
	}
	if r := runs[2]; !r.ProgressKnown || r.Restored != trace(ms(2881)) || !r.Checkpointed || r.Saved != trace(ms(16901)) {
		t.Errorf("run 3 = %+v, want restored %s, saved %s", r, trace(ms(2881)), trace(ms(16901)))
	}
	res := tracereplay.Result{Horizon: 8604 * time.Second, Jobs: []tracereplay.JobRecord{{
		ID: "philly-81917", Slice: tracereplay.Slice{Kind: "gpu", Count: 1, GPUs: 1}, Requested: 1, Runs: runs,
	}}}
	// Hand-computed: the preemptions of runs 1 and 2 count nothing, run
	// 2's restore being unknown; run 3 kept 422525 ms and run 4 restored
	// all of it. (Run 3 restoring run 1's 72025 ms shows nothing was
	// lost there either.)
	if f := figures.Compute(res, figures.Options{}); f.LostGPUHours != 0 || f.Preemptions != 3 {
		t.Errorf("lost %v GPU-hours over %d preemptions, want 0 over 3", f.LostGPUHours, f.Preemptions)
	}
}

// A log without stopped= (the task ended before it could say) takes the
// run's length as the work done since its restore.
func TestReplayProgressUntoldStop(t *testing.T) {
	trace := func(d time.Duration) time.Duration { return d * 25 }
	run := tracereplay.Run{Start: 100 * time.Second, End: 110 * time.Second, Preempted: true}
	readProgress("restored=1000\ncommitted=1300\nfinished=1301\n", &run, trace)
	if !run.ProgressKnown || run.Restored != 25*time.Second || run.Reached != 35*time.Second || run.Saved != 32500*time.Millisecond || run.StopGap != 0 {
		t.Errorf("run = %+v, want restored 25s, reached 35s, saved 32.5s, no stop gap", run)
	}
	run = tracereplay.Run{Start: 100 * time.Second, End: 110 * time.Second, Preempted: true}
	readProgress("restored=1000\ncommitted=1300\nstopped=1340\n", &run, trace)
	if run.Reached != 33500*time.Millisecond || run.StopGap != 40*time.Millisecond {
		t.Errorf("run = %+v, want reached 33.5s, stop gap 40ms", run)
	}
}
