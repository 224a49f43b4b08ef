// Package gpu is nomad-gpu's GPU inventory: every GPU and MIG instance of a
// node, their static facts, live telemetry, GPU memory per process and XID
// error events. It is written once against go-nvml's nvml.Interface; the
// backend only decides which implementation of that interface it talks to:
//
//   - "nvml": the real NVIDIA Management Library (libnvidia-ml.so.1, loaded
//     at Open; building this package needs cgo);
//   - "sim": a simulated DGX node (package gpu/sim), go-nvml's mock servers
//     completed with MIG handles and instances, telemetry, processes and
//     XID injection,
//     and driven from outside through a control file (see Control) and a
//     load directory next to it (see SimLoadDir).
//
// Values NVML does not support on a device are absent (nil pointers, zero
// counts), never errors.
package gpu

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/hashicorp/go-hclog"

	"github.com/nomad-gpu/nomad-gpu/gpu/sim"
)

// Backends.
const (
	BackendNVML = "nvml"
	BackendSim  = "sim"
)

// Config selects and configures a backend.
type Config struct {
	Backend string // "nvml" (default when empty) or "sim"
	Sim     SimConfig
}

// SimConfig configures the "sim" backend; see sim.Config for the fields
// (System, Seed, MIG, ControlFile, ControlPoll).
type SimConfig = sim.Config

// MIGLayout enables MIG on some simulated GPUs and creates instances on them;
// see sim.MIGLayout (GPUs, Profiles).
type MIGLayout = sim.MIGLayout

// ErrUnknownDevice is returned (wrapped) for a UUID that names no GPU or MIG
// instance of this node.
var ErrUnknownDevice = errors.New("unknown device")

// Validate checks a config without opening anything. Errors name the field
// (`sim.system: …`, `sim.mig[0].profiles[2]: …`); several are joined, one per
// line.
func (c Config) Validate() error {
	switch c.Backend {
	case "", BackendNVML:
		// system has a default, so only the keys without one tell.
		if sc := c.Sim; sc.ControlFile != "" || len(sc.MIG) > 0 || sc.Seed != "" {
			return fmt.Errorf("sim: only used with backend = %q (backend is %q)", BackendSim, c.Backend)
		}
		return nil
	case BackendSim:
	default:
		return fmt.Errorf("backend: %q is not a backend; allowed: %s, %s", c.Backend, BackendNVML, BackendSim)
	}
	err := c.Sim.Validate()
	if err == nil {
		return nil
	}
	var lines []string
	for _, l := range strings.Split(err.Error(), "\n") {
		lines = append(lines, "sim."+l)
	}
	return errors.New(strings.Join(lines, "\n"))
}

// Open loads NVML (or builds the simulated node) and returns an inventory.
// With the nvml backend on a machine without the NVIDIA driver, it fails
// with an error saying NVML could not be loaded. logger may be nil.
func Open(cfg Config, logger hclog.Logger) (*Inventory, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	switch cfg.Backend {
	case "", BackendNVML:
		lib := nvml.New()
		if ret := lib.Init(); ret != nvml.SUCCESS {
			if ret == nvml.ERROR_LIBRARY_NOT_FOUND {
				return nil, fmt.Errorf("gpu: cannot load NVML (libnvidia-ml.so.1): %s; is the NVIDIA driver installed and its library on the loader path?", nvml.ErrorString(ret))
			}
			return nil, fmt.Errorf("gpu: NVML init failed: %s", nvml.ErrorString(ret))
		}
		return newInventory(lib, BackendNVML, logger)
	default:
		srv, err := sim.New(cfg.Sim, logger.Named("sim"))
		if err != nil {
			return nil, fmt.Errorf("gpu: %w", err)
		}
		if ret := srv.Init(); ret != nvml.SUCCESS {
			return nil, fmt.Errorf("gpu: sim init failed: %s", ret)
		}
		return newInventory(srv, BackendSim, logger)
	}
}

// Snapshot is everything enumerated at one moment.
type Snapshot struct {
	DriverVersion string // e.g. "550.54.15"
	CUDAVersion   string // e.g. "12.4"; "" when NVML does not say
	GPUs          []GPU  // by NVML index
}

