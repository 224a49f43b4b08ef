package driver

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/driver/checkpoint"
	"github.com/nomad-gpu/nomad-gpu/driver/preemption"
	"github.com/nomad-gpu/nomad-gpu/driver/procfs"
	"github.com/nomad-gpu/nomad-gpu/wire/drivers"
)

// How often the driver looks for a task's commit marker. inotify tells it
// the moment the marker is created (checkpoint.Markers), so looking is the
// fallback: often where inotify does not watch the staging directory (no
// inotify, its instances or watches used up), more often while a stop
// waits for the commit, since the task works for nothing until its
// kill_signal, and seldom where inotify watches, for a change that does not
// pass through this node's kernel (a network filesystem written from
// elsewhere).
const (
	commitPoll        = 200 * time.Millisecond
	commitPollStop    = 10 * time.Millisecond
	commitPollWatched = 2 * time.Second
)

// checkpointKey names a task's checkpoints across its allocations: the
// replacement of a preempted or drained allocation has the same key.
func checkpointKey(cfg *drivers.TaskConfig) checkpoint.Key {
	ns := cfg.Namespace
	if ns == "" {
		ns = "default"
	}
	idx, _ := strconv.Atoi(cfg.Env["NOMAD_ALLOC_INDEX"])
	return checkpoint.Key{Namespace: ns, Job: cfg.JobID, Group: cfg.TaskGroupName, Task: cfg.Name, AllocIndex: idx}
}

// checkpointer commits a task's checkpoints and asks for them on stop and
// on its interval.
type checkpointer struct {
	d     *Driver
	t     *task
	cfg   CheckpointConfig
	store *checkpoint.Store
	run   *checkpoint.Run
	sig   syscall.Signal

	// committing, held (a value in it) for each commit, makes commits one
	// at a time; a channel, so that a stop waits for one in a bounded way.
	committing chan struct{}

	mu      sync.Mutex
	trigger string // why the next commit is made
	// triggerKnown, once a stop has begun, is closed when the stop's
	// reason is known: the commit waits for it, to record it.
	triggerKnown <-chan struct{}
	commits      int // commits in this run
	// takes counts the checkpoints taken for a commit (frozen, so the task
	// cannot change them any more); taken is closed and replaced at each.
	takes int
	taken chan struct{}
	// asked: the task was signalled for a checkpoint and has not marked
	// one since. A task asked again before it answered would write its
	// second checkpoint into the staging directory while the driver takes
	// its first (a file opened before the freeze stays writable): the
	// generation would be torn, discarded at the next restore, and the
	// progress since the one before it lost. So the driver asks one
	// checkpoint at a time, and never while a commit is under way.
	asked bool
	// stopping has a value when a stop begins, to have watch look for the
	// marker at the stop's pace.
	stopping chan struct{}
}

func newCheckpointer(d *Driver, t *task, cfg CheckpointConfig, store *checkpoint.Store, run *checkpoint.Run) *checkpointer {
	sig, _ := parseSignal(cfg.Signal) // validated with the task config
	return &checkpointer{d: d, t: t, cfg: cfg, store: store, run: run, sig: sig, trigger: "task",
		committing: make(chan struct{}, 1), taken: make(chan struct{}), stopping: make(chan struct{}, 1)}
}

// record is what the journal keeps of the run; nil for no checkpointer.
func (c *checkpointer) record() *journalCheckpoint {
	if c == nil {
		return nil
	}
	r := &journalCheckpoint{Staging: filepath.Base(c.run.Staging), Resumes: c.run.Resumes}
	if c.run.Restore != nil {
		r.RestoreSeq = c.run.Restore.Seq
	}
	return r
}

