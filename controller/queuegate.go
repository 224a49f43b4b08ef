package controller

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/controller/gang"
	"github.com/nomad-gpu/nomad-gpu/controller/queues"
	"github.com/nomad-gpu/nomad-gpu/controller/sizing"
	"github.com/nomad-gpu/nomad-gpu/nomadview"
)

// Team queues at the gang's gate (docs/design/queues.md). With a queue
// file, the held jobs (the gang's form: GPU groups at count 0, their
// counts in group meta) are admitted in the one order of queues.Order,
// each only when its queue's quota and cohort allow it. What a queue's
// waiting work asks within its nominal is not lent to the others. When
// Nomad's plan cannot place a queue's work within its nominal, the gate
// takes back what other queues of its cohort borrowed: their newest
// admissions first, scaled back to 0, which stops them checkpointed (the
// gpu driver commits a checkpoint on every stop), to wait again in their
// queue and resume from their checkpoint when capacity frees.

// UseQueues puts the gang module's admissions under the queues that b
// keeps the accounts of (its last Step is what they are admitted by).
func (g *Gangs) UseQueues(b *QueueBook) {
	g.queues, g.reclaimed, g.position = b, map[JobKey]reclaim{}, map[JobKey]int{}
}

// reclaim is a run the gate took back: what it held, its queue, the
// queue it was taken back for (taker: another, or its own for a yield),
// when, and whether it was said to outlast the queue file's
// reclaim.within.
type reclaim struct {
	gpus         float64
	queue, taker string
	at           time.Time
	late         bool
}

// heldRun is an admitted held job, which the gate may take back.
type heldRun struct {
	k     JobKey
	spec  gang.Spec
	queue string
	// gpus is what it holds once placed, pending what it waits to have
	// placed still; at when it was admitted (by this leader, or first
	// seen admitted).
	gpus, pending float64
	at            time.Time
	// holding: a member holds GPUs (placed or running); checkpoints:
	// its GPU tasks commit a checkpoint when stopped; node the node its
	// placed members are on, "" for none or several.
	holding, checkpoints bool
	node                 string
}

// queueGate is one tick's account of the queues, for admission.
type queueGate struct {
	book     *QueueBook
	cfg      queues.Config
	standing map[string]float64
	// use is what each queue holds and has admitted but not yet placed;
	// claim what its waiting work asks within its nominal; queue and
	// gpus each waiting job's queue ("" for none) and size.
	use, claim map[string]float64
	queue      map[JobKey]string
	gpus       map[JobKey]float64
	// free is the cluster's free whole GPUs.
	free float64
	// verdicts are the verdicts given this tick, by queue and size: a
	// verdict depends on nothing else.
	verdicts map[verdictKey]queues.Verdict
}

type verdictKey struct {
	queue string
	gpus  float64
}

// gate is the queues' account of this tick: waiting are the held jobs
// waiting (dependencies done), runs the admitted ones.
func (g *Gangs) gate(snap *nomadview.Snapshot, waiting []waitingGang, runs []heldRun) *queueGate {
	b := g.queues
	qg := &queueGate{book: b, cfg: b.cfg, use: maps.Clone(b.held), claim: map[string]float64{},
		queue: map[JobKey]string{}, gpus: map[JobKey]float64{}, verdicts: map[verdictKey]queues.Verdict{}}
	if qg.use == nil {
		qg.use = map[string]float64{}
	}
	// The order charges an admitted run's use from its admission, before
	// Nomad places it (queues.Charged).
	charged := maps.Clone(b.charged)
	for _, r := range runs {
		qg.use[r.queue] += r.pending
		if r.pending > 0 && charged != nil {
			charged[r.queue] = queues.Charged(charged[r.queue], r.pending, b.cfg.HalfLife)
		}
	}
	qg.standing = queues.Standings(b.cfg, charged, b.active)
	asks := map[string]float64{}
	for _, w := range waiting {
		q := b.queueOf(w.k.Namespace, jobPoolOf(w.job))
		qg.queue[w.k], qg.gpus[w.k] = q, heldGPUs(w.job, w.spec, b.shares)
		asks[q] += qg.gpus[w.k]
	}
	for _, q := range b.cfg.Queues {
		qg.claim[q.Name] = min(asks[q.Name], max(0, q.Nominal-qg.use[q.Name]))
	}
	for _, n := range snap.FreeGPUs() {
		qg.free += float64(n)
	}
	return qg
}

