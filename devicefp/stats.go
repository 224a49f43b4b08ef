package devicefp

import (
	"time"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/gpu"
	"github.com/nomad-gpu/nomad-gpu/wire/device"
	"github.com/nomad-gpu/nomad-gpu/wire/schema"
	"github.com/nomad-gpu/nomad-gpu/wire/structs"
)

func schemaDefaults(cfg *Config) error { return schema.Decode(nil, cfg) }

// shareUsageMaxAge drops figures the driver stopped publishing (no task).
const shareUsageMaxAge = time.Minute

func (p *Plugin) collectStats(now time.Time) *device.Stats {
	m := p.model()
	out := &device.Stats{}
	smp, err := p.newSampler(now)
	if err != nil {
		return out
	}
	for _, g := range m.groups {
		if g.Type == contract.SliceLayout {
			continue // no devices: nothing to sample
		}
		gs := &device.GroupStats{Vendor: g.Vendor, Type: g.Type, Name: g.Name, Instances: make(map[string]*device.DeviceStats, len(g.Devices))}
		for _, d := range g.Devices {
			s := m.byID[d.ID]
			t := smp.telemetry(s.visibleUUID())
			if t == nil {
				continue
			}
			ds := deviceStats(s, t, now)
			if s.typ == contract.SliceMPS {
				addShareUsage(ds, s, smp.published(s.gpuUUID))
			}
			gs.Instances[d.ID] = ds
		}
		out.Groups = append(out.Groups, gs)
	}
	return out
}

// sampler reads one round of device figures, for Nomad's stats or for a
// metrics scrape: NVML's telemetry once per GPU or MIG instance (MPS shares
// of one GPU read the same) and the MPS share usage the driver publishes
// once per GPU.
type sampler struct {
	p        *Plugin
	inv      Inventory
	now      time.Time
	pipeRoot string
	tele     map[string]*gpu.Telemetry
	shares   map[string]gpu.ShareUsage // by GPU UUID; the zero value when nothing (fresh) is published
}

func (p *Plugin) newSampler(now time.Time) (*sampler, error) {
	inv, err := p.inventory()
	if err != nil {
		return nil, err
	}
	return &sampler{p: p, inv: inv, now: now, pipeRoot: p.config().MPSPipeRoot,
		tele: map[string]*gpu.Telemetry{}, shares: map[string]gpu.ShareUsage{}}, nil
}

// telemetry is the device's telemetry, nil when NVML cannot read it.
func (s *sampler) telemetry(uuid string) *gpu.Telemetry {
	if t, ok := s.tele[uuid]; ok {
		return t
	}
	t, err := s.inv.Telemetry(uuid)
	if err != nil {
		s.p.logger.Debug("telemetry unavailable", "device", uuid, "error", err)
		s.tele[uuid] = nil
		return nil
	}
	s.tele[uuid] = &t
	return &t
}

// published is what the driver last published for the GPU's MPS shares;
// the zero value when it publishes nothing (no task) or stopped.
func (s *sampler) published(gpuUUID string) gpu.ShareUsage {
	if u, ok := s.shares[gpuUUID]; ok {
		return u
	}
	u, err := gpu.ReadShareUsage(gpu.ShareUsagePath(s.pipeRoot, gpuUUID))
	if err != nil || s.now.Sub(u.UpdatedAt) > shareUsageMaxAge {
		u = gpu.ShareUsage{}
	}
	s.shares[gpuUUID] = u
	return u
}

// shareUsage is what each MPS share of the GPU uses, by share ID, as the
// driver last published it; nil when it publishes nothing (no task).
func (s *sampler) shareUsage(gpuUUID string) map[string]uint64 {
	return s.published(gpuUUID).Shares
}

// shareUtilization is an MPS share's task's utilisation of the share, in
// percent, as the driver published it: 0 for a share without a task; false
// for a share whose task the driver does not measure (a driver that
// writes no utilisation, or NVML samples no per-process utilisation).
func shareUtilization(u gpu.ShareUsage, id string) (float64, bool) {
	if v, ok := u.Util[id]; ok {
		return v, true
	}
	if _, task := u.Shares[id]; task {
		return 0, false
	}
	return 0, true
}

