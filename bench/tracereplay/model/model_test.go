package model

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nomad-gpu/nomad-gpu/bench/tracereplay"
)

const sec = time.Second

func fixed(nodes, gpus int) tracereplay.Cluster {
	return tracereplay.Cluster{Nodes: nodes, MinNodes: nodes, MaxNodes: nodes, GPUsPerNode: gpus}
}

func wjob(id string, at, dur time.Duration, gpus int) tracereplay.Job {
	return tracereplay.Job{ID: id, Arrival: at, Duration: dur, GPUs: gpus, Fraction: 1}
}

func frac(id string, at, dur time.Duration, f float64) tracereplay.Job {
	return tracereplay.Job{ID: id, Arrival: at, Duration: dur, GPUs: 1, Fraction: f}
}

func prio(j tracereplay.Job, p int) tracereplay.Job { j.Priority = p; return j }

func mustRun(t *testing.T, jobs []tracereplay.Job, o Options) tracereplay.Result {
	t.Helper()
	r, err := Run(tracereplay.Trace{Jobs: jobs}, o)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Jobs) != len(jobs) {
		t.Fatalf("%d job records for %d jobs", len(r.Jobs), len(jobs))
	}
	for i := range jobs {
		if r.Jobs[i].ID != jobs[i].ID {
			t.Fatalf("record %d is %q, want %q (trace order)", i, r.Jobs[i].ID, jobs[i].ID)
		}
	}
	return r
}

// starts are the times the job's runs started.
func starts(r tracereplay.JobRecord) []time.Duration {
	var out []time.Duration
	for _, run := range r.Runs {
		out = append(out, run.Start)
	}
	return out
}

// lostWork is the progress its preemptions lost: saved (or reached)
// minus restored by the next run.
func lostWork(r tracereplay.JobRecord) time.Duration {
	var lost time.Duration
	for i, run := range r.Runs[:max(0, len(r.Runs)-1)] {
		if run.Preempted {
			kept := run.Reached
			if run.Checkpointed {
				kept = run.Saved
			}
			lost += kept - r.Runs[i+1].Restored
		}
	}
	return lost
}

// firstStart is when a job first ran; -1 if never.
func firstStart(r tracereplay.JobRecord) time.Duration {
	if len(starts(r)) == 0 {
		return -1
	}
	return starts(r)[0]
}

func TestPlacementTimes(t *testing.T) {
	tests := []struct {
		name  string
		cl    tracereplay.Cluster
		f     tracereplay.Features
		start time.Duration
		jobs  []tracereplay.Job
		// starts and finishes per job, -1: never.
		starts, finishes []time.Duration
	}{
		{
			name: "single job waits the start latency", cl: fixed(1, 8), start: 2 * sec,
			jobs:   []tracereplay.Job{wjob("a", 10*sec, 100*sec, 1)},
			starts: []time.Duration{12 * sec}, finishes: []time.Duration{112 * sec},
		},
		{
			name: "two whole-node jobs run back to back", cl: fixed(1, 8),
			jobs:   []tracereplay.Job{wjob("a", 0, 100*sec, 8), wjob("b", 0, 50*sec, 8)},
			starts: []time.Duration{0, 100 * sec}, finishes: []time.Duration{100 * sec, 150 * sec},
		},
		{
			name: "back to back with start latency", cl: fixed(1, 8), start: sec,
			jobs:   []tracereplay.Job{wjob("a", 0, 100*sec, 8), wjob("b", 0, 50*sec, 8)},
			starts: []time.Duration{sec, 102 * sec}, finishes: []time.Duration{101 * sec, 152 * sec},
		},
		{
			name:   "fractional jobs take a whole GPU without slices",
			cl:     tracereplay.Cluster{Nodes: 1, MinNodes: 1, MaxNodes: 1, GPUsPerNode: 1, MPSGPUs: 1, MPSShares: 2},
			jobs:   []tracereplay.Job{frac("a", 0, 100*sec, 0.5), frac("b", 0, 100*sec, 0.5)},
			starts: []time.Duration{0, 100 * sec}, finishes: []time.Duration{100 * sec, 200 * sec},
		},
		{
			name:   "fractional jobs share an MPS GPU with slices",
			cl:     tracereplay.Cluster{Nodes: 1, MinNodes: 1, MaxNodes: 1, GPUsPerNode: 1, MPSGPUs: 1, MPSShares: 2},
			f:      tracereplay.Features{Slices: true},
			jobs:   []tracereplay.Job{frac("a", 0, 100*sec, 0.5), frac("b", 0, 100*sec, 0.5)},
			starts: []time.Duration{0, 0}, finishes: []time.Duration{100 * sec, 100 * sec},
		},
		{
			name: "fractional jobs share a MIG GPU with slices",
			cl: tracereplay.Cluster{Nodes: 1, MinNodes: 1, MaxNodes: 1, GPUsPerNode: 1, MIGGPUs: 1,
				MIGProfiles: []string{"3g.40gb", "3g.40gb", "1g.10gb"}},
			f:    tracereplay.Features{Slices: true},
			jobs: []tracereplay.Job{frac("a", 0, 100*sec, 0.4), frac("b", 0, 100*sec, 0.4), frac("c", 0, 100*sec, 0.4)},
			// Two 3g instances, so the third waits.
			starts: []time.Duration{0, 0, 100 * sec}, finishes: []time.Duration{100 * sec, 100 * sec, 200 * sec},
		},
		{
			name: "no head-of-line blocking", cl: fixed(1, 8),
			jobs: []tracereplay.Job{
				wjob("a", 0, 100*sec, 4), prio(wjob("big", sec, 10*sec, 8), 90), prio(wjob("small", 2*sec, 10*sec, 2), 10),
			},
			starts: []time.Duration{0, 100 * sec, 2 * sec}, finishes: []time.Duration{100 * sec, 110 * sec, 12 * sec},
		},
		{
			// Binpack puts d next to a and b, leaving node 1 room for e.
			name: "binpack", cl: fixed(2, 8),
			jobs: []tracereplay.Job{
				wjob("a", 0, 100*sec, 4), wjob("b", sec, 100*sec, 2), wjob("c", 2*sec, 100*sec, 4),
				wjob("d", 3*sec, 100*sec, 2), wjob("e", 4*sec, 100*sec, 4),
			},
			starts:   []time.Duration{0, sec, 2 * sec, 3 * sec, 4 * sec},
			finishes: []time.Duration{100 * sec, 101 * sec, 102 * sec, 103 * sec, 104 * sec},
		},
		{
			name: "priority orders the queue", cl: fixed(1, 1),
			jobs: []tracereplay.Job{
				wjob("a", 0, 10*sec, 1), prio(wjob("low", sec, 10*sec, 1), 20), prio(wjob("high", 2*sec, 10*sec, 1), 80),
			},
			starts: []time.Duration{0, 20 * sec, 10 * sec}, finishes: []time.Duration{10 * sec, 30 * sec, 20 * sec},
		},
		// The horizon (1000s) is inclusive: a job whose first start falls
		// exactly on it is started; one arriving after it never is.
		{
			name: "arrives at the horizon, starts there", cl: fixed(1, 8),
			jobs:   []tracereplay.Job{wjob("edge", 1000*sec, 10*sec, 1)},
			starts: []time.Duration{1000 * sec}, finishes: []time.Duration{-1},
		},
		{
			name: "start latency ends at the horizon", cl: fixed(1, 8), start: 5 * sec,
			jobs:   []tracereplay.Job{wjob("edge", 995*sec, 10*sec, 1)},
			starts: []time.Duration{1000 * sec}, finishes: []time.Duration{-1},
		},
		{
			name: "arrives just after the horizon, never starts", cl: fixed(1, 8),
			jobs:   []tracereplay.Job{wjob("late", 1000*sec+1, 10*sec, 1)},
			starts: []time.Duration{-1}, finishes: []time.Duration{-1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := mustRun(t, tt.jobs, Options{
				Cluster: tt.cl, Config: tracereplay.Config{Name: tt.name, Features: tt.f},
				Latencies: tracereplay.Latencies{Start: tt.start}, Horizon: 1000 * sec,
			})
			for i, rec := range r.Jobs {
				if got := firstStart(rec); got != tt.starts[i] {
					t.Errorf("%s started at %s, want %s", rec.ID, got, tt.starts[i])
				}
				if tt.finishes[i] < 0 {
					if rec.Done {
						t.Errorf("%s done at %s, want not done", rec.ID, rec.Finish)
					}
				} else if !rec.Done || rec.Finish != tt.finishes[i] {
					t.Errorf("%s: done %v at %s, want done at %s", rec.ID, rec.Done, rec.Finish, tt.finishes[i])
				}
				if rec.Preemptions() != 0 {
					t.Errorf("%s preempted %d times without preemption", rec.ID, rec.Preemptions())
				}
			}
		})
	}
}

