package model

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/nomad-gpu/nomad-gpu/bench/tracereplay"
	"github.com/nomad-gpu/nomad-gpu/bench/tracereplay/figures"
)

// queueOptions are one node of 4 GPUs shared by teams a and b at weights
// wa and wb, with the queues (and checkpoints) on; starts take 1s, stops
// 2s, of which the commit 1s.
func queueOptions(wa, wb float64) Options {
	cl := fixed(1, 4)
	cl.Teams = []tracereplay.TeamWeight{{Team: "a", Weight: wa}, {Team: "b", Weight: wb}}
	return Options{
		Cluster: cl, Config: tracereplay.Config{Name: "+queues", Features: tracereplay.Features{Preemption: true, Checkpoints: true, Queues: true}},
		Policy:    tracereplay.Policy{QueueHalfLife: 10 * time.Minute},
		Latencies: tracereplay.Latencies{Start: sec, Preempt: 2 * sec, CommitExit: sec}, Horizon: 4000 * sec,
	}
}

func teamJob(team, id string, at, dur time.Duration, gpus int) tracereplay.Job {
	j := wjob(id, at, dur, gpus)
	j.Team = team
	return j
}

// Reclaim on a node of 4 GPUs, queues a and b of nominal 2 each: a's four
// 1-GPU jobs borrow all four while b is idle; b's two jobs at 100s take
// back a's two newest runs, stopped checkpointed (they lose at most the
// step in flight, none here), and run at once; a's two run again when
// b's end, from where they stopped.
func TestQueuesReclaim(t *testing.T) {
	var jobs []tracereplay.Job
	for i := range 4 {
		jobs = append(jobs, teamJob("a", fmt.Sprintf("a-%d", i), sec*time.Duration(i), 1000*sec, 1))
	}
	jobs = append(jobs, teamJob("b", "b-0", 100*sec, 200*sec, 1), teamJob("b", "b-1", 100*sec, 200*sec, 1))
	r := mustRun(t, jobs, queueOptions(1, 1))
	for _, id := range []int{4, 5} {
		if b := r.Jobs[id]; len(b.Runs) != 1 || b.Runs[0].Start != 103*sec {
			t.Errorf("%s ran %+v; want from 103s (the stop's 2s, the start's 1s)", b.ID, b.Runs)
		}
	}
	for id, want := range []int{1, 1, 2, 2} {
		a := r.Jobs[id]
		if len(a.Runs) != want || !a.Done {
			t.Errorf("%s ran %d times (done %v); want %d", a.ID, len(a.Runs), a.Done, want)
		}
		if want == 2 && (!a.Runs[0].Reclaimed || !a.Runs[0].Checkpointed || a.Runs[1].Restored < a.Runs[0].Saved) {
			t.Errorf("%s: its first run %+v; want reclaimed, checkpointed, and resumed from what it saved", a.ID, a.Runs)
		}
	}
	f := figures.Compute(r, figures.Options{})
	if f.Reclaims != 2 || f.LostGPUHours != 0 {
		t.Errorf("reclaims %d, lost %v GPU-hours; want a's two newest taken back, nothing lost", f.Reclaims, f.LostGPUHours)
	}
}

// A queue at its nominal preempts its own lower work, as Nomad would on
// a cluster of its own (the controller's yield): on a node of 4 GPUs, a
// and b of nominal 2 each, b's two jobs hold b's nominal; a's two jobs
// of priority 30 hold a's. a's job of priority 80 at 100s takes back
// a's newest, checkpointed, and starts after its stop (2s) and start
// (1s); a's job of priority 35 at 200s is not 10 above a's and waits.
func TestQueuesYield(t *testing.T) {
	jobs := []tracereplay.Job{
		prio(teamJob("a", "a-0", 0, 1000*sec, 1), 30), prio(teamJob("a", "a-1", sec, 1000*sec, 1), 30),
		teamJob("b", "b-0", 0, 1000*sec, 1), teamJob("b", "b-1", 0, 1000*sec, 1),
		prio(teamJob("a", "a-high", 100*sec, 50*sec, 1), 80), prio(teamJob("a", "a-low", 200*sec, 50*sec, 1), 35),
	}
	r := mustRun(t, jobs, queueOptions(1, 1))
	if high := r.Jobs[4]; len(high.Runs) != 1 || high.Runs[0].Start != 103*sec {
		t.Errorf("a-high ran %+v; want from 103s", high.Runs)
	}
	if a1 := r.Jobs[1]; len(a1.Runs) < 2 || !a1.Runs[0].Reclaimed || !a1.Runs[0].Checkpointed || a1.Runs[0].End != 102*sec {
		t.Errorf("a-1 ran %+v; want taken back at 100s (stopped at 102s), checkpointed, and run again", a1.Runs)
	}
	if a0 := r.Jobs[0]; len(a0.Runs) != 1 {
		t.Errorf("a-0 ran %+v; want one run: the newest is taken", a0.Runs)
	}
	if low := r.Jobs[5]; len(low.Runs) == 0 || low.Runs[0].Start < 1000*sec {
		t.Errorf("a-low ran %+v; want it to wait for a's runs to end", low.Runs)
	}
}

