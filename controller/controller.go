package controller

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/controller/layoutplan"
	"github.com/nomad-gpu/nomad-gpu/controller/queues"
	"github.com/nomad-gpu/nomad-gpu/controller/sizing"
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
	// LockTTL is the longest the lead stays with a dead leader: another
	// replica leads at most this long after it died (NomadLockTTL).
	// LockDelay is Nomad's lock delay, part of it.
	LockTTL, LockDelay time.Duration
	// Tick is the shortest time between two reads of the cluster and the
	// longest a read waits for a change: it bounds the Nomad API calls.
	Tick time.Duration
	// Deadlines serves job deadlines (Deadliner); nil: off.
	Deadlines *sizing.DeadlineConfig
	// Sizing resizes jobs from their history (Resizer); nil: off.
	Sizing *SizingConfig
	// FinishedWindow is how far back finished allocations are read: the
	// history of the deadlines' forecast, and of the sizer's runs when it
	// keeps no file; 0: the read model's default.
	FinishedWindow time.Duration
	// Layouts are the bounds of the layout module (Layouts); nil: off.
	Layouts *layoutplan.Bounds
	// Moves bounds the move module (Mover); nil: off.
	Moves *MoveConfig
	// Gangs bounds gang admission (Gangs); nil: off.
	Gangs *GangConfig
	// Queues is the queue file (QueueBook); nil: no queues.
	Queues *queues.Config
}

// Controller is one replica.
type Controller struct {
	api      *api.Client
	cfg      Config
	store    *Store
	protect  Protector
	minRun   MinRuntime
	deadline *Deadliner // nil: off
	resize   *Resizer   // nil: off
	layouts  *Layouts   // nil: off; made when the replica leads
	mover    *Mover     // nil: off; made when the replica leads
	gangs    *Gangs     // nil: off; made when the replica leads
	queues   *QueueBook // nil: no queues; made when the replica leads
	// queuesSaved is when the queues' use was last written, and
	// queuesWritten the accounts written then.
	queuesSaved   time.Time
	queuesWritten []QueueStatus
	// replaced are the allocations a relayout refused that the leader
	// asked Nomad to place again (replaceRefused), while listed.
	replaced map[string]bool
	specs    specCache
	log      hclog.Logger
	metrics  *Metrics
	// gangsWritten is the gang status last written (GangsVariable), once
	// gangsWrote: the leader writes it when it changes.
	gangsWritten []GangStatus
	gangsWrote   bool
	now          func() time.Time
}

// New is a replica talking to Nomad through c.
func New(c *api.Client, cfg Config, log hclog.Logger, m *Metrics) *Controller {
	return newController(c, cfg, log, m, false)
}

// newController is a replica; a dry one records no sizing history.
func newController(c *api.Client, cfg Config, log hclog.Logger, m *Metrics, dry bool) *Controller {
	ctl := &Controller{api: c, cfg: cfg, store: NewStore(c), protect: Protector{Cooldown: cfg.Cooldown},
		minRun: MinRuntime{ByPool: cfg.MinRuntime, Priority: cfg.MinRuntimePriority}, log: log, metrics: m, now: time.Now}
	if cfg.Deadlines != nil {
		ctl.deadline = &Deadliner{Config: *cfg.Deadlines}
	}
	if cfg.Sizing != nil {
		ctl.resize = NewResizer(*cfg.Sizing, sizing.NomadCluster{Client: c}, log.Named("sizing"), dry)
	}
	return ctl
}