func TestPreemption(t *testing.T) {
	const low = 20
	tests := []struct {
		name     string
		preempt  bool
		high     int
		preempts bool
	}{
		{"off", false, 80, false},
		{"on, gap 60", true, 80, true},
		{"on, gap 10", true, low + 10, true},
		{"on, gap 9", true, low + 9, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			jobs := []tracereplay.Job{
				prio(wjob("low", 0, 100*sec, 8), low),
				prio(wjob("high", 10*sec, 50*sec, 8), tt.high),
			}
			r := mustRun(t, jobs, Options{
				Cluster: fixed(1, 8), Config: tracereplay.Config{Features: tracereplay.Features{Preemption: tt.preempt, Checkpoints: tt.preempt}},
				Policy:    tracereplay.Policy{PreemptionCooldown: 30 * sec},
				Latencies: tracereplay.Latencies{Start: sec, Preempt: 2 * sec}, Horizon: 1000 * sec,
			})
			lo, hi := r.Jobs[0], r.Jobs[1]
			if !lo.Done || !hi.Done {
				t.Fatalf("low done %v, high done %v", lo.Done, hi.Done)
			}
			if !tt.preempts {
				if lo.Preemptions() != 0 || len(starts(lo)) != 1 || lo.Finish != 101*sec {
					t.Errorf("low: %+v, want one uninterrupted run to 101s", lo)
				}
				if firstStart(hi) != 102*sec {
					t.Errorf("high started at %s, want 102s (after low)", firstStart(hi))
				}
				return
			}
			// high preempts at 10s, runs from 13s to 63s; low runs on to
			// its stop at 12s, its checkpoint committed as it exits (no
			// commit-to-exit latency), waits again, is placed at 63s and
			// runs its last 89s from 64s.
			if starts(hi)[0] != 13*sec || hi.Finish != 63*sec {
				t.Errorf("high ran %v to %s, want 13s to 63s", starts(hi), hi.Finish)
			}
			if lo.Preemptions() != 1 || lostWork(lo) != 0 || len(starts(lo)) != 2 {
				t.Fatalf("low: %+v, want 1 preemption, 2 starts, no lost work", lo)
			}
			ran := (12*sec - starts(lo)[0]) + (lo.Finish - starts(lo)[1])
			if ran != 100*sec || starts(lo)[1] != 64*sec {
				t.Errorf("low starts %v, finish %s: ran %s, want 100s from a resume at 64s", starts(lo), lo.Finish, ran)
			}
		})
	}
}

// Stock Nomad's preemption: the victim, preempted at 10s, runs on to its
// stop at 12s and starts again from scratch, and its record says so (the
// 11s it had done are lost); nothing raises its priority. With
// checkpoints its checkpoint commits CommitExit before the exit (at most
// the 2s of the stop): it keeps the work up to the commit, and the record
// shows the work after it apart (Reached − Saved, StopGap).
func TestPreemptionRecords(t *testing.T) {
	for _, tt := range []struct {
		name                  string
		checkpoints           bool
		commitExit, stopGap   time.Duration
		reached, saved, lost  time.Duration
		restored, lowFinishes time.Duration
	}{
		{"stock", false, sec, 0, 11 * sec, 0, 11 * sec, 0, 164 * sec},
		{"checkpoints, commit at the exit", true, 0, 0, 11 * sec, 11 * sec, 0, 11 * sec, 153 * sec},
		{"checkpoints, commit 1s before", true, sec, sec, 11 * sec, 10 * sec, 0, 10 * sec, 154 * sec},
		{"checkpoints, commit at the preemption", true, 2 * sec, 2 * sec, 11 * sec, 9 * sec, 0, 9 * sec, 155 * sec},
		{"checkpoints, commit-to-exit over the stop", true, 5 * sec, 2 * sec, 11 * sec, 9 * sec, 0, 9 * sec, 155 * sec},
	} {
		t.Run(tt.name, func(t *testing.T) {
			jobs := []tracereplay.Job{prio(wjob("low", 0, 100*sec, 8), 20), prio(wjob("high", 10*sec, 50*sec, 8), 80)}
			r := mustRun(t, jobs, Options{
				Cluster: fixed(1, 8), Config: tracereplay.Config{Features: tracereplay.Features{Preemption: true, Checkpoints: tt.checkpoints}},
				Policy:    tracereplay.Policy{PreemptionCooldown: 30 * sec},
				Latencies: tracereplay.Latencies{Start: sec, Preempt: 2 * sec, CommitExit: tt.commitExit}, Horizon: 1000 * sec,
			})
			lo := r.Jobs[0]
			if len(lo.Runs) != 2 {
				t.Fatalf("low runs %+v, want 2", lo.Runs)
			}
			first, second := lo.Runs[0], lo.Runs[1]
			if !first.Preempted || first.End != 12*sec || first.Reached != tt.reached || first.Saved != tt.saved || first.Checkpointed != tt.checkpoints || first.StopGap != tt.stopGap {
				t.Errorf("first run %+v, want preempted, ended at 12s, reached %s, saved %s, stop gap %s", first, tt.reached, tt.saved, tt.stopGap)
			}
			if second.Restored != tt.restored || lostWork(lo) != tt.lost || lo.Finish != tt.lowFinishes {
				t.Errorf("second run restored %s, lost %s, finish %s; want %s, %s, %s", second.Restored, lostWork(lo), lo.Finish, tt.restored, tt.lost, tt.lowFinishes)
			}
		})
	}
}

