package model

import (
	"slices"
	"time"

	"github.com/nomad-gpu/nomad-gpu/controller/consolidate"
)

// Scale-in by consolidation (Features.ScaleIn), the controller's
// (controller/scalein.go) on the model's state, with the move module's
// machinery: its hold (moveState.held, which keeps consolidations for
// queued work off while it lasts, as Mover.hold does), its candidates
// (moveCandidates: who may move), its stops (stopRun, as a move) and its
// budgets. What the model decides with is the controller's own choice,
// consolidate.Empty. Its rules:
//
//   - Quiet. A node is quiet once no queued work could use it for
//     Policy.ScaleInQuiet × compression: in the model every waiting job,
//     and every gang waiting for admission, could use any node (one pool,
//     one GPU model, and layouts make shares of any GPU). A queue is what
//     a pass leaves waiting (Nomad's blocked evaluations, which the
//     controller reads): a job placed at its arrival was never queued. A
//     node is first seen when it becomes ready, and after it took work
//     back; either starts its quiet period again.
//   - The round runs after each scheduler pass, at each autoscaler
//     evaluation (the controller's tick, which also sees starts) and when
//     a quiet period ends. With no hold and no consolidation for queued
//     work under way, and more schedulable nodes (ready, not held, no GPU
//     being relaid) than Cluster.MinNodes (the controller's
//     -scale-in-min-nodes, the policy's min), it hands consolidate.Empty
//     those nodes with their free whole GPUs, the whole-GPU allocations
//     judged movable as for a consolidation (moveCandidates; none once the
//     hour's budget is spent), and as candidates the quiet nodes running
//     whole-GPU allocations only (a share pins its node, as anything not
//     movable does).
//   - A plan holds its node ineligible and stops its jobs as moves (they
//     wait again, keep what their checkpoints saved, and are placed
//     elsewhere by the next pass; a plan that moves something counts
//     against the hour's budget, each job against its own). Once every
//     moved job is placed and their tasks have exited (Latencies.Preempt
//     after the stops), the node runs nothing and is marked.
//   - gpu-queue's removable check then removes it at its first evaluation
//     that does not scale out, out of cooldown, one evaluation after the
//     mark (the checks run before the removable one read the last
//     evaluation's value, and a scale-in needs every check's vote), within
//     the pool's minimum (scale.go).
//   - The node takes work again when a pass leaves work queued (work that
//     could use it) or Policy.ScaleInWait × compression passed without the
//     autoscaler removing it; its quiet period starts again. The hold ends
//     when the node is gone.

// scaleInState is the scale-in round's state beside the move module's.
type scaleInState struct {
	// remove: the move module's hold is a node emptied for removal;
	// since when it was made, exited when the tasks moved off it have
	// exited, markedAt when it was marked (-1: not yet).
	remove                  bool
	since, exited, markedAt time.Duration
	// queued: the last pass left work queued; lastQueued the last time
	// work was queued.
	queued     bool
	lastQueued time.Duration
	// Trace-time figures: Policy.ScaleInQuiet and ScaleInWait.
	quiet, wait time.Duration
	// kicks counts the quiet periods ended (evScaleIn) and starts the
	// jobs started: with the capacity versions and the hour's budget they
	// tell whether a round that found no node to empty could find one
	// now (tried, failed).
	kicks, starts uint64
	tried         bool
	failed        scaleInKey
	// Counts for the notes: nodes emptied, of them by moves, runs moved,
	// nodes removed, nodes given back.
	emptied, byMoves, moved, removed, givenBack int
}

// scaleInKey is what can turn a round that found no node to empty into
// one that finds one: capacity freed (a finish, a node ready, a hold
// ended, a raise or an exemption over, a relayout applied), a job started
// (it may move now), a quiet period ended, the hour's budget freed.
type scaleInKey struct {
	capSum, kicks, starts uint64
	recent                int
}

// queuedWork says whether work waits that could use any node: a waiting
// job, or a gang waiting for admission.
func (s *sim) queuedWork() bool { return s.waiting > 0 || len(s.gangQueue) > 0 }

