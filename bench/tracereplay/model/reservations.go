package model

import (
	"math"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/nomad-gpu/nomad-gpu/bench/tracereplay"
	"github.com/nomad-gpu/nomad-gpu/controller/gang"
	"github.com/nomad-gpu/nomad-gpu/controller/sizing/history"
	"github.com/nomad-gpu/nomad-gpu/controller/sizing/predict"
)

// Reservations (Features.Reservations), as controller/reserve.go makes
// them, one at a time: when a controller round finds the head of the
// queue among the waiting gangs and the waiting jobs asking 2 or more
// whole GPUs (priority, then the longest waiting) blocked, it keeps for it
// the nodes gang.Choose picks from the model's own runtime predictions
// (predict.Runtime over the runs finished so far, as the sizer's
// forecast), one member a node. A placeholder of 1-GPU allocations one
// above the work's priority takes each GPU that frees on them before any
// waiting job (the model gives it every freed GPU first, even ahead of
// waiting work of a higher priority); work ten above the placeholder may
// preempt it. Once it holds a member's GPUs on every node, the work is
// placed there in its stead (the pinned handover). A reservation whose
// work started otherwise ends; one held ReservationMaxHold ends and its
// work is not kept again for as long. While it fills, waiting work that
// cannot delay it takes the placeholder's GPUs (backfill, as
// controller/backfill.go); the placeholder's GPU-time is counted idle
// (ReservationIdleGPUHours).

// reserveState is the reservation module's state.
type reserveState struct {
	active bool
	// gang is the gang it keeps nodes for, job the job that is no gang;
	// -1 for the other.
	gang, job int32
	per       int
	prio      int
	nodes     []int32
	since     time.Duration
	// due is when gang.Choose expects the kept nodes free.
	due time.Time
	// holders are its placeholder allocations placed; spare are
	// placeholder jobs not placed, for the next.
	holders, spare []int32
	// noReserve are the jobs that are no gang whose reservation ended
	// unused, and until when they are not kept again.
	noReserve map[int32]time.Duration
	// idle is the GPU-time held by placeholders that let go.
	idle time.Duration
	// history are the whole-GPU runs finished, for the predictions;
	// levels their runtimeLevels, made at levelsOf runs.
	history  []history.Run
	levels   runtimeLevels
	levelsOf int
	// movable are the jobs backfilled as movable (the handover stops
	// them, checkpointed); backfills counts every backfill.
	movable                 []int32
	made, handed, backfills int
}

// epoch is the trace's zero as the controller's rules read time.
var epoch = time.Unix(0, 0).UTC()

// reserve is the reservation module's round, once a scheduler pass left
// work waiting: it keeps the reservation held fed, hands it over once
// full, or makes one; true when it placed the work.
func (s *sim) reserve() bool {
	r := &s.res
	if r.active {
		switch {
		case !s.reservedStillWaits():
			s.endReservation()
			return false
		case s.now-r.since >= s.scale(s.o.Policy.ReservationMaxHold):
			s.keepOff(s.now + s.scale(s.o.Policy.ReservationMaxHold))
			s.endReservation()
			return false
		}
		return s.feedReservation() || s.backfill()
	}
	gid, jid := s.reservationHead()
	if gid < 0 && jid < 0 {
		return false
	}
	members, per, prio := 1, 0, 0
	if gid >= 0 {
		g := &s.gangs[gid]
		members, per, prio = len(g.members), s.jobs[g.members[0]].k, s.jobs[g.members[0]].base
	} else {
		per, prio = s.jobs[jid].k, s.jobs[jid].base
	}
	res, ok := gang.Choose(s.outlook(), members, per, epoch.Add(s.now))
	if !ok {
		return false
	}
	*r = reserveState{active: true, gang: gid, job: jid, per: per, prio: min(maxPriority, prio+1), since: s.now, due: res.Due,
		holders: r.holders[:0], spare: r.spare, noReserve: r.noReserve, idle: r.idle, history: r.history,
		levels: r.levels, levelsOf: r.levelsOf, movable: r.movable[:0], made: r.made + 1, handed: r.handed, backfills: r.backfills}
	for _, name := range res.Nodes {
		id, _ := strconv.Atoi(name)
		r.nodes = append(r.nodes, int32(id))
	}
	s.push(s.now+s.scale(s.o.Policy.ReservationMaxHold), evReserveHold, 0, 0)
	return s.feedReservation()
}

// scale is a wall-clock policy duration in trace time.
func (s *sim) scale(d time.Duration) time.Duration {
	return time.Duration(float64(d) * s.o.Compression)
}