// reattachCheckpoints takes up the checkpoint run of a task recovered after
// the plugin restarted. A run that cannot be taken up leaves the task
// running without checkpoints, and says so.
func (d *Driver) reattachCheckpoints(rt *runtimeState, t *task, j *journal, u taskUser) {
	tc, _ := t.cfg.DriverConfig.(*TaskConfig)
	if tc == nil || tc.checkpoint() == nil || j.Checkpoint == nil {
		return
	}
	k := checkpointKey(t.cfg)
	dir := rt.ckpt.KeyDir(k)
	run := &checkpoint.Run{Key: k, Staging: filepath.Join(dir, j.Checkpoint.Staging), Resumes: j.Checkpoint.Resumes}
	if seq := j.Checkpoint.RestoreSeq; seq > 0 {
		run.Restore = &checkpoint.Generation{Seq: seq, Dir: rt.ckpt.GenerationDir(k, seq)}
	}
	discarded, err := rt.ckpt.Reattach(run, u.uid, u.gid)
	for _, x := range discarded {
		d.emit(t, fmt.Sprintf("checkpoint: discarded %s: %s", x.Path, x.Reason), nil)
	}
	if err != nil {
		d.emit(t, "checkpoint: the task runs on without checkpoints after the plugin restarted: "+err.Error(),
			map[string]string{contract.EventDetailCheckpoint: contract.CheckpointFailed})
		return
	}
	t.ckpt = newCheckpointer(d, t, *tc.checkpoint(), rt.ckpt, run)
}

// env is what the task is told of its checkpoints.
func (c *checkpointer) env() map[string]string {
	env := map[string]string{
		contract.EnvCheckpointDir:    c.run.Staging,
		contract.EnvCheckpointCommit: c.run.Staging + "/" + checkpoint.CommitMarker,
		contract.EnvCheckpointSignal: c.cfg.Signal,
		contract.EnvResumeCount:      strconv.Itoa(c.run.Resumes),
	}
	if g := c.run.Restore; g != nil {
		env[contract.EnvRestoreDir] = g.Dir
		env[contract.EnvRestoreGeneration] = strconv.Itoa(g.Seq)
	}
	return env
}

// watch commits every checkpoint the task marks complete, asks for one
// every interval, and makes a last commit when the task has exited (it may
// commit and exit at once when stopped). markers, nil where the plugin has
// no inotify, tells it when the marker appears.
func (c *checkpointer) watch(ctx context.Context, markers *checkpoint.Markers) {
	w := markers.Watch(c.run)
	defer w.Close()
	every := c.pollEvery(w)
	poll := time.NewTicker(every)
	defer poll.Stop()
	var interval <-chan time.Time
	if c.cfg.Interval > 0 {
		t := time.NewTicker(c.cfg.Interval)
		defer t.Stop()
		interval = t.C
	}
	c.check(w) // a marker made before the watch began
	for {
		var look bool
		select {
		case <-ctx.Done():
			return
		case <-c.t.done:
			c.commitIfMarked()
			return
		case <-w.C():
			look = true
		case <-poll.C:
			look = true
		case <-c.stopping:
			look = true
		case <-interval:
			c.mu.Lock()
			stopping := c.triggerKnown != nil
			if !stopping {
				c.trigger = "interval"
			}
			c.mu.Unlock()
			if !stopping && !c.busy() {
				c.request("interval", c.cfg.CommitTimeout)
			}
		}
		// A plugin that is going away commits nothing more: the plugin
		// that recovers the task does (in tests both share one process).
		if look && ctx.Err() == nil {
			c.check(w)
		}
		if e := c.pollEvery(w); e != every {
			every = e
			poll.Reset(every)
		}
	}
}

// pollEvery is how often watch looks for the marker: see commitPoll.
func (c *checkpointer) pollEvery(w *checkpoint.MarkerWatch) time.Duration {
	if w.Armed() {
		return commitPollWatched
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.triggerKnown != nil {
		return commitPollStop
	}
	return commitPoll
}

// check commits the checkpoint if the task marked it. A commit leaves a
// fresh staging directory at the same path, which w then watches; the
// task may have marked its next checkpoint before that, so check looks
// again.
func (c *checkpointer) check(w *checkpoint.MarkerWatch) {
	for {
		c.mu.Lock()
		before := c.commits
		c.mu.Unlock()
		c.commitIfMarked()
		c.mu.Lock()
		committed := c.commits > before
		c.mu.Unlock()
		if !committed {
			return
		}
		w.Rearm()
	}
}

// busy says whether the task has a request to answer or a commit is under
// way: an interval's request then waits for the next interval.
func (c *checkpointer) busy() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.asked || len(c.committing) > 0
}