// afterPass is what follows a scheduler pass with scale-in on: the queue
// as the controller reads it (what the pass left waiting), then its
// round; true when the round stopped work (another pass places it).
func (s *sim) afterPass() bool {
	si := &s.si
	if si.queued {
		si.lastQueued = s.now // queued until this pass, at least
	}
	was := si.queued
	si.queued = s.queuedWork()
	if si.queued {
		si.lastQueued = s.now
	} else if was {
		s.push(s.now+si.quiet, evScaleIn, 0, 0)
	}
	return s.scaleInRound()
}

// scaleInRound is the controller's scale-in round: it follows a node held
// for removal (scaleInHold), else plans the emptying of one; true when it
// stopped work.
func (s *sim) scaleInRound() bool {
	if s.moves.held >= 0 {
		if s.si.remove {
			s.scaleInHold()
		}
		if s.moves.held >= 0 {
			return false
		}
	}
	return s.emptyNode()
}

// wantedAt is the last time queued work could use node nid, or it was
// first seen or took work back.
func (s *sim) wantedAt(nid int32) time.Duration {
	if s.si.queued {
		return s.now
	}
	return max(s.nodes[nid].wanted, s.si.lastQueued)
}

// emptyNode empties one quiet node above the pool's minimum, if
// consolidate.Empty finds one whose work all moves now; true when it
// stopped work.
func (s *sim) emptyNode() bool {
	m := &s.moves
	if m.forJob >= 0 {
		if f := &s.jobs[m.forJob]; f.state == jobWaiting && s.now-m.forSince < m.settle {
			return false // a consolidation for queued work is under way
		}
		m.forJob = -1
	}
	if s.si.queued || s.now-s.si.lastQueued < s.si.quiet {
		return false // no node is quiet
	}
	recent := s.movesThisHour()
	key := scaleInKey{kicks: s.si.kicks, starts: s.si.starts, recent: recent}
	for _, v := range s.capVer {
		key.capSum += v
	}
	if s.si.tried && key == s.si.failed {
		return false // nothing changed that could empty a node
	}
	s.si.tried, s.si.failed = true, key
	// The schedulable nodes (the controller's groupWholeGPUs), their free
	// whole GPUs, the two most on one node, and the quiet ones running
	// whole-GPU allocations only (a share or a MIG instance is not moved:
	// it pins its node), in name order.
	schedulable, free, top1, top2 := 0, 0, 0, 0
	var quiet []quietNode
	spent := recent >= s.o.Policy.MoveBudgetHour
	for _, nid := range s.byName {
		n := &s.nodes[nid]
		if n.state != nodeReady || !s.moveNode(n) {
			continue
		}
		schedulable++
		f := n.free[wholeGroup]
		free += f
		if f > top1 {
			top1, top2 = f, top1
		} else if f > top2 {
			top2 = f
		}
		if s.now-s.wantedAt(nid) < s.si.quiet || !s.mayRemove(nid) {
			continue // not quiet, or a node of the reserved minimum (spot.go)
		}
		q := quietNode{nid: nid, movable: !spent || len(n.allocs) == 0}
		for _, id := range n.allocs {
			j := &s.jobs[id]
			if j.g != wholeGroup {
				q.movable = false
				q.pinned = true
				break
			}
			q.gpus += j.k
			q.largest = max(q.largest, j.k)
			q.movable = q.movable && s.movable(j)
		}
		if !q.pinned {
			q.allocs = len(n.allocs)
			quiet = append(quiet, q)
		}
	}
	if schedulable <= s.cl.MinNodes || len(quiet) == 0 {
		return false
	}
	// consolidate.Empty chooses the fewest moves (a candidate's
	// allocations, all of which must move), then the fewest GPUs moved,
	// then the first by name. So its choice is its choice among the
	// candidates of the fewest allocations that give a plan, asked group
	// by group, of the nodes running nothing the first by name; and a
	// candidate whose work is not all movable, or could not fit the other
	// nodes' free GPUs (in all, or its largest allocation on the roomiest
	// of them), gives none. The same choice, at a fraction of the cost on
	// a thousand nodes: Empty tries each candidate against every other
	// node.
	quiet = slices.DeleteFunc(quiet, func(q quietNode) bool {
		f := s.nodes[q.nid].free[wholeGroup]
		roomiest := top1
		if f == top1 {
			roomiest = top2
		}
		return q.allocs > 0 && (!q.movable || q.gpus > free-f || q.largest > roomiest)
	})
	slices.SortStableFunc(quiet, func(a, b quietNode) int { return a.allocs - b.allocs })
	var nodes []consolidate.Node
	var allocs []consolidate.Alloc
	for i := 0; i < len(quiet); {
		j := i + 1
		for j < len(quiet) && quiet[j].allocs == quiet[i].allocs && quiet[i].allocs > 0 {
			j++
		}
		if nodes == nil {
			nodes, allocs = s.moveCandidates()
			if spent {
				for k := range allocs {
					allocs[k].Movable = false // the controller's movableWhy: the budget is spent
				}
			}
		}
		group := make([]string, 0, j-i)
		for _, q := range quiet[i:j] {
			group = append(group, s.names[q.nid])
		}
		if p, ok := consolidate.Empty(nodes, allocs, group); ok {
			s.si.tried = false
			s.startScaleIn(p)
			return len(p.Moves) > 0
		}
		i = j
	}
	return false
}

