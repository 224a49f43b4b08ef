package model

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/nomad-gpu/nomad-gpu/bench/tracereplay"
	"github.com/nomad-gpu/nomad-gpu/bench/tracereplay/figures"
	"github.com/nomad-gpu/nomad-gpu/controller/sizing/history"
	"github.com/nomad-gpu/nomad-gpu/controller/sizing/predict"
)

// gangOptions are two nodes of 4 GPUs (a job of 8 GPUs is 2 members of
// 4), starts taking 1s, stops 2s.
func gangOptions(f tracereplay.Features) Options {
	return Options{
		Cluster: fixed(2, 4), Config: tracereplay.Config{Features: f},
		Policy:    tracereplay.Policy{ReservationMaxHold: 1000 * sec},
		Latencies: tracereplay.Latencies{Start: sec, Preempt: 2 * sec}, Horizon: 2000 * sec,
	}
}

// A gang of 2 members while one node is busy for 100s: stock Nomad places
// one member at once, which holds its 4 GPUs idle until the other is
// placed at 100s (400 partial GPU-seconds); with gangs neither is placed
// before both fit. Either way the job runs 50s once both run.
func TestGangAdmission(t *testing.T) {
	jobs := []tracereplay.Job{wjob("busy", 0, 100*sec, 4), wjob("gang", 10*sec, 50*sec, 8)}
	for _, tc := range []struct {
		name    string
		f       tracereplay.Features
		partial time.Duration
	}{
		{"stock", tracereplay.Features{}, 2 * (101*sec - 10*sec)},
		{"gangs", tracereplay.Features{Gangs: true}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := mustRun(t, jobs, gangOptions(tc.f))
			g := r.Jobs[1]
			if g.Slice.Members != 2 || g.Slice.Count != 4 || len(g.MemberRuns) != 2 {
				t.Fatalf("gang %+v; want 2 members of 4, each run once", g)
			}
			if len(g.Runs) != 1 || g.Runs[0].Start != 102*sec || !g.Done || g.Finish != 152*sec {
				t.Errorf("gang ran %+v, done %v at %s; want one run from 102s to 152s", g.Runs, g.Done, g.Finish)
			}
			// Stock: member 0 placed at 10s holds its GPUs until member 1
			// is placed at 101s (busy's end) and starts at 102s.
			if p := figures.PartialPlacement(g, r.Horizon); p != tc.partial/2 {
				t.Errorf("partial placement %s member-seconds; want %s", p, tc.partial/2)
			}
			f := figures.Compute(r, figures.Options{})
			if want := (tc.partial * 4).Hours() / 2; f.PartialGPUHours != want {
				t.Errorf("partial GPU-hours %v; want %v", f.PartialGPUHours, want)
			}
			if f.WaitByKind[figures.KindGang].Mean != 92*sec {
				t.Errorf("gang waits %s; want 92s, to its members' both running", f.WaitByKind[figures.KindGang].Mean)
			}
		})
	}
}

