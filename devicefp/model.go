package devicefp

import (
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/contract/gpulayout"
	"github.com/nomad-gpu/nomad-gpu/gpu"
	"github.com/nomad-gpu/nomad-gpu/wire/device"
	"github.com/nomad-gpu/nomad-gpu/wire/structs"
)

// slice is one device as Nomad schedules it: a whole GPU, a MIG instance or
// an MPS share of a GPU.
type slice struct {
	id        string
	typ       string
	groupName string
	gpuIndex  int
	gpuUUID   string // the physical GPU
	migUUID   string // set for MIG instances
	giID      int    // MIG GPU instance and compute instance, for /dev/nvidia-caps
	ciID      int
	pciBusID  string
	// MPS share limits, per share.
	threadPercent int
	memLimitMiB   uint64
}

// visibleUUID is what CUDA_VISIBLE_DEVICES names for this slice.
func (s *slice) visibleUUID() string {
	if s.migUUID != "" {
		return s.migUUID
	}
	return s.gpuUUID
}

// model is one fingerprint: the groups Nomad sees and how to find each
// device again in Reserve and Stats.
type model struct {
	groups []*device.Group
	byID   map[string]*slice
	// signature sums up the groups, their devices' health and attributes: an
	// unchanged signature means Nomad needs no new fingerprint.
	signature string
}

// buildModel turns an NVML snapshot, the config, the current health
// verdicts and the layout manager's state into device groups. unhealthy
// maps a GPU- or MIG- UUID to the reason it is unhealthy; a GPU's reason
// also covers its slices. lay may be nil: the configured layouts, nothing
// asked, no shares known to be held.
func buildModel(snap *gpu.Snapshot, cfg *Config, unhealthy map[string]string, lay *layoutInputs) *model {
	if lay == nil {
		lay = &layoutInputs{}
	}
	b := &modelBuilder{
		snap: snap, cfg: cfg, unhealthy: unhealthy, lay: lay, ignored: ignoredRefs(cfg),
		groups: map[string]*device.Group{}, byID: map[string]*slice{},
	}
	for i := range snap.GPUs {
		g := &snap.GPUs[i]
		if g.UUID == "" || b.isIgnored(g.Index, g.UUID, false) {
			continue
		}
		reason := b.gpuReason(g)
		cur := offeredLayout(cfg, g, lay.applied)
		switch cur.Kind {
		case gpulayout.MIG:
			b.addMIG(g, reason)
		case gpulayout.MPS:
			b.addMPS(g, cur.Shares, reason)
		default:
			b.addWholeGPU(g, reason)
		}
		if lay.publish {
			b.addLayoutGroup(g, cur)
		}
	}
	return b.finish()
}

// modelBuilder holds what buildModel accumulates: groups by "type/name" and
// every slice by device ID.
type modelBuilder struct {
	snap      *gpu.Snapshot
	cfg       *Config
	unhealthy map[string]string
	lay       *layoutInputs
	ignored   []gpuRef
	groups    map[string]*device.Group
	byID      map[string]*slice
}

// ignoredRefs parses cfg.IgnoredGPUIDs, skipping entries that do not parse
// (Validate reports those).
func ignoredRefs(cfg *Config) []gpuRef {
	ignored := make([]gpuRef, 0, len(cfg.IgnoredGPUIDs))
	for _, id := range cfg.IgnoredGPUIDs {
		if r, err := parseGPURef(id); err == nil {
			ignored = append(ignored, r)
		}
	}
	return ignored
}

// isIgnored reports whether a GPU (mig false) or MIG instance (mig true) is
// hidden from Nomad.
func (b *modelBuilder) isIgnored(index int, uuid string, mig bool) bool {
	for _, r := range b.ignored {
		if r.mig == mig && r.matches(index, uuid) {
			return true
		}
	}
	return false
}

// gpuReason is why a GPU and all its slices are unhealthy, "" if they are
// not: its fault first, else a relayout about to take its instances
// away, else the controller's hold.
func (b *modelBuilder) gpuReason(g *gpu.GPU) string {
	reason := gpuFault(b.unhealthy, g)
	if reason == "" {
		reason = b.lay.status[g.UUID].drain
	}
	if reason == "" {
		reason = b.lay.holds[g.UUID]
	}
	return reason
}

