package driver

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/driver/gpuwatch"
	"github.com/nomad-gpu/nomad-gpu/driver/supervisor"
	"github.com/nomad-gpu/nomad-gpu/wire/drivers"
	"github.com/nomad-gpu/nomad-gpu/wire/schema"
)

func decodeDefaults(v any) error { return schema.Decode(nil, v) }

func (d *Driver) migMemoryMiB(uuid string) uint64 {
	inv, err := d.inventory()
	if err != nil {
		return 0
	}
	snap, err := inv.Snapshot()
	if err != nil {
		return 0
	}
	for _, g := range snap.GPUs {
		for _, m := range g.MIG {
			if m.UUID == uuid {
				return m.MemoryMiB
			}
		}
	}
	return 0
}

// onViolation is the watchdog's verdict on a task over its GPU memory.
func (d *Driver) onViolation(v gpuwatch.Violation) {
	t := d.store.get(v.TaskID)
	if t == nil || v.Repeat && v.Mode == gpuwatch.ModeWarn {
		return
	}
	msg := fmt.Sprintf("GPU memory limit exceeded on %s: using %d MiB, limit %d MiB", v.UUID, v.UsedMiB, v.LimitMiB)
	action := contract.EventActionWarn
	if v.Mode == gpuwatch.ModeKill {
		action = contract.EventActionKill
	}
	ann := map[string]string{
		contract.EventDetailGPU: v.UUID, contract.EventDetailUsedMiB: strconv.FormatUint(v.UsedMiB, 10),
		contract.EventDetailLimitMiB: strconv.FormatUint(v.LimitMiB, 10), contract.EventDetailAction: action,
	}
	switch v.Mode {
	case gpuwatch.ModeKill:
		if !v.Repeat {
			d.emit(t, msg+"; killing the task", ann)
			d.metrics.killed(t, contract.KillGPUMemory)
		}
		t.setKillReason(msg)
		ctx, cancel := context.WithTimeout(d.ctx, waitTimeout)
		defer cancel()
		if err := t.proc.KillTree(ctx, 0, syscall.SIGKILL); err != nil {
			d.logger.Error("killing task over its GPU memory", "task", t.id, "error", err)
		}
	case gpuwatch.ModeWarn:
		d.emit(t, msg, ann)
	}
}

// waitExit turns the supervisor's record of the exit into the task's result.
func (d *Driver) waitExit(rt *runtimeState, t *task) {
	st, err := t.proc.Wait(d.ctx)
	if err != nil && d.ctx.Err() != nil {
		return // plugin shutting down; the next plugin process recovers it
	}
	res := &drivers.ExitResult{ExitCode: st.ExitCode, Signal: st.Signal}
	switch {
	case err != nil:
		res.Err = err
	case st.Err != "":
		res.Err = errors.New(st.Err)
	}
	if t.group != nil {
		if oom, _ := t.group.OOMKilled(); oom {
			res.OOMKilled = true
		}
	}
	t.mu.Lock()
	if t.killReason != "" && res.Err == nil {
		res.Err = errors.New(t.killReason)
	}
	t.res = res
	t.completed = st.FinishedAt
	if t.completed.IsZero() {
		t.completed = time.Now()
	}
	t.mu.Unlock()
	close(t.done)
	rt.watch.Remove(t.id)
}

func (d *Driver) WaitTask(ctx context.Context, id string) (<-chan *drivers.ExitResult, error) {
	t := d.store.get(id)
	if t == nil {
		return nil, fmt.Errorf("task %s: %w", id, drivers.ErrTaskNotFound)
	}
	ch := make(chan *drivers.ExitResult, 1)
	go func() {
		select {
		case <-t.done:
			ch <- t.result()
		case <-ctx.Done():
		}
		close(ch)
	}()
	return ch, nil
}