// quietNode is a candidate for consolidate.Empty: a quiet node, its
// allocations, their GPUs and the largest's, whether they are all
// movable, or whether one is no whole-GPU allocation.
type quietNode struct {
	nid                   int32
	allocs, gpus, largest int
	movable, pinned       bool
}

// movesThisHour counts the consolidations (and scale-in plans that moved
// work) of the last hour, wall clock: the hour's budget.
func (s *sim) movesThisHour() int {
	recent := 0
	for _, t := range s.moves.rounds {
		if s.now-t < s.moves.window {
			recent++
		}
	}
	return recent
}

// startScaleIn holds the plan's node for removal and stops its jobs, which
// wait again.
func (s *sim) startScaleIn(p consolidate.Plan) {
	m, si := &s.moves, &s.si
	nid := s.nodeByName(p.Node.ID)
	s.nodes[nid].ineligible = true
	m.held, m.moved = nid, m.moved[:0]
	m.heldEpoch++
	si.remove, si.since, si.exited, si.markedAt = true, s.now, s.now, -1
	si.emptied++
	if len(p.Moves) > 0 {
		m.rounds = append(m.rounds, s.now)
		si.byMoves++
	}
	s.stopMoved(p)
	si.moved += len(p.Moves)
	s.push(s.now+si.wait, evHoldEnd, nid, m.heldEpoch)
	if len(p.Moves) > 0 {
		// The stopped tasks exit, their checkpoints committed; the node
		// runs nothing then.
		si.exited = s.now + s.preemptDelay
		s.push(si.exited, evScaleIn, nid, m.heldEpoch)
		s.capVer[wholeGroup]++
		s.dirty = true
	} else {
		s.scaleInHold()
	}
}

// scaleInHold follows the node held for removal: the autoscaler removing
// it keeps the hold until it is gone (evNodeGone); queued work or the
// wait's end makes it take work again; else it is marked once every
// moved job is placed elsewhere and their tasks have exited.
func (s *sim) scaleInHold() {
	m, si := &s.moves, &s.si
	nid := m.held
	n := &s.nodes[nid]
	switch {
	case n.state != nodeReady:
		return
	case si.queued || s.now-si.since >= si.wait:
		si.givenBack++
		s.endHold()
		return
	case si.markedAt >= 0 || s.now < si.exited || len(n.allocs) > 0:
		return
	}
	for _, id := range m.moved {
		if st := s.jobs[id].state; st == jobWaiting || st == jobFailed {
			return
		}
	}
	si.markedAt = s.now
}

// removable is the node the controller emptied and marked for removal,
// as gpu-queue's removable check counts it at this evaluation: marked
// before the last one (the checks that run before it read that
// evaluation's value); -1 for none.
func (s *sim) removable() int32 {
	m, si := &s.moves, &s.si
	if !si.remove || m.held < 0 || si.markedAt < 0 || si.markedAt > s.now-s.evalEvery || s.nodes[m.held].state != nodeReady || !s.mayRemove(m.held) {
		return -1
	}
	return m.held
}

// scaleInGone ends the hold of a node held for removal once it is gone.
func (s *sim) scaleInGone(nid int32) {
	if s.moves.held == nid && s.si.remove {
		s.moves.held, s.si.remove = -1, false
	}
}