// gpuFault is why g itself has failed, "" if it has not: a health
// verdict (unhealthy maps a GPU UUID to an XID's reason), else an NVML
// error reading it. Unlike a drain or a hold it is no capacity at all:
// published as the layout group's fault, and no relayout is applied to
// the GPU while it lasts.
func gpuFault(unhealthy map[string]string, g *gpu.GPU) string {
	if r := unhealthy[g.UUID]; r != "" {
		return r
	}
	if g.Err != nil {
		return "NVML: " + g.Err.Error()
	}
	return ""
}

// commonAttrs are the attributes every group of a GPU carries.
func (b *modelBuilder) commonAttrs(g *gpu.GPU) map[string]structs.Attribute {
	a := map[string]structs.Attribute{}
	if g.ComputeCapability != "" {
		a[contract.AttrComputeCapability] = structs.NewString(g.ComputeCapability)
	}
	if g.Architecture != "" {
		a[contract.AttrArchitecture] = structs.NewString(g.Architecture)
	}
	if b.snap.DriverVersion != "" {
		a[contract.AttrDriverVersion] = structs.NewString(b.snap.DriverVersion)
	}
	if b.snap.CUDAVersion != "" {
		a[contract.AttrCUDAVersion] = structs.NewString(b.snap.CUDAVersion)
	}
	return a
}

// group returns the group for typ and name, creating it on first use; only
// then is attrs called, so the first device of a group sets its attributes.
func (b *modelBuilder) group(typ, name string, attrs func() map[string]structs.Attribute) *device.Group {
	key := typ + "/" + name
	g, ok := b.groups[key]
	if !ok {
		g = &device.Group{Vendor: contract.Vendor, Type: typ, Name: name, Attributes: attrs()}
		b.groups[key] = g
	}
	return g
}

// add puts a slice's device into grp, unhealthy with the first non-empty
// reason if any.
func (b *modelBuilder) add(grp *device.Group, s *slice, reasons ...string) {
	d := &device.Device{ID: s.id, Healthy: true, PCIBusID: s.pciBusID}
	for _, r := range reasons {
		if r != "" {
			d.Healthy, d.HealthDescription = false, r
			break
		}
	}
	grp.Devices = append(grp.Devices, d)
	b.byID[s.id] = s
}

// addMIG offers each MIG instance of g that is not ignored, grouped by
// profile.
func (b *modelBuilder) addMIG(g *gpu.GPU, gpuReason string) {
	for j := range g.MIG {
		mi := &g.MIG[j]
		if mi.UUID == "" || b.isIgnored(g.Index, mi.UUID, true) {
			continue
		}
		grp := b.group(contract.SliceMIG, mi.Profile, func() map[string]structs.Attribute {
			a := b.commonAttrs(g)
			a[contract.AttrMemory] = structs.NewInt(int64(mi.MemoryMiB), "MiB")
			if mi.Multiprocessors > 0 {
				a[contract.AttrMultiprocessors] = structs.NewInt(int64(mi.Multiprocessors), "")
			}
			a[contract.AttrMIGProfile] = structs.NewString(mi.Profile)
			a[contract.AttrParentProduct] = structs.NewString(g.Name)
			a[contract.AttrParentMemory] = structs.NewInt(int64(g.MemoryMiB), "MiB")
			return a
		})
		b.add(grp, &slice{
			id: mi.UUID, typ: contract.SliceMIG, groupName: mi.Profile,
			gpuIndex: g.Index, gpuUUID: g.UUID, migUUID: mi.UUID, pciBusID: g.PCIBusID,
			giID: mi.GPUInstanceID, ciID: mi.ComputeInstanceID,
		}, gpuReason, b.unhealthy[mi.UUID])
	}
}