// A member preempted: stock Nomad (no checkpoints) restarts the gang's
// work from scratch while the other member stalls holding its GPUs; with
// gangs and checkpoints both members stop, checkpointed, the gang waits as
// one and resumes losing nothing.
func TestGangPreemption(t *testing.T) {
	jobs := []tracereplay.Job{
		prio(wjob("gang", 0, 100*sec, 8), 20),
		prio(wjob("high", 30*sec, 50*sec, 4), 80),
	}
	for _, tc := range []struct {
		name             string
		f                tracereplay.Features
		finish, lost     time.Duration
		otherMemberRuns  int
		resumedFrom      time.Duration
		partialPositive  bool
		preemptedRecords int
	}{
		// Member placed on high's node stops at 30s (its run ends at
		// 32s); high runs 33s–83s; the member runs again at 84s and the
		// gang restarts from 0: 84s + 100s.
		{"stock", tracereplay.Features{Preemption: true}, 184 * sec, 31 * sec, 1, 0, true, 1},
		// Both stop at 30s (their runs end at 32s), 29s done since the
		// gang ran at 1s, 31s reached and saved at the commit (no
		// commit-to-exit latency); both placed at 83s, running at 84s;
		// 69s left → 153s.
		{"gangs", tracereplay.Features{Preemption: true, Checkpoints: true, Gangs: true}, 153 * sec, 0, 2, 31 * sec, false, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := mustRun(t, jobs, gangOptions(tc.f))
			g := r.Jobs[0]
			if !g.Done || g.Finish != tc.finish {
				t.Fatalf("gang done %v at %s; want done at %s (runs %+v)", g.Done, g.Finish, tc.finish, g.Runs)
			}
			if len(g.MemberRuns) != 2+tc.otherMemberRuns {
				t.Errorf("%d member runs %+v; want %d", len(g.MemberRuns), g.MemberRuns, 2+tc.otherMemberRuns)
			}
			if len(g.Runs) != 2 || g.Runs[1].Restored != tc.resumedFrom || g.Preemptions() != tc.preemptedRecords {
				t.Errorf("gang runs %+v; want 2, the second from %s", g.Runs, tc.resumedFrom)
			}
			f := figures.Compute(r, figures.Options{})
			if got := time.Duration(f.LostGPUHours / 8 * float64(time.Hour)).Round(time.Second); got != tc.lost {
				t.Errorf("lost %s of the gang's work; want %s", got, tc.lost)
			}
			if (f.PartialGPUHours > 0) != tc.partialPositive {
				t.Errorf("partial GPU-hours %v; want above 0: %v", f.PartialGPUHours, tc.partialPositive)
			}
		})
	}
}

// A stream of 1-GPU jobs of 20s, one every 5s, keeps both nodes' GPUs
// taken as they free: a gang of 2 × 4 arriving at 12s never finds both
// nodes free and waits to the horizon; with a reservation the placeholder
// takes each GPU as it frees on the two nodes and hands them over once it
// holds all 8, within a 1-GPU job's length or two. Its GPU-time held idle
// is counted.
func TestGangReservation(t *testing.T) {
	var jobs []tracereplay.Job
	for i := range 120 {
		jobs = append(jobs, wjob(string(rune('a'+i%26))+string(rune('a'+i/26)), time.Duration(i)*5*sec, 20*sec, 1))
	}
	jobs = append(jobs[:3:3], append([]tracereplay.Job{wjob("gang", 12*sec, 100*sec, 8)}, jobs[3:]...)...)
	for _, tc := range []struct {
		name     string
		f        tracereplay.Features
		startMax time.Duration
	}{
		{"without", tracereplay.Features{Gangs: true, Preemption: true}, -1},
		{"with", tracereplay.Features{Gangs: true, Reservations: true, Preemption: true}, 12*sec + 2*20*sec},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := gangOptions(tc.f)
			o.Horizon = 600 * sec
			r := mustRun(t, jobs, o)
			g := r.Jobs[3]
			f := figures.Compute(r, figures.Options{})
			if tc.startMax < 0 {
				if len(g.Runs) != 0 || f.Reservations != 0 {
					t.Fatalf("gang ran %+v without reservations (%d made); want it kept waiting by the stream", g.Runs, f.Reservations)
				}
				return
			}
			if len(g.Runs) == 0 || g.Runs[0].Start > tc.startMax {
				t.Fatalf("gang ran %+v; want a start by %s", g.Runs, tc.startMax)
			}
			if f.Reservations != 1 || f.ReservationIdleGPUHours <= 0 || f.PartialGPUHours != 0 {
				t.Errorf("%d reservations, %v idle GPU-hours, %v partial; want 1, above 0, 0", f.Reservations, f.ReservationIdleGPUHours, f.PartialGPUHours)
			}
			for _, j := range r.Jobs {
				if j.Arrival < 500*sec && !j.Done {
					t.Errorf("%s, arrived at %s, not done; the stream should go on around the gang", j.ID, j.Arrival)
				}
			}
		})
	}
}