// TestPreemptedJobWaitsBehindItsPeers: Nomad's broker takes evaluations
// of one priority oldest first, and the plan that preempts a job makes
// it a new evaluation. So low, preempted at 10s, waits behind peer (same
// priority, waiting since 5s), though it arrived first.
func TestPreemptedJobWaitsBehindItsPeers(t *testing.T) {
	jobs := []tracereplay.Job{
		prio(wjob("low", 0, 100*sec, 8), 20),
		prio(wjob("peer", 5*sec, 30*sec, 8), 20),
		prio(wjob("high", 10*sec, 50*sec, 8), 80),
	}
	r := mustRun(t, jobs, Options{
		Cluster: fixed(1, 8), Config: tracereplay.Config{Features: tracereplay.Features{Preemption: true, Checkpoints: true}},
		Latencies: tracereplay.Latencies{Start: sec, Preempt: 2 * sec}, Horizon: 1000 * sec,
	})
	lo, peer := r.Jobs[0], r.Jobs[1]
	// high runs 13s to 63s; peer is placed at 63s and runs 64s to 94s;
	// low resumes at 95s.
	if firstStart(peer) != 64*sec {
		t.Errorf("peer started %v, want 64s (before low)", starts(peer))
	}
	if got := starts(lo); len(got) != 2 || got[1] != 95*sec {
		t.Errorf("low started %v, want [1s 1m35s] (after peer)", got)
	}
}

// checkpointed are the options of the protection tests: one 4-GPU node,
// nomad-gpu's preemption, a start of 1s, a stop of 2s, a raise 1s after a
// replacement runs, for cooldown.
func checkpointed(cooldown, minRuntime time.Duration) Options {
	return Options{
		Cluster: fixed(1, 4), Config: tracereplay.Config{Features: tracereplay.Features{Preemption: true, Checkpoints: true}},
		Policy:    tracereplay.Policy{PreemptionCooldown: cooldown, ProtectReaction: sec, PreemptMinRuntime: minRuntime},
		Latencies: tracereplay.Latencies{Start: sec, Preempt: 2 * sec}, Horizon: 5000 * sec,
	}
}

// sameStarts compares a job's starts with want.
func sameStarts(t *testing.T, r tracereplay.JobRecord, want ...time.Duration) {
	t.Helper()
	if got := starts(r); !reflect.DeepEqual(got, want) {
		t.Errorf("%s started %v, want %v", r.ID, got, want)
	}
}

// placements sums the preempting placements of r's jobs.
func placements(r tracereplay.Result) int {
	n := 0
	for _, j := range r.Jobs {
		n += j.PreemptingPlacements
	}
	return n
}

// TestPreemptionNoStorm: a and b (priority 30, 2 GPUs each) fill the
// node; high (90, 2 GPUs) preempts one of them, drawn at random (seed 0
// draws b; TestPreemptionVictimWithinAPriority), at 10s and runs from
// 13s to 63s. b waits at 30 (the rule of the driver's cooldown raised it
// to 90 at its stop, 12s, and it preempted a: a storm); it resumes at 64s.
func TestPreemptionNoStorm(t *testing.T) {
	for _, cooldown := range []time.Duration{0, 100 * sec} {
		t.Run(fmt.Sprintf("cooldown %s", cooldown), func(t *testing.T) {
			jobs := []tracereplay.Job{
				prio(wjob("a", 0, 1000*sec, 2), 30), prio(wjob("b", 0, 1000*sec, 2), 30),
				prio(wjob("high", 10*sec, 50*sec, 2), 90),
			}
			r := mustRun(t, jobs, checkpointed(cooldown, 0))
			sameStarts(t, r.Jobs[0], sec)
			sameStarts(t, r.Jobs[1], sec, 64*sec)
			sameStarts(t, r.Jobs[2], 13*sec)
			if got := placements(r); got != 1 || r.Jobs[2].PreemptingPlacements != 1 {
				t.Errorf("%d preempting placements (high's %d), want high's 1", got, r.Jobs[2].PreemptingPlacements)
			}
		})
	}
}

