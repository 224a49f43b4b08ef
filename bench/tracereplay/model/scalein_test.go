package model

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nomad-gpu/nomad-gpu/bench/tracereplay"
	"github.com/nomad-gpu/nomad-gpu/controller/consolidate"
)

// scalingIn are the options of the scale-in tests: nodes of 4 GPUs,
// autoscaled by gpu-queue between lo and hi from nodes, with checkpointed
// preemption, moves and scale-in by consolidation after quiet; a start of
// 1s, a stop of 2s, a boot of 30s, a removal of 10s.
func scalingIn(nodes, lo, hi int, quiet time.Duration) Options {
	o := autoscaled(tracereplay.AutoscaleGPUQueue, nodes, lo, hi)
	o.Cluster.GPUsPerNode = 4
	o.Config.Features = tracereplay.Features{Preemption: true, Checkpoints: true, Moves: true, ScaleIn: true, Autoscale: tracereplay.AutoscaleGPUQueue}
	o.Policy.MoveBudgetHour, o.Policy.MoveBudgetJobDay = 100, 3
	o.Policy.MoveSettle, o.Policy.MoveHold = 30*sec, 60*sec
	o.Policy.ScaleInQuiet, o.Policy.ScaleInWait = quiet, 600*sec
	o.Latencies.Start, o.Latencies.Preempt = sec, 2*sec
	o.Compression = 1
	return o
}

// placedSim is a sim of o whose trace is one job per entry of onNode,
// each asking for the GPUs given (a negative count: a quarter of a GPU,
// for a configuration with slices) and placed on its node, started at 0
// (pending where the count is in pending), at now; no event has run.
func placedSim(t *testing.T, o Options, onNode [][]int, pending map[string]bool, now time.Duration) *sim {
	t.Helper()
	var jobs []tracereplay.Job
	var where []int32
	for n, gpus := range onNode {
		for i, g := range gpus {
			id := fmt.Sprintf("n%d-%d", n, i)
			j := wjob(id, 0, 100000*sec, g)
			if g < 0 {
				j = frac(id, 0, 100000*sec, 0.25)
			}
			jobs = append(jobs, j)
			where = append(where, int32(n))
		}
	}
	tr := tracereplay.Trace{Jobs: jobs}
	if err := validate(tr, &o); err != nil {
		t.Fatal(err)
	}
	s := newSim(tr, o)
	for id := range jobs {
		s.place(int32(id), where[id], 0)
		if !pending[jobs[id].ID] {
			s.handle(event{kind: evRun, id: int32(id), epoch: s.jobs[id].epoch})
		}
	}
	s.now = now
	return s
}

