// Package cgroups puts a task's processes into cgroups, applies the CPU and
// memory limits Nomad allocated to the task, and reads back usage and OOM
// kills. It drives the cgroup filesystem directly (v2 where the unified
// hierarchy is mounted at /sys/fs/cgroup, the legacy v1 hierarchies
// otherwise) instead of pulling in runc's libcontainer: a task driver needs a
// handful of files, and libcontainer's dependency tree and systemd coupling
// cost more than they save here.
//
// Layout:
//
//	v1: <mount of each controller>/<root>/<name>  for cpu, cpuacct, memory, pids, freezer, cpuset
//	v2: /sys/fs/cgroup/<root>.slice/<name>.scope
//
// A Group holds no open files and no mutable state, so its methods may be
// called from several goroutines at once.
package cgroups

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// fsRoot is where the cgroup filesystem is mounted. A variable so that tests
// can point the package at a fake tree.
var fsRoot = "/sys/fs/cgroup"

// mkdirFn and rmdirFn are the only directory operations the package makes on
// the cgroup tree; tests replace them to emulate the kernel populating (and
// dropping) control files on a plain filesystem.
var (
	mkdirFn = func(path string) error { return os.Mkdir(path, 0o755) }
	rmdirFn = syscall.Rmdir
)

// Version is the cgroup hierarchy in use.
type Version int

const (
	// None means no usable cgroup hierarchy: not mounted, lacking the memory
	// or cpu controller, or not writable by this process.
	None Version = 0
	V1   Version = 1
	V2   Version = 2
)

func (v Version) String() string {
	switch v {
	case V1:
		return "v1"
	case V2:
		return "v2"
	default:
		return "none"
	}
}

// ErrFreezerUnavailable is returned by Freeze and Thaw when the group has no
// freezer (v1 without the freezer controller, v2 before kernel 5.2).
var ErrFreezerUnavailable = errors.New("cgroups: freezer not available")

// Controllers the package uses, in the order Describe lists them.
var (
	v1Controllers = []string{"cpu", "cpuacct", "memory", "pids", "freezer", "cpuset", "devices"}
	v2Controllers = []string{"cpu", "memory", "pids", "cpuset"}
)

// Limits are the resources applied to a task's group. A zero field means
// "no limit" (or the kernel default), so re-applying a zero Limits resets a
// reused group.
type Limits struct {
	// CPUShares are Nomad's MHz shares: v1 cpu.shares (clamped to 2..262144),
	// v2 cpu.weight via sharesToWeight. 0 leaves the kernel default.
	CPUShares int64
	// DeviceDeny lists device rules the task may not use, in the v1
	// devices.deny form "c 195:3 rwm" (type major:minor access). Only v1
	// enforces them (see FencesDevices); v2 needs an eBPF program.
	DeviceDeny []string
	// MemoryLimitBytes is the hard limit: v1 memory.limit_in_bytes, v2 memory.max.
	MemoryLimitBytes int64
	// MemorySoftBytes is the reservation: v1 memory.soft_limit_in_bytes, v2 memory.low.
	MemorySoftBytes int64
	// CpusetCpus pins the task ("0-3,8"); "" inherits the parent's CPUs.
	CpusetCpus string
	// PidsMax caps the number of tasks (threads included) in the group.
	PidsMax int64
}

// Group is one task's cgroup: a directory per v1 hierarchy, or one v2 directory.
type Group struct {
	version Version
	// dirs maps a controller to its directory. Co-mounted v1 controllers and
	// every v2 controller share a directory.
	dirs map[string]string
	// paths are the distinct directories, in a stable order.
	paths []string
}

// layout is what probe found under fsRoot.
type layout struct {
	version Version
	// mounts maps a v1 controller to its (symlink-resolved) mount directory.
	mounts map[string]string
	// available lists the usable controllers, in package order.
	available []string
	// problem says why version is None, or is "" when it is not.
	problem string
}

