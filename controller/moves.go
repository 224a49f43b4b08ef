package controller

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/controller/consolidate"
	"github.com/nomad-gpu/nomad-gpu/nomadview"
)

// Moving checkpointed work. Nomad places an allocation once and never
// moves it, so free GPUs spread over nodes keep a multi-GPU allocation
// waiting. The move module (Mover) finds the fewest running allocations
// whose move frees one node for it (package consolidate) and stops them
// through Nomad's API: Nomad places a stopped allocation again (`nomad
// alloc stop`, batch jobs included), and the driver commits its
// checkpoint on the way out, so its next run resumes where it stopped.
// Nomad cannot be told where to place an allocation, and it places a
// stopped allocation's replacement where it likes, the node just freed
// included (seen against Nomad 2.0). So the module holds the node: it
// makes it ineligible before it stops anything, and makes it eligible
// again once every moved job has its replacement placed elsewhere (or
// HoldMax passed); the queued allocation, blocked on capacity, is then
// placed on the node it is the first to fit. A leader that starts with a
// hold recorded (its predecessor died holding a node) ends it at once.

// MetaMovable is the job meta key that opts a job in ("true") to being
// moved, or out ("false") where its node pool opts jobs in.
const MetaMovable = "nomad_gpu_movable"

// MoveConfig bounds the move module.
type MoveConfig struct {
	// Pools are node pools whose jobs are movable unless they opt out.
	Pools []string
	// PerHour is the most consolidations (rounds that move work, each
	// moving the allocations one node needs freed) in any hour;
	// PerJobPerDay the most moves of one job's allocations in any 24
	// hours.
	PerHour, PerJobPerDay int
	// Settle is how long a consolidation waits for the allocation it
	// freed a node for to run before the module plans another.
	Settle time.Duration
	// HoldMax is the longest the freed node stays ineligible while the
	// moved allocations are placed elsewhere; for relief, the longest a
	// GPU is held for the servers to see it held, and again for the
	// moved client to be placed.
	HoldMax time.Duration
	// Relief moves clients off overloaded MPS GPUs (relief.go).
	Relief ReliefConfig
	// ScaleIn empties surplus nodes for the autoscaler (scalein.go).
	ScaleIn ScaleInConfig
}

// Hold is a node the move module made ineligible while the allocations
// it moved off it are placed elsewhere, or one GPU of it held the same
// way (relief); kept in MovesVariable so that a new leader ends it.
type Hold struct {
	Node     string    `json:"node"`
	NodeName string    `json:"node_name"`
	Since    time.Time `json:"since"`
	// Moved are the moved allocations' jobs, "namespace/job".
	Moved []string `json:"moved"`
	// GPU is the UUID of the GPU held (contract.MetaHoldPrefix), "" when
	// the node is.
	GPU string `json:"gpu,omitempty"`
	// Stop is the relief move to make once the servers see the GPU held;
	// nil once made (Since is then when, Stopped the allocation stopped).
	Stop    *MoveRecord `json:"stop,omitempty"`
	Stopped string      `json:"stopped,omitempty"`
	// Remove: the node is emptied for removal (scale-in), and held until
	// it is gone or takes work again; Marked once its drain marks it
	// (contract.DrainMetaScaleIn).
	Remove bool `json:"remove,omitempty"`
	Marked bool `json:"marked,omitempty"`
}

// MoveRecord is one allocation moved: kept for the budget and for
// people (`nomad-gpu top`), in the controller's namespace (MovesVariable).
// The records of one consolidation share At.
type MoveRecord struct {
	At        time.Time `json:"at"`
	Namespace string    `json:"namespace"`
	Job       string    `json:"job"`
	Alloc     string    `json:"alloc"`
	From      string    `json:"from"`
	GPUs      int       `json:"gpus"`
	// Shares are the MPS shares moved (relief), of SharesPerGPU on their
	// GPU; GPUs is then 0.
	Shares       int `json:"shares,omitempty"`
	SharesPerGPU int `json:"shares_per_gpu,omitempty"`
	// Reason is the whole log line; For what the move was for ("to free
	// 4 GPUs on gpu-2 for hpc-3").
	Reason string `json:"reason"`
	For    string `json:"for"`
	// Resumed is when the job ran again, zero until then.
	Resumed time.Time `json:"resumed,omitzero"`
}