// TestScaleInChoice: the round's choice of node, as the controller's
// consolidate.Empty makes it on the model's state, and the rules around
// it: the quiet period, the pool's minimum, work that may not move.
func TestScaleInChoice(t *testing.T) {
	const quiet = 100 * sec
	tests := []struct {
		name   string
		onNode [][]int // the GPUs of each job, by node (node-0, node-1, …); -1: a quarter GPU's MPS shares
		lo     int
		// edit changes the sim before the round.
		edit func(s *sim)
		// want is the node emptied, "" for none; moves the jobs moved.
		want  string
		moves int
	}{
		{name: "the least loaded node: the fewest moves", onNode: [][]int{{1, 1, 1}, {1}, {2, 1}}, lo: 1, want: "node-1", moves: 1},
		{name: "of as many moves, the fewest GPUs", onNode: [][]int{{2}, {1}, {3}}, lo: 1, want: "node-1", moves: 1},
		{name: "a node running nothing first", onNode: [][]int{{1}, {}, {1, 1}}, lo: 1, want: "node-1"},
		{name: "its work must fit the others' free GPUs", onNode: [][]int{{4}, {3}, {2, 2}}, lo: 1},
		// node-1's 2 GPUs are as many as the others' free GPUs, not on
		// one node; node-2's 2 and 1 fit node-1's 2 and node-0's 1.
		{name: "each allocation fits one node", onNode: [][]int{{3}, {2}, {2, 1}}, lo: 1, want: "node-2", moves: 2},
		{name: "quiet honoured: work queued a moment ago", onNode: [][]int{{1}, {1}, {1}}, lo: 1,
			edit: func(s *sim) { s.si.lastQueued = s.now - quiet/2 }},
		{name: "quiet honoured: work queued a quiet period ago", onNode: [][]int{{1}, {1}, {1}}, lo: 1, want: "node-0", moves: 1,
			edit: func(s *sim) { s.si.lastQueued = s.now - quiet }},
		{name: "quiet honoured per node: one that took work back waits again", onNode: [][]int{{1}, {1}, {1}}, lo: 1, want: "node-1", moves: 1,
			edit: func(s *sim) { s.nodes[0].wanted = s.now - 1 }},
		{name: "min nodes honoured", onNode: [][]int{{1}, {1}, {}}, lo: 3},
		{name: "above min nodes", onNode: [][]int{{1}, {1}, {}}, lo: 2, want: "node-2"},
		{name: "a held node does not count toward the minimum", onNode: [][]int{{1}, {1}, {1}}, lo: 2,
			edit: func(s *sim) { s.nodes[2].ineligible = true }},
		{name: "pinned: a job not started yet", onNode: [][]int{{1, 1}, {1}, {1, 1}}, lo: 1, want: "node-0", moves: 2},
		{name: "pinned: a protected job", onNode: [][]int{{1, 1}, {1}, {2}}, lo: 1, want: "node-2", moves: 1,
			edit: func(s *sim) { s.setPrio(s.nodes[1].allocs[0], 80) }},
		{name: "pinned: a job at its move budget", onNode: [][]int{{1, 1}, {1}, {2}}, lo: 1, want: "node-2", moves: 1,
			edit: func(s *sim) { s.jobs[s.nodes[1].allocs[0]].moves = 3 }},
		{name: "pinned everywhere: nothing", onNode: [][]int{{1}, {1}}, lo: 1,
			edit: func(s *sim) {
				for _, nid := range []int{0, 1} {
					s.jobs[s.nodes[nid].allocs[0]].moves = 3
				}
			}},
		{name: "the hour's budget spent: only a node running nothing", onNode: [][]int{{1}, {1}, {}}, lo: 1, want: "node-2",
			edit: func(s *sim) { s.moves.rounds = make([]time.Duration, 100) }},
		{name: "the hour's budget spent: no move", onNode: [][]int{{1}, {1}, {1}}, lo: 1,
			edit: func(s *sim) {
				for range 100 {
					s.moves.rounds = append(s.moves.rounds, s.now-time.Minute)
				}
			}},
		{name: "a consolidation for queued work under way", onNode: [][]int{{1}, {1}, {}}, lo: 1,
			edit: func(s *sim) { s.moves.held = 0 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := scalingIn(len(tt.onNode), tt.lo, len(tt.onNode), quiet)
			pending := map[string]bool{}
			if tt.name == "pinned: a job not started yet" {
				pending["n1-0"] = true
			}
			s := placedSim(t, o, tt.onNode, pending, 1000*sec)
			if tt.edit != nil {
				tt.edit(s)
			}
			s.scaleInRound()
			got := ""
			if s.si.remove {
				got = s.names[s.moves.held]
			}
			if got != tt.want || len(s.moves.moved) != tt.moves && got != "" {
				t.Fatalf("emptied %q moving %d jobs; want %q moving %d", got, len(s.moves.moved), tt.want, tt.moves)
			}
			if got == "" {
				return
			}
			nid := s.moves.held
			if !s.nodes[nid].ineligible {
				t.Error("the emptied node is not held ineligible")
			}
			for _, id := range s.moves.moved {
				if j := s.jobs[id]; j.state != jobWaiting || j.moves != 1 || !s.lastRun(id).Moved {
					t.Errorf("moved %s: state %d, moves %d, run %+v; want waiting again, moved once", s.recs[id].ID, j.state, j.moves, *s.lastRun(id))
				}
			}
			if len(s.nodes[nid].allocs) != 0 {
				t.Errorf("the emptied node still holds %d allocations", len(s.nodes[nid].allocs))
			}
		})
	}
}

// TestScaleInPinnedByShares: a node running MPS shares is never emptied
// (a share is not moved), however little it runs.
func TestScaleInPinnedByShares(t *testing.T) {
	o := scalingIn(3, 1, 3, 100*sec)
	o.Cluster.MPSGPUs, o.Cluster.MPSShares = 1, 4
	o.Config.Slices = true
	s := placedSim(t, o, [][]int{{1, 1}, {-1}, {1, 1, 1}}, nil, 1000*sec)
	s.emptyNode()
	if !s.si.remove || s.names[s.moves.held] != "node-0" {
		t.Fatalf("emptied %v (held %d); want node-0, node-1 being pinned by its share", s.si.remove, s.moves.held)
	}
}