// TestPreemptionProtection: as in TestPreemptionNoStorm, b resumes at
// 64s; it is raised in place to 90 at 65s, until 165s. peer (30, 2 GPUs)
// arrives at 90s and waits. Then a second preemptor arrives:
//
//   - 90 at 100s: 90 is not 10 above b's raise; it preempts a (100s),
//     runs 103s–153s; peer (older evaluation) runs 154s–184s, a at 185s.
//   - 90 at 200s: b's raise is over; it preempts b (seed 0's draw) and runs
//     at 203s; peer runs 254s–284s, b at 285s.
//   - 99, 4 GPUs, at 100s: b's raise (9 below) keeps it out until 165s;
//     it preempts a and b, runs 168s–218s; peer and a run at 219s, b,
//     after peer, at 250s.
//   - 100, 4 GPUs, at 100s: 10 above the raise, it preempts both at
//     once and runs 103s–153s. b's raise is dropped: it waits at 30,
//     behind peer, and resumes at 185s (raised, it would have run first
//     at 154s).
func TestPreemptionProtection(t *testing.T) {
	tests := []struct {
		name        string
		prio, gpus  int
		at          time.Duration
		second      time.Duration // its start
		aStarts     []time.Duration
		bStarts     []time.Duration
		peer        time.Duration // its start
		preemptions int
	}{
		{"90 inside the cooldown", 90, 2, 100 * sec, 103 * sec, []time.Duration{sec, 185 * sec}, []time.Duration{sec, 64 * sec}, 154 * sec, 2},
		{"90 after the cooldown", 90, 2, 200 * sec, 203 * sec, []time.Duration{sec}, []time.Duration{sec, 64 * sec, 285 * sec}, 254 * sec, 2},
		{"9 above the raise", 99, 4, 100 * sec, 168 * sec, []time.Duration{sec, 219 * sec}, []time.Duration{sec, 64 * sec, 250 * sec}, 219 * sec, 3},
		{"10 above the raise", 100, 4, 100 * sec, 103 * sec, []time.Duration{sec, 154 * sec}, []time.Duration{sec, 64 * sec, 185 * sec}, 154 * sec, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			jobs := []tracereplay.Job{
				prio(wjob("a", 0, 1000*sec, 2), 30), prio(wjob("b", 0, 1000*sec, 2), 30),
				prio(wjob("high", 10*sec, 50*sec, 2), 90),
				prio(wjob("peer", 90*sec, 30*sec, 2), 30),
				prio(wjob("second", tt.at, 50*sec, tt.gpus), tt.prio),
			}
			r := mustRun(t, jobs, checkpointed(100*sec, 0))
			sameStarts(t, r.Jobs[0], tt.aStarts...)
			sameStarts(t, r.Jobs[1], tt.bStarts...)
			sameStarts(t, r.Jobs[3], tt.peer)
			sameStarts(t, r.Jobs[4], tt.second)
			preemptions := 0
			for _, j := range r.Jobs {
				preemptions += j.Preemptions()
			}
			if preemptions != tt.preemptions || placements(r) != 2 {
				t.Errorf("%d preemptions by %d placements, want %d by 2", preemptions, placements(r), tt.preemptions)
			}
		})
	}
}

// TestPreemptMinRuntime: a runs from 1s, b from 51s; high (90) asks for
// 2 GPUs at 60s. Without a minimum it preempts one of the two, drawn at
// random (seed 0 draws b). With 30s,
// b (9s run) is exempt and a (59s) is not. With 100s both are: high waits
// until a has run 100s (101s). Stock preemption has no minimum.
func TestPreemptMinRuntime(t *testing.T) {
	tests := []struct {
		name        string
		checkpoints bool
		minRuntime  time.Duration
		victim      int
		high        time.Duration // its start
	}{
		{"off", true, 0, 1, 63 * sec},
		{"30s", true, 30 * sec, 0, 63 * sec},
		{"100s", true, 100 * sec, 0, 104 * sec},
		{"stock preemption", false, 100 * sec, 1, 63 * sec},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			jobs := []tracereplay.Job{
				prio(wjob("a", 0, 1000*sec, 2), 30), prio(wjob("b", 50*sec, 1000*sec, 2), 30),
				prio(wjob("high", 60*sec, 50*sec, 2), 90),
			}
			o := checkpointed(0, tt.minRuntime)
			o.Config.Features.Checkpoints = tt.checkpoints
			r := mustRun(t, jobs, o)
			for i, rec := range r.Jobs[:2] {
				if want := map[bool]int{true: 1}[i == tt.victim]; rec.Preemptions() != want {
					t.Errorf("%s preempted %d times, want %d", rec.ID, rec.Preemptions(), want)
				}
			}
			sameStarts(t, r.Jobs[2], tt.high)
		})
	}
}

func TestPreemptionPicksTheCheapestNode(t *testing.T) {
	// Node 0 holds one 4-GPU low job and a 4-GPU mid one, node 1 two
	// 2-GPU low jobs and a 4-GPU mid one. A 4-GPU high job leaves two
	// allocations on either node (binpack ties); the preemption score
	// prefers node 0's victims (net priority 20 + 20/20 = 21, node 1's
	// 20 + 40/20 = 22), so it preempts the single 4-GPU job; never the mid
	// jobs (gap 5).
	jobs := []tracereplay.Job{
		prio(wjob("lo4", 0, 500*sec, 4), 20),
		prio(wjob("mid-a", 0, 500*sec, 4), 75),
		prio(wjob("lo2a", sec, 500*sec, 2), 20),
		prio(wjob("lo2b", sec, 500*sec, 2), 20),
		prio(wjob("mid-b", sec, 500*sec, 4), 75),
		prio(wjob("high", 10*sec, 10*sec, 4), 80),
	}
	r := mustRun(t, jobs, Options{
		Cluster: fixed(2, 8), Config: tracereplay.Config{Features: tracereplay.Features{Preemption: true, Checkpoints: true}},
		Horizon: 100 * sec,
	})
	want := []int{1, 0, 0, 0, 0, 0}
	for i, rec := range r.Jobs {
		if rec.Preemptions() != want[i] {
			t.Errorf("%s preempted %d times, want %d", rec.ID, rec.Preemptions(), want[i])
		}
	}
	if firstStart(r.Jobs[5]) != 10*sec {
		t.Errorf("high started at %s, want 10s", firstStart(r.Jobs[5]))
	}
}

// TestPreemptionVictimsAsNomad: one 8-GPU node, a high job (80) that does
// not fit. The victims are Nomad's (PreemptForDevice, selectBestAllocs):
// candidates at least 10 below, lowest priority first, until they and the
// free GPUs make the ask; then the largest first until they alone make
// it, free GPUs not counted.
func TestPreemptionVictimsAsNomad(t *testing.T) {
	tests := []struct {
		name string
		jobs []tracereplay.Job // the node's, placed from 0s, in order
		gpus int               // high's ask
		want []int             // preemptions per job of jobs
	}{
		{
			// 1 GPU free, 3 asked: lo1 (1) and the free one make 2, lo2
			// makes 4. Keeping the largest until they alone hold 3 keeps
			// both: the free GPU is not counted.
			"free GPUs not counted", []tracereplay.Job{
				prio(wjob("lo1", 0, 500*sec, 1), 20), prio(wjob("lo2", sec, 500*sec, 2), 30), prio(wjob("mid", 2*sec, 500*sec, 4), 75),
			}, 3, []int{1, 1, 0},
		},
		{
			// None free, 2 asked: lo1 then lo4 (priority order) make 5;
			// the largest, lo4, holds 2 alone: lo1 (the lower priority)
			// keeps running.
			"the largest first", []tracereplay.Job{
				prio(wjob("lo1", 0, 500*sec, 1), 20), prio(wjob("lo4", sec, 500*sec, 4), 30), prio(wjob("mid", 2*sec, 500*sec, 3), 75),
			}, 2, []int{0, 1, 0},
		},
		{
			"the lowest priority first", []tracereplay.Job{
				prio(wjob("lo30", 0, 500*sec, 2), 30), prio(wjob("lo20", sec, 500*sec, 2), 20), prio(wjob("mid", 2*sec, 500*sec, 4), 75),
			}, 2, []int{0, 1, 0},
		},
		{
			"none 10 below", []tracereplay.Job{
				prio(wjob("a", 0, 500*sec, 4), 71), prio(wjob("b", sec, 500*sec, 4), 75),
			}, 2, []int{0, 0},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			jobs := append(append([]tracereplay.Job(nil), tt.jobs...), prio(wjob("high", 10*sec, 10*sec, tt.gpus), 80))
			r := mustRun(t, jobs, Options{
				Cluster: fixed(1, 8), Config: tracereplay.Config{Features: tracereplay.Features{Preemption: true}},
				Horizon: 100 * sec,
			})
			for i, want := range tt.want {
				if got := r.Jobs[i].Preemptions(); got != want {
					t.Errorf("%s preempted %d times, want %d", r.Jobs[i].ID, got, want)
				}
			}
		})
	}
}

