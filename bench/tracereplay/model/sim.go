package model

import (
	"container/heap"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/nomad-gpu/nomad-gpu/bench/tracereplay"
	"github.com/nomad-gpu/nomad-gpu/controller/layoutplan"
)

// maxPriority is Nomad's highest job priority.
const maxPriority = 100

// rescheduleDelay is the replay's jobs' reschedule delay (e2e replayJob's
// reschedule block: attempts 1, delay 5s, constant): wall clock.
const rescheduleDelay = 5 * time.Second

// preemptGap is how far below a job's priority Nomad preempts.
const preemptGap = 10

// samplesDefault is the timeline's length when Options.SampleEvery is 0.
const samplesDefault = 600

type jobStateKind uint8

const (
	jobFuture  jobStateKind = iota // not arrived yet
	jobWaiting                     // in a sub-queue, holding nothing
	jobPending                     // placed, waiting out its start latency
	jobRunning
	jobDone
	// jobFailed: its placement was refused for a relayout (refuse); it is
	// in no queue until Nomad's reschedule or the controller's forced
	// reschedule places it again.
	jobFailed
	// jobGang: a gang's member waiting for the gang's admission
	// (Features.Gangs, gangs.go), in no queue.
	jobGang
	// jobHolding: a reservation's placeholder allocation not placed
	// (reservations.go).
	jobHolding
	// jobHeld: held for the team queues' admission (Features.Queues,
	// queues.go), in no queue.
	jobHeld
)

type nodeStateKind uint8

const (
	nodeBooting nodeStateKind = iota
	nodeReady
	nodeRemoving
	nodeGone
)

// group is one kind of device instance a node offers: whole GPUs, MPS
// shares, or the instances of one MIG profile. Capacity of one group never
// serves another's requests, which is what lets the scheduler keep its
// retry bookkeeping per group.
type group struct {
	kind, profile string
	// perNode is the instances one node has.
	perNode int
	// units is one instance's GPU-equivalents in units of 1/unitsPerGPU,
	// integers so that sums of shares and sevenths stay exact.
	units int
}

type job struct {
	g, k    int // group and instance count
	units   int // held, in units
	base    int // priority of the trace
	prio    int // effective priority: base, or a protection's raise while running
	arrival time.Duration
	// evalAt is when its current evaluation was made: its arrival or its
	// preemption (a raise in place of a running job makes no waiting
	// evaluation). The broker takes evaluations of one priority oldest
	// first.
	evalAt    time.Duration
	dur       time.Duration // its whole run time
	remaining time.Duration
	util      float64
	state     jobStateKind
	// epoch invalidates run, finish and exemption events of an earlier
	// allocation; raise invalidates the start and end of an earlier
	// protection.
	epoch, raise uint32
	// raiseTo is the priority its next run is protected at (its last
	// preemptor's); 0: none.
	raiseTo  int
	node     int32
	allocPos int32 // in its node's allocs
	since    time.Duration
	sq       int32 // sub-queue
	qi       int32 // position in the sub-queue's heap
	mps      []int16
	mig      int32 // slot held, MIG GPU × len(profiles) + profile index
	moves    int   // times moved (Features.Moves)
	// relay are the GPUs being relaid it holds instances of (layouts.go),
	// each as gpu<<1, | 1 where it took them before the plugin drained the
	// GPU (it holds the GPU: the relayout is abandoned); refused: it took
	// one while the plugin drained it, and its Reserve will be refused.
	relay   []int16
	refused bool
	// rescheduled: Nomad's one reschedule (the replay's reschedule block,
	// attempts 1) is spent.
	rescheduled bool
	// avoid is the node of its refused placement, which its reschedule
	// avoids; -1: none.
	avoid int32
	// gang is the gang it is a member of (gangs.go), -1 for none;
	// placedAt when its current allocation was placed.
	gang     int32
	placedAt time.Duration
	// placeholder: it is a reservation's 1-GPU allocation
	// (reservations.go), no job of the trace.
	placeholder bool
}

type node struct {
	state    nodeStateKind
	free     []int   // per group
	pos      []int32 // position in buckets[g][free[g]], per group
	readyPos int32
	held     int // units
	allocs   []int32
	mpsUsed  []int // shares held, per MPS GPU (with layouts, per GPU)
	// With layouts, per GPU: offered as MPS shares (else whole); being
	// relaid (its instances withdrawn until the change applies); when the
	// planner last changed it (-1: never).
	gpuMPS, moving []bool
	changed        []time.Duration
	// With layouts, per GPU being relaid (layouts.go): when the plugin
	// reads the ask (drains it, or finds it held), when the servers learn
	// of the outcome, the allocations holding its instances since the ask,
	// and of them those placed before the drain (they hold the GPU).
	drainAt, seenAt, resolveAt []time.Duration
	withdrawn                  []bool
	nMoving                    int // GPUs being relaid
	relayHeld, takers          []int
	mig                        []bool // held, per MIG slot
	migUsed                    []int  // instances held, per MIG GPU
	// ineligible: the move module holds it (moves.go); nothing is placed
	// on it.
	ineligible bool
	// wanted is when it became ready, or took work back after it was
	// emptied for removal (scalein.go).
	wanted time.Duration
	// spot: a spot node (Features.Spot, spot.go).
	spot bool
}

type eventKind uint8

const (
	evArrive eventKind = iota
	evRun
	evFinish
	evNodeReady
	evNodeGone
	evRaiseStart
	evRaiseEnd
	evExempt
	evScale
	evSample
	evLayout
	evHoldEnd
	evReschedule
	evForce
	evDrainSeen
	evGangFinish
	// evReserveHold is a reservation's ReservationMaxHold up: a round.
	evReserveHold
	// evScaleIn is a quiet period's end or an emptied node's tasks gone:
	// a scale-in round (scalein.go).
	evScaleIn
	// evReclaim is a spot node's reclaim notice (spot.go).
	evReclaim
)

// class orders an instant's events: every state change first, then (after
// the scheduler's pass) the autoscaler, then the sample, so both see the
// instant's placements.
func (k eventKind) class() uint8 {
	switch k {
	case evScale:
		return 1
	case evSample:
		return 2
	}
	return 0
}

type event struct {
	t     time.Duration
	class uint8
	kind  eventKind
	id    int32
	epoch uint32
	seq   uint64
}

