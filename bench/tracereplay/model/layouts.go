package model

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/nomad-gpu/nomad-gpu/bench/tracereplay"
	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/contract/gpulayout"
	"github.com/nomad-gpu/nomad-gpu/controller/layoutplan"
	"github.com/nomad-gpu/nomad-gpu/internal/fgd"
)

// Layouts that follow the queue (Features.Layouts). The model plans with
// the controller's own planner, layoutplan.Plan, on the model's state, so
// the two cannot drift apart; only its inputs and the latency of applying
// a decision are the model's.

// planEpoch is the planner's clock: trace time from an arbitrary zero.
var planEpoch = time.Unix(0, 0).UTC()

// addLayouts gives a new node its per-GPU layout state: every GPU whole.
func (s *sim) addLayouts(n *node) {
	per := s.cl.GPUsPerNode
	n.mpsUsed, n.gpuMPS, n.moving = make([]int, per), make([]bool, per), make([]bool, per)
	n.changed = make([]time.Duration, per)
	n.drainAt, n.seenAt, n.resolveAt = make([]time.Duration, per), make([]time.Duration, per), make([]time.Duration, per)
	n.withdrawn = make([]bool, per)
	n.relayHeld, n.takers = make([]int, per), make([]int, per)
	for i := range n.changed {
		n.changed[i] = -1
	}
	n.free[s.mpsGroup] = 0
}

// isMPS says whether the servers offer GPU gpu of n as MPS shares now:
// with static slices every MPS GPU; with layouts one laid out as shares,
// unless they have seen it drained for a relayout (relayout.go).
func (s *sim) isMPS(n *node, gpu int) bool {
	return !s.f.Layouts || n.gpuMPS[gpu] && !n.withdrawn[gpu]
}

// mpsName names an MPS GPU as a Hold does: with layouts its physical
// index, as the figures' layouts name it too.
func (s *sim) mpsName(gpu int) string {
	if s.f.Layouts {
		return fmt.Sprintf("gpu%d", gpu)
	}
	return fmt.Sprintf("mps%d", gpu)
}

// mpsGPURandom is the MPS GPU of node n a request for k shares takes
// with layouts: one GPU's shares (each GPU is a device group of its own),
// and of the groups that fit, the one Nomad's device allocator
// (createOffer) keeps: with no device affinity every group scores 0 and
// a later group replaces an earlier one of equal score, so the last that
// fits in its range over the node's device map, which Go orders at
// random; -1 if none fits. The replay's jobspecs (e2e replayJob) ask
// nvidia/mps with no affinity: the affinity on unique.shares_in_use that
// the shipped MPS jobspecs carry (jobs/) is not in them, and packing
// shares onto GPUs already in use would leave MPS GPUs idle that the real
// cluster spreads work over, and relay them whole.
func (s *sim) mpsGPURandom(n *node, k int) int {
	best, ties := -1, 0
	for gpu := range n.mpsUsed {
		if !s.isMPS(n, gpu) || s.mpsShares-n.mpsUsed[gpu] < k {
			continue
		}
		// Reservoir sampling: each GPU that fits kept with equal chance.
		ties++
		if s.rng.IntN(ties) == 0 {
			best = gpu
		}
	}
	return best
}

// planRef is a GPU of the planner's input: its node and index.
type planRef struct {
	nid int32
	gpu int
}

// planLayouts is one round of the controller's layout module on the
// model's state: the ready nodes' GPUs, the waiting jobs as the queue,
// the running and queued jobs' shapes as the mix. Each decision withdraws
// its GPU's instances at once (the plugin drains it: nothing is placed
// on it) and applies after the relayout latency.
func (s *sim) planLayouts() {
	if !s.mayRelay() || s.placesAll() {
		return
	}
	in, refs := s.planInput()
	if len(in.Queue) == 0 {
		return
	}
	for _, d := range layoutplan.Plan(in) {
		i, err := strconv.Atoi(d.UUID)
		if err != nil || i < 0 || i >= len(refs) {
			panic(fmt.Sprintf("model: the planner returned a GPU it was not given: %q", d.UUID))
		}
		s.startLayout(refs[i], d.To)
	}
}