// TestPreemptionVictimWithinAPriority: Nomad takes one priority's
// candidates in the order its proposed allocations come out of a map, a
// random one. a and b (30, 2 GPUs each) fill a 4-GPU node; high (90, 2
// GPUs) preempts exactly one of them, and over 20 seeds each at least
// once. c (20) beside them is always the one preempted.
func TestPreemptionVictimWithinAPriority(t *testing.T) {
	tests := []struct {
		name   string
		cPrio  int
		either bool // a or b by the draw; else c
	}{
		{"one priority", 30, true},
		{"a lower one first", 20, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			count := make([]int, 3)
			for seed := range int64(20) {
				jobs := []tracereplay.Job{
					prio(wjob("a", 0, 1000*sec, 2), 30), prio(wjob("b", 0, 1000*sec, 2), 30),
					prio(wjob("c", 0, 1000*sec, 2), tt.cPrio), prio(wjob("high", 10*sec, 50*sec, 2), 90),
				}
				o := Options{
					Cluster: fixed(1, 6), Config: tracereplay.Config{Features: tracereplay.Features{Preemption: true}},
					Horizon: 100 * sec, Seed: seed,
				}
				r := mustRun(t, jobs, o)
				n := 0
				for i := range 3 {
					count[i] += r.Jobs[i].Preemptions()
					n += r.Jobs[i].Preemptions()
				}
				if n != 1 {
					t.Fatalf("seed %d: %d preemptions, want 1", seed, n)
				}
			}
			if tt.either && (count[0] == 0 || count[1] == 0) || !tt.either && count[2] != 20 {
				t.Errorf("victims a, b, c over 20 seeds: %v", count)
			}
		})
	}
}

// TestPreemptionNodeByBinpack: Nomad scores a preempting placement by
// binpack after the preemption, and every replayed task asks for the same
// CPU and memory: the node left with more allocations wins, whatever the
// GPUs it frees. mid6 (6 GPUs) and lo2 (2) fill one node (binpack puts
// lo2 beside mid6), lo4 (4) and four 1-GPU mid jobs the other. high (80,
// 2 GPUs) would free 2 GPUs on the first node (1 allocation left) and 4
// on the second (4 left): it preempts lo4.
func TestPreemptionNodeByBinpack(t *testing.T) {
	for seed := range int64(10) {
		jobs := []tracereplay.Job{
			prio(wjob("mid6", 0, 500*sec, 6), 75), prio(wjob("lo2", sec, 500*sec, 2), 20),
			prio(wjob("lo4", 2*sec, 500*sec, 4), 20),
		}
		for i := range 4 {
			jobs = append(jobs, prio(wjob(fmt.Sprintf("mid1-%d", i), 3*sec, 500*sec, 1), 75))
		}
		jobs = append(jobs, prio(wjob("high", 10*sec, 10*sec, 2), 80))
		r := mustRun(t, jobs, Options{
			Cluster: fixed(2, 8), Config: tracereplay.Config{Features: tracereplay.Features{Preemption: true}},
			Horizon: 100 * sec, Seed: seed,
		})
		for _, rec := range r.Jobs {
			want := 0
			if rec.ID == "lo4" {
				want = 1
			}
			if rec.Preemptions() != want {
				t.Errorf("seed %d: %s preempted %d times, want %d", seed, rec.ID, rec.Preemptions(), want)
			}
		}
	}
}

func autoscaled(strategy string, nodes, lo, hi int) Options {
	return Options{
		Cluster: tracereplay.Cluster{Nodes: nodes, MinNodes: lo, MaxNodes: hi, GPUsPerNode: 8},
		Config:  tracereplay.Config{Name: strategy, Features: tracereplay.Features{Autoscale: strategy}},
		Policy: tracereplay.Policy{
			EvalInterval: 10 * sec, Cooldown: 20 * sec, MaxScaleUp: 2, MaxScaleDown: 1,
			IdleFloor: 30, ScaleInAfter: 60 * sec, TargetAlloc: 50,
		},
		Latencies:   tracereplay.Latencies{Boot: 30 * sec, Remove: 10 * sec},
		Horizon:     3000 * sec,
		SampleEvery: 5 * sec,
	}
}

func sampleAt(t *testing.T, r tracereplay.Result, at time.Duration) tracereplay.Sample {
	t.Helper()
	for _, s := range r.Timeline {
		if s.At == at {
			return s
		}
	}
	t.Fatalf("no sample at %s", at)
	return tracereplay.Sample{}
}

