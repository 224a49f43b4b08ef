//go:build linux

package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{
		// Own process group, so cleanup can kill the agent and the plugins
		// it launched in one go.
		Setpgid: true,
		// Kill the agent if the test binary dies without running its
		// cleanups (e.g. `go test -timeout`). Pdeathsig fires when the
		// spawning thread exits, hence spawn's dedicated locked thread.
		Pdeathsig: syscall.SIGKILL,
	}
}

// markerEnv is set in every agent's environment; executors, tasks and plugins
// inherit it. Its value is "<test pid>:<test start time>:<cluster dir>".
const markerEnv = "E2E_NOMAD_GPU_OWNER"

func newMarker(dir string) string {
	pid := os.Getpid()
	return strconv.Itoa(pid) + ":" + procStartTime(pid) + ":" + dir
}

// procStartTime returns field 22 of /proc/<pid>/stat (start time in clock
// ticks), which with the pid identifies a process across pid reuse.
func procStartTime(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return ""
	}
	return f[19]
}

type procInfo struct {
	pid    int
	marker string // value of markerEnv, "" if absent or unreadable
	cwd    string
	exe    string
	argv   []string
	task   TaskRef // NOMAD_ALLOC_ID and NOMAD_TASK_NAME of a task's process
}

func listProcs() []procInfo {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := os.Getpid()
	var out []procInfo
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self || pid == 1 {
			continue
		}
		base := "/proc/" + e.Name()
		p := procInfo{pid: pid}
		if b, err := os.ReadFile(base + "/environ"); err == nil {
			for _, kv := range strings.Split(string(b), "\x00") {
				k, v, _ := strings.Cut(kv, "=")
				switch k {
				case markerEnv:
					p.marker = v
				case "NOMAD_ALLOC_ID":
					p.task.AllocID = v
				case "NOMAD_TASK_NAME":
					p.task.Task = v
				}
			}
		}
		p.cwd, _ = os.Readlink(base + "/cwd")
		p.exe, _ = os.Readlink(base + "/exe")
		if b, err := os.ReadFile(base + "/cmdline"); err == nil && len(b) > 0 {
			p.argv = strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		}
		out = append(out, p)
	}
	return out
}

// PluginPIDs lists the live processes of the Nomad plugin binary name
// (run with no arguments, as Nomad runs a plugin) that this cluster's
// agents started: they carry its marker, which no process of another
// cluster, of a `make dev` agent or of a production node has. A plugin a
// client reattached to after a restart is found too, though its parent is
// not the agent now.
func (c *Cluster) PluginPIDs(name string) []int {
	var pids []int
	for _, p := range listProcs() {
		if p.marker == c.marker && len(p.argv) == 1 && filepath.Base(p.argv[0]) == name && !isZombie(p.pid) {
			pids = append(pids, p.pid)
		}
	}
	return pids
}

func under(path, dir string) bool {
	return path == dir || strings.HasPrefix(path, dir+"/")
}

