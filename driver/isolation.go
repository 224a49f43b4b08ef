package driver

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/driver/landlock"
	"github.com/nomad-gpu/nomad-gpu/driver/supervisor"
	"github.com/nomad-gpu/nomad-gpu/gpu"
	"github.com/nomad-gpu/nomad-gpu/wire/drivers"
)

// isolationProbe caches what the node can do to isolate tasks; it is cheap
// to find out again, so the fingerprint refreshes it.
type isolationProbe struct {
	supervisor.Probe
	at time.Time
}

const probeMaxAge = 25 * time.Second

// isolation says what this node can give tasks, probing it at most every
// probeMaxAge.
func (d *Driver) isolation() supervisor.Probe {
	d.probeMu.Lock()
	defer d.probeMu.Unlock()
	if d.probe == nil || time.Since(d.probe.at) > probeMaxAge {
		d.probe = &isolationProbe{Probe: supervisor.ProbeIsolation(d.ctx, d.supervisor()), at: time.Now()}
	}
	return d.probe.Probe
}

// taskUser is who a task runs as.
type taskUser struct {
	name     string
	uid, gid uint32
	groups   []uint32 // supplementary, the primary one included
}

// checkUser refuses users and groups the plugin config denies.
func checkUser(cfg *Config, u taskUser) error {
	uids, _ := parseIDRanges(cfg.DeniedHostUIDs)
	gids, _ := parseIDRanges(cfg.DeniedHostGIDs)
	if inRanges(uids, u.uid) {
		return badInput("user: %q (uid %d) is denied by the plugin config (denied_host_uids = %q); run the task as another user",
			u.name, u.uid, cfg.DeniedHostUIDs)
	}
	for _, g := range append([]uint32{u.gid}, u.groups...) {
		if inRanges(gids, g) {
			return badInput("user: %q is in group %s, which the plugin config denies (denied_host_gids = %q); run the task as a user outside those groups",
				u.name, groupName(g), cfg.DeniedHostGIDs)
		}
	}
	return nil
}

func groupName(gid uint32) string {
	if name, ok := supervisor.GroupName(gid); ok {
		return fmt.Sprintf("%d (%s)", gid, name)
	}
	return fmt.Sprint(gid)
}

// checkTaskDirReachable finds the first directory on the way to the task's
// directory that its user cannot enter. Nomad creates its data_dir 0700
// when it makes it itself, and then every task with a non-root user fails
// with a bare "permission denied"; this says which directory and what to do.
func checkTaskDirReachable(taskDir string, u taskUser) error {
	p, st, ok := unreachable(taskDir, u)
	if !ok {
		return nil
	}
	msg := fmt.Sprintf("user: %q cannot reach its task directory %s: %s is mode %04o, owner uid %d, and not searchable by it",
		u.name, taskDir, p, st.Mode&0o7777, st.Uid)
	if isNomadDataDir(p, taskDir) {
		msg += fmt.Sprintf(". This is the Nomad data_dir: Nomad creates it 0700 when it makes it itself. Make it traversable (chmod 0755 %s, or create it 0755 before Nomad first starts)", p)
	} else {
		msg += fmt.Sprintf("; make it traversable for the task's user (chmod o+x %s)", p)
	}
	return badInput("%s", msg)
}

// checkCheckpointRootReachable: the store makes everything from its root
// down passable, but not the directories above it.
func checkCheckpointRootReachable(root string, u taskUser) error {
	p, st, ok := unreachable(root, u)
	if !ok {
		return nil
	}
	return badInput("config.checkpoint: user %q cannot reach the plugin's checkpoint.root %s: %s is mode %04o, owner uid %d, and not searchable by it; make it traversable (chmod o+x %s)",
		u.name, root, p, st.Mode&0o7777, st.Uid, p)
}

// checkCheckpointRootPassable refuses, at agent start, a checkpoint.root
// below an existing directory that no task user may pass through (neither
// its group nor others may search it), rather than failing every
// checkpointing job later. The root itself is not checked: the store makes
// it 0711. A directory that only some users may pass (0710, say) is left to
// the check at task start, which knows the task's user.
func checkCheckpointRootPassable(root string) error {
	if root == "" {
		return nil
	}
	p, st, ok := firstClosed(filepath.Dir(filepath.Clean(root)), func(st syscall.Stat_t) bool { return st.Mode&0o011 != 0 })
	if !ok {
		return nil
	}
	return fmt.Errorf("checkpoint.root: %s: %s is mode %04o, owner uid %d; task users cannot reach it; make it traversable (chmod 0711 %s) or choose a root they can reach",
		root, p, st.Mode&0o7777, st.Uid, p)
}

// unreachable finds the first existing directory on the way to dir that
// u may not pass through. A missing one is not reported: whoever makes it
// reports that.
func unreachable(dir string, u taskUser) (string, syscall.Stat_t, bool) {
	if u.uid == 0 || dir == "" {
		return "", syscall.Stat_t{}, false
	}
	return firstClosed(dir, func(st syscall.Stat_t) bool { return searchable(st, u) })
}