// pendingMove is a consolidation under way: the queued group it is for,
// the node freed for it, and when it began.
type pendingMove struct {
	ask   consolidate.Ask
	node  string
	since time.Time
}

// JobSpecs reads a job's full spec (its tasks' driver config); the
// controller's is Nomad's API, cached by modify index.
type JobSpecs func(ctx context.Context, k JobKey) (*api.Job, error)

// Mover is the move module. Its fields are the leader's loop's alone: no
// lock.
type Mover struct {
	cfg     MoveConfig
	history []MoveRecord
	pending *pendingMove
	hold    *Hold
	// told is what the debug log last said of each queued ask no node
	// can be freed for: said again only when it changes.
	told map[consolidate.Ask]string
	log  hclog.Logger
	// loads are the MPS GPUs' utilisations last read, by UUID; shareLoad
	// each share's load on its GPU, by share ID; sampled when (relief).
	loads     map[string]*gpuLoad
	shareLoad map[string]float64
	sampled   time.Time
	// wanted is, by node of a scale-in group, the last time a queued
	// allocation could use it (scalein.go).
	wanted map[string]time.Time
}

// NewMover is the module with the moves recorded before.
func NewMover(cfg MoveConfig, history []MoveRecord, log hclog.Logger) *Mover {
	return &Mover{cfg: cfg, history: history, log: log}
}

// History is the moves of the last 24 hours, oldest first.
func (m *Mover) History() []MoveRecord { return slices.Clone(m.history) }

// Step plans one consolidation on a view: the first queued group, by
// priority then age, that some node can be freed for. It returns false
// while one is under way or nothing can be freed. Nodes in relaying
// (Layouts.Relaying: a GPU's layout changing) are neither freed nor
// given moved work: their free whole GPUs are in flux.
func (m *Mover) Step(ctx context.Context, now time.Time, v View, l *Ledger, specs JobSpecs, relaying map[string]bool) (consolidate.Plan, bool) {
	m.trim(now)
	queued := wholeGPUAsks(v.Snap)
	for ask := range m.told {
		if !slices.ContainsFunc(queued, func(q queuedAsk) bool { return q.ask == ask }) {
			delete(m.told, ask)
		}
	}
	if m.hold != nil || m.settled(now, queued) {
		return consolidate.Plan{}, false
	}
	nodesByPool := map[string][]consolidate.Node{}
	var allocs []consolidate.Alloc
	for _, q := range queued {
		key := q.pool + "\x00" + strings.Join(q.datacenters, ",") + "\x00" + q.device.String()
		nodes, ok := nodesByPool[key]
		if !ok {
			nodes = freeWholeGPUs(v.Snap, q, relaying)
			nodesByPool[key] = nodes
		}
		if allocs == nil {
			allocs = m.movable(ctx, now, v, l, specs)
		}
		p, ok := consolidate.Search(nodes, allocs, q.ask)
		if !ok {
			m.explain(q.ask, fmt.Sprintf("free GPUs %s; not movable: %s", freeOf(nodes), whyNot(allocs)))
			continue
		}
		if why := m.overBudget(now, p); why != "" {
			m.explain(q.ask, p.String()+": "+why)
			continue
		}
		m.pending = &pendingMove{ask: q.ask, node: p.Node.ID, since: now}
		return p, true
	}
	return consolidate.Plan{}, false
}

