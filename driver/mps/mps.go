// Package mps runs the driver's CUDA MPS control daemons: one per shared GPU,
// started when its first client task arrives and stopped when the last one
// leaves, restarted if it dies, and given a daemon-side ceiling on thread
// percentage and pinned device memory.
//
// The ceiling is why the driver owns the daemons at all: a client's
// CUDA_MPS_ACTIVE_THREAD_PERCENTAGE and CUDA_MPS_PINNED_DEVICE_MEM_LIMIT are
// set in its own environment, so a task can raise them before cuInit; MPS
// only lets a client tighten the daemon's defaults, never exceed them.
//
// MPS runs one user's clients at a time on a GPU: the control daemon starts
// one MPS server per user, and a client of another user waits in cuInit
// until the first user's clients are all gone. So a GPU's clients are all
// of one user (Acquire refuses another at once, ErrUserConflict), and its
// pipe directory belongs to that user, mode 0700: no other user can reach
// the daemon, or read what lies there.
//
// The daemons and their control commands run with a scrubbed environment
// (controlEnv), never the plugin's own, which may carry Nomad, Consul or
// Vault tokens.
//
// The driver plugin may restart while its tasks keep running, so the
// bookkeeping (which tasks, of which user, use which GPU's daemon, and the
// daemon's pid, start time and boot) lives in one JSON file per GPU under
// Config.StateDir and a new Manager re-adopts the daemons it finds alive.
package mps

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/driver/procfs"
)

// Defaults for Config's empty fields. DefaultPipeRoot equals the device
// plugin's default mps_pipe_root: the plugin hands tasks
// <mps_pipe_root>/<GPU-UUID> as CUDA_MPS_PIPE_DIRECTORY, so the two must agree.
const (
	DefaultControlBinary  = "nvidia-cuda-mps-control"
	DefaultPipeRoot       = contract.DefaultMPSPipeRoot
	DefaultLogRoot        = "/var/log/nomad-gpu/mps"
	DefaultCommandTimeout = 10 * time.Second
	DefaultStartTimeout   = 10 * time.Second
	DefaultStopTimeout    = 10 * time.Second
	DefaultCheckInterval  = 5 * time.Second
)

// pidFileName is where the control daemon writes its pid, in its pipe
// directory (NVIDIA MPS guide, "Utilities and Daemons").
const pidFileName = "nvidia-cuda-mps-control.pid"

// envMPSLogDirectory is where the control daemon writes its logs; the
// driver alone sets it (the task only needs the pipe directory).
const envMPSLogDirectory = "CUDA_MPS_LOG_DIRECTORY"

// Modes of the pipe directories: the root is traversable but not listable;
// a GPU's directory is its clients' user's alone (root, the daemon, ignores
// modes).
const (
	pipeRootMode = 0o711
	pipeDirMode  = 0o700
)

// maxSocketPath is the longest unix socket path Linux accepts (sun_path less
// its NUL); the daemon's longest socket name in its pipe directory is
// "control_privileged".
const (
	maxSocketPath     = 107
	longestSocketName = "control_privileged"
	gpuUUIDLen        = len("GPU-00000000-0000-0000-0000-000000000000")
)

// ErrUnavailable is returned (wrapped) by Acquire when the MPS control
// binary cannot be run: a task asking for an MPS share then fails to start
// rather than silently running unshared and unlimited.
var ErrUnavailable = errors.New("MPS is not available on this node")

// ErrUserConflict is returned (wrapped, in a *UserConflictError) by Acquire
// when tasks of another user already hold the GPU's MPS server: MPS runs
// one user's clients at a time, so the task would hang in CUDA init.
var ErrUserConflict = errors.New("MPS on this GPU is held by another user")

// UserConflictError says who holds the GPU and who asked. It unwraps to
// ErrUserConflict.
type UserConflictError struct {
	GPU string
	// HolderUID and HolderUser are the user whose tasks hold the GPU, and
	// HolderTasks those tasks, sorted.
	HolderUID   uint32
	HolderUser  string
	HolderTasks []string
	// UID, User and TaskID are the refused client's.
	UID    uint32
	User   string
	TaskID string
}

func (e *UserConflictError) Unwrap() error { return ErrUserConflict }

func (e *UserConflictError) Error() string {
	holder, asker := userName(e.HolderUser, e.HolderUID), userName(e.User, e.UID)
	const show = 3
	tasks := "task "
	if len(e.HolderTasks) > 1 {
		tasks = "tasks "
	}
	tasks += strings.Join(e.HolderTasks[:min(show, len(e.HolderTasks))], ", ")
	if n := len(e.HolderTasks) - show; n > 0 {
		tasks += fmt.Sprintf(" and %d more", n)
	}
	return fmt.Sprintf("MPS on %s: %s (%s) holds this GPU's MPS server; MPS runs one user's clients at a time, "+
		"so a task of %s would hang in CUDA init until %s's tasks end. "+
		"Run the tasks that share this GPU's MPS shares as one user (jobspec user), or give them separate GPUs",
		e.GPU, quoteUser(holder), tasks, quoteUser(asker), holder)
}

