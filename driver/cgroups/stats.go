package cgroups

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Names used in Stats.Measured; they match Nomad's MemoryStats.Measured.
const (
	MeasuredRSS         = "RSS"
	MeasuredCache       = "Cache"
	MeasuredUsage       = "Usage"
	MeasuredMaxUsage    = "Max Usage"
	MeasuredSwap        = "Swap"
	MeasuredKernelUsage = "Kernel Usage"
)

// userHZ is the unit of v1 cpuacct.stat. The kernel exports USER_HZ, which
// is 100 on every Linux architecture regardless of CONFIG_HZ.
const userHZ = 100

// Stats is one sample of a group's resource usage. Memory values are bytes,
// CPU values nanoseconds of CPU time since the group was created.
type Stats struct {
	CPUUserNanos, CPUSystemNanos, CPUTotalNanos uint64
	ThrottledPeriods, ThrottledNanos            uint64

	MemoryRSS, MemoryCache, MemoryUsage, MemoryMaxUsage, MemorySwap, KernelUsage uint64
	// Measured names the memory fields the kernel really provided, so that
	// a 0 can be told apart from "not available on this host".
	Measured []string
}

// Stats reads the group's current usage. Files a kernel may lack (memory.peak,
// swap accounting, kmem) are skipped and left out of Measured; a group whose
// directories are gone is an error.
func (g *Group) Stats() (Stats, error) {
	var s Stats
	mem := g.dir("memory")
	if mem == "" {
		return s, errors.New("cgroups: group has no memory controller")
	}
	if _, err := os.Stat(mem); err != nil {
		return s, fsErr("stat", mem, err)
	}
	if g.version == V2 {
		return s, g.statsV2(&s)
	}
	return s, g.statsV1(&s)
}

func (g *Group) statsV1(s *Stats) error {
	if d := g.dir("cpuacct"); d != "" {
		if v, ok, err := readUintOpt(filepath.Join(d, "cpuacct.usage")); err != nil {
			return err
		} else if ok {
			s.CPUTotalNanos = v
		}
		// Not cpuacct.usage_user/_sys: they assign each whole charge to the
		// mode the task was in when charged, which skews the split, and
		// cpuacct.stat keeps the numbers comparable with Nomad's exec driver.
		kv, ok, err := readKVOpt(filepath.Join(d, "cpuacct.stat"))
		if err != nil {
			return err
		}
		if ok {
			s.CPUUserNanos = kv["user"] * (1e9 / userHZ)
			s.CPUSystemNanos = kv["system"] * (1e9 / userHZ)
		}
	}
	if d := g.dir("cpu"); d != "" {
		kv, ok, err := readKVOpt(filepath.Join(d, "cpu.stat"))
		if err != nil {
			return err
		}
		if ok {
			s.ThrottledPeriods = kv["nr_throttled"]
			s.ThrottledNanos = kv["throttled_time"]
		}
	}

	d := g.dir("memory")
	kv, ok, err := readKVOpt(filepath.Join(d, "memory.stat"))
	if err != nil {
		return err
	}
	if ok {
		// The total_ variants include sub-groups a task may have created.
		pick := func(name string) (uint64, bool) {
			if v, ok := kv["total_"+name]; ok {
				return v, true
			}
			v, ok := kv[name]
			return v, ok
		}
		if v, ok := pick("rss"); ok {
			s.MemoryRSS = v
			s.Measured = append(s.Measured, MeasuredRSS)
		}
		if v, ok := pick("cache"); ok {
			s.MemoryCache = v
			s.Measured = append(s.Measured, MeasuredCache)
		}
		// "swap" appears only with swap accounting (memsw) enabled.
		if v, ok := pick("swap"); ok {
			s.MemorySwap = v
			s.Measured = append(s.Measured, MeasuredSwap)
		}
	}
	for _, f := range []struct {
		file, name string
		dst        *uint64
	}{
		{"memory.usage_in_bytes", MeasuredUsage, &s.MemoryUsage},
		{"memory.max_usage_in_bytes", MeasuredMaxUsage, &s.MemoryMaxUsage},
		{"memory.kmem.usage_in_bytes", MeasuredKernelUsage, &s.KernelUsage},
	} {
		v, ok, err := readUintOpt(filepath.Join(d, f.file))
		if err != nil {
			return err
		}
		if ok {
			*f.dst = v
			s.Measured = append(s.Measured, f.name)
		}
	}
	return nil
}

