package controller

import (
	"context"
	"fmt"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/controller/sizing"
)

// Plan is what the leader would do on one tick, done nowhere.
type Plan struct {
	// Decisions are the modules' decisions on the priority ledger.
	Decisions []Decision
	// Priorities are the priority writes the ledger would then make.
	Priorities []PriorityChange
	// Resizes are the jobs the sizer would register with new device
	// requests.
	Resizes []sizing.JobResize
}

// PriorityChange is one job's priority write.
type PriorityChange struct {
	Job      JobKey
	From, To int
}

// Preview reads the ledger and the cluster once and runs the deadline
// and sizing modules of cfg on a copy of the ledger, writing nothing, not
// even the sizing history: `nomad-gpu sizer -dry-run`, for people. It
// needs the history file free (no leader holding it) or Prometheus.
func Preview(ctx context.Context, c *api.Client, cfg Config, log hclog.Logger) (Plan, error) {
	ctl := newController(c, cfg, log, NewMetrics(), true)
	stored, err := ctl.store.Load(ctx)
	if err != nil {
		return Plan{}, fmt.Errorf("loading the priority ledger: %w", err)
	}
	ledger := NewLedger(stored)
	w := ctl.watcher()
	defer w.Close()
	if err := w.Sync(ctx, ctl.viewLists()...); err != nil {
		return Plan{}, fmt.Errorf("reading the cluster: %w", err)
	}
	view, now := ViewOf(w.Latest()), ctl.now()
	plan := Plan{Decisions: ctl.decide(now, view, ledger)}
	if ctl.resize != nil {
		defer func() { _ = ctl.resize.Close() }()
		if plan.Resizes, err = ctl.resize.Step(ctx, now, view); err != nil {
			return plan, fmt.Errorf("sizing: %w", err)
		}
	}
	for _, k := range ledger.Keys() {
		job := view.Jobs[k]
		if job == nil {
			continue
		}
		e := ledger.Peek(k)
		e.Observe(job.Priority)
		if want := e.Want(now); want != job.Priority {
			plan.Priorities = append(plan.Priorities, PriorityChange{Job: k, From: job.Priority, To: want})
		}
	}
	return plan, nil
}