// userName is the name to show for a user: its name, else "uid N".
func userName(name string, uid uint32) string {
	if name != "" {
		return name
	}
	return "uid " + strconv.FormatUint(uint64(uid), 10)
}

func quoteUser(n string) string {
	if strings.HasPrefix(n, "uid ") {
		return n
	}
	return "user " + strconv.Quote(n)
}

// Config configures a Manager.
type Config struct {
	// ControlBinary is nvidia-cuda-mps-control: looked up in PATH when it
	// is a bare name, else an absolute path.
	ControlBinary string
	// PipeRoot holds one directory per GPU, <PipeRoot>/<GPU-UUID>, that
	// GPU's CUDA_MPS_PIPE_DIRECTORY. It must equal the device plugin's
	// mps_pipe_root.
	PipeRoot string
	// LogRoot holds <LogRoot>/<GPU-UUID>, that GPU's CUDA_MPS_LOG_DIRECTORY.
	LogRoot string
	// StateDir holds the bookkeeping (required). One Manager per StateDir.
	StateDir string

	CommandTimeout time.Duration // bound on one control command
	StartTimeout   time.Duration // bound on "-d" and the daemon's pid file appearing
	StopTimeout    time.Duration // how long a quit daemon may take to exit before it is killed
	CheckInterval  time.Duration // Run's supervision period
}

// Limits are one client task's share of a GPU. Zero means the task asks for
// no daemon-side ceiling on that resource.
type Limits struct {
	ThreadPercentage int    `json:"thread_percentage,omitempty"` // 1..100
	PinnedMemMiB     uint64 `json:"pinned_mem_mib,omitempty"`
}

// Client is one task using a GPU's MPS daemon.
type Client struct {
	TaskID string
	// UID is the user the task runs as; User its name, for messages.
	UID    uint32
	User   string
	Limits Limits
}

// DaemonStatus is one GPU's daemon as the driver fingerprint shows it.
type DaemonStatus struct {
	PID      int      // 0 when not running
	Clients  []string // task IDs, sorted
	User     string   // the clients' user (name, else "uid N"); "" without clients of known user
	Healthy  bool     // running, and its ceiling is in place
	Ceiling  Limits   // as last set on the daemon
	Restarts int      // times the driver restarted it after it died
	Error    string   // the last start or command failure, "" when healthy
}

// Manager owns the MPS control daemons of a node. Its methods are safe for
// concurrent use; work on different GPUs proceeds in parallel.
type Manager struct {
	cfg Config
	log hclog.Logger

	mu   sync.Mutex
	gpus map[string]*daemon // never shrinks: an idle entry has no clients and no pid
}

type daemon struct {
	mu  sync.Mutex // serialises starting, stopping and commanding one daemon
	st  daemonState
	err string
}

// NewManager loads the bookkeeping under cfg.StateDir and re-adopts the
// daemons still alive (same pid, start time and boot). Dead daemons are
// forgotten; their clients are kept, and Run starts a new daemon for them. A
// live daemon left without clients (a Release cut short by a crash) is
// stopped.
func NewManager(cfg Config, logger hclog.Logger) (*Manager, error) {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	if cfg.ControlBinary == "" {
		cfg.ControlBinary = DefaultControlBinary
	}
	if cfg.PipeRoot == "" {
		cfg.PipeRoot = DefaultPipeRoot
	}
	if cfg.LogRoot == "" {
		cfg.LogRoot = DefaultLogRoot
	}
	if cfg.CommandTimeout <= 0 {
		cfg.CommandTimeout = DefaultCommandTimeout
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = DefaultStartTimeout
	}
	if cfg.StopTimeout <= 0 {
		cfg.StopTimeout = DefaultStopTimeout
	}
	if cfg.CheckInterval <= 0 {
		cfg.CheckInterval = DefaultCheckInterval
	}
	if strings.Contains(cfg.ControlBinary, "/") && !filepath.IsAbs(cfg.ControlBinary) {
		return nil, fmt.Errorf("mps.control_binary: %q must be a bare name (looked up in PATH) or an absolute path", cfg.ControlBinary)
	}
	for _, f := range []struct{ name, val string }{
		{"mps.pipe_root", cfg.PipeRoot}, {"mps.log_root", cfg.LogRoot}, {"state_dir", cfg.StateDir},
	} {
		if f.val == "" || !filepath.IsAbs(f.val) {
			return nil, fmt.Errorf("%s: %q must be an absolute path", f.name, f.val)
		}
	}
	cfg.PipeRoot = filepath.Clean(cfg.PipeRoot)
	cfg.LogRoot = filepath.Clean(cfg.LogRoot)
	cfg.StateDir = filepath.Clean(cfg.StateDir)
	if n := len(cfg.PipeRoot) + 1 + gpuUUIDLen + 1 + len(longestSocketName); n > maxSocketPath {
		// The real daemon would fail to bind its sockets; say so now, as
		// the daemon's own error is easy to miss in its log.
		logger.Warn("mps.pipe_root is too long for MPS: its socket paths would exceed the unix socket limit",
			"mps.pipe_root", cfg.PipeRoot, "path_bytes", n, "limit", maxSocketPath)
	}
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("mps state dir: %w", err)
	}
	m := &Manager{cfg: cfg, log: logger, gpus: map[string]*daemon{}}
	states, errs := loadStates(cfg.StateDir)
	for _, err := range errs {
		logger.Error("ignoring unreadable MPS bookkeeping", "error", err)
	}
	for _, st := range states {
		d := &daemon{st: *st}
		m.gpus[st.GPU] = d
		m.adopt(d)
	}
	return m, nil
}