// settled ends a consolidation whose queued group does not wait now, or
// that waited Settle; true while one is under way.
func (m *Mover) settled(now time.Time, queued []queuedAsk) bool {
	if m.pending == nil {
		return false
	}
	waiting := slices.ContainsFunc(queued, func(q queuedAsk) bool { return q.ask == m.pending.ask })
	if waiting && now.Sub(m.pending.since) < m.cfg.Settle {
		return true
	}
	if waiting {
		m.log.Warn("a consolidation freed a node but its allocation still waits; planning again", "job", m.pending.ask.Job, "group", m.pending.ask.Group, "since", m.pending.since)
	}
	m.pending = nil
	return false
}

// Reserved is the node a consolidation under way freed, until the queued
// allocation it is for runs (or Settle passes): "" for none, or on a nil
// Mover (moves off). Other modules leave its free GPUs alone.
func (m *Mover) Reserved() string {
	if m == nil || m.pending == nil {
		return ""
	}
	return m.pending.node
}

// Record notes a move made: the budget counts it.
func (m *Mover) Record(r MoveRecord) { m.history = append(m.history, r) }

// Holding notes the node the controller made ineligible for a plan (a
// scale-in plan's, Ask.Job "", for removal).
func (m *Mover) Holding(now time.Time, p consolidate.Plan) Hold {
	h := Hold{Node: p.Node.ID, NodeName: p.Node.Name, Since: now, Remove: p.Ask.Job == ""}
	for _, mv := range p.Moves {
		h.Moved = append(h.Moved, mv.Alloc.Namespace+"/"+mv.Alloc.Job)
	}
	m.hold = &h
	return h
}

// Held is the node held, nil when none is.
func (m *Mover) Held() *Hold { return m.hold }

// Release says whether the held node (or GPU) may take work again: every
// moved job has an allocation created after the hold, pending or running,
// on another node (for a GPU hold, anywhere: the held GPU takes none), or
// HoldMax has passed. The caller makes it eligible and then calls
// Released.
func (m *Mover) Release(now time.Time, snap *nomadview.Snapshot) bool {
	h := m.hold
	if h == nil || h.Remove {
		return false // a hold for removal ends otherwise (scaleInHold)
	}
	if now.Sub(h.Since) >= m.cfg.HoldMax || now.Before(h.Since) {
		return true
	}
	if h.Stop != nil {
		return false // the relief move is not made yet
	}
	if h.GPU != "" && slices.ContainsFunc(snap.Allocs, func(a *api.AllocationListStub) bool { return a.ID == h.Stopped }) {
		return false // still pending or running: the client loads the GPU, a reading now would count it
	}
	return movedPlaced(*h, snap)
}

// Released forgets the hold. A GPU held for relief starts its window
// again from the readings after it.
func (m *Mover) Released() {
	if m.hold != nil && m.hold.GPU != "" {
		delete(m.loads, m.hold.GPU)
	}
	m.hold = nil
}

// trim keeps the moves of the last 24 hours, the longest the budget
// looks back.
func (m *Mover) trim(now time.Time) {
	m.history = slices.DeleteFunc(m.history, func(r MoveRecord) bool { return now.Sub(r.At) > 24*time.Hour })
}

// explain logs at debug level why no node can be freed for an ask, once
// per reason.
func (m *Mover) explain(ask consolidate.Ask, why string) {
	if m.told == nil {
		m.told = map[consolidate.Ask]string{}
	}
	if m.told[ask] == why {
		return
	}
	m.told[ask] = why
	m.log.Debug("no node can be freed", "job", ask.Job, "group", ask.Group, "gpus", ask.Count, "why", why)
}

// freeOf is the nodes' free GPUs, "gpu-1 2, gpu-2 2".
func freeOf(nodes []consolidate.Node) string {
	parts := make([]string, len(nodes))
	for i, n := range nodes {
		parts[i] = fmt.Sprintf("%s %d", n.Name, n.Free)
	}
	return strings.Join(parts, ", ")
}