// probe inspects fsRoot without regard to permissions.
func probe() layout {
	if b, err := os.ReadFile(filepath.Join(fsRoot, "cgroup.controllers")); err == nil {
		have := strings.Fields(string(b))
		l := layout{version: V2}
		for _, c := range v2Controllers {
			if slices.Contains(have, c) {
				l.available = append(l.available, c)
			}
		}
		for _, c := range []string{"memory", "cpu"} {
			if !slices.Contains(have, c) {
				l.version = None
				l.problem = fmt.Sprintf("cgroups v2 at %s lacks the %s controller (cgroup.controllers: %q)", fsRoot, c, strings.TrimSpace(string(b)))
				break
			}
		}
		return l
	}

	mounts := map[string]string{}
	if entries, err := os.ReadDir(fsRoot); err == nil {
		for _, e := range entries {
			dir := filepath.Join(fsRoot, e.Name())
			// A v1 hierarchy is named after its controllers ("cpu,cpuacct"),
			// possibly with per-controller symlinks to it ("cpu" -> "cpu,cpuacct").
			if _, err := os.Stat(filepath.Join(dir, "cgroup.procs")); err != nil {
				continue
			}
			real, err := filepath.EvalSymlinks(dir)
			if err != nil {
				continue
			}
			for _, c := range strings.Split(e.Name(), ",") {
				if slices.Contains(v1Controllers, c) {
					if _, ok := mounts[c]; !ok {
						mounts[c] = real
					}
				}
			}
		}
	}
	if len(mounts) == 0 {
		return layout{problem: "no cgroup filesystem mounted at " + fsRoot}
	}
	l := layout{version: V1, mounts: mounts}
	for _, c := range v1Controllers {
		if _, ok := mounts[c]; ok {
			l.available = append(l.available, c)
		}
	}
	for _, c := range []string{"memory", "cpu"} {
		if _, ok := mounts[c]; !ok {
			l.version = None
			l.problem = fmt.Sprintf("cgroups v1 at %s lacks the %s controller", fsRoot, c)
			break
		}
	}
	return l
}

// writableDir is the directory Create makes new groups in; if this process
// may not write there, no group can be created.
func (l layout) writableDir() string {
	if l.version == V1 {
		return l.mounts["memory"]
	}
	return fsRoot
}

// Detect returns the cgroup version this process can use to limit tasks.
func Detect() Version {
	v, _ := Describe()
	return v
}

// Describe is Detect plus a one-line explanation for the driver fingerprint,
// naming the controllers found or what is missing.
func Describe() (Version, string) {
	l := probe()
	if l.version == None {
		return None, l.problem
	}
	// access(2) also reports EROFS, the usual state of /sys/fs/cgroup in an
	// unprivileged container.
	const wOK = 2 // W_OK, which package syscall does not define
	if err := syscall.Access(l.writableDir(), wOK); err != nil {
		return None, fmt.Sprintf("cgroups %s at %s is not writable: %v", l.version, fsRoot, err)
	}
	all := v1Controllers
	if l.version == V2 {
		all = v2Controllers
	}
	var missing []string
	for _, c := range all {
		if !slices.Contains(l.available, c) {
			missing = append(missing, c)
		}
	}
	desc := fmt.Sprintf("cgroups %s: %s", l.version, strings.Join(l.available, ", "))
	if len(missing) > 0 {
		desc += " (missing: " + strings.Join(missing, ", ") + ")"
	}
	return l.version, desc
}

// ValidName says why s cannot be one cgroup directory name, nil when it can:
// groups are created one level below the hierarchy's root, so a name is a
// single path element.
func ValidName(s string) error {
	switch {
	case s == "":
		return errors.New("empty")
	case s == "." || s == "..":
		return errors.New(`"." and ".." are not group names`)
	case strings.ContainsRune(s, '/'):
		return errors.New(`one name without "/" is allowed`)
	case strings.ContainsAny(s, "\x00\n"):
		return errors.New("contains a NUL or newline")
	}
	return nil
}

