package controller

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/controller/consolidate"
	"github.com/nomad-gpu/nomad-gpu/nomadview"
)

// MovesVariable is where the move module keeps the moves of the last 24
// hours, in the controller's namespace: item MovesItem holds the
// MoveRecords as JSON, oldest first, and item HoldItem the node held
// (Hold), when one is. A leader reads it when it starts to lead, so a new
// leader keeps the budget of the one before and ends its hold; `nomad-gpu
// top` reads it too. A record is about 250 bytes: the 64 KiB a variable
// holds is about 250 moves; older records are dropped first.
const (
	MovesVariable  = "nomad-gpu/moves"
	MovesItem      = "moves"
	HoldItem       = "hold"
	maxMoveRecords = 200
)

// LoadMoves reads the move history and the node held, if any; none when
// the variable is missing.
func LoadMoves(ctx context.Context, c *api.Client, namespace string) ([]MoveRecord, *Hold, error) {
	var out []MoveRecord
	var hold *Hold
	if _, err := readItems(ctx, c, namespace, MovesVariable, map[string]any{MovesItem: &out, HoldItem: &hold}); err != nil {
		return nil, nil, err
	}
	return out, hold, nil
}

// putMoves writes the move history and the hold, whole (the leader is
// the one writer).
func putMoves(ctx context.Context, c *api.Client, namespace string, records []MoveRecord, hold *Hold) error {
	items := map[string]any{MovesItem: records[max(0, len(records)-maxMoveRecords):]}
	if hold != nil {
		items[HoldItem] = hold
	}
	return writeItems(ctx, c, namespace, MovesVariable, items)
}

// specCache reads jobs' full specs through the API, once per version of
// each job (the jobs list's JobModifyIndex says when to read again). The
// leader's loop alone uses it: no lock.
type specCache struct {
	jobs map[JobKey]*api.Job
}

// get is JobSpecs for the controller's client and the view's jobs.
func (s *specCache) get(c *api.Client, v View) JobSpecs {
	return func(ctx context.Context, k JobKey) (*api.Job, error) {
		listed := v.Jobs[k]
		if j := s.jobs[k]; j != nil && listed != nil && j.JobModifyIndex != nil && *j.JobModifyIndex == listed.JobModifyIndex {
			return j, nil
		}
		j, _, err := c.Jobs().Info(k.ID, (&api.QueryOptions{Namespace: k.Namespace}).WithContext(ctx))
		if err != nil {
			return nil, err
		}
		if s.jobs == nil {
			s.jobs = map[JobKey]*api.Job{}
		}
		s.jobs[k] = j
		return j, nil
	}
}

// move runs the move module: it ends a hold whose moved allocations are
// placed elsewhere, holds the node of a new plan and stops the plan's
// allocations, each stop recorded and logged with its reason; then it
// notes the moved jobs that run again, counting the GPU-time moving cost.
func (c *Controller) move(ctx context.Context, now time.Time, view View, ledger *Ledger) {
	if c.mover == nil {
		return
	}
	changed := c.resumed(now, view)
	c.mover.noteWanted(now, view.Snap)
	if c.scaleInHold(ctx, now, view.Snap) {
		changed = true
	}
	if h := c.mover.Held(); h != nil && h.Stop != nil && gpuHeldSeen(view.Snap, *h) {
		c.stopHeld(ctx, now, h)
		changed = true
	}
	if c.mover.Release(now, view.Snap) {
		h := *c.mover.Held()
		if h.Stop != nil {
			c.log.Warn("the servers did not show the held GPU's instances unhealthy in time; nothing moved", "node", h.NodeName, "gpu", h.GPU, "waited", c.cfg.Moves.HoldMax)
		}
		if c.endHold(ctx, h) {
			c.mover.Released()
			changed = true
		}
	}
	if c.mover.sampleDue(now) {
		c.sampleMPS(ctx, now, view.Snap)
	}
	if rp, ok := c.mover.Relieve(ctx, now, view, ledger, c.specs.get(c.api, view)); ok {
		c.holdGPU(ctx, now, rp)
		changed = true
	}
	relaying := c.layouts.Relaying(view.Snap)
	if p, ok := c.mover.Step(ctx, now, view, ledger, c.specs.get(c.api, view), relaying); ok {
		if !c.consolidate(ctx, now, p, "consolidate") {
			return
		}
		changed = true
	} else if p, ok := c.mover.ScaleIn(ctx, now, view, ledger, c.specs.get(c.api, view), relaying); ok {
		if !c.consolidate(ctx, now, p, "scale-in") {
			return
		}
		changed = true
	}
	if changed {
		if err := putMoves(ctx, c.api, c.cfg.Namespace, c.mover.History(), c.mover.Held()); err != nil && ctx.Err() == nil {
			c.log.Warn("move history not written", "error", err)
		}
	}
}

