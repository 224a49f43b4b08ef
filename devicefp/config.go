package devicefp

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nomad-gpu/nomad-gpu/gpu"
	"github.com/nomad-gpu/nomad-gpu/internal/metrics"
	"github.com/nomad-gpu/nomad-gpu/internal/nomadaddr"
)

// Config is the `plugin "nomad-device-gpu" { config { … } }` block. Its tags
// are the schema the agent validates against (package wire/schema).
type Config struct {
	// Backend is "nvml" (the real library) or "sim" (simulated DGX node).
	Backend string `hcl:"backend" default:"nvml"`
	// FingerprintPeriod is how often devices are re-enumerated; health
	// changes from XID events are sent at once regardless.
	FingerprintPeriod time.Duration `hcl:"fingerprint_period" default:"1m"`
	// IgnoredGPUIDs hides GPUs (by index or GPU- UUID, with their slices) or
	// single MIG instances (by MIG- UUID) from Nomad.
	IgnoredGPUIDs []string `hcl:"ignored_gpu_ids"`
	// MPSPipeRoot holds one directory per shared GPU (<root>/<GPU-UUID>),
	// where that GPU's MPS control daemon puts its pipes.
	MPSPipeRoot string        `hcl:"mps_pipe_root" default:"/run/nomad-gpu/mps"`
	MPS         []MPSConfig   `hcl:"mps,blocks"`
	Health      HealthConfig  `hcl:"health,block"`
	Sim         gpu.SimConfig `hcl:"sim,block"`
	// Metrics serves Prometheus metrics of every device (off by default).
	Metrics metrics.Config `hcl:"metrics,block"`
	// Nomad is the local agent's API; with metrics on, the plugin reads
	// from it which devices this node's allocations hold.
	Nomad NomadAPIConfig `hcl:"nomad,block"`
	// Layout follows the layouts asked for each GPU in the node's metadata
	// (docs/design/gpu-layouts.md; layout.go).
	Layout LayoutConfig `hcl:"layout,block"`
}

// LayoutConfig is the `layout { }` block: whether and how the plugin
// follows the desired GPU layouts in the node's metadata.
type LayoutConfig struct {
	// Enabled makes the plugin read nomad_gpu.pin.<GPU-UUID> and
	// nomad_gpu.layout.<GPU-UUID> from the local agent and relay GPUs out
	// once no allocation holds them. Off, every GPU keeps its configured
	// layout.
	Enabled bool `hcl:"enabled"`
	// Poll is how often the node's metadata is read (it has no blocking
	// query).
	Poll time.Duration `hcl:"poll" default:"2s"`
	// DrainGrace is how long a GPU's instances are refused and unhealthy
	// before it is switched: placements the scheduler made before it saw
	// them unhealthy reach Reserve, fail and end within it.
	DrainGrace time.Duration `hcl:"drain_grace" default:"3s"`
	// StateFile keeps the whole and MPS layouts the plugin applied (those
	// differing from the mps blocks) across agent restarts.
	StateFile string `hcl:"state_file" default:"/var/lib/nomad-gpu/device/layouts.json"`
}

// NomadAPIConfig is how the plugin reaches the local Nomad agent's API.
type NomadAPIConfig struct {
	Address string `hcl:"address" default:"http://127.0.0.1:4646"`
	// Token is an ACL token, where ACLs are on: node:read and read-job in
	// the namespaces whose allocations should be named (agent:read lets
	// the plugin find its node by ID rather than by name).
	Token string `hcl:"token"`
}

// MPSConfig offers the listed GPUs as MPS shares instead of whole GPUs.
type MPSConfig struct {
	// GPUs are indexes or GPU- UUIDs of GPUs with MIG disabled: MPS shares
	// are not offered inside MIG instances, and SetConfig refuses a GPU
	// that is in MIG mode. "all" means every GPU not in MIG mode.
	GPUs   []string `hcl:"gpus"`
	Shares int      `hcl:"shares" default:"2"`
}

// HealthConfig says which NVML XID events make a device unhealthy.
type HealthConfig struct {
	// Enabled false turns XID watching off (devices stay healthy unless NVML
	// itself fails).
	Enabled bool `hcl:"enabled" default:"true"`
	// IgnoredXIDs are application-caused XIDs that say nothing about the
	// device; the default is the list NVIDIA's Kubernetes plugin ignores.
	IgnoredXIDs []uint64 `hcl:"ignored_xids" default:"[13, 31, 43, 45, 68, 109]"`
	// CriticalXIDs, when set, is the only list that counts.
	CriticalXIDs []uint64 `hcl:"critical_xids"`
}

const (
	minFingerprintPeriod = time.Second
	minLayoutPoll        = 100 * time.Millisecond
	maxLayoutPoll        = time.Minute
	maxDrainGrace        = 5 * time.Minute
	maxShares            = 48 // MPS allows at most 48 clients per GPU (Volta+)
)