// reservationHead is the waiting work a reservation is for: a gang (gid)
// or a job asking 2 or more whole GPUs (jid), the first by priority, then
// the longest waiting; -1, -1 for none. Work that could never fit the
// ready nodes, or whose reservation ended unused lately, is passed over.
func (s *sim) reservationHead() (gid, jid int32) {
	gid, jid = -1, -1
	var prio int
	var since time.Duration
	better := func(p int, t time.Duration) bool {
		return (gid < 0 && jid < 0) || p > prio || p == prio && t < since
	}
	for _, g := range s.gangQueue {
		gg := &s.gangs[g]
		m := &s.jobs[gg.members[0]]
		if gg.noReserveUntil <= s.now && s.couldFit(len(gg.members), m.k) && better(m.base, gg.waitSince) {
			gid, jid, prio, since = g, -1, m.base, gg.waitSince
		}
	}
	for i := range s.sqs {
		q := &s.sqs[i]
		if q.g != wholeGroup || q.k < 2 || q.Len() == 0 {
			continue
		}
		id := q.ids[0]
		j := &s.jobs[id]
		if j.gang >= 0 || s.res.noReserve[id] > s.now || !s.couldFit(1, j.k) || !better(j.base, j.evalAt) {
			continue
		}
		gid, jid, prio, since = -1, id, j.base, j.evalAt
	}
	return gid, jid
}

// couldFit says whether members of per whole GPUs could all fit the ready
// nodes were they empty (one member a node, as gang.Choose keeps them).
func (s *sim) couldFit(members, per int) bool {
	n := 0
	for _, nid := range s.ready {
		if s.nodeWhole(&s.nodes[nid]) >= per {
			n++
		}
	}
	return n >= members
}

// nodeWhole is the whole GPUs node n offers.
func (s *sim) nodeWhole(n *node) int {
	if s.f.Layouts {
		return s.wholeGPUs(n)
	}
	return s.groups[wholeGroup].perNode
}

// outlook is each ready, placeable node as gang.Choose weighs it: its
// whole GPUs, those free, and when each whole-GPU allocation on it is
// predicted to end.
func (s *sim) outlook() []gang.NodeOutlook {
	lv := s.runtimeLevels()
	var out []gang.NodeOutlook
	for _, nid := range s.ready {
		n := &s.nodes[nid]
		if n.ineligible {
			continue
		}
		o := gang.NodeOutlook{ID: strconv.Itoa(int(nid)), GPUs: s.nodeWhole(n), Free: n.free[wholeGroup]}
		for _, id := range n.allocs {
			if j := &s.jobs[id]; j.g == wholeGroup {
				o.Releases = append(o.Releases, gang.Release{GPUs: j.k, At: s.predictedEnd(lv, id)})
			}
		}
		out = append(out, o)
	}
	return out
}

// predictedEnd is when placed job id is predicted to end (predict.Runtime
// on the runs finished so far, through lv); zero when unknown.
func (s *sim) predictedEnd(lv runtimeLevels, id int32) time.Time {
	j := &s.jobs[id]
	var elapsed time.Duration
	if j.state == jobRunning {
		elapsed = s.now - j.since
	}
	d, ok := lv.remaining(j.k, elapsed)
	if !ok {
		return time.Time{}
	}
	return epoch.Add(s.now + d)
}

// runtimeLevels are the whole-GPU runs' seconds, sorted, by GPU count and
// all together: predict.Runtime's pool levels, built once for every
// allocation a reservation weighs (predict.Runtime itself sorts them for
// each). Its job level never applies here: a trace job completes once,
// fewer runs than predict.MinRuns.
type runtimeLevels struct {
	all     []float64
	byCount map[int][]float64
}

func (s *sim) runtimeLevels() runtimeLevels {
	if s.res.levelsOf == len(s.res.history) && s.res.levels.byCount != nil {
		return s.res.levels
	}
	lv := runtimeLevels{byCount: map[int][]float64{}}
	for _, r := range s.res.history {
		if secs, ok := predict.RunSeconds(r); ok {
			lv.all = append(lv.all, secs)
			lv.byCount[r.Slice.Count] = append(lv.byCount[r.Slice.Count], secs)
		}
	}
	slices.Sort(lv.all)
	for _, xs := range lv.byCount {
		slices.Sort(xs)
	}
	s.res.levels, s.res.levelsOf = lv, len(s.res.history)
	return lv
}

// remaining is predict.Runtime's estimate for a whole-GPU allocation of
// count GPUs that has run elapsed: the conditional median of the first
// level with predict.MinRuns runs, else elapsed again, else unknown.
func (lv runtimeLevels) remaining(count int, elapsed time.Duration) (time.Duration, bool) {
	e := max(0, elapsed.Seconds())
	for _, level := range [][]float64{lv.byCount[count], lv.all} {
		if len(level) < predict.MinRuns {
			continue
		}
		if e == 0 {
			return seconds(sortedMedian(level)), true
		}
		longer := level[sort.SearchFloat64s(level, math.Nextafter(e, math.Inf(1))):]
		if len(longer) == 0 {
			return seconds(e), true
		}
		return seconds(sortedMedian(longer) - e), true
	}
	if e > 0 {
		return seconds(e), true
	}
	return 0, false
}

