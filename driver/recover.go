package driver

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"

	"github.com/nomad-gpu/nomad-gpu/driver/cgroups"
	"github.com/nomad-gpu/nomad-gpu/driver/mps"
	"github.com/nomad-gpu/nomad-gpu/driver/supervisor"
	"github.com/nomad-gpu/nomad-gpu/wire/drivers"
)

func (d *Driver) RecoverTask(h *drivers.TaskHandle) error {
	if h == nil || h.Config == nil || h.Config.ID == "" {
		return fmt.Errorf("recover: the handle has no task config")
	}
	if d.store.get(h.Config.ID) != nil {
		return nil
	}
	rt, err := d.runtime()
	if err != nil {
		return err
	}
	t, err := d.recoverTask(rt, h)
	if err != nil {
		// Nomad will destroy it; DestroyTask then cleans up from the config.
		d.store.markLost(h.Config)
		return fmt.Errorf("recover %s: %w", h.Config.ID, err)
	}
	if !d.store.add(t) {
		return nil // recovered meanwhile by a concurrent call
	}
	d.track(rt, t)
	return nil
}

// recoverTask rebuilds a task from its handle. Nothing in the handle's
// driver state or on disk is trusted as a path: version 2 derives every path
// from the task's ID and the plugin's config, version 1's recorded paths must
// equal what would be derived.
func (d *Driver) recoverTask(rt *runtimeState, h *drivers.TaskHandle) (*task, error) {
	cfg := h.Config
	st, err := decodeState(h.DriverState)
	if err != nil {
		return nil, err
	}
	if !validName(stateDirName(cfg.ID)) || !validName(cgroupName(cfg)) {
		return nil, fmt.Errorf("task ID %q or name %q cannot name a directory", cfg.ID, cfg.Name)
	}
	t := &task{id: cfg.ID, cfg: cfg, dir: d.taskDir(cfg.ID), user: st.User, startedAt: st.StartedAt, done: make(chan struct{})}
	d.noteDataDir(dirsOf(cfg).task)
	supDir := filepath.Join(t.dir, supervisorDir)
	var jr *journal
	cgroupRoot := d.config().CgroupRoot
	if st.Version == 1 {
		if filepath.Clean(st.StateDir) != t.dir {
			return nil, fmt.Errorf("version 1 state dir %q is not this task's (%s)", st.StateDir, t.dir)
		}
		supDir = t.dir
		want := cgroups.Dirs(cgroupRoot, cgroupName(cfg))
		for _, p := range st.CgroupPaths {
			if !slices.Contains(want, filepath.Clean(p)) {
				return nil, fmt.Errorf("version 1 cgroup path %q is not this task's", p)
			}
		}
		for _, g := range st.MIGCaps {
			if filepath.Dir(filepath.Clean(g.Path)) != filepath.Clean(capsDir) {
				return nil, fmt.Errorf("version 1 MIG capability %q is not under %s", g.Path, capsDir)
			}
		}
		t.legacyCaps = st.MIGCaps
	} else {
		j, err := readJournal(t.dir)
		if err != nil {
			return nil, err
		}
		if j.TaskID != cfg.ID || j.CgroupName != cgroupName(cfg) {
			return nil, fmt.Errorf("journal of task %q / cgroup %q does not match the handle's task", j.TaskID, j.CgroupName)
		}
		cgroupRoot = j.CgroupRoot
		jr = j
	}
	proc, err := supervisor.Recover(supDir)
	if err != nil {
		return nil, err
	}
	if spec := proc.Spec(); spec.TaskID != cfg.ID || filepath.Clean(spec.StateDir) != supDir {
		return nil, fmt.Errorf("supervisor state names task %q in %q, not this task", spec.TaskID, spec.StateDir)
	}
	t.proc = proc
	if t.startedAt.IsZero() {
		t.startedAt = proc.StartedAt()
	}
	if g, ok := cgroups.Find(cgroupRoot, cgroupName(cfg)); ok {
		t.group = g
	} else if cgroups.Detect() != cgroups.None {
		d.logger.Warn("task cgroup not found on recovery; stats and tree kill fall back to the session", "task", t.id)
	}
	spec := proc.Spec()
	user := taskUser{name: st.User, uid: spec.UID, gid: spec.GID, groups: spec.Groups}
	d.reacquire(rt, t, user)
	if jr != nil {
		d.reattachCheckpoints(rt, t, jr, user)
	}
	return t, nil
}

// reacquire registers a recovered task again as an MPS client with its own
// limits (they set the daemon's ceiling; this also restarts a daemon that
// died while nobody watched) and as a holder of its MIG capability nodes.
// Both are idempotent; a failure is logged, as the task is running anyway.
func (d *Driver) reacquire(rt *runtimeState, t *task, u taskUser) {
	shares, err := mpsShares(t.cfg.DeviceEnv)
	if err != nil {
		d.logger.Warn("MPS limits of a recovered task unreadable", "task", t.id, "error", err)
	}
	t.mpsGPUs = slices.Sorted(maps.Keys(shares))
	for _, uuid := range t.mpsGPUs {
		ctx, cancel := context.WithTimeout(d.ctx, waitTimeout)
		err := rt.mps.Acquire(ctx, uuid, mps.Client{TaskID: t.id, UID: u.uid, User: u.name, Limits: shares[uuid]})
		cancel()
		if err != nil {
			d.logger.Warn("MPS daemon not re-acquired on recovery", "task", t.id, "gpu", uuid, "error", err)
		}
	}
	if paths := migCapPaths(t.cfg.Devices); len(paths) > 0 && len(t.legacyCaps) == 0 {
		if err := rt.caps.Grant(t.id, paths, u.uid, u.gid); err != nil {
			d.logger.Warn("MIG capabilities not re-granted on recovery", "task", t.id, "error", err)
		}
	}
}
