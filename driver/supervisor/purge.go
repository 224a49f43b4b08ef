package supervisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/nomad-gpu/nomad-gpu/driver/procfs"
)

// Purge stops whatever a state dir's supervisor and task still run and
// removes the dir, from the dir alone: it serves a plugin that died before
// or during Start, or whose Recover failed. A dir that holds no supervisor
// state is left alone, so a parent dir may be passed safely.
func Purge(dir string) error {
	var sup, task procRecord
	supErr := readJSON(filepath.Join(dir, supervisorFile), &sup)
	taskErr := readJSON(filepath.Join(dir, taskFile), &task)
	if _, err := os.Stat(filepath.Join(dir, specFile)); errors.Is(err, os.ErrNotExist) && supErr != nil {
		return nil
	}
	// The supervisor's children first: a shim that has not exec'd (or
	// joined its cgroup) yet would outlive a supervisor killed before it.
	if supErr == nil && sup.Alive() {
		for _, pid := range childrenOf(sup.PID) {
			syscall.Kill(-pid, syscall.SIGKILL)
			syscall.Kill(pid, syscall.SIGKILL)
		}
		// As init of a private PID namespace, its death kills the rest.
		syscall.Kill(sup.PID, syscall.SIGKILL)
	}
	if taskErr == nil && task.Alive() {
		syscall.Kill(-task.PID, syscall.SIGKILL)
		syscall.Kill(task.PID, syscall.SIGKILL)
	}
	ctx, cancel := context.WithTimeout(context.Background(), destroyTimeout)
	defer cancel()
	var errs []error
	for _, id := range []procfs.Identity{sup.Identity, task.Identity} {
		if id.PID > 0 {
			if err := waitGone(ctx, id); err != nil {
				errs = append(errs, fmt.Errorf("pid %d did not exit: %w", id.PID, err))
			}
		}
	}
	if len(errs) > 0 {
		// Keep the state: a later Purge still needs it.
		return fmt.Errorf("purge %s: %w", dir, errors.Join(errs...))
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("purge %s: %w", dir, err)
	}
	return nil
}

// childrenOf lists the live children of pid.
func childrenOf(pid int) []int {
	return procfs.Select(func(_ int, s procfs.Stat) bool { return s.PPID == pid })
}
