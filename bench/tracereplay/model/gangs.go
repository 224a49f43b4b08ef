package model

import (
	"slices"
	"time"

	"github.com/nomad-gpu/nomad-gpu/bench/tracereplay"
)

// Jobs bigger than a node (Slice.Members > 1). Each member is a job of
// the model's own (s.jobs), holding Slice.Count whole GPUs; the trace job
// is its gang, which makes progress only while every member runs
// (lockstep: a collective call waits for the slowest member), and whose
// record (gang.rec) has those spans as its runs and the members' as its
// MemberRuns.
//
//   - Stock Nomad (no Features.Gangs): the members are one job's
//     allocations, queued at its arrival and placed one at a time as GPUs
//     free; a placed member holds its GPUs while the others wait. A
//     member preempted stops the gang's progress (the others stall in
//     their collective call, holding their GPUs); without checkpoints the
//     gang starts again from scratch once the member runs again.
//   - Gangs (the controller's admission): the gang waits outside Nomad's
//     queue (at count 0) until a controller round finds every member fits
//     the free GPUs at once (Nomad's plan), then all are placed together.
//     A member stopped (preempted, moved, refused) stops the others, all
//     checkpointed, and the gang waits for admission again. With
//     preemption, Nomad's plan may also place members by preempting lower
//     work: the gang is admitted when, node by node, the free GPUs and
//     those of allocations it may preempt (at least 10 below it, past
//     their minimum runtime) make room for every member, and its members
//     are then placed as Nomad places them (preempting where they do not
//     fit); a member that still finds no room rolls the gang back.

// gangJob is one trace job run as members.
type gangJob struct {
	members []int32
	// running counts its members running.
	running int
	// since is when the last member started (every member running).
	since          time.Duration
	dur, remaining time.Duration
	// epoch invalidates an earlier evGangFinish.
	epoch uint32
	// queued: waiting for admission (Gangs); waitSince orders it.
	queued    bool
	waitSince time.Duration
	// rolledBack is when a member found no room after others were
	// placed and the gang was stopped and queued again (admitPreempting);
	// valid with hasRolledBack.
	rolledBack    time.Duration
	hasRolledBack bool
	// noReserveUntil: a reservation for it ended unused (MaxHold); it is
	// not kept again before then.
	noReserveUntil time.Duration
	rec            tracereplay.JobRecord
}

// gangOf is the gang job id is a member of, nil for none.
func (s *sim) gangOf(id int32) *gangJob {
	if g := s.jobs[id].gang; g >= 0 {
		return &s.gangs[g]
	}
	return nil
}

// buildGang makes trace job i (s.jobs[i], its first member) a gang of
// members; the other members are new jobs of the model's, after the
// trace's.
func (s *sim) buildGang(i int, tj tracereplay.Job, members int) {
	gid := int32(len(s.gangs))
	g := gangJob{dur: tj.Duration, remaining: tj.Duration, rec: s.recs[i]}
	s.jobs[i].gang = gid
	g.members = append(g.members, int32(i))
	for k := 1; k < members; k++ {
		s.jobs = append(s.jobs, s.jobs[i])
		s.recs = append(s.recs, tracereplay.JobRecord{ID: tj.ID})
		g.members = append(g.members, int32(len(s.jobs)-1))
	}
	s.gangs = append(s.gangs, g)
}

// arriveGang submits gang gid: its members queue (stock Nomad) or it
// waits for admission (Gangs).
func (s *sim) arriveGang(gid int32) {
	g := &s.gangs[gid]
	for _, m := range g.members {
		s.jobs[m].evalAt = s.now
		s.sqs[s.jobs[m].sq].active++
		if !s.f.Gangs {
			s.enqueue(m)
		}
	}
	if s.f.Gangs {
		s.queueGang(gid)
	}
	s.dirty = true
}

// queueGang makes gang gid wait for admission.
func (s *sim) queueGang(gid int32) {
	g := &s.gangs[gid]
	g.queued, g.waitSince = true, s.now
	for _, m := range g.members {
		s.jobs[m].state = jobGang
	}
	s.gangQueue = append(s.gangQueue, gid)
	s.gangRound.arrived = true
}

// gangBefore is the order the controller admits (and reserves for)
// waiting gangs in: priority, then the longest waiting, then trace order.
func (s *sim) gangBefore(a, b int32) int {
	x, y := &s.gangs[a], &s.gangs[b]
	px, py := s.jobs[x.members[0]].base, s.jobs[y.members[0]].base
	switch {
	case px != py:
		return py - px
	case x.waitSince != y.waitSince:
		return int(x.waitSince - y.waitSince)
	}
	return int(a - b)
}