// mayRelay is false when layoutplan.Plan would decide nothing, so that the
// round need not run: the planner relays only an unfixed GPU (not held,
// being relaid or pinned) to the other layout, so an MPS ask needs a free
// whole GPU on a node it may change, and a whole-GPU ask of k GPUs a node
// with an unheld MPS GPU whose whole GPUs, free or coming, and unheld MPS
// GPUs number k or more (the round's own placements only take from
// these); or, where no node fits it even relaid, one whose whole GPUs,
// held or not, coming and unheld MPS GPUs do (room for moves, the
// planner's makeRoom). True is no promise that it decides anything.
func (s *sim) mayRelay() bool {
	mps, whole := false, math.MaxInt
	for i := range s.sqs {
		q := &s.sqs[i]
		if q.Len() == 0 || q.k > s.groups[q.g].perNode {
			continue
		}
		switch q.g {
		case s.mpsGroup:
			mps = true
		case wholeGroup:
			whole = min(whole, q.k)
		}
	}
	if !mps && whole == math.MaxInt {
		return false
	}
	reserved := s.reservedNode()
	for _, nid := range s.ready {
		n := &s.nodes[nid]
		if n.ineligible || nid == reserved {
			continue
		}
		free := s.freeWhole(n)
		if mps && free > 0 {
			return true
		}
		idle, coming, wholeGPUs := 0, 0, 0
		for gpu, on := range n.gpuMPS {
			switch {
			case n.moving[gpu] && on:
				coming++ // relaid to whole: the planner counts it free
			case on && !n.moving[gpu] && n.mpsUsed[gpu] == 0:
				idle++
			case !on && !n.moving[gpu]:
				wholeGPUs++
			}
		}
		if idle > 0 && wholeGPUs+coming+idle >= whole {
			return true // n.free[wholeGroup] ≤ wholeGPUs: the relay's case too
		}
	}
	return false
}

// placesAll says whether layoutplan.Plan would place every ask of the queue
// on the free instances it sees, and so relay nothing: it places an ask's
// allocations, highest priority first, each on the GPU (MPS) or node
// (whole GPUs) with the least free that fits, and relays only for one
// that fits none. Which of equally free GPUs or nodes it takes does not
// change what fits next, so counts by free instances are its placement.
func (s *sim) placesAll() bool {
	mps := make([]int, s.mpsShares+1)
	whole := make([]int, s.cl.GPUsPerNode+1)
	for _, nid := range s.ready {
		n := &s.nodes[nid]
		if n.ineligible {
			continue
		}
		w := s.freeWhole(n)
		for gpu, on := range n.gpuMPS {
			switch {
			case n.moving[gpu] && on:
				w++ // relaid to whole: its GPU counts free
			case n.moving[gpu]:
				mps[s.mpsShares]++
			case on:
				mps[s.mpsShares-n.mpsUsed[gpu]]++
			}
		}
		whole[w]++
	}
	asks, _ := s.planQueue()
	slices.SortStableFunc(asks, func(a, b layoutplan.Ask) int { return cmp.Compare(b.Priority, a.Priority) })
	for _, a := range asks {
		if a.Count <= 0 {
			continue // the planner skips it too
		}
		free := whole
		if a.Kind == contract.SliceMPS {
			free = mps
		}
		for range a.Allocs {
			if !takeBestFit(free, a.Count) {
				return false
			}
		}
	}
	return true
}

// takeBestFit takes k from the least of free's counts (by free instances)
// that holds k; false when none does.
func takeBestFit(free []int, k int) bool {
	for f := k; f < len(free); f++ {
		if free[f] > 0 {
			free[f]--
			free[f-k]++
			return true
		}
	}
	return false
}

