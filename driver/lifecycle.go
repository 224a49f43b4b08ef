package driver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nomad-gpu/nomad-gpu/driver/cgroups"
	"github.com/nomad-gpu/nomad-gpu/driver/gpuwatch"
	"github.com/nomad-gpu/nomad-gpu/driver/mps"
	"github.com/nomad-gpu/nomad-gpu/driver/supervisor"
	"github.com/nomad-gpu/nomad-gpu/wire/drivers"
	"github.com/nomad-gpu/nomad-gpu/wire/schema"
)

func decodeDefaults(v any) error { return schema.Decode(nil, v) }

// unrecoverable fails the task for good: a restart cannot fix bad input.
func unrecoverable(format string, args ...any) error {
	return drivers.NewRecoverableError(fmt.Errorf(format, args...), false)
}

func (d *Driver) StartTask(cfg *drivers.TaskConfig) (*drivers.TaskHandle, *drivers.NetworkOverride, error) {
	if err := d.runtime(); err != nil {
		return nil, nil, drivers.NewRecoverableError(err, true)
	}
	if t := d.getTask(cfg.ID); t != nil {
		return nil, nil, unrecoverable("task %s is already started", cfg.ID)
	}
	tc, ok := cfg.DriverConfig.(*TaskConfig)
	if !ok || tc == nil {
		return nil, nil, unrecoverable("task has no config block; config.command is required")
	}
	if err := tc.validate(); err != nil {
		return nil, nil, unrecoverable("%v", err)
	}
	dcfg := d.config()

	userName := cfg.User
	if userName == "" {
		userName = dcfg.DefaultUser
	}
	uid, gid, groups, _, err := supervisor.LookupUser(userName)
	if err != nil {
		return nil, nil, unrecoverable("user: %v", err)
	}
	if uid == 0 && !dcfg.AllowRoot {
		return nil, nil, unrecoverable("user: %q is root; tasks may not run as root unless the plugin config sets allow_root = true", userName)
	}

	st := &driverState{
		Version:   taskStateVersion,
		StateDir:  filepath.Join(dcfg.StateDir, "tasks", stateDirName(cfg.ID)),
		DeviceEnv: cfg.DeviceEnv,
		User:      userName,
	}
	t := &task{id: cfg.ID, cfg: cfg, state: st, done: make(chan struct{})}

	// Undo whatever was set up when a later step fails.
	started := false
	defer func() {
		if !started {
			d.releaseTask(t)
		}
	}()

	if v := cgroups.Detect(); v != cgroups.None {
		limits := cgroups.Limits{PidsMax: tc.PidsLimit, DeviceDeny: gpuDeviceDeny(cfg.Devices)}
		if r := cfg.Resources; r != nil {
			limits.CPUShares = r.CPUShares
			if r.Linux != nil {
				limits.MemoryLimitBytes = r.Linux.MemoryLimitBytes
				limits.CpusetCpus = r.Linux.CpusetCpus
				if r.Linux.CPUShares > 0 {
					limits.CPUShares = r.Linux.CPUShares
				}
			}
			// memory_max oversubscription: the reservation is the soft limit.
			if r.MemoryMaxMB > r.MemoryMB && r.MemoryMB > 0 {
				limits.MemorySoftBytes = r.MemoryMB << 20
			}
		}
		g, err := cgroups.Create(dcfg.CgroupRoot, cgroupName(cfg), limits)
		if err != nil {
			return nil, nil, drivers.NewRecoverableError(fmt.Errorf("cgroups: %w", err), true)
		}
		t.group = g
		st.CgroupPaths = g.Paths()
	}

	if err := d.setupMPS(t); err != nil {
		return nil, nil, err
	}
	if uid != 0 {
		grants, err := grantMIGCaps(cfg.Devices, uid, gid)
		if err != nil {
			return nil, nil, drivers.NewRecoverableError(err, true)
		}
		st.MIGCaps = grants
	}

	dir := tc.WorkDir
	if dir == "" {
		dir = cfg.Env["NOMAD_TASK_DIR"]
	}
	env := cfg.Env
	if cfg.DeviceEnv[gpuwatch.EnvVisibleDevices] == "" {
		// A task without a GPU reservation must not see the node's GPUs:
		// CUDA and container runtimes default to all of them.
		env = make(map[string]string, len(cfg.Env)+2)
		for k, v := range cfg.Env {
			env[k] = v
		}
		env[gpuwatch.EnvVisibleDevices] = ""
		env["NVIDIA_VISIBLE_DEVICES"] = "void"
	}
	spec := supervisor.Spec{
		TaskID:     cfg.ID,
		StateDir:   st.StateDir,
		Executable: d.executable,
		Command:    tc.Command,
		Args:       tc.Args,
		Env:        envList(env),
		Dir:        dir,
		UID:        uid,
		GID:        gid,
		Groups:     groups,
		SetUser:    true,
		StdoutPath: cfg.StdoutPath,
		StderrPath: cfg.StderrPath,
	}
	if t.group != nil {
		spec.CgroupProcsFiles = t.group.ProcsFiles()
	}
	if tc.OOMScoreAdj != 0 {
		adj := tc.OOMScoreAdj
		spec.OOMScoreAdj = &adj
	}
	proc, err := supervisor.Start(spec)
	if err != nil {
		return nil, nil, classifyStartError(err)
	}
	t.proc = proc
	st.StartedAt = proc.StartedAt()
	started = true

	d.track(t)
	handle := &drivers.TaskHandle{Version: 1, Config: cfg, State: drivers.TaskStateRunning, DriverState: st.encode()}
	return handle, nil, nil
}