// admitGangs is the controller's admission round: every waiting gang, in
// order, whose members all fit now is placed at once; true when one was.
// A gang fits only after capacity of whole GPUs was freed (capVer) or it
// arrived, so a round without either is skipped; within a round gangs of
// one shape and priority share one answer until one is admitted. A gang
// is looked at once a round, even if a roll-back queued it again, and
// not again at the instant of its roll-back: Nomad evaluates it again
// later, where the model's instant would loop (its roll-back frees the
// GPUs that start the next round).
func (s *sim) admitGangs() bool {
	if s.gangRound.cap == s.capVer[wholeGroup] && !s.gangRound.arrived {
		return false
	}
	s.gangRound.cap, s.gangRound.arrived = s.capVer[wholeGroup], false
	clear(s.gangRound.fits)
	slices.SortFunc(s.gangQueue, s.gangBefore)
	admitted := false
	for _, gid := range slices.Clone(s.gangQueue) {
		if g := &s.gangs[gid]; !g.queued || g.hasRolledBack && g.rolledBack == s.now || !s.gangFitsMemo(gid) {
			continue
		}
		clear(s.gangRound.fits)
		s.gangQueue = slices.DeleteFunc(s.gangQueue, func(x int32) bool { return x == gid })
		if s.gangFitsFree(gid) {
			for _, m := range s.gangs[gid].members {
				s.placeMember(m, s.pickNode(m, wholeGroup, s.jobs[m].k, -1))
			}
			admitted = true
			continue
		}
		admitted = s.admitPreempting(gid) || admitted
	}
	return admitted
}

// admitPreempting places gang gid's members one at a time as Nomad's plan
// does, preempting where a member does not fit; a member that finds no
// room stops the ones placed, and the gang waits again. false when its
// first member found none: nothing changed.
func (s *sim) admitPreempting(gid int32) bool {
	g := &s.gangs[gid]
	g.queued = false
	for i, m := range g.members {
		s.jobs[m].evalAt = s.now
		if s.tryPlace(m) || s.tryPreempt(m) {
			continue
		}
		if i > 0 {
			g.rolledBack, g.hasRolledBack = s.now, true
			s.stopRun(g.members[0], false) // stops the others, and queues the gang
			return true
		}
		arrived, since := s.gangRound.arrived, g.waitSince
		s.queueGang(gid)
		// Back as it was: waiting since then, and no new round for it.
		s.gangRound.arrived, g.waitSince = arrived, since
		return false
	}
	return true
}

// gangRoundState is admitGangs' bookkeeping: the whole-GPU capacity
// version of its last round, whether a gang arrived since, and the
// round's answers by shape and priority.
type gangRoundState struct {
	cap     uint64
	arrived bool
	fits    map[[3]int]bool
}

// gangFitsMemo is gangFits, shared by the gangs of one member count,
// member size and priority within a round.
func (s *sim) gangFitsMemo(gid int32) bool {
	g := &s.gangs[gid]
	m := &s.jobs[g.members[0]]
	key := [3]int{len(g.members), m.k, m.base}
	if ok, seen := s.gangRound.fits[key]; seen {
		return ok
	}
	if s.gangRound.fits == nil {
		s.gangRound.fits = map[[3]int]bool{}
	}
	ok := s.gangFits(gid)
	s.gangRound.fits[key] = ok
	return ok
}

// gangFits says whether Nomad's plan would place every member of gang
// gid now: on the free whole GPUs of the ready, placeable nodes, or, with
// preemption, on those and the GPUs of allocations it may preempt.
func (s *sim) gangFits(gid int32) bool {
	return s.gangFitsFree(gid) || s.f.Preemption && s.gangFitsPreempting(gid)
}

// gangFitsFree says whether every member of gang gid fits the free whole
// GPUs at once.
func (s *sim) gangFitsFree(gid int32) bool {
	return s.gangRoom(gid, func(*node) int { return 0 })
}

// gangFitsPreempting says whether every member of gang gid fits the free
// whole GPUs and those held by allocations its members may preempt
// (preemptable: what tryPreempt takes, or a member counted room that
// its placement does not find).
func (s *sim) gangFitsPreempting(gid int32) bool {
	lim := s.jobs[s.gangs[gid].members[0]].base - preemptGap
	return s.gangRoom(gid, func(n *node) int {
		held := 0
		for _, a := range n.allocs {
			if v := &s.jobs[a]; v.g == wholeGroup && s.preemptable(v, lim) {
				held += v.k
			}
		}
		return held
	})
}

// gangRoom says whether, node by node, the free whole GPUs and extra(n)
// more make room for every member of gang gid.
func (s *sim) gangRoom(gid int32, extra func(*node) int) bool {
	g := &s.gangs[gid]
	per, need := s.jobs[g.members[0]].k, len(g.members)
	for _, nid := range s.ready {
		n := &s.nodes[nid]
		if n.ineligible || s.barred(n, g.members[0]) {
			continue
		}
		if need -= (n.free[wholeGroup] + extra(n)) / per; need <= 0 {
			return true
		}
	}
	return false
}

// placeMember places an admitted member on node nid.
func (s *sim) placeMember(id, nid int32) {
	if nid < 0 {
		panic("model: an admitted member fits no node") // gangFits counted them
	}
	g := s.gangOf(id)
	g.queued = false
	s.jobs[id].evalAt = s.now
	s.place(id, nid, s.startDelay(wholeGroup))
}

