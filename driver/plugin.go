// Package driver is the Nomad task driver nomad-driver-gpu (driver name
// "gpu"): it runs a task as supervised processes that outlive the plugin and
// the client, keeps it inside its cgroup and GPU slice (MPS daemons with a
// daemon-side ceiling, a GPU-memory watchdog), and reports its stats.
package driver

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/driver/checkpoint"
	"github.com/nomad-gpu/nomad-gpu/driver/gpuwatch"
	"github.com/nomad-gpu/nomad-gpu/driver/migcaps"
	"github.com/nomad-gpu/nomad-gpu/driver/mps"
	"github.com/nomad-gpu/nomad-gpu/driver/preemption"
	"github.com/nomad-gpu/nomad-gpu/gpu"
	"github.com/nomad-gpu/nomad-gpu/internal/dirs"
	"github.com/nomad-gpu/nomad-gpu/wire/base"
	"github.com/nomad-gpu/nomad-gpu/wire/drivers"
)

const (
	// PluginName is the driver's name in jobspecs (`driver = "gpu"`); the
	// binary and its agent config block are nomad-driver-gpu.
	PluginName = contract.DriverName
	BinaryName = "nomad-driver-gpu"
)

// Version must parse as a version for the agent.
var Version = "0.1.0"

// Inventory is what the driver needs of package gpu.
type Inventory interface {
	Snapshot() (*gpu.Snapshot, error)
	Processes(uuid string) ([]gpu.Process, error)
	Close() error
}

// Driver is the plugin. Locking, so that no field is read without the lock
// that guards its writes:
//   - cfgMu guards cfg and executable (SetConfig may come at any time);
//   - store has its own lock and holds every task;
//   - rt is written once, under initMu, by runtime(), and read lock-free
//     through the atomic pointer: nil until the plugin runs tasks;
//   - invMu guards the NVML inventory, opened on first use;
//   - probeMu guards the cached isolation probe, dataDirMu the data_dir seen;
//   - a task's mutable fields are guarded by the task's own mutex.
type Driver struct {
	logger hclog.Logger
	// executable runs the supervisor and shim sub-commands.
	executable string

	cfgMu sync.Mutex
	cfg   *Config

	store *taskStore

	initMu sync.Mutex
	rt     atomic.Pointer[runtimeState]
	ctx    context.Context
	cancel context.CancelFunc

	invMu   sync.Mutex
	inv     Inventory
	invErr  error
	openInv func(gpu.Config, hclog.Logger) (Inventory, error)

	probeMu sync.Mutex
	probe   *isolationProbe

	dataDirMu sync.Mutex
	dataDir   string // the Nomad data_dir, once a task has shown it

	events *broadcaster

	// metrics is the Prometheus exporter (served only with metrics.address).
	metrics *taskMetrics

	// faults, in tests only, fails StartTask at a named step (or kills
	// the plugin process there).
	faults func(step string) error
}

// runtimeState is what only a running plugin needs (not the agent's
// validation launches); it never changes once made.
type runtimeState struct {
	mps   *mps.Manager
	watch *gpuwatch.Watchdog
	caps  *migcaps.Registry
	ckpt  *checkpoint.Store
	// markers tells when tasks mark checkpoints complete; nil without
	// inotify, where the driver only looks for the markers.
	markers *checkpoint.Markers
	// nomad reads why allocations stop, and which allocation a
	// replacement takes over from; it writes nothing.
	nomad *preemption.Client
}

var _ drivers.Plugin = (*Driver)(nil)

func New(logger hclog.Logger) *Driver {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	ctx, cancel := context.WithCancel(context.Background())
	d := &Driver{
		logger:     logger,
		executable: supervisorExecutable(),
		store:      newTaskStore(),
		ctx:        ctx,
		cancel:     cancel,
		events:     newBroadcaster(),
		openInv: func(c gpu.Config, l hclog.Logger) (Inventory, error) {
			return gpu.Open(c, l)
		},
	}
	d.metrics = newTaskMetrics(d)
	return d
}

// SupervisorBinary is the small per-task supervisor; without it the plugin
// binary supervises tasks itself.
const SupervisorBinary = "nomad-driver-gpu-supervisor"

// SupervisorDir is where the supervisor is looked for, relative to the
// driver's directory: outside plugin_dir, since Nomad warns about every file
// or directory there that is not a configured plugin.
const SupervisorDir = "../libexec"

// supervisorExecutable is the installed supervisor (in SupervisorDir, or
// beside the driver as installs before SupervisorDir had it), else the
// driver's own binary.
func supervisorExecutable() string {
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	for _, dir := range []string{SupervisorDir, "."} {
		small := filepath.Join(filepath.Dir(exe), dir, SupervisorBinary)
		if executableFile(small) == nil {
			return small
		}
	}
	return exe
}