type eventHeap []event

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	a, b := &h[i], &h[j]
	if a.t != b.t {
		return a.t < b.t
	}
	if a.class != b.class {
		return a.class < b.class
	}
	return a.seq < b.seq
}
func (h eventHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *eventHeap) Push(x any)   { *h = append(*h, x.(event)) }
func (h *eventHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// subqueue holds the waiting jobs of one shape (group, count). Jobs of one
// shape that come later in the broker's order can fit only where the first
// fits, so a pass stops at a sub-queue's first failure instead of trying
// every waiting job.
type subqueue struct {
	s    *sim
	g, k int
	ids  []int32
	mi   int // position in the pass's merge heap; -1 outside it
	// tried is the head that last failed and triedCap the group's capacity
	// version then: the head is not tried again until one changes.
	tried    int32
	triedCap uint64
	// active counts its jobs arrived and not done, waiting or placed:
	// the shape's weight in the layout planner's mix.
	active int
}

func (q *subqueue) Len() int           { return len(q.ids) }
func (q *subqueue) Less(i, j int) bool { return q.s.before(q.ids[i], q.ids[j]) }
func (q *subqueue) Swap(i, j int) {
	q.ids[i], q.ids[j] = q.ids[j], q.ids[i]
	q.s.jobs[q.ids[i]].qi = int32(i)
	q.s.jobs[q.ids[j]].qi = int32(j)
}
func (q *subqueue) Push(x any) {
	id := x.(int32)
	q.s.jobs[id].qi = int32(len(q.ids))
	q.ids = append(q.ids, id)
}
func (q *subqueue) Pop() any {
	id := q.ids[len(q.ids)-1]
	q.ids = q.ids[:len(q.ids)-1]
	q.s.jobs[id].qi = -1
	return id
}

// mergeHeap orders a pass's sub-queues by their heads: the broker's order
// over every waiting job.
type mergeHeap struct {
	s   *sim
	sqs []int
}

func (m *mergeHeap) Len() int { return len(m.sqs) }
func (m *mergeHeap) Less(i, j int) bool {
	return m.s.before(m.s.sqs[m.sqs[i]].ids[0], m.s.sqs[m.sqs[j]].ids[0])
}
func (m *mergeHeap) Swap(i, j int) {
	m.sqs[i], m.sqs[j] = m.sqs[j], m.sqs[i]
	m.s.sqs[m.sqs[i]].mi = i
	m.s.sqs[m.sqs[j]].mi = j
}
func (m *mergeHeap) Push(x any) {
	q := x.(int)
	m.s.sqs[q].mi = len(m.sqs)
	m.sqs = append(m.sqs, q)
}
func (m *mergeHeap) Pop() any {
	q := m.sqs[len(m.sqs)-1]
	m.sqs = m.sqs[:len(m.sqs)-1]
	m.s.sqs[q].mi = -1
	return q
}

type sim struct {
	o      Options
	cl     tracereplay.Cluster
	f      tracereplay.Features
	groups []group
	// unitsPerGPU is 7 × the MPS shares per GPU: a share is 7 units, a
	// MIG seventh MPSShares units.
	unitsPerGPU int
	mpsGroup    int   // -1 without MPS
	slotGroup   []int // group of each MIG profile slot
	mpsShares   int

	// Trace-time figures.
	preemptDelay, boot, remove time.Duration
	// starts are each group's start latency (its kind's where the run
	// measured one, else Start), drawn from startRng.
	starts                                []latency
	startRng                              *rand.Rand
	commitExit                            time.Duration
	evalEvery, cooldown, scaleInAfter     time.Duration
	protectFor, protectAfter, minRuntime  time.Duration
	horizon, sampleEvery                  time.Duration
	samples                               int
	now                                   time.Duration
	seq                                   uint64
	events                                eventHeap
	dirty                                 bool
	nodes                                 []node
	buckets                               [][][]int32 // [group][free] → node ids
	ready                                 []int32
	nBooting, nReady, nRemoving, heldUnit int

	jobs []job
	recs []tracereplay.JobRecord
	rng  *rand.Rand
	// heldInst are the instances held per group (pending and running).
	heldInst []int
	// Scratch space for placement.
	scan    []int32
	sqs     []subqueue
	capVer  []uint64
	cntPrio [][maxPriority + 1]int // allocations held, per group and effective priority
	waiting int
	pending int
	merge   mergeHeap

	hasAction  bool
	lastAction time.Duration
	low        bool
	lowSince   time.Duration

	timeline []tracereplay.Sample
	notes    []string
	// Layouts (Features.Layouts): the relayout latency, drawn from
	// layoutRng, and the planner's hysteresis in trace time, and the
	// changes applied.
	layoutLat         latency
	layoutRng         *rand.Rand
	layoutMinInterval time.Duration
	// layoutDrain is LayoutPoll, and rescheduleDelay how long a refused
	// placement waits for Nomad's reschedule, in trace time (layouts.go).
	layoutDrain, layoutSwitch, rescheduleDelay time.Duration
	relayBuf                                   []int
	layoutChanges                              []tracereplay.LayoutChange
	// failed counts the jobs whose placement a relayout refused, not yet
	// placed again; refusals and cancels count the refused placements and
	// the relayouts abandoned to a placement, for the notes.
	failed, refusals, cancels int
	// nodeReadyAt is when a node last became ready; prePlanned that the
	// controller's round on it ran; prePass that the round plans before
	// the scheduler's pass at this instant (schedule).
	nodeReadyAt         time.Duration
	prePlanned, prePass bool
	moves               moveState
	si                  scaleInState
	bey                 beyondState
	// Scratch space for preemption.
	cand, chosen, best []int32
	// nodeBest are one node's victims; binOrder its device groups' order.
	nodeBest []int32
	binOrder []int
	// names are the nodes' names, by id: the layout and move rounds name
	// every node; uuids the planner's GPU UUIDs (planLayouts).
	names, uuids []string
	// byName are the nodes' ids in their names' string order.
	byName []int32
	// Scratch space for the layout round: its GPUs and their nodes, and
	// the Held lists of MPS GPUs by shares held.
	planBuf []layoutplan.GPU
	refBuf  []planRef
	heldMPS [][]string
	// nTrace is the trace's jobs: s.jobs[:nTrace] (a gang's first
	// member among them); gang members and placeholders follow.
	nTrace int
	// gangs are the trace's jobs bigger than a node (gangs.go), gangQueue
	// those waiting for admission; res is the reservation module's state
	// (reservations.go).
	gangs     []gangJob
	gangQueue []int32
	gangRound gangRoundState
	res       reserveState
	// qs are the team queues (Features.Queues, queues.go); nil: none.
	// spare, while the gate plans a held job, says which allocations its
	// plan may not preempt.
	qs    *queueState
	spare func(int32) bool
	// spot is the spot pool's state (Features.Spot, spot.go).
	spot spotState
}

func newSim(tr tracereplay.Trace, o Options) *sim {
	s := &sim{o: o, cl: o.Cluster, f: o.Config.Features, mpsGroup: -1, moves: moveState{held: -1, forJob: -1}, si: scaleInState{markedAt: -1}, nodeReadyAt: -1}
	s.merge.s = s
	s.rng = rand.New(rand.NewPCG(uint64(o.Seed), 0x6e6f6d6164)) //nolint:gosec // a model's placement draw, not a secret
	c := o.Compression
	scale := func(d time.Duration) time.Duration { return time.Duration(math.Round(float64(d) * c)) }
	s.preemptDelay = scale(o.Latencies.Preempt)
	// Their own streams: the placements' draws stay those of a run
	// without the spreads.
	s.startRng = rand.New(rand.NewPCG(uint64(o.Seed), 0x7374617274))    //nolint:gosec // a model's draw
	s.layoutRng = rand.New(rand.NewPCG(uint64(o.Seed), 0x6c61796f7574)) //nolint:gosec // a model's draw
	s.boot, s.remove = scale(o.Latencies.Boot), scale(o.Latencies.Remove)
	// The commit is part of the stop: at most all of it.
	s.commitExit = scale(min(o.Latencies.CommitExit, o.Latencies.Preempt))
	s.evalEvery, s.cooldown, s.scaleInAfter = scale(o.Policy.EvalInterval), scale(o.Policy.Cooldown), scale(o.Policy.ScaleInAfter)
	if s.f.Checkpoints {
		// Protection is nomad-gpu's controller: stock preemption has none.
		s.protectFor, s.protectAfter = scale(o.Policy.PreemptionCooldown), scale(o.Policy.ProtectReaction)
		s.minRuntime = scale(o.Policy.PreemptMinRuntime)
	}
	if s.f.Layouts {
		// Wall-clock like the preemption cooldown: the controller's
		// -layout-min-interval and the apply sequence's latency.
		s.layoutLat = latency{p50: scale(o.Latencies.LayoutOr()), p95: scale(o.Latencies.LayoutP95)}
		s.layoutMinInterval = scale(o.Policy.LayoutMinInterval)
		s.layoutDrain = scale(tracereplay.LayoutPoll / 2)
		s.layoutSwitch = scale(tracereplay.LayoutSwitch)
		s.rescheduleDelay = scale(rescheduleDelay)
	}

	if s.f.Moves {
		s.moves.settle, s.moves.holdMax, s.moves.window = scale(o.Policy.MoveSettle), scale(o.Policy.MoveHold), scale(time.Hour)
	}
	if s.f.ScaleIn {
		s.si.quiet, s.si.wait = scale(o.Policy.ScaleInQuiet), scale(o.Policy.ScaleInWait)
	}
	if s.f.Autoscale == tracereplay.AutoscaleGPUQueue && o.Policy.Beyond > 0 {
		s.bey.d, s.bey.window = scale(o.Policy.Beyond), scale(forecastWindow)
	}

	s.buildGroups()
	s.starts = make([]latency, len(s.groups))
	for g := range s.groups {
		sp, ok := o.Latencies.StartByKind[s.groups[g].kind]
		if !ok {
			sp = tracereplay.Spread{P50: o.Latencies.Start, P95: o.Latencies.StartP95, P99: o.Latencies.StartP99}
		}
		s.starts[g] = latency{p50: scale(sp.P50), p95: scale(sp.P95), p99: scale(max(sp.P95, sp.P99))}
	}
	s.buildJobs(tr)
	if s.f.Queues {
		s.initQueues()
	}
	s.horizon = o.Horizon
	if s.horizon == 0 {
		s.horizon = defaultHorizon(tr)
	}
	s.samples = samplesDefault
	if o.SampleEvery > 0 {
		s.sampleEvery = o.SampleEvery
	}

	if s.f.Spot {
		s.initSpot(tr)
	}
	for i := range o.Config.StartNodes(s.cl) {
		id := s.addNode()
		if i >= s.cl.MinNodes {
			s.makeSpot(id) // the burst group's
		}
		s.setReady(id)
	}
	s.spot.atStart = s.spot.started
	for i := range s.nTrace {
		if s.jobs[i].arrival <= s.horizon {
			s.push(s.jobs[i].arrival, evArrive, int32(i), 0)
		}
	}
	s.push(0, evSample, 0, 0)
	if s.f.Autoscale != "" {
		s.push(s.evalEvery, evScale, 0, 0)
	}
	return s
}

func defaultHorizon(tr tracereplay.Trace) time.Duration {
	var last, longest time.Duration
	for _, j := range tr.Jobs {
		last = max(last, j.Arrival)
		longest = max(longest, j.Duration)
	}
	if last == 0 {
		return longest
	}
	return last + tr.Span()/10
}

func (s *sim) buildGroups() {
	cl := s.cl
	s.mpsShares = 1
	if s.f.Slices && cl.MPSGPUs > 0 {
		s.mpsShares = cl.MPSShares
	}
	if s.f.Layouts {
		s.mpsShares = cl.Shares()
	}
	s.unitsPerGPU = 7 * s.mpsShares
	s.groups = append(s.groups, group{kind: "gpu", perNode: cl.WholeGPUs(s.f), units: s.unitsPerGPU})
	if s.f.Layouts {
		// Every GPU may become MPS shares: perNode bounds a node's free
		// shares; a node starts with none (addNode).
		s.mpsGroup = len(s.groups)
		s.groups = append(s.groups, group{kind: "mps", perNode: cl.GPUsPerNode * s.mpsShares, units: 7})
	}
	if s.f.Slices && cl.MPSGPUs > 0 {
		s.mpsGroup = len(s.groups)
		s.groups = append(s.groups, group{kind: "mps", perNode: cl.MPSGPUs * cl.MPSShares, units: 7})
	}
	if s.f.Slices && cl.MIGGPUs > 0 {
		for _, p := range cl.MIGProfiles {
			g := s.groupOf("mig", p)
			if g < 0 {
				sev, _ := tracereplay.MIGSevenths(p) // Validate checked it
				g = len(s.groups)
				s.groups = append(s.groups, group{kind: "mig", profile: p, units: sev * s.mpsShares})
			}
			s.groups[g].perNode += cl.MIGGPUs
			s.slotGroup = append(s.slotGroup, g)
		}
	}
	s.buckets = make([][][]int32, len(s.groups))
	for g := range s.groups {
		s.buckets[g] = make([][]int32, s.groups[g].perNode+1)
	}
	s.capVer = make([]uint64, len(s.groups))
	s.heldInst = make([]int, len(s.groups))
	s.cntPrio = make([][maxPriority + 1]int, len(s.groups))
}

func (s *sim) groupOf(kind, profile string) int {
	for g := range s.groups {
		if s.groups[g].kind == kind && s.groups[g].profile == profile {
			return g
		}
	}
	return -1
}

func (s *sim) buildJobs(tr tracereplay.Trace) {
	s.jobs = make([]job, len(tr.Jobs))
	s.recs = make([]tracereplay.JobRecord, len(tr.Jobs))
	sqOf := map[[2]int]int32{} // lookups only: sub-queues are kept in order of first use
	var gangs []int
	unfit := make([]int, len(s.groups))
	for i, tj := range tr.Jobs {
		sl := s.cl.Slice(tj, s.f)
		g := s.groupOf(sl.Kind, sl.Profile)
		if g < 0 {
			panic(fmt.Sprintf("model: slice %+v has no device group", sl)) // Cluster.Slice only asks for what the layout has
		}
		if sl.Count > s.groups[g].perNode {
			unfit[g]++
		}
		key := [2]int{g, sl.Count}
		q, ok := sqOf[key]
		if !ok {
			q = int32(len(s.sqs))
			sqOf[key] = q
			s.sqs = append(s.sqs, subqueue{g: g, k: sl.Count, mi: -1, tried: -1})
		}
		p := tj.EffectivePriority()
		s.jobs[i] = job{
			g: g, k: sl.Count, units: sl.Count * s.groups[g].units, base: p, prio: p,
			arrival: tj.Arrival, dur: tj.Duration, remaining: tj.Duration, util: tj.EffectiveUtil(),
			node: -1, allocPos: -1, sq: q, qi: -1, mig: -1, avoid: -1, gang: -1,
		}
		s.recs[i] = tj.Record(sl)
		if sl.Members > 1 {
			gangs = append(gangs, i)
		}
	}
	s.nTrace = len(s.jobs)
	for _, i := range gangs {
		s.buildGang(i, tr.Jobs[i], s.recs[i].Slice.Members)
	}
	for i := range s.sqs {
		s.sqs[i].s = s
	}
	for g, n := range unfit {
		if n > 0 {
			gr := s.groups[g]
			what := "whole GPUs"
			if s.f.Slices && gr.kind == "gpu" {
				what = "whole GPUs (the others being MPS or MIG GPUs)"
			} else if gr.kind != "gpu" {
				what = gr.kind + " instances"
			}
			s.notes = append(s.notes, fmt.Sprintf("%d jobs ask for more %s than a node offers (%d); they never run", n, what, gr.perNode))
		}
	}
}

func (s *sim) push(t time.Duration, k eventKind, id int32, epoch uint32) {
	s.seq++
	heap.Push(&s.events, event{t: t, class: k.class(), kind: k, id: id, epoch: epoch, seq: s.seq})
}

// before is the eval broker's order (ReadyEvaluations): effective
// priority, then the older evaluation, then trace order.
func (s *sim) before(a, b int32) bool {
	x, y := &s.jobs[a], &s.jobs[b]
	if x.prio != y.prio {
		return x.prio > y.prio
	}
	if x.evalAt != y.evalAt {
		return x.evalAt < y.evalAt
	}
	return a < b
}

func (s *sim) run() {
	for len(s.events) > 0 {
		e := s.events[0]
		if e.t > s.horizon {
			break
		}
		if s.dirty && (e.t > s.now || e.class > 0) {
			s.dirty = false
			s.schedule()
			continue // the pass may have added events at this instant
		}
		heap.Pop(&s.events)
		s.now = e.t
		s.handle(e)
	}
	// Placements at the horizon start nothing, so a last pass is moot.
}

func (s *sim) handle(e event) {
	switch e.kind {
	case evArrive:
		if s.jobs[e.id].gang >= 0 {
			s.arriveGang(s.jobs[e.id].gang)
			return
		}
		s.jobs[e.id].evalAt = s.now
		s.sqs[s.jobs[e.id].sq].active++
		if s.qs != nil {
			s.holdJob(e.id)
			return
		}
		s.enqueue(e.id)
		s.dirty = true
	case evRun:
		j := &s.jobs[e.id]
		if j.epoch != e.epoch || j.state != jobPending {
			return
		}
		if j.refused {
			s.refuse(e.id) // its Reserve, at the task's start
			return
		}
		j.state = jobRunning
		j.avoid = -1
		s.pending--
		s.si.starts++
		j.since = s.now
		if j.placeholder {
			return
		}
		if j.gang >= 0 {
			s.memberRunning(e.id)
			s.protect(e.id)
			return
		}
		s.recs[e.id].Runs = append(s.recs[e.id].Runs, tracereplay.Run{
			Start: s.now, Node: s.names[j.node], Held: s.holds(e.id), Restored: j.dur - j.remaining, ProgressKnown: true,
		})
		s.push(s.now+j.remaining, evFinish, e.id, j.epoch)
		s.protect(e.id)
	case evFinish:
		j := &s.jobs[e.id]
		if j.epoch != e.epoch || j.state != jobRunning {
			return
		}
		s.recordRun(e.id)
		s.release(e.id)
		s.sqs[j.sq].active--
		j.state = jobDone
		j.remaining = 0
		s.recs[e.id].Done, s.recs[e.id].Finish = true, s.now
		run := s.lastRun(e.id)
		run.End, run.Reached = s.now, j.dur
		s.runEnded(e.id)
		s.capVer[j.g]++
		s.dirty = true
	case evNodeReady:
		if s.nodes[e.id].state == nodeBooting {
			s.setReady(e.id)
			s.nodeReadyAt, s.prePlanned = s.now, false
			for g := range s.capVer {
				s.capVer[g]++
			}
			s.dirty = true
		}
	case evNodeGone:
		s.nodes[e.id].state = nodeGone
		s.nRemoving--
		if s.nodes[e.id].spot {
			s.spot.up--
		}
		s.scaleInGone(e.id)
	case evRaiseStart:
		if j := &s.jobs[e.id]; j.raise == e.epoch && j.state == jobRunning {
			s.setPrio(e.id, j.raiseTo)
		}
	case evRaiseEnd:
		if j := &s.jobs[e.id]; j.raise == e.epoch && j.state == jobRunning {
			s.setPrio(e.id, j.base)
		}
	case evExempt:
		if j := &s.jobs[e.id]; j.epoch == e.epoch && j.state == jobRunning {
			// A preemption candidate now: blocked jobs of its kind look again.
			s.capVer[j.g]++
			s.dirty = true
		}
	case evScale:
		s.autoscale()
		if s.f.Spot {
			s.autoscaleOnDemand()
		}
		if s.f.ScaleIn {
			// The controller's tick, which sees starts too; after the
			// evaluation, so that work it moves is placed before the next.
			s.scaleInRound()
		}
		s.push(s.now+s.evalEvery, evScale, 0, 0)
	case evLayout:
		s.applyLayout(e.id, int(e.epoch))
	case evDrainSeen:
		s.drainSeen(e.id, int(e.epoch))
	case evReschedule:
		s.reschedule(e.id, e.epoch)
	case evForce:
		s.forceReschedule(e.id, e.epoch)
	case evHoldEnd:
		if s.moves.held == e.id && s.moves.heldEpoch == e.epoch {
			if s.si.remove {
				s.scaleInHold() // -scale-in-wait is up, unless it is being removed
			} else {
				s.endHold()
			}
		}
	case evScaleIn:
		s.si.kicks++
		if !s.dirty {
			s.scaleInRound() // else the pass to come runs it (afterPass)
		}
	case evGangFinish:
		s.finishGang(e.id, e.epoch)
	case evReclaim:
		s.reclaim(e.id)
	case evReserveHold:
		s.dirty = true
	case evSample:
		s.sample()
		if next, ok := s.nextSample(e.epoch + 1); ok {
			s.push(next, evSample, 0, e.epoch+1)
		}
	}
}

// nextSample is the i-th sample's time: i × SampleEvery, with a last one
// at the horizon; by default the horizon split in samplesDefault steps.
func (s *sim) nextSample(i uint32) (time.Duration, bool) {
	if s.sampleEvery == 0 {
		if s.horizon == 0 || int(i) > s.samples {
			return 0, false
		}
		return time.Duration(int64(s.horizon)/int64(s.samples)*int64(i) +
			int64(s.horizon)%int64(s.samples)*int64(i)/int64(s.samples)), true
	}
	prev := time.Duration(i-1) * s.sampleEvery
	if prev >= s.horizon {
		return 0, false
	}
	return min(time.Duration(i)*s.sampleEvery, s.horizon), true
}

// Nodes.

func (s *sim) addNode() int32 {
	cl := s.cl
	n := node{state: nodeBooting, free: make([]int, len(s.groups)), pos: make([]int32, len(s.groups)), readyPos: -1}
	for g := range s.groups {
		n.free[g] = s.groups[g].perNode
		n.pos[g] = -1
	}
	if s.mpsGroup >= 0 && !s.f.Layouts {
		n.mpsUsed = make([]int, cl.MPSGPUs)
	}
	if s.f.Layouts {
		s.addLayouts(&n)
	}
	if len(s.slotGroup) > 0 {
		n.mig = make([]bool, cl.MIGGPUs*len(s.slotGroup))
		n.migUsed = make([]int, cl.MIGGPUs)
	}
	s.nodes = append(s.nodes, n)
	id := int32(len(s.nodes) - 1)
	s.names = append(s.names, nodeName(id))
	at, _ := slices.BinarySearchFunc(s.byName, s.names[id], func(nid int32, name string) int {
		return strings.Compare(s.names[nid], name) // the planner's order, not compareNodeNames'
	})
	s.byName = slices.Insert(s.byName, at, id)
	s.nBooting++
	return int32(len(s.nodes) - 1)
}

func (s *sim) setReady(id int32) {
	n := &s.nodes[id]
	n.state = nodeReady
	n.wanted = s.now
	if s.f.ScaleIn {
		s.push(s.now+s.si.quiet, evScaleIn, id, 0)
	}
	s.nBooting--
	if n.spot {
		s.spotReady(id)
	}
	n.readyPos = int32(len(s.ready))
	s.ready = append(s.ready, id)
	s.nReady++
	for g, f := range n.free {
		s.bucketAdd(g, f, id)
	}
}

// startRemoval takes an idle ready node out of service.
func (s *sim) startRemoval(id int32) { s.startRemovalAfter(id, s.remove) }

// startRemovalAfter takes an idle ready node out of service; it is gone
// after d.
func (s *sim) startRemovalAfter(id int32, d time.Duration) {
	n := &s.nodes[id]
	if n.spot {
		s.spot.live--
	}
	for g, f := range n.free {
		s.bucketDel(g, f, id)
	}
	last := s.ready[len(s.ready)-1]
	s.ready[n.readyPos] = last
	s.nodes[last].readyPos = n.readyPos
	s.ready = s.ready[:len(s.ready)-1]
	n.readyPos = -1
	n.state = nodeRemoving
	s.nReady--
	s.nRemoving++
	s.push(s.now+d, evNodeGone, id, 0)
}

func (s *sim) bucketAdd(g, f int, id int32) {
	if f == 0 {
		return
	}
	b := &s.buckets[g][f]
	s.nodes[id].pos[g] = int32(len(*b))
	*b = append(*b, id)
}

func (s *sim) bucketDel(g, f int, id int32) {
	if f == 0 {
		return
	}
	b := s.buckets[g][f]
	p := s.nodes[id].pos[g]
	last := b[len(b)-1]
	b[p] = last
	s.nodes[last].pos[g] = p
	s.buckets[g][f] = b[:len(b)-1]
	s.nodes[id].pos[g] = -1
}

func (s *sim) changeFree(id int32, g, delta int) {
	n := &s.nodes[id]
	old := n.free[g]
	n.free[g] = old + delta
	if n.state == nodeReady {
		s.bucketDel(g, old, id)
		s.bucketAdd(g, old+delta, id)
	}
}

// Queue.

func (s *sim) enqueue(id int32) {
	j := &s.jobs[id]
	j.state = jobWaiting
	s.waiting++
	q := &s.sqs[j.sq]
	heap.Push(q, id)
	if q.mi >= 0 {
		heap.Fix(&s.merge, q.mi)
	}
}

func (s *sim) dequeue(id int32) {
	j := &s.jobs[id]
	q := &s.sqs[j.sq]
	heap.Remove(q, int(j.qi))
	s.waiting--
	if q.mi >= 0 {
		if q.Len() == 0 {
			heap.Remove(&s.merge, q.mi)
		} else {
			heap.Fix(&s.merge, q.mi)
		}
	}
}

// Allocations.

// place gives a waiting job its devices on node id; it runs after delay.
func (s *sim) place(id int32, nid int32, delay time.Duration) {
	j := &s.jobs[id]
	if j.state == jobWaiting {
		s.dequeue(id) // gang members and placeholders are placed from no queue
		if s.bey.d > 0 {
			s.beyondPlaced(id)
		}
	}
	j.placedAt = s.now
	n := &s.nodes[nid]
	switch {
	case j.g == s.mpsGroup:
		gpu := s.mpsGPUFor(n, j.k)
		if s.f.Layouts {
			gpu = s.mpsGPURandom(n, j.k)
			if n.moving[gpu] {
				s.takeRelaying(id, n, gpu)
			}
		}
		n.mpsUsed[gpu] += j.k
		j.mps = append(j.mps[:0], int16(gpu), int16(j.k))
	case j.g == wholeGroup && s.f.Layouts:
		s.takeWhole(id, n)
	case s.groups[j.g].kind == "mig":
		best := -1
		p := len(s.slotGroup)
		for gpu := range n.migUsed {
			if best >= 0 && n.migUsed[gpu] <= n.migUsed[best/p] {
				continue
			}
			for slot, g := range s.slotGroup {
				if g == j.g && !n.mig[gpu*p+slot] {
					best = gpu*p + slot
					break
				}
			}
		}
		n.mig[best] = true
		n.migUsed[best/p]++
		j.mig = int32(best)
	}
	s.changeFree(nid, j.g, -j.k)
	s.heldInst[j.g] += j.k
	s.queueHeld(id, 1)
	n.held += j.units
	s.heldUnit += j.units
	j.node = nid
	j.allocPos = int32(len(n.allocs))
	n.allocs = append(n.allocs, id)
	s.cntPrio[j.g][j.prio]++
	j.state = jobPending
	s.pending++
	j.epoch++
	s.push(s.now+delay, evRun, id, j.epoch)
	s.placedMoved()
}

// release frees a placed job's devices; the caller sets its state.
func (s *sim) release(id int32) {
	j := &s.jobs[id]
	nid := j.node
	n := &s.nodes[nid]
	switch j.state {
	case jobPending:
		s.pending--
	case jobRunning:
		j.remaining -= s.now - j.since
	}
	for i := 0; i < len(j.mps); i += 2 {
		n.mpsUsed[j.mps[i]] -= int(j.mps[i+1])
	}
	j.mps = j.mps[:0]
	// Instances of a GPU the servers stopped offering do not come back.
	gone := s.leaveRelaying(id, n)
	if j.mig >= 0 {
		n.mig[j.mig] = false
		n.migUsed[int(j.mig)/len(s.slotGroup)]--
		j.mig = -1
	}
	s.changeFree(nid, j.g, j.k-gone)
	s.heldInst[j.g] -= j.k
	s.queueHeld(id, -1)
	n.held -= j.units
	s.heldUnit -= j.units
	last := n.allocs[len(n.allocs)-1]
	n.allocs[j.allocPos] = last
	s.jobs[last].allocPos = j.allocPos
	n.allocs = n.allocs[:len(n.allocs)-1]
	j.node, j.allocPos = -1, -1
	s.cntPrio[j.g][j.prio]--
}

// protect schedules the controller's protection of a running job that
// replaces a preempted one: ProtectReaction after it runs, it is raised
// in place to its preemptor's priority, for PreemptionCooldown; with a
// minimum runtime, it becomes a preemption candidate after that.
func (s *sim) protect(id int32) {
	j := &s.jobs[id]
	if s.minRuntime > 0 {
		s.push(s.now+s.minRuntime, evExempt, id, j.epoch)
	}
	if s.protectFor <= 0 || j.raiseTo <= j.base {
		return
	}
	j.raise++
	s.push(s.now+s.protectAfter, evRaiseStart, id, j.raise)
	s.push(s.now+s.protectAfter+s.protectFor, evRaiseEnd, id, j.raise)
}

// setPrio raises a running job in place or ends its raise. The job
// waits for nothing, so no waiting order changes.
func (s *sim) setPrio(id int32, p int) {
	j := &s.jobs[id]
	if j.prio == p {
		return
	}
	lowered := p < j.prio
	s.cntPrio[j.g][j.prio]--
	j.prio = p
	s.cntPrio[j.g][j.prio]++
	if lowered {
		// It may be preemptable now: blocked jobs of its kind look again.
		s.capVer[j.g]++
		s.dirty = true
	}
}

// Scheduling.

// passesPerInstant bounds schedule's passes at one instant, per job: a
// pass follows only one that placed, moved, admitted or rolled back
// work.
const passesPerInstant = 100

// schedule is one scheduler pass at this instant: every sub-queue whose
// head may fit now is worked through in the broker's order until its
// first job that neither fits nor can preempt. It repeats while a pass
// left sub-queues worth another look (a preemption's leftover, a victim
// that waits again).
func (s *sim) schedule() {
	if s.f.Layouts && s.waiting > 0 && s.nodeReadyAt == s.now && !s.prePlanned {
		// A node ready unblocks the blocked jobs, which the scheduler
		// places one evaluation at a time, while the controller's next
		// round (its tick) plans on the node as it first sees it: every
		// GPU free, the blocked jobs still queued (prePass).
		s.prePlanned, s.prePass = true, true
		s.planLayouts()
		s.prePass = false
	}
	if s.res.active {
		// The placeholder, one above its work's priority, takes each GPU
		// freed on its nodes before the queue.
		s.feedReservation()
	}
	for passes := 0; ; passes++ {
		if passes > passesPerInstant*len(s.jobs)+passesPerInstant {
			// Each pass places, stops or admits something: passes without
			// end at one instant are a loop of the model's own, which
			// would grow its records until memory runs out.
			panic(fmt.Sprintf("model: %d scheduler passes at %s without time passing", passes, s.now))
		}
		s.merge.sqs = s.merge.sqs[:0]
		for i := range s.sqs {
			q := &s.sqs[i]
			q.mi = -1
			if q.Len() > 0 && (q.ids[0] != q.tried || q.triedCap != s.capVer[q.g]) {
				q.mi = len(s.merge.sqs)
				s.merge.sqs = append(s.merge.sqs, i)
			}
		}
		if len(s.merge.sqs) == 0 {
			if s.f.Layouts && s.waiting > 0 {
				// Blocked work: the controller's round (its decisions
				// withdraw GPUs, placing nothing, so no pass follows).
				s.planLayouts()
			}
			if s.f.Moves && s.waiting > 0 && s.consolidate() {
				continue // the moved jobs wait again: place them elsewhere
			}
			if len(s.gangQueue) > 0 && s.admitGangs() {
				continue
			}
			if s.qs != nil && len(s.qs.waiting) > 0 && s.admitHeld() {
				continue
			}
			if s.f.Reservations && s.reserve() {
				continue
			}
			if s.f.ScaleIn && s.afterPass() {
				continue // the moved jobs wait again: place them elsewhere
			}
			return
		}
		heap.Init(&s.merge)
		for s.merge.Len() > 0 {
			qi := s.merge.sqs[0]
			q := &s.sqs[qi]
			id := q.ids[0]
			if s.tryPlace(id) || (s.f.Preemption && s.tryPreempt(id)) {
				continue // dequeue kept the merge heap in order
			}
			q.tried, q.triedCap = id, s.capVer[q.g]
			heap.Remove(&s.merge, q.mi)
		}
		for i := range s.sqs {
			s.sqs[i].mi = -1
		}
	}
}

// mpsGPUFor is the MPS GPU of node n a request for k shares takes: one
// GPU's shares (the device plugin makes each MPS GPU a device group), the
// last GPU with room, as Nomad's device allocator takes the last group
// that fits; -1 if none has room.
func (s *sim) mpsGPUFor(n *node, k int) int {
	for gpu := len(n.mpsUsed) - 1; gpu >= 0; gpu-- {
		if s.isMPS(n, gpu) && s.mpsShares-n.mpsUsed[gpu] >= k {
			return gpu
		}
	}
	return -1
}

// fits says whether k instances of group g fit ready node nid.
func (s *sim) fits(nid int32, g, k int) bool {
	n := &s.nodes[nid]
	if n.free[g] < k {
		return false
	}
	return g != s.mpsGroup || s.mpsGPUFor(n, k) >= 0
}

// anyFree says whether some ready node has k free instances of group g.
func (s *sim) anyFree(g, k int) bool {
	for f := k; f < len(s.buckets[g]); f++ {
		if len(s.buckets[g][f]) > 0 {
			return true
		}
	}
	return false
}

// pickNode is Nomad's placement of a batch job: the ready nodes in a
// random order, the first two that fit scored by binpack, ties to the
// first drawn. Binpack scores CPU and memory after placement, and every
// replayed task asks for the same, so the node with more allocations wins.
//
// A job barred from spot nodes (spot.go) is not placed on one: id is the
// job placed.
func (s *sim) pickNode(id int32, g, k int, avoid int32) int32 {
	s.scan = append(s.scan[:0], s.ready...)
	first := int32(-1)
	for i := range s.scan {
		r := i + s.rng.IntN(len(s.scan)-i)
		s.scan[i], s.scan[r] = s.scan[r], s.scan[i]
		nid := s.scan[i]
		if s.nodes[nid].ineligible || s.barred(&s.nodes[nid], id) || !s.fits(nid, g, k) {
			continue
		}
		if first < 0 {
			first = nid
			continue
		}
		// A rescheduled allocation scores its failed allocation's node
		// below any other (Nomad's NodeReschedulingPenaltyIterator: -1,
		// against binpack's 0 to 1).
		if x, y := nid == avoid, first == avoid; x != y {
			if x {
				return first
			}
			return nid
		}
		if len(s.nodes[nid].allocs) > len(s.nodes[first].allocs) {
			return nid
		}
		return first
	}
	return first
}

func (s *sim) tryPlace(id int32) bool {
	j := &s.jobs[id]
	if j.k > s.groups[j.g].perNode || !s.anyFree(j.g, j.k) {
		return false
	}
	nid := s.pickNode(id, j.g, j.k, j.avoid)
	if nid < 0 {
		return false
	}
	s.place(id, nid, s.startDelay(s.jobs[id].g))
	return true
}

// tryPreempt places the job by preempting lower-priority allocations, as
// Nomad's scheduler does when no node fits it: of the ready nodes in a
// random order, the first two where preempting makes room are the options
// (the batch stack's limit of two), and the one scoring highest wins, ties
// to the first drawn. Every replayed task asks for the same CPU and
// memory, so binpack (BinPackIterator, scored after the preemption) is
// the allocations left on the node; the preemption score
// (PreemptionScoringIterator: a logistic function of netPriority, max +
// sum / max of the victims' priorities) moves a node's score far less
// than one allocation does, so it only breaks binpack's ties, the lower
// net priority winning.
func (s *sim) tryPreempt(id int32) bool {
	j := &s.jobs[id]
	g, k, lim := j.g, j.k, j.prio-preemptGap
	if lim < 1 || k > s.groups[g].perNode {
		return false
	}
	some := false
	for p := 1; p <= lim; p++ {
		if s.cntPrio[g][p] > 0 {
			some = true
			break
		}
	}
	if !some {
		return false
	}
	bestNode, bestLeft, bestNet := int32(-1), 0, 0.0
	s.scan = append(s.scan[:0], s.ready...)
	options := 0
	for i := 0; i < len(s.scan) && options < 2; i++ {
		r := i + s.rng.IntN(len(s.scan)-i)
		s.scan[i], s.scan[r] = s.scan[r], s.scan[i]
		nid := s.scan[i]
		n := &s.nodes[nid]
		if n.ineligible || s.barred(n, id) || !s.nodeVictims(n, g, k, lim) {
			continue
		}
		options++
		left, net := len(n.allocs)-len(s.nodeBest), netPriority(s.jobs, s.nodeBest)
		if bestNode < 0 || left > bestLeft || left == bestLeft && net < bestNet {
			bestNode, bestLeft, bestNet = nid, left, net
			s.best = append(s.best[:0], s.nodeBest...)
		}
	}
	if bestNode < 0 {
		return false
	}
	freed := 0
	for _, v := range s.best {
		s.evict(v)
		freed += s.jobs[v].k
	}
	s.place(id, bestNode, s.startDelay(s.jobs[id].g)+s.preemptDelay)
	s.recs[id].PreemptingPlacements++
	for _, v := range s.best {
		vj := &s.jobs[v]
		// Its replacement will be protected at its preemptor's priority
		// once it runs (protect); it waits at its own.
		vj.raiseTo = j.prio
		if vj.placeholder || s.waitsAsGang(v) {
			continue // the controller places it again, or not
		}
		// The plan that preempts it makes its job a new evaluation.
		vj.evalAt = s.now
		s.enqueue(v)
	}
	if freed > k {
		// More was freed than the preemptor took: its kind has room again.
		s.capVer[g]++
	}
	return true
}

// nodeVictims is Nomad's PreemptForDevice on node n: it picks, into
// s.nodeBest, the allocations of group g to preempt so that k instances
// fit, and says whether preempting makes room at all. Each device group
// of the node is an option (whole GPUs are one group; each MPS GPU is its
// own, the device plugin's grouping), visited in a random order (Nomad
// ranges over a map); of the groups where preempting makes room, the one
// whose victims have the lowest sum of distinct priorities wins, ties to
// the first visited (selectBestAllocs).
func (s *sim) nodeVictims(n *node, g, k, lim int) bool {
	bins := 1
	if g == s.mpsGroup {
		bins = len(n.mpsUsed)
	}
	s.binOrder = s.binOrder[:0]
	for b := range bins {
		s.binOrder = append(s.binOrder, b)
	}
	s.rng.Shuffle(len(s.binOrder), func(a, b int) { s.binOrder[a], s.binOrder[b] = s.binOrder[b], s.binOrder[a] })
	found, bestSum := false, 0
	for _, bin := range s.binOrder {
		if g == s.mpsGroup && !s.isMPS(n, bin) {
			continue // a whole GPU, or one being relaid: no device group of shares
		}
		have := n.free[g]
		if g == s.mpsGroup {
			have = s.mpsShares - n.mpsUsed[bin]
		}
		if !s.victims(n, g, bin, k, lim, have) {
			continue
		}
		if sum := distinctPrioritySum(s.jobs, s.chosen); !found || sum < bestSum {
			found, bestSum = true, sum
			s.nodeBest = append(s.nodeBest[:0], s.chosen...)
		}
	}
	return found
}

// victims picks, into s.chosen, the allocations of group g on node n (for
// MPS, on its GPU bin) that Nomad's PreemptForDevice and selectBestAllocs
// preempt so that k instances fit where have are free; false when
// preempting cannot make room. The candidates are the allocations at
// least 10 below the job's priority (filterAndGroupPreemptibleAllocs),
// lowest priority first and, within one priority, in a random order
// (the node's proposed allocations come out of a map). They are taken
// until they and the free instances make k. selectBestAllocs then sorts
// those by the instances they hold, largest first (a stable sort for the
// few allocations of one device), and keeps them until they alone hold k:
// the free instances are not counted, and a larger allocation of a higher
// priority may replace smaller ones of a lower.
func (s *sim) victims(n *node, g, bin, k, lim, have int) bool {
	s.cand = s.cand[:0]
	for _, a := range n.allocs {
		v := &s.jobs[a]
		if v.g != g || g == s.mpsGroup && int(v.mps[0]) != bin || !s.preemptable(v, lim) {
			continue
		}
		s.cand = append(s.cand, a)
	}
	s.rng.Shuffle(len(s.cand), func(a, b int) { s.cand[a], s.cand[b] = s.cand[b], s.cand[a] })
	slices.SortStableFunc(s.cand, func(a, b int32) int { return s.jobs[a].prio - s.jobs[b].prio })
	end, got := -1, 0
	for i, a := range s.cand {
		got += s.jobs[a].k
		if got+have >= k {
			end = i + 1
			break
		}
	}
	if end < 0 {
		return false
	}
	s.chosen = append(s.chosen[:0], s.cand[:end]...)
	slices.SortStableFunc(s.chosen, func(a, b int32) int { return s.jobs[b].k - s.jobs[a].k })
	got = 0
	for i, a := range s.chosen {
		if got >= k {
			s.chosen = s.chosen[:i]
			break
		}
		got += s.jobs[a].k
	}
	// The team queues' gate refuses a plan preempting what it spares
	// (queues.go): this node is then no option.
	return s.spare == nil || !slices.ContainsFunc(s.chosen, s.spare)
}

// distinctPrioritySum is selectBestAllocs's net priority of an option:
// the sum of the distinct priorities of its victims.
func distinctPrioritySum(jobs []job, ids []int32) int {
	var seen [maxPriority + 1]bool
	sum := 0
	for _, a := range ids {
		if p := jobs[a].prio; !seen[p] {
			seen[p] = true
			sum += p
		}
	}
	return sum
}

// netPriority is the preemption scorer's netPriority of a node's victims:
// their highest priority plus the sum of their priorities over it.
func netPriority(jobs []job, ids []int32) float64 {
	sum, hi := 0, 0
	for _, a := range ids {
		p := jobs[a].prio
		sum += p
		hi = max(hi, p)
	}
	if hi == 0 {
		return 0
	}
	return float64(hi) + float64(sum)/float64(hi)
}

// preemptable says whether a placement of priority lim + preemptGap or
// more may preempt v: its effective priority is at most lim, it is past
// its minimum runtime, and no relayout will refuse it (a placement that
// will be refused frees nothing its GPU offers).
func (s *sim) preemptable(v *job, lim int) bool {
	return v.prio <= lim && !s.exempt(v) && !v.refused
}

// exempt says whether placed job v has not yet run the minimum runtime,
// and so is no preemption candidate; one still starting has run nothing.
func (s *sim) exempt(v *job) bool {
	return s.minRuntime > 0 && (v.state != jobRunning || s.now-v.since < s.minRuntime)
}

// evict stops a preempted job (stopRun).
func (s *sim) evict(id int32) { s.stopRun(id, false) }

// stopRun stops a placed job, preempted or (moved) moved by the
// controller: its devices are free at once; its task runs on and stops
// Latencies.Preempt later. With Checkpoints its checkpoint commits
// Latencies.CommitExit before that exit (the task checkpoints on its stop
// signal, then exits), and the job keeps what it saved; the work after the
// commit is thrown away. Without (stock Nomad) it starts again from
// scratch.
func (s *sim) stopRun(id int32, moved bool) {
	j := &s.jobs[id]
	if j.state != jobPending && j.state != jobRunning {
		return // a gang member its gang's stop took with it
	}
	running := j.state == jobRunning
	s.release(id)
	j.epoch++
	// The controller drops a raise before the job waits: a waiting job is
	// never raised, so it preempts nobody at its preemptor's priority.
	j.prio = j.base
	j.raise++
	switch {
	case j.placeholder:
		s.placeholderLost(id)
		return
	case j.gang >= 0:
		s.memberStopped(id, running, moved)
		return
	}
	if !running {
		return // placed, not started: no run to end
	}
	j.remaining = s.endRun(s.lastRun(id), j.dur, j.dur-j.remaining, moved)
	s.runEnded(id)
}

// endRun ends run, of a job of dur with done of it done, at a stop now
// (preempted, or moved): the task exits Latencies.Preempt later. With
// Checkpoints it keeps what its commit saved, else it starts again from
// scratch; remaining is what is left to run.
func (s *sim) endRun(run *tracereplay.Run, dur, done time.Duration, moved bool) (remaining time.Duration) {
	run.End = s.now + s.preemptDelay
	run.Preempted, run.Moved = !moved, moved
	run.Reached = min(dur, done+s.preemptDelay)
	if !s.f.Checkpoints {
		return dur
	}
	saved := max(done, run.Reached-s.commitExit)
	run.Checkpointed, run.Saved, run.StopGap = true, saved, min(s.o.Latencies.CommitExit, s.o.Latencies.Preempt)
	return dur - saved
}

// lastRun is the job's current run record.
func (s *sim) lastRun(id int32) *tracereplay.Run {
	runs := s.recs[id].Runs
	return &runs[len(runs)-1]
}

// holds are what the placed job holds, as a Run records it.
func (s *sim) holds(id int32) []tracereplay.Hold {
	j := &s.jobs[id]
	gr := s.groups[j.g]
	switch {
	case j.g == s.mpsGroup:
		return []tracereplay.Hold{{Kind: "mps", GPU: s.mpsName(int(j.mps[0])), Units: j.k}}
	case gr.kind == "mig":
		return []tracereplay.Hold{{Kind: "mig", Profile: gr.profile, Units: j.k}}
	}
	return []tracereplay.Hold{{Kind: "gpu", Units: j.k}}
}

func nodeName(id int32) string { return fmt.Sprintf("node-%d", id) }

// latency is a latency the model draws (trace time): its median, and
// its 95th and 99th percentiles where the real run measured them (0:
// none).
type latency struct{ p50, p95, p99 time.Duration }

// draw is a draw from the distribution l's percentiles make (the real
// run's latencies are not all its median: a task's start waits on a busy
// machine, a relayout on Nomad's node-update batch, and a wait that falls
// where most take the median tells that spread); at or below the median
// it is the median, the run telling nothing of the lower half. Without a
// measured tail it is the median.
func (l latency) draw(rng *rand.Rand) time.Duration {
	if l.p95 <= l.p50 {
		return l.p50
	}
	u := rng.Float64()
	lerp := func(a, b time.Duration, f float64) time.Duration { return a + time.Duration(f*float64(b-a)) }
	switch {
	case u <= 0.5:
		return l.p50
	case u <= 0.95 || l.p99 <= l.p95:
		return lerp(l.p50, l.p95, min(1, (u-0.5)/0.45))
	default:
		return lerp(l.p95, l.p99, min(1, (u-0.95)/0.04))
	}
}

// startDelay is a placement's start latency for a job of group g.
func (s *sim) startDelay(g int) time.Duration { return s.starts[g].draw(s.startRng) }
