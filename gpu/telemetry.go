package gpu

import (
	"errors"
	"fmt"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// lookup finds the handle of a GPU- or MIG- UUID: from the last Snapshot,
// else from NVML (which accepts both kinds of UUID).
func (i *Inventory) lookup(uuid string) (devRef, error) {
	i.refMu.RLock()
	r := i.refs[uuid]
	var ref devRef
	if r != nil {
		ref = *r
	}
	i.refMu.RUnlock()
	if r != nil {
		return ref, nil
	}
	dev, ret := i.lib.DeviceGetHandleByUUID(uuid)
	switch {
	case ret == nvml.ERROR_NOT_FOUND || ret == nvml.ERROR_INVALID_ARGUMENT:
		return devRef{}, fmt.Errorf("gpu: %q: %w", uuid, ErrUnknownDevice)
	case ret != nvml.SUCCESS:
		return devRef{}, fmt.Errorf("gpu: %q: %w", uuid, nvmlErr("device handle", ret))
	}
	ref.dev = dev
	if isMIG, ret := dev.IsMigDeviceHandle(); ret == nvml.SUCCESS && isMIG {
		parent, ret := dev.GetDeviceHandleFromMigDeviceHandle()
		if ret != nvml.SUCCESS {
			return devRef{}, fmt.Errorf("gpu: %q: %w", uuid, nvmlErr("parent of MIG device", ret))
		}
		ref.parent = parent
	}
	return ref, nil
}

// telemetryValues backs every pointer of one Telemetry, so a call costs one
// allocation instead of one per value.
type telemetryValues struct {
	gpuUtil, memUtil, temp, power, smClock, memClock uint32
	eccCorrected, eccUncorrected                     uint64
}

// Telemetry reads a device's current state. It fails for an unknown UUID
// (ErrUnknownDevice) or when the device cannot be queried (e.g. GPU lost); a
// value the device does not report is left nil. On error the Telemetry holds
// whatever could be read.
func (i *Inventory) Telemetry(uuid string) (Telemetry, error) {
	i.life.RLock()
	defer i.life.RUnlock()
	if i.closed {
		return Telemetry{}, ErrClosed
	}
	ref, err := i.lookup(uuid)
	if err != nil {
		return Telemetry{}, err
	}
	var (
		t     Telemetry
		v     = new(telemetryValues)
		first error
	)
	ok := func(op string, ret nvml.Return) bool {
		if ret == nvml.SUCCESS {
			return true
		}
		if !absent(ret) && first == nil {
			first = fmt.Errorf("gpu: %s: %w", uuid, nvmlErr(op, ret))
		}
		return false
	}
	if mem, ret := ref.dev.GetMemoryInfo(); ok("memory info", ret) {
		t.MemoryUsedMiB, t.MemoryTotalMiB = mem.Used>>20, mem.Total>>20
	}
	if u, ret := ref.dev.GetUtilizationRates(); ret == nvml.SUCCESS {
		v.gpuUtil, v.memUtil = u.Gpu, u.Memory
		t.GPUUtilPercent, t.MemUtilPercent = &v.gpuUtil, &v.memUtil
	} else if ref.parent == nil {
		// NVML has no utilization for MIG devices (and says so in more than
		// one way), so only a whole GPU's failure counts.
		ok("utilization", ret)
	}
	phys := ref.dev
	if ref.parent != nil {
		phys = ref.parent
	}
	if x, ret := phys.GetTemperature(nvml.TEMPERATURE_GPU); ok("temperature", ret) {
		v.temp, t.TemperatureC = x, &v.temp
	}
	if x, ret := phys.GetPowerUsage(); ok("power usage", ret) {
		v.power, t.PowerMilliW = x, &v.power
	}
	if x, ret := phys.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_CORRECTED, nvml.VOLATILE_ECC); ok("ECC corrected", ret) {
		v.eccCorrected, t.ECCCorrected = x, &v.eccCorrected
	}
	if x, ret := phys.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC); ok("ECC uncorrected", ret) {
		v.eccUncorrected, t.ECCUncorrected = x, &v.eccUncorrected
	}
	if x, ret := phys.GetClockInfo(nvml.CLOCK_SM); ok("SM clock", ret) {
		v.smClock, t.SMClockMHz = x, &v.smClock
	}
	if x, ret := phys.GetClockInfo(nvml.CLOCK_MEM); ok("memory clock", ret) {
		v.memClock, t.MemClockMHz = x, &v.memClock
	}
	return t, first
}