// heldGPUs is what a held job asks for once admitted, in GPU-equivalents.
func heldGPUs(job *api.Job, spec gang.Spec, shares int) float64 {
	sum := 0.0
	for _, sg := range spec.Groups {
		if tg := groupNamed(job, sg.Name); tg != nil {
			sum += float64(sg.Members) * nomadview.GroupGPUEquivalents(tg, shares)
		}
	}
	return sum
}

// jobPoolOf is the node pool job asks for ("default" when it names none).
func jobPoolOf(job *api.Job) string {
	if job.NodePool == nil || *job.NodePool == "" {
		return "default"
	}
	return *job.NodePool
}

// order is the waiting jobs in the queues' one rule (queues.Order).
func (qg *queueGate) order(snap *nomadview.Snapshot, due []waitingGang) []waitingGang {
	byKey := map[JobKey]waitingGang{}
	ws := make([]queues.Waiting, 0, len(due))
	for _, w := range due {
		byKey[w.k] = w
		stub := snap.Jobs[w.k]
		x := queues.Waiting{Namespace: w.k.Namespace, ID: w.k.ID, Queue: qg.queue[w.k]}
		if stub != nil {
			x.Priority, x.Submitted = stub.Priority, time.Unix(0, stub.SubmitTime)
		}
		x.Deadline, _ = time.Parse(time.RFC3339, w.job.Meta[sizing.MetaDeadline])
		ws = append(ws, x)
	}
	out := make([]waitingGang, 0, len(due))
	for _, x := range queues.Order(ws, qg.standing) {
		out = append(out, byKey[JobKey{Namespace: x.Namespace, ID: x.ID}])
	}
	return out
}

// verdict is whether job k may be admitted into its queue now: what the
// other queues' waiting work claims of their nominal they do not lend.
func (qg *queueGate) verdict(k JobKey) queues.Verdict {
	q := qg.queue[k]
	if q == "" {
		return queues.Verdict{Admission: queues.WithinNominal}
	}
	key := verdictKey{q, qg.gpus[k]}
	if v, ok := qg.verdicts[key]; ok {
		return v
	}
	use := maps.Clone(qg.use)
	for r, c := range qg.claim {
		if r != q {
			use[r] += c
		}
	}
	v := queues.NewQuota(qg.cfg, use).Admit(q, qg.gpus[k])
	qg.verdicts[key] = v
	return v
}

// admitQueued places the waiting jobs in the queues' order and plans the
// first of due that its queue may admit now; those before it wait with
// their quota's reason. When Nomad's plan cannot place it and it is
// within its queue's nominal, the gate takes back borrowed work for its
// queue.
func (g *Gangs) admitQueued(ctx context.Context, now time.Time, snap *nomadview.Snapshot, free string, due, waiting []waitingGang, runs []heldRun, n gangNomad) []Decision {
	clear(g.position)
	qg := g.gate(snap, waiting, runs)
	isDue := map[JobKey]bool{}
	for _, w := range due {
		isDue[w.k] = true
	}
	var out []Decision
	yielded := false
	for i, w := range qg.order(snap, waiting) {
		g.position[w.k] = i + 1
		if !isDue[w.k] {
			continue
		}
		v := qg.verdict(w.k)
		if v.Admission == queues.Waits {
			out = append(out, g.wait(w.k, v.Reason)...)
			if !yielded {
				ys := g.yield(ctx, now, snap, qg, w, runs, n)
				out, yielded = append(out, ys...), len(ys) > 0
			}
			continue
		}
		out = append(out, g.admit(ctx, now, snap, free, w.k, w.job, w.spec, n, qg.sparesNominal(snap, qg.queue[w.k]))...)
		if _, ok := g.admitted[w.k]; !ok && v.Admission == queues.WithinNominal && v.Reclaim > 0 {
			out = append(out, g.reclaim(ctx, now, qg, qg.queue[w.k], runs, n)...)
		}
		isDue = nil // one plan a tick; the rest only get their places
	}
	return out
}

