// Package devicefp is the Nomad device plugin nomad-device-gpu: it turns the
// GPU inventory into Nomad device groups (whole GPUs, MIG instances, MPS
// shares), keeps their health from XID events, samples their stats and
// prepares reservations.
package devicefp

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nomad-gpu/nomad-gpu/contract/gpulayout"
	"github.com/nomad-gpu/nomad-gpu/gpu"
	"github.com/nomad-gpu/nomad-gpu/internal/periodic"
	"github.com/nomad-gpu/nomad-gpu/wire/base"
	"github.com/nomad-gpu/nomad-gpu/wire/device"
)

const PluginName = "nomad-device-gpu"

// Version is set at build time; it must parse as a version for the agent.
var Version = "0.1.0"

// Inventory is what the plugin needs of package gpu; both backends satisfy it.
type Inventory interface {
	Snapshot() (*gpu.Snapshot, error)
	Telemetry(uuid string) (gpu.Telemetry, error)
	Events(ctx context.Context) (<-chan gpu.Event, error)
	Close() error
}

// OpenFunc opens an inventory; tests swap it to inject failures.
type OpenFunc func(gpu.Config, hclog.Logger) (Inventory, error)

func openGPU(cfg gpu.Config, logger hclog.Logger) (Inventory, error) {
	return gpu.Open(cfg, logger)
}

type Plugin struct {
	logger hclog.Logger
	open   OpenFunc

	mu        sync.Mutex
	cfg       *Config
	inv       Inventory
	current   *model
	unhealthy map[string]string // GPU-/MIG- UUID → reason, from XIDs
	lastSnap  *gpu.Snapshot
	lastErr   error
	// closed: Close ran, and no inventory is opened again (a fingerprint
	// loop still winding down would otherwise reopen, and leak, one).
	closed bool

	metrics *deviceMetrics
	layout  *layoutManager
	// wake asks the fingerprint loop for a fingerprint now (a layout
	// state changed, or the shares allocations hold); buffered, never
	// waited on.
	wake chan struct{}
}

var _ device.Plugin = (*Plugin)(nil)

func New(logger hclog.Logger) *Plugin {
	return NewWithOpener(logger, openGPU)
}

func NewWithOpener(logger hclog.Logger, open OpenFunc) *Plugin {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	p := &Plugin{logger: logger, open: open, unhealthy: map[string]string{}, wake: make(chan struct{}, 1)}
	p.metrics = newDeviceMetrics(p)
	p.layout = newLayoutManager(p)
	return p
}

func (p *Plugin) Info() base.Info {
	return base.Info{Type: base.TypeDevice, Name: PluginName, Version: Version, APIVersions: []string{base.APIVersion}}
}

func (p *Plugin) NewConfig() any { return &Config{} }

