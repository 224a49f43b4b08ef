package controller

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/nomadview"
)

// Config is how a controller replica runs.
type Config struct {
	// Namespace holds the leader lock.
	Namespace string
	// Cooldown is how long a resumed preempted job is protected; 0 turns
	// preemption protection off.
	Cooldown time.Duration
	// MinRuntime is the minimum runtime by node pool (jobs set their own
	// with meta nomad_gpu_min_runtime), and MinRuntimePriority what a job
	// is raised to meanwhile.
	MinRuntime         map[string]time.Duration
	MinRuntimePriority int
	// LockTTL and LockDelay are the leader lock's (NewVariableLease).
	LockTTL, LockDelay time.Duration
	// Tick is the shortest time between two reads of the cluster and the
	// longest a read waits for a change: it bounds the Nomad API calls.
	Tick time.Duration
}

// Controller is one replica.
type Controller struct {
	api     *api.Client
	cfg     Config
	store   *Store
	protect Protector
	minRun  MinRuntime
	log     hclog.Logger
	metrics *Metrics
	now     func() time.Time
}

// New is a replica talking to Nomad through c.
func New(c *api.Client, cfg Config, log hclog.Logger, m *Metrics) *Controller {
	return &Controller{api: c, cfg: cfg, store: NewStore(c), protect: Protector{Cooldown: cfg.Cooldown},
		minRun: MinRuntime{ByPool: cfg.MinRuntime, Priority: cfg.MinRuntimePriority}, log: log, metrics: m, now: time.Now}
}

// Run takes part in the election until ctx is done, leading when it can.
func (c *Controller) Run(ctx context.Context) error {
	lease, err := NewVariableLease(c.api, c.cfg.Namespace, LeaderVariable, c.cfg.LockTTL, c.cfg.LockDelay)
	if err != nil {
		return err
	}
	l := &Leader{Lease: lease, TTL: c.cfg.LockTTL, Margin: c.cfg.LockTTL / 3, Retry: time.Second, Logger: c.log,
		OnChange: c.metrics.setLeader}
	l.Run(ctx, c.lead)
	return nil
}

// lead is the leader's loop: load the ledger, watch the cluster (the one
// read model, nomadview), and run the modules on its newest snapshot once
// a tick, until the lock is lost.
func (c *Controller) lead(ctx context.Context) error {
	stored, err := c.store.Load(ctx)
	if err != nil {
		return fmt.Errorf("loading the priority ledger: %w", err)
	}
	ledger := NewLedger(stored)
	c.log.Info("priority ledger loaded", "entries", len(stored))
	w := nomadview.NewWatcher(c.api, nomadview.Config{MinRefresh: c.cfg.Tick, Log: c.log, OnCall: c.metrics.call})
	defer w.Close()
	if err := w.Sync(ctx, viewLists...); err != nil {
		return fmt.Errorf("reading the cluster: %w", err)
	}
	tick := time.NewTicker(c.cfg.Tick)
	defer tick.Stop()
	for {
		c.step(ctx, ViewOf(w.Latest()), ledger)
		c.metrics.tick(c.now())
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// viewLists are the lists the modules read.
var viewLists = []nomadview.List{nomadview.Allocs, nomadview.Finished, nomadview.Jobs, nomadview.Nodes}

// step runs the modules on one view and writes what they decided.
func (c *Controller) step(ctx context.Context, view View, ledger *Ledger) {
	now := c.now()
	if c.cfg.Cooldown > 0 {
		for _, d := range c.protect.Step(now, view, ledger) {
			c.decided(d)
		}
	}
	for _, d := range c.minRun.Step(now, view, ledger) {
		c.decided(d)
	}
	for _, k := range ledger.Keys() {
		if err := c.apply(ctx, now, view, ledger, k); err != nil && ctx.Err() == nil {
			c.log.Warn("priority ledger", "namespace", k.Namespace, "job", k.ID, "error", err)
			ledger.Forget(k) // read again on the next lead
		}
	}
}

func (c *Controller) decided(d Decision) {
	c.metrics.decision(d.Kind)
	c.log.Info("decision", "kind", d.Kind, "namespace", d.Job.Namespace, "job", d.Job.ID, "reason", d.Reason)
}

// apply brings one job to the priority its ledger entry wants, recording
// the write in the ledger before making it, and deletes entries that
// hold nothing any more.
func (c *Controller) apply(ctx context.Context, now time.Time, view View, ledger *Ledger, k JobKey) error {
	st := ledger.Stored(k)
	job := view.Jobs[k]
	if job == nil {
		return c.drop(ctx, ledger, k, "the job is gone")
	}
	e := &st.Entry
	own := e.Own
	if e.Observe(job.Priority) {
		ledger.Edit(k, job.Priority)
		if e.Own != own {
			c.decided(Decision{"hand-change", k, fmt.Sprintf("priority %d was set by hand: the job's own from now on (was %d)", e.Own, own)})
		}
	}
	want := e.Want(now)
	if want != job.Priority && job.Status == jobStatusDead {
		// Registering a dead job again runs it again: a finished batch
		// job's work would be done twice. (A batch job whose allocation
		// was just evicted also reads dead for a moment; its entry waits.)
		return nil
	}
	if want != job.Priority {
		e.Writing = want
		if err := c.put(ctx, st); err != nil {
			return err
		}
		if err := c.setPriority(ctx, k, want); err != nil {
			return err
		}
		e.Observe(want)
		ledger.Edit(k, want)
		kind := "raised"
		if want == e.Own {
			kind = "restored"
		}
		c.decided(Decision{kind, k, fmt.Sprintf("priority %d → %d", job.Priority, want)})
	}
	if e.Idle() {
		return c.drop(ctx, ledger, k, "nothing left to keep")
	}
	if ledger.dirty[k] {
		if err := c.put(ctx, st); err != nil {
			return err
		}
		ledger.Clean(k)
	}
	return nil
}

// jobStatusDead is Nomad's status of a job with nothing running or
// waiting (the api package has no constant for it).
const jobStatusDead = "dead"

// put writes an entry of the ledger, counted.
func (c *Controller) put(ctx context.Context, st *Stored) error {
	c.metrics.ledgerWrite()
	return c.store.Put(ctx, st)
}

func (c *Controller) drop(ctx context.Context, ledger *Ledger, k JobKey, why string) error {
	if st := ledger.Stored(k); st.Index != 0 {
		if err := c.store.Delete(ctx, *st); err != nil {
			return err
		}
		c.metrics.ledgerWrite()
	}
	ledger.Forget(k)
	c.log.Debug("ledger entry dropped", "namespace", k.Namespace, "job", k.ID, "why", why)
	return nil
}

// setPriority registers the job again with only its priority changed;
// the modify index makes it fail rather than undo a change made meanwhile.
func (c *Controller) setPriority(ctx context.Context, k JobKey, priority int) error {
	job, _, err := c.api.Jobs().Info(k.ID, (&api.QueryOptions{Namespace: k.Namespace}).WithContext(ctx))
	if err != nil {
		return fmt.Errorf("reading job %s: %w", k.ID, err)
	}
	if job.Priority != nil && *job.Priority == priority {
		return nil
	}
	job.Priority = &priority
	opts := &api.RegisterOptions{EnforceIndex: true, ModifyIndex: *job.JobModifyIndex, PreserveCounts: true}
	if _, _, err := c.api.Jobs().RegisterOpts(job, opts, (&api.WriteOptions{Namespace: k.Namespace}).WithContext(ctx)); err != nil {
		return fmt.Errorf("setting job %s's priority to %d: %w", k.ID, priority, err)
	}
	return nil
}