// sparesNominal is the gate's guard on a plan of a job of queue q:
// Nomad's plan may preempt lower work for it, which knows no quota, so a
// plan that preempts another queue's work while that queue uses no more
// than its nominal is refused (the quota is that queue's promise; work a
// queue borrows beyond it may be taken, as reclaim takes it).
func (qg *queueGate) sparesNominal(snap *nomadview.Snapshot, q string) func(*api.JobPlanResponse) string {
	return func(plan *api.JobPlanResponse) string {
		if plan.Annotations == nil {
			return ""
		}
		quota := queues.NewQuota(qg.cfg, qg.use)
		for _, a := range plan.Annotations.PreemptedAllocs {
			pool := ""
			if node := snap.Node(a.NodeID); node != nil {
				pool = node.NodePool
			}
			r := qg.book.queueOf(a.Namespace, pool)
			if r != "" && r != q && quota.Borrowed(r) <= 1e-9 {
				return fmt.Sprintf("quota: Nomad's plan preempts %s/%s of queue %s, which uses no more than its nominal %.3g", a.Namespace, a.JobID, r, queueNamed(qg.cfg, r).Nominal)
			}
		}
		return ""
	}
}

// reclaim takes back, for queue q, what its waiting work within its
// nominal needs beyond the free GPUs and what is being taken back
// already: the runs of the other queues of its cohort that borrow,
// checkpointing runs first (they lose at most a step), then the newest
// admission first, while their queue borrows.
func (g *Gangs) reclaim(ctx context.Context, now time.Time, qg *queueGate, q string, runs []heldRun, n gangNomad) []Decision {
	quota := queues.NewQuota(qg.cfg, qg.use)
	need := quota.Admit(q, qg.claim[q]).Reclaim - qg.free
	for _, r := range g.reclaimed {
		if r.taker == q {
			need -= r.gpus
		}
	}
	cohort := queueNamed(qg.cfg, q).Cohort
	borrowed := map[string]float64{}
	for _, r := range qg.cfg.Queues {
		if r.Name != q && r.Cohort == cohort {
			borrowed[r.Name] = quota.Borrowed(r.Name)
		}
	}
	victims := slices.Clone(runs)
	slices.SortFunc(victims, func(a, b heldRun) int {
		return cmp.Or(compareBool(b.checkpoints, a.checkpoints), b.at.Compare(a.at), cmp.Compare(b.k.Namespace, a.k.Namespace), cmp.Compare(b.k.ID, a.k.ID))
	})
	var out []Decision
	for _, r := range victims {
		if need <= 1e-9 {
			break
		}
		if borrowed[r.queue] <= 1e-9 || !r.holding || r.pending > 0 {
			continue
		}
		why := fmt.Sprintf("reclaimed: queue %s borrows %.3g GPU-equivalents of its cohort %s, and queue %s wants its nominal back", r.queue, borrowed[r.queue], cohort, q)
		if !g.scaleDown(ctx, r.k, r.spec, "queue "+why, n) {
			break
		}
		g.reclaimed[r.k] = reclaim{gpus: r.gpus, queue: r.queue, taker: q, at: now}
		borrowed[r.queue] -= r.gpus
		need -= r.gpus
		out = append(out, Decision{Kind: "reclaimed", Job: r.k, Reason: why + "; it waits in its queue again and resumes from its checkpoint"})
	}
	return out
}

// nomadPreemptGap is how far below a job's priority Nomad's scheduler
// preempts work for it.
const nomadPreemptGap = 10