// addMPS offers g as the given number of MPS shares, each with an equal
// part of the GPU's threads and memory.
func (b *modelBuilder) addMPS(g *gpu.GPU, shares int, gpuReason string) {
	thread := 100 / shares
	mem := g.MemoryMiB / uint64(shares)
	// One group per GPU: Nomad fills a device request from a single
	// group, so a task's shares always sit on one GPU and so behind
	// one MPS daemon.
	grp := b.group(contract.SliceMPS, g.UUID, func() map[string]structs.Attribute {
		a := b.commonAttrs(g)
		a[contract.AttrMemory] = structs.NewInt(int64(mem), "MiB")
		if g.Multiprocessors > 0 {
			a[contract.AttrMultiprocessors] = structs.NewInt(int64(g.Multiprocessors), "")
		}
		a[contract.AttrMPSShares] = structs.NewInt(int64(shares), "")
		a[contract.AttrMPSThreadPercent] = structs.NewInt(int64(thread), "")
		a[contract.AttrMPSMemoryLimit] = structs.NewInt(int64(mem), "MiB")
		a[contract.AttrParentProduct] = structs.NewString(g.Name)
		a[contract.AttrParentMemory] = structs.NewInt(int64(g.MemoryMiB), "MiB")
		a[contract.AttrParentIndex] = structs.NewInt(int64(g.Index), "")
		a[contract.AttrSharesInUse] = structs.NewInt(int64(b.lay.sharesInUse[g.UUID]), "")
		return a
	})
	for k := 0; k < shares; k++ {
		b.add(grp, &slice{
			id: contract.ShareID(g.UUID, k), typ: contract.SliceMPS, groupName: g.UUID,
			gpuIndex: g.Index, gpuUUID: g.UUID, pciBusID: g.PCIBusID,
			threadPercent: thread, memLimitMiB: mem,
		}, gpuReason)
	}
}

// addWholeGPU offers g as one device, grouped with GPUs of the same product
// name.
func (b *modelBuilder) addWholeGPU(g *gpu.GPU, gpuReason string) {
	grp := b.group(contract.SliceGPU, g.Name, func() map[string]structs.Attribute {
		a := b.commonAttrs(g)
		a[contract.AttrMemory] = structs.NewInt(int64(g.MemoryMiB), "MiB")
		if g.Multiprocessors > 0 {
			a[contract.AttrMultiprocessors] = structs.NewInt(int64(g.Multiprocessors), "")
		}
		return a
	})
	b.add(grp, &slice{
		id: g.UUID, typ: contract.SliceGPU, groupName: g.Name,
		gpuIndex: g.Index, gpuUUID: g.UUID, pciBusID: g.PCIBusID,
	}, gpuReason)
}

// finish orders groups by key and devices by ID, so that an unchanged node
// gives the same fingerprint and signature every time.
func (b *modelBuilder) finish() *model {
	m := &model{byID: b.byID}
	var sig strings.Builder
	for _, k := range slices.Sorted(maps.Keys(b.groups)) {
		g := b.groups[k]
		sort.Slice(g.Devices, func(i, j int) bool { return g.Devices[i].ID < g.Devices[j].ID })
		m.groups = append(m.groups, g)
		writeGroupSignature(&sig, k, g)
	}
	m.signature = sig.String()
	return m
}

// writeGroupSignature writes one line for a group: its key, each device's
// health and each attribute, in a fixed order.
func writeGroupSignature(sig *strings.Builder, key string, g *device.Group) {
	sig.WriteString(key)
	for _, d := range g.Devices {
		sig.WriteString("|" + d.ID + "=" + strconv.FormatBool(d.Healthy) + ":" + d.HealthDescription)
	}
	for _, ak := range slices.Sorted(maps.Keys(g.Attributes)) {
		sig.WriteString(";" + ak + "=" + g.Attributes[ak].Text())
	}
	sig.WriteString("\n")
}

// mpsShares is the number of MPS shares configured for a GPU, 0 when it is
// offered whole. GPUs in MIG mode are never shared through MPS.
func mpsShares(cfg *Config, g *gpu.GPU) int {
	if g.MIGEnabled {
		return 0
	}
	for _, m := range cfg.MPS {
		for _, id := range m.GPUs {
			if r, err := parseGPURef(id); err == nil && !r.mig && r.matches(g.Index, g.UUID) {
				return m.Shares
			}
		}
	}
	return 0
}