// adopt reconciles one GPU's loaded bookkeeping with what runs now.
func (m *Manager) adopt(d *daemon) {
	log := m.log.With("gpu", d.st.GPU)
	if m.isDaemon(d.st.Identity, d.st.PipeDir) {
		// A record from before boot IDs is of this boot: isDaemon checked
		// the process is the one serving this pipe directory.
		d.st.BootID = procfs.BootID()
		log.Info("re-adopted MPS control daemon", "pid", d.st.PID, "clients", len(d.st.Clients))
	} else {
		if d.st.PID > 0 {
			log.Warn("MPS control daemon from before the restart is gone", "pid", d.st.PID)
		}
		d.st.Identity, d.st.Ceiling = procfs.Identity{}, nil
		// A daemon started just before a crash serves the pipe directory
		// without being on record; a second one would refuse to start.
		if d.st.PipeDir != "" {
			if id, ok := m.findDaemon(d.st.PipeDir); ok {
				d.st.Identity = id
				log.Info("adopted unrecorded MPS control daemon", "pid", id.PID)
			}
		}
	}
	if len(d.st.Clients) == 0 {
		if err := m.stopLocked(d); err != nil {
			log.Error("stopping MPS control daemon without clients", "error", err)
		}
		return
	}
	if d.st.PipeDir != "" {
		if err := m.ownPipeDirLocked(d); err != nil {
			d.err = err.Error()
			log.Error("giving the MPS pipe directory to its clients' user", "error", err)
		}
	}
	if d.st.PID > 0 && d.st.Ceiling == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 4*m.cfg.CommandTimeout)
		if err := m.applyCeilingLocked(ctx, d, true); err != nil {
			d.err = err.Error()
			log.Error("setting MPS ceiling on adopted daemon", "error", err)
		}
		cancel()
	}
	if err := saveState(m.cfg.StateDir, &d.st); err != nil {
		log.Error("saving MPS bookkeeping", "error", err)
	}
}

// Available says whether the control binary can be run, and why not.
func (m *Manager) Available() (bool, string) {
	_, reason := m.binary()
	return reason == "", reason
}

// binary resolves the control binary on every use, so installing the MPS
// binaries on a running node takes effect without a plugin restart.
func (m *Manager) binary() (string, string) {
	b := m.cfg.ControlBinary
	if filepath.IsAbs(b) {
		fi, err := os.Stat(b)
		switch {
		case err != nil:
			return "", fmt.Sprintf("%s not found; install the CUDA MPS binaries or set mps.control_binary in the driver's plugin config", b)
		case fi.IsDir() || fi.Mode().Perm()&0o111 == 0:
			return "", fmt.Sprintf("%s is not executable; install the CUDA MPS binaries or set mps.control_binary in the driver's plugin config", b)
		}
		return b, ""
	}
	p, err := exec.LookPath(b)
	if err != nil {
		return "", fmt.Sprintf("%s not found in PATH; install the CUDA MPS binaries or set mps.control_binary in the driver's plugin config", b)
	}
	return p, ""
}

// Acquire makes c.TaskID a client of the GPU's daemon with c.Limits: it
// starts the daemon if none runs, raises the daemon's ceiling to cover the
// limits and gives the GPU's pipe directory to c.UID. Call it before the
// task starts, as clients read the ceiling at CUDA init. Calling it again for
// the same GPU and task is harmless (recovery does); new limits replace old.
//
// A client of a user other than the GPU's current clients' is refused at
// once with a *UserConflictError (errors.Is ErrUserConflict): MPS would make
// it wait in CUDA init until they are all gone.
func (m *Manager) Acquire(ctx context.Context, gpuUUID string, c Client) error {
	if err := validUUID(gpuUUID); err != nil {
		return err
	}
	taskID := c.TaskID
	if taskID == "" {
		return errors.New("mps: empty task ID")
	}
	l := c.Limits
	if l.ThreadPercentage < 0 || l.ThreadPercentage > 100 {
		return fmt.Errorf("mps: thread percentage %d for task %s is outside 0-100", l.ThreadPercentage, taskID)
	}
	if ok, reason := m.Available(); !ok {
		return fmt.Errorf("%w: task %s holds an MPS share of %s but %s", ErrUnavailable, taskID, gpuUUID, reason)
	}
	d := m.entry(gpuUUID)
	d.mu.Lock()
	defer d.mu.Unlock()

	if err := d.userConflict(c); err != nil {
		return err
	}
	uid := c.UID
	want := clientState{Limits: l, UID: &uid, User: c.User}
	prev, had := d.st.Clients[taskID]
	alive := d.st.Identity.Alive()
	if had && prev.same(want) && alive && d.st.Ceiling != nil {
		return nil
	}
	started := false
	if !alive {
		restart := len(d.st.Clients) > 0 && !(had && len(d.st.Clients) == 1)
		if err := m.startLocked(ctx, d); err != nil {
			d.err = err.Error()
			return err
		}
		started = true
		if restart {
			d.st.Restarts++
		}
		// On record at once: a crash from here on must not orphan it.
		if err := saveState(m.cfg.StateDir, &d.st); err != nil {
			m.log.Error("saving MPS bookkeeping", "gpu", gpuUUID, "error", err)
		}
	}
	d.st.Clients[taskID] = want
	err := m.ownPipeDirLocked(d)
	if err == nil {
		err = m.applyCeilingLocked(ctx, d, started)
	}
	if err == nil {
		err = saveState(m.cfg.StateDir, &d.st)
	}
	if err != nil {
		if had {
			d.st.Clients[taskID] = prev
		} else {
			delete(d.st.Clients, taskID)
		}
		if len(d.st.Clients) == 0 {
			if serr := m.stopLocked(d); serr != nil {
				m.log.Error("stopping MPS control daemon after failed acquire", "gpu", gpuUUID, "error", serr)
			}
		} else {
			if oerr := m.ownPipeDirLocked(d); oerr != nil {
				m.log.Error("giving the MPS pipe directory back to its clients' user", "gpu", gpuUUID, "error", oerr)
			}
			if serr := saveState(m.cfg.StateDir, &d.st); serr != nil {
				m.log.Error("saving MPS bookkeeping", "gpu", gpuUUID, "error", serr)
			}
		}
		d.err = err.Error()
		return fmt.Errorf("mps: task %s on %s: %w", taskID, gpuUUID, err)
	}
	d.err = ""
	return nil
}