// executableFile says why path is not an executable regular file.
func executableFile(path string) error {
	st, err := os.Stat(path)
	switch {
	case err != nil:
		return err
	case !st.Mode().IsRegular():
		return fmt.Errorf("%s is not a regular file", path)
	case st.Mode()&0o111 == 0:
		return fmt.Errorf("%s is not executable", path)
	}
	return nil
}

// SetExecutable points the supervisor at another binary (tests).
func (d *Driver) SetExecutable(path string) {
	d.cfgMu.Lock()
	d.executable = path
	d.cfgMu.Unlock()
}

// supervisor is the executable that supervises tasks and runs exec shims.
func (d *Driver) supervisor() string {
	d.cfgMu.Lock()
	defer d.cfgMu.Unlock()
	return d.executable
}

func (d *Driver) Info() base.Info {
	return base.Info{Type: base.TypeDriver, Name: PluginName, Version: Version, APIVersions: []string{base.APIVersion}}
}

func (d *Driver) NewConfig() any     { return &Config{} }
func (d *Driver) NewTaskConfig() any { return &TaskConfig{} }

func (d *Driver) SetConfig(c any, agent *base.AgentConfig) error {
	cfg, ok := c.(*Config)
	if !ok {
		return fmt.Errorf("unexpected config type %T", c)
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	if cfg.SupervisorBinary != "" {
		if err := executableFile(cfg.SupervisorBinary); err != nil {
			return fmt.Errorf("supervisor_binary: %v; allowed: the path of an installed nomad-driver-gpu-supervisor", err)
		}
	}
	if err := checkCheckpointRootPassable(cfg.Checkpoint.Root); err != nil {
		return err
	}
	d.cfgMu.Lock()
	d.cfg = cfg
	if cfg.SupervisorBinary != "" {
		d.executable = cfg.SupervisorBinary
	}
	d.cfgMu.Unlock()
	// Only the runtime launch gets the agent's config: validation
	// launches must not serve metrics.
	d.metrics.setConfig(cfg, agent != nil)
	return nil
}

func (d *Driver) config() *Config {
	d.cfgMu.Lock()
	defer d.cfgMu.Unlock()
	if d.cfg == nil {
		cfg := &Config{}
		_ = decodeDefaults(cfg)
		d.cfg = cfg
	}
	return d.cfg
}

func (d *Driver) Capabilities() *drivers.Capabilities {
	return &drivers.Capabilities{
		SendSignals:       true,
		Exec:              true,
		FSIsolation:       drivers.FSIsolationNone,
		NetIsolationModes: []drivers.NetIsolationMode{drivers.NetIsolationHost},
		MountConfigs:      drivers.MountConfigsNone,
	}
}

// runtime starts what only a running plugin needs: state dirs, the MPS
// manager, the MIG grant registry, the watchdog; and, once, reconciles the
// state a previous plugin process left.
func (d *Driver) runtime() (*runtimeState, error) {
	if rt := d.rt.Load(); rt != nil {
		return rt, nil
	}
	d.initMu.Lock()
	defer d.initMu.Unlock()
	if rt := d.rt.Load(); rt != nil {
		return rt, nil
	}
	// A failure (say, a state_dir not yet mounted) is retried on the next
	// call rather than remembered for the plugin's lifetime.
	cfg := d.config()
	if err := makeStateDir(cfg.StateDir); err != nil {
		return nil, fmt.Errorf("state_dir: %w", err)
	}
	m, err := mps.NewManager(mps.Config{
		ControlBinary: cfg.MPS.ControlBinary,
		PipeRoot:      cfg.MPS.PipeRoot,
		LogRoot:       cfg.MPS.LogRoot,
		StateDir:      filepath.Join(cfg.StateDir, "mps"),
	}, d.logger.Named("mps"))
	if err != nil {
		return nil, fmt.Errorf("MPS: %w", err)
	}
	caps, err := migcaps.Open(filepath.Join(cfg.StateDir, "migcaps.json"), capsDir)
	if err != nil {
		return nil, fmt.Errorf("MIG capability grants: %w", err)
	}
	store, err := checkpoint.Open(cfg.Checkpoint.Root)
	if err != nil {
		return nil, fmt.Errorf("checkpoint.root: %w", err)
	}
	nomad, err := preemption.New(cfg.Nomad.Address, cfg.Nomad.Token)
	if err != nil {
		return nil, err
	}
	if sup := d.supervisor(); filepath.Base(sup) == SupervisorBinary {
		d.logger.Info("tasks are supervised by", "supervisor", sup)
	} else {
		// Works, at about 18 MiB resident per task instead of 4.5 MiB.
		d.logger.Warn("no "+SupervisorBinary+" installed (looked in "+SupervisorDir+" and beside the driver, and supervisor_binary is unset); the driver binary supervises tasks itself, using more memory per task", "supervisor", sup)
	}
	markers, err := newMarkers()
	if err != nil {
		markers = nil
		d.logger.Warn("no inotify: the driver looks for checkpoint commit markers every "+commitPoll.String()+" ("+commitPollStop.String()+" while a stop waits), so a stopping task works on a little longer after its commit", "error", err)
	} else {
		go func() { <-d.ctx.Done(); markers.Close() }()
	}
	rt := &runtimeState{mps: m, caps: caps, ckpt: store, markers: markers, nomad: nomad}
	rt.watch = gpuwatch.New(inventorySource{d}, cfg.WatchdogInterval, d.logger.Named("watchdog"), d.onViolation)
	d.reconcile(rt)
	go m.Run(d.ctx, func(gpuUUID, msg string) {
		for _, t := range d.store.usingMPS(gpuUUID) {
			d.emit(t, msg, map[string]string{"gpu": gpuUUID})
		}
	})
	go rt.watch.Run(d.ctx)
	d.rt.Store(rt)
	go d.publishShareUsage(rt)
	return rt, nil
}

// makeStateDir creates state_dir 0700: the supervisor keeps each task's
// environment there, secrets (Vault and workload identity tokens)
// included. The directories it creates above state_dir are 0755, whatever
// the umask: in the shipped layout /var/lib/nomad-gpu is also above
// checkpoint.root, which every task user must pass through, and it holds
// nothing but the names "driver" and "checkpoints".
func makeStateDir(stateDir string) error {
	if err := dirs.MkdirAll(filepath.Dir(stateDir), 0o755); err != nil {
		return err
	}
	return os.MkdirAll(filepath.Join(stateDir, "tasks"), 0o700)
}

// inventory opens NVML (or the sim) once; failure is retried later and
// only disables GPU memory accounting, never task starts.
func (d *Driver) inventory() (Inventory, error) {
	d.invMu.Lock()
	defer d.invMu.Unlock()
	if d.inv != nil {
		return d.inv, nil
	}
	inv, err := d.openInv(d.config().gpuConfig(), d.logger.Named("gpu"))
	if err != nil {
		d.invErr = err
		return nil, err
	}
	d.inv, d.invErr = inv, nil
	return inv, nil
}

type inventorySource struct{ d *Driver }

func (s inventorySource) Processes(uuid string) ([]gpu.Process, error) {
	inv, err := s.d.inventory()
	if err != nil {
		return nil, err
	}
	return inv.Processes(uuid)
}

// utilizationInventory is what an Inventory needs to report utilisation;
// *gpu.Inventory is one. An Inventory that is not one reports none.
type utilizationInventory interface {
	ProcessUtilization(uuid string, since time.Time) (map[uint32]float64, error)
	Telemetry(uuid string) (gpu.Telemetry, error)
}

var _ utilizationInventory = (*gpu.Inventory)(nil)

// ProcessUtilization makes inventorySource a gpuwatch.UtilizationSource.
func (s inventorySource) ProcessUtilization(uuid string, since time.Time) (map[uint32]float64, error) {
	inv, err := s.d.inventory()
	if err != nil {
		return nil, err
	}
	ui, ok := inv.(utilizationInventory)
	if !ok {
		return nil, fmt.Errorf("gpu: %s: per-process utilization: %w", uuid, gpu.ErrNotSupported)
	}
	return ui.ProcessUtilization(uuid, since)
}

func (s inventorySource) Telemetry(uuid string) (gpu.Telemetry, error) {
	inv, err := s.d.inventory()
	if err != nil {
		return gpu.Telemetry{}, err
	}
	ui, ok := inv.(utilizationInventory)
	if !ok {
		return gpu.Telemetry{}, nil
	}
	return ui.Telemetry(uuid)
}

// Shutdown stops the plugin's own loops; tasks keep running under their
// supervisors and are recovered by the next plugin process.
func (d *Driver) Shutdown() error {
	d.cancel()
	d.metrics.close()
	d.invMu.Lock()
	defer d.invMu.Unlock()
	if d.inv != nil {
		err := d.inv.Close()
		d.inv = nil
		return err
	}
	return nil
}

func cgroupName(cfg *drivers.TaskConfig) string {
	return cfg.AllocID + "." + cfg.Name
}

// capsDir holds the MIG capability device nodes (/dev/nvidia-caps/nvidia-capN)
// that gate access to a GPU and compute instance; a variable for tests.
var capsDir = "/dev/nvidia-caps"

// newMarkers opens the inotify instance that sees tasks' commit markers; a
// variable for tests, which play a node without inotify.
var newMarkers = checkpoint.NewMarkers

// waitTimeout bounds operations that must not hang an RPC.
const waitTimeout = 30 * time.Second