func (p *Plugin) SetConfig(c any, agent *base.AgentConfig) error {
	cfg, ok := c.(*Config)
	if !ok {
		return fmt.Errorf("unexpected config type %T", c)
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	var applied map[string]gpulayout.Layout
	if cfg.Layout.Enabled {
		// Before the first fingerprint: a restart must offer each GPU as
		// it was offered.
		var err error
		if applied, err = loadLayoutState(cfg.Layout.StateFile); err != nil {
			return err
		}
	}
	p.mu.Lock()
	prev, hadInv := p.cfg, p.inv != nil
	p.cfg = cfg
	p.mu.Unlock()
	if err := p.checkMPSGPUs(cfg); err != nil {
		// A refused config leaves the plugin as it was.
		p.mu.Lock()
		p.cfg = prev
		inv := p.inv
		if !hadInv {
			p.inv = nil
		}
		p.mu.Unlock()
		if !hadInv && inv != nil {
			inv.Close()
		}
		return err
	}
	if applied != nil {
		p.layout.setApplied(applied)
	}
	// Only the runtime launch gets the agent's config: validation
	// launches must not serve metrics.
	p.metrics.setConfig(cfg, agent != nil)
	return nil
}

// checkMPSGPUs refuses mps blocks naming a GPU that is in MIG mode: MPS
// shares are offered only on GPUs with MIG disabled, and the GPU would
// otherwise be offered as MIG instances with no word about the mps block.
// The MIG mode is known only from the inventory, so this opens it (the
// fingerprint reuses it); an inventory that cannot be read now is left to
// the fingerprint, which reports it. "all" means every GPU not in MIG mode
// and never fails.
func (p *Plugin) checkMPSGPUs(cfg *Config) error {
	named := false
	for _, m := range cfg.MPS {
		for _, id := range m.GPUs {
			if r, err := parseGPURef(id); err == nil && !r.all {
				named = true
			}
		}
	}
	if !named {
		return nil
	}
	inv, err := p.inventory()
	if err != nil {
		p.logger.Warn("cannot check the GPUs of the mps blocks now", "error", err)
		return nil
	}
	snap, err := inv.Snapshot()
	if err != nil {
		p.logger.Warn("cannot check the GPUs of the mps blocks now", "error", err)
		return nil
	}
	return mpsOnMIG(cfg, snap)
}

// mpsOnMIG is the error for the first GPU an mps block names that is in MIG
// mode in snap, nil when there is none.
func mpsOnMIG(cfg *Config, snap *gpu.Snapshot) error {
	for i, m := range cfg.MPS {
		for j, id := range m.GPUs {
			r, err := parseGPURef(id)
			if err != nil || r.all || r.mig {
				continue
			}
			for k := range snap.GPUs {
				g := &snap.GPUs[k]
				if g.UUID != "" && g.MIGEnabled && r.matches(g.Index, g.UUID) {
					return fmt.Errorf("mps[%d].gpus[%d]: GPU %d (%s) is in MIG mode; MPS shares are offered only on GPUs with MIG disabled", i, j, g.Index, g.UUID)
				}
			}
		}
	}
	return nil
}

func (p *Plugin) config() *Config {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cfg == nil {
		// Nomad may skip SetConfig for a plugin without a config block.
		cfg := &Config{}
		_ = schemaDefaults(cfg)
		p.cfg = cfg
	}
	return p.cfg
}

// inventory opens the backend once; a failure is retried on the next call.
func (p *Plugin) inventory() (Inventory, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.inv != nil {
		return p.inv, nil
	}
	if p.closed {
		return nil, errClosed
	}
	cfg := p.cfg
	inv, err := p.open(cfg.gpuConfig(), p.logger)
	if err != nil {
		return nil, err
	}
	p.inv = inv
	return inv, nil
}

// errClosed is what the inventory is after Close.
var errClosed = errors.New("the device plugin is closed")

// Close releases the inventory for good (used by tests and the inventory
// command).
func (p *Plugin) Close() error {
	p.layout.close()
	p.metrics.close()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	if p.inv == nil {
		return nil
	}
	err := p.inv.Close()
	p.inv = nil
	return err
}

// Fingerprint sends a snapshot at once, then whenever the devices or their
// health change: on every fingerprint period and on every counted XID.
func (p *Plugin) Fingerprint(ctx context.Context) (<-chan *device.Fingerprint, error) {
	cfg := p.config()
	p.metrics.activate() // only the runtime launch fingerprints
	p.layout.start()
	out := make(chan *device.Fingerprint, 1)
	go p.fingerprintLoop(ctx, cfg, out)
	return out, nil
}

func (p *Plugin) fingerprintLoop(ctx context.Context, cfg *Config, out chan<- *device.Fingerprint) {
	defer close(out)
	policy := newXIDPolicy(cfg.Health)
	var events <-chan gpu.Event
	lastSig := "\x00never"
	ticker := time.NewTicker(cfg.FingerprintPeriod)
	defer ticker.Stop()

	refresh := func(enumerate bool) {
		m := p.refresh(enumerate)
		if m.signature == lastSig {
			return
		}
		lastSig = m.signature
		select {
		case out <- &device.Fingerprint{Groups: m.groups}:
		case <-ctx.Done():
		}
	}
	subscribe := func() {
		if events != nil || !cfg.Health.Enabled {
			return
		}
		inv, err := p.inventory()
		if err != nil {
			return
		}
		ch, err := inv.Events(ctx)
		if err != nil {
			p.logger.Warn("XID events unavailable; device health comes from NVML queries only", "error", err)
			return
		}
		events = ch
	}

	refresh(true)
	subscribe()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			p.metrics.activate() // retries a metrics address that failed to bind
			subscribe()
			refresh(true)
		case <-p.wake:
			refresh(false)
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			p.metrics.xid(ev)
			if !policy.counts(ev.XID) {
				p.logger.Debug("ignoring XID event", "device", ev.UUID, "xid", ev.XID)
				continue
			}
			reason := fmt.Sprintf("XID %d (%s) at %s", ev.XID, xidDescription(ev.XID), ev.Time.UTC().Format(time.RFC3339))
			p.logger.Warn("device unhealthy", "device", ev.UUID, "xid", ev.XID, "reason", reason)
			p.mu.Lock()
			if _, already := p.unhealthy[ev.UUID]; !already {
				p.unhealthy[ev.UUID] = reason
			}
			p.mu.Unlock()
			refresh(false)
		}
	}
}