// userConflict refuses c when clients of another known user hold the GPU.
// The task's own record does not count (it may be re-acquiring, with its
// user now known), nor do clients of unknown user (version 1 records).
func (d *daemon) userConflict(c Client) error {
	var e *UserConflictError
	for _, id := range clientIDs(d.st.Clients) {
		cs := d.st.Clients[id]
		if id == c.TaskID || cs.UID == nil || *cs.UID == c.UID {
			continue
		}
		if e == nil {
			e = &UserConflictError{GPU: d.st.GPU, HolderUID: *cs.UID, UID: c.UID, User: c.User, TaskID: c.TaskID}
		}
		if *cs.UID == e.HolderUID {
			e.HolderTasks = append(e.HolderTasks, id)
			if e.HolderUser == "" {
				e.HolderUser = cs.User
			}
		}
	}
	if e == nil {
		return nil
	}
	return e
}

func (a clientState) same(b clientState) bool {
	return a.Limits == b.Limits && a.User == b.User && (a.UID == nil) == (b.UID == nil) && (a.UID == nil || *a.UID == *b.UID)
}

// clientsUID is the user of the GPU's clients, ok false when none of them
// is of known user. Acquire keeps them all of one.
func (d *daemon) clientsUID() (uid uint32, user string, ok bool) {
	for _, id := range clientIDs(d.st.Clients) {
		if cs := d.st.Clients[id]; cs.UID != nil {
			return *cs.UID, cs.User, true
		}
	}
	return 0, "", false
}

