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
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nomad-gpu/nomad-gpu/driver/gpuwatch"
	"github.com/nomad-gpu/nomad-gpu/driver/mps"
	"github.com/nomad-gpu/nomad-gpu/gpu"
	"github.com/nomad-gpu/nomad-gpu/wire/base"
	"github.com/nomad-gpu/nomad-gpu/wire/drivers"
)

const (
	// PluginName is the driver's name in jobspecs (`driver = "gpu"`); the
	// binary and its agent config block are nomad-driver-gpu.
	PluginName = "gpu"
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

type Driver struct {
	logger hclog.Logger
	// executable runs the supervisor and shim sub-commands.
	executable string

	mu    sync.Mutex
	cfg   *Config
	tasks map[string]*task

	initMu   sync.Mutex
	initDone bool
	ctx      context.Context
	cancel   context.CancelFunc
	mps      *mps.Manager
	watch    *gpuwatch.Watchdog
	invMu    sync.Mutex
	inv      Inventory
	invErr   error
	openInv  func(gpu.Config, hclog.Logger) (Inventory, error)

	events *broadcaster
}

var _ drivers.Plugin = (*Driver)(nil)

func New(logger hclog.Logger) *Driver {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Driver{
		logger:     logger,
		executable: supervisorExecutable(),
		tasks:      map[string]*task{},
		ctx:        ctx,
		cancel:     cancel,
		events:     newBroadcaster(),
		openInv: func(c gpu.Config, l hclog.Logger) (Inventory, error) {
			return gpu.Open(c, l)
		},
	}
}

// SupervisorBinary is the small per-task supervisor installed next to the
// plugin; without it the plugin binary supervises tasks itself.
const SupervisorBinary = "nomad-driver-gpu-supervisor"

func supervisorExecutable() string {
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	small := filepath.Join(filepath.Dir(exe), SupervisorBinary)
	if st, err := os.Stat(small); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
		return small
	}
	return exe
}

// SetExecutable points the supervisor at another binary (tests).
func (d *Driver) SetExecutable(path string) { d.executable = path }

func (d *Driver) Info() base.Info {
	return base.Info{Type: base.TypeDriver, Name: PluginName, Version: Version, APIVersions: []string{base.APIVersion}}
}

func (d *Driver) NewConfig() any     { return &Config{} }
func (d *Driver) NewTaskConfig() any { return &TaskConfig{} }

func (d *Driver) SetConfig(c any, _ *base.AgentConfig) error {
	cfg, ok := c.(*Config)
	if !ok {
		return fmt.Errorf("unexpected config type %T", c)
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.cfg = cfg
	return nil
}

func (d *Driver) config() *Config {
	d.mu.Lock()
	defer d.mu.Unlock()
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

// runtime starts what only a running plugin needs (not the agent's
// validation launches): state dirs, the MPS manager, the watchdog.
func (d *Driver) runtime() error {
	d.initMu.Lock()
	defer d.initMu.Unlock()
	if d.initDone {
		return nil
	}
	// A failure (say, a state_dir not yet mounted) is retried on the next
	// call rather than remembered for the plugin's lifetime.
	cfg := d.config()
	if err := os.MkdirAll(filepath.Join(cfg.StateDir, "tasks"), 0o700); err != nil {
		return fmt.Errorf("state_dir: %w", err)
	}
	m, err := mps.NewManager(mps.Config{
		ControlBinary: cfg.MPS.ControlBinary,
		PipeRoot:      cfg.MPS.PipeRoot,
		LogRoot:       cfg.MPS.LogRoot,
		StateDir:      filepath.Join(cfg.StateDir, "mps"),
	}, d.logger.Named("mps"))
	if err != nil {
		return fmt.Errorf("MPS: %w", err)
	}
	d.mps = m
	go m.Run(d.ctx, func(gpuUUID, msg string) {
		for _, t := range d.tasksUsingMPS(gpuUUID) {
			d.emit(t, msg, map[string]string{"gpu": gpuUUID})
		}
	})
	d.watch = gpuwatch.New(inventorySource{d}, cfg.WatchdogInterval, d.logger.Named("watchdog"), d.onViolation)
	go d.watch.Run(d.ctx)
	go d.publishShareUsage()
	d.initDone = true
	return nil
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

func (d *Driver) getTask(id string) *task {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.tasks[id]
}

func (d *Driver) tasksUsingMPS(gpuUUID string) []*task {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []*task
	for _, t := range d.tasks {
		for _, g := range t.state.MPSGPUs {
			if g == gpuUUID {
				out = append(out, t)
			}
		}
	}
	return out
}

// Shutdown stops the plugin's own loops; tasks keep running under their
// supervisors and are recovered by the next plugin process.
func (d *Driver) Shutdown() error {
	d.cancel()
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

// waitTimeout bounds operations that must not hang an RPC.
const waitTimeout = 30 * time.Second