// request signals the task for a checkpoint, to be recorded with trigger,
// saying how long it has to commit. It does not signal a task whose main
// process leaves the signal to its default action, which would end it (or
// stop it) there and then, with nothing committed: a task that has not
// installed its handler yet (a preemption may come milliseconds after its
// start, while its interpreter is still loading) has nothing newer than
// what it restored to commit, and is stopped as it would be without a
// checkpoint block instead, by its kill_signal. asked says whether it was
// signalled, or a request it raced (an interval's tick and a stop) is.
//
// A request claims asked before it signals, under mu: the other one finds
// it claimed and waits for its checkpoint. A second signal would have the
// task's handler run again while the driver takes the first checkpoint,
// tearing it; a shell handler then fails to write into the taken staging
// directory and exits before its stop trap runs.
func (c *checkpointer) request(trigger string, allowed time.Duration) (asked bool) {
	c.mu.Lock()
	if c.asked {
		c.mu.Unlock()
		c.d.emit(c.t, fmt.Sprintf("checkpoint (%s): the task is answering an earlier request; its checkpoint serves this one", trigger),
			map[string]string{contract.EventDetailCheckpoint: contract.CheckpointPending, contract.EventDetailTrigger: trigger})
		return true
	}
	c.asked = true
	c.mu.Unlock()
	unclaim := func() {
		c.mu.Lock()
		c.asked = false
		c.mu.Unlock()
	}
	if !harmlessByDefault(c.sig) {
		if disp, err := c.t.proc.SignalDisposition(c.sig); err == nil && disp == procfs.SignalDefault {
			unclaim()
			c.d.emit(c.t, fmt.Sprintf("checkpoint not requested (%s): the task does not handle %s (yet), whose default action would end it; no new checkpoint", trigger, c.cfg.Signal),
				map[string]string{contract.EventDetailCheckpoint: contract.CheckpointNotHandled, contract.EventDetailTrigger: trigger})
			return false
		}
	}
	c.d.emit(c.t, fmt.Sprintf("checkpoint requested (%s): %s, %s to commit", trigger, c.cfg.Signal, allowed),
		map[string]string{contract.EventDetailCheckpoint: contract.CheckpointRequested, contract.EventDetailTrigger: trigger})
	c.d.metrics.checkpointRequested(c.t)
	if err := c.t.proc.Signal(c.sig); err != nil {
		unclaim()
		c.d.emit(c.t, "checkpoint request failed: "+err.Error(), map[string]string{contract.EventDetailCheckpoint: contract.CheckpointFailed})
		c.d.metrics.checkpointFailed(c.t, contract.CheckpointFailed)
		return true
	}
	return true
}

// harmlessByDefault says whether sig's default action leaves a process
// running: SIGCHLD, SIGCONT, SIGURG and SIGWINCH are ignored by default.
func harmlessByDefault(sig syscall.Signal) bool {
	switch sig {
	case syscall.SIGCHLD, syscall.SIGCONT, syscall.SIGURG, syscall.SIGWINCH:
		return true
	}
	return false
}

// commitIfMarked commits the checkpoint if the task has marked it.
func (c *checkpointer) commitIfMarked() {
	if !c.run.CommitRequested() {
		return
	}
	c.committing <- struct{}{}
	defer func() { <-c.committing }()
	c.commitLocked()
}