// Release drops taskID from the GPU's clients. The last client's release
// quits the daemon, waits for it to exit (killing it if it will not) and
// empties its pipe directory. Releasing an unknown task is a no-op.
func (m *Manager) Release(gpuUUID, taskID string) error {
	m.mu.Lock()
	d := m.gpus[gpuUUID]
	m.mu.Unlock()
	if d == nil {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.st.Clients[taskID]; !ok {
		return nil
	}
	delete(d.st.Clients, taskID)
	if len(d.st.Clients) > 0 {
		if d.st.Identity.Alive() {
			ctx, cancel := context.WithTimeout(context.Background(), 4*m.cfg.CommandTimeout)
			// Lowering the ceiling is housekeeping: the clients that remain
			// are already within it, so a failure costs no isolation.
			if err := m.applyCeilingLocked(ctx, d, false); err != nil {
				m.log.Warn("lowering MPS ceiling", "gpu", gpuUUID, "error", err)
			}
			cancel()
		}
		return saveState(m.cfg.StateDir, &d.st)
	}
	// On record before stopping, so a crash mid-stop leaves a daemon the
	// next Manager sees has no clients, and stops.
	if err := saveState(m.cfg.StateDir, &d.st); err != nil {
		m.log.Error("saving MPS bookkeeping", "gpu", gpuUUID, "error", err)
	}
	return m.stopLocked(d)
}

// ReleaseTask releases taskID on every GPU, for callers that do not know
// which GPUs a task held (e.g. DestroyTask after a failed recovery).
func (m *Manager) ReleaseTask(taskID string) error {
	var errs []error
	for _, uuid := range m.uuids() {
		if err := m.Release(uuid, taskID); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Clients lists the tasks using the GPU's daemon, sorted.
func (m *Manager) Clients(gpuUUID string) []string {
	m.mu.Lock()
	d := m.gpus[gpuUUID]
	m.mu.Unlock()
	if d == nil {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return clientIDs(d.st.Clients)
}

// Tasks lists every task that is a client of any GPU's daemon, sorted: the
// driver reconciles them with the tasks it knows at start.
func (m *Manager) Tasks() []string {
	seen := map[string]bool{}
	var out []string
	for _, uuid := range m.uuids() {
		m.mu.Lock()
		d := m.gpus[uuid]
		m.mu.Unlock()
		d.mu.Lock()
		for id := range d.st.Clients {
			if !seen[id] {
				seen[id] = true
				out = append(out, id)
			}
		}
		d.mu.Unlock()
	}
	slices.Sort(out)
	return out
}

// Status reports every GPU with a daemon or clients.
func (m *Manager) Status() map[string]DaemonStatus {
	out := map[string]DaemonStatus{}
	for _, uuid := range m.uuids() {
		m.mu.Lock()
		d := m.gpus[uuid]
		m.mu.Unlock()
		d.mu.Lock()
		if len(d.st.Clients) == 0 && d.st.PID == 0 {
			d.mu.Unlock()
			continue
		}
		alive := d.st.Identity.Alive()
		s := DaemonStatus{
			Clients:  clientIDs(d.st.Clients),
			User:     d.userName(),
			Healthy:  alive && d.err == "" && d.st.Ceiling != nil,
			Restarts: d.st.Restarts,
			Error:    d.err,
		}
		if alive {
			s.PID = d.st.PID
		}
		if d.st.Ceiling != nil {
			s.Ceiling = *d.st.Ceiling
		}
		if !alive && s.Error == "" {
			s.Error = "MPS control daemon is not running"
		}
		d.mu.Unlock()
		out[uuid] = s
	}
	return out
}

// Run supervises the daemons until ctx is done: a daemon that died while it
// has clients is started again with its ceiling (onEvent says so, and says
// when that fails); a ceiling that could not be set is retried; a daemon
// left without clients is stopped. onEvent may be nil; it is not called
// with any lock held.
func (m *Manager) Run(ctx context.Context, onEvent func(gpuUUID, msg string)) {
	t := time.NewTicker(m.cfg.CheckInterval)
	defer t.Stop()
	for {
		m.supervise(ctx, onEvent)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (m *Manager) supervise(ctx context.Context, onEvent func(gpuUUID, msg string)) {
	for _, uuid := range m.uuids() {
		if ctx.Err() != nil {
			return
		}
		m.mu.Lock()
		d := m.gpus[uuid]
		m.mu.Unlock()
		if msg := m.superviseOne(ctx, d); msg != "" && onEvent != nil {
			onEvent(uuid, msg)
		}
	}
}

func (m *Manager) superviseOne(ctx context.Context, d *daemon) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	log := m.log.With("gpu", d.st.GPU)
	alive := d.st.Identity.Alive()
	switch {
	case len(d.st.Clients) > 0 && !alive:
		old := d.st.PID
		err := m.startLocked(ctx, d)
		if err == nil {
			err = m.applyCeilingLocked(ctx, d, true)
		}
		if err != nil {
			if ctx.Err() != nil {
				return ""
			}
			first := d.err == ""
			d.err = err.Error()
			log.Error("restarting MPS control daemon", "error", err)
			if serr := saveState(m.cfg.StateDir, &d.st); serr != nil {
				log.Error("saving MPS bookkeeping", "error", serr)
			}
			if first {
				return fmt.Sprintf("MPS control daemon for %s is down and could not be restarted: %v", d.st.GPU, err)
			}
			return ""
		}
		d.st.Restarts++
		d.err = ""
		if serr := saveState(m.cfg.StateDir, &d.st); serr != nil {
			log.Error("saving MPS bookkeeping", "error", serr)
		}
		log.Warn("restarted MPS control daemon", "old_pid", old, "pid", d.st.PID)
		if old == 0 {
			return fmt.Sprintf("MPS control daemon for %s was not running; started it (pid %d) for %d client task(s)", d.st.GPU, d.st.PID, len(d.st.Clients))
		}
		return fmt.Sprintf("MPS control daemon for %s (pid %d) exited; restarted it (pid %d) for %d client task(s)", d.st.GPU, old, d.st.PID, len(d.st.Clients))
	case len(d.st.Clients) > 0 && d.st.Ceiling == nil:
		if err := m.applyCeilingLocked(ctx, d, true); err != nil {
			d.err = err.Error()
			log.Error("setting MPS ceiling", "error", err)
			return ""
		}
		d.err = ""
		if err := saveState(m.cfg.StateDir, &d.st); err != nil {
			log.Error("saving MPS bookkeeping", "error", err)
		}
	case len(d.st.Clients) == 0 && d.st.PID > 0:
		if err := m.stopLocked(d); err != nil {
			log.Error("stopping MPS control daemon without clients", "error", err)
		}
	}
	return ""
}

func (m *Manager) entry(uuid string) *daemon {
	m.mu.Lock()
	defer m.mu.Unlock()
	d := m.gpus[uuid]
	if d == nil {
		d = &daemon{st: daemonState{GPU: uuid, Clients: map[string]clientState{}}}
		m.gpus[uuid] = d
	}
	return d
}

func (m *Manager) uuids() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]string, 0, len(m.gpus))
	for u := range m.gpus {
		out = append(out, u)
	}
	slices.Sort(out)
	return out
}

// startLocked starts the GPU's daemon (or adopts one that already serves its
// pipe directory) and records its pid; the ceiling is the caller's to set.
func (m *Manager) startLocked(ctx context.Context, d *daemon) error {
	bin, reason := m.binary()
	if reason != "" {
		return fmt.Errorf("%w: %s", ErrUnavailable, reason)
	}
	uuid := d.st.GPU
	pipeDir := contract.MPSPipeDir(m.cfg.PipeRoot, uuid)
	logDir := filepath.Join(m.cfg.LogRoot, uuid)
	if err := m.makePipeRoot(); err != nil {
		return err
	}
	// The clients' user connects to sockets inside; ownPipeDirLocked gives
	// it the directory.
	if err := os.Mkdir(pipeDir, pipeDirMode); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("mps: %w", err)
	}
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return fmt.Errorf("mps: %w", err)
	}
	d.st.PipeDir, d.st.LogDir = pipeDir, logDir
	if err := m.ownPipeDirLocked(d); err != nil {
		return err
	}
	d.st.Identity, d.st.Ceiling = procfs.Identity{}, nil
	if id, ok := m.findDaemon(pipeDir); ok {
		d.st.Identity = id
		m.log.Info("adopted running MPS control daemon", "gpu", uuid, "pid", id.PID)
		return nil
	}
	// What a dead daemon left (pid file, sockets) must not be taken for a
	// live one by the next daemon or by clients.
	if err := emptyDir(pipeDir); err != nil {
		return fmt.Errorf("mps: clearing %s: %w", pipeDir, err)
	}
	sctx, cancel := context.WithTimeout(ctx, m.cfg.StartTimeout)
	defer cancel()
	cmd := exec.CommandContext(sctx, bin, "-d")
	cmd.Env = controlEnv(pipeDir, logDir, uuid)
	cmd.Dir = "/"
	// Its own session: signals meant for the plugin's process group (a
	// terminal's Ctrl-C in dev mode) must not reach the daemon it leaves.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = time.Second
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("starting MPS control daemon for %s: %s -d: %v%s", uuid, bin, err, outputSuffix(out.String()))
	}
	// "-d" returns once the daemon has forked; its pid file follows.
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if id, ok := m.findDaemon(pipeDir); ok {
			d.st.Identity = id
			m.log.Info("started MPS control daemon", "gpu", uuid, "pid", id.PID, "pipe_dir", pipeDir, "log_dir", logDir)
			return nil
		}
		select {
		case <-sctx.Done():
			return fmt.Errorf("starting MPS control daemon for %s: %s -d exited but no daemon wrote %s within %s; see %s",
				uuid, bin, filepath.Join(pipeDir, pidFileName), m.cfg.StartTimeout, logDir)
		case <-tick.C:
		}
	}
}

