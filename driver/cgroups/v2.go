package cgroups

import (
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// defaultWeight is the kernel's cpu.weight for a new v2 group.
const defaultWeight = 100

// sharesToWeight converts v1 cpu.shares (what Nomad allocates) to v2
// cpu.weight with runc's formula, so that a task gets the same weight under
// this driver as under Nomad's own exec driver: the shares range [2, 262144]
// maps linearly onto the weight range [1, 10000]. 0 stays 0 ("unset").
func sharesToWeight(shares int64) int64 {
	if shares <= 0 {
		return 0
	}
	s := min(max(shares, minShares), maxShares)
	return 1 + ((s-minShares)*9999)/(maxShares-minShares)
}

func createV2(l layout, root, name string, limits Limits) (*Group, error) {
	if limits.PidsMax > 0 && !slices.Contains(l.available, "pids") {
		return nil, fmt.Errorf("cgroups: a pids limit needs the pids controller, which %s/cgroup.controllers lacks", fsRoot)
	}
	if limits.CpusetCpus != "" && !slices.Contains(l.available, "cpuset") {
		return nil, fmt.Errorf("cgroups: cpuset %q needs the cpuset controller, which %s/cgroup.controllers lacks", limits.CpusetCpus, fsRoot)
	}
	dir := createdDirs(l, root, name)[0]
	slice := filepath.Dir(dir)

	// Controllers reach a group only when every ancestor delegates them in
	// cgroup.subtree_control. Neither the root nor the slice holds processes
	// (the root is exempt from the no-internal-process rule anyway), so that
	// rule never blocks enabling them.
	//
	// pids and cpuset are only required when limits use them; otherwise a
	// kernel refusing them should not stop tasks from running.
	required := []string{"cpu", "memory"}
	if limits.PidsMax > 0 {
		required = append(required, "pids")
	}
	if limits.CpusetCpus != "" {
		required = append(required, "cpuset")
	}
	if err := enableControllers(fsRoot, l.available, required); err != nil {
		return nil, err
	}
	if err := mkdir(slice); err != nil {
		return nil, err
	}
	if err := enableControllers(slice, l.available, required); err != nil {
		return nil, err
	}
	if err := mkdir(dir); err != nil {
		return nil, err
	}
	g := &Group{version: V2, dirs: map[string]string{}, paths: []string{dir}}
	for _, c := range v2Controllers {
		g.dirs[c] = dir
	}
	if err := g.setV2(limits); err != nil {
		return nil, err
	}
	return g, nil
}

// enableControllers writes "+c" into dir's cgroup.subtree_control for each
// wanted controller not yet enabled, one at a time so that an error names
// the controller the kernel refused. Only a refused required controller is
// an error.
func enableControllers(dir string, want, required []string) error {
	file := filepath.Join(dir, "cgroup.subtree_control")
	cur, err := readFile(file)
	if err != nil {
		return err
	}
	enabled := strings.Fields(cur)
	for i := range enabled {
		enabled[i] = strings.TrimPrefix(enabled[i], "+")
	}
	for _, c := range want {
		if slices.Contains(enabled, c) {
			continue
		}
		if err := writeFile(file, "+"+c); err != nil && slices.Contains(required, c) {
			return fmt.Errorf("%w (enabling the %s controller)", err, c)
		}
	}
	return nil
}

func (g *Group) setV2(limits Limits) error {
	dir := g.paths[0]
	ctrls, err := readFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return err
	}
	has := strings.Fields(ctrls)

	weight := int64(defaultWeight)
	if limits.CPUShares > 0 {
		weight = sharesToWeight(limits.CPUShares)
	}
	mem, low := "max", "0"
	if limits.MemoryLimitBytes > 0 {
		mem = strconv.FormatInt(limits.MemoryLimitBytes, 10)
	}
	if limits.MemorySoftBytes > 0 {
		low = strconv.FormatInt(limits.MemorySoftBytes, 10)
	}
	type setting struct{ ctrl, file, value string }
	settings := []setting{
		{"cpu", "cpu.weight", strconv.FormatInt(weight, 10)},
		{"memory", "memory.max", mem},
		{"memory", "memory.low", low},
	}
	if slices.Contains(has, "pids") || limits.PidsMax > 0 {
		pids := "max"
		if limits.PidsMax > 0 {
			pids = strconv.FormatInt(limits.PidsMax, 10)
		}
		settings = append(settings, setting{"pids", "pids.max", pids})
	}
	if slices.Contains(has, "cpuset") || limits.CpusetCpus != "" {
		// Unlike v1, an empty v2 cpuset.cpus means "the parent's CPUs", so
		// resetting a reused group needs no copying. The newline keeps the
		// write from being zero bytes long.
		settings = append(settings, setting{"cpuset", "cpuset.cpus", limits.CpusetCpus + "\n"})
	}
	for _, s := range settings {
		if !slices.Contains(has, s.ctrl) {
			return fmt.Errorf("cgroups: %s lacks the %s controller needed for %s (cgroup.controllers: %q)", dir, s.ctrl, s.file, ctrls)
		}
		if err := writeFile(filepath.Join(dir, s.file), s.value); err != nil {
			return err
		}
	}
	// A memory limit means the task is OOM-killed at it, not swapped past
	// it. Best effort: memory.swap.max is absent without swap accounting.
	swap := "max"
	if limits.MemoryLimitBytes > 0 {
		swap = "0"
	}
	_ = writeFile(filepath.Join(dir, "memory.swap.max"), swap)
	return nil
}