// yield is Kueue's preemption within a ClusterQueue, as Nomad's
// preemption does on a cluster of the queue's own: held job w, of one
// member, waits for its queue's quota, so its queue's runs at least
// nomadPreemptGap below its priority are taken back for it, checkpointing
// runs first, then the lowest priority, then the newest: those on the
// first node where they make room for it (with the node's free GPUs) and
// bring the queue back within its nominal with it (less what is being
// taken back of the queue already). Each is scaled to 0 as reclaim does;
// w is admitted on a later tick, once its queue's quota allows it. None
// is taken where no node has such runs: w waits. Decision kind
// "yielded".
func (g *Gangs) yield(ctx context.Context, now time.Time, snap *nomadview.Snapshot, qg *queueGate, w waitingGang, runs []heldRun, n gangNomad) []Decision {
	q, stub := qg.queue[w.k], snap.Jobs[w.k]
	if q == "" || stub == nil || len(w.spec.Groups) != 1 || w.spec.Groups[0].Members != 1 {
		return nil
	}
	need := qg.use[q] + qg.gpus[w.k] - queueNamed(qg.cfg, q).Nominal
	for _, r := range g.reclaimed {
		if r.queue == q {
			need -= r.gpus
		}
	}
	if need <= 1e-9 {
		return nil
	}
	priority := map[JobKey]int{}
	var victims []heldRun
	for _, r := range runs {
		if s := snap.Jobs[r.k]; s != nil && r.queue == q && r.node != "" && r.pending == 0 && s.Priority <= stub.Priority-nomadPreemptGap {
			victims = append(victims, r)
			priority[r.k] = s.Priority
		}
	}
	slices.SortFunc(victims, func(a, b heldRun) int {
		return cmp.Or(compareBool(b.checkpoints, a.checkpoints), cmp.Compare(priority[a.k], priority[b.k]), b.at.Compare(a.at),
			cmp.Compare(b.k.Namespace, a.k.Namespace), cmp.Compare(b.k.ID, a.k.ID))
	})
	free, chosen := snap.FreeGPUs(), map[string][]heldRun{}
	for _, r := range victims {
		chosen[r.node] = append(chosen[r.node], r)
		taken := 0.0
		for _, c := range chosen[r.node] {
			taken += c.gpus
		}
		if float64(free[r.node])+taken >= qg.gpus[w.k]-1e-9 && taken >= need-1e-9 {
			return g.yieldRuns(ctx, now, chosen[r.node], q, fmt.Sprintf("yielded: queue %s is at its nominal, and %s/%s of priority %d waits for it",
				q, w.k.Namespace, w.k.ID, stub.Priority), n)
		}
	}
	return nil
}

// yieldRuns scales each of victims, runs of queue q, to 0 for their own
// queue, why being the reason; it stops at a scale Nomad refused.
func (g *Gangs) yieldRuns(ctx context.Context, now time.Time, victims []heldRun, q, why string, n gangNomad) []Decision {
	var out []Decision
	for _, r := range victims {
		if !g.scaleDown(ctx, r.k, r.spec, "queue "+why, n) {
			break
		}
		g.reclaimed[r.k] = reclaim{gpus: r.gpus, queue: q, taker: q, at: now}
		out = append(out, Decision{Kind: "yielded", Job: r.k, Reason: why + "; it waits in its queue again and resumes from its checkpoint"})
	}
	return out
}

// scaleDown scales every group of a held job to 0 and forgets its run;
// false when Nomad refused a scale (tried again on a later tick).
func (g *Gangs) scaleDown(ctx context.Context, k JobKey, spec gang.Spec, why string, n gangNomad) bool {
	for _, sg := range spec.Groups {
		index, err := n.scale(ctx, k, sg.Name, 0, 0, why)
		if err != nil {
			g.log.Warn("gang: scaling a group to 0 failed; tried on a later tick", "namespace", k.Namespace, "job", k.ID, "group", sg.Name, "error", err)
			return false
		}
		g.wrote[k] = index
	}
	g.forgetRun(k)
	return true
}