// TestScaleInHold: the emptied node is marked once its moved jobs run
// elsewhere and their tasks have exited; queued work, or the wait's end,
// gives it back, and it waits a quiet period again before it may be
// emptied again.
func TestScaleInHold(t *testing.T) {
	const quiet = 100 * sec
	for _, tt := range []struct {
		name string
		// queue is a job queued after the pass that places the moved ones.
		queue bool
		wait  bool // the wait is up
		// marked: the node is marked; back: it took work again.
		marked, back bool
	}{
		{name: "marked", marked: true},
		{name: "queued work stops it", queue: true, back: true},
		{name: "the wait's end stops it", wait: true, back: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o := scalingIn(3, 1, 3, quiet)
			s := placedSim(t, o, [][]int{{1, 1}, {1}, {1, 1}}, nil, 1000*sec)
			if !s.scaleInRound() || s.names[s.moves.held] != "node-1" {
				t.Fatalf("no work moved off node-1 (held %d)", s.moves.held)
			}
			nid := s.moves.held
			s.dirty = false
			s.schedule() // places the moved job elsewhere
			if j := s.jobs[s.moves.moved[0]]; j.state != jobPending || j.node == nid {
				t.Fatalf("moved job: state %d on node %d; want placed off node-1", j.state, j.node)
			}
			if s.si.markedAt >= 0 {
				t.Fatal("marked before the moved task exited")
			}
			s.now += s.preemptDelay
			switch {
			case tt.queue:
				s.si.queued = true // the last pass left work queued
			case tt.wait:
				s.now = s.si.since + s.si.wait
			}
			s.scaleInHold()
			if got := s.si.markedAt >= 0; got != tt.marked {
				t.Errorf("marked %v, want %v", got, tt.marked)
			}
			if back := !s.si.remove && !s.nodes[nid].ineligible && s.moves.held < 0; back != tt.back {
				t.Fatalf("given back %v, want %v", back, tt.back)
			}
			if !tt.back {
				return
			}
			if s.nodes[nid].wanted != s.now {
				t.Errorf("given back at %s, first seen again at %s", s.now, s.nodes[nid].wanted)
			}
			// Long quiet otherwise, it running nothing: within a quiet
			// period of its return, the round leaves it alone.
			s.si.queued, s.si.lastQueued, s.si.tried = false, 0, false
			s.now += quiet - 1
			s.emptyNode()
			if s.si.remove && s.moves.held == nid {
				t.Error("emptied again within the quiet period")
			}
		})
	}
}

// TestScaleInRemovable: gpu-queue's removable check removes the marked
// node one evaluation after the mark, out of cooldown, not below the
// pool's minimum, and not while it scales out.
func TestScaleInRemovable(t *testing.T) {
	for _, tt := range []struct {
		name    string
		lo      int
		since   time.Duration // the mark, before the evaluation
		cooling bool
		needed  bool // work no node has room for waits
		removed bool
	}{
		{name: "one evaluation after the mark", lo: 1, since: 10 * sec, removed: true},
		{name: "marked since the last evaluation", lo: 1, since: 5 * sec},
		{name: "cooling down", lo: 1, since: 10 * sec, cooling: true},
		{name: "at the pool's minimum", lo: 3, since: 10 * sec},
		{name: "a scale-out wins", lo: 1, since: 10 * sec, needed: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o := scalingIn(3, tt.lo, 4, 100*sec)
			s := placedSim(t, o, [][]int{{4}, {}, {4}}, nil, 1000*sec)
			s.emptyNode()
			if tt.lo < 3 && (!s.si.remove || s.si.markedAt != s.now) {
				t.Fatalf("node-1 not emptied and marked at once (held %d, marked at %s)", s.moves.held, s.si.markedAt)
			}
			if tt.lo == 3 { // the round leaves the pool's minimum alone: empty it by hand
				s.startScaleIn(consolidate.Plan{Node: consolidate.Node{ID: "node-1", Name: "node-1", Free: 4}})
			}
			s.now += tt.since
			if tt.cooling {
				s.hasAction, s.lastAction = true, s.now-sec
			}
			if tt.needed { // a 4-GPU job waits (in node-0's job's sub-queue)
				s.jobs = append(s.jobs, job{g: wholeGroup, k: 4, units: 4 * s.groups[wholeGroup].units, base: 50, prio: 50,
					evalAt: s.now, node: -1, allocPos: -1, sq: s.jobs[0].sq, qi: -1, mig: -1, avoid: -1, gang: -1})
				s.enqueue(int32(len(s.jobs) - 1))
			}
			s.autoscale()
			gone := s.nodes[1].state == nodeRemoving
			if gone != tt.removed {
				t.Fatalf("node-1 removing %v, want %v", gone, tt.removed)
			}
			if tt.needed && s.nBooting == 0 {
				t.Error("no scale-out for the waiting job")
			}
			if gone && (s.moves.held != 1 || s.si.removed != 1) {
				t.Errorf("the hold ended before the node is gone (held %d, removed %d)", s.moves.held, s.si.removed)
			}
		})
	}
}

