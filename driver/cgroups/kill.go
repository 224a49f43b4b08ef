package cgroups

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const (
	// freezeTimeout bounds waiting for FREEZING to become FROZEN: a process
	// in uninterruptible sleep (a GPU driver call, NFS) can hold it off
	// indefinitely, and killing without freezing is better than not killing.
	freezeTimeout = 2 * time.Second
	// destroyTimeout bounds Destroy, which has no context of its own.
	destroyTimeout = 10 * time.Second
	// rmdirTimeout bounds the EBUSY retries of rmdir: a process SIGKILLed a
	// moment ago can stay charged to the group briefly while it exits.
	rmdirTimeout = 2 * time.Second
)

// Pids returns every process in the group, including sub-groups a task may
// have created, sorted. Under v1 it is the union over all hierarchies, so a
// process that joined only some of them is still found. Directories that no
// longer exist contribute nothing.
func (g *Group) Pids() ([]int, error) {
	var pids []int
	for _, root := range g.paths {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return nil
				}
				return err
			}
			if !d.IsDir() {
				return nil
			}
			text, err := readFile(filepath.Join(path, "cgroup.procs"))
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			if err != nil {
				return err
			}
			for _, f := range strings.Fields(text) {
				pid, err := strconv.Atoi(f)
				if err != nil {
					return fmt.Errorf("cgroups: parse %s: %q is not a pid", filepath.Join(path, "cgroup.procs"), f)
				}
				pids = append(pids, pid)
			}
			return nil
		})
		if err != nil {
			var pe *fs.PathError
			if errors.As(err, &pe) {
				return nil, fsErr("walk", root, err)
			}
			return nil, err
		}
	}
	slices.Sort(pids)
	return slices.Compact(pids), nil
}

// freezer returns the file that freezes the group and whether it exists.
func (g *Group) freezer() (string, bool) {
	var file string
	if g.version == V2 {
		file = filepath.Join(g.paths[0], "cgroup.freeze")
	} else if d := g.dir("freezer"); d != "" {
		file = filepath.Join(d, "freezer.state")
	} else {
		return "", false
	}
	_, err := os.Stat(file)
	return file, err == nil
}

// Freeze stops every process of the group, waiting until the kernel reports
// the group frozen. If that does not happen within a couple of seconds the
// group is thawed again and an error returned.
func (g *Group) Freeze() error { return g.freeze(context.Background()) }

func (g *Group) freeze(ctx context.Context) error {
	file, ok := g.freezer()
	if !ok {
		return ErrFreezerUnavailable
	}
	ctx, cancel := context.WithTimeout(ctx, freezeTimeout)
	defer cancel()
	frozenValue, state := "FROZEN", file
	if g.version == V2 {
		frozenValue, state = "1", filepath.Join(g.paths[0], "cgroup.events")
	}
	delay := time.Millisecond
	for {
		// Rewriting the v1 state each round is how runc works around
		// freezes that stall in FREEZING; for v2 it is harmless.
		if err := writeFile(file, frozenValue); err != nil {
			return err
		}
		text, err := readFile(state)
		if err != nil {
			return err
		}
		if g.version == V2 {
			if parseKV(text)["frozen"] == 1 {
				return nil
			}
		} else if text == "FROZEN" {
			return nil
		}
		select {
		case <-ctx.Done():
			err := fmt.Errorf("cgroups: freeze %s: not frozen (%q): %w", file, text, ctx.Err())
			if terr := g.Thaw(); terr != nil {
				err = errors.Join(err, terr)
			}
			return err
		case <-time.After(delay):
		}
		delay = min(2*delay, 50*time.Millisecond)
	}
}

// Thaw resumes a frozen group.
func (g *Group) Thaw() error {
	file, ok := g.freezer()
	if !ok {
		return ErrFreezerUnavailable
	}
	if g.version == V2 {
		return writeFile(file, "0")
	}
	return writeFile(file, "THAWED")
}

// KillAll SIGKILLs every process of the group until it is empty or ctx ends.
// v2 kernels with cgroup.kill (5.14+) kill the whole tree atomically;
// otherwise the group is frozen while its pids are listed and signalled, so
// that a process cannot fork a child that escapes the list.
func (g *Group) KillAll(ctx context.Context) error {
	if g.version == V2 {
		kill := filepath.Join(g.paths[0], "cgroup.kill")
		if _, err := os.Stat(kill); err == nil {
			return g.killV2(ctx, kill)
		}
	}
	self := os.Getpid()
	for {
		pids, err := g.Pids()
		if err != nil {
			return err
		}
		if len(pids) == 0 {
			return nil
		}
		if slices.Contains(pids, self) {
			return fmt.Errorf("cgroups: kill all in %s: refusing, this process (%d) is a member", g.paths[0], self)
		}
		frozen := g.freeze(ctx) == nil
		if frozen {
			if pids, err = g.Pids(); err != nil {
				_ = g.Thaw()
				return err
			}
		}
		var errs []error
		for _, pid := range pids {
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
				errs = append(errs, fmt.Errorf("cgroups: kill %d: %w", pid, err))
			}
		}
		// SIGKILL to a frozen v1 task only takes effect once it is thawed.
		if frozen {
			if err := g.Thaw(); err != nil {
				errs = append(errs, err)
			}
		}
		if err := errors.Join(errs...); err != nil {
			return err
		}
		if err := g.waitEmpty(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
}

func (g *Group) killV2(ctx context.Context, kill string) error {
	for {
		if err := writeFile(kill, "1"); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // already destroyed
			}
			return err
		}
		if err := g.waitEmpty(ctx, time.Second); err != nil {
			return err
		}
		pids, err := g.Pids()
		if err != nil || len(pids) == 0 {
			return err
		}
	}
}

// waitEmpty polls until the group has no processes, for at most d. It
// returns nil when the group is empty or d passed, and an error only when
// ctx ended first.
func (g *Group) waitEmpty(ctx context.Context, d time.Duration) error {
	deadline := time.Now().Add(d)
	delay := time.Millisecond
	for {
		pids, err := g.Pids()
		if err != nil {
			return err
		}
		if len(pids) == 0 || time.Now().After(deadline) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cgroups: kill all in %s: %d processes left (%v): %w", g.paths[0], len(pids), pids, ctx.Err())
		case <-time.After(delay):
		}
		delay = min(2*delay, 20*time.Millisecond)
	}
}

// Destroy kills every process of the group and removes all its directories,
// sub-groups included. Destroying a group that is already gone succeeds.
// The shared root directory (<root>, <root>.slice) is left for other tasks.
func (g *Group) Destroy() error {
	ctx, cancel := context.WithTimeout(context.Background(), destroyTimeout)
	defer cancel()
	if err := g.KillAll(ctx); err != nil {
		return err
	}
	var errs []error
	for _, p := range g.paths {
		if err := removeTree(p); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// removeTree rmdirs dir and every directory below it, deepest first: a
// cgroup directory cannot be removed while it has children, and its control
// files cannot be removed at all.
func removeTree(dir string) error {
	var dirs []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.IsDir() {
			dirs = append(dirs, path)
		}
		return nil
	})
	if err != nil {
		return fsErr("walk", dir, err)
	}
	deadline := time.Now().Add(rmdirTimeout)
	for i := len(dirs) - 1; i >= 0; i-- {
		for delay := time.Millisecond; ; delay = min(2*delay, 50*time.Millisecond) {
			err := rmdirFn(dirs[i])
			if err == nil || errors.Is(err, fs.ErrNotExist) {
				break
			}
			if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
				return fsErr("rmdir", dirs[i], err)
			}
			time.Sleep(delay)
		}
	}
	return nil
}
