package model

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/nomad-gpu/nomad-gpu/bench/tracereplay"
)

// Spot capacity (Features.Spot), as docs/spot.md deploys it: the spot
// nodes are a node pool of their own that only checkpointing work enters,
// and `nomad-gpu reclaim-watch` stops their batch allocations on the
// cloud's reclaim notice. Its rules:
//
//   - Kinds. The pool's minimum (Cluster.MinNodes) are reserved nodes,
//     never spot; the nodes it starts with above the minimum and every
//     node the pool's gpu-queue policy adds are spot nodes (the burst
//     group is spot). The reserved and on-demand nodes are never fewer
//     than the minimum: the idle scale-in, consolidate.Empty's candidates
//     and the removable check leave them alone at the minimum.
//   - Who may enter. A job may run on a spot node if it is the work the
//     controller treats as movable and checkpointed (movable's lasting
//     conditions): a job of the trace that is not a gang's member. Every
//     replay job checkpoints and opts in to moves; a gang's members stop
//     as one and are left to reservations, not moved, so they are the
//     work that stays off spot nodes, and so are reservations'
//     placeholders. Placement (pickNode, tryPreempt) and gang admission
//     (gangRoom) skip spot nodes for them.
//   - Scaling: two groups. The pool's gpu-queue policy is the spot group's:
//     its nodes_needed counts the queued work spot nodes take (Nomad's
//     queue; the waiting gangs are left out, gangDemand), and the nodes it
//     adds are spot. The on-demand group's policy (autoscaleOnDemand), at
//     the same evaluations with a cooldown of its own, counts the waiting
//     gangs' members packed best fit into the free whole GPUs of the
//     schedulable reserved and on-demand nodes, then new nodes, less the
//     on-demand nodes booting, and adds on-demand nodes, within
//     MaxScaleUp and the pool's MaxNodes (spot nodes count in it).
//     Scale-in (idle nodes, consolidation) removes either kind.
//   - Reclaims. Each spot node, from when it is ready, is reclaimed after
//     an exponential time of rate Cluster.SpotReclaimRate per node-hour of
//     trace time, drawn from a stream of its own seeded by Options.Seed
//     and the sample (initSpot).
//     On the notice the watcher drains it (it takes no work at once) and
//     stops each of its allocations: a running task stops as a move
//     stops it (it commits its checkpoint and exits Latencies.Preempt ×
//     compression later, keeping what it saved: the model's lost work is
//     none), unless the notice ends first, when it is killed with the
//     node and keeps only what it restored; each job waits again at
//     once (a new evaluation) and is placed elsewhere by the next pass,
//     its start (its restore) the start latency. The node is gone
//     spotNotice after the notice (AWS's two minutes, trace time: the
//     cloud's own), counted in the node-hours until then; the spot
//     group's policy may add another.

// spotNotice is how long before a reclaimed spot node is gone its notice
// comes: AWS's two minutes (GCE and Azure give 30 seconds), trace time.
const spotNotice = 2 * time.Minute

// spotState is the spot pool's state (Features.Spot).
type spotState struct {
	// rate is Cluster.SpotReclaimRate, per trace hour; rng draws the
	// reclaims.
	rate float64
	rng  *rand.Rand
	// booting counts the spot nodes booting, live those booting or ready,
	// up those not yet gone (Sample.Spot).
	booting, live, up int
	// The on-demand group's last scaling action (its cooldown).
	odAction bool
	odLast   time.Duration
	// Counts for the notes: spot nodes started (at the start among them),
	// reclaimed, the allocations their reclaims stopped (running and
	// not yet started), those killed before their commit, and the
	// on-demand nodes the on-demand group started.
	started, atStart, reclaimed, stopped, killed, odStarted int
	names                                                   []string
}

// initSpot sets the spot pool up (newSim, before the first nodes). The
// reclaims' stream is seeded by Options.Seed and the sample (its jobs'
// IDs): the same for every configuration and size of one sample, so
// that they meet the same cloud, and apart for another sample, such as
// another window of a sweep (whose samples share the seed), so that its
// windows' reclaims are not all the first window's.
func (s *sim) initSpot(tr tracereplay.Trace) {
	h := fnv.New64a()
	for _, j := range tr.Jobs {
		h.Write([]byte(j.ID))
		h.Write([]byte{0})
	}
	s.spot.rate = s.cl.SpotReclaimRate
	s.spot.rng = rand.New(rand.NewPCG(uint64(s.o.Seed), h.Sum64())) //nolint:gosec // a model's draw, not a secret
}

// makeSpot makes node id, just added, a spot node of the pool's burst
// group; nothing without Features.Spot.
func (s *sim) makeSpot(id int32) {
	if !s.f.Spot {
		return
	}
	n := &s.nodes[id]
	n.spot = true
	s.spot.booting++
	s.spot.live++
	s.spot.up++
	s.spot.started++
	s.spot.names = append(s.spot.names, s.names[id])
}

// spotReady is spot node id ready: its reclaim is drawn.
func (s *sim) spotReady(id int32) {
	s.spot.booting--
	if s.spot.rate <= 0 {
		return
	}
	d := time.Duration(s.spot.rng.ExpFloat64() / s.spot.rate * float64(time.Hour))
	if at := s.now + d; d >= 0 && at <= s.horizon {
		s.push(at, evReclaim, id, 0)
	}
}