// firstClosed finds the first existing directory from / down to dir, dir
// included, that passable refuses; it stops at the first missing one.
func firstClosed(dir string, passable func(syscall.Stat_t) bool) (string, syscall.Stat_t, bool) {
	var path []string
	for p := filepath.Clean(dir); ; p = filepath.Dir(p) {
		path = append([]string{p}, path...)
		if p == "/" || p == "." {
			break
		}
	}
	var st syscall.Stat_t
	for _, p := range path {
		if err := syscall.Stat(p, &st); err != nil {
			return "", st, false
		}
		if !passable(st) {
			return p, st, true
		}
	}
	return "", st, false
}

func searchable(st syscall.Stat_t, u taskUser) bool {
	mode := st.Mode
	switch {
	case st.Uid == u.uid:
		return mode&0o100 != 0
	case st.Gid == u.gid || contains(u.groups, st.Gid):
		return mode&0o010 != 0
	default:
		return mode&0o001 != 0
	}
}

func contains(s []uint32, v uint32) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// taskDirAllocRoot is <data_dir>/alloc/<alloc id> for a task directory
// <data_dir>/alloc/<alloc id>/<task>.
func taskDirAllocRoot(taskDir string) string { return filepath.Dir(filepath.Clean(taskDir)) }

// isNomadDataDir: p is the directory that holds Nomad's "alloc" dir on the
// way to taskDir.
func isNomadDataDir(p, taskDir string) bool {
	allocs := filepath.Dir(taskDirAllocRoot(taskDir))
	return filepath.Base(allocs) == "alloc" && filepath.Dir(allocs) == p
}

// nomadDataDirOf guesses the Nomad data_dir from a task directory, for the
// fingerprint's health check; "" when the layout is not Nomad's default.
func nomadDataDirOf(taskDir string) string {
	allocs := filepath.Dir(taskDirAllocRoot(taskDir))
	if filepath.Base(allocs) != "alloc" {
		return ""
	}
	return filepath.Dir(allocs)
}

// taskDirs are the task's own directories, as Nomad passes them.
type taskDirs struct {
	task  string // <alloc dir>/<task>: local/, secrets/, tmp/ and private/ are inside
	alloc string // <alloc dir>/alloc, shared by the group's tasks
}

func dirsOf(cfg *drivers.TaskConfig) taskDirs {
	var d taskDirs
	if v := cfg.Env["NOMAD_TASK_DIR"]; v != "" {
		d.task = filepath.Dir(filepath.Clean(v))
	} else if cfg.AllocDir != "" {
		d.task = filepath.Join(cfg.AllocDir, cfg.Name)
	}
	if v := cfg.Env["NOMAD_ALLOC_DIR"]; v != "" {
		d.alloc = filepath.Clean(v)
	} else if cfg.AllocDir != "" {
		d.alloc = filepath.Join(cfg.AllocDir, "alloc")
	}
	return d
}

// systemPaths are what every program needs to run: read and execute,
// never write. The host's /opt, /var, /srv and /home are left out: Nomad's
// data_dir, and with it every other allocation, often lives there.
var systemPaths = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}

// readOnlyPaths: configuration and kernel views, read only. /run/systemd/resolve
// is where /etc/resolv.conf points on systemd hosts.
var readOnlyPaths = []string{"/etc", "/proc", "/sys", "/run/systemd/resolve"}

// deviceNodes every process may open; GPU nodes are added per task.
var deviceNodes = []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty", "/dev/ptmx"}

