package driver

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/nomad-gpu/nomad-gpu/driver/cgroups"
	"github.com/nomad-gpu/nomad-gpu/driver/supervisor"
	"github.com/nomad-gpu/nomad-gpu/wire/drivers"
)

// purge frees everything a task may hold, found from its ID (and, where it
// has it, its config) rather than from a record that may be lost or wrong:
// supervisor and processes, cgroups, MIG grants, MPS references, state dir.
// It is idempotent and safe for a task that holds nothing.
func (d *Driver) purge(rt *runtimeState, id string, cfg *drivers.TaskConfig, legacyCaps []capGrant) error {
	dir := d.taskDir(id)
	var errs []error
	j, jerr := readJournal(dir)
	// Version 1 kept the supervisor's files in the task dir itself.
	for _, sup := range []string{filepath.Join(dir, supervisorDir), dir} {
		if err := supervisor.Purge(sup); err != nil {
			errs = append(errs, err)
		}
	}
	root, name := d.config().CgroupRoot, ""
	switch {
	case jerr == nil:
		root, name = j.CgroupRoot, j.CgroupName
	case cfg != nil:
		name = cgroupName(cfg)
	}
	if name != "" {
		if g, ok := cgroups.Find(root, name); ok {
			if err := g.Destroy(); err != nil {
				errs = append(errs, fmt.Errorf("remove cgroup: %w", err))
			}
		}
	}
	if err := rt.caps.Release(id); err != nil {
		errs = append(errs, err)
	}
	restoreLegacyCaps(legacyCaps)
	if err := rt.mps.ReleaseTask(id); err != nil {
		errs = append(errs, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		errs = append(errs, fmt.Errorf("remove state dir: %w", err))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("clean up task %s: %w", id, err)
	}
	return nil
}

// restoreLegacyCaps gives back version 1 MIG grants; best effort, since the
// node may be gone with the instance.
func restoreLegacyCaps(grants []capGrant) {
	for _, g := range grants {
		if filepath.Dir(filepath.Clean(g.Path)) != filepath.Clean(capsDir) {
			continue
		}
		_ = os.Lchown(g.Path, int(g.UID), int(g.GID))
		_ = os.Chmod(g.Path, os.FileMode(g.Mode&0o7777))
	}
}

// reconcile runs once per plugin process, before it serves any task:
//   - a task whose start never committed (the plugin died inside StartTask)
//     has no handle at Nomad and never will: it is purged;
//   - a committed task, running or not, is left alone: Nomad recovers it,
//     or destroys it, and only then is it cleaned up;
//   - MPS references and MIG grants held by task IDs with no state dir, and
//     empty cgroups no task records, are what a crash between two cleanup
//     steps leaves: they are released.
func (d *Driver) reconcile(rt *runtimeState) {
	tasksDir := filepath.Join(d.config().StateDir, "tasks")
	entries, err := os.ReadDir(tasksDir)
	if err != nil {
		d.logger.Error("reading task state", "dir", tasksDir, "error", err)
		return
	}
	present := map[string]bool{}
	cgroupNames := map[string]bool{}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		dir := filepath.Join(tasksDir, e.Name())
		j, err := readJournal(dir)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			if _, serr := os.Stat(filepath.Join(dir, "spec.json")); serr == nil {
				present[e.Name()] = true // version 1 task: Nomad still holds its handle
				continue
			}
			if empty(dir) {
				os.Remove(dir) // the plugin died between mkdir and the journal
			} else {
				present[e.Name()] = true
				d.logger.Warn("task state dir without a journal left alone", "dir", dir)
			}
		case err != nil:
			present[e.Name()] = true
			d.logger.Error("unreadable task journal left alone", "dir", dir, "error", err)
		case !j.Committed:
			d.logger.Warn("cleaning up a task an earlier plugin process did not finish starting", "task", j.TaskID)
			if err := d.purge(rt, j.TaskID, nil, nil); err != nil {
				d.logger.Error("cleaning up a half-started task", "task", j.TaskID, "error", err)
				present[e.Name()] = true
			}
		default:
			present[e.Name()] = true
			cgroupNames[j.CgroupName] = true
		}
	}
	for _, id := range rt.mps.Tasks() {
		if !present[stateDirName(id)] {
			d.logger.Warn("releasing the MPS daemons of a task that no longer exists", "task", id)
			if err := rt.mps.ReleaseTask(id); err != nil {
				d.logger.Error("releasing MPS daemons", "task", id, "error", err)
			}
		}
	}
	for id := range rt.caps.Holders() {
		if !present[stateDirName(id)] {
			d.logger.Warn("restoring the MIG capability nodes of a task that no longer exists", "task", id)
			if err := rt.caps.Release(id); err != nil {
				d.logger.Error("restoring MIG capability nodes", "task", id, "error", err)
			}
		}
	}
	root := d.config().CgroupRoot
	for _, name := range cgroups.Names(root) {
		if cgroupNames[name] {
			continue
		}
		if g, ok := cgroups.Find(root, name); ok && settled(g.Paths(), time.Now()) {
			if pids, err := g.Pids(); err == nil && len(pids) == 0 {
				if err := g.Destroy(); err != nil {
					d.logger.Debug("removing an empty cgroup no task records", "cgroup", name, "error", err)
				}
			}
		}
	}
}

// orphanCgroupGrace is how old an unrecorded empty cgroup must be before
// the start-up sweep removes it. Another Nomad client on the same host
// (same cgroup_root) creates its task's group a moment before the task
// joins it; a sweep that took such a young, still empty group would fail
// that task's start ("join cgroup …: no such file or directory").
const orphanCgroupGrace = 2 * time.Minute

// settled reports whether every directory of a group is older than
// orphanCgroupGrace at now.
func settled(paths []string, now time.Time) bool {
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil || now.Sub(fi.ModTime()) < orphanCgroupGrace {
			return false
		}
	}
	return len(paths) > 0
}

func empty(dir string) bool {
	entries, err := os.ReadDir(dir)
	return err == nil && len(entries) == 0
}
