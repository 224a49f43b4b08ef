package model

import (
	"slices"

	"github.com/nomad-gpu/nomad-gpu/bench/tracereplay"
	"github.com/nomad-gpu/nomad-gpu/contract/gpulayout"
)

// The relayout window. The controller writes a layout decision
// to the node's metadata; the device plugin reads it at its next poll
// (tracereplay.LayoutPoll: half a poll on average) and, where no
// allocation holds the GPU, drains it (devicefp: its instances unhealthy
// and refused to Reserve) and switches it once its drain grace has passed
// (tracereplay.LayoutSwitch), fingerprinting the new instances. The
// servers learn of each change only with the node's next update (Nomad's
// client sends one 5–10 s after the first change it has not yet sent),
// and the controller sees the new layout applied with the same update:
// Latencies.Layout after its decision. The update that shows the drain
// is taken to come as long after the drain as the one that shows the new
// layout comes after the switch, so the servers stop offering the GPU
// LayoutSwitch before they offer its new layout. Until then they place on
// its old instances as on any other (new arrivals, blocked evaluations
// unblocked by other capacity), and so does the model:
//
//   - placed before the plugin's read, an allocation holds the GPU: the
//     plugin leaves it as it is (held), and the controller, seeing that
//     with the update, asks the GPU back to its layout (controller
//     cancelStuck; the change counts for its hysteresis: Layouts.Record)
//     and serves the queue with another GPU in a later round;
//   - placed after, its Reserve is refused at its task's start (or when
//     its GPU switches, whichever comes first): Nomad fails the
//     allocation, and the job waits in no queue. The replay's reschedule
//     policy (e2e replayJob: attempts 1, delay 5 s) places it again once,
//     5 s later: an evaluation that cannot place it spends the attempt
//     (Nomad reschedules a failed allocation only in its follow-up
//     evaluation). The controller forces a reschedule once the servers
//     stop offering one of its devices (controller.refusedToReplace,
//     nomadview.StillOffered): when they have seen the drain, whatever
//     the allocation's GPU count.
//
// Withdrawing a GPU at the decision, with nothing placed on it, would
// abandon no relayout and refuse no placement, where the committed
// default run's controller abandoned 16 of its 25 asks for shares to a
// placement and 7 placements were refused.

// startLayout is a decision of the planner's, on a GPU no allocation
// holds (the planner relays no held GPU): the GPU is being relaid from
// now, offered as it was until the servers see it drained.
func (s *sim) startLayout(r planRef, to gpulayout.Layout) {
	n := &s.nodes[r.nid]
	if n.moving[r.gpu] || n.gpuMPS[r.gpu] == (to.Kind == gpulayout.MPS) {
		return
	}
	if n.gpuMPS[r.gpu] && n.mpsUsed[r.gpu] > 0 || !n.gpuMPS[r.gpu] && s.freeWhole(n) < 1 {
		panic("model: the planner relaid a GPU that is held")
	}
	n.moving[r.gpu], n.changed[r.gpu] = true, s.now
	n.nMoving++
	d := s.layoutLat.draw(s.layoutRng)
	n.drainAt[r.gpu], n.resolveAt[r.gpu] = s.now+min(s.layoutDrain, d), s.now+d
	n.seenAt[r.gpu] = max(n.drainAt[r.gpu], n.resolveAt[r.gpu]-s.layoutSwitch)
	s.push(n.seenAt[r.gpu], evDrainSeen, r.nid, uint32(r.gpu))
	s.push(n.resolveAt[r.gpu], evLayout, r.nid, uint32(r.gpu))
}

// offeredRelaying says whether the servers still offer GPU gpu of n,
// being relaid, and no allocation holds it.
func offeredRelaying(n *node, gpu int) bool {
	return n.moving[gpu] && !n.withdrawn[gpu] && n.relayHeld[gpu] == 0
}