// commitLocked is commitIfMarked with committing held.
func (c *checkpointer) commitLocked() {
	if !c.run.CommitRequested() { // committed meanwhile
		return
	}
	c.mu.Lock()
	known, trigger := c.triggerKnown, c.trigger
	c.asked = false // answered
	c.mu.Unlock()
	start := time.Now()
	var waited time.Duration
	g, err := c.store.CommitWith(c.run, c.cfg.Keep, checkpoint.CommitHooks{
		Taken: c.tookOne,
		Trigger: func() string {
			if known != nil {
				w := time.Now()
				<-known // bounded by stopReasonTimeout
				waited = time.Since(w)
			}
			c.mu.Lock()
			defer c.mu.Unlock()
			trigger = c.trigger
			return trigger
		},
	})
	if g == nil {
		c.d.emit(c.t, "checkpoint commit failed: "+err.Error(), map[string]string{contract.EventDetailCheckpoint: contract.CheckpointFailed, contract.EventDetailTrigger: trigger})
		c.d.metrics.checkpointFailed(c.t, contract.CheckpointFailed)
		return
	}
	note := ""
	if err != nil {
		// Committed and restorable; only the tidying after it failed, or
		// the marker named no step.
		c.d.logger.Warn("checkpoint committed with errors", "task", c.t.id, "error", err)
		note = "; " + err.Error()
	}
	// What the commit took, less the wait for the stop's reason (the
	// Nomad API's, not the store's).
	took := time.Since(start) - waited
	details := map[string]string{contract.EventDetailCheckpoint: contract.CheckpointCommitted, "generation": strconv.Itoa(g.Seq), "bytes": strconv.FormatInt(g.Bytes, 10),
		"duration_ms": strconv.FormatInt(took.Milliseconds(), 10), "trigger": trigger}
	of := ""
	if g.Step != nil {
		details[contract.EventDetailStep] = strconv.FormatInt(*g.Step, 10)
		of = fmt.Sprintf(" of step %d", *g.Step)
	}
	c.d.emit(c.t, fmt.Sprintf("checkpoint committed: generation %d%s, %s in %d files, in %s (%s)%s", g.Seq, of, byteSize(g.Bytes), g.Files, took.Round(time.Millisecond), trigger, note), details)
	c.d.metrics.checkpointCommitted(c.t, took, g.Bytes)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.commits++
	if c.triggerKnown == nil {
		c.trigger = "task"
	}
}

// tookOne is told by the store that a checkpoint is taken for a commit.
func (c *checkpointer) tookOne() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.takes++
	close(c.taken)
	c.taken = make(chan struct{})
}

// settle waits for a commit under way, until ctx ends, and makes the
// commit of a checkpoint the task marked on its way out.
func (c *checkpointer) settle(ctx context.Context) {
	select {
	case c.committing <- struct{}{}:
		defer func() { <-c.committing }()
		c.commitLocked()
	case <-ctx.Done():
		c.d.logger.Warn("checkpoint: the stop ends with a commit still under way", "task", c.t.id)
	}
}

// beforeStop asks the task for a checkpoint and waits until the driver
// has taken it for a commit (frozen: nothing the task does changes it any
// more) or the task exits, for the commit timeout but never past the
// stop's own timeout, counted from start: the commit is part of the stop,
// not added to it. The stop then goes on as without checkpoints while the
// driver makes the checkpoint durable; it does not wait for the disk.
//
// The task's CPU weight is raised to the default first: a task that asked
// for a few MHz shares that sliver with its own work, and on a busy host
// its handler could miss the commit timeout (a replay's 10 MHz tasks did,
// on an overloaded machine: docs/trace-replay.md).
func (c *checkpointer) beforeStop(start time.Time, timeout time.Duration, reason <-chan preemption.Reason) {
	const trigger = "stop"
	if g := c.t.group; g != nil {
		if err := g.RaiseCPUWeight(); err != nil {
			c.d.logger.Warn("checkpoint: the stopping task keeps its CPU weight", "task", c.t.id, "error", err)
		}
	}
	known := make(chan struct{})
	c.mu.Lock()
	c.triggerKnown, c.trigger = known, trigger
	c.mu.Unlock()
	select {
	case c.stopping <- struct{}{}:
	default:
	}
	go func() {
		r := <-reason
		c.mu.Lock()
		if r.Trigger != "" {
			c.trigger = r.Trigger
		}
		c.mu.Unlock()
		close(known)
		rt := c.d.rt.Load()
		if rt != nil {
			c.d.countPreempted(c.t, r)
		}
	}()
	allowed := c.cfg.CommitTimeout
	if timeout > 0 && allowed > timeout {
		c.d.emit(c.t, fmt.Sprintf("checkpoint: commit_timeout %s is longer than the task's kill_timeout %s, so the task gets %s to commit; set kill_timeout above commit_timeout", allowed, timeout, timeout), nil)
		allowed = timeout
	}
	deadline := time.NewTimer(time.Until(start.Add(allowed)))
	defer deadline.Stop()
	c.mu.Lock()
	before, taken, asked := c.takes, c.taken, c.asked
	c.mu.Unlock()
	if asked {
		// The task is answering an earlier request: its checkpoint is the
		// freshest it can make, and a second request would tear it.
		c.d.emit(c.t, fmt.Sprintf("checkpoint (%s): the task is answering an earlier request; that checkpoint ends the stop", trigger),
			map[string]string{contract.EventDetailCheckpoint: contract.CheckpointPending, contract.EventDetailTrigger: trigger})
	} else {
		if !c.awaitCommit(deadline.C) {
			c.timedOut(trigger, allowed)
			return
		}
		c.mu.Lock()
		before, taken = c.takes, c.taken
		c.mu.Unlock()
		if !c.request(trigger, allowed) {
			return
		}
	}
	for {
		select {
		case <-taken:
			c.mu.Lock()
			done := c.takes > before
			taken = c.taken
			c.mu.Unlock()
			if done {
				return
			}
		case <-c.t.done:
			c.commitIfMarked()
			return
		case <-deadline.C:
			c.timedOut(trigger, allowed)
			return
		}
	}
}

