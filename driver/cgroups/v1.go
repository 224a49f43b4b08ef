package cgroups

import (
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
)

// Kernel bounds of v1 cpu.shares (MIN_SHARES, MAX_SHARES).
const (
	minShares     = 2
	maxShares     = 262144
	defaultShares = 1024
)

func createV1(l layout, root, name string, limits Limits) (*Group, error) {
	if limits.PidsMax > 0 && l.mounts["pids"] == "" {
		return nil, fmt.Errorf("cgroups: a pids limit needs the pids controller, which is not mounted under %s", fsRoot)
	}
	if limits.CpusetCpus != "" && l.mounts["cpuset"] == "" {
		return nil, fmt.Errorf("cgroups: cpuset %q needs the cpuset controller, which is not mounted under %s", limits.CpusetCpus, fsRoot)
	}
	g := &Group{version: V1, dirs: map[string]string{}}
	for _, c := range v1Controllers {
		m, ok := l.mounts[c]
		if !ok {
			continue
		}
		dir := filepath.Join(m, root, name)
		g.dirs[c] = dir
		if slices.Contains(g.paths, dir) {
			continue
		}
		g.paths = append(g.paths, dir)
		isCpuset := l.mounts["cpuset"] == m
		for _, d := range []string{filepath.Join(m, root), dir} {
			if err := mkdir(d); err != nil {
				return nil, err
			}
			// A new v1 cpuset starts with no CPUs and no memory nodes, and
			// refuses both members and children until it has some; the
			// intermediate directory inherits its parent's so that tasks can
			// be given any subset.
			if isCpuset && d != dir {
				if err := inheritCpuset(d, false); err != nil {
					return nil, err
				}
			}
		}
	}
	if err := g.setV1(limits); err != nil {
		return nil, err
	}
	return g, nil
}

// inheritCpuset copies cpuset.mems, and cpuset.cpus, from the parent
// directory when they are empty in dir (or always, with force, so that a
// reused group given no cpuset goes back to inheriting everything).
func inheritCpuset(dir string, force bool) error {
	parent := filepath.Dir(dir)
	for _, f := range []string{"cpuset.mems", "cpuset.cpus"} {
		cur, err := readFile(filepath.Join(dir, f))
		if err != nil {
			return err
		}
		if cur != "" && !force {
			continue
		}
		v, err := readFile(filepath.Join(parent, f))
		if err != nil {
			return err
		}
		if v == cur {
			continue
		}
		if err := writeFile(filepath.Join(dir, f), v); err != nil {
			return err
		}
	}
	return nil
}

func (g *Group) setV1(limits Limits) error {
	type setting struct{ ctrl, file, value string }
	var settings []setting

	shares := int64(defaultShares)
	if limits.CPUShares > 0 {
		shares = min(max(limits.CPUShares, minShares), maxShares)
	}
	settings = append(settings, setting{"cpu", "cpu.shares", strconv.FormatInt(shares, 10)})

	// -1 is "unlimited" for both memory files; writing it explicitly is what
	// makes re-applying a zero Limits undo an earlier limit.
	mem, soft := "-1", "-1"
	if limits.MemoryLimitBytes > 0 {
		mem = strconv.FormatInt(limits.MemoryLimitBytes, 10)
	}
	if limits.MemorySoftBytes > 0 {
		soft = strconv.FormatInt(limits.MemorySoftBytes, 10)
	}
	settings = append(settings,
		setting{"memory", "memory.limit_in_bytes", mem},
		setting{"memory", "memory.soft_limit_in_bytes", soft})

	if g.dir("pids") != "" {
		pids := "max"
		if limits.PidsMax > 0 {
			pids = strconv.FormatInt(limits.PidsMax, 10)
		}
		settings = append(settings, setting{"pids", "pids.max", pids})
	} else if limits.PidsMax > 0 {
		return fmt.Errorf("cgroups: a pids limit needs the pids controller, which this group lacks")
	}

	if d := g.dir("cpuset"); d != "" {
		if err := inheritCpuset(d, limits.CpusetCpus == ""); err != nil {
			return err
		}
		if limits.CpusetCpus != "" {
			settings = append(settings, setting{"cpuset", "cpuset.cpus", limits.CpusetCpus})
		}
	} else if limits.CpusetCpus != "" {
		return fmt.Errorf("cgroups: cpuset %q needs the cpuset controller, which this group lacks", limits.CpusetCpus)
	}

	for _, s := range settings {
		d := g.dir(s.ctrl)
		if d == "" {
			return fmt.Errorf("cgroups: group lacks the %s controller needed for %s", s.ctrl, s.file)
		}
		if err := writeFile(filepath.Join(d, s.file), s.value); err != nil {
			return err
		}
	}
	if d := g.dir("devices"); d != "" {
		// Start from "everything allowed" (the parent's default, which a
		// reused group may have narrowed), then take away exactly the
		// listed devices: a default-deny list would also cut off devices
		// (InfiniBand, FUSE…) that plain processes legitimately use.
		if err := writeFile(filepath.Join(d, "devices.allow"), "a *:* rwm"); err != nil {
			return err
		}
		for _, rule := range limits.DeviceDeny {
			if err := writeFile(filepath.Join(d, "devices.deny"), rule); err != nil {
				return fmt.Errorf("cgroups: device rule %q: %w", rule, err)
			}
		}
	}
	// A memory limit means the task is OOM-killed at it, not swapped past
	// it. Best effort: the file is absent on kernels without swap control.
	swappiness := "60"
	if limits.MemoryLimitBytes > 0 {
		swappiness = "0"
	}
	_ = writeFile(filepath.Join(g.dir("memory"), "memory.swappiness"), swappiness)
	return nil
}
