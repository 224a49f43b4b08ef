package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/controller/sizing"
	"github.com/nomad-gpu/nomad-gpu/controller/sizing/history"
)

// SizingConfig is how the right-sizing module runs.
type SizingConfig struct {
	// Interval is the time between two rounds: the sample rate of the
	// history.
	Interval time.Duration
	// History is the history file (bbolt). Only the leader opens it, for
	// as long as it leads: replicas that should keep one history across a
	// failover share it through a host volume (one node's disk), or use
	// Prometheus. "": none.
	History string
	// Retention is how long the file keeps samples and finished runs.
	Retention time.Duration
	// Prometheus is where samples are read (the gpu driver's task
	// metrics) instead of the nodes' device stats; without History the
	// runs are those Nomad remembers, so the controller keeps no state of
	// its own. "": none.
	Prometheus string
	// Window is how far back a recommendation reads.
	Window     time.Duration
	Thresholds sizing.Thresholds
}

// Resizer is the right-sizing module: once an Interval, a sizing round
// (sizing.Sizer) on the view's snapshot, whose resizes the controller
// registers. It holds the history while its replica leads.
type Resizer struct {
	cfg     SizingConfig
	cluster sizing.Cluster
	log     hclog.Logger
	dryRun  bool // read the history, record nothing

	sizer *sizing.Sizer // open while leading; nil before and after
	store *history.Store
	last  time.Time
}

// NewResizer is the module of cfg, reading Nomad through cluster.
func NewResizer(cfg SizingConfig, cluster sizing.Cluster, log hclog.Logger, dryRun bool) *Resizer {
	return &Resizer{cfg: cfg, cluster: cluster, log: log, dryRun: dryRun}
}

// Due says whether a round is due at now.
func (r *Resizer) Due(now time.Time) bool {
	return r.last.IsZero() || now.Sub(r.last) >= r.cfg.Interval
}

// Step runs a round at now: the jobs to register with new device
// requests. A history that cannot be opened (a former leader holding the
// file still) fails this round; the next one tries again.
func (r *Resizer) Step(ctx context.Context, now time.Time, v View) ([]sizing.JobResize, error) {
	r.last = now
	if err := r.open(); err != nil {
		return nil, err
	}
	rep, err := r.sizer.Step(ctx, v.Snap, now)
	if err != nil {
		return nil, err
	}
	r.log.Debug("sizing round", "samples", rep.Samples, "runs", rep.Runs, "tasks", len(rep.Results), "resizes", len(rep.Resizes))
	return rep.Resizes, nil
}

func (r *Resizer) open() error {
	if r.sizer != nil {
		return nil
	}
	s := &sizing.Sizer{Cluster: r.cluster, DryRun: r.dryRun, Window: r.cfg.Window, Thresholds: r.cfg.Thresholds, Logger: r.log}
	if r.cfg.History != "" {
		st, err := history.Open(r.cfg.History, history.Options{Retention: r.cfg.Retention})
		if err != nil {
			return fmt.Errorf("history %s: %w", r.cfg.History, err)
		}
		r.store, s.Store = st, st
	}
	if r.cfg.Prometheus != "" {
		var runs history.RunSource = sizing.RunList(nil) // replaced each round by the sizer
		if s.Store != nil {
			runs = s.Store
		}
		p, err := history.NewPrometheus(r.cfg.Prometheus, runs, history.PromOptions{})
		if err != nil {
			return errors.Join(fmt.Errorf("prometheus: %w", err), r.Close())
		}
		s.Samples = p
	}
	r.sizer = s
	return nil
}

// Close releases the history, for the next leader.
func (r *Resizer) Close() error {
	r.sizer, r.last = nil, time.Time{}
	if r.store == nil {
		return nil
	}
	err := r.store.Close()
	r.store = nil
	return err
}

// register writes a resize: the job as read, with its new device
// requests, guarded by its modify index, so a job changed since it was
// read is not overwritten (the next round reads it again).
func register(ctx context.Context, c *api.Client, jr sizing.JobResize) error {
	job := jr.Job
	ns := "default"
	if job.Namespace != nil && *job.Namespace != "" {
		ns = *job.Namespace
	}
	_, _, err := c.Jobs().EnforceRegister(job, *job.JobModifyIndex, (&api.WriteOptions{Namespace: ns}).WithContext(ctx))
	return err
}