// TestScaleInEndToEnd: three 1-GPU jobs, one on each node of an
// autoscaled pool (each arrives when a 3-GPU job leaves one GPU free on
// each). gpu-queue's own scale-in removes only idle nodes, so without
// consolidation every node that runs one stays; with it the controller
// moves them onto one node once the pool has been quiet, and the
// removable check removes the others at once. Nothing moves before the
// quiet period, no progress is lost, and the pool keeps its minimum.
func TestScaleInEndToEnd(t *testing.T) {
	const quiet = 200 * sec
	var jobs []tracereplay.Job
	for i := range 3 {
		jobs = append(jobs, wjob(fmt.Sprintf("big%d", i), 0, 100*sec, 3))
	}
	for i := range 3 {
		jobs = append(jobs, wjob(fmt.Sprintf("small%d", i), 10*sec, 5000*sec, 1))
	}
	run := func(scaleIn bool) tracereplay.Result {
		o := scalingIn(3, 1, 3, quiet)
		o.Policy.IdleFloor = 0.01 // gpu-queue's idle rule removes no node here
		o.Config.ScaleIn = scaleIn
		return mustRun(t, jobs, o)
	}
	without, with := run(false), run(true)
	nodes := map[string]bool{}
	for _, j := range without.Jobs[3:] {
		nodes[j.Runs[0].Node] = true
	}
	if len(nodes) != 3 {
		t.Fatalf("the small jobs ran on %v; want one on each node", nodes)
	}
	if n := without.Timeline[len(without.Timeline)-1].Nodes; n != 3 {
		t.Errorf("without scale-in: %d nodes at the end, want 3", n)
	}
	last := with.Timeline[len(with.Timeline)-1]
	if last.Nodes != 1 || last.Allocated != 3 {
		t.Errorf("with scale-in: %+v at the end; want the 3 jobs on 1 node", last)
	}
	if with.NodeHours() >= without.NodeHours() {
		t.Errorf("node-hours %.3f with scale-in, %.3f without; want fewer", with.NodeHours(), without.NodeHours())
	}
	moved := 0
	for _, j := range with.Jobs {
		for i, r := range j.Runs {
			if !r.Moved {
				continue
			}
			moved++
			if r.End < quiet {
				t.Errorf("%s moved at %s, within the quiet period %s", j.ID, r.End, quiet)
			}
			if next := j.Runs[i+1]; next.Restored != r.Saved || r.Node == next.Node {
				t.Errorf("%s moved: saved %s, restored %s, from %s to %s", j.ID, r.Saved, next.Restored, r.Node, next.Node)
			}
		}
	}
	for _, j := range with.Jobs[3:] {
		if !j.Runs[len(j.Runs)-1].Open {
			t.Errorf("%s not running at the horizon", j.ID)
		}
	}
	if moved != 2 {
		t.Errorf("%d runs moved, want 2 (one node keeps its job)", moved)
	}
	for _, smp := range with.Timeline {
		if smp.Nodes < 1 {
			t.Fatalf("at %s: %d nodes, below the minimum", smp.At, smp.Nodes)
		}
	}
	want := "scale-in by consolidation: 2 nodes emptied for removal (2 by moving 2 runs off them), 2 removed by the autoscaler's removable check, 0 took work again"
	if !slices.Contains(with.Notes, want) {
		t.Errorf("notes %q; want %q", with.Notes, want)
	}
}

// TestScaleInGivenBack: a 4-GPU job arrives while the first emptied node
// waits for its removal, and no other node has 4 GPUs free: queued work
// could use the node, so the controller gives it back, and the job runs
// there at once instead of waiting for a new node to boot.
func TestScaleInGivenBack(t *testing.T) {
	var jobs []tracereplay.Job
	for i := range 3 {
		jobs = append(jobs, wjob(fmt.Sprintf("big%d", i), 0, 100*sec, 3))
	}
	for i := range 3 {
		jobs = append(jobs, wjob(fmt.Sprintf("small%d", i), 10*sec, 5000*sec, 1))
	}
	// The first node is emptied at 200s, marked at 202s and would go at
	// the evaluation of 220s.
	jobs = append(jobs, wjob("late", 205*sec, 100*sec, 4))
	o := scalingIn(3, 1, 3, 200*sec)
	o.Policy.IdleFloor = 0.01
	r := mustRun(t, jobs, o)
	held := ""
	for _, j := range r.Jobs {
		for _, run := range j.Runs {
			if run.Moved && (held == "" || run.End < 210*sec) {
				held = run.Node
			}
		}
	}
	late := r.Jobs[6]
	if len(late.Runs) == 0 || late.Runs[0].Node != held || late.Runs[0].Start != 206*sec {
		t.Fatalf("late ran %+v; want at 206s on %s, the node emptied for removal and given back", late.Runs, held)
	}
	if !slices.ContainsFunc(r.Notes, func(n string) bool { return strings.HasSuffix(n, ", 1 took work again") }) {
		t.Errorf("notes %q; want the node given back once", r.Notes)
	}
}