// Validate checks everything that can be checked without a GPU, with errors
// that name the key and what is allowed.
func (c *Config) Validate() error {
	switch c.Backend {
	case "nvml", "sim":
	default:
		return fmt.Errorf("backend: %q is not a backend; allowed: \"nvml\", \"sim\"", c.Backend)
	}
	if c.FingerprintPeriod < minFingerprintPeriod {
		return fmt.Errorf("fingerprint_period: %s is too short; use at least %s", c.FingerprintPeriod, minFingerprintPeriod)
	}
	ignored := map[string]int{}
	for i, id := range c.IgnoredGPUIDs {
		ref, err := parseGPURef(id)
		if err != nil {
			return fmt.Errorf("ignored_gpu_ids[%d]: %v", i, err)
		}
		if prev, dup := ignored[ref.key()]; dup {
			return fmt.Errorf("ignored_gpu_ids[%d]: %q is already listed as ignored_gpu_ids[%d]", i, id, prev)
		}
		ignored[ref.key()] = i
	}
	if c.MPSPipeRoot == "" || !strings.HasPrefix(c.MPSPipeRoot, "/") {
		return fmt.Errorf("mps_pipe_root: %q must be an absolute path", c.MPSPipeRoot)
	}
	seen := map[string]int{}
	for i, m := range c.MPS {
		if m.Shares < 2 || m.Shares > maxShares {
			return fmt.Errorf("mps[%d].shares: %d is out of range; allowed: 2 to %d", i, m.Shares, maxShares)
		}
		if len(m.GPUs) == 0 {
			return fmt.Errorf("mps[%d].gpus: list the GPUs to share (indexes, GPU- UUIDs or \"all\")", i)
		}
		for j, g := range m.GPUs {
			ref, err := parseGPURef(g)
			if err != nil {
				return fmt.Errorf("mps[%d].gpus[%d]: %v", i, j, err)
			}
			if ref.mig {
				return fmt.Errorf("mps[%d].gpus[%d]: %q is a MIG instance; MPS shares whole GPUs", i, j, g)
			}
			if prev, dup := seen[ref.key()]; dup {
				return fmt.Errorf("mps[%d].gpus[%d]: GPU %q is already shared by mps[%d]", i, j, g, prev)
			}
			seen[ref.key()] = i
		}
	}
	if _, all := seen["all"]; all && len(seen) > 1 {
		return fmt.Errorf("mps: \"all\" cannot be combined with other GPUs in mps blocks")
	}
	for i, x := range c.Health.CriticalXIDs {
		if x == 0 {
			return fmt.Errorf("health.critical_xids[%d]: XID 0 does not exist", i)
		}
	}
	if err := c.Metrics.Validate("metrics"); err != nil {
		return err
	}
	if err := nomadaddr.Check(c.Nomad.Address); err != nil {
		return fmt.Errorf("nomad.address: %v", err)
	}
	if err := c.Layout.validate(); err != nil {
		return err
	}
	return c.gpuConfig().Validate()
}

func (l *LayoutConfig) validate() error {
	if l.Poll < minLayoutPoll || l.Poll > maxLayoutPoll {
		return fmt.Errorf("layout.poll: %s is out of range; allowed: 100ms to 1m", l.Poll)
	}
	if l.DrainGrace < 0 || l.DrainGrace > maxDrainGrace {
		return fmt.Errorf("layout.drain_grace: %s is out of range; allowed: 0s to 5m", l.DrainGrace)
	}
	if !filepath.IsAbs(l.StateFile) || strings.HasSuffix(l.StateFile, "/") {
		return fmt.Errorf("layout.state_file: %q must be an absolute path to a file", l.StateFile)
	}
	return nil
}

func (c *Config) gpuConfig() gpu.Config {
	return gpu.Config{Backend: c.Backend, Sim: c.Sim}
}

// gpuRef names a GPU or MIG instance as operators write it in config.
type gpuRef struct {
	all   bool
	index int
	uuid  string
	mig   bool
}

func (r gpuRef) key() string {
	switch {
	case r.all:
		return "all"
	case r.uuid != "":
		return r.uuid
	}
	return strconv.Itoa(r.index)
}

func (r gpuRef) matches(index int, uuid string) bool {
	if r.all {
		return true
	}
	if r.uuid != "" {
		return r.uuid == uuid
	}
	return r.index == index
}

func parseGPURef(s string) (gpuRef, error) {
	s = strings.TrimSpace(s)
	switch {
	case s == "all":
		return gpuRef{all: true}, nil
	case strings.HasPrefix(s, "GPU-"):
		return gpuRef{uuid: s}, nil
	case strings.HasPrefix(s, "MIG-"):
		return gpuRef{uuid: s, mig: true}, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return gpuRef{}, fmt.Errorf("%q is not a GPU; use an index (0, 1, …), a GPU- or MIG- UUID, or \"all\"", s)
	}
	return gpuRef{index: n}, nil
}

// xidPolicy decides whether an XID marks a device unhealthy.
type xidPolicy struct {
	critical map[uint64]bool
	ignored  map[uint64]bool
}

func newXIDPolicy(h HealthConfig) xidPolicy {
	p := xidPolicy{ignored: map[uint64]bool{}}
	for _, x := range h.IgnoredXIDs {
		p.ignored[x] = true
	}
	if len(h.CriticalXIDs) > 0 {
		p.critical = map[uint64]bool{}
		for _, x := range h.CriticalXIDs {
			p.critical[x] = true
		}
	}
	return p
}

func (p xidPolicy) counts(xid uint64) bool {
	if p.critical != nil {
		return p.critical[xid]
	}
	return !p.ignored[xid]
}