// Weighted fair share on a node of 8 GPUs: teams a, b and c at weights
// 3, 1 and 4, c with no work, so its nominal 4 is lent; a and b both
// have more 1-GPU jobs of 60s than the node runs. While both wait, a
// holds three quarters of the GPU-time and b one, within 5 points: their
// nominals (3 and 1) and, of what c lends, the fair-share order's (a
// standing below its weight's share goes first). Without the order, the
// jobs of one age alternating, the lent GPUs would split 2 and 2.
func TestQueuesFairShare(t *testing.T) {
	var jobs []tracereplay.Job
	for i := range 60 {
		jobs = append(jobs, teamJob("a", fmt.Sprintf("a-%02d", i), 0, 60*sec, 1), teamJob("b", fmt.Sprintf("b-%02d", i), 0, 60*sec, 1))
	}
	o := queueOptions(3, 1)
	o.Cluster = fixed(1, 8)
	o.Cluster.Teams = []tracereplay.TeamWeight{{Team: "a", Weight: 3}, {Team: "b", Weight: 1}, {Team: "c", Weight: 4}}
	r := mustRun(t, jobs, o)
	sh := figures.QueueShares(r)
	if math.Abs(sh["a"]-0.75) > 0.05 || math.Abs(sh["b"]-0.25) > 0.05 {
		t.Errorf("shares while both wait %v; want a 0.75, b 0.25, within 5 points", sh)
	}
}

// The order charges an admission at once (queues.Charged): on twelve
// 1-GPU nodes, teams a and b at weights 2 and 1 borrow the nine GPUs of
// idle c with more 1-GPU jobs of 40s than fit. In every 30s from the
// first minute to the eleventh, a holds two thirds of the GPU-time and b
// one, within a point. By decayed use alone the order lagged its own
// admissions: every GPU that freed went to one queue until its use
// caught up, and a's share swung between 17 % and 92 %.
func TestQueuesFairShareCharged(t *testing.T) {
	var jobs []tracereplay.Job
	for i := range 400 {
		at := time.Duration(i) * 10 * time.Millisecond
		jobs = append(jobs, teamJob("a", fmt.Sprintf("a-%03d", i), at, 40*sec, 1), teamJob("b", fmt.Sprintf("b-%03d", i), at+5*time.Millisecond, 40*sec, 1))
	}
	o := queueOptions(2, 1)
	o.Cluster = fixed(12, 1)
	o.Cluster.Teams = []tracereplay.TeamWeight{{Team: "a", Weight: 2}, {Team: "b", Weight: 1}, {Team: "c", Weight: 9}}
	r := mustRun(t, jobs, o)
	for from := 60 * sec; from+30*sec <= 660*sec; from += 30 * sec {
		held := map[string]time.Duration{}
		for _, j := range r.Jobs {
			for _, run := range j.Runs {
				if d := min(run.End, from+30*sec) - max(run.Start, from); d > 0 {
					held[j.Team] += d
				}
			}
		}
		a := held["a"].Seconds() / (held["a"] + held["b"]).Seconds()
		if math.Abs(a-2.0/3) > 0.01 {
			t.Errorf("a held %.1f %% of the GPU-time of the 30s from %s; want 66.7 %%, within a point", 100*a, from)
		}
	}
}

// The model refuses queues it does not model: with layouts (its layout
// round reads Nomad's queue, which held work is not in), or one team.
func TestQueuesRefused(t *testing.T) {
	o := queueOptions(1, 1)
	o.Config.Layouts = true
	if _, err := Run(tracereplay.Trace{Jobs: []tracereplay.Job{teamJob("a", "x", 0, sec, 1)}}, o); err == nil {
		t.Error("queues with layouts: no error")
	}
	o = queueOptions(1, 1)
	o.Cluster.Teams = o.Cluster.Teams[:1]
	if _, err := Run(tracereplay.Trace{Jobs: []tracereplay.Job{teamJob("a", "x", 0, sec, 1)}}, o); err == nil {
		t.Error("queues of one team: no error")
	}
}