// barred says whether job id may not be placed on node n: a spot node,
// and work that may not enter the spot pool (a gang's member, a
// reservation's placeholder).
func (s *sim) barred(n *node, id int32) bool {
	return n.spot && (s.jobs[id].gang >= 0 || s.jobs[id].placeholder)
}

// reserveLeft is how many reserved and on-demand nodes above the pool's
// minimum may go: those booting or ready, less the minimum.
func (s *sim) reserveLeft() int {
	return s.nBooting + s.nReady - s.spot.live - s.cl.MinNodes
}

// mayRemove says whether ready node nid may be removed without taking the
// reserved and on-demand nodes below the pool's minimum: a spot node
// always.
func (s *sim) mayRemove(nid int32) bool {
	return !s.f.Spot || s.nodes[nid].spot || s.reserveLeft() > 0
}

// spotIdle keeps, of the idle nodes scaleIn removes from the end (the
// newest first), those it may remove: every spot node, and reserved or
// on-demand ones while they are above the pool's minimum.
func (s *sim) spotIdle(idle []int32) []int32 {
	left := s.reserveLeft()
	keep := make([]bool, len(idle))
	for i := len(idle) - 1; i >= 0; i-- {
		switch {
		case s.nodes[idle[i]].spot:
			keep[i] = true
		case left > 0:
			keep[i] = true
			left--
		}
	}
	out := idle[:0]
	for i, id := range idle {
		if keep[i] {
			out = append(out, id)
		}
	}
	return out
}

// autoscaleOnDemand is the on-demand group's policy in a spot pool, at
// each evaluation: gpu-queue's nodes_needed over the queued work spot
// nodes may not take (the waiting gangs' members), packed best fit into
// the free whole GPUs of the schedulable reserved and on-demand nodes,
// then into new nodes; less the on-demand nodes booting, it adds that
// many, at most MaxScaleUp and within the pool's MaxNodes, out of its own
// cooldown.
func (s *sim) autoscaleOnDemand() {
	if len(s.gangQueue) == 0 {
		return
	}
	capN := s.groups[wholeGroup].perNode
	var sizes []askSize
	for _, gid := range s.gangQueue {
		g := &s.gangs[gid]
		if k := s.jobs[g.members[0]].k; k <= capN {
			sizes = append(sizes, askSize{k, len(g.members)})
		}
	}
	if len(sizes) == 0 {
		return
	}
	bins := make([]int, capN+1)
	for _, nid := range s.ready {
		if n := &s.nodes[nid]; !n.ineligible && !n.spot {
			bins[n.free[wholeGroup]]++
		}
	}
	needed := packNodes(sizes, capN, bins)
	cooling := s.spot.odAction && s.now <= s.spot.odLast+s.cooldown
	add := min(needed-(s.nBooting-s.spot.booting), s.o.Policy.MaxScaleUp, s.cl.MaxNodes-s.nBooting-s.nReady)
	if add <= 0 || cooling {
		return
	}
	for range add {
		id := s.addNode()
		s.push(s.now+s.boot, evNodeReady, id, 0)
	}
	s.spot.odStarted += add
	s.spot.odAction, s.spot.odLast = true, s.now
}

// reclaim is spot node nid's reclaim notice: the watcher drains it and
// stops its allocations, which wait again; the node is gone spotNotice
// later.
func (s *sim) reclaim(nid int32) {
	n := &s.nodes[nid]
	if n.state != nodeReady {
		return // removed by the autoscaler first
	}
	s.spot.reclaimed++
	if m := &s.moves; m.held == nid {
		// Held by the move module (emptied for removal, or freed for a
		// queued job): the hold ends with the node.
		m.held = -1
		s.si.remove = false
		n.ineligible = false
	}
	if s.moves.forNode == nid {
		s.moves.forJob = -1
	}
	for _, id := range slices.Clone(n.allocs) {
		j := &s.jobs[id]
		running := j.state == jobRunning
		done := j.dur - j.remaining + (s.now - j.since) // valid when running
		s.stopRun(id, true)
		s.spot.stopped++
		if running {
			run := s.lastRun(id)
			run.Moved, run.SpotReclaimed = false, true
			if s.preemptDelay > spotNotice {
				// The node is gone before the task commits: it is killed,
				// and keeps what it restored.
				run.End, run.Reached = s.now+spotNotice, min(j.dur, done+spotNotice)
				run.Checkpointed, run.Saved, run.StopGap = false, 0, 0
				j.remaining = j.dur - run.Restored
				s.spot.killed++
			}
		}
		j.evalAt = s.now
		s.enqueue(id)
	}
	s.startRemovalAfter(nid, spotNotice)
	for g := range s.capVer {
		s.capVer[g]++
	}
	s.dirty = true
}

// spotNotes are the notes of a spot pool's run.
func (s *sim) spotNotes() []string {
	sp := &s.spot
	note := fmt.Sprintf("spot: %d spot nodes started (%d with the pool), %d reclaimed (at %g a spot node-hour); the reclaims stopped %d allocations, each placed again elsewhere",
		sp.started, sp.atStart, sp.reclaimed, sp.rate, sp.stopped)
	if sp.killed > 0 {
		note += fmt.Sprintf(", %d of them killed with their node before their checkpoint committed", sp.killed)
	}
	note += fmt.Sprintf("; %d on-demand nodes started for the work spot nodes may not take (jobs bigger than a node)", sp.odStarted)
	return []string{note}
}
