package model

import (
	"fmt"
	"math"
	"slices"

	"github.com/nomad-gpu/nomad-gpu/bench/tracereplay"
)

// wholeGroup is the group of whole GPUs: the policies' queries ask for
// device nvidia/gpu (the APM's default), which MPS shares and MIG
// instances do not match.
const wholeGroup = 0

// allocPct is gpu_alloc_pct{device=nvidia/gpu}: whole GPUs held by
// pending or running allocations over the whole GPUs of ready nodes; for
// a pool whose layouts follow the queue gpu_alloc_pct{device=any}, as
// docs/autoscaling.md tells it: GPU-equivalents held over the ready
// nodes' GPUs.
func (s *sim) allocPct() float64 {
	if s.f.Layouts {
		held := 0
		for _, nid := range s.ready {
			held += s.nodes[nid].held
		}
		if s.nReady == 0 {
			return 0
		}
		return float64(held) * 100 / float64(s.nReady*s.cl.GPUsPerNode*s.unitsPerGPU)
	}
	total := s.nReady * s.groups[wholeGroup].perNode
	if total == 0 {
		return 0
	}
	return float64(s.heldInst[wholeGroup]) * 100 / float64(total)
}

// autoscale is one evaluation of the scaling policy. The strategy runs at
// every evaluation, cooldown or not (the autoscaler's handler asks it
// before it checks its cooldown), so gpu-queue's idle clock keeps
// counting; only the action waits. The cooldown starts when the scale
// call returns, a moment after the evaluation that asked for it, so the
// evaluation falling exactly one cooldown later is still inside it.
func (s *sim) autoscale() {
	cooling := s.hasAction && s.now <= s.lastAction+s.cooldown
	count := s.nBooting + s.nReady
	pct := s.allocPct()
	switch s.f.Autoscale {
	case tracereplay.AutoscaleGPUQueue:
		needed := s.nodesNeeded()
		if needed > 0 {
			s.low = false
			if s.bey.d > 0 && !cooling && needed > s.nBooting && count < s.cl.MaxNodes {
				// Leaving jobs out never raises the count, so the
				// forecast is made only where the count could add a
				// node. Work is queued all the same: the queue check
				// keeps the pool from scaling in (the strategy holds,
				// "nodes_needed is 0"), as the plain count's work does.
				needed = s.nodesNeededBeyond()
			}
			if add := min(needed-s.nBooting, s.o.Policy.MaxScaleUp, s.cl.MaxNodes-count); add > 0 && !cooling {
				s.scaleOut(add)
			}
			return
		}
		if pct >= s.o.Policy.IdleFloor {
			s.low = false
		} else if !s.low {
			s.low, s.lowSince = true, s.now
		}
		if nid := s.removable(); nid >= 0 {
			// The removable check: a node the controller emptied goes at
			// once, within the pool's minimum (the agent's cap); the
			// target's empty-node selection removes exactly it.
			if !cooling && count > s.cl.MinNodes {
				s.startRemoval(nid)
				s.si.removed++
				s.hasAction, s.lastAction = true, s.now
			}
			return
		}
		if s.low && s.now-s.lowSince >= s.scaleInAfter && !cooling {
			s.scaleIn(min(s.o.Policy.MaxScaleDown, count-s.cl.MinNodes))
		}
	case tracereplay.AutoscaleTargetValue:
		if count == 0 || cooling {
			return // a count of 0 gives a desired count of 0
		}
		desired := int(math.Ceil(float64(count)*pct/s.o.Policy.TargetAlloc - 1e-9))
		desired = min(max(desired, s.cl.MinNodes), s.cl.MaxNodes)
		switch {
		case desired > count:
			s.scaleOut(desired - count)
		case desired < count:
			s.scaleIn(count - desired)
		}
	}
}

func (s *sim) scaleOut(n int) {
	for range n {
		id := s.addNode()
		s.makeSpot(id) // in a spot pool, the burst group's (spot.go)
		s.push(s.now+s.boot, evNodeReady, id, 0)
	}
	s.hasAction, s.lastAction = true, s.now
}

// scaleIn removes up to n idle ready nodes, the newest first.
func (s *sim) scaleIn(n int) {
	if n <= 0 {
		return
	}
	var idle []int32
	for _, id := range s.ready {
		if len(s.nodes[id].allocs) == 0 {
			idle = append(idle, id)
		}
	}
	if len(idle) == 0 {
		return
	}
	slices.Sort(idle)
	if s.f.Spot {
		idle = s.spotIdle(idle) // the pool's minimum stays reserved
	}
	for i := 0; i < n && i < len(idle); i++ {
		s.startRemoval(idle[len(idle)-1-i])
	}
	s.hasAction, s.lastAction = true, s.now
}