// planInput is the planner's input and, by UUID (an index), its GPUs.
func (s *sim) planInput() (layoutplan.Input, []planRef) {
	in := layoutplan.Input{
		Bounds: layoutplan.Bounds{
			Default:     layoutplan.PoolBounds{Allowed: []gpulayout.Kind{gpulayout.Whole, gpulayout.MPS}, Shares: s.mpsShares},
			MinInterval: s.layoutMinInterval,
		},
		Now: planEpoch.Add(s.now),
	}
	// The round's lists are kept for the next: the planner keeps none.
	refs := s.refBuf[:0]
	in.GPUs = s.planBuf[:0]
	reserved := s.reservedNode()
	// In the planner's order (by name), which it then sorts in one pass.
	for _, nid := range s.byName {
		if s.nodes[nid].state != nodeReady {
			continue
		}
		if s.nodes[nid].ineligible {
			continue // held by the move module: the controller's planner skips nodes that take no work
		}
		if s.full(&s.nodes[nid]) {
			continue // the planner can neither place on it nor relay it: it decides the same without it
		}
		first := len(in.GPUs)
		in.GPUs = s.planGPUs(in.GPUs, nid)
		for i := first; i < len(in.GPUs); i++ {
			// A node freed for a queued multi-GPU job is left as it is
			// (controller.Mover.Reserved).
			in.GPUs[i].Pinned = nid == reserved
			in.GPUs[i].UUID = s.uuid(len(refs))
			refs = append(refs, planRef{nid, i - first})
		}
	}
	in.Queue, in.Mix = s.planQueue()
	s.planBuf, s.refBuf = in.GPUs, refs
	return in, refs
}

// full says whether every GPU of n is held and has no instance free:
// nothing is being relaid, no whole GPU is free and every MPS GPU's
// shares are all held. Only the decisions' fragmentation figures, which
// the model does not read, count such a node.
func (s *sim) full(n *node) bool {
	if s.freeWhole(n) > 0 {
		return false
	}
	for gpu, on := range n.gpuMPS {
		if n.moving[gpu] || on && n.mpsUsed[gpu] < s.mpsShares {
			return false
		}
	}
	return true
}

// uuid is the planner's UUID of its i-th GPU: i, made once.
func (s *sim) uuid(i int) string {
	for len(s.uuids) <= i {
		s.uuids = append(s.uuids, strconv.Itoa(len(s.uuids)))
	}
	return s.uuids[i]
}

// planGPUs appends ready node nid's GPUs as the planner sees them. The model
// counts whole GPUs, not which one an allocation holds, so the held ones
// are the first whole GPUs not being relaid: whole GPUs are alike.
func (s *sim) planGPUs(dst []layoutplan.GPU, nid int32) []layoutplan.GPU {
	n := &s.nodes[nid]
	heldWhole := s.wholeGPUs(n) - s.freeWhole(n)
	if s.heldMPS == nil {
		// The planner only reads Held: every GPU holding k shares
		// shares one list.
		s.heldMPS = make([][]string, s.mpsShares+1)
		for k := range s.heldMPS {
			s.heldMPS[k] = slices.Repeat([]string{contract.SliceMPS}, k)
		}
	}
	for i := range n.gpuMPS {
		cur := s.layoutOf(n.gpuMPS[i])
		g := layoutplan.GPU{Node: s.names[nid], NodeName: s.names[nid], Index: i, Current: cur}
		switch {
		case n.moving[i]:
			// Desired is the other layout: the planner counts its
			// instances as coming and leaves the GPU alone.
			g.Desired = s.layoutOf(!n.gpuMPS[i])
		case n.gpuMPS[i] && n.mpsUsed[i] > 0:
			g.Held = s.heldMPS[n.mpsUsed[i]]
		case !n.gpuMPS[i] && heldWhole > 0:
			g.Held, heldWhole = heldGPU, heldWhole-1
		}
		if n.changed[i] >= 0 {
			g.Changed = planEpoch.Add(n.changed[i])
		}
		dst = append(dst, g)
	}
	return dst
}