// takeRelaying notes that job id takes instances of GPU gpu of n, which
// is being relaid: before the plugin reads the decision it holds the GPU,
// after, its Reserve will be refused.
func (s *sim) takeRelaying(id int32, n *node, gpu int) {
	j := &s.jobs[id]
	n.relayHeld[gpu]++
	// Held since before the plugin read the decision, the GPU is not
	// drained: later placements hold it too.
	if s.now < n.drainAt[gpu] || n.takers[gpu] > 0 {
		n.takers[gpu]++
		j.relay = append(j.relay, int16(gpu<<1|1))
		return
	}
	j.relay = append(j.relay, int16(gpu<<1))
	j.refused = true
}

// takeWhole draws which of node n's free whole GPUs a placed whole-GPU
// job takes, as far as it matters: Nomad's device allocator takes the
// first free instances of the node's GPU group in its range over a map,
// any k of the free ones with equal chance; those being relaid are noted
// (takeRelaying). No draw is made when none is being relaid.
func (s *sim) takeWhole(id int32, n *node) {
	s.relayBuf = s.relayBuf[:0]
	for gpu := range n.moving {
		if !n.gpuMPS[gpu] && offeredRelaying(n, gpu) {
			s.relayBuf = append(s.relayBuf, gpu)
		}
	}
	free := n.free[wholeGroup]
	for i := 0; i < s.jobs[id].k && len(s.relayBuf) > 0; i++ {
		if u := s.rng.IntN(free - i); u < len(s.relayBuf) {
			s.takeRelaying(id, n, s.relayBuf[u])
			s.relayBuf = slices.Delete(s.relayBuf, u, u+1)
		}
	}
}

// leaveRelaying undoes takeRelaying as job id releases node n's devices,
// and says how many of its instances the servers stop offering (a
// drained GPU's, once they have seen the drain). A GPU its last holder
// since before the drain leaves is drained at the plugin's next read.
func (s *sim) leaveRelaying(id int32, n *node) int {
	j := &s.jobs[id]
	gone := 0
	for _, r := range j.relay {
		gpu := int(r >> 1)
		n.relayHeld[gpu]--
		if r&1 == 1 {
			if n.takers[gpu]--; n.takers[gpu] == 0 {
				n.drainAt[gpu] = max(n.drainAt[gpu], s.now+s.layoutDrain)
				n.seenAt[gpu] = max(n.seenAt[gpu], n.drainAt[gpu])
			}
		}
		if n.withdrawn[gpu] {
			if j.g == wholeGroup {
				gone++
			} else {
				gone += j.k
			}
		}
	}
	j.relay, j.refused = j.relay[:0], false
	return gone
}

// freeWhole are node n's free whole GPUs that are not being relaid: what
// the planner may place on or relay (the servers offer the others too,
// until they see them drained).
func (s *sim) freeWhole(n *node) int {
	f := n.free[wholeGroup]
	if s.f.Layouts && n.nMoving > 0 {
		for gpu := range n.moving {
			if !n.gpuMPS[gpu] && offeredRelaying(n, gpu) {
				f--
			}
		}
	}
	return f
}

// drainSeen is the node update that shows the servers a drained GPU: they
// stop offering its instances. A GPU held since before the drain was not
// drained.
func (s *sim) drainSeen(nid int32, gpu int) {
	n := &s.nodes[nid]
	if !n.moving[gpu] || n.takers[gpu] > 0 || n.withdrawn[gpu] || s.now < n.seenAt[gpu] {
		return
	}
	n.withdrawn[gpu] = true
	// The instances no placement holds go now; those refused placements
	// hold go as they fail (leaveRelaying).
	if n.gpuMPS[gpu] {
		s.changeFree(nid, s.mpsGroup, -(s.mpsShares - n.mpsUsed[gpu]))
	} else if n.relayHeld[gpu] == 0 {
		s.changeFree(nid, wholeGroup, -1)
	}
}

