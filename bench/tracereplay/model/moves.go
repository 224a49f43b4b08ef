package model

import (
	"slices"
	"strconv"
	"time"

	"github.com/nomad-gpu/nomad-gpu/bench/tracereplay"
	"github.com/nomad-gpu/nomad-gpu/controller/consolidate"
)

// Moving checkpointed work (Features.Moves). The model plans with the
// controller's own search, consolidate.Search, on the model's state, as it
// plans layouts with layoutplan.Plan; what is the model's is when the
// controller looks (once a scheduler pass leaves work waiting) and the
// timing of what follows, which mirrors controller.Mover: the freed node
// is held (no placement lands on it) while the moved jobs wait again,
// until every one of them is placed elsewhere or MoveHold passes; one
// consolidation at a time, the next once the job it was for runs or
// MoveSettle passes; at most MoveBudgetHour in any (wall-clock) hour and
// MoveBudgetJobDay moves of one job.

// moveState is the move module's state in the model.
type moveState struct {
	// held is the node held, -1 for none; heldEpoch invalidates an
	// earlier hold's end event; moved are the jobs moved off it.
	held      int32
	heldEpoch uint32
	moved     []int32
	// forJob is the queued job the last consolidation was for, -1 once it
	// runs or the settle time passed; forNode the node freed for it;
	// forSince when it was made.
	forJob   int32
	forNode  int32
	forSince time.Duration
	// rounds are when consolidations were made.
	rounds []time.Duration
	// Trace-time figures: Policy.MoveSettle, MoveHold and an hour of
	// wall clock (the budget's window).
	settle, holdMax, window time.Duration
	// looks are Result.MoveLooks.
	looks tracereplay.MoveLooks
}

// consolidate is one round of the controller's move module, once a
// scheduler pass left work waiting: for the first waiting job (broker
// order) asking for more whole GPUs than any node has free, it stops the
// fewest movable running jobs whose move frees a node for it, and holds
// the node; true when it moved something (another pass places the moved
// jobs).
func (s *sim) consolidate() bool {
	m := &s.moves
	if m.held >= 0 {
		return false
	}
	if m.forJob >= 0 {
		if f := &s.jobs[m.forJob]; f.state == jobWaiting && s.now-m.forSince < m.settle {
			return false
		}
		m.forJob = -1
	}
	recent := 0
	for _, t := range m.rounds {
		if s.now-t < m.window {
			recent++
		}
	}
	if recent >= s.o.Policy.MoveBudgetHour {
		return false
	}
	asks := s.wholeGPUAsks()
	if len(asks) == 0 {
		return false
	}
	m.looks.Looks++
	free := s.moveFree()
	if free >= s.jobs[asks[0]].k {
		m.looks.WithRoom++
	}
	var nodes []consolidate.Node
	var allocs []consolidate.Alloc
	for _, id := range asks {
		if s.jobs[id].k > free {
			// The moved GPUs must fit in the other nodes' free ones, and
			// free them on one node: the search finds no plan.
			continue
		}
		if nodes == nil {
			nodes, allocs = s.moveCandidates()
		}
		p, ok := consolidate.Search(nodes, allocs, consolidate.Ask{Job: strconv.Itoa(int(id)), Count: s.jobs[id].k})
		if ok {
			s.startMoves(p, id)
			return true
		}
	}
	return false
}

// wholeGPUAsks are the waiting jobs, the first of each shape in the
// broker's order, that ask for 2 or more whole GPUs a node can hold (one
// GPU fits any free one: nothing to consolidate for).
func (s *sim) wholeGPUAsks() []int32 {
	var out []int32
	for i := range s.sqs {
		q := &s.sqs[i]
		if q.g == wholeGroup && q.k >= 2 && q.k <= s.groups[wholeGroup].perNode && q.Len() > 0 {
			out = append(out, q.ids[0])
		}
	}
	slices.SortFunc(out, func(a, b int32) int {
		if s.before(a, b) {
			return -1
		}
		return 1
	})
	return out
}

// moveFree are the free whole GPUs of moveCandidates' nodes.
func (s *sim) moveFree() int {
	free := 0
	for _, nid := range s.ready {
		if n := &s.nodes[nid]; s.moveNode(n) {
			free += n.free[wholeGroup]
		}
	}
	return free
}

// moveNode says whether node n is one of moveCandidates': not held, and
// no GPU being relaid (its free GPUs are in flux:
// controller.Layouts.Relaying).
func (s *sim) moveNode(n *node) bool {
	return !n.ineligible && n.nMoving == 0
}