func TestGPUQueueScalesOutAndIn(t *testing.T) {
	jobs := []tracereplay.Job{
		wjob("a", 0, 1000*sec, 8), wjob("b", 0, 1000*sec, 8), wjob("c", 0, 1000*sec, 8),
		wjob("d", 0, 5000*sec, 8), // still running when the others are done
	}
	o := autoscaled(tracereplay.AutoscaleGPUQueue, 1, 0, 4)
	o.Policy.IdleFloor = 60 // d alone on 4, 3 and 2 nodes is below it
	r := mustRun(t, jobs, o)
	// 10s: 3 needed, +2 (max_scale_up), ready at 40s; 20s and 30s: still
	// cooling (the cooldown starts when the scale call returns, after the
	// evaluation at 10s); 40s: b and c placed, 1 needed, +1, ready at 70s.
	for _, c := range []struct {
		at          time.Duration
		nodes, gpus int
	}{{5 * sec, 1, 8}, {10 * sec, 3, 8}, {30 * sec, 3, 8}, {40 * sec, 4, 24}, {65 * sec, 4, 24}, {70 * sec, 4, 32}} {
		if s := sampleAt(t, r, c.at); s.Nodes != c.nodes || s.GPUs != float64(c.gpus) {
			t.Errorf("at %s: %d nodes, %v GPUs; want %d, %d", c.at, s.Nodes, s.GPUs, c.nodes, c.gpus)
		}
	}
	wantStart := []time.Duration{0, 40 * sec, 40 * sec, 70 * sec}
	for i, rec := range r.Jobs {
		if firstStart(rec) != wantStart[i] || len(starts(rec)) != 1 {
			t.Errorf("%s started %v, want once at %s", rec.ID, starts(rec), wantStart[i])
		}
	}
	// d holds its node to the end: the pool shrinks to it alone, never
	// below.
	last := r.Timeline[len(r.Timeline)-1]
	if last.Nodes != 1 || last.Allocated != 8 || r.Jobs[3].Done {
		t.Errorf("at the horizon: %+v, d done %v; want d alone on 1 node", last, r.Jobs[3].Done)
	}
	maxNodes := 0
	for _, s := range r.Timeline {
		maxNodes = max(maxNodes, s.Nodes)
		if s.Allocated > s.GPUs {
			t.Fatalf("at %s: %v allocated on %v GPUs", s.At, s.Allocated, s.GPUs)
		}
	}
	if maxNodes != 4 {
		t.Errorf("at most %d nodes, want 4 (max_nodes)", maxNodes)
	}
}

// The real policy's queries ask for device nvidia/gpu, which MPS shares
// do not match: jobs waiting for shares never scale the pool out, and the
// shares held do not count in the allocation percentage.
func TestGPUQueueCountsWholeGPUsOnly(t *testing.T) {
	o := autoscaled(tracereplay.AutoscaleGPUQueue, 1, 1, 4)
	o.Cluster.GPUsPerNode, o.Cluster.MPSGPUs, o.Cluster.MPSShares = 2, 1, 4
	o.Config.Features.Slices = true
	var jobs []tracereplay.Job
	for i := range 8 {
		jobs = append(jobs, frac(fmt.Sprintf("s%d", i), 0, 1000*sec, 0.5))
	}
	r := mustRun(t, jobs, o)
	if last := r.Timeline[len(r.Timeline)-1]; last.Nodes != 1 {
		t.Errorf("%d nodes at the horizon, want 1: shares queued do not count", last.Nodes)
	}
	r = mustRun(t, append(jobs[:0:0], wjob("w1", 0, 1000*sec, 1), wjob("w2", 0, 1000*sec, 1)), o)
	if s := sampleAt(t, r, 50*sec); s.Nodes != 2 {
		t.Errorf("%d nodes at 50s, want 2: a whole-GPU job waits", s.Nodes)
	}
}

// A pool whose layouts follow the queue asks device=any, as
// docs/autoscaling.md tells it to: shares waiting count in
// GPU-equivalents. Sixteen half-GPU jobs are 8 GPUs of work on nodes of
// 2: the pool grows to its maximum of 4 and holds every job at once.
func TestGPUQueueWithLayoutsCountsEveryAsk(t *testing.T) {
	o := autoscaled(tracereplay.AutoscaleGPUQueue, 1, 1, 4)
	o.Cluster.GPUsPerNode, o.Cluster.LayoutShares = 2, 4
	o.Config.Features.Layouts = true
	var jobs []tracereplay.Job
	for i := range 16 {
		jobs = append(jobs, frac(fmt.Sprintf("s%d", i), 0, 2000*sec, 0.5))
	}
	r := mustRun(t, jobs, o)
	peak, held := 0, 0.0
	for _, s := range r.Timeline {
		peak, held = max(peak, s.Nodes), max(held, s.Allocated)
	}
	if peak != 4 || held != 8 {
		t.Errorf("at most %d nodes and %v GPUs held; want 4 and 8: the shares queued count", peak, held)
	}
}

// Packed demand: asks packed best fit, largest first, into the free
// capacity of the nodes there are, then into new ones.
func TestPackNodes(t *testing.T) {
	for _, tc := range []struct {
		name  string
		sizes []askSize
		bins  []int // nodes by free capacity, of capacity len(bins)-1
		want  int
	}{
		{"nothing waits", nil, []int{0, 0, 0, 0, 0}, 0},
		{"fits the free", []askSize{{2, 1}, {1, 2}}, []int{0, 0, 0, 0, 1}, 0},
		{"a node of 4 free takes 3 of 1; the 2 opens one", []askSize{{1, 3}, {2, 1}}, []int{0, 0, 0, 0, 1}, 1},
		{"largest first: 3 and 3 need two new nodes, the 1s fill them", []askSize{{1, 2}, {3, 2}}, []int{1, 0, 0, 0, 0}, 2},
		{"best fit: the 2 takes the node with 2 free, the 4 the empty one", []askSize{{2, 1}, {4, 1}}, []int{0, 0, 1, 0, 1}, 0},
		{"many whole nodes at once", []askSize{{4, 5}}, []int{0, 0, 0, 0, 0}, 5},
		{"halves: 3 of 2 on nodes of 4", []askSize{{2, 3}}, []int{0, 0, 0, 0, 0}, 2},
	} {
		if got := packNodes(slices.Clone(tc.sizes), len(tc.bins)-1, slices.Clone(tc.bins)); got != tc.want {
			t.Errorf("%s: %d new nodes, want %d", tc.name, got, tc.want)
		}
	}
}

func TestGPUQueueKeepsMinNodes(t *testing.T) {
	o := autoscaled(tracereplay.AutoscaleGPUQueue, 3, 2, 4)
	r := mustRun(t, []tracereplay.Job{wjob("a", 0, 10*sec, 1)}, o)
	if last := r.Timeline[len(r.Timeline)-1]; last.Nodes != 2 {
		t.Errorf("%d nodes at the horizon, want min_nodes 2", last.Nodes)
	}
}