// nodesNeeded is nodes_needed{device=nvidia/gpu}: the waiting (blocked)
// jobs asking for whole GPUs packed best fit, largest first, into the
// free whole GPUs of schedulable nodes (ready, not held ineligible by a
// move, as the APM counts them), then into new nodes (packNodes). Jobs
// no empty node fits are left out: more nodes cannot place them. Jobs
// asking for MPS shares or MIG instances are not counted, as the query
// does not match them. A pool whose layouts follow the queue asks
// nodes_needed{device=any} instead, as docs/autoscaling.md tells it to
// (nodesNeededAny).
func (s *sim) nodesNeeded() int {
	if s.f.Layouts {
		return s.nodesNeededAny(nil)
	}
	return s.nodesNeededWhole(nil)
}

// nodesNeededBeyond is nodes_needed{…,beyond=D} (Policy.Beyond): the same
// count without the waiting jobs the runtime forecast places on the
// pool within D (beyond.go). The forecast reads the units the query
// counts: whole GPUs, or with layouts every kind.
func (s *sim) nodesNeededBeyond() int {
	if s.f.Layouts {
		return s.nodesNeededAny(s.servedInTime(func(int) bool { return true }))
	}
	return s.nodesNeededWhole(s.servedInTime(func(g int) bool { return g == wholeGroup }))
}

// nodesNeededWhole is nodesNeeded's count of whole-GPU asks, without
// the waiting jobs out says to leave out, per sub-queue (nil: none).
func (s *sim) nodesNeededWhole(out []int) int {
	capN := s.groups[wholeGroup].perNode
	var sizes []askSize
	for i := range s.sqs {
		if q := &s.sqs[i]; q.g == wholeGroup && q.Len() > 0 && q.k <= capN {
			if n := q.Len() - leftOut(out, i); n > 0 {
				sizes = append(sizes, askSize{q.k, n})
			}
		}
	}
	s.gangDemand(func(k, n int) {
		if k <= capN {
			sizes = append(sizes, askSize{k, n})
		}
	})
	bins := make([]int, capN+1) // schedulable nodes by free instances
	for _, nid := range s.ready {
		if n := &s.nodes[nid]; !n.ineligible {
			bins[n.free[wholeGroup]]++
		}
	}
	return packNodes(sizes, capN, bins)
}

// nodesNeededAny is nodes_needed{device=any}: every waiting job's ask in
// GPU-equivalents (units), whatever its kind, packed into the free units
// of the ready nodes the scheduler may use (an ask fits a node with that
// much free in all: the controller relays free GPUs to fit, the query's
// optimistic rule), then into new nodes. An ask bigger than a node is
// left out, and so are the waiting jobs out says, per sub-queue (nil:
// none).
func (s *sim) nodesNeededAny(out []int) int {
	capU := s.cl.GPUsPerNode * s.unitsPerGPU
	var sizes []askSize
	for i := range s.sqs {
		if q := &s.sqs[i]; q.Len() > 0 {
			if u := q.k * s.groups[q.g].units; u <= capU {
				if n := q.Len() - leftOut(out, i); n > 0 {
					sizes = append(sizes, askSize{u, n})
				}
			}
		}
	}
	s.gangDemand(func(k, n int) {
		if u := k * s.unitsPerGPU; u <= capU {
			sizes = append(sizes, askSize{u, n})
		}
	})
	bins := make([]int, capU+1) // schedulable nodes by free units
	for _, nid := range s.ready {
		if n := &s.nodes[nid]; !n.ineligible {
			bins[max(0, capU-n.held)]++
		}
	}
	return packNodes(sizes, capU, bins)
}

// leftOut is out[i], 0 for a nil out.
func leftOut(out []int, i int) int {
	if out == nil {
		return 0
	}
	return out[i]
}

// askSize is n waiting asks of k (instances, or units).
type askSize struct{ k, n int }