// A reservation whose last node does not free holds the others' GPUs idle
// for ReservationMaxHold at most; its gang is not kept again for as long,
// and the work behind takes the GPUs it let go. A placeholder allocation
// preempted (by work ten above it) is counted, and its GPU taken again
// once it frees.
func TestReservationBounds(t *testing.T) {
	jobs := []tracereplay.Job{
		wjob("long", 0, 1000*sec, 4),                // node A, to 1001s
		wjob("short", 0, 10*sec, 4),                 // node B, to 11s
		wjob("gang", 5*sec, 50*sec, 8),              // 2 × 4: waits for A and B
		wjob("small", 50*sec, 10*sec, 1),            // waits behind the placeholder on B
		prio(wjob("urgent", 60*sec, 20*sec, 1), 80), // preempts a placeholder allocation
	}
	o := gangOptions(tracereplay.Features{Gangs: true, Reservations: true, Preemption: true, Checkpoints: true})
	o.Policy.ReservationMaxHold = 100 * sec
	o.Horizon = 400 * sec
	r := mustRun(t, jobs, o)
	f := figures.Compute(r, figures.Options{})
	if f.Reservations < 1 || len(r.Jobs[2].Runs) != 0 {
		t.Fatalf("%d reservations, gang runs %+v; want one made and the gang still waiting", f.Reservations, r.Jobs[2].Runs)
	}
	// Reserved at 5s; B's GPUs held from 11s (short's end) to 105s.
	if s := firstStart(r.Jobs[3]); s < 105*sec || s > 107*sec {
		t.Errorf("small started at %s; want once the reservation ends at 105s", s)
	}
	if s := firstStart(r.Jobs[4]); s > 64*sec || r.Jobs[4].PreemptingPlacements != 1 {
		t.Errorf("urgent started at %s, %d preempting placements; want at once, preempting a placeholder", s, r.Jobs[4].PreemptingPlacements)
	}
	// 4 GPUs from 11s to 105s, less urgent's: one held from 11s to 60s
	// and again from 80s (its end) — at most 4 × 94s.
	if max := 4 * 94 * sec; f.ReservationIdleGPUHours <= 0 || f.ReservationIdleGPUHours > max.Hours()+1e-9 {
		t.Errorf("reservation idle %v GPU-hours; want above 0, at most %v", f.ReservationIdleGPUHours, max.Hours())
	}
}

// With preemption Nomad's plan of a gang preempts lower work for it, and
// the controller admits it on that plan: a gang at priority 80 takes both
// nodes from two jobs at 20 at once; at 75 (less than 10 above one of
// them, at 70) it waits for that job's end.
func TestGangAdmittedByPreemption(t *testing.T) {
	for _, tc := range []struct {
		name      string
		other     int
		start     time.Duration
		preempted int
	}{
		{"both preemptable", 20, 13 * sec, 2},
		{"one not", 70, 102 * sec, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			jobs := []tracereplay.Job{
				prio(wjob("low", 0, 100*sec, 4), 20),
				prio(wjob("other", 0, 100*sec, 4), tc.other),
				prio(wjob("gang", 10*sec, 50*sec, 8), 80),
			}
			if tc.other == 70 {
				jobs[2] = prio(jobs[2], 75)
			}
			r := mustRun(t, jobs, gangOptions(tracereplay.Features{Gangs: true, Preemption: true, Checkpoints: true}))
			g := r.Jobs[2]
			if len(g.Runs) == 0 || g.Runs[0].Start != tc.start {
				t.Fatalf("gang runs %+v; want its first from %s", g.Runs, tc.start)
			}
			if got := r.Jobs[0].Preemptions() + r.Jobs[1].Preemptions(); got != tc.preempted || g.PreemptingPlacements != tc.preempted {
				t.Errorf("%d preemptions, %d preempting placements of the gang's members; want %d", got, g.PreemptingPlacements, tc.preempted)
			}
			if p := figures.PartialPlacement(g, r.Horizon); p != 0 {
				t.Errorf("partial placement %s; want none", p)
			}
		})
	}
}