// A job bigger than a node is members (gangs.go): the pool grows for the
// members waiting, stock Nomad's queued ones and a gang waiting for
// admission alike.
func TestGPUQueueCountsMembers(t *testing.T) {
	for _, gangs := range []bool{false, true} {
		o := autoscaled(tracereplay.AutoscaleGPUQueue, 1, 1, 4)
		o.Config.Gangs = gangs
		r := mustRun(t, []tracereplay.Job{wjob("huge", 0, 1000*sec, 16)}, o)
		if sl := r.Jobs[0].Slice; sl.Members != 2 || sl.Count != 8 {
			t.Fatalf("gangs %v: slice %+v; want 2 members of 8", gangs, sl)
		}
		if !r.Jobs[0].Done || len(r.Jobs[0].MemberRuns) != 2 {
			t.Fatalf("gangs %v: not done, or member runs %+v; want both members run", gangs, r.Jobs[0].MemberRuns)
		}
		peak := 0
		for _, smp := range r.Timeline {
			peak = max(peak, smp.Nodes)
		}
		if peak != 2 {
			t.Errorf("gangs %v: %d nodes at the peak; want 2, one a member", gangs, peak)
		}
	}
}

func TestTargetValue(t *testing.T) {
	jobs := []tracereplay.Job{wjob("a", 0, 1000*sec, 8), wjob("b", 0, 1000*sec, 8)}
	t.Run("never scales from zero", func(t *testing.T) {
		r := mustRun(t, jobs, autoscaled(tracereplay.AutoscaleTargetValue, 0, 0, 4))
		for _, s := range r.Timeline {
			if s.Nodes != 0 {
				t.Fatalf("at %s: %d nodes, want 0", s.At, s.Nodes)
			}
		}
		if len(starts(r.Jobs[0])) != 0 {
			t.Errorf("a started without nodes: %v", starts(r.Jobs[0]))
		}
	})
	t.Run("follows the allocation", func(t *testing.T) {
		// One node 100 % allocated, target 50 %: 2 nodes at 10s, ready
		// at 40s; b runs there. Both done: down to min_nodes 1, idle
		// nodes only.
		r := mustRun(t, jobs, autoscaled(tracereplay.AutoscaleTargetValue, 1, 1, 4))
		if s := sampleAt(t, r, 10*sec); s.Nodes != 2 {
			t.Errorf("at 10s: %d nodes, want 2", s.Nodes)
		}
		if firstStart(r.Jobs[1]) != 40*sec {
			t.Errorf("b started at %s, want 40s", firstStart(r.Jobs[1]))
		}
		if s := sampleAt(t, r, 500*sec); s.Nodes != 4 {
			// 2 nodes at 100 %: desired 4.
			t.Errorf("at 500s: %d nodes, want 4", s.Nodes)
		}
		if last := r.Timeline[len(r.Timeline)-1]; last.Nodes != 1 {
			t.Errorf("at the horizon: %d nodes, want 1", last.Nodes)
		}
		for _, rec := range r.Jobs {
			if len(starts(rec)) != 1 || !rec.Done {
				t.Errorf("%s: %+v, want one run to completion", rec.ID, rec)
			}
		}
	})
}

// A request for MPS shares takes one GPU's shares, of the last MPS GPU
// with room (Nomad's device allocator takes the last group that fits).
func TestMPSSharesOfOneGPU(t *testing.T) {
	cl := tracereplay.Cluster{Nodes: 1, MinNodes: 1, MaxNodes: 1, GPUsPerNode: 3, MPSGPUs: 2, MPSShares: 4}
	o := Options{Cluster: cl, Config: tracereplay.Config{Features: tracereplay.Features{Slices: true}}, Horizon: 100 * sec}
	tests := []struct {
		name string
		jobs []tracereplay.Job
		// gpus are the MPS GPUs each job's run holds; "" never ran
		gpus []string
	}{
		{"the last GPU first", []tracereplay.Job{frac("a", 0, 1000*sec, 0.25)}, []string{"mps1"}},
		{"then the last with room", []tracereplay.Job{frac("a", 0, 1000*sec, 0.75), frac("b", 0, 1000*sec, 0.5)}, []string{"mps1", "mps0"}},
		// 1 share free on each GPU: a half-GPU request does not fit,
		// though 2 shares are free on the node.
		{"no split over GPUs", []tracereplay.Job{frac("a", 0, 1000*sec, 0.75), frac("b", 0, 1000*sec, 0.75), frac("c", 0, 1000*sec, 0.5)}, []string{"mps1", "mps0", ""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := mustRun(t, tt.jobs, o)
			for i, want := range tt.gpus {
				got := ""
				if runs := r.Jobs[i].Runs; len(runs) > 0 {
					got = runs[0].Held[0].GPU
				}
				if got != want {
					t.Errorf("%s ran on %q, want %q", r.Jobs[i].ID, got, want)
				}
			}
		})
	}
}

func TestTimeline(t *testing.T) {
	jobs := []tracereplay.Job{
		{ID: "a", Arrival: 0, Duration: 2000 * sec, GPUs: 2, Fraction: 1, Util: 50},
		wjob("late", 900*sec, 10*sec, 1),
	}
	r := mustRun(t, jobs, Options{Cluster: fixed(2, 8), Latencies: tracereplay.Latencies{Start: 10 * sec},
		Config: tracereplay.Config{Name: "x"}, Compression: 3, Horizon: 600 * sec})
	if len(r.Timeline) != samplesDefault+1 || r.Timeline[0].At != 0 || r.Timeline[samplesDefault].At != 600*sec {
		t.Fatalf("%d samples from %s to %s, want %d from 0 to 600s", len(r.Timeline), r.Timeline[0].At,
			r.Timeline[len(r.Timeline)-1].At, samplesDefault+1)
	}
	// Start latency 10s × compression 3.
	if s := sampleAt(t, r, 29*sec); s.Allocated != 2 || s.Busy != 0 || s.Queued != 1 || s.GPUs != 16 || s.Nodes != 2 {
		t.Errorf("at 29s: %+v, want 2 allocated, 0 busy, 1 queued", s)
	}
	if s := sampleAt(t, r, 30*sec); s.Allocated != 2 || s.Busy != 1 || s.Queued != 0 {
		t.Errorf("at 30s: %+v, want 2 allocated, 1 busy, 0 queued", s)
	}
	a, late := r.Jobs[0], r.Jobs[1]
	if a.Done || len(starts(a)) != 1 || len(starts(late)) != 0 || late.Done {
		t.Errorf("at the horizon: a %+v, late %+v; want a running, late never submitted", a, late)
	}
	if r.Engine != "model" || r.Version != Version || r.Compression != 3 || r.Horizon != 600*sec || r.Config.Name != "x" {
		t.Errorf("result header %q %q %v %s %q", r.Engine, r.Version, r.Compression, r.Horizon, r.Config.Name)
	}
	if r.Jobs[0].Slice != (tracereplay.Slice{Kind: "gpu", Count: 2, GPUs: 2}) {
		t.Errorf("slice %+v", r.Jobs[0].Slice)
	}
	if !strings.Contains(strings.Join(r.Notes, "\n"), "1 jobs arrive after the horizon") {
		t.Errorf("notes %q", r.Notes)
	}
}