// forgetReclaimed drops the taken-back jobs that hold nothing any more,
// and warns of one that still holds GPUs reclaim.within after it was
// taken back (its task's kill_timeout, in which the driver commits its
// checkpoint, is longer than the bound).
func (g *Gangs) forgetReclaimed(now time.Time, snap *nomadview.Snapshot) {
	holding := map[JobKey]bool{}
	for _, a := range snap.Allocs {
		if a.ClientStatus == api.AllocClientStatusPending || a.ClientStatus == api.AllocClientStatusRunning {
			holding[JobKey{Namespace: a.Namespace, ID: a.JobID}] = true
		}
	}
	for k, r := range g.reclaimed {
		switch {
		case !holding[k]:
			delete(g.reclaimed, k)
		case !r.late && now.Sub(r.at) > g.queues.cfg.ReclaimWithin:
			g.log.Warn("queue reclaim: a job taken back still holds GPUs after reclaim.within; its kill_timeout (the checkpoint's commit) is longer",
				"namespace", k.Namespace, "job", k.ID, "within", g.queues.cfg.ReclaimWithin)
			r.late = true
			g.reclaimed[k] = r
		}
	}
}

func queueNamed(cfg queues.Config, name string) queues.Queue {
	for _, q := range cfg.Queues {
		if q.Name == name {
			return q
		}
	}
	return queues.Queue{}
}

// run is an admitted held job as the gate weighs it, at when it was
// admitted: its members not placed yet, nor done, are pending.
func (g *Gangs) run(snap *nomadview.Snapshot, k JobKey, job *api.Job, spec gang.Spec, at time.Time) heldRun {
	gpus := heldGPUs(job, spec, g.queues.shares)
	r := heldRun{k: k, spec: spec, queue: g.queues.queueOf(k.Namespace, jobPoolOf(job)), gpus: gpus, at: at, checkpoints: checkpoints(job, spec)}
	members := gangMembers(snap, k, spec, g.admittedAt[k])
	r.node = placedNode(snap, k, g.admittedAt[k])
	for _, m := range members {
		switch {
		case m.Placed:
			r.holding = true
		case !m.Done && m.Ended == "":
			r.pending += gpus / float64(len(members))
		}
	}
	return r
}

// placedNode is the one node job k's pending and running allocations
// written since index are on: "" for none, or more than one.
func placedNode(snap *nomadview.Snapshot, k JobKey, index uint64) string {
	node := ""
	for _, a := range snap.Allocs {
		if a.JobID != k.ID || a.Namespace != k.Namespace || a.CreateIndex < index || a.DesiredStatus != api.AllocDesiredStatusRun ||
			(a.ClientStatus != api.AllocClientStatusPending && a.ClientStatus != api.AllocClientStatusRunning) {
			continue
		}
		if node != "" && node != a.NodeID {
			return ""
		}
		node = a.NodeID
	}
	return node
}

// Reason kinds of a waiting held job, as nomad-gpu queue and the metrics
// show them.
const (
	WaitQuota       = "quota"       // its queue is at its nominal and may not borrow
	WaitCohort      = "cohort"      // the cohort lends too little now
	WaitDependency  = "dependency"  // a nomad_gpu_after job has not completed
	WaitGang        = "gang"        // Nomad's plan does not place the gang whole
	WaitReservation = "reservation" // another job's reservation holds the GPUs it would fit on
	WaitCapacity    = "capacity"    // Nomad's plan does not place it
	WaitInvalid     = "invalid"     // its spec breaks a rule, or it never fits
	WaitOther       = "other"       // anything else (a locality not read yet)
)

// WaitKind is the kind of a held job's reason in state: the reasons the
// gate writes begin with it.
func WaitKind(state, reason string) string {
	if state == "invalid" {
		return WaitInvalid
	}
	for prefix, kind := range map[string]string{"quota: ": WaitQuota, "cohort: ": WaitCohort, "dependency: ": WaitDependency,
		"gang does not fit: ": WaitGang, "reservation: ": WaitReservation, "capacity: ": WaitCapacity} {
		if strings.HasPrefix(reason, prefix) {
			return kind
		}
	}
	return WaitOther
}

// checkpoints says whether every member group of job checkpoints
// (checkpointsWhy): stopped, it commits a checkpoint and resumes from it.
func checkpoints(job *api.Job, spec gang.Spec) bool {
	for _, sg := range spec.Groups {
		if checkpointsWhy(job, sg.Name) != "" {
			return false
		}
	}
	return true
}

// compareBool orders false before true.
func compareBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}
