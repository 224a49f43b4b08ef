package devicefp

import (
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/nomad-gpu/nomad-gpu/contract"
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
	// healthy mirrors each device's health for quick comparison.
	signature string
}

// buildModel turns an NVML snapshot, the config and the current health
// verdicts into device groups. unhealthy maps a GPU- or MIG- UUID to the
// reason it is unhealthy; a GPU's reason also covers its slices.
func buildModel(snap *gpu.Snapshot, cfg *Config, unhealthy map[string]string) *model {
	m := &model{byID: map[string]*slice{}}
	groups := map[string]*device.Group{}
	ignored := make([]gpuRef, 0, len(cfg.IgnoredGPUIDs))
	for _, id := range cfg.IgnoredGPUIDs {
		if r, err := parseGPURef(id); err == nil {
			ignored = append(ignored, r)
		}
	}
	isIgnored := func(index int, uuid string, mig bool) bool {
		for _, r := range ignored {
			if r.mig == mig && r.matches(index, uuid) {
				return true
			}
		}
		return false
	}
	common := func(g *gpu.GPU) map[string]structs.Attribute {
		a := map[string]structs.Attribute{}
		if g.ComputeCapability != "" {
			a[contract.AttrComputeCapability] = structs.NewString(g.ComputeCapability)
		}
		if g.Architecture != "" {
			a[contract.AttrArchitecture] = structs.NewString(g.Architecture)
		}
		if snap.DriverVersion != "" {
			a[contract.AttrDriverVersion] = structs.NewString(snap.DriverVersion)
		}
		if snap.CUDAVersion != "" {
			a[contract.AttrCUDAVersion] = structs.NewString(snap.CUDAVersion)
		}
		return a
	}
	group := func(typ, name string, attrs func() map[string]structs.Attribute) *device.Group {
		key := typ + "/" + name
		g, ok := groups[key]
		if !ok {
			g = &device.Group{Vendor: contract.Vendor, Type: typ, Name: name, Attributes: attrs()}
			groups[key] = g
		}
		return g
	}
	add := func(g *device.Group, s *slice, reasons ...string) {
		d := &device.Device{ID: s.id, Healthy: true, PCIBusID: s.pciBusID}
		for _, r := range reasons {
			if r != "" {
				d.Healthy, d.HealthDescription = false, r
				break
			}
		}
		g.Devices = append(g.Devices, d)
		m.byID[s.id] = s
	}

	for i := range snap.GPUs {
		g := &snap.GPUs[i]
		if g.UUID == "" || isIgnored(g.Index, g.UUID, false) {
			continue
		}
		gpuReason := unhealthy[g.UUID]
		if g.Err != nil && gpuReason == "" {
			gpuReason = "NVML: " + g.Err.Error()
		}
		switch {
		case g.MIGEnabled:
			for j := range g.MIG {
				mi := &g.MIG[j]
				if mi.UUID == "" || isIgnored(g.Index, mi.UUID, true) {
					continue
				}
				grp := group(contract.SliceMIG, mi.Profile, func() map[string]structs.Attribute {
					a := common(g)
					a[contract.AttrMemory] = structs.NewInt(int64(mi.MemoryMiB), "MiB")
					if mi.Multiprocessors > 0 {
						a[contract.AttrMultiprocessors] = structs.NewInt(int64(mi.Multiprocessors), "")
					}
					a[contract.AttrMIGProfile] = structs.NewString(mi.Profile)
					a[contract.AttrParentProduct] = structs.NewString(g.Name)
					a[contract.AttrParentMemory] = structs.NewInt(int64(g.MemoryMiB), "MiB")
					return a
				})
				add(grp, &slice{
					id: mi.UUID, typ: contract.SliceMIG, groupName: mi.Profile,
					gpuIndex: g.Index, gpuUUID: g.UUID, migUUID: mi.UUID, pciBusID: g.PCIBusID,
					giID: mi.GPUInstanceID, ciID: mi.ComputeInstanceID,
				}, gpuReason, unhealthy[mi.UUID])
			}
		case mpsShares(cfg, g) > 0:
			shares := mpsShares(cfg, g)
			thread := 100 / shares
			mem := g.MemoryMiB / uint64(shares)
			// One group per GPU: Nomad fills a device request from a single
			// group, so a task's shares always sit on one GPU and so behind
			// one MPS daemon.
			grp := group(contract.SliceMPS, g.UUID, func() map[string]structs.Attribute {
				a := common(g)
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
				return a
			})
			for k := 0; k < shares; k++ {
				add(grp, &slice{
					id: contract.ShareID(g.UUID, k), typ: contract.SliceMPS, groupName: g.UUID,
					gpuIndex: g.Index, gpuUUID: g.UUID, pciBusID: g.PCIBusID,
					threadPercent: thread, memLimitMiB: mem,
				}, gpuReason)
			}
		default:
			grp := group(contract.SliceGPU, g.Name, func() map[string]structs.Attribute {
				a := common(g)
				a[contract.AttrMemory] = structs.NewInt(int64(g.MemoryMiB), "MiB")
				if g.Multiprocessors > 0 {
					a[contract.AttrMultiprocessors] = structs.NewInt(int64(g.Multiprocessors), "")
				}
				return a
			})
			add(grp, &slice{
				id: g.UUID, typ: contract.SliceGPU, groupName: g.Name,
				gpuIndex: g.Index, gpuUUID: g.UUID, pciBusID: g.PCIBusID,
			}, gpuReason)
		}
	}

	keys := slices.Sorted(maps.Keys(groups))
	var sig strings.Builder
	for _, k := range keys {
		g := groups[k]
		sort.Slice(g.Devices, func(a, b int) bool { return g.Devices[a].ID < g.Devices[b].ID })
		m.groups = append(m.groups, g)
		sig.WriteString(k)
		for _, d := range g.Devices {
			sig.WriteString("|" + d.ID + "=" + strconv.FormatBool(d.Healthy) + ":" + d.HealthDescription)
		}
		for _, ak := range slices.Sorted(maps.Keys(g.Attributes)) {
			sig.WriteString(";" + ak + "=" + g.Attributes[ak].Text())
		}
		sig.WriteString("\n")
	}
	m.signature = sig.String()
	return m
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