// parseSignal accepts "SIGTERM", "TERM" or a number.
func parseSignal(name string) (syscall.Signal, error) {
	name = strings.TrimSpace(name)
	if n, err := strconv.Atoi(name); err == nil && n > 0 && n < 65 {
		return syscall.Signal(n), nil
	}
	upper := strings.ToUpper(name)
	if !strings.HasPrefix(upper, "SIG") {
		upper = "SIG" + upper
	}
	if s := unix.SignalNum(upper); s != 0 {
		return s, nil
	}
	return 0, fmt.Errorf("unknown signal %q; use a name such as SIGTERM, SIGINT or SIGUSR1", name)
}

// killTree ends a stop; a variable for tests, which see the grace a stop
// leaves the task's kill_signal.
var killTree = (*supervisor.Handle).KillTree

func (d *Driver) StopTask(id string, timeout time.Duration, signal string) error {
	t := d.store.get(id)
	if t == nil || t.exited() {
		return nil
	}
	sig := syscall.SIGINT
	if signal != "" {
		s, err := parseSignal(signal)
		if err != nil {
			d.emit(t, fmt.Sprintf("kill_signal: %v; sending SIGINT", err), nil)
		} else {
			sig = s
		}
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), timeout+waitTimeout)
	defer cancel()
	checkpointed := false
	if rt := d.rt.Load(); rt != nil && (t.ckpt != nil || d.metrics.exp.Enabled()) {
		reason := d.stopReason(rt, t)
		if t.ckpt != nil && !t.exited() {
			t.ckpt.beforeStop(start, timeout, reason)
			checkpointed = true
		} else {
			go func() { d.countPreempted(t, <-reason) }()
		}
	}
	// The whole stop, the wait for a checkpoint included, has the task's
	// kill_timeout: what the checkpoint took is not added to it.
	err := killTree(t.proc, ctx, max(timeout-time.Since(start), 0), sig)
	if checkpointed {
		// The checkpoint taken before the kill is made durable while the
		// task stops; the stop is over when it is (or has failed).
		t.ckpt.settle(ctx)
	}
	return err
}

func (d *Driver) DestroyTask(id string, force bool) error {
	rt, err := d.runtime()
	if err != nil {
		return err
	}
	t := d.store.get(id)
	if t == nil {
		// A task whose recovery failed, or that this process never knew,
		// may still hold a supervisor, cgroups, MPS references and MIG
		// grants: everything of it is found from its ID and config.
		return d.purge(rt, id, d.store.takeLost(id), nil)
	}
	if !t.exited() && !force {
		return fmt.Errorf("task %s is still running; stop it first or destroy with force", id)
	}
	d.store.remove(id)
	d.metrics.destroyed(t)
	return d.release(rt, t)
}

// release kills whatever is left of a known task and frees all it held.
func (d *Driver) release(rt *runtimeState, t *task) error {
	rt.watch.Remove(t.id)
	var errs []error
	if t.proc != nil {
		if err := t.proc.Destroy(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := d.purge(rt, t.id, t.cfg, t.legacyCaps); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (d *Driver) InspectTask(id string) (*drivers.TaskStatus, error) {
	t := d.store.get(id)
	if t == nil {
		return nil, fmt.Errorf("task %s: %w", id, drivers.ErrTaskNotFound)
	}
	st := &drivers.TaskStatus{ID: id, Name: t.cfg.Name, State: drivers.TaskStateRunning, StartedAt: t.startedAt,
		Attributes: map[string]string{"pid": strconv.Itoa(t.proc.TaskPID()), "supervisor_pid": strconv.Itoa(t.proc.SupervisorPID())}}
	if t.exited() {
		st.State = drivers.TaskStateExited
		st.ExitResult = t.result()
		t.mu.Lock()
		st.CompletedAt = t.completed
		t.mu.Unlock()
	}
	return st, nil
}

func (d *Driver) SignalTask(id string, signal string) error {
	t := d.store.get(id)
	if t == nil {
		return fmt.Errorf("task %s: %w", id, drivers.ErrTaskNotFound)
	}
	sig, err := parseSignal(signal)
	if err != nil {
		return err
	}
	return t.proc.Signal(sig)
}

func envList(env map[string]string) []string {
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}