// moveCandidates are the schedulable nodes with their free whole GPUs and
// the placed jobs holding whole GPUs on them, each judged movable as the
// controller does (movable; a gang's member or a placeholder is listed,
// not movable: it pins its node for consolidate.Empty).
func (s *sim) moveCandidates() ([]consolidate.Node, []consolidate.Alloc) {
	var nodes []consolidate.Node
	var allocs []consolidate.Alloc
	for _, nid := range s.ready {
		n := &s.nodes[nid]
		if !s.moveNode(n) {
			continue
		}
		name := s.names[nid]
		nodes = append(nodes, consolidate.Node{ID: name, Name: name, Free: n.free[wholeGroup]})
		for _, id := range n.allocs {
			j := &s.jobs[id]
			if j.g != wholeGroup {
				continue
			}
			allocs = append(allocs, consolidate.Alloc{ID: strconv.Itoa(int(id)), Job: s.recs[id].ID, Node: name, GPUs: j.k, Movable: s.movable(j)})
		}
	}
	return nodes, allocs
}

// movable says whether placed job j holding whole GPUs may be moved now,
// as the controller judges it: running, no raise in force (protection, a
// minimum runtime), its own move budget not spent. A gang member is not
// moved (its gang would stop as one: the controller leaves gangs to
// reservations), nor is a reservation's placeholder.
func (s *sim) movable(j *job) bool {
	return j.state == jobRunning && j.prio == j.base && !s.exempt(j) && j.moves < s.o.Policy.MoveBudgetJobDay && j.gang < 0 && !j.placeholder
}

// stopMoved stops the plan's jobs as moves, each waiting again, and
// notes them moved off the node held.
func (s *sim) stopMoved(p consolidate.Plan) {
	for _, mv := range p.Moves {
		id, err := strconv.Atoi(mv.Alloc.ID)
		if err != nil {
			panic("model: the search returned an allocation it was not given: " + mv.Alloc.ID)
		}
		s.stopRun(int32(id), true)
		s.jobs[id].moves++
		s.jobs[id].evalAt = s.now
		s.enqueue(int32(id))
		s.moves.moved = append(s.moves.moved, int32(id))
	}
}

// startMoves holds the plan's node and stops its jobs, which wait again.
func (s *sim) startMoves(p consolidate.Plan, forJob int32) {
	m := &s.moves
	nid := s.nodeByName(p.Node.ID)
	s.nodes[nid].ineligible = true
	m.held, m.moved = nid, m.moved[:0]
	m.heldEpoch++
	m.forJob, m.forNode, m.forSince = forJob, nid, s.now
	m.rounds = append(m.rounds, s.now)
	s.stopMoved(p)
	s.push(s.now+m.holdMax, evHoldEnd, nid, m.heldEpoch)
	s.capVer[wholeGroup]++
	s.dirty = true
}

// placedMoved ends the hold once every moved job is placed (pickNode
// keeps them off the held node).
func (s *sim) placedMoved() {
	m := &s.moves
	if m.held < 0 || s.si.remove {
		return // a node emptied for removal is marked by the scale-in round
	}
	for _, id := range m.moved {
		if st := s.jobs[id].state; st == jobWaiting || st == jobFailed {
			return
		}
	}
	s.endHold()
}

// endHold makes the held node placeable again. One emptied for removal
// is first seen again: its quiet period starts again (scalein.go).
func (s *sim) endHold() {
	m := &s.moves
	if m.held < 0 {
		return
	}
	s.nodes[m.held].ineligible = false
	if s.si.remove {
		s.si.remove = false
		s.nodes[m.held].wanted = s.now
		s.push(s.now+s.si.quiet, evScaleIn, 0, 0)
	}
	m.held = -1
	for g := range s.capVer {
		s.capVer[g]++
	}
	s.dirty = true
}

// reservedNode is the node the last consolidation freed while the job it
// was for still waits within the settle time, -1 for none: the layout
// planner leaves it alone (controller.Mover.Reserved).
func (s *sim) reservedNode() int32 {
	m := &s.moves
	if m.forJob < 0 || s.jobs[m.forJob].state != jobWaiting || s.now-m.forSince >= m.settle {
		return -1
	}
	return m.forNode
}

// nodeByName is the node a consolidate.Node names.
func (s *sim) nodeByName(name string) int32 {
	for _, nid := range s.ready {
		if s.names[nid] == name {
			return nid
		}
	}
	panic("model: the search returned a node it was not given: " + name)
}