// memberRunning is member id's task started: its run is recorded, and
// once every member runs the gang makes progress until its end.
func (s *sim) memberRunning(id int32) {
	g, j := s.gangOf(id), &s.jobs[id]
	s.recs[id].Runs = append(s.recs[id].Runs, tracereplay.Run{
		Start: s.now, Placed: j.placedAt, Node: s.names[j.node], Held: s.holds(id),
		Restored: g.dur - g.remaining, ProgressKnown: true,
	})
	if g.running++; g.running < len(g.members) {
		return
	}
	g.since = s.now
	g.epoch++
	g.rec.Runs = append(g.rec.Runs, tracereplay.Run{Start: s.now, Restored: g.dur - g.remaining, ProgressKnown: true})
	s.push(s.now+g.remaining, evGangFinish, s.jobs[id].gang, g.epoch)
}

// finishGang ends gang gid's work: every member's allocation completes.
func (s *sim) finishGang(gid int32, epoch uint32) {
	g := &s.gangs[gid]
	if g.epoch != epoch || g.running < len(g.members) {
		return
	}
	for _, m := range g.members {
		s.recordRun(m)
		s.release(m)
		s.jobs[m].state = jobDone
		s.sqs[s.jobs[m].sq].active--
		run := s.lastRun(m)
		run.End, run.Reached = s.now, g.dur
		s.runEnded(m)
	}
	g.running, g.remaining = 0, 0
	run := &g.rec.Runs[len(g.rec.Runs)-1]
	run.End, run.Reached = s.now, g.dur
	g.rec.Done, g.rec.Finish = true, s.now
	s.capVer[wholeGroup]++
	s.dirty = true
}

// memberStopped is member id stopped (preempted, moved, refused) after
// its devices were released; running says its task had started. The
// gang's progress stops; with Gangs the other members stop too and the
// gang waits for admission again.
func (s *sim) memberStopped(id int32, running, moved bool) {
	g := s.gangOf(id)
	progressing := g.running == len(g.members)
	if running {
		g.running--
		s.endMemberRun(id, !moved, moved)
	}
	if progressing {
		s.stopProgress(g, moved)
	}
	if !s.f.Gangs {
		return
	}
	for _, m := range g.members {
		mj := &s.jobs[m]
		if m == id || (mj.state != jobPending && mj.state != jobRunning) {
			continue
		}
		wasRunning := mj.state == jobRunning
		s.release(m)
		mj.epoch++
		mj.prio = mj.base
		mj.raise++
		if wasRunning {
			g.running--
			s.endMemberRun(m, false, false)
		}
	}
	s.queueGang(s.jobs[id].gang)
	s.capVer[wholeGroup]++
	s.dirty = true
}

// endMemberRun ends member id's run record as its task stops.
func (s *sim) endMemberRun(id int32, preempted, moved bool) {
	run := s.lastRun(id)
	run.End = s.now + s.preemptDelay
	run.Preempted, run.Moved = preempted, moved
	s.runEnded(id)
}

// stopProgress ends the gang's progress run at a member's stop: it keeps
// what its checkpoint saved (every member commits the same step, being in
// lockstep), or, without checkpoints, starts again from scratch.
func (s *sim) stopProgress(g *gangJob, moved bool) {
	g.epoch++
	done := g.dur - g.remaining + (s.now - g.since)
	g.remaining = s.endRun(&g.rec.Runs[len(g.rec.Runs)-1], g.dur, done, moved)
}

// waitsAsGang says whether stopped job id waits with its gang for
// admission rather than in Nomad's queue.
func (s *sim) waitsAsGang(id int32) bool {
	return s.jobs[id].gang >= 0 && s.f.Gangs
}

// gangRecord is gang gid's record as the result gives it, its open runs
// ended at the horizon.
func (s *sim) gangRecord(gid int32) tracereplay.JobRecord {
	g := &s.gangs[gid]
	rec := g.rec
	rec.Runs = slices.Clone(rec.Runs)
	if g.running == len(g.members) && len(rec.Runs) > 0 {
		run := &rec.Runs[len(rec.Runs)-1]
		run.End, run.Open = s.horizon, true
		run.Reached = g.dur - g.remaining + (s.horizon - g.since)
	}
	for _, m := range g.members {
		rec.MemberRuns = append(rec.MemberRuns, s.recs[m].Runs...)
		rec.PreemptingPlacements += s.recs[m].PreemptingPlacements
	}
	slices.SortStableFunc(rec.MemberRuns, func(a, b tracereplay.Run) int { return int(a.Start - b.Start) })
	return rec
}

// gangDemand adds the waiting gangs' members to the autoscaler's queue
// (the APM counts a waiting gang's members as queued work). In a spot
// pool the pool's policy is the spot group's, whose queue is what may
// enter its nodes: the gangs are the on-demand group's
// (autoscaleOnDemand).
func (s *sim) gangDemand(add func(k, n int)) {
	if s.f.Spot {
		return
	}
	for _, gid := range s.gangQueue {
		g := &s.gangs[gid]
		add(s.jobs[g.members[0]].k, len(g.members))
	}
}