// sharedGPUNodes are opened by every CUDA process that holds a GPU.
var sharedGPUNodes = []string{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset"}

// isolationPlan is what StartTask hands the supervisor, and what the task
// events and README promise.
type isolationPlan struct {
	spec supervisor.Isolation
	// notes are said in a task event (what is relaxed and why).
	notes []string
}

// planIsolation decides a task's namespaces, mounts and Landlock rules from
// the plugin config, the task config and what the node can do.
func (d *Driver) planIsolation(cfg *drivers.TaskConfig, tc *TaskConfig, mpsGPUs, ownDirs []string) (isolationPlan, error) {
	icfg := d.config().Isolation
	var plan isolationPlan
	mode := tc.PIDMode
	if mode == "" {
		mode = icfg.PIDMode
	}
	if mode == PIDModeHost && tc.PIDMode == PIDModeHost && icfg.PIDMode != PIDModeHost && !icfg.AllowHostPID {
		return plan, badInput("config.pid_mode: \"host\" is not allowed by the plugin config; the operator can allow it with isolation.allow_host_pid = true")
	}
	probe := d.isolation()
	dirs := dirsOf(cfg)
	if mode == PIDModePrivate {
		if !probe.PIDNamespace {
			return plan, badInput("config.pid_mode: this node cannot give the task a private PID namespace (%s); the operator can set isolation.pid_mode = \"host\"", probe.PIDNamespaceError)
		}
		plan.spec.PrivatePID = true
		// Without a share the task sees no MPS daemon at all; with one, only its own GPUs'.
		plan.spec.Masks = []supervisor.Mask{{Dir: d.config().MPS.PipeRoot, Keep: mpsGPUs}}
		plan.spec.PrivateShm = len(mpsGPUs) == 0
		// Bound over /tmp unless the task's own directories live under
		// /tmp (a dev agent's data_dir): the bind would hide them.
		if tmp := filepath.Join(dirs.task, "tmp"); dirs.task != "" && isDir(tmp) && !within(dirs.task, "/tmp") && !within(dirs.alloc, "/tmp") {
			plan.spec.TmpDir = tmp
		}
	} else {
		plan.notes = append(plan.notes, "pid_mode = \"host\": the task shares the host's PID namespace, so tasks of the same user can see and signal it")
	}

	switch {
	case icfg.Landlock == LandlockOff:
		plan.notes = append(plan.notes, "Landlock is off in the plugin config: the task's filesystem access is not confined")
		return plan, nil
	case probe.LandlockABI == 0 && icfg.Landlock == LandlockRequired:
		return plan, badInput("Landlock is not available on this node (%s), and the plugin config requires it (isolation.landlock = \"required\"); the operator can set \"best_effort\" to run tasks unconfined here", probe.LandlockError)
	case probe.LandlockABI == 0:
		plan.notes = append(plan.notes, fmt.Sprintf("Landlock is not available on this node (%s): the task runs without filesystem confinement (isolation.landlock = \"best_effort\")", probe.LandlockError))
		return plan, nil
	}
	rules, err := d.landlockRules(cfg, tc, dirs, plan.spec, mpsGPUs, ownDirs)
	if err != nil {
		return plan, err
	}
	if err := checkWorkDir(tc.WorkDir, rules); err != nil {
		return plan, err
	}
	plan.spec.Landlock, plan.spec.LandlockOn = rules, true
	return plan, nil
}

func (d *Driver) landlockRules(cfg *drivers.TaskConfig, tc *TaskConfig, dirs taskDirs, iso supervisor.Isolation, mpsGPUs, ownDirs []string) ([]landlock.Rule, error) {
	var rules []landlock.Rule
	add := func(a landlock.Access, paths ...string) {
		for _, p := range paths {
			if p != "" {
				rules = append(rules, landlock.Rule{Path: p, Access: a})
			}
		}
	}
	rw, rwx := landlock.Read|landlock.Write, landlock.Read|landlock.Write|landlock.Exec
	add(landlock.Read|landlock.Exec, systemPaths...)
	add(landlock.Read, readOnlyPaths...)
	add(rw, deviceNodes...)
	add(rw, "/dev/pts", "/dev/shm")
	add(rwx, dirs.task, dirs.alloc)
	// Its checkpoints: the whole key dir, as a rule binds the directory it
	// was made for, and each commit moves the staging dir to a generation
	// and makes a new one.
	add(rw, ownDirs...)
	if iso.TmpDir != "" {
		add(rwx, "/tmp")
	}
	if len(cfg.Devices) > 0 || cfg.DeviceEnv[contract.EnvCUDAVisibleDevices] != "" {
		add(rw, sharedGPUNodes...)
		// On a sim node, the load directory where `nomad-gpu sim-load`
		// puts the task's simulated work (package gpu/sim). Derived from
		// this plugin's own sim config, never from the task's environment,
		// which the device plugin sets to the same path.
		if g := d.config().GPU; g.Backend == gpu.BackendSim {
			add(rw, g.Sim.LoadDir())
		}
	}
	// Only device nodes: a reservation names the task's GPU and MIG nodes,
	// never a directory or file to open up.
	for _, dev := range cfg.Devices {
		var st syscall.Stat_t
		if p := filepath.Clean(dev.HostPath); syscall.Stat(p, &st) == nil && st.Mode&syscall.S_IFMT == syscall.S_IFCHR {
			add(rw, p)
		}
	}
	for _, g := range mpsGPUs {
		add(rw, filepath.Join(d.config().MPS.PipeRoot, g))
	}
	icfg := d.config().Isolation
	for _, u := range icfg.UnveilPaths {
		r, _ := landlock.ParseRule(u) // validated with the config
		rules = append(rules, r)
	}
	if len(tc.Unveil) > 0 && !icfg.UnveilByTask {
		return nil, badInput("config.unveil: the plugin config does not let tasks unveil paths; the operator can allow it with isolation.unveil_by_task = true")
	}
	for _, u := range tc.Unveil {
		r, _ := landlock.ParseRule(u) // validated with the task config
		rules = append(rules, r)
	}
	return rules, nil
}

// checkWorkDir: a working directory outside what the task may read would
// fail in a confusing way at the first relative path.
func checkWorkDir(dir string, rules []landlock.Rule) error {
	if dir == "" {
		return nil
	}
	for _, r := range rules {
		if r.Access&landlock.Read != 0 && within(dir, r.Path) {
			return nil
		}
	}
	return badInput("config.work_dir: %q is outside the paths the task may use (its task and alloc dirs, system dirs); unveil it with config.unveil where the plugin config allows, or use a directory inside the task dir", dir)
}

// within: p is root or beneath it.
func within(p, root string) bool {
	p, root = filepath.Clean(p), filepath.Clean(root)
	return p == root || strings.HasPrefix(p, root+string(filepath.Separator)) || root == "/"
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}