// whyNot says why each allocation that may not move may not, for the
// debug log: "alloc 1a2b3c4d: not opted in; …".
func whyNot(allocs []consolidate.Alloc) string {
	var b strings.Builder
	for _, a := range allocs {
		if a.Movable {
			continue
		}
		if b.Len() > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "alloc %s (%s): %s", short(a.ID), a.Job, a.Why)
	}
	return b.String()
}

// consolidations counts the consolidations since since.
func (m *Mover) consolidations(since time.Time) int {
	rounds := map[time.Time]bool{}
	for _, r := range m.history {
		if r.At.After(since) {
			rounds[r.At] = true
		}
	}
	return len(rounds)
}

// movedJob counts the moves of job k's allocations since since.
func (m *Mover) movedJob(since time.Time, k JobKey) int {
	n := 0
	for _, r := range m.history {
		if r.At.After(since) && r.Namespace == k.Namespace && r.Job == k.ID {
			n++
		}
	}
	return n
}

// overBudget says why a plan would exceed a job's daily budget (two of
// its allocations in one plan), "" when it would not.
func (m *Mover) overBudget(now time.Time, p consolidate.Plan) string {
	per := map[JobKey]int{}
	for _, mv := range p.Moves {
		k := JobKey{Namespace: mv.Alloc.Namespace, ID: mv.Alloc.Job}
		per[k]++
		if m.movedJob(now.Add(-24*time.Hour), k)+per[k] > m.cfg.PerJobPerDay {
			return fmt.Sprintf("job %s would be moved more than %d times in 24h", k.ID, m.cfg.PerJobPerDay)
		}
	}
	return ""
}

// queuedAsk is one queued group asking for whole GPUs on one node.
type queuedAsk struct {
	ask         consolidate.Ask
	device      nomadview.DeviceSpec
	pool        string
	datacenters []string
	priority    int
	since       time.Time
}

// wholeGPUAsks are the queued groups asking for more than one whole GPU
// (one GPU fits any free one: nothing to consolidate), highest priority
// first, then oldest. A waiting gang's members are not: a move frees one
// node for one allocation and holds it (ineligible) until Nomad places
// that, which a gang at count 0 never gets (its plan needs every member
// at once, the held node included); reservations keep nodes for gangs.
func wholeGPUAsks(snap *nomadview.Snapshot) []queuedAsk {
	var out []queuedAsk
	for _, q := range snap.QueuedGroups() {
		if q.Gang {
			continue
		}
		for _, a := range q.Asks {
			if a.Device.Type != contract.SliceGPU || a.Count < 2 {
				continue
			}
			out = append(out, queuedAsk{
				ask:    consolidate.Ask{Namespace: q.Namespace, Job: q.JobID, Group: q.Group, Count: a.Count},
				device: a.Device, pool: q.Pool, datacenters: q.Datacenters, priority: q.Priority, since: q.Since,
			})
		}
	}
	slices.SortStableFunc(out, func(a, b queuedAsk) int {
		return cmp.Or(cmp.Compare(b.priority, a.priority), a.since.Compare(b.since))
	})
	return out
}

// freeWholeGPUs are the schedulable nodes of the ask's pool ("all":
// every pool) in a datacenter its patterns match whose whole GPUs the
// ask's device fits, every one of them (a node with a GPU model the ask
// does not name is left out: moving work off it may free the wrong
// model), and their free ones: healthy, held by no pending or running
// allocation. Nodes in skip are left out. (A job's other constraints are
// not read: a node they exclude may be freed in vain, which the budget
// bounds.)
func freeWholeGPUs(snap *nomadview.Snapshot, q queuedAsk, skip map[string]bool) []consolidate.Node {
	held := snap.HeldIDs()
	var out []consolidate.Node
	for _, n := range snap.Nodes {
		if n == nil || skip[n.ID] || !nomadview.Schedulable(n) || n.NodeResources == nil || q.pool != "all" && n.NodePool != q.pool ||
			!slices.ContainsFunc(q.datacenters, func(p string) bool { return nomadview.DatacenterMatch(p, n.Datacenter) }) {
			continue
		}
		gpus := nodeGPUs(n)
		if len(gpus) > 0 && !slices.ContainsFunc(gpus, func(d nomadview.DeviceSpec) bool { return !q.device.Compatible(d) }) {
			out = append(out, wholeGPUNode(n, held[n.ID]))
		}
	}
	return out
}