// heldGPU is a held whole GPU's Held, shared: the planner only reads it.
var heldGPU = []string{contract.SliceGPU}

func (s *sim) layoutOf(mps bool) gpulayout.Layout {
	if mps {
		return gpulayout.Shared(s.mpsShares)
	}
	return gpulayout.WholeGPU
}

// wholeGPUs are node n's GPUs offered whole now (held ones included).
func (s *sim) wholeGPUs(n *node) int {
	w := 0
	for i, mps := range n.gpuMPS {
		if !mps && !n.moving[i] {
			w++
		}
	}
	return w
}

// planQueue is the waiting jobs as the controller reads the blocked
// queue, one ask per shape and priority, in the broker's order; and the
// mix of the running and queued jobs' shapes.
func (s *sim) planQueue() ([]layoutplan.Ask, []fgd.Shape) {
	var waiting []int32
	for i := range s.sqs {
		for _, id := range s.sqs[i].ids {
			// Before the scheduler's pass, the controller sees as queued
			// only the jobs blocked before this instant: the scheduler
			// places a new evaluation before the controller can see it.
			if !s.prePass || s.jobs[id].evalAt < s.now {
				waiting = append(waiting, id)
			}
		}
	}
	// A gang waiting for admission is queued work to the controller too
	// (nomadview's QueuedGroups): its members, at its own priority.
	for _, gid := range s.gangQueue {
		waiting = append(waiting, s.gangs[gid].members...)
	}
	slices.SortFunc(waiting, func(a, b int32) int {
		if s.before(a, b) {
			return -1
		}
		return 1
	})
	var asks []layoutplan.Ask
	at := map[[3]int]int{}
	for _, id := range waiting {
		j := &s.jobs[id]
		if j.k > s.groups[j.g].perNode {
			continue // fits no node whatever its layout
		}
		key := [3]int{j.g, j.k, j.prio}
		if i, ok := at[key]; ok {
			asks[i].Allocs++
			continue
		}
		at[key] = len(asks)
		asks = append(asks, layoutplan.Ask{Kind: s.groups[j.g].kind, Count: j.k, Allocs: 1, Priority: j.prio, Job: s.recs[id].ID})
	}
	var mix []fgd.Shape
	total := 0
	for i := range s.sqs {
		total += s.sqs[i].active
	}
	for i := range s.sqs {
		if q := &s.sqs[i]; q.active > 0 {
			mix = append(mix, fgd.Shape{Kind: s.groups[q.g].kind, Count: q.k, Weight: float64(q.active) / float64(total)})
		}
	}
	return asks, mix
}

// sampleLayouts are the ready nodes' MPS GPUs for a sample, as the plugin
// publishes them: a GPU being relaid shows its current layout.
func (s *sim) sampleLayouts() []tracereplay.NodeLayout {
	var out []tracereplay.NodeLayout
	for _, nid := range s.ready {
		n := &s.nodes[nid]
		var mps []tracereplay.MPSGPU
		for gpu, on := range n.gpuMPS {
			if on {
				mps = append(mps, tracereplay.MPSGPU{GPU: s.mpsName(gpu), Shares: s.mpsShares, Free: s.mpsShares - n.mpsUsed[gpu]})
			}
		}
		if len(mps) > 0 {
			out = append(out, tracereplay.NodeLayout{Node: s.names[nid], MPS: mps})
		}
	}
	slices.SortFunc(out, func(a, b tracereplay.NodeLayout) int { return compareNodeNames(a.Node, b.Node) })
	return out
}

// compareNodeNames orders "node-<n>" names by n.
func compareNodeNames(a, b string) int {
	if len(a) != len(b) {
		return len(a) - len(b)
	}
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