// killLeftovers SIGKILLs every process that carries marker, or runs from or
// in dir, until none is left or d has passed. It returns the pids left.
func killLeftovers(marker, dir string, d time.Duration) []int {
	deadline := time.Now().Add(d)
	for {
		var pids []int
		for _, p := range listProcs() {
			if p.marker == marker || under(p.cwd, dir) || under(p.exe, dir) {
				if isZombie(p.pid) {
					continue
				}
				pids = append(pids, p.pid)
			}
		}
		if len(pids) == 0 || time.Now().After(deadline) {
			return pids
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func isZombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true // gone
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && len(s) > i+2 && (s[i+2] == 'Z' || s[i+2] == 'X')
}

// mountsUnder lists the mount points under dir in this mount namespace,
// deepest first.
func mountsUnder(dir string) []string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		mp := unescapeMount(f[4])
		if under(mp, dir) {
			out = append(out, mp)
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

// unescapeMount undoes mountinfo's octal escapes (\040 for space, ...).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// unmountUnder unmounts everything mounted under dir (lazily if a plain
// unmount fails), until nothing is left or d has passed. It returns what is
// left.
func unmountUnder(dir string, d time.Duration) []string {
	deadline := time.Now().Add(d)
	for {
		mps := mountsUnder(dir)
		if len(mps) == 0 || time.Now().After(deadline) {
			return mps
		}
		for _, mp := range mps {
			if err := syscall.Unmount(mp, 0); err != nil {
				_ = syscall.Unmount(mp, syscall.MNT_DETACH)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// allocCgroupDirs finds the cgroups Nomad and our driver made for the
// given allocations: <root>/nomad*/... (v2) and <root>/<ctrl>/nomad*/...
// (v1), whose names start with the allocation ID.
func allocCgroupDirs(allocIDs []string) []string {
	if len(allocIDs) == 0 {
		return nil
	}
	roots, _ := filepath.Glob("/sys/fs/cgroup/nomad*")
	more, _ := filepath.Glob("/sys/fs/cgroup/*/nomad*")
	roots = append(roots, more...)
	var dirs []string
	for _, root := range roots {
		depth0 := strings.Count(root, "/")
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil
			}
			if strings.Count(p, "/")-depth0 > 3 {
				return filepath.SkipDir
			}
			for _, id := range allocIDs {
				if strings.HasPrefix(d.Name(), id) {
					dirs = append(dirs, p)
					return filepath.SkipDir
				}
			}
			return nil
		})
	}
	return dirs
}

// removeAllocCgroups removes the (empty) cgroups of the given allocations.
// Best effort.
func removeAllocCgroups(allocIDs []string) {
	for _, d := range allocCgroupDirs(allocIDs) {
		removeCgroupTree(d)
	}
}

// thawAllocCgroups thaws the cgroups of the given allocations and their
// children. A driver killed while it freezes a task's group to kill it
// leaves the group frozen, and a frozen process takes no signal, not even
// the SIGKILL of killLeftovers. Best effort.
func thawAllocCgroups(allocIDs []string) {
	for _, d := range allocCgroupDirs(allocIDs) {
		_ = filepath.WalkDir(d, func(p string, e os.DirEntry, err error) error {
			if err != nil || !e.IsDir() {
				return nil
			}
			_ = os.WriteFile(filepath.Join(p, "freezer.state"), []byte("THAWED"), 0) // v1
			_ = os.WriteFile(filepath.Join(p, "cgroup.freeze"), []byte("0"), 0)      // v2
			return nil
		})
	}
}

func removeCgroupTree(dir string) {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.IsDir() {
			removeCgroupTree(filepath.Join(dir, e.Name()))
		}
	}
	_ = syscall.Rmdir(dir)
}

// sweepStale kills what clusters of test binaries that died without cleaning
// up (e.g. killed by `go test -timeout`) left behind, unmounts their mounts
// and removes their directories when they are ours (nge2e-*).
func sweepStale(t testing.TB) {
	stale := map[string]bool{}
	for _, p := range listProcs() {
		if p.marker == "" {
			continue
		}
		parts := strings.SplitN(p.marker, ":", 3)
		if len(parts) != 3 {
			continue
		}
		pid, err := strconv.Atoi(parts[0])
		if err != nil {
			continue
		}
		if pid == os.Getpid() || procStartTime(pid) == parts[1] {
			continue // owner alive
		}
		stale[p.marker] = true
	}
	for marker := range stale {
		dir := strings.SplitN(marker, ":", 3)[2]
		t.Logf("e2e: cleaning up after a dead test run: %s", dir)
		killLeftovers(marker, dir, 10*time.Second)
		unmountUnder(dir, 10*time.Second)
		if strings.HasPrefix(filepath.Base(dir), "nge2e-") {
			_ = os.RemoveAll(dir)
		}
	}
}

// driverCgroupRoots are the parents of the gpu driver's task cgroups:
// <cgroup_root> in the v2 tree and under each v1 controller. Every
// cgroup_root the e2e suite gives the driver starts with "nomad-gpu".
func driverCgroupRoots() []string {
	v2, _ := filepath.Glob("/sys/fs/cgroup/nomad-gpu*")
	v1, _ := filepath.Glob("/sys/fs/cgroup/*/nomad-gpu*")
	return append(v2, v1...)
}

// TaskCgroups lists the cgroups the gpu driver made for the task that are
// still there (<cgroup_root>/<alloc ID>.<task>, in every hierarchy).
func TaskCgroups(r TaskRef) []string {
	var out []string
	for _, root := range driverCgroupRoots() {
		p := filepath.Join(root, r.AllocID+"."+r.Task)
		if fi, err := os.Stat(p); err == nil && fi.IsDir() {
			out = append(out, p)
		}
	}
	return out
}

// taskLeaks says what is left of tasks that should have nothing left: their
// processes and the gpu driver's cgroups for them.
func taskLeaks(tasks []TaskRef) []string {
	if len(tasks) == 0 {
		return nil
	}
	want := make(map[TaskRef]bool, len(tasks))
	for _, r := range tasks {
		want[r] = true
	}
	pids := map[TaskRef][]int{}
	for _, p := range listProcs() {
		if want[p.task] && !isZombie(p.pid) {
			pids[p.task] = append(pids[p.task], p.pid)
		}
	}
	var out []string
	for _, r := range tasks {
		if ps := pids[r]; len(ps) > 0 {
			out = append(out, fmt.Sprintf("task %s is dead in Nomad but its processes %v still run", r, ps))
		}
		if cgs := TaskCgroups(r); len(cgs) > 0 {
			out = append(out, fmt.Sprintf("task %s is dead in Nomad but the driver left its cgroup %s", r, strings.Join(cgs, ", ")))
		}
	}
	sort.Strings(out)
	return out
}
