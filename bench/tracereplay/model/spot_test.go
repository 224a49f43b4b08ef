package model

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nomad-gpu/nomad-gpu/bench/tracereplay"
	"github.com/nomad-gpu/nomad-gpu/bench/tracereplay/figures"
)

// spotOptions are a spot pool of nodes of 8 GPUs autoscaled by gpu-queue
// between lo and hi from nodes (the nodes above lo spot), with
// checkpointed preemption, moves, gangs and scale-in, reclaimed at rate
// a spot node-hour; a start of 1s, a stop of 2s, a boot of 30s.
func spotOptions(nodes, lo, hi int, rate float64) Options {
	o := autoscaled(tracereplay.AutoscaleGPUQueue, nodes, lo, hi)
	o.Cluster.SpotReclaimRate = rate
	o.Config = tracereplay.Config{Name: "nomad-gpu-spot", Features: tracereplay.Features{Preemption: true, Checkpoints: true, Moves: true,
		Gangs: true, ScaleIn: true, Autoscale: tracereplay.AutoscaleGPUQueue, Spot: true}}
	o.Policy.MoveBudgetHour, o.Policy.MoveBudgetJobDay = 100, 3
	o.Policy.MoveSettle, o.Policy.MoveHold = 30*sec, 60*sec
	o.Policy.ScaleInQuiet, o.Policy.ScaleInWait = 100*sec, 600*sec
	o.Latencies.Start, o.Latencies.Preempt = sec, 2*sec
	o.Horizon = 10 * time.Hour
	o.SampleEvery = 60 * sec
	o.Compression = 1
	return o
}

// checkReserved fails t where a sample has fewer reserved and on-demand
// nodes than the pool's minimum.
func checkReserved(t *testing.T, r tracereplay.Result) {
	t.Helper()
	for _, s := range r.Timeline {
		if s.Nodes-s.Spot < r.Cluster.MinNodes || s.Spot < 0 {
			t.Fatalf("at %s: %d nodes, %d spot: fewer than the %d reserved", s.At, s.Nodes, s.Spot, r.Cluster.MinNodes)
		}
	}
}

// Work that may not enter the spot pool (a gang's members) never runs on
// a spot node: when a gang arrives with the spot nodes free, it waits for
// the reserved node and an on-demand node its own group adds, while the
// checkpointing work ran on the spot nodes.
func TestSpotKeepsGangsOff(t *testing.T) {
	jobs := []tracereplay.Job{wjob("a", 0, 30*time.Minute, 8), wjob("b", 0, 30*time.Minute, 8), wjob("c", 0, 30*time.Minute, 8),
		wjob("gang", 30*time.Minute+5*sec, time.Hour, 12)} // 2 members of 6 GPUs
	for _, rate := range []float64{0, 2} {
		r := mustRun(t, jobs, spotOptions(3, 1, 6, rate))
		checkReserved(t, r)
		spot := map[string]bool{}
		for _, n := range r.SpotNodes {
			spot[n] = true
		}
		onSpot := 0
		for _, j := range r.Jobs {
			if j.Slice.Members > 1 {
				if len(j.MemberRuns) < 2 || !j.Done {
					t.Fatalf("rate %g: the gang did not run: %+v", rate, j)
				}
				for _, run := range j.MemberRuns {
					if spot[run.Node] {
						t.Errorf("rate %g: a gang member ran on spot node %s", rate, run.Node)
					}
				}
				continue
			}
			for _, run := range j.Runs {
				if spot[run.Node] {
					onSpot++
				}
			}
		}
		if onSpot == 0 {
			t.Errorf("rate %g: no checkpointing run on a spot node (spot nodes %v)", rate, r.SpotNodes)
		}
		if !slices.ContainsFunc(r.Notes, func(n string) bool {
			return strings.Contains(n, "on-demand nodes started") && !strings.Contains(n, "; 0 on-demand")
		}) {
			t.Errorf("rate %g: no on-demand node started for the gang; notes %q", rate, r.Notes)
		}
	}
}