// deviceStats is the device's stats from its telemetry. An MPS share reads
// its GPU's telemetry, which every client of the GPU moves: its utilisation
// and memory figures go under the "Physical GPU ..." names, and
// addShareUsage adds the share's own.
func deviceStats(s *slice, t *gpu.Telemetry, now time.Time) *device.DeviceStats {
	attrs := map[string]*structs.StatValue{}
	memUsedName, gpuUtilName, memUtilName, of := contract.StatMemUsed, contract.StatGPUUtil, contract.StatMemUtil, ""
	if s.typ == contract.SliceMPS {
		memUsedName, gpuUtilName, memUtilName, of = contract.StatPhysMemUsed, contract.StatPhysGPUUtil, contract.StatPhysMemUtil, " (the physical GPU, all its MPS clients)"
	}
	used, total := int64(t.MemoryUsedMiB), int64(t.MemoryTotalMiB)
	memUsed := &structs.StatValue{IntNumerator: &used, Unit: "MiB", Desc: "GPU memory used" + of}
	if total > 0 {
		memUsed.IntDenominator = &total
	}
	attrs[memUsedName] = memUsed
	percent := func(name string, v *uint32, desc string) {
		if v != nil {
			f := float64(*v)
			attrs[name] = &structs.StatValue{FloatNumerator: &f, Unit: "%", Desc: desc}
		}
	}
	percent(gpuUtilName, t.GPUUtilPercent, "share of time a kernel ran"+of)
	percent(memUtilName, t.MemUtilPercent, "share of time device memory was read or written"+of)
	intStat := func(name string, v *uint32, unit, desc string) {
		if v != nil {
			i := int64(*v)
			attrs[name] = &structs.StatValue{IntNumerator: &i, Unit: unit, Desc: desc}
		}
	}
	intStat(contract.StatTemperature, t.TemperatureC, "C", "GPU temperature")
	intStat(contract.StatSMClock, t.SMClockMHz, "MHz", "SM clock")
	intStat(contract.StatMemClock, t.MemClockMHz, "MHz", "memory clock")
	if t.PowerMilliW != nil {
		w := float64(*t.PowerMilliW) / 1000
		attrs[contract.StatPower] = &structs.StatValue{FloatNumerator: &w, Unit: "W", Desc: "power draw"}
	}
	for name, v := range map[string]*uint64{contract.StatECCCorrected: t.ECCCorrected, contract.StatECCUncorr: t.ECCUncorrected} {
		if v != nil {
			i := int64(*v)
			attrs[name] = &structs.StatValue{IntNumerator: &i, Desc: "volatile ECC error count"}
		}
	}
	index, uuid := int64(s.gpuIndex), s.gpuUUID
	attrs[contract.StatGPUIndex] = &structs.StatValue{IntNumerator: &index, Desc: "NVML index of the physical GPU"}
	attrs[contract.StatGPUUUID] = &structs.StatValue{String: &uuid, Desc: "UUID of the physical GPU"}
	summary := memUsed
	if s.typ == contract.SliceMPS {
		th := int64(s.threadPercent)
		lim := int64(s.memLimitMiB)
		attrs[contract.StatShareThreads] = &structs.StatValue{IntNumerator: &th, Unit: "%", Desc: "SM share of this MPS share"}
		attrs[contract.StatShareMemory] = &structs.StatValue{IntNumerator: &lim, Unit: "MiB", Desc: "pinned memory limit of this MPS share"}
	}
	return &device.DeviceStats{
		Summary:   summary,
		Stats:     &structs.StatObject{Attributes: attrs},
		Timestamp: now,
	}
}

// addShareUsage adds an MPS share's own figures, what its task uses as the
// gpu driver measured it: its utilisation of the share (its SMs,
// CUDA_MPS_ACTIVE_THREAD_PERCENTAGE), as "MPS utilization" and "GPU
// utilization", where measured (neither where not: never the GPU's); its
// GPU memory, as "MPS memory used", "Memory used" and the summary. Without
// a task the share uses 0 of both.
func addShareUsage(ds *device.DeviceStats, s *slice, u gpu.ShareUsage) {
	attrs := ds.Stats.Attributes
	if pct, ok := shareUtilization(u, s.id); ok {
		own := pct
		attrs[contract.StatShareUtil] = &structs.StatValue{FloatNumerator: &pct, Unit: "%", Desc: "utilization of this share's SMs by its task"}
		attrs[contract.StatGPUUtil] = &structs.StatValue{FloatNumerator: &own, Unit: "%", Desc: "utilization of this share's SMs by its task (the GPU's: " + contract.StatPhysGPUUtil + ")"}
	}
	mem := func(desc string) *structs.StatValue {
		used, limit := int64(u.Shares[s.id]), int64(s.memLimitMiB)
		return &structs.StatValue{IntNumerator: &used, IntDenominator: &limit, Unit: "MiB", Desc: desc}
	}
	v := mem("GPU memory used by this share's task, per share")
	attrs[contract.StatShareUsed] = v
	attrs[contract.StatMemUsed] = mem("GPU memory used by this share's task, of the share's limit (the GPU's: " + contract.StatPhysMemUsed + ")")
	ds.Summary = v
}