// refuse fails a placement on a GPU being drained: its Reserve is
// refused and the job holds nothing, waiting in no queue for Nomad's one
// reschedule or the controller's forced one.
func (s *sim) refuse(id int32) {
	j := &s.jobs[id]
	if j.placeholder || s.waitsAsGang(id) {
		// The controller's: it places its placeholders, and admits a
		// gang, again itself.
		s.refusals++
		s.stopRun(id, false)
		return
	}
	n := &s.nodes[j.node]
	seen := s.now // when the servers stop offering its devices
	for _, r := range j.relay {
		if gpu := int(r >> 1); r&1 == 0 && n.moving[gpu] {
			seen = max(seen, n.seenAt[gpu])
		}
	}
	j.avoid = j.node
	s.release(id)
	j.state = jobFailed
	j.epoch++
	s.failed++
	s.refusals++
	s.capVer[j.g]++
	s.dirty = true
	if !j.rescheduled {
		j.rescheduled = true
		s.push(s.now+s.rescheduleDelay, evReschedule, id, j.epoch)
	}
	s.push(seen, evForce, id, j.epoch)
}

// reschedule is Nomad's reschedule of a refused placement: one
// evaluation, which places it (preempting, where it may) or spends the
// job's attempt.
func (s *sim) reschedule(id int32, epoch uint32) {
	j := &s.jobs[id]
	if j.state != jobFailed || j.epoch != epoch {
		return
	}
	s.failed--
	j.evalAt = s.now
	s.enqueue(id)
	if s.tryPlace(id) || s.f.Preemption && s.tryPreempt(id) {
		s.dirty = true
		return
	}
	s.dequeue(id)
	j.state = jobFailed
	s.failed++
}

// forceReschedule is the controller's forced reschedule of a refused
// placement: a new evaluation, blocked until the job fits.
func (s *sim) forceReschedule(id int32, epoch uint32) {
	j := &s.jobs[id]
	if j.state != jobFailed || j.epoch != epoch {
		return
	}
	s.failed--
	j.evalAt = s.now
	s.enqueue(id)
	s.dirty = true
}

// applyLayout is the node update that tells the servers, and the
// controller, how the relayout went. Where an allocation placed before
// the plugin read the decision holds the GPU, the controller asks it back
// to its layout: the relayout is abandoned. Otherwise the plugin has
// switched it: placements refused on it fail now if they have not yet,
// its old instances are gone and its new layout's are offered, and
// blocked jobs of that kind look again.
func (s *sim) applyLayout(nid int32, gpu int) {
	n := &s.nodes[nid]
	if !n.moving[gpu] {
		return
	}
	n.nMoving--
	if n.takers[gpu] > 0 {
		n.moving[gpu] = false
		n.changed[gpu] = s.now // the cancel is a change of its own
		s.cancels++
		s.dirty = true
		return
	}
	if n.relayHeld[gpu] > 0 {
		for _, a := range slices.Clone(n.allocs) {
			if j := &s.jobs[a]; j.refused && slices.Contains(j.relay, int16(gpu<<1)) {
				s.refuse(a)
			}
		}
	}
	n.moving[gpu] = false
	if !n.withdrawn[gpu] {
		if n.gpuMPS[gpu] {
			s.changeFree(nid, s.mpsGroup, -s.mpsShares)
		} else {
			s.changeFree(nid, wholeGroup, -1)
		}
	}
	n.withdrawn[gpu] = false
	from := s.layoutOf(n.gpuMPS[gpu])
	n.gpuMPS[gpu] = !n.gpuMPS[gpu]
	g, delta := wholeGroup, 1
	if n.gpuMPS[gpu] {
		g, delta = s.mpsGroup, s.mpsShares
	}
	s.changeFree(nid, g, delta)
	if n.state != nodeReady {
		return // a node being removed: nothing to record
	}
	s.capVer[g]++
	s.dirty = true
	s.layoutChanges = append(s.layoutChanges, tracereplay.LayoutChange{
		At: s.now, Node: s.names[nid], GPU: s.mpsName(gpu), From: from.String(), To: s.layoutOf(n.gpuMPS[gpu]).String(),
	})
}