// packNodes is how many new nodes of capN the asks need once packed best
// fit, largest first, into the nodes bins counts by their free capacity
// (bins[c]: nodes with c free; it is used up), then into new ones.
func packNodes(sizes []askSize, capN int, bins []int) int {
	slices.SortFunc(sizes, func(a, b askSize) int { return b.k - a.k })
	nodes := 0
	for _, sz := range sizes {
		for n := sz.n; n > 0; {
			c := sz.k
			for c <= capN && bins[c] == 0 {
				c++
			}
			if c > capN {
				per := capN / sz.k
				full := n / per
				nodes += full
				bins[capN-per*sz.k] += full
				if rem := n % per; rem > 0 {
					nodes++
					bins[capN-rem*sz.k]++
				}
				break
			}
			take := min(n, c/sz.k)
			bins[c]--
			bins[c-take*sz.k]++
			n -= take
		}
	}
	return nodes
}

func (s *sim) sample() {
	smp := tracereplay.Sample{
		At:        s.now,
		Nodes:     s.nBooting + s.nReady + s.nRemoving,
		Spot:      s.spot.up,
		GPUs:      float64(s.nReady * s.cl.GPUsPerNode),
		Allocated: float64(s.heldUnit) / float64(s.unitsPerGPU),
		Queued:    s.waiting + s.pending + s.failed + s.heldWaiting(),
	}
	if s.f.Layouts {
		smp.Layouts = s.sampleLayouts()
	}
	busy := 0.0
	for _, nid := range s.ready {
		for _, a := range s.nodes[nid].allocs {
			if j := &s.jobs[a]; j.state == jobRunning {
				busy += float64(j.units) * j.util / 100
			}
		}
	}
	smp.Busy = busy / float64(s.unitsPerGPU)
	s.timeline = append(s.timeline, smp)
}

func (s *sim) result() tracereplay.Result {
	late := 0
	for i := range s.nTrace {
		if s.jobs[i].arrival > s.horizon {
			late++
		}
	}
	for i := range s.recs {
		if runs := s.recs[i].Runs; len(runs) > 0 && s.jobs[i].state == jobRunning && s.jobs[i].gang < 0 {
			run := &runs[len(runs)-1]
			run.End, run.Open = s.horizon, true
			run.Reached = s.jobs[i].dur - s.jobs[i].remaining + (s.horizon - s.jobs[i].since)
		}
	}
	notes := s.notes
	if late > 0 {
		notes = append(notes, fmt.Sprintf("%d jobs arrive after the horizon %s; never submitted", late, s.horizon))
	}
	if s.refusals > 0 || s.cancels > 0 {
		notes = append(notes, fmt.Sprintf("%d placements on a GPU being relaid were refused and placed again, and %d relayouts were abandoned to a placement made before the plugin read them", s.refusals, s.cancels))
	}
	if s.f.ScaleIn {
		si := s.si
		notes = append(notes, fmt.Sprintf("scale-in by consolidation: %d nodes emptied for removal (%d by moving %d runs off them), %d removed by the autoscaler's removable check, %d took work again", si.emptied, si.byMoves, si.moved, si.removed, si.givenBack))
	}
	if s.f.Spot {
		notes = append(notes, s.spotNotes()...)
	}
	if n := s.beyondNote(); n != "" {
		notes = append(notes, n)
	}
	if s.res.made > 0 {
		notes = append(notes, fmt.Sprintf("%d reservations made, %d of them handed over to the work they kept nodes for; %d jobs backfilled on their GPUs", s.res.made, s.res.handed, s.res.backfills))
	}
	return tracereplay.Result{
		Reservations:            s.res.made,
		ReservationIdleGPUHours: s.reservationIdle() / 3600,
		Engine:                  "model",
		Version:                 Version,
		Config:                  s.o.Config,
		Cluster:                 s.o.Cluster,
		Compression:             s.o.Compression,
		Horizon:                 s.horizon,
		Jobs:                    s.traceRecords(),
		PlacementsRecorded:      true,
		LayoutChanges:           s.layoutChanges,
		LayoutsRecorded:         s.f.Layouts,
		MoveLooks:               s.moves.looks,
		SpotNodes:               s.spot.names,
		Timeline:                s.timeline,
		Notes:                   notes,
	}
}

// traceRecords are the trace's jobs' records, a gang's with its members'
// runs; the runs still going end at the horizon.
func (s *sim) traceRecords() []tracereplay.JobRecord {
	out := slices.Clone(s.recs[:s.nTrace])
	for i := range out {
		if s.jobs[i].gang < 0 {
			continue
		}
		for _, m := range s.gangs[s.jobs[i].gang].members {
			if runs := s.recs[m].Runs; len(runs) > 0 && s.jobs[m].state == jobRunning {
				run := &runs[len(runs)-1]
				run.End, run.Open = s.horizon, true
			}
		}
		out[i] = s.gangRecord(s.jobs[i].gang)
	}
	return out
}