// sortedMedian is predict.Median of xs, sorted already.
func sortedMedian(xs []float64) float64 {
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

// seconds is predict.Estimate.Duration's conversion.
func seconds(x float64) time.Duration { return time.Duration(x * float64(time.Second)) }

// recordRun adds job id's run, ending now, to the history the
// predictions read: whole-GPU runs only, as a reservation weighs only
// whole GPUs.
func (s *sim) recordRun(id int32) {
	if j := &s.jobs[id]; s.f.Reservations && j.g == wholeGroup && !j.placeholder {
		s.res.history = append(s.res.history, history.Run{
			Key: history.Key{Job: s.recs[id].ID}, AllocID: strconv.Itoa(int(id)), Slice: history.Slice{Kind: "gpu", Count: j.k},
			Started: epoch.Add(j.since), Finished: epoch.Add(s.now), Outcome: history.OutcomeComplete,
		})
	}
}

// reservedStillWaits says whether the reservation's work still waits.
func (s *sim) reservedStillWaits() bool {
	if r := &s.res; r.gang >= 0 {
		return s.gangs[r.gang].queued
	}
	return s.jobs[s.res.job].state == jobWaiting
}

// keepOff keeps the reservation's work from being kept again until t.
func (s *sim) keepOff(t time.Duration) {
	r := &s.res
	if r.gang >= 0 {
		s.gangs[r.gang].noReserveUntil = t
		return
	}
	if r.noReserve == nil {
		r.noReserve = map[int32]time.Duration{}
	}
	r.noReserve[r.job] = t
}

// feedReservation places a placeholder allocation on every GPU of a
// reserved node that is free and still wanted, and hands the nodes over
// once they hold a member's GPUs each; true when it did.
func (s *sim) feedReservation() bool {
	r := &s.res
	full := true
	for _, nid := range r.nodes {
		n := &s.nodes[nid]
		held := s.movableOn(nid)
		for _, h := range r.holders {
			if s.jobs[h].node == nid {
				held++
			}
		}
		for held < r.per && n.state == nodeReady && !n.ineligible && s.fits(nid, wholeGroup, 1) {
			s.placeHolder(nid)
			held++
		}
		full = full && held >= r.per
	}
	return full && s.handOver()
}

// placeHolder places one placeholder allocation on node nid.
func (s *sim) placeHolder(nid int32) {
	r := &s.res
	var id int32
	if k := len(r.spare); k > 0 {
		id, r.spare = r.spare[k-1], r.spare[:k-1]
	} else {
		id = int32(len(s.jobs))
		s.jobs = append(s.jobs, job{g: wholeGroup, k: 1, units: s.groups[wholeGroup].units, node: -1, allocPos: -1,
			qi: -1, mig: -1, avoid: -1, gang: -1, placeholder: true, remaining: s.horizon, dur: s.horizon})
		s.recs = append(s.recs, tracereplay.JobRecord{ID: "placeholder"})
	}
	j := &s.jobs[id]
	j.base, j.prio, j.state = r.prio, r.prio, jobHolding
	s.place(id, nid, s.startDelay(wholeGroup))
	r.holders = append(r.holders, id)
}

// handOver places the reservation's work on its nodes in the
// placeholder's stead, and ends it; false when the work does not fit them
// once the placeholder let go (the next round feeds it again).
func (s *sim) handOver() bool {
	r := &s.res
	s.releaseHolders()
	s.moveOffMovable()
	if !s.reservedFit() {
		return false
	}
	if r.gang >= 0 {
		g := &s.gangs[r.gang]
		s.gangQueue = slices.DeleteFunc(s.gangQueue, func(x int32) bool { return x == r.gang })
		for i, m := range g.members {
			s.placeMember(m, r.nodes[i])
		}
	} else {
		s.jobs[r.job].evalAt = s.now
		s.place(r.job, r.nodes[0], s.startDelay(wholeGroup))
	}
	r.handed++
	r.active = false
	return true
}

// reservedFit says whether the work fits its reserved nodes now, a member
// on each: a placeholder's GPU that was being relaid does not come back
// when it lets go, and then the work waits on.
func (s *sim) reservedFit() bool {
	r := &s.res
	for _, nid := range r.nodes {
		if s.nodes[nid].state != nodeReady || !s.fits(nid, wholeGroup, r.per) {
			return false
		}
	}
	return true
}

// endReservation lets its GPUs go.
func (s *sim) endReservation() {
	s.releaseHolders()
	s.res.active = false
	s.capVer[wholeGroup]++
	s.dirty = true
}

// releaseHolders frees the placeholder's allocations.
func (s *sim) releaseHolders() {
	r := &s.res
	for _, h := range r.holders {
		s.release(h)
		s.jobs[h].state = jobHolding
		s.jobs[h].epoch++
		r.idle += s.now - s.jobs[h].placedAt
		r.spare = append(r.spare, h)
	}
	r.holders = r.holders[:0]
}

// placeholderLost is a placeholder allocation preempted or refused (its
// devices released): the next round places it again where it may.
func (s *sim) placeholderLost(id int32) {
	r := &s.res
	r.idle += s.now - s.jobs[id].placedAt
	s.jobs[id].state = jobHolding
	r.holders = slices.DeleteFunc(r.holders, func(h int32) bool { return h == id })
	r.spare = append(r.spare, id)
}

// reservationIdle is the GPU-seconds placeholders held by the horizon.
func (s *sim) reservationIdle() float64 {
	idle := s.res.idle
	for _, h := range s.res.holders {
		idle += max(0, s.horizon-s.jobs[h].placedAt)
	}
	return idle.Seconds()
}

// backfill is controller/backfill.go's round: the first waiting job in
// the broker's order that asks whole GPUs, below the reservation's
// priority, no gang's member, and that gang.Backfill lets on (predicted
// to end before the reservation is due with gang.BackfillMargin to
// spare, or movable: Features.Moves, whose jobs checkpoint and opt in)
// takes the GPUs of placeholder allocations on a kept node, the pinned
// raise preempting them; true when it placed one.
func (s *sim) backfill() bool {
	r := &s.res
	if len(r.holders) == 0 {
		return false
	}
	lv := s.runtimeLevels()
	now := epoch.Add(s.now)
	best, bestNode := int32(-1), int32(-1)
	for i := range s.sqs {
		q := &s.sqs[i]
		if q.g != wholeGroup {
			continue
		}
		for _, id := range q.ids {
			j := &s.jobs[id]
			if j.gang >= 0 || id == r.job || j.base >= r.prio || (best >= 0 && !s.before(id, best)) {
				continue
			}
			nid := s.backfillNode(j.k)
			if nid < 0 {
				continue
			}
			rt, known := lv.remaining(j.k, 0)
			if gang.Backfill(gang.Work{Runtime: rt, Known: known, Movable: s.f.Moves}, now, r.due, gang.BackfillMargin) {
				best, bestNode = id, nid
			}
		}
	}
	if best < 0 {
		return false
	}
	s.freeHolders(bestNode, s.jobs[best].k)
	if !s.fits(bestNode, wholeGroup, s.jobs[best].k) {
		return false // a placeholder's GPU that was being relaid: the next round feeds it again
	}
	s.place(best, bestNode, s.startDelay(wholeGroup)+s.preemptDelay)
	r.backfills++
	if s.f.Moves {
		r.movable = append(r.movable, best)
	}
	return true
}

// backfillNode is the kept node where placeholder allocations and free
// GPUs make k, the first in the reservation's order; -1 for none.
func (s *sim) backfillNode(k int) int32 {
	for _, nid := range s.res.nodes {
		have := s.nodes[nid].free[wholeGroup]
		for _, h := range s.res.holders {
			if s.jobs[h].node == nid {
				have++
			}
		}
		if have >= k {
			return nid
		}
	}
	return -1
}

// freeHolders lets go of placeholder allocations on node nid until k
// whole GPUs are free there (or none is left).
func (s *sim) freeHolders(nid int32, k int) {
	r := &s.res
	for i := len(r.holders) - 1; i >= 0 && s.nodes[nid].free[wholeGroup] < k; i-- {
		if h := r.holders[i]; s.jobs[h].node == nid {
			s.stopRun(h, false)
		}
	}
}

// movableOn are the GPUs of node nid that jobs backfilled as movable
// hold: the handover takes them with the placeholder's.
func (s *sim) movableOn(nid int32) int {
	n := 0
	for _, id := range s.res.movable {
		if j := &s.jobs[id]; j.node == nid && (j.state == jobPending || j.state == jobRunning) {
			n += j.k
		}
	}
	return n
}

// moveOffMovable stops, checkpointed, the movable backfilled jobs on the
// reserved nodes at the handover (its plan preempts them), and queues
// them again.
func (s *sim) moveOffMovable() {
	r := &s.res
	for _, id := range r.movable {
		j := &s.jobs[id]
		if (j.state == jobPending || j.state == jobRunning) && slices.Contains(r.nodes, j.node) {
			s.evict(id)
			// Protected once it runs again, as any preempted job, at the
			// handover's priority.
			j.raiseTo, j.evalAt = min(maxPriority, r.prio+10), s.now
			s.enqueue(id)
		}
	}
	r.movable = r.movable[:0]
}