// GPU is a whole GPU.
type GPU struct {
	Index             int
	UUID              string // "GPU-…"
	Name              string // NVML product name, e.g. "NVIDIA H100 80GB HBM3"
	MemoryMiB         uint64
	PCIBusID          string // sysfs form, e.g. "0000:03:00.0"
	ComputeCapability string // "9.0"
	Architecture      string // "ampere", "hopper", "blackwell", … ("" when unknown)
	Multiprocessors   int    // 0 when unknown (NVML reports it reliably for MIG devices only)
	MIGEnabled        bool
	MIG               []MIGDevice // by MIG device index; empty unless MIGEnabled
	// MIGProfiles are the GPU instance profiles the GPU can make, fewest
	// slices first: what a MIG geometry of it may hold. Empty unless
	// MIGEnabled (NVML answers only then).
	MIGProfiles []MIGProfile

	// Err is set when the GPU could not be read fully (e.g. it fell off the
	// bus). The other fields are then as far as known: from this call, or
	// else the last values this Inventory read for this GPU, MIG devices
	// included, so a failing GPU does not silently disappear. UUID is "" only
	// if it was never readable.
	Err error
}

// MIGProfile is a GPU instance profile: its name as nvidia-smi writes it
// ("3g.40gb"), its compute slices (of the GPU's 7 on A100 and H100), its
// memory, and the most instances of it the GPU holds.
type MIGProfile struct {
	Name      string
	Slices    int
	MemoryMiB uint64
	Max       int
}

// MIGDevice is one MIG instance (a compute instance on a GPU instance).
type MIGDevice struct {
	UUID              string // "MIG-…"
	ParentUUID        string
	ParentIndex       int
	Index             int    // MIG device index within the parent
	Profile           string // "1g.10gb", "1c.3g.40gb", "1g.10gb+me", as nvidia-smi names it
	MemoryMiB         uint64
	Multiprocessors   int
	GPUInstanceID     int
	ComputeInstanceID int

	// Err is set when the instance could not be read fully; the other
	// fields are then as far as known (Profile may be "").
	Err error
}

// Telemetry is a device's current state. A nil pointer means NVML does not
// report that value for the device. For a MIG instance, memory and
// utilization are the instance's own (NVML reports no utilization per
// instance on real hardware), temperature, power, clocks and ECC counts are
// those of the parent GPU.
type Telemetry struct {
	GPUUtilPercent, MemUtilPercent *uint32
	MemoryUsedMiB, MemoryTotalMiB  uint64
	TemperatureC                   *uint32
	PowerMilliW                    *uint32
	ECCCorrected, ECCUncorrected   *uint64 // volatile (since driver load) totals
	SMClockMHz, MemClockMHz        *uint32
}

// Process is a process holding GPU memory on a device.
type Process struct {
	PID     uint32
	UsedMiB uint64 // 0 when NVML cannot say
}

// Event is an XID error reported by the driver.
type Event struct {
	UUID string    // the MIG- UUID when NVML attributes the error to a MIG instance, else the GPU- UUID
	XID  uint64    // e.g. 79 (GPU has fallen off the bus), 48 (double-bit ECC)
	Time time.Time // when the inventory received it
}

// Control writes a sim node's control file; see sim.ControlState for the
// format and OpenControl.
type Control = sim.Control

// ControlState is the content of a sim control file (JSON); see
// sim.ControlState.
type ControlState = sim.ControlState

// OpenControl returns a writer for the sim control file at path.
func OpenControl(path string) *Control { return sim.OpenControl(path) }

// ReadControl reads a sim control file; a missing file is the empty state.
func ReadControl(path string) (ControlState, error) { return sim.ReadControl(path) }

// EnvSimLoadDir is the task environment variable naming a sim node's load
// directory, where `nomad-gpu sim-load` puts simulated work; see
// sim.LoadRecord.
const EnvSimLoadDir = sim.EnvLoadDir

// SimLoadDir is the load directory of the sim node with this control file
// ("<controlFile>.load"; "" without one). SimConfig.LoadDir says the same.
func SimLoadDir(controlFile string) string { return sim.LoadDir(controlFile) }

// PrepareSimLoadDir makes a sim load directory mode 1777 (see
// sim.PrepareLoadDir).
func PrepareSimLoadDir(dir string) error { return sim.PrepareLoadDir(dir) }

// SimSystems lists the simulated systems.
func SimSystems() []string { return sim.Systems() }

// SimProfiles lists the MIG profiles a simulated system accepts, ordered by
// slices then memory.
func SimProfiles(system string) []string { return sim.ProfileNames(system) }