// refresh rebuilds the model, re-enumerating through NVML when asked. When
// NVML fails, the devices last seen stay listed but unhealthy with the
// reason, so allocations are not lost and the operator sees why.
func (p *Plugin) refresh(enumerate bool) *model {
	cfg := p.config()
	var snap *gpu.Snapshot
	var err error
	if enumerate || p.snapshot() == nil {
		var inv Inventory
		if inv, err = p.inventory(); err == nil {
			snap, err = inv.Snapshot()
		}
	}
	var view allocView
	if w := p.metrics.watcher(); w != nil {
		view = w.current()
	}
	lay := p.layout.inputs(cfg, view)
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case err != nil:
		if p.lastErr == nil || p.lastErr.Error() != err.Error() {
			p.logger.Error("GPU inventory failed", "error", err)
		}
		p.lastErr = err
		snap = degraded(p.lastSnap, err)
	case snap == nil:
		snap = p.lastSnap
	default:
		if p.lastErr != nil {
			p.logger.Info("GPU inventory recovered")
		}
		p.lastErr = nil
		p.lastSnap = snap
	}
	if snap == nil {
		snap = &gpu.Snapshot{}
	}
	m := buildModel(snap, cfg, p.unhealthy, lay)
	p.current = m
	return m
}

// faults is a copy of the health verdicts: GPU- or MIG- UUID → reason.
func (p *Plugin) faults() map[string]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.unhealthy)
}

func (p *Plugin) snapshot() *gpu.Snapshot {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lastSnap
}

func degraded(last *gpu.Snapshot, err error) *gpu.Snapshot {
	if last == nil {
		return nil
	}
	cp := *last
	cp.GPUs = make([]gpu.GPU, len(last.GPUs))
	for i, g := range last.GPUs {
		g.Err = fmt.Errorf("inventory failed: %w", err)
		cp.GPUs[i] = g
	}
	return &cp
}

func (p *Plugin) model() *model {
	p.mu.Lock()
	m := p.current
	p.mu.Unlock()
	if m == nil {
		m = p.refresh(true)
	}
	return m
}

// wakeFingerprint has the fingerprint loop send the current model now
// (if it changed) rather than at its next period.
func (p *Plugin) wakeFingerprint() {
	select {
	case p.wake <- struct{}{}:
	default: // one is pending already
	}
}

// Reserve hands the task its devices' environment and device nodes. The
// devices of a GPU being relaid out are refused; the others count as held
// from now (shares_in_use, and no relayout of their GPU) until the
// allocation watch sees their allocation.
func (p *Plugin) Reserve(ids []string) (*device.Reservation, error) {
	if len(ids) == 0 {
		return &device.Reservation{}, nil
	}
	track := p.metrics.watcher() != nil // only a watch ever forgets them
	at, err := p.layout.admit(ids, p.model(), track)
	if err != nil {
		return nil, err
	}
	// The model after admit: a GPU switched since the one admit looked
	// at lacks the old instances.
	res, err := p.model().reserveFor(ids, p.config(), p.logger)
	if err != nil {
		p.layout.unadmit(ids, at)
		return nil, err
	}
	if track {
		p.wakeFingerprint()
	}
	return res, nil
}

// Stats samples every fingerprinted device once per interval.
func (p *Plugin) Stats(ctx context.Context, interval time.Duration) (<-chan *device.Stats, error) {
	return periodic.Stream(ctx, interval, func() *device.Stats { return p.collectStats(time.Now()) }), nil
}

// MaxXID is the highest XID NVIDIA defines, as far as this build knows:
// ROBUST_CHANNEL_LAST_ERROR in nverror.h of the 595 drivers
// (open-gpu-kernel-modules 595.45.04). XIDs run from 1; newer drivers add
// more at the top.
const MaxXID = 176

var xidDescriptions = map[uint64]string{
	13:  "graphics engine exception",
	31:  "GPU memory page fault",
	43:  "GPU stopped processing",
	45:  "preemptive cleanup",
	48:  "double-bit ECC error",
	61:  "internal micro-controller breakpoint",
	62:  "internal micro-controller halt",
	63:  "ECC page retirement or row remapping event",
	64:  "ECC page retirement or row remapping failure",
	68:  "video processor exception",
	69:  "graphics engine class error",
	74:  "NVLink error",
	79:  "GPU has fallen off the bus",
	92:  "high single-bit ECC error rate",
	94:  "contained ECC error",
	95:  "uncontained ECC error",
	109: "context switch timeout",
	119: "GSP RPC timeout",
	120: "GSP error",
}

// XIDDescription says what an XID means, where this plugin knows.
func XIDDescription(xid uint64) string { return xidDescription(xid) }

func xidDescription(xid uint64) string {
	if d, ok := xidDescriptions[xid]; ok {
		return d
	}
	return "see NVIDIA's XID catalogue"
}

// CurrentFingerprint enumerates now and returns what Nomad would be sent;
// the `inventory` command prints it.
func (p *Plugin) CurrentFingerprint() (*device.Fingerprint, error) {
	p.config()
	m := p.refresh(true)
	p.mu.Lock()
	err := p.lastErr
	p.mu.Unlock()
	return &device.Fingerprint{Groups: m.groups}, err
}