// Run takes part in the election until ctx is done, leading when it can.
func (c *Controller) Run(ctx context.Context) error {
	ttl := NomadLockTTL(c.cfg.LockTTL, c.cfg.LockDelay)
	lease, err := NewVariableLease(c.api, c.cfg.Namespace, LeaderVariable, replicaName(), ttl, c.cfg.LockDelay)
	if err != nil {
		return fmt.Errorf("lock_ttl %s with lock_delay %s: %w", c.cfg.LockTTL, c.cfg.LockDelay, err)
	}
	l := &Leader{Lease: lease, TTL: ttl, Margin: ttl / 3, Retry: FollowerRetry, Logger: c.log,
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
	if c.cfg.Layouts != nil {
		history, err := LoadLayoutHistory(ctx, c.api, c.cfg.Namespace)
		if err != nil {
			return fmt.Errorf("loading the layout history: %w", err)
		}
		c.layouts = NewLayouts(*c.cfg.Layouts, history, c.log.Named("layouts"), c.metrics)
	}
	if c.cfg.Moves != nil {
		history, hold, err := LoadMoves(ctx, c.api, c.cfg.Namespace)
		if err != nil {
			return fmt.Errorf("loading the move history: %w", err)
		}
		c.mover = NewMover(*c.cfg.Moves, history, c.log.Named("moves"))
		// A hold the leader before died with ends on the first tick.
		c.mover.hold = hold
	}
	if c.cfg.Gangs != nil {
		c.gangs = NewGangs(*c.cfg.Gangs, c.log.Named("gangs"))
		c.gangs.CountIdle(c.metrics.reservationIdle)
	}
	if c.cfg.Queues != nil {
		usage, _, err := LoadQueues(ctx, c.api, c.cfg.Namespace)
		if err != nil {
			return fmt.Errorf("loading the queues' use: %w", err)
		}
		c.queues, c.queuesSaved, c.queuesWritten = NewQueueBook(*c.cfg.Queues, usage), time.Time{}, nil
		if c.gangs != nil {
			c.gangs.UseQueues(c.queues)
		}
	}
	w := c.watcher()
	defer w.Close()
	if err := w.Sync(ctx, c.viewLists()...); err != nil {
		return fmt.Errorf("reading the cluster: %w", err)
	}
	if c.resize != nil {
		defer func() {
			if err := c.resize.Close(); err != nil {
				c.log.Warn("closing the sizing history", "error", err)
			}
		}()
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

// watcher is the leader's watch on the cluster.
func (c *Controller) watcher() *nomadview.Watcher {
	return nomadview.NewWatcher(c.api, nomadview.Config{MinRefresh: c.cfg.Tick, FinishedWindow: c.cfg.FinishedWindow, Log: c.log, OnCall: c.metrics.call})
}

// viewLists are the lists the modules read: protection reads the
// allocations and jobs, a minimum runtime by pool the nodes (their
// pools); the deadlines' forecast and the sizer read the blocked
// evaluations too; the layout and move modules the nodes (their GPUs'
// layouts and free GPUs) and the blocked evaluations (the queue); the
// gang module the nodes (a refused gang is planned again when their free
// GPUs change).
func (c *Controller) viewLists() []nomadview.List {
	lists := []nomadview.List{nomadview.Allocs, nomadview.Finished, nomadview.Jobs}
	if len(c.minRun.ByPool) > 0 || c.cfg.Layouts != nil || c.cfg.Moves != nil || c.cfg.Gangs != nil || c.cfg.Queues != nil {
		lists = append(lists, nomadview.Nodes)
	}
	if c.deadline != nil || c.resize != nil || c.cfg.Layouts != nil || c.cfg.Moves != nil || c.cfg.Queues != nil {
		lists = append(lists, nomadview.Blocked)
	}
	return lists
}

// step runs the modules on one view and writes what they decided.
func (c *Controller) step(ctx context.Context, view View, ledger *Ledger) {
	now := c.now()
	for _, d := range c.decide(now, view, ledger) {
		c.decided(d)
	}
	for _, jr := range c.resizes(ctx, now, view) {
		c.registerResize(ctx, jr)
	}
	c.account(ctx, now, view.Snap) // the queues' accounts, which the gangs' gate admits by
	if c.gangs != nil {
		for _, d := range c.gangs.Step(ctx, now, view.Snap, c.specs.get(c.api, view), nomadGangs{c.api}) {
			c.decided(d)
		}
		c.metrics.gangCensus(c.gangs.Census())
		c.metrics.heldJobs(c.gangs.Statuses())
		c.writeGangs(ctx)
	}
	c.relayout(ctx, now, view.Snap)
	c.replaceRefused(ctx, now, view.Snap)
	c.move(ctx, now, view, ledger)
	for _, k := range ledger.Keys() {
		if err := c.apply(ctx, now, view, ledger, k); err != nil && ctx.Err() == nil {
			c.log.Warn("priority ledger: read again and tried on the next tick", "namespace", k.Namespace, "job", k.ID, "error", err)
			c.reload(ctx, ledger, k)
		}
	}
}

// decide runs the modules that change priorities, on the ledger only.
func (c *Controller) decide(now time.Time, view View, ledger *Ledger) []Decision {
	var out []Decision
	if c.cfg.Cooldown > 0 {
		out = append(out, c.protect.Step(now, view, ledger)...)
	}
	out = append(out, c.minRun.Step(now, view, ledger)...)
	if c.deadline != nil {
		out = append(out, c.deadline.Step(now, view, ledger)...)
	}
	return out
}

// resizes runs a sizing round when one is due.
func (c *Controller) resizes(ctx context.Context, now time.Time, view View) []sizing.JobResize {
	if c.resize == nil || !c.resize.Due(now) {
		return nil
	}
	out, err := c.resize.Step(ctx, now, view)
	if err != nil && ctx.Err() == nil {
		c.log.Warn("sizing round failed; the next one tries again", "error", err)
	}
	return out
}

// registerResize writes one resize and records the decision.
func (c *Controller) registerResize(ctx context.Context, jr sizing.JobResize) {
	k := JobKey{Namespace: "default", ID: *jr.Job.ID}
	if jr.Job.Namespace != nil && *jr.Job.Namespace != "" {
		k.Namespace = *jr.Job.Namespace
	}
	if err := register(ctx, c.api, jr); err != nil {
		c.log.Warn("resize not registered; the next round tries again", "namespace", k.Namespace, "job", k.ID, "error", err)
		return
	}
	for _, r := range jr.Resized {
		c.decided(Decision{"resized", k, r.String()})
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
	if job.JobModifyIndex < e.AppliedIndex {
		// The jobs list has not caught up with our last write yet.
		return nil
	}
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
		index, err := c.setPriority(ctx, k, want)
		if err != nil {
			return err
		}
		e.Observe(want)
		e.AppliedIndex = index
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

// replicaName names this replica for people: its Nomad allocation where
// it runs as a Nomad task, else its host and pid.
func replicaName() string {
	if id := os.Getenv("NOMAD_ALLOC_ID"); id != "" {
		return "alloc " + short(id) + " (" + os.Getenv("NOMAD_ALLOC_NAME") + ")"
	}
	host, _ := os.Hostname()
	return fmt.Sprintf("%s pid %d", host, os.Getpid())
}

// jobStatusDead is Nomad's status of a job with nothing running or
// waiting (the api package has no constant for it).
const jobStatusDead = "dead"

// put writes an entry of the ledger, counted.
func (c *Controller) put(ctx context.Context, st *Stored) error {
	c.metrics.ledgerWrite()
	return c.store.Put(ctx, st)
}

// reload reads a job's entry again after a failed write: another writer
// (a leader before this one) may have moved it. The entry in memory stays
// when the store cannot be read.
func (c *Controller) reload(ctx context.Context, ledger *Ledger, k JobKey) {
	st, found, err := c.store.Get(ctx, k)
	switch {
	case err != nil:
		c.log.Warn("priority ledger: reading the entry again", "namespace", k.Namespace, "job", k.ID, "error", err)
	case !found:
		ledger.Forget(k)
	default:
		ledger.Replace(st)
	}
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
// It returns the job's modify index after the write.
func (c *Controller) setPriority(ctx context.Context, k JobKey, priority int) (uint64, error) {
	job, _, err := c.api.Jobs().Info(k.ID, (&api.QueryOptions{Namespace: k.Namespace}).WithContext(ctx))
	if err != nil {
		return 0, fmt.Errorf("reading job %s: %w", k.ID, err)
	}
	if job.Priority != nil && *job.Priority == priority {
		return *job.JobModifyIndex, nil
	}
	job.Priority = &priority
	opts := &api.RegisterOptions{EnforceIndex: true, ModifyIndex: *job.JobModifyIndex, PreserveCounts: true}
	resp, _, err := c.api.Jobs().RegisterOpts(job, opts, (&api.WriteOptions{Namespace: k.Namespace}).WithContext(ctx))
	if err != nil {
		return 0, fmt.Errorf("setting job %s's priority to %d: %w", k.ID, priority, err)
	}
	return resp.JobModifyIndex, nil
}