// movable is every running allocation holding whole GPUs, each judged
// movable or not (movableWhy).
func (m *Mover) movable(ctx context.Context, now time.Time, v View, l *Ledger, specs JobSpecs) []consolidate.Alloc {
	budget := m.cfg.PerHour - m.consolidations(now.Add(-time.Hour))
	var out []consolidate.Alloc
	unhealthy := v.Snap.UnhealthyIDs()
	for node, hs := range v.Snap.HeldSlices() {
		gpus := map[*api.AllocationListStub]int{}
		failed := map[*api.AllocationListStub]string{}
		var order []*api.AllocationListStub
		for _, h := range hs {
			if h.Device.Type != contract.SliceGPU {
				continue
			}
			if _, seen := gpus[h.Alloc]; !seen {
				order = append(order, h.Alloc)
			}
			gpus[h.Alloc] += len(h.IDs)
			for _, id := range h.IDs {
				if unhealthy[node][id] {
					failed[h.Alloc] = id
				}
			}
		}
		for _, a := range order {
			ca := consolidate.Alloc{ID: a.ID, Namespace: a.Namespace, Job: a.JobID, Node: node, GPUs: gpus[a]}
			ca.Why = m.movableWhy(ctx, now, v, l, specs, a, budget)
			if id := failed[a]; id != "" && ca.Why == "" {
				// Its move would count a GPU no placement can use as freed.
				ca.Why = fmt.Sprintf("it holds GPU %s, which has failed", id)
			}
			ca.Movable = ca.Why == ""
			out = append(out, ca)
		}
	}
	slices.SortFunc(out, func(a, b consolidate.Alloc) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// movableWhy says why an allocation may not be moved now, "" when it
// may: it runs; its job is a batch job, no gang, that opted in (job meta, or its
// node pool) whose GPU tasks all checkpoint on this driver; no raise of
// the ledger (preemption protection, minimum runtime, deadline) is in
// force on it; the budget has room.
func (m *Mover) movableWhy(ctx context.Context, now time.Time, v View, l *Ledger, specs JobSpecs, a *api.AllocationListStub, budget int) string {
	k := JobKey{Namespace: a.Namespace, ID: a.JobID}
	job := v.Jobs[k]
	switch {
	case a.ClientStatus != api.AllocClientStatusRunning || a.DesiredStatus != api.AllocDesiredStatusRun:
		return "not running"
	case job == nil:
		return "job not listed"
	case job.Type != api.JobTypeBatch:
		return "not a batch job (services are not moved)"
	case job.Meta[contract.MetaGang] == "true":
		return "a gang's member (moving one restarts the whole gang)"
	case job.Meta[contract.MetaReservationFor] != "":
		return "a reservation's placeholder"
	case !m.optedIn(v, job, a):
		return fmt.Sprintf("not opted in (job meta %s, or a node pool of -move-pools)", MetaMovable)
	case budget <= 0:
		return fmt.Sprintf("the budget of %d consolidations an hour is spent", m.cfg.PerHour)
	case m.movedJob(now.Add(-24*time.Hour), k) >= m.cfg.PerJobPerDay:
		return fmt.Sprintf("moved %d times in 24h, its budget", m.cfg.PerJobPerDay)
	}
	for _, r := range l.Peek(k).Raises {
		if r.InForce(now) {
			return "protected: " + r.Reason
		}
	}
	spec, err := specs(ctx, k)
	if err != nil {
		return "job spec not read: " + err.Error()
	}
	return checkpointsWhy(spec, a.TaskGroup)
}

// optedIn: the job's meta says true, or its allocation's node is in a
// pool of Pools and the meta does not say false.
func (m *Mover) optedIn(v View, job *api.JobListStub, a *api.AllocationListStub) bool {
	switch job.Meta[MetaMovable] {
	case "true":
		return true
	case "false":
		return false
	}
	n := v.Snap.Node(a.NodeID)
	return n != nil && slices.Contains(m.cfg.Pools, n.NodePool)
}

// checkpointsWhy says why a group's GPU tasks would lose work when
// stopped, "" when every one of them runs on this driver with a
// checkpoint block.
func checkpointsWhy(job *api.Job, group string) string {
	var tg *api.TaskGroup
	for _, g := range job.TaskGroups {
		if g != nil && g.Name != nil && *g.Name == group {
			tg = g
		}
	}
	if tg == nil {
		return fmt.Sprintf("group %q not in the job's spec", group)
	}
	for _, t := range tg.Tasks {
		if t == nil || t.Resources == nil || !slices.ContainsFunc(t.Resources.Devices, func(d *api.RequestedDevice) bool {
			return d != nil && nomadview.IsGPUAsk(nomadview.ParseRequest(d.Name))
		}) {
			continue
		}
		if t.Driver != contract.DriverName {
			return fmt.Sprintf("task %q runs on driver %q, not %q: it has no checkpoints", t.Name, t.Driver, contract.DriverName)
		}
		if _, ok := t.Config[contract.DriverCheckpointBlock]; !ok {
			return fmt.Sprintf("task %q has no %s block", t.Name, contract.DriverCheckpointBlock)
		}
	}
	return ""
}

// moveReason says why a move is made, for the log and the task's event:
// "moved alloc 1a2b3c4d (train-7, 1 GPU) gpu-2 → gpu-4 to free 4 GPUs on
// gpu-2 for hpc-3".
func moveReason(p consolidate.Plan, mv consolidate.Move) string {
	unit := "GPUs"
	if mv.Alloc.GPUs == 1 {
		unit = "GPU"
	}
	return fmt.Sprintf("moved alloc %s (%s, %d %s) %s → %s %s",
		short(mv.Alloc.ID), mv.Alloc.Job, mv.Alloc.GPUs, unit, p.Node.Name, mv.To.Name, movePurpose(p))
}

// movePurpose is what a plan's moves are for: "to free 4 GPUs on gpu-2
// for hpc-3", or for scale-in "to empty gpu-2 for removal".
func movePurpose(p consolidate.Plan) string {
	if p.Ask.Job == "" {
		return fmt.Sprintf("to empty %s for removal", p.Node.Name)
	}
	return fmt.Sprintf("to free %d GPUs on %s for %s", p.Ask.Count, p.Node.Name, p.Ask.Job)
}

// gpuEquivalents is what the move took off its GPUs: whole GPUs, or
// shares as the part of their GPU they are.
func (r MoveRecord) gpuEquivalents() float64 {
	if r.Shares > 0 && r.SharesPerGPU > 0 {
		return float64(r.Shares) / float64(r.SharesPerGPU)
	}
	return float64(r.GPUs)
}

// markResumed marks the moves whose job has an allocation running that
// was created after the move (running: the newest such creation per
// job), calling cost with the GPU-seconds each spent moving; true when
// it marked one.
func (m *Mover) markResumed(now time.Time, running map[JobKey]time.Time, cost func(float64)) bool {
	marked := false
	for i := range m.history {
		r := &m.history[i]
		created, ok := running[JobKey{Namespace: r.Namespace, ID: r.Job}]
		if !r.Resumed.IsZero() || !ok || !created.After(r.At) {
			continue
		}
		r.Resumed = now
		cost(r.gpuEquivalents() * now.Sub(r.At).Seconds())
		marked = true
	}
	return marked
}