// mpsShares reads the MPS limits a task holds on each of its GPUs from the
// device plugin's reservation.
func mpsShares(env map[string]string) (map[string]mps.Limits, error) {
	if env[gpuwatch.EnvSliceType] != gpuwatch.SliceMPS {
		return nil, nil
	}
	mem, err := gpuwatch.ParsePinnedMemLimit(env[gpuwatch.EnvPinnedMemLimit])
	if err != nil {
		return nil, err
	}
	threads, _ := strconv.Atoi(env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"])
	out := map[string]mps.Limits{}
	for i, uuid := range strings.Split(env[gpuwatch.EnvVisibleDevices], ",") {
		if uuid != "" {
			out[uuid] = mps.Limits{ThreadPercentage: threads, PinnedMemMiB: mem[i]}
		}
	}
	return out, nil
}

// setupMPS makes each GPU whose shares the task holds run its MPS daemon,
// with a ceiling at least as high as this task's limits.
func (d *Driver) setupMPS(t *task) error {
	shares, err := mpsShares(t.cfg.DeviceEnv)
	if err != nil {
		return unrecoverable("%v", err)
	}
	if len(shares) == 0 {
		return nil
	}
	if ok, why := d.mps.Available(); !ok {
		return unrecoverable("MPS: the task holds MPS shares but %s", why)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	for _, uuid := range sortedKeys(shares) {
		if err := d.mps.Acquire(ctx, uuid, t.id, shares[uuid]); err != nil {
			return drivers.NewRecoverableError(fmt.Errorf("MPS daemon for %s: %w", uuid, err), true)
		}
		t.state.MPSGPUs = append(t.state.MPSGPUs, uuid)
	}
	return nil
}

// track registers a started or recovered task: watchdog and exit waiter.
func (d *Driver) track(t *task) {
	d.mu.Lock()
	d.tasks[t.id] = t
	d.mu.Unlock()
	d.watchTask(t)
	go d.waitExit(t)
}

func (d *Driver) watchTask(t *task) {
	limits, err := gpuwatch.DeviceLimits(t.state.DeviceEnv, d.migMemoryMiB)
	if err != nil {
		d.logger.Warn("GPU memory of this task cannot be watched", "task", t.id, "error", err)
		return
	}
	if len(limits) == 0 {
		return
	}
	mode, _ := gpuwatch.ParseMode(d.config().GPUMemoryWatchdog)
	d.watch.Add(gpuwatch.Task{ID: t.id, Devices: limits, Pids: t.pids, Mode: mode})
}

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
	t := d.getTask(v.TaskID)
	if t == nil || v.Repeat && v.Mode == gpuwatch.ModeWarn {
		return
	}
	msg := fmt.Sprintf("GPU memory limit exceeded on %s: using %d MiB, limit %d MiB", v.UUID, v.UsedMiB, v.LimitMiB)
	ann := map[string]string{
		"gpu": v.UUID, "used_mib": strconv.FormatUint(v.UsedMiB, 10), "limit_mib": strconv.FormatUint(v.LimitMiB, 10),
		"action": string(v.Mode),
	}
	switch v.Mode {
	case gpuwatch.ModeKill:
		if !v.Repeat {
			d.emit(t, msg+"; killing the task", ann)
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
func (d *Driver) waitExit(t *task) {
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
	d.watch.Remove(t.id)
}

func (d *Driver) RecoverTask(h *drivers.TaskHandle) error {
	if h == nil || h.Config == nil || h.Config.ID == "" {
		return fmt.Errorf("recover: the handle has no task config")
	}
	if d.getTask(h.Config.ID) != nil {
		return nil
	}
	if err := d.runtime(); err != nil {
		return err
	}
	st, err := decodeState(h.DriverState)
	if err != nil {
		return fmt.Errorf("recover %s: %w", h.Config.ID, err)
	}
	proc, err := supervisor.Recover(st.StateDir)
	if err != nil {
		return fmt.Errorf("recover %s: %w", h.Config.ID, err)
	}
	t := &task{id: h.Config.ID, cfg: h.Config, state: st, proc: proc, done: make(chan struct{})}
	if len(st.CgroupPaths) > 0 {
		if g, err := cgroups.Open(st.CgroupPaths); err == nil {
			t.group = g
		} else {
			d.logger.Warn("task cgroup not found on recovery; stats and tree kill fall back to the session", "task", t.id, "error", err)
		}
	}
	// Re-register as an MPS client with the task's own limits (they set the
	// daemon's ceiling): idempotent, and it restarts a daemon that died
	// while nobody watched.
	shares, _ := mpsShares(st.DeviceEnv)
	for _, uuid := range st.MPSGPUs {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		err := d.mps.Acquire(ctx, uuid, t.id, shares[uuid])
		cancel()
		if err != nil {
			d.logger.Warn("MPS daemon not re-acquired on recovery", "task", t.id, "gpu", uuid, "error", err)
		}
	}
	d.track(t)
	return nil
}

func (d *Driver) WaitTask(ctx context.Context, id string) (<-chan *drivers.ExitResult, error) {
	t := d.getTask(id)
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

func (d *Driver) StopTask(id string, timeout time.Duration, signal string) error {
	t := d.getTask(id)
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
	ctx, cancel := context.WithTimeout(context.Background(), timeout+waitTimeout)
	defer cancel()
	return t.proc.KillTree(ctx, timeout, sig)
}

func (d *Driver) DestroyTask(id string, force bool) error {
	t := d.getTask(id)
	if t == nil {
		// A task whose recovery failed is unknown here, yet may still be an
		// MPS client on disk: release it so its daemon can stop.
		if d.mps != nil {
			if err := d.mps.ReleaseTask(id); err != nil {
				d.logger.Warn("releasing MPS daemons of an unknown task", "task", id, "error", err)
			}
		}
		return nil
	}
	if !t.exited() && !force {
		return fmt.Errorf("task %s is still running; stop it first or destroy with force", id)
	}
	d.mu.Lock()
	delete(d.tasks, id)
	d.mu.Unlock()
	d.releaseTask(t)
	return nil
}

// releaseTask kills whatever is left of a task and frees all it held.
func (d *Driver) releaseTask(t *task) {
	if d.watch != nil {
		d.watch.Remove(t.id)
	}
	if t.proc != nil {
		if err := t.proc.Destroy(); err != nil {
			d.logger.Warn("destroying task processes", "task", t.id, "error", err)
		}
	} else if t.state.StateDir != "" {
		_ = os.RemoveAll(t.state.StateDir)
	}
	if t.group != nil {
		if err := t.group.Destroy(); err != nil {
			d.logger.Warn("removing task cgroup", "task", t.id, "error", err)
		}
	}
	revokeMIGCaps(t.state.MIGCaps)
	if d.mps != nil {
		for _, uuid := range t.state.MPSGPUs {
			if err := d.mps.Release(uuid, t.id); err != nil {
				d.logger.Warn("releasing MPS daemon", "task", t.id, "gpu", uuid, "error", err)
			}
		}
	}
}

func (d *Driver) InspectTask(id string) (*drivers.TaskStatus, error) {
	t := d.getTask(id)
	if t == nil {
		return nil, fmt.Errorf("task %s: %w", id, drivers.ErrTaskNotFound)
	}
	st := &drivers.TaskStatus{ID: id, Name: t.cfg.Name, State: drivers.TaskStateRunning, StartedAt: t.state.StartedAt,
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
	t := d.getTask(id)
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

// classifyStartError: a missing command, a user or directory the task cannot
// use will fail again on restart; anything else (a slow log reader, fork
// limits) may not, so the restart policy decides.
func classifyStartError(err error) error {
	msg := err.Error()
	for _, permanent := range []string{"command ", "working directory ", "user "} {
		if strings.HasPrefix(msg, permanent) {
			return unrecoverable("%v", err)
		}
	}
	return drivers.NewRecoverableError(err, true)
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