// timedOut says a stop's checkpoint did not come within allowed.
func (c *checkpointer) timedOut(trigger string, allowed time.Duration) {
	c.d.emit(c.t, fmt.Sprintf("checkpoint not committed within %s; stopping the task", allowed),
		map[string]string{contract.EventDetailCheckpoint: contract.CheckpointTimeout, contract.EventDetailTrigger: trigger})
	c.d.metrics.checkpointFailed(c.t, contract.CheckpointTimeout)
}

// awaitCommit waits for a commit under way to end, so that the next
// checkpoint is written into the fresh staging directory it leaves; false
// when deadline came first.
func (c *checkpointer) awaitCommit(deadline <-chan time.Time) bool {
	select {
	case c.committing <- struct{}{}:
		<-c.committing
		return true
	case <-deadline:
		return false
	}
}

func byteSize(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// predecessorSlack is what a predecessor gets beyond its commit timeout to
// be seen stopped: the kill after its commit, and its client telling the
// servers.
const predecessorSlack = 15 * time.Second

// awaitPredecessors holds a run's start until the allocation it replaces
// has stopped, for at most limit. Nomad starts a replacement on another
// node (a drain, a preemption, a reschedule) while its predecessor may
// still be committing its last checkpoint, which this run must restore
// rather than the one before it; started first, it would also make the
// predecessor's commit a superseded one. Where the API cannot be read, or
// the limit passes, the run goes on with what is committed, and says so.
func (d *Driver) awaitPredecessors(rt *runtimeState, t *task, limit time.Duration) {
	name := t.cfg.Env["NOMAD_ALLOC_NAME"]
	if name == "" || t.cfg.JobID == "" {
		return
	}
	deadline := time.Now().Add(limit)
	announced := false
	for {
		ctx, cancel := context.WithTimeout(d.ctx, stopReasonTimeout)
		ids, err := rt.nomad.Predecessors(ctx, t.cfg.Namespace, t.cfg.JobID, name, t.cfg.AllocID)
		cancel()
		switch {
		case err != nil:
			d.logger.Warn("checkpoint: predecessors unknown; restoring what is committed", "task", t.id, "error", err)
			return
		case len(ids) == 0:
			if announced {
				d.emit(t, "checkpoint: the previous allocation has stopped", nil)
			}
			return
		case time.Now().After(deadline):
			d.emit(t, fmt.Sprintf("checkpoint: alloc %s is still stopping after %s; restoring what is committed now", ids[0], limit),
				map[string]string{contract.EventDetailCheckpoint: contract.CheckpointFailed})
			return
		case !announced:
			announced = true
			d.emit(t, fmt.Sprintf("checkpoint: waiting up to %s for alloc %s, the previous run of this task, to finish stopping and commit", limit, ids[0]), nil)
		}
		select {
		case <-d.ctx.Done():
			return
		case <-time.After(250 * time.Millisecond):
		}
	}
}