// Create makes (or reuses) the group for one task and applies limits. root is
// shared by all tasks of this driver ("nomad-gpu"), name identifies the task
// ("<allocID>.<task>"); neither may contain a slash. On error the task's
// directories are removed again unless processes are already in them.
func Create(root, name string, limits Limits) (*Group, error) {
	for _, s := range []string{root, name} {
		if err := ValidName(s); err != nil {
			return nil, fmt.Errorf("cgroups: invalid group name %q: %w", s, err)
		}
	}
	l := probe()
	var (
		g   *Group
		err error
	)
	switch l.version {
	case V1:
		g, err = createV1(l, root, name, limits)
	case V2:
		g, err = createV2(l, root, name, limits)
	default:
		return nil, errors.New("cgroups: " + l.problem)
	}
	if err != nil {
		// Do not leave a half-configured group behind. rmdir refuses a
		// group that has members, so a reused group in use survives.
		for _, d := range createdDirs(l, root, name) {
			_ = rmdirFn(d)
		}
		return nil, err
	}
	// A group reused after a crash in the middle of KillAll may still be
	// frozen, and would freeze the next task the moment it joins.
	if err := g.Thaw(); err != nil && !errors.Is(err, ErrFreezerUnavailable) {
		return nil, err
	}
	return g, nil
}

// createdDirs lists the leaf directories Create makes for root/name.
func createdDirs(l layout, root, name string) []string {
	if l.version == V2 {
		// systemd's naming, so that systemd-cgls and friends show the tree
		// sensibly next to Nomad's own nomad.slice.
		if !strings.HasSuffix(root, ".slice") {
			root += ".slice"
		}
		if !strings.HasSuffix(name, ".scope") {
			name += ".scope"
		}
		return []string{filepath.Join(fsRoot, root, name)}
	}
	var dirs []string
	for _, c := range v1Controllers {
		if m, ok := l.mounts[c]; ok && !slices.Contains(dirs, filepath.Join(m, root, name)) {
			dirs = append(dirs, filepath.Join(m, root, name))
		}
	}
	return dirs
}

// Open returns the group whose directories are paths (from Paths), typically
// after a plugin restart. Every directory must still exist; a missing one
// yields an error matching fs.ErrNotExist.
func Open(paths []string) (*Group, error) {
	if len(paths) == 0 {
		return nil, errors.New("cgroups: open: no paths")
	}
	for _, p := range paths {
		if _, err := os.Stat(p); err != nil {
			return nil, fsErr("open", p, err)
		}
	}
	l := probe()
	switch l.version {
	case V2:
		if len(paths) != 1 {
			return nil, fmt.Errorf("cgroups: open: a v2 group has one directory, got %d", len(paths))
		}
		g := &Group{version: V2, dirs: map[string]string{}}
		for _, c := range v2Controllers {
			g.dirs[c] = filepath.Clean(paths[0])
		}
		g.paths = []string{filepath.Clean(paths[0])}
		return g, nil
	case V1:
		g := &Group{version: V1, dirs: map[string]string{}}
		for _, p := range paths {
			real, err := filepath.EvalSymlinks(p)
			if err != nil {
				return nil, fsErr("open", p, err)
			}
			found := false
			for _, c := range v1Controllers {
				m, ok := l.mounts[c]
				if ok && strings.HasPrefix(real, m+string(filepath.Separator)) {
					g.dirs[c] = real
					found = true
				}
			}
			if !found {
				return nil, fmt.Errorf("cgroups: open %s: not inside any cgroup v1 hierarchy under %s", p, fsRoot)
			}
			if !slices.Contains(g.paths, real) {
				g.paths = append(g.paths, real)
			}
		}
		return g, nil
	default:
		return nil, errors.New("cgroups: open: " + l.problem)
	}
}

// Set re-applies limits to an existing group, e.g. one opened from the cgroup
// path the Nomad client created for the task.
func (g *Group) Set(limits Limits) error {
	if g.version == V2 {
		return g.setV2(limits)
	}
	return g.setV1(limits)
}

// Version reports which hierarchy the group lives in.
func (g *Group) Version() Version { return g.version }

// Paths returns every directory of the group, to persist for Open.
func (g *Group) Paths() []string { return slices.Clone(g.paths) }

// ProcsFiles returns the cgroup.procs files a process writes its pid into to
// join the group; see JoinSelf.
func (g *Group) ProcsFiles() []string {
	files := make([]string, len(g.paths))
	for i, p := range g.paths {
		files[i] = filepath.Join(p, "cgroup.procs")
	}
	return files
}

// JoinSelf moves the calling process (all its threads) into the group whose
// ProcsFiles are given. The task's shim calls it before exec so that the task
// is limited from its first instruction and every child inherits the group.
func JoinSelf(procsFiles []string) error {
	pid := strconv.Itoa(os.Getpid())
	for _, f := range procsFiles {
		if err := writeFile(f, pid); err != nil {
			return err
		}
	}
	return nil
}