// runtimeLevels.remaining is predict.Runtime for whole-GPU allocations,
// computed once per reservation round: the same answer on random
// histories, for random counts and elapsed times, duplicates, zero-length
// runs and too few runs included.
func TestRuntimeLevelsArePredictRuntime(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for trial := range 300 {
		s := &sim{}
		for i := range rng.IntN(12) {
			start := time.Duration(rng.IntN(1000)) * sec
			d := time.Duration(rng.IntN(6)) * 10 * sec // few values: duplicates
			s.res.history = append(s.res.history, history.Run{
				Key: history.Key{Job: "done-" + strconv.Itoa(i)}, Slice: history.Slice{Kind: "gpu", Count: 1 + rng.IntN(3)},
				Started: epoch.Add(start), Finished: epoch.Add(start + d), Outcome: history.OutcomeComplete,
			})
		}
		lv := s.runtimeLevels()
		for range 10 {
			count, elapsed := 1+rng.IntN(3), time.Duration(rng.IntN(7))*10*sec
			if rng.IntN(3) == 0 {
				elapsed += time.Duration(rng.IntN(1000)) * time.Millisecond
			}
			want := predict.Runtime(history.Key{Job: "running"}, history.Slice{Kind: "gpu", Count: count}, elapsed, s.res.history)
			got, ok := lv.remaining(count, elapsed)
			if ok != want.Known || got != want.Duration() {
				t.Fatalf("trial %d: %d GPUs, %s elapsed: %s, %v; predict.Runtime says %s, %v (%s)", trial, count, elapsed, got, ok, want.Duration(), want.Known, want.Basis)
			}
		}
	}
}

// Backfill on a reservation's GPUs (controller/backfill.go's rule): node
// X runs "a" (4 GPUs) to 401s, node Y is free from 311s; a gang of 2 × 4
// arriving at 300s is kept X and Y, due when a is predicted to end (its
// elapsed time again: 599s). A 1-GPU job predicted (three 1-GPU runs of
// 10s) to end well before that takes a kept GPU at once; one of the same
// shape above the reservation's priority is not let on and waits past
// the gang. With moves, a long job that checkpoints is let on too,
// counted toward the handover, and stopped by it, checkpointed, losing
// nothing. The gang starts once a ends either way.
func TestReservationBackfill(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    tracereplay.Features
		// job is the one arriving at 320s beside "above".
		job tracereplay.Job
	}{
		{"predicted to end before due", tracereplay.Features{Gangs: true, Reservations: true, Preemption: true, Checkpoints: true}, wjob("small", 320*sec, 10*sec, 1)},
		{"movable", tracereplay.Features{Gangs: true, Reservations: true, Preemption: true, Checkpoints: true, Moves: true}, wjob("movable", 320*sec, 300*sec, 1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			jobs := []tracereplay.Job{
				wjob("a", 0, 400*sec, 4),
				wjob("h1", 0, 10*sec, 1), wjob("h2", 0, 10*sec, 1), wjob("h3", 0, 10*sec, 1),
				wjob("b", 290*sec, 20*sec, 4),
				wjob("gang", 300*sec, 50*sec, 8),
				prio(wjob("above", 320*sec, 10*sec, 1), 55),
				tc.job,
			}
			o := gangOptions(tc.f)
			o.Horizon = 1500 * sec
			r := mustRun(t, jobs, o)
			f := figures.Compute(r, figures.Options{})
			gang, above, job := r.Jobs[5], r.Jobs[6], r.Jobs[7]
			if f.Reservations != 1 || firstStart(gang) < 401*sec || firstStart(gang) > 406*sec {
				t.Fatalf("%d reservations, gang starts at %s; want one, and a start once a ends at 401s", f.Reservations, firstStart(gang))
			}
			if s := firstStart(job); s < 320*sec || s > 325*sec || !job.Done {
				t.Errorf("%s starts at %s, done %v; want backfilled at once, and done", job.ID, s, job.Done)
			}
			if s := firstStart(above); s < firstStart(gang)+50*sec {
				t.Errorf("above starts at %s; want after the gang (from %s), not backfilled", s, firstStart(gang))
			}
			if tc.f.Moves && (len(job.Runs) != 2 || job.Runs[0].End > 403*sec || f.LostGPUHours != 0) {
				t.Errorf("movable runs %+v, lost %v GPU-hours; want stopped by the handover at 401s (in 2s), resumed, nothing lost", job.Runs, f.LostGPUHours)
			}
		})
	}
}