// valueNotAvailable is NVML's UsedGpuMemory when it cannot tell (e.g. no
// permission to see another user's process).
const valueNotAvailable = ^uint64(0)

// Processes lists the processes holding GPU memory on a device, one entry
// per PID (memory summed). For a whole GPU in MIG mode that includes the
// processes on its instances. MPS clients are listed as themselves when NVML
// reports them.
func (i *Inventory) Processes(uuid string) ([]Process, error) {
	i.life.RLock()
	defer i.life.RUnlock()
	if i.closed {
		return nil, ErrClosed
	}
	ref, err := i.lookup(uuid)
	if err != nil {
		return nil, err
	}
	procs, ret := ref.dev.GetComputeRunningProcesses()
	if ret != nvml.SUCCESS && !absent(ret) {
		return nil, fmt.Errorf("gpu: %s: %w", uuid, nvmlErr("compute processes", ret))
	}
	var out []Process
	add := func(p nvml.ProcessInfo) {
		used := p.UsedGpuMemory
		if used == valueNotAvailable {
			used = 0
		}
		for k := range out {
			if out[k].PID == p.Pid {
				out[k].UsedMiB += used >> 20
				return
			}
		}
		out = append(out, Process{PID: p.Pid, UsedMiB: used >> 20})
	}
	for _, p := range procs {
		add(p)
	}
	// Under MPS the compute list shows the MPS server; its clients come from
	// their own list. A failure there only loses that detail.
	if mps, ret := ref.dev.GetMPSComputeRunningProcesses(); ret == nvml.SUCCESS {
		for _, p := range mps {
			if !containsPID(out, p.Pid) {
				add(p)
			}
		}
	}
	return out, nil
}

func containsPID(ps []Process, pid uint32) bool {
	for _, p := range ps {
		if p.PID == pid {
			return true
		}
	}
	return false
}

// ErrNotSupported is returned (wrapped) for a value the device cannot
// report at all, e.g. per-process utilization on a GPU or MIG instance
// whose driver does not sample it.
var ErrNotSupported = errors.New("not supported by the device")

// ProcessUtilization reads each process's SM utilization on a device, in
// percent of that device's SMs (a MIG instance's own, for a MIG- UUID), by
// PID, over NVML's samples newer than since (the zero time: every sample
// NVML still holds). Several samples of one PID are averaged. A process
// that ran no kernel in that time is absent. It fails with ErrNotSupported
// (wrapped) where NVML does not sample per-process utilization on the
// device, with ErrUnknownDevice for an unknown UUID.
func (i *Inventory) ProcessUtilization(uuid string, since time.Time) (map[uint32]float64, error) {
	i.life.RLock()
	defer i.life.RUnlock()
	if i.closed {
		return nil, ErrClosed
	}
	ref, err := i.lookup(uuid)
	if err != nil {
		return nil, err
	}
	var lastSeen uint64
	if !since.IsZero() && since.UnixMicro() > 0 {
		lastSeen = uint64(since.UnixMicro())
	}
	samples, ret := ref.dev.GetProcessUtilization(lastSeen)
	switch {
	case ret == nvml.ERROR_NOT_FOUND:
		// No sample newer than lastSeen: nothing ran.
		return map[uint32]float64{}, nil
	case ret == nvml.ERROR_INSUFFICIENT_SIZE && len(samples) == 0:
		// go-nvml's answer when NVML counts no sample.
		return map[uint32]float64{}, nil
	case absent(ret):
		return nil, fmt.Errorf("gpu: %s: per-process utilization: %w", uuid, ErrNotSupported)
	case ret != nvml.SUCCESS:
		return nil, fmt.Errorf("gpu: %s: %w", uuid, nvmlErr("process utilization", ret))
	}
	sum := make(map[uint32]float64, len(samples))
	n := make(map[uint32]int, len(samples))
	for _, s := range samples {
		if lastSeen > 0 && s.TimeStamp <= lastSeen {
			continue
		}
		sum[s.Pid] += float64(s.SmUtil)
		n[s.Pid]++
	}
	for pid, c := range n {
		sum[pid] = min(100, sum[pid]/float64(c))
	}
	return sum, nil
}
