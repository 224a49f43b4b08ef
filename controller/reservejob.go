package controller

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/controller/gang"
	"github.com/nomad-gpu/nomad-gpu/nomadview"
)

// Reservations for jobs that are no gang (docs/controller.md,
// reservations). A job whose allocations each ask for several whole GPUs
// starves behind a stream of small ones as a gang does: every GPU that
// frees goes to the queue, and a node never has them all free at once.
// When such a job, waiting whole (none of its allocations placed), heads
// the queue, the leader keeps nodes for it as for a gang: a placeholder
// pinned to the nodes predicted to free soonest, one above its priority.
// Once the placeholder holds every GPU the job needs, the leader hands
// them over as to a gang: it registers the job raised ten above the
// placeholder and pinned to the reserved nodes (handover), when Nomad's
// plan of that places it preempting the placeholder's allocations and
// nothing else. Measured: unpinned, the raised plan preferred 1-GPU jobs
// of the job's own priority on another node as victims (lower than the
// placeholder). A job with allocations placed is not reserved for: its
// handover would change its meta and constraints, which replaces them.
// Once placed, the job gets its own priority back and its pin taken off
// (restoreJobs), in place. A 1-GPU allocation fits any GPU that frees:
// no reservation.

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
// nodes for (of jobs none of whose allocations is placed), in queue order
// (priority, then age).
func blockedJobs(snap *nomadview.Snapshot) []blockedJob {
	var out []blockedJob
	placed := placedJobs(snap)
	for _, q := range snap.QueuedGroups() {
		if q.Gang || q.Job == nil || q.TaskGroup == nil || placed[JobKey{Namespace: q.Namespace, ID: q.JobID}] {
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

// placedJobs are the jobs with an allocation pending or running.
func placedJobs(snap *nomadview.Snapshot) map[JobKey]bool {
	out := map[JobKey]bool{}
	for _, a := range snap.Allocs {
		if a.DesiredStatus == api.AllocDesiredStatusRun && (a.ClientStatus == api.AllocClientStatusRunning || a.ClientStatus == api.AllocClientStatusPending) {
			out[JobKey{Namespace: a.Namespace, ID: a.JobID}] = true
		}
	}
	return out
}

// blockedHead is the first blocked job a reservation may keep nodes for:
// not resting, one that could fit some node; false when there is none.
func (g *Gangs) blockedHead(snap *nomadview.Snapshot) (blockedJob, bool) {
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
	res, ok := gang.Choose(outlook(snap, snap.JobNodes(b.job), g.reserver.ends(snap, now)), b.allocs, b.per, now)
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
		single: &singleJob{group: b.group, device: b.device, job: b.job}, backfilled: map[JobKey]backfilled{}, tried: map[JobKey]int{}}
	return []Decision{{Kind: "reserved", Job: b.k, Reason: fmt.Sprintf("nodes %s kept for group %q's %d allocations of %d GPUs; expected free in %s; held by job %s, priority %d",
		strings.Join(nodeNames(snap, res.Nodes), ", "), b.group, b.allocs, b.per, res.Due.Sub(now).Round(time.Second), *ph.ID, *ph.Priority)}}
}

// holdJobReservation counts the reservation's idle GPUs, ends it when its
// job no longer waits, is placed or it held too long, and hands the job
// the GPUs once the placeholder holds them all.
func (g *Gangs) holdJobReservation(ctx context.Context, now time.Time, snap *nomadview.Snapshot, n gangNomad) []Decision {
	r, c := g.reserver, g.reserver.cur
	held := placeholderRunning(snap, c.placeholder)
	r.idle(float64(held) * now.Sub(c.counted).Seconds())
	c.counted = now
	waits := slices.ContainsFunc(blockedJobs(snap), func(b blockedJob) bool { return b.k == c.gang && b.group == c.single.group })
	switch {
	case c.admitted && !waits:
		return g.endReservation(ctx, n, "reservation-ended", fmt.Sprintf("placed on the %d GPUs kept for it, after %s", c.gpus, now.Sub(c.since).Round(time.Second)))
	case c.admitted && now.Sub(c.admittedAt) > g.cfg.AdmitTimeout:
		return g.endReservation(ctx, n, "reservation-ended", fmt.Sprintf("handed its GPUs, not placed within %s", g.cfg.AdmitTimeout))
	case c.admitted:
		return nil
	case !waits:
		return g.endReservation(ctx, n, "reservation-ended", "its job no longer waits (placed, stopped or gone)")
	case now.Sub(c.since) > r.cfg.MaxHold:
		r.resting[c.gang] = now.Add(r.cfg.MaxHold)
		return g.endReservation(ctx, n, "reservation-expired", fmt.Sprintf("held %s, the most a reservation holds; not kept again for as long", r.cfg.MaxHold))
	case held+movableHeld(snap, c) < c.gpus:
		if job := snap.Jobs[c.placeholder]; job == nil || job.Stop {
			if _, _, err := n.register(ctx, placeholderJob(c.gang, c.single.job, c.nodes, c.gpus, c.single.device), 0); err != nil {
				g.log.Warn("reservation: placeholder not registered again; tried on the next tick", "job", c.gang.ID, "error", err)
			}
			return nil
		}
		return g.backfill(ctx, now, snap, held, n)
	}
	return g.handOver(ctx, now, snap, n)
}

// handOver registers the job raised ten above the full placeholder and
// pinned to its nodes, when Nomad's plan of that places it preempting
// the placeholder's allocations and nothing else; else it stops the
// placeholder and lets the job race the queue for the GPUs it held.
func (g *Gangs) handOver(ctx context.Context, now time.Time, snap *nomadview.Snapshot, n gangNomad) []Decision {
	c := g.reserver.cur
	job := c.single.job
	if spec := snap.Specs[c.gang]; spec != nil {
		job = spec
	}
	own := 50
	if job.Priority != nil {
		own = *job.Priority
	}
	raised := handover(job, own, c.priority+10, c.nodes)
	plan, why := handoverPlan(ctx, raised, c, true, n)
	if why != "" {
		return g.endReservation(ctx, n, "reservation-ended", "placeholder stopped, the job left to race the queue: "+why)
	}
	if _, _, err := n.register(ctx, raised, plan.JobModifyIndex); err != nil {
		g.log.Warn("reservation: the job not registered raised; tried on the next tick", "job", c.gang.ID, "error", err)
		return nil
	}
	c.admitted, c.admittedAt = true, now
	return []Decision{{Kind: "reservation-raised", Job: c.gang, Reason: fmt.Sprintf("on its reservation, to priority %d (its own %d) over the placeholder's %d, pinned to %s: Nomad's plan places it preempting the placeholder only",
		*raised.Priority, own, c.priority, strings.Join(nodeNames(snap, c.nodes), ", "))}}
}

// restoreJobs gives each job that is no gang and was handed its
// reservation its own priority back and its pin taken off, once it is
// placed or its reservation is over (a dead leader's too: the meta says
// what to undo).
func (g *Gangs) restoreJobs(ctx context.Context, snap *nomadview.Snapshot, specs JobSpecs, n gangNomad) []Decision {
	var handed []JobKey
	for k, stub := range snap.Jobs {
		own, err := strconv.Atoi(stub.Meta[contract.MetaReservationOwnPriority])
		if err == nil && !nomadview.IsGang(stub) && !stub.Stop && stub.Priority != own {
			handed = append(handed, k)
		}
	}
	if len(handed) == 0 {
		return nil
	}
	waiting := map[JobKey]bool{}
	for _, q := range snap.QueuedGroups() {
		waiting[JobKey{Namespace: q.Namespace, ID: q.JobID}] = true
	}
	var out []Decision
	for _, k := range handed {
		if c := g.reserver.cur; c != nil && waiting[k] && (c.gang == k || c.backfilled[k] != backfilled{}) {
			continue // its handover, or backfill, under way
		}
		job, err := specs(ctx, k)
		if err != nil {
			continue
		}
		out = append(out, g.restore(ctx, k, job, "it is placed on its reservation, or its reservation is over", n)...)
	}
	return out
}