// rolledBackWindow is the Philly window of 2017-11-28 (bench-trace
// -start 2592h, its 18 jobs at the default load of 4 nodes), where a
// 1-node nomad-gpu pool once looped: the 8-GPU job, a gang of 2 × 4 with
// layouts, counted as room a 1-GPU job that a relayout will refuse,
// which its member's preemption does not take; its first member placed,
// its second found none, the roll-back freed the first's GPUs and the
// round ran again at the same instant, without end.
const rolledBackWindow = `id,arrival_s,duration_s,gpus,gpu_fraction,gpu_memory_mib,priority,gpu_util,team
philly-62759,3,24197,8,1,0,50,63.6,ee9e8c
philly-62816,90,71,1,1,0,50,66.8,11cb48
philly-62819,109,2,1,0.25,0,80,61.1,ee9e8c
philly-62815,690,71,1,0.25,0,50,90.9,11cb48
philly-62415,1264,60876,1,1,0,30,90.8,11cb48
philly-62813,1290,73,1,0.5,0,80,48.7,11cb48
philly-62812,1890,73,1,0.5,0,50,91.8,11cb48
philly-62811,2490,77,1,1,0,30,37.5,11cb48
philly-62810,3090,81,1,0.25,0,30,41.6,11cb48
philly-62809,3690,71,1,0.5,0,30,90.9,11cb48
philly-62807,4290,79,1,0.5,0,50,46.5,11cb48
philly-62806,4890,73,1,1,0,30,76.4,11cb48
philly-62788,5214,5085,1,1,0,30,81.4,11cb48
philly-62794,5462,3167,1,1,0,30,44.4,11cb48
philly-62802,5491,74,1,1,0,30,98.7,11cb48
philly-62801,6090,78,1,1,0,80,75.3,11cb48
philly-62798,6690,77,1,1,0,30,46.8,11cb48
philly-62797,6803,110,1,1,0,30,97.9,6c71a0
`

// TestGangRollBackEnds: nomad-gpu on a pool of one node, where a gang's
// admission counted room its members' preemptions do not find, ends (the
// model no longer loops: preemptable is one rule for both, and a gang
// rolled back waits for a later instant), the gang's members run a few
// times at most.
func TestGangRollBackEnds(t *testing.T) {
	path := filepath.Join(t.TempDir(), "window.csv")
	if err := os.WriteFile(path, []byte(rolledBackWindow), 0o644); err != nil {
		t.Fatal(err)
	}
	setup, o := setupOf(t, "-trace", path, "-window", "0", "-load", "0", "-compression", "25",
		"-min-nodes", "1", "-max-nodes", "1", "-configs", "nomad-gpu")
	r, err := Run(setup.Trace, o)
	if err != nil {
		t.Fatal(err)
	}
	g := r.Jobs[0]
	if g.Slice.Members != 2 || len(g.MemberRuns) == 0 || len(g.MemberRuns) > 20 {
		t.Errorf("the gang: %d members, %d member runs; want 2 members run, a few times at most", g.Slice.Members, len(g.MemberRuns))
	}
}
