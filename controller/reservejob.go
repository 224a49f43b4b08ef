package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/controller/gang"
	"github.com/nomad-gpu/nomad-gpu/nomadview"
)

// Reservations for jobs that are no gang (docs/controller.md,
// reservations). A job whose allocations each ask for several whole GPUs
// starves behind a stream of small ones as a gang does: every GPU that
// frees goes to the queue, and a node never has them all free at once.
// When such a job, blocked, heads the queue, the leader keeps nodes for
// it as for a gang: a placeholder pinned to the nodes predicted to free
// soonest, one above its priority. Once the placeholder holds every GPU
// the job's waiting allocations need, the leader raises the job through
// the priority ledger ten above the placeholder (raise
// "reservation/<placeholder>", in force AdmitTimeout at most), when
// Nomad's plan of the raised job places it preempting the placeholder's
// allocations and nothing else: Nomad places it over the placeholder in
// one plan. A priority change is made in place, so the job's running
// allocations stay; its meta is not touched (a meta change would replace
// them). Once it is placed the placeholder is stopped and the raise
// ended. A 1-GPU allocation fits any GPU that frees: no reservation.

// reservationKey is the ledger raise of a job admitted on its
// reservation, followed by the placeholder's job ID.
const reservationKey = "reservation/"

// singleJob is what a reservation for a job that is no gang keeps: the
// blocked group, its device request, and the job as reserved.
type singleJob struct {
	group  string
	device *api.RequestedDevice
	job    *api.Job
}

// blockedJob is a blocked group of a job that is no gang whose
// allocations each ask for per ≥ 2 whole GPUs of one device request.
type blockedJob struct {
	k           JobKey
	group       string
	allocs, per int
	device      *api.RequestedDevice
	job         *api.Job
	priority    int
	since       time.Time
	queued      nomadview.QueuedGroup
}

// blockedJobs are the snapshot's blocked groups a reservation could keep
// nodes for, in queue order (priority, then age).
func blockedJobs(snap *nomadview.Snapshot) []blockedJob {
	var out []blockedJob
	for _, q := range snap.QueuedGroups() {
		if q.Gang || q.Job == nil || q.TaskGroup == nil {
			continue
		}
		device, per, ok := memberAsk(q.Job, gang.Spec{Groups: []gang.Group{{Name: q.Group, Members: q.Count}}})
		if !ok || per < 2 {
			continue
		}
		out = append(out, blockedJob{k: JobKey{Namespace: q.Namespace, ID: q.JobID}, group: q.Group, allocs: q.Count, per: per,
			device: device, job: q.Job, priority: q.Priority, since: q.Since, queued: q})
	}
	slices.SortStableFunc(out, func(a, b blockedJob) int {
		if a.priority != b.priority {
			return b.priority - a.priority
		}
		return a.since.Compare(b.since)
	})
	return out
}

// blockedHead is the first blocked job a reservation may keep nodes for:
// not resting, one that could fit some node; false when there is none or
// no ledger to raise it through.
func (g *Gangs) blockedHead(snap *nomadview.Snapshot, l *Ledger) (blockedJob, bool) {
	if l == nil {
		return blockedJob{}, false
	}
	for _, b := range blockedJobs(snap) {
		if _, resting := g.reserver.resting[b.k]; !resting && snap.NeverFits(b.queued) == "" {
			return b, true
		}
	}
	return blockedJob{}, false
}

// before says whether b comes before gang w in the queue: higher
// priority, then older (the gang's age is its submission's).
func (b blockedJob) before(snap *nomadview.Snapshot, w waitingGang) bool {
	p, since := 50, time.Time{}
	if w.job.Priority != nil {
		p = *w.job.Priority
	}
	if stub := snap.Jobs[w.k]; stub != nil {
		since = time.Unix(0, stub.SubmitTime)
	}
	if b.priority != p {
		return b.priority > p
	}
	return b.since.Before(since)
}

// startJobReservation keeps nodes for b, the head of the queue.
func (g *Gangs) startJobReservation(ctx context.Context, now time.Time, snap *nomadview.Snapshot, b blockedJob, n gangNomad) []Decision {
	res, ok := gang.Choose(outlook(snap, jobPoolOf(b.job), g.reserver.ends(snap, now)), b.allocs, b.per, now)
	if !ok {
		return nil
	}
	ph := placeholderJob(b.k, b.job, res.Nodes, b.allocs*b.per, b.device)
	if _, _, err := n.register(ctx, ph, 0); err != nil {
		g.log.Warn("reservation: placeholder not registered; tried on the next tick", "namespace", b.k.Namespace, "job", b.k.ID, "error", err)
		return nil
	}
	g.reserver.cur = &reservation{gang: b.k, placeholder: JobKey{Namespace: b.k.Namespace, ID: *ph.ID}, gpus: b.allocs * b.per,
		nodes: res.Nodes, due: res.Due, since: now, counted: now, priority: *ph.Priority, members: b.allocs,
		single: &singleJob{group: b.group, device: b.device, job: b.job}}
	return []Decision{{Kind: "reserved", Job: b.k, Reason: fmt.Sprintf("nodes %s kept for group %q's %d allocations of %d GPUs; expected free in %s; held by job %s, priority %d",
		strings.Join(nodeNames(snap, res.Nodes), ", "), b.group, b.allocs, b.per, res.Due.Sub(now).Round(time.Second), *ph.ID, *ph.Priority)}}
}

