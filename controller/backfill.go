package controller

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/controller/gang"
	"github.com/nomad-gpu/nomad-gpu/controller/sizing"
	"github.com/nomad-gpu/nomad-gpu/nomadview"
)

// Backfill (docs/design/gangs.md, reservations). While a reservation
// fills, the GPUs its placeholder holds are idle. Queued work that cannot
// delay the reserved work may use them (gang.Backfill): a job predicted
// (the sizer's forecast of its group) to end before the reservation is
// due, with gang.BackfillMargin to spare, or a batch job that opted in to
// moves (job meta nomad_gpu_movable) and whose GPU tasks all checkpoint,
// which the handover then preempts, checkpointed, and Nomad places again
// elsewhere, losing nothing. The leader raises such a job ten above the
// placeholder, pinned to the kept nodes (the handover's copy), when
// Nomad's plan of that places all of it preempting the placeholder's
// allocations and nothing else; once placed, restoreJobs gives it its own
// priority back and takes the pin off, in place, as after a handover.
// One plan a tick at most, so that a round asks Nomad the same whatever
// the queue's length; a job whose plan was refused is planned again only
// once the placeholder holds more GPUs than it did then.

// backfilled is a job raised onto a reservation's GPUs.
type backfilled struct {
	// movable: the handover may preempt it; per is the whole GPUs each of
	// its allocations holds.
	movable bool
	per     int
}

// groupKey names one task group of a job.
type groupKey struct {
	JobKey
	group string
}

// queuedRuntimes are the sizer's predicted run times of the snapshot's
// queued groups, the known ones.
func queuedRuntimes(snap *nomadview.Snapshot, now time.Time) map[groupKey]time.Duration {
	out := map[groupKey]time.Duration{}
	for _, w := range sizing.ForecastOf(snap, now).Queued {
		if w.Runtime.Known {
			out[groupKey{JobKey{Namespace: w.Namespace, ID: w.Job}, w.Group}] = time.Duration(w.Runtime.Seconds * float64(time.Second))
		}
	}
	return out
}

// backfillCandidate is a queued group that may take a reservation's GPUs.
type backfillCandidate struct {
	q    nomadview.QueuedGroup
	k    JobKey
	job  *api.Job
	per  int
	work gang.Work
}

// backfillCandidates are the queued groups the rule lets onto the held
// GPUs c's placeholder holds, in queue order: batch jobs
// below the reserved work's priority, no gang, none of whose allocations
// is placed, not raised already (no pin in force), asking whole GPUs
// only, no more than held.
func (g *Gangs) backfillCandidates(now time.Time, snap *nomadview.Snapshot, c *reservation, held int) []backfillCandidate {
	placed := placedJobs(snap)
	var runtimes map[groupKey]time.Duration
	var out []backfillCandidate
	for _, q := range snap.QueuedGroups() {
		k := JobKey{Namespace: q.Namespace, ID: q.JobID}
		job := snap.Specs[k]
		if q.Gang || job == nil || k == c.gang || placed[k] || q.Priority >= c.priority || c.tried[k] >= held ||
			job.Type == nil || *job.Type != api.JobTypeBatch || unreserved(job) != job {
			continue
		}
		_, per, ok := memberAsk(job, gang.Spec{Groups: []gang.Group{{Name: q.Group, Members: q.Count}}})
		if !ok || len(q.Asks) != 1 || per*q.Count > held {
			continue
		}
		if runtimes == nil {
			runtimes = g.reserver.runtimes(snap, now)
		}
		rt, known := runtimes[groupKey{k, q.Group}]
		w := gang.Work{Runtime: rt, Known: known, Movable: job.Meta[MetaMovable] == "true" && checkpointsWhy(job, q.Group) == ""}
		if gang.Backfill(w, now, c.due, gang.BackfillMargin) {
			out = append(out, backfillCandidate{q: q, k: k, job: job, per: per, work: w})
		}
	}
	slices.SortStableFunc(out, func(a, b backfillCandidate) int {
		return cmp.Or(cmp.Compare(b.q.Priority, a.q.Priority), a.q.Since.Compare(b.q.Since))
	})
	return out
}

// backfill raises the first candidate onto the GPUs the reservation's
// placeholder holds (held), when Nomad's plan places it there preempting
// the placeholder only.
func (g *Gangs) backfill(ctx context.Context, now time.Time, snap *nomadview.Snapshot, held int, n gangNomad) []Decision {
	c := g.reserver.cur
	if held == 0 {
		return nil
	}
	cands := g.backfillCandidates(now, snap, c, held)
	if len(cands) == 0 {
		return nil
	}
	b := cands[0]
	own := 50
	if b.job.Priority != nil {
		own = *b.job.Priority
	}
	raised := handover(b.job, own, c.priority+10, c.nodes)
	plan, why := handoverPlan(ctx, raised, c, false, n)
	if why != "" {
		c.tried[b.k] = held
		g.log.Debug("reservation: backfill not planned; tried again once the placeholder holds more", "job", b.k.ID, "why", why)
		return nil
	}
	if _, _, err := n.register(ctx, raised, plan.JobModifyIndex); err != nil {
		g.log.Warn("reservation: backfill not registered raised; tried on the next tick", "job", b.k.ID, "error", err)
		return nil
	}
	c.backfilled[b.k] = backfilled{movable: b.work.Movable, per: b.per}
	rule := fmt.Sprintf("predicted to run %s, ending before the reservation is due in %s with %.1f× to spare",
		b.work.Runtime.Round(time.Second), c.due.Sub(now).Round(time.Second), gang.BackfillMargin)
	if b.work.Movable {
		rule = "it checkpoints and opted in to moves: the handover preempts it, checkpointed, and Nomad places it again"
	}
	return []Decision{{Kind: "backfilled", Job: b.k, Reason: fmt.Sprintf("group %q onto GPUs kept for %s on %s, raised to priority %d (its own %d) over the placeholder's %d: %s",
		b.q.Group, c.gang.ID, strings.Join(nodeNames(snap, c.nodes), ", "), *raised.Priority, own, c.priority, rule)}}
}

// movableHeld are the GPUs of c's nodes that jobs backfilled as movable
// hold: the handover preempts them with the placeholder's.
func movableHeld(snap *nomadview.Snapshot, c *reservation) int {
	n := 0
	for _, a := range snap.Allocs {
		b, ok := c.backfilled[JobKey{Namespace: a.Namespace, ID: a.JobID}]
		if ok && b.movable && slices.Contains(c.nodes, a.NodeID) &&
			a.ClientStatus == api.AllocClientStatusRunning && a.DesiredStatus == api.AllocDesiredStatusRun {
			n += b.per
		}
	}
	return n
}