// dir returns the directory of controller c, or "" if the group lacks it.
func (g *Group) dir(c string) string { return g.dirs[c] }

// writeFile writes one value into an existing control file. It never creates
// the file: on cgroupfs a missing file means a controller is not enabled,
// and that should surface as "no such file" rather than as a permission error.
func writeFile(path, value string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return fsErr("write", path, err)
	}
	_, err = f.WriteString(value)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fsErr("write", path, err)
	}
	return nil
}

func readFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fsErr("read", path, err)
	}
	return strings.TrimSpace(string(b)), nil
}

// fsErr builds "cgroups: <op> <path>: <reason>", dropping the *PathError
// layer so the path is not repeated; the reason stays wrapped for errors.Is.
func fsErr(op, path string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return fmt.Errorf("cgroups: %s %s: %w", op, path, err)
}

// mkdir creates dir if it does not exist yet.
func mkdir(dir string) error {
	if err := mkdirFn(dir); err != nil && !errors.Is(err, fs.ErrExist) {
		return fsErr("mkdir", dir, err)
	}
	return nil
}

// FencesDevices says whether DeviceDeny rules are enforced for this group.
func (g *Group) FencesDevices() bool { return g.version == V1 && g.dir("devices") != "" }

// CanFenceDevices says whether task groups will enforce DeviceDeny here:
// cgroups v1 with the devices controller (v2 would need an eBPF program).
func CanFenceDevices() bool {
	l := probe()
	_, ok := l.mounts["devices"]
	return l.version == V1 && ok
}

// Find opens what exists of the group Create makes for root/name, so that a
// group can be cleaned up from its name alone (after a crash, or from a
// record that does not say where it lives now); false when nothing exists.
func Find(root, name string) (*Group, bool) {
	var paths []string
	for _, d := range createdDirs(probe(), root, name) {
		if _, err := os.Stat(d); err == nil {
			paths = append(paths, d)
		}
	}
	if len(paths) == 0 {
		return nil, false
	}
	g, err := Open(paths)
	if err != nil {
		return nil, false
	}
	return g, true
}

// Dirs lists the directories Create makes for root/name on this host.
func Dirs(root, name string) []string { return createdDirs(probe(), root, name) }

// Names lists the groups under root, by the name Create was given, in every
// hierarchy of this host.
func Names(root string) []string {
	l := probe()
	var parents []string
	switch l.version {
	case V2:
		if !strings.HasSuffix(root, ".slice") {
			root += ".slice"
		}
		parents = []string{filepath.Join(fsRoot, root)}
	case V1:
		for _, c := range v1Controllers {
			if m, ok := l.mounts[c]; ok {
				parents = append(parents, filepath.Join(m, root))
			}
		}
	}
	var names []string
	for _, p := range parents {
		entries, _ := os.ReadDir(p)
		for _, e := range entries {
			if !e.IsDir() {
				continue
			}
			n := e.Name()
			if l.version == V2 {
				var ok bool
				if n, ok = strings.CutSuffix(n, ".scope"); !ok {
					continue
				}
			}
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	slices.Sort(names)
	return names
}

// RaiseCPUWeight raises the group's CPU weight to at least the kernel's
// default for a new group (v1 cpu.shares 1024, v2 cpu.weight 100), leaving
// a higher one as it is. A task that asked for little CPU gets the weight
// of any other process while it must do something now (commit a
// checkpoint before its stop), rather than the sliver its ask gives it on
// a busy host.
func (g *Group) RaiseCPUWeight() error {
	file, floor := "cpu.shares", int64(defaultShares)
	if g.version == V2 {
		file, floor = "cpu.weight", defaultWeight
	}
	d := g.dir("cpu")
	if d == "" {
		return fmt.Errorf("cgroups: group lacks the cpu controller needed for %s", file)
	}
	path := filepath.Join(d, file)
	cur, err := readFile(path)
	if err != nil {
		return err
	}
	if n, err := strconv.ParseInt(strings.TrimSpace(cur), 10, 64); err == nil && n >= floor {
		return nil
	}
	return writeFile(path, strconv.FormatInt(floor, 10))
}