// The pool's minimum stays reserved: the idle scale-in takes the newest
// idle nodes but a reserved or on-demand one only above the minimum; the
// scale-in by consolidation empties no such node at the minimum, and the
// removable check removes none.
func TestSpotMinimumStaysReserved(t *testing.T) {
	o := spotOptions(4, 2, 6, 0)
	o.Policy.ScaleInQuiet = 100 * sec
	// node-0 and node-1 reserved and idle, node-2 and node-3 spot, busy.
	s := placedSim(t, o, [][]int{{}, {}, {1}, {1}}, nil, 1000*sec)
	if got := s.spotIdle([]int32{0, 1}); len(got) != 0 {
		t.Errorf("idle reserved nodes at the minimum: scale-in may take %v; want none", got)
	}
	s.scaleIn(2)
	if s.nReady != 4 {
		t.Errorf("scale-in at the minimum removed %d nodes; want none", 4-s.nReady)
	}
	s.si.lastQueued = 0
	s.emptyNode()
	if s.si.remove && !s.nodes[s.moves.held].spot {
		t.Errorf("emptied reserved %s at the minimum", s.names[s.moves.held])
	}

	// One on-demand node above the minimum: the newest idle one goes.
	s = placedSim(t, o, [][]int{{}, {}, {1}, {1}}, nil, 1000*sec)
	od := s.addNode()
	s.setReady(od)
	if got := s.spotIdle([]int32{0, 1, od}); !slices.Equal(got, []int32{od}) {
		t.Errorf("idle nodes the scale-in may take: %v; want [%d], one above the minimum", got, od)
	}
	s.scaleIn(2)
	if s.nodes[od].state != nodeRemoving || s.nodes[0].state != nodeReady || s.nodes[1].state != nodeReady {
		t.Errorf("scale-in by 2: states %d %d %d; want the on-demand node removed, the reserved ones kept", s.nodes[0].state, s.nodes[1].state, s.nodes[od].state)
	}

	// The removable check: a reserved node marked for removal at the
	// minimum stays.
	s = placedSim(t, o, [][]int{{}, {}, {1}, {1}}, nil, 1000*sec)
	s.moves.held, s.si.remove, s.si.markedAt = 1, true, 0
	if got := s.removable(); got >= 0 {
		t.Errorf("removable: %s at the minimum", s.names[got])
	}
	s.moves.held = 2
	if got := s.removable(); got != 2 {
		t.Errorf("removable: %d; want spot node-2", got)
	}
}

// A reclaimed spot node's work is stopped on the notice, commits its
// checkpoint and resumes elsewhere from it (nothing lost, in the model),
// after waiting again; the node is gone two minutes later, and the
// autoscaler starts another for the queue. The draws are the seed's.
func TestSpotReclaims(t *testing.T) {
	var jobs []tracereplay.Job
	for i := range 24 {
		jobs = append(jobs, wjob("j"+string(rune('a'+i)), time.Duration(i)*sec, 4*time.Hour, 1+i%3))
	}
	run := func(rate float64, seed int64) tracereplay.Result {
		o := spotOptions(3, 1, 6, rate)
		o.Seed = seed
		return mustRun(t, jobs, o)
	}
	r := run(2, 1)
	checkReserved(t, r)
	if again := run(2, 1); !reflect.DeepEqual(again, r) {
		t.Fatal("two runs of one seed differ")
	}
	spot := map[string]bool{}
	for _, n := range r.SpotNodes {
		spot[n] = true
	}
	reclaims := 0
	for _, j := range r.Jobs {
		for i, run := range j.Runs {
			if !run.SpotReclaimed {
				continue
			}
			reclaims++
			if run.Preempted || run.Moved || !spot[run.Node] || !run.Checkpointed || run.End-run.Saved > run.Start+2*sec {
				t.Errorf("%s: reclaimed run %+v: want stopped on a spot node, checkpointed at its stop", j.ID, run)
			}
			if i+1 < len(j.Runs) {
				next := j.Runs[i+1]
				if next.Restored != run.Saved || next.Node == run.Node || next.Start < run.End {
					t.Errorf("%s: after the reclaim %+v, run %+v: want it resumed from its commit elsewhere", j.ID, run, next)
				}
			}
		}
	}
	f := figures.Compute(r, figures.Options{})
	if reclaims == 0 || f.SpotReclaims != reclaims || f.LostGPUHours != 0 || f.SpotLostGPUHours != 0 || f.SpotReclaimGPUHours <= 0 {
		t.Errorf("reclaims %d; figures: %d reclaims, %v lost GPU-hours (%v to reclaims), %v reclaim GPU-hours; want as many, none lost, some waiting",
			reclaims, f.SpotReclaims, f.LostGPUHours, f.SpotLostGPUHours, f.SpotReclaimGPUHours)
	}
	// A reclaimed node leaves the spot count two minutes after its notice.
	if len(r.SpotNodes) <= 2 {
		t.Errorf("spot nodes %v: the autoscaler started none after the reclaims", r.SpotNodes)
	}
	if other := run(2, 2); reflect.DeepEqual(other.Jobs, r.Jobs) {
		t.Error("another seed gives the same runs")
	}
	if none := run(0, 1); figures.Compute(none, figures.Options{}).SpotReclaims != 0 {
		t.Error("rate 0: reclaims")
	}
}

