package reclaim

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/contract"
)

// Drainer drains the node for a notice.
type Drainer func(ctx context.Context, n Notice) error

// NomadDrainer drains node through Nomad's API for a notice, and stops
// its batch allocations itself. The drain makes the node ineligible,
// migrates its services (forced after deadline) and leaves system jobs
// (this watcher among them); its meta carries the notice under
// contract.DrainMetaReclaim. A drained batch allocation is stopped at the
// drain's deadline and never placed again (Nomad marks it
// MigrateDisablePlacement), so each running batch allocation is stopped
// at once with `nomad alloc stop`, which Nomad does place again: a
// checkpointing task of the gpu driver commits as it stops and resumes
// on another node.
func NomadDrainer(c *api.Client, node string, deadline time.Duration) Drainer {
	return func(ctx context.Context, n Notice) error {
		opts := &api.DrainOptions{
			DrainSpec: &api.DrainSpec{Deadline: deadline, IgnoreSystemJobs: true},
			Meta:      map[string]string{contract.DrainMetaReclaim: n.What},
		}
		wo := (&api.WriteOptions{}).WithContext(ctx)
		if _, err := c.Nodes().UpdateDrainOpts(node, opts, wo); err != nil {
			return fmt.Errorf("draining: %w", err)
		}
		allocs, _, err := c.Nodes().Allocations(node, (&api.QueryOptions{}).WithContext(ctx))
		if err != nil {
			return fmt.Errorf("listing the node's allocations: %w", err)
		}
		var errs []error
		for _, a := range allocs {
			if a.Job == nil || a.Job.Type == nil || *a.Job.Type != api.JobTypeBatch || a.DesiredStatus != api.AllocDesiredStatusRun || a.ClientTerminalStatus() {
				continue
			}
			q := (&api.QueryOptions{Namespace: a.Namespace}).WithContext(ctx)
			if _, err := c.Allocations().Stop(&api.Allocation{ID: a.ID, Namespace: a.Namespace}, q); err != nil {
				errs = append(errs, fmt.Errorf("stopping allocation %s: %w", a.ID, err))
			}
		}
		return errors.Join(errs...)
	}
}

// NomadCordoner makes node ineligible for new work through Nomad's API,
// for a rebalance recommendation: its running work goes on (a reclaim
// notice may never come); once it has ended, the node is empty and the
// autoscaler may remove it, so a fresh spot node takes its place.
func NomadCordoner(c *api.Client, node string) Drainer {
	return func(ctx context.Context, n Notice) error {
		if _, err := c.Nodes().ToggleEligibility(node, false, (&api.WriteOptions{}).WithContext(ctx)); err != nil {
			return fmt.Errorf("marking the node ineligible: %w", err)
		}
		return nil
	}
}

// Watcher polls a Source and drains once on its notice.
type Watcher struct {
	Source Source
	Drain  Drainer
	// Cordon, when not nil and the Source is an Advisor, is made once on
	// its advice, before any notice.
	Cordon   Drainer
	Interval time.Duration
	Log      hclog.Logger
}

// Run polls every Interval until a notice comes, drains (again every
// Interval until the drain is made), then waits for ctx: the instance is
// going. A read that fails is logged and read again; it never drains.
// It returns ctx's error.
func (w *Watcher) Run(ctx context.Context) error {
	t := time.NewTicker(w.Interval)
	defer t.Stop()
	var notice *Notice
	failing, cordoned := false, false
	for {
		if notice == nil && !cordoned {
			cordoned = w.cordon(ctx)
		}
		if notice == nil {
			n, ok, err := w.Source.Notice(ctx)
			switch {
			case err != nil && ctx.Err() == nil:
				if !failing {
					w.Log.Warn("the metadata service cannot be read; reading again", "error", err)
				}
				failing = true
			case err == nil:
				if failing {
					w.Log.Info("the metadata service answers again")
				}
				failing = false
			}
			if ok {
				w.Log.Warn("reclaim notice: draining the node", "notice", n.What, "at", n.At)
				notice = &n
			}
		}
		if notice != nil {
			if err := w.Drain(ctx, *notice); err != nil {
				if ctx.Err() == nil {
					w.Log.Error("the node is not drained; trying again", "error", err)
				}
			} else {
				w.Log.Info("node drained", "notice", notice.What)
				<-ctx.Done()
				return ctx.Err()
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// cordon reads the Source's advice, if it gives any and Cordon is set,
// and cordons on it: true once cordoned. A failed read or cordon is
// logged and tried again at the next poll.
func (w *Watcher) cordon(ctx context.Context) bool {
	a, ok := w.Source.(Advisor)
	if !ok || w.Cordon == nil {
		return false
	}
	n, ok, err := a.Advice(ctx)
	if err != nil || !ok {
		if err != nil && ctx.Err() == nil {
			w.Log.Debug("the rebalance recommendation cannot be read", "error", err)
		}
		return false
	}
	if err := w.Cordon(ctx, n); err != nil {
		if ctx.Err() == nil {
			w.Log.Error("the node is not marked ineligible; trying again", "advice", n.What, "error", err)
		}
		return false
	}
	w.Log.Warn("rebalance recommendation: the node takes no new work; its running work goes on", "advice", n.What)
	return true
}