func (g *Group) statsV2(s *Stats) error {
	d := g.paths[0]
	// cpu.stat's usage fields exist even when the cpu controller is not
	// enabled; the throttling fields only when it is.
	kv, ok, err := readKVOpt(filepath.Join(d, "cpu.stat"))
	if err != nil {
		return err
	}
	if ok {
		s.CPUTotalNanos = kv["usage_usec"] * 1000
		s.CPUUserNanos = kv["user_usec"] * 1000
		s.CPUSystemNanos = kv["system_usec"] * 1000
		s.ThrottledPeriods = kv["nr_throttled"]
		s.ThrottledNanos = kv["throttled_usec"] * 1000
	}

	kv, ok, err = readKVOpt(filepath.Join(d, "memory.stat"))
	if err != nil {
		return err
	}
	if ok {
		if v, ok := kv["anon"]; ok {
			s.MemoryRSS = v
			s.Measured = append(s.Measured, MeasuredRSS)
		}
		if v, ok := kv["file"]; ok {
			s.MemoryCache = v
			s.Measured = append(s.Measured, MeasuredCache)
		}
		// "kernel" (5.18+) is the sum of every kernel-side charge; older
		// kernels only list the parts, which do not add up reliably.
		if v, ok := kv["kernel"]; ok {
			s.KernelUsage = v
			s.Measured = append(s.Measured, MeasuredKernelUsage)
		}
	}
	for _, f := range []struct {
		file, name string
		dst        *uint64
	}{
		{"memory.current", MeasuredUsage, &s.MemoryUsage},
		{"memory.peak", MeasuredMaxUsage, &s.MemoryMaxUsage}, // 5.19+
		{"memory.swap.current", MeasuredSwap, &s.MemorySwap},
	} {
		v, ok, err := readUintOpt(filepath.Join(d, f.file))
		if err != nil {
			return err
		}
		if ok {
			*f.dst = v
			s.Measured = append(s.Measured, f.name)
		}
	}
	return nil
}

// OOMKilled reports whether the kernel's OOM killer has killed a process of
// the group (or of a sub-group a task made) since the group was created.
//
// v2 and v1 on kernel 4.13+ read the kernel's own oom_kill counter, which
// counts kills of the group's processes whether the group's limit or the
// whole host ran out of memory. Older v1 kernels have no counter; there the
// answer is a heuristic: the group is under OOM right now, or allocations
// have failed and usage has touched the limit. The caller should only trust
// it together with the task having died of SIGKILL.
func (g *Group) OOMKilled() (bool, error) {
	mem := g.dir("memory")
	if mem == "" {
		return false, errors.New("cgroups: group has no memory controller")
	}
	file := "memory.events"
	if g.version == V1 {
		file = "memory.oom_control"
	}
	// v1 does not propagate oom_kill to ancestors, and v2 does not either
	// when mounted with memory_localevents, so every sub-group is read.
	var dirs []string
	err := filepath.WalkDir(mem, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			dirs = append(dirs, path)
		}
		return nil
	})
	if err != nil {
		return false, fsErr("walk", mem, err)
	}
	var top map[string]uint64
	counted := false
	for i, d := range dirs {
		kv, ok, err := readKVOpt(filepath.Join(d, file))
		if err != nil {
			return false, err
		}
		if !ok {
			if i == 0 {
				return false, fsErr("read", filepath.Join(d, file), syscall.ENOENT)
			}
			continue
		}
		if i == 0 {
			top = kv
		}
		if v, has := kv["oom_kill"]; has {
			counted = true
			if v > 0 {
				return true, nil
			}
		}
	}
	if counted || g.version == V2 {
		return false, nil
	}
	return oomHeuristicV1(mem, top)
}

func oomHeuristicV1(dir string, oomControl map[string]uint64) (bool, error) {
	if oomControl["under_oom"] > 0 {
		return true, nil
	}
	vals := map[string]uint64{}
	for _, f := range []string{"memory.failcnt", "memory.max_usage_in_bytes", "memory.limit_in_bytes"} {
		v, ok, err := readUintOpt(filepath.Join(dir, f))
		if err != nil || !ok {
			return false, err
		}
		vals[f] = v
	}
	// Page-cache reclaim also bumps failcnt, so a non-zero failcnt alone is
	// normal; usage having reached the limit is what makes a kill likely.
	return vals["memory.failcnt"] > 0 && vals["memory.max_usage_in_bytes"] >= vals["memory.limit_in_bytes"], nil
}

// parseKV parses the "key value" lines of memory.stat, cpu.stat,
// cpuacct.stat, memory.events and memory.oom_control. Lines that do not
// hold a single unsigned number are skipped: newer kernels add fields, and
// one odd field should not cost every other statistic.
func parseKV(text string) map[string]uint64 {
	kv := map[string]uint64{}
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 {
			continue
		}
		v, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			continue
		}
		kv[f[0]] = v
	}
	return kv
}

// parseUint parses a single-value file. "max" (v2's "unlimited") is
// reported as the largest value.
func parseUint(path, text string) (uint64, error) {
	if text == "max" {
		return ^uint64(0), nil
	}
	v, err := strconv.ParseUint(text, 10, 64)
	if err != nil {
		// v1 reports -1 for some unlimited values.
		if i, ierr := strconv.ParseInt(text, 10, 64); ierr == nil && i < 0 {
			return ^uint64(0), nil
		}
		return 0, fmt.Errorf("cgroups: parse %s: %q is not a number", path, text)
	}
	return v, nil
}

// readKVOpt reads a key-value file; ok is false when it does not exist.
func readKVOpt(path string) (map[string]uint64, bool, error) {
	text, err := readFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return parseKV(text), true, nil
}

// readUintOpt reads a single-value file; ok is false when it does not exist.
func readUintOpt(path string) (uint64, bool, error) {
	text, err := readFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	v, err := parseUint(path, text)
	return v, err == nil, err
}