// consolidate holds a plan's node and stops its allocations, each stop
// recorded and logged with its reason; kind is the decision's and the
// moves metric's ("consolidate", "scale-in"). False when the history
// could not be written: nothing was done.
func (c *Controller) consolidate(ctx context.Context, now time.Time, p consolidate.Plan, kind string) bool {
	c.log.Info("decision", "kind", kind, "reason", p.String())
	h := c.mover.Holding(now, p)
	if err := putMoves(ctx, c.api, c.cfg.Namespace, c.mover.History(), &h); err != nil {
		c.log.Warn("move history not written; nothing moved", "error", err)
		c.mover.Released()
		return false
	}
	if _, err := c.api.Nodes().ToggleEligibility(p.Node.ID, false, (&api.WriteOptions{}).WithContext(ctx)); err != nil {
		c.log.Warn("node not held; nothing moved", "node", p.Node.Name, "error", err)
		c.mover.Released()
		return true
	}
	for _, mv := range p.Moves {
		reason := moveReason(p, mv)
		q := (&api.QueryOptions{Namespace: mv.Alloc.Namespace}).WithContext(ctx)
		if _, err := c.api.Allocations().Stop(&api.Allocation{ID: mv.Alloc.ID, Namespace: mv.Alloc.Namespace}, q); err != nil {
			if ctx.Err() == nil {
				c.log.Warn("allocation not stopped; the consolidation waits for the next plan", "alloc", mv.Alloc.ID, "error", err)
			}
			continue
		}
		c.mover.Record(MoveRecord{At: now, Namespace: mv.Alloc.Namespace, Job: mv.Alloc.Job, Alloc: mv.Alloc.ID,
			From: p.Node.Name, GPUs: mv.Alloc.GPUs, Reason: reason, For: movePurpose(p)})
		c.metrics.moved(kind)
		c.decided(Decision{"moved", JobKey{Namespace: mv.Alloc.Namespace, ID: mv.Alloc.Job}, reason})
	}
	return true
}

// endHold makes a held node eligible again, or removes a GPU's hold from
// its node's metadata; false when it could not.
func (c *Controller) endHold(ctx context.Context, h Hold) bool {
	if h.GPU != "" {
		return c.endGPUHold(ctx, h)
	}
	if _, err := c.api.Nodes().ToggleEligibility(h.Node, true, (&api.WriteOptions{}).WithContext(ctx)); err != nil && !nomadview.IsNotFound(err) {
		if ctx.Err() == nil {
			c.log.Warn("held node not made eligible again; trying on the next tick", "node", h.NodeName, "error", err)
		}
		return false
	}
	c.log.Info("decision", "kind", "hold-over", "reason", fmt.Sprintf("node %s takes work again: the allocations moved off it are placed elsewhere", h.NodeName))
	return true
}

// resumed marks the moved allocations whose job runs again (an
// allocation of the job created after the move is running) and counts
// the GPU-time from stop to run; true when it marked one.
func (c *Controller) resumed(now time.Time, view View) bool {
	running := map[JobKey]time.Time{}
	for _, a := range view.Snap.Allocs {
		if a.ClientStatus == api.AllocClientStatusRunning {
			k := JobKey{Namespace: a.Namespace, ID: a.JobID}
			created := time.Unix(0, a.CreateTime)
			if created.After(running[k]) {
				running[k] = created
			}
		}
	}
	return c.mover.markResumed(now, running, c.metrics.moveGPUSeconds)
}