func TestDefaultHorizon(t *testing.T) {
	jobs := []tracereplay.Job{wjob("a", 0, 10*sec, 1), wjob("b", 1000*sec, 10*sec, 1)}
	r := mustRun(t, jobs, Options{Cluster: fixed(1, 8)})
	if r.Horizon != 1100*sec || r.Compression != 1 {
		t.Errorf("horizon %s, compression %v; want 1100s, 1", r.Horizon, r.Compression)
	}
}

func TestValidation(t *testing.T) {
	ok := Options{Cluster: fixed(1, 8)}
	tests := []struct {
		name string
		mod  func(*Options)
		jobs []tracereplay.Job
		want string
	}{
		{"gpus per node", func(o *Options) { o.Cluster.GPUsPerNode = 0 }, nil, "gpus_per_node"},
		{"strategy", func(o *Options) { o.Config.Autoscale = "spot" }, nil, "autoscale"},
		{"compression", func(o *Options) { o.Compression = -1 }, nil, "compression"},
		{"horizon", func(o *Options) { o.Horizon = -sec }, nil, "horizon"},
		{"latency", func(o *Options) { o.Latencies.Boot = -sec }, nil, "latencies.boot"},
		{"eval interval", func(o *Options) {
			o.Config.Autoscale = tracereplay.AutoscaleTargetValue
			o.Policy.TargetAlloc = 70
		}, nil, "policy.eval_interval"},
		{"max scale up", func(o *Options) {
			o.Config.Autoscale = tracereplay.AutoscaleGPUQueue
			o.Policy = tracereplay.DefaultPolicy()
			o.Policy.MaxScaleUp = 0
		}, nil, "policy.max_scale_up"},
		{"duration", func(*Options) {}, []tracereplay.Job{wjob("a", 0, -sec, 1)}, "duration"},
		{"priority", func(*Options) {}, []tracereplay.Job{prio(wjob("a", 0, sec, 1), 101)}, "priority"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := ok
			tt.mod(&o)
			_, err := Run(tracereplay.Trace{Jobs: tt.jobs}, o)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want one naming %s", err, tt.want)
			}
		})
	}
}

// synthetic is a deterministic trace: n jobs arriving over span, a mix of
// 1, 2, 4 and 8 whole GPUs and fractions, three priority tiers.
func synthetic(n int, span time.Duration, meanDur time.Duration) tracereplay.Trace {
	rng := rand.New(rand.NewPCG(1, 2))
	jobs := make([]tracereplay.Job, n)
	at := time.Duration(0)
	step := span / time.Duration(n)
	for i := range jobs {
		at += time.Duration(rng.ExpFloat64() * float64(step))
		j := tracereplay.Job{ID: "j" + strconv.Itoa(i), Arrival: at, GPUs: 1, Fraction: 1,
			Duration: time.Duration(rng.ExpFloat64() * float64(meanDur)).Round(time.Second),
			Util:     float64(20 + rng.IntN(80))}
		switch x := rng.IntN(100); {
		case x < 35:
		case x < 50:
			j.GPUs = 2
		case x < 62:
			j.GPUs = 4
		case x < 67:
			j.GPUs = 8
		default:
			j.Fraction = []float64{0.1, 0.25, 0.5, 0.75}[rng.IntN(4)]
		}
		switch x := rng.IntN(100); {
		case x < 25:
			j.Priority = 20
		case x < 85:
			j.Priority = 50
		default:
			j.Priority = 80
		}
		jobs[i] = j
	}
	return tracereplay.Trace{Jobs: jobs, Source: "synthetic"}
}

// bigOptions: 1000-node pool of 8-GPU nodes with one MPS and one MIG GPU
// each, every feature on.
func bigOptions(nodes, minNodes, maxNodes int) Options {
	return Options{
		Cluster: tracereplay.Cluster{Nodes: nodes, MinNodes: minNodes, MaxNodes: maxNodes, GPUsPerNode: 8,
			MPSGPUs: 1, MPSShares: 4, MIGGPUs: 1, MIGProfiles: []string{"3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"}},
		Config: tracereplay.Config{Name: "nomad-gpu", Features: tracereplay.Features{
			Slices: true, Preemption: true, Checkpoints: true, Autoscale: tracereplay.AutoscaleGPUQueue}},
		Policy:      tracereplay.DefaultPolicy(),
		Latencies:   tracereplay.DefaultLatencies(),
		Compression: 60,
	}
}

func TestDeterministic(t *testing.T) {
	tr := synthetic(2000, 6*time.Hour, 2*time.Hour)
	o := bigOptions(20, 10, 100)
	a, err := Run(tr, o)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Run(tr, o)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, b) {
		t.Fatal("two runs of the same inputs differ")
	}
	preempted, done := 0, 0
	for _, j := range a.Jobs {
		preempted += j.Preemptions()
		if j.Done {
			done++
		}
	}
	if preempted == 0 || done == 0 {
		t.Errorf("%d preemptions, %d done: the trace should exercise both", preempted, done)
	}
}

func TestModel10kJobs1000NodesRuns(t *testing.T) {
	tr := synthetic(10000, 6*time.Hour, 4*time.Hour)
	r, err := Run(tr, bigOptions(200, 100, 1000))
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Jobs) != len(tr.Jobs) {
		t.Fatalf("%d records for %d jobs", len(r.Jobs), len(tr.Jobs))
	}
	started, done, preempted, maxNodes := 0, 0, 0, 0
	for i, j := range r.Jobs {
		if j.ID != tr.Jobs[i].ID {
			t.Fatalf("record %d is %q, want %q", i, j.ID, tr.Jobs[i].ID)
		}
		if len(starts(j)) > 0 {
			started++
		}
		if j.Done {
			done++
		}
		preempted += j.Preemptions()
	}
	for _, s := range r.Timeline {
		maxNodes = max(maxNodes, s.Nodes)
	}
	t.Logf("%d started, %d done, %d preemptions, up to %d nodes, notes %q", started, done, preempted, maxNodes, r.Notes)
	if started == 0 || done == 0 {
		t.Errorf("%d started, %d done", started, done)
	}
}

func BenchmarkModel10kJobs1000Nodes(b *testing.B) {
	tr := synthetic(10000, 6*time.Hour, 4*time.Hour)
	o := bigOptions(200, 100, 1000)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Run(tr, o); err != nil {
			b.Fatal(err)
		}
	}
}