// holdJobReservation counts the reservation's idle GPUs, ends it when its
// job no longer waits, is placed or it held too long, and raises the job
// once the placeholder holds every GPU.
func (g *Gangs) holdJobReservation(ctx context.Context, now time.Time, snap *nomadview.Snapshot, n gangNomad, l *Ledger) []Decision {
	r, c := g.reserver, g.reserver.cur
	held := placeholderRunning(snap, c.placeholder)
	r.idle(float64(held) * now.Sub(c.counted).Seconds())
	c.counted = now
	waits := slices.ContainsFunc(blockedJobs(snap), func(b blockedJob) bool { return b.k == c.gang && b.group == c.single.group })
	switch {
	case c.admitted && !waits:
		return g.endJobReservation(ctx, n, l, "reservation-ended", fmt.Sprintf("placed on the %d GPUs kept for it, after %s", c.gpus, now.Sub(c.since).Round(time.Second)))
	case c.admitted && now.Sub(c.admittedAt) > g.cfg.AdmitTimeout:
		return g.endJobReservation(ctx, n, l, "reservation-ended", fmt.Sprintf("raised on it, not placed within %s", g.cfg.AdmitTimeout))
	case c.admitted:
		return nil
	case !waits:
		return g.endJobReservation(ctx, n, l, "reservation-ended", "its job no longer waits (placed, stopped or gone)")
	case now.Sub(c.since) > r.cfg.MaxHold:
		r.resting[c.gang] = now.Add(r.cfg.MaxHold)
		return g.endJobReservation(ctx, n, l, "reservation-expired", fmt.Sprintf("held %s, the most a reservation holds; not kept again for as long", r.cfg.MaxHold))
	case held < c.gpus:
		if job := snap.Jobs[c.placeholder]; job == nil || job.Stop {
			if _, _, err := n.register(ctx, placeholderJob(c.gang, c.single.job, c.nodes, c.gpus, c.single.device), 0); err != nil {
				g.log.Warn("reservation: placeholder not registered again; tried on the next tick", "job", c.gang.ID, "error", err)
			}
		}
		return nil
	}
	return g.raiseOnReservation(ctx, now, snap, n, l)
}

// raiseOnReservation raises the job ten above the full placeholder when
// Nomad's plan of that places it preempting the placeholder's
// allocations and nothing else; else it stops the placeholder and lets
// the job race the queue for the GPUs it held.
func (g *Gangs) raiseOnReservation(ctx context.Context, now time.Time, snap *nomadview.Snapshot, n gangNomad, l *Ledger) []Decision {
	c := g.reserver.cur
	job := c.single.job
	if spec := snap.Specs[c.gang]; spec != nil {
		job = spec
	}
	own := 50
	if job.Priority != nil {
		own = *job.Priority
	}
	prio := c.priority + 10
	if why := g.raisedPlan(ctx, job, prio, c, n); why != "" {
		return g.endJobReservation(ctx, n, l, "reservation-ended", "placeholder stopped, the job left to race the queue: "+why)
	}
	l.Edit(c.gang, own).Begin(Raise{Key: reservationKey + c.placeholder.ID, Priority: prio, Since: now, Until: now.Add(g.cfg.AdmitTimeout),
		Reason: fmt.Sprintf("its reservation: over the placeholder %s's priority %d", c.placeholder.ID, c.priority)})
	c.admitted, c.admittedAt = true, now
	return []Decision{{Kind: "reservation-raised", Job: c.gang, Reason: fmt.Sprintf("on its reservation, to priority %d (its own %d) over the placeholder's %d: Nomad's plan places it preempting the placeholder only",
		prio, own, c.priority)}}
}

// raisedPlan says why job raised to prio cannot take the placeholder's
// GPUs in one plan; "" when it can.
func (g *Gangs) raisedPlan(ctx context.Context, job *api.Job, prio int, c *reservation, n gangNomad) string {
	if prio > maxJobPriority {
		return fmt.Sprintf("a raise to %d passes Nomad's highest priority", prio)
	}
	raised := *job
	raised.Priority = &prio
	plan, err := n.plan(ctx, &raised)
	if err != nil {
		return "Nomad's plan failed: " + err.Error()
	}
	if ok, why := gang.Admit(plan); !ok {
		return "its raised plan does not place it: " + why
	}
	if plan.Annotations != nil {
		for _, a := range plan.Annotations.PreemptedAllocs {
			if a == nil || a.JobID != c.placeholder.ID || a.Namespace != c.placeholder.Namespace {
				return "its raised plan would preempt other work"
			}
		}
	}
	return ""
}

// endJobReservation stops the placeholder, ends the job's raise and drops
// the reservation.
func (g *Gangs) endJobReservation(ctx context.Context, n gangNomad, l *Ledger, kind, why string) []Decision {
	c := g.reserver.cur
	if e := l.Peek(c.gang); slices.ContainsFunc(e.Raises, func(r Raise) bool { return r.Key == reservationKey+c.placeholder.ID }) {
		l.Edit(c.gang, e.Own).End(reservationKey + c.placeholder.ID)
	}
	return g.endReservation(ctx, n, kind, why)
}