// stopLocked quits the daemon, kills it if it will not go, gives its pipe
// directory back to root and empties it, and removes the GPU's bookkeeping.
// Only a daemon still alive afterwards is an error; its record is kept so Run
// tries again. Callers stop a daemon only once it has no clients.
func (m *Manager) stopLocked(d *daemon) error {
	uuid := d.st.GPU
	id := d.st.Identity
	pid := id.PID
	var errs []error
	if d.st.PipeDir != "" {
		// Back to root first: no user has clients here any more, and none
		// may meddle with what the stop reads or removes there.
		if err := setPipeDirOwner(d.st.PipeDir, os.Geteuid()); err != nil {
			errs = append(errs, err)
		}
	}
	if id.Alive() {
		ctx, cancel := context.WithTimeout(context.Background(), m.cfg.CommandTimeout)
		_, qerr := m.commandLocked(ctx, d, "quit")
		cancel()
		if !waitExit(id, m.cfg.StopTimeout) {
			// An unresponsive daemon would keep the GPU in MPS mode with no
			// owner and block the next daemon on its pipe directory.
			m.log.Warn("MPS control daemon did not exit on quit; killing it", "gpu", uuid, "pid", pid, "quit_error", qerr)
			_ = syscall.Kill(pid, syscall.SIGTERM)
			if !waitExit(id, 2*time.Second) && id.Alive() {
				_ = syscall.Kill(pid, syscall.SIGKILL)
				if !waitExit(id, 2*time.Second) {
					err := fmt.Errorf("mps: control daemon %d for %s survived quit, SIGTERM and SIGKILL", pid, uuid)
					d.err = err.Error()
					if serr := saveState(m.cfg.StateDir, &d.st); serr != nil {
						m.log.Error("saving MPS bookkeeping", "gpu", uuid, "error", serr)
					}
					return errors.Join(append(errs, err)...)
				}
			}
		}
		m.log.Info("stopped MPS control daemon", "gpu", uuid, "pid", pid)
	}
	if d.st.PipeDir != "" {
		if err := emptyDir(d.st.PipeDir); err != nil {
			errs = append(errs, fmt.Errorf("mps: clearing %s: %w", d.st.PipeDir, err))
		}
	}
	d.st.Identity, d.st.Ceiling = procfs.Identity{}, nil
	d.err = ""
	if err := removeState(m.cfg.StateDir, uuid); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// ceiling is the largest share any client holds: MPS clients may only
// tighten the daemon's defaults, so the defaults must admit the biggest.
func ceiling(clients map[string]clientState) Limits {
	var c Limits
	for _, l := range clients {
		c.ThreadPercentage = max(c.ThreadPercentage, l.ThreadPercentage)
		c.PinnedMemMiB = max(c.PinnedMemMiB, l.PinnedMemMiB)
	}
	return c
}

// applyCeilingLocked sets the daemon's defaults to the clients' ceiling,
// unless it is already in place (force: the daemon is new, or what it holds
// is unknown).
func (m *Manager) applyCeilingLocked(ctx context.Context, d *daemon, force bool) error {
	c := ceiling(d.st.Clients)
	if !force && d.st.Ceiling != nil && *d.st.Ceiling == c {
		return nil
	}
	// Device 0: the daemon was started with only this GPU visible.
	var defaults, perServer []string
	if c.ThreadPercentage > 0 {
		defaults = append(defaults, fmt.Sprintf("set_default_active_thread_percentage %d", c.ThreadPercentage))
		perServer = append(perServer, "set_active_thread_percentage %d "+strconv.Itoa(c.ThreadPercentage))
	}
	if c.PinnedMemMiB > 0 {
		defaults = append(defaults, fmt.Sprintf("set_default_device_pinned_mem_limit 0 %dM", c.PinnedMemMiB))
		perServer = append(perServer, "set_device_pinned_mem_limit %d 0 "+strconv.FormatUint(c.PinnedMemMiB, 10)+"M")
	}
	for _, cmd := range defaults {
		if _, err := m.commandLocked(ctx, d, cmd); err != nil {
			// Part of the change may have landed; what the daemon holds is
			// unknown until Run sets the whole ceiling again.
			d.st.Ceiling = nil
			return err
		}
	}
	if len(perServer) > 0 {
		// Defaults reach only servers started later. A server already
		// running would hold a newly arrived, bigger client below its share,
		// so it gets the new ceiling too. A server may exit between the
		// listing and the command; that costs nothing.
		out, err := m.commandLocked(ctx, d, "get_server_list")
		if err != nil {
			m.log.Warn("listing MPS servers", "gpu", d.st.GPU, "error", err)
		}
		for _, pid := range parsePids(out) {
			for _, f := range perServer {
				if _, err := m.commandLocked(ctx, d, fmt.Sprintf(f, pid)); err != nil {
					m.log.Warn("setting MPS server limit", "gpu", d.st.GPU, "server_pid", pid, "error", err)
				}
			}
		}
	}
	d.st.Ceiling = &c
	return nil
}

// commandLocked runs one control command the way `echo cmd |
// nvidia-cuda-mps-control` does, against this GPU's daemon.
func (m *Manager) commandLocked(ctx context.Context, d *daemon, line string) (string, error) {
	bin, reason := m.binary()
	if reason != "" {
		return "", fmt.Errorf("MPS control command %q for %s: %w: %s", line, d.st.GPU, ErrUnavailable, reason)
	}
	cctx, cancel := context.WithTimeout(ctx, m.cfg.CommandTimeout)
	defer cancel()
	cmd := exec.CommandContext(cctx, bin)
	cmd.Env = controlEnv(d.st.PipeDir, d.st.LogDir, "")
	cmd.Dir = "/"
	cmd.Stdin = strings.NewReader(line + "\n")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = time.Second
	if err := cmd.Run(); err != nil {
		if cctx.Err() != nil && ctx.Err() == nil {
			err = fmt.Errorf("no answer within %s", m.cfg.CommandTimeout)
		}
		return out.String(), fmt.Errorf("MPS control command %q for %s failed: %v%s", line, d.st.GPU, err, outputSuffix(out.String()))
	}
	return out.String(), nil
}

// defaultPath is the daemon's PATH when the plugin has none.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// controlEnv is the environment of the control daemon and of every control
// command: an allowlist, not the plugin's environment, which may carry
// secrets (NOMAD_TOKEN, VAULT_TOKEN, CONSUL_HTTP_TOKEN…) the daemon has no
// use for and, through the MPS servers it starts, could pass on. It has the
// plugin's PATH (defaultPath without one), LD_LIBRARY_PATH where set (the
// NVIDIA libraries may live there), HOME=/, and the MPS variables of this
// GPU: pipe and log directory, and for the daemon (visible set) the GPU it
// serves.
func controlEnv(pipeDir, logDir, visible string) []string {
	path := os.Getenv("PATH")
	if path == "" {
		path = defaultPath
	}
	env := []string{"PATH=" + path, "HOME=/"}
	if v := os.Getenv("LD_LIBRARY_PATH"); v != "" {
		env = append(env, "LD_LIBRARY_PATH="+v)
	}
	env = append(env, contract.EnvMPSPipeDirectory+"="+pipeDir, envMPSLogDirectory+"="+logDir)
	if visible != "" {
		env = append(env, contract.EnvCUDAVisibleDevices+"="+visible)
	}
	return env
}

// findDaemon returns the live control daemon serving pipeDir, per its pid
// file. The pipe directory belongs to the clients' user, who could write
// any pid there, so the process must also be this manager's user's (the
// daemon is started by it) and have pipeDir as its own
// CUDA_MPS_PIPE_DIRECTORY; a stale file naming a recycled pid fails the same
// checks.
func (m *Manager) findDaemon(pipeDir string) (procfs.Identity, bool) {
	data, err := os.ReadFile(filepath.Join(pipeDir, pidFileName))
	if err != nil || len(data) > 64 {
		return procfs.Identity{}, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 0 {
		return procfs.Identity{}, false
	}
	id, err := procfs.Identify(pid)
	if err != nil || !id.Alive() {
		return procfs.Identity{}, false
	}
	if uid, ok := procUID(pid); !ok || uid != os.Geteuid() {
		return procfs.Identity{}, false
	}
	if !servesPipeDir(pid, pipeDir) {
		return procfs.Identity{}, false
	}
	return id, true
}

// isDaemon says whether id, as loaded from the bookkeeping, still is the
// daemon serving pipeDir. A record from before boot IDs cannot rule out a
// reboot (which brings pids and start ticks back), so the process must
// also serve pipeDir.
func (m *Manager) isDaemon(id procfs.Identity, pipeDir string) bool {
	if !id.Alive() {
		return false
	}
	return id.BootID != "" || servesPipeDir(id.PID, pipeDir)
}

func servesPipeDir(pid int, pipeDir string) bool {
	dir, ok := procEnv(pid, contract.EnvMPSPipeDirectory)
	return ok && pipeDir != "" && filepath.Clean(dir) == filepath.Clean(pipeDir)
}

// makePipeRoot creates the pipe root, mode 0711: clients reach their GPU's
// directory by name but cannot list the others. An existing root gets that
// mode too, unless it is shared (group- or world-writable, or sticky, like
// /tmp), which is only warned about.
func (m *Manager) makePipeRoot() error {
	root := m.cfg.PipeRoot
	if err := os.MkdirAll(root, pipeRootMode); err != nil {
		return fmt.Errorf("mps: %w", err)
	}
	fi, err := os.Stat(root)
	if err != nil {
		return fmt.Errorf("mps: %w", err)
	}
	mode := fi.Mode()
	switch {
	case mode.Perm() == pipeRootMode && mode&fs.ModeSticky == 0:
	case mode.Perm()&0o022 != 0 || mode&fs.ModeSticky != 0:
		m.log.Warn("mps.pipe_root is writable by others; give the MPS pipe directories a root of their own",
			"mps.pipe_root", root, "mode", mode.String())
	default:
		if err := os.Chmod(root, pipeRootMode); err != nil {
			return fmt.Errorf("mps: %w", err)
		}
	}
	return nil
}

// ownPipeDirLocked gives the GPU's pipe directory, mode 0700, to its
// clients' user, or to root (the manager's user) when it has none. A
// directory whose clients are all of unknown user (version 1 records) is
// left as it is: tightening it could lock out the tasks that use it.
func (m *Manager) ownPipeDirLocked(d *daemon) error {
	if d.st.PipeDir == "" {
		return nil
	}
	owner := os.Geteuid()
	if len(d.st.Clients) > 0 {
		uid, _, ok := d.clientsUID()
		if !ok {
			return nil
		}
		owner = int(uid)
	}
	return setPipeDirOwner(d.st.PipeDir, owner)
}

func setPipeDirOwner(dir string, uid int) error {
	fi, err := os.Lstat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("mps: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("mps: %s is not a directory", dir)
	}
	if cur, ok := fileUID(fi); !ok || cur != uid {
		if err := os.Lchown(dir, uid, -1); err != nil {
			return fmt.Errorf("mps: giving %s to uid %d: %w", dir, uid, err)
		}
	}
	if fi.Mode().Perm() != pipeDirMode || fi.Mode()&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky) != 0 {
		if err := os.Chmod(dir, pipeDirMode); err != nil {
			return fmt.Errorf("mps: %w", err)
		}
	}
	return nil
}

func waitExit(id procfs.Identity, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for id.Alive() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

// emptyDir removes what is inside dir but keeps dir: tasks may hold it open
// or have it bind-mounted.
func emptyDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// userName is the clients' user as Status shows it.
func (d *daemon) userName() string {
	uid, user, ok := d.clientsUID()
	if !ok {
		return ""
	}
	return userName(user, uid)
}

func parsePids(out string) []int {
	var pids []int
	for _, f := range strings.Fields(out) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
			pids = append(pids, pid)
		}
	}
	return pids
}

func clientIDs[V any](c map[string]V) []string {
	ids := make([]string, 0, len(c))
	for id := range c {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

func outputSuffix(out string) string {
	out = strings.TrimSpace(out)
	if out == "" {
		return ""
	}
	const maxOut = 2000
	if len(out) > maxOut {
		out = out[:maxOut] + "…"
	}
	return "; output: " + out
}

// validUUID keeps a UUID usable as one path component: it names the GPU's
// pipe, log and state paths.
func validUUID(uuid string) error {
	if uuid == "" || uuid == "." || uuid == ".." || strings.HasPrefix(uuid, ".") ||
		strings.ContainsAny(uuid, "/\x00") {
		return fmt.Errorf("mps: %q is not a device UUID", uuid)
	}
	return nil
}