// Where the stop outlasts the notice, the node is gone before the task
// commits: it keeps what it restored, and the work since is lost.
func TestSpotReclaimBeforeCommit(t *testing.T) {
	jobs := []tracereplay.Job{wjob("a", 0, 8*time.Hour, 8), wjob("b", 0, 8*time.Hour, 8)}
	o := spotOptions(2, 1, 2, 3)
	o.Latencies.Preempt = 3 * time.Minute
	r := mustRun(t, jobs, o)
	killed := 0
	for _, j := range r.Jobs {
		for i, run := range j.Runs {
			if !run.SpotReclaimed || i+1 >= len(j.Runs) {
				continue
			}
			killed++
			if run.Checkpointed || j.Runs[i+1].Restored != run.Restored || run.Reached-run.Restored != run.End-run.Start {
				t.Errorf("%s: reclaimed run %+v, next %+v: want killed at the notice's end, resumed from its restore", j.ID, run, j.Runs[i+1])
			}
		}
	}
	if f := figures.Compute(r, figures.Options{}); killed == 0 || f.SpotLostGPUHours <= 0 || f.SpotLostGPUHours != f.LostGPUHours {
		t.Errorf("%d killed, lost GPU-hours %v (%v to reclaims); want some lost, all to reclaims", killed, f.LostGPUHours, f.SpotLostGPUHours)
	}
}

func TestSpotValidation(t *testing.T) {
	tr := tracereplay.Trace{Jobs: []tracereplay.Job{wjob("a", 0, sec, 1)}}
	for _, tc := range []struct {
		name string
		edit func(*Options)
		want string
	}{
		{"without gangs", func(o *Options) { o.Config.Gangs = false }, "spot without gangs"},
		{"with reservations", func(o *Options) { o.Config.Reservations = true }, "spot without gangs, or with reservations"},
		{"without checkpoints", func(o *Options) { o.Config.Checkpoints, o.Config.Moves, o.Config.ScaleIn = false, false, false }, "spot: on without checkpoints"},
		{"target-value", func(o *Options) { o.Config.Autoscale, o.Config.ScaleIn = tracereplay.AutoscaleTargetValue, false }, "spot: on without checkpoints or gpu-queue"},
		{"a negative rate", func(o *Options) { o.Cluster.SpotReclaimRate = -1 }, "spot_reclaim_rate: -1"},
	} {
		o := spotOptions(2, 1, 4, 0.05)
		tc.edit(&o)
		if _, err := Run(tr, o); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v; want one with %q", tc.name, err, tc.want)
		}
	}
}

// On the notice the node takes no work at once and its allocations are
// stopped, each waiting again; the node is gone spotNotice later, and is
// a spot node's node-hours until then.
func TestSpotReclaimNotice(t *testing.T) {
	o := spotOptions(2, 1, 2, 0)
	s := placedSim(t, o, [][]int{{}, {2, 1}}, map[string]bool{"n1-1": true}, 1000*sec)
	if !s.nodes[1].spot || s.nodes[0].spot {
		t.Fatalf("spot: node-0 %v, node-1 %v; want node-1 only", s.nodes[0].spot, s.nodes[1].spot)
	}
	s.reclaim(1)
	if n := &s.nodes[1]; n.state != nodeRemoving || len(n.allocs) != 0 || s.nReady != 1 {
		t.Fatalf("node-1 state %d with %d allocations, %d ready; want it removing, empty", n.state, len(n.allocs), s.nReady)
	}
	for id := range 2 {
		if j := &s.jobs[id]; j.state != jobWaiting || j.evalAt != s.now {
			t.Errorf("%s: state %d, evaluated at %s; want waiting again, a new evaluation now", s.recs[id].ID, j.state, j.evalAt)
		}
	}
	if runs := s.recs[0].Runs; len(runs) != 1 || !runs[0].SpotReclaimed || runs[0].End != s.now+2*sec || runs[0].Saved != runs[0].Reached {
		t.Errorf("the running job's runs %+v; want one, reclaimed, its checkpoint committed as it stopped 2s later", runs)
	}
	if len(s.recs[1].Runs) != 0 {
		t.Errorf("the job not yet started has runs %+v", s.recs[1].Runs)
	}
	gone := slices.IndexFunc(s.events, func(e event) bool { return e.kind == evNodeGone && e.id == 1 })
	if gone < 0 || s.events[gone].t != s.now+spotNotice {
		t.Fatalf("node-1's removal: event %d; want it gone at %s", gone, s.now+spotNotice)
	}
	if s.spot.up != 1 || s.spot.live != 0 {
		t.Errorf("spot nodes up %d, booting or ready %d; want 1 until it is gone, 0", s.spot.up, s.spot.live)
	}
}
