package sim

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// Device is a simulated whole GPU: the go-nvml mock device (name,
// architecture, compute capability, MIG mode, GPU/compute instances) plus
// what the mock lacks. Methods are defined here rather than through the
// mock's Func fields because the mock records every call with its arguments,
// which would grow without bound in a long-running sim node.
type Device struct {
	*server.Device
	srv  *Server
	uuid string
	pci  nvml.PciInfo
	name string
	// migs are the MIG device handles, by MIG device index; guarded by
	// srv.migMu, rebuilt whole by refreshMIG.
	migs []*MigDevice
	// made numbers the GPU instances in the order they were made; guarded
	// by the mock device's lock, as its GpuInstances map.
	made  map[*server.GpuInstance]uint64
	madeN uint64
}

var _ nvml.Device = (*Device)(nil)

func newDevice(s *Server, md *server.Device, index int, seed string) *Device {
	bus := s.sys.busIDs[index]
	d := &Device{
		Device: md,
		srv:    s,
		uuid:   gpuUUID(s.sys.name, seed, index),
		name:   s.sys.productName(),
		made:   map[*server.GpuInstance]uint64{},
		pci: nvml.PciInfo{
			Domain:      0,
			Bus:         bus,
			Device:      0,
			PciDeviceId: md.Config.PciDeviceId,
		},
	}
	// NVML spells the domain with 8 hex digits and upper case; the inventory
	// must turn that into the sysfs form, so the sim gives it the real thing.
	setCString(d.pci.BusId[:], fmt.Sprintf("%08X:%02X:00.0", 0, bus))
	setCString(d.pci.BusIdLegacy[:], fmt.Sprintf("%04X:%02X:00.0", 0, bus))
	md.UUID = d.uuid
	md.PciBusID = busIDString(d.pci.BusIdLegacy[:])
	return d
}

func setCString(dst []int8, s string) {
	for i := range dst {
		dst[i] = 0
	}
	for i := 0; i < len(s) && i < len(dst)-1; i++ {
		dst[i] = int8(s[i])
	}
}

func busIDString(id []int8) string {
	b := make([]byte, 0, len(id))
	for _, c := range id {
		if c == 0 {
			break
		}
		b = append(b, byte(c))
	}
	return string(b)
}

// createMIG enables MIG and creates the layout's instances.
func (d *Device) createMIG(profiles []string) error {
	if ret, _ := d.Device.SetMigMode(nvml.DEVICE_MIG_ENABLE); ret != nvml.SUCCESS {
		return fmt.Errorf("enable MIG: %v", ret)
	}
	return d.build(profiles)
}

func (d *Device) lost() bool { return d.srv.view.Load().lostGPUs[d.uuid] }

// GetUUID works on a lost GPU too, so the inventory can still say which GPU
// failed.
func (d *Device) GetUUID() (string, nvml.Return) { return d.uuid, nvml.SUCCESS }

func (d *Device) GetName() (string, nvml.Return) {
	if d.lost() {
		return "", nvml.ERROR_GPU_IS_LOST
	}
	return d.name, nvml.SUCCESS
}

func (d *Device) GetArchitecture() (nvml.DeviceArchitecture, nvml.Return) {
	if d.lost() {
		return 0, nvml.ERROR_GPU_IS_LOST
	}
	return d.Device.GetArchitecture()
}

func (d *Device) GetCudaComputeCapability() (int, int, nvml.Return) {
	if d.lost() {
		return 0, 0, nvml.ERROR_GPU_IS_LOST
	}
	return d.Device.GetCudaComputeCapability()
}

func (d *Device) GetPciInfo() (nvml.PciInfo, nvml.Return) {
	if d.lost() {
		return nvml.PciInfo{}, nvml.ERROR_GPU_IS_LOST
	}
	return d.pci, nvml.SUCCESS
}

func (d *Device) GetMemoryInfo() (nvml.Memory, nvml.Return) {
	if d.lost() {
		return nvml.Memory{}, nvml.ERROR_GPU_IS_LOST
	}
	return memory(d.Config.MemoryMB<<20, d.srv.view.Load().usedBytes[d.uuid]), nvml.SUCCESS
}

func memory(total, usedBytes uint64) nvml.Memory {
	used := min(usedBytes, total)
	return nvml.Memory{Total: total, Used: used, Free: total - used}
}

// GetAttributes answers for the whole GPU too (NVML documents it for MIG
// handles only, so the inventory treats a failure as "unknown").
func (d *Device) GetAttributes() (nvml.DeviceAttributes, nvml.Return) {
	if d.lost() {
		return nvml.DeviceAttributes{}, nvml.ERROR_GPU_IS_LOST
	}
	return nvml.DeviceAttributes{MultiprocessorCount: d.srv.sys.sms, MemorySizeMB: d.Config.MemoryMB}, nvml.SUCCESS
}

func (d *Device) GetMigMode() (int, int, nvml.Return) {
	if d.lost() {
		return 0, 0, nvml.ERROR_GPU_IS_LOST
	}
	return d.Device.GetMigMode()
}

func (d *Device) migEnabled() bool {
	cur, _, _ := d.Device.GetMigMode()
	return cur == nvml.DEVICE_MIG_ENABLE
}

func (d *Device) GetMaxMigDeviceCount() (int, nvml.Return) {
	if d.lost() {
		return 0, nvml.ERROR_GPU_IS_LOST
	}
	if !d.migEnabled() {
		return 0, nvml.SUCCESS
	}
	return maxSlices, nvml.SUCCESS
}

func (d *Device) GetMigDeviceHandleByIndex(i int) (nvml.Device, nvml.Return) {
	if d.lost() {
		return nil, nvml.ERROR_GPU_IS_LOST
	}
	if !d.migEnabled() {
		return nil, nvml.ERROR_NOT_SUPPORTED
	}
	if i < 0 || i >= maxSlices {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	d.srv.migMu.RLock()
	defer d.srv.migMu.RUnlock()
	if i >= len(d.migs) {
		return nil, nvml.ERROR_NOT_FOUND
	}
	return d.migs[i], nvml.SUCCESS
}

func (d *Device) IsMigDeviceHandle() (bool, nvml.Return) { return false, nvml.SUCCESS }

func (d *Device) GetDeviceHandleFromMigDeviceHandle() (nvml.Device, nvml.Return) {
	return nil, nvml.ERROR_INVALID_ARGUMENT
}

func (d *Device) GetGpuInstanceId() (int, nvml.Return)     { return 0, nvml.ERROR_NOT_SUPPORTED }
func (d *Device) GetComputeInstanceId() (int, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }

func (d *Device) utilization() nvml.Utilization { return d.srv.view.Load().util[d.uuid] }

func (d *Device) GetUtilizationRates() (nvml.Utilization, nvml.Return) {
	if d.lost() {
		return nvml.Utilization{}, nvml.ERROR_GPU_IS_LOST
	}
	return d.utilization(), nvml.SUCCESS
}

func (d *Device) GetTemperature(sensor nvml.TemperatureSensors) (uint32, nvml.Return) {
	if d.lost() {
		return 0, nvml.ERROR_GPU_IS_LOST
	}
	if sensor != nvml.TEMPERATURE_GPU {
		return 0, nvml.ERROR_NOT_SUPPORTED
	}
	return d.srv.sys.idleTempC + d.utilization().Gpu*45/100, nvml.SUCCESS
}

// GetPowerUsage is in milliwatts, as in NVML.
func (d *Device) GetPowerUsage() (uint32, nvml.Return) {
	if d.lost() {
		return 0, nvml.ERROR_GPU_IS_LOST
	}
	sys := d.srv.sys
	return (sys.idleW + (sys.maxW-sys.idleW)*d.utilization().Gpu/100) * 1000, nvml.SUCCESS
}

func (d *Device) GetTotalEccErrors(nvml.MemoryErrorType, nvml.EccCounterType) (uint64, nvml.Return) {
	if d.lost() {
		return 0, nvml.ERROR_GPU_IS_LOST
	}
	return 0, nvml.SUCCESS
}

func (d *Device) GetClockInfo(clock nvml.ClockType) (uint32, nvml.Return) {
	if d.lost() {
		return 0, nvml.ERROR_GPU_IS_LOST
	}
	switch clock {
	case nvml.CLOCK_SM, nvml.CLOCK_GRAPHICS:
		if d.utilization().Gpu > 0 {
			return d.srv.sys.smMHz[1], nvml.SUCCESS
		}
		return d.srv.sys.smMHz[0], nvml.SUCCESS
	case nvml.CLOCK_MEM:
		return d.srv.sys.memMHz, nvml.SUCCESS
	}
	return 0, nvml.ERROR_NOT_SUPPORTED
}

// GetComputeRunningProcesses lists the processes on the GPU, including those
// on its MIG instances (with their instance ids), as NVML does for a
// privileged caller.
func (d *Device) GetComputeRunningProcesses() ([]nvml.ProcessInfo, nvml.Return) {
	if d.lost() {
		return nil, nvml.ERROR_GPU_IS_LOST
	}
	return copyProcs(d.srv.view.Load().procs[d.uuid]), nvml.SUCCESS
}

// GetMPSComputeRunningProcesses is empty: the sim does not tell MPS clients
// from other processes.
func (d *Device) GetMPSComputeRunningProcesses() ([]nvml.ProcessInfo, nvml.Return) {
	if d.lost() {
		return nil, nvml.ERROR_GPU_IS_LOST
	}
	return nil, nvml.SUCCESS
}

// GetProcessUtilization reports, per process with a live load record of
// known pid, the utilisation its load puts on the GPU (for a MIG-mode GPU,
// what its instances' loads put on it, weighted by their share of the
// slices), with the samples newer than lastSeenTimestamp (microseconds
// since the epoch, as NVML's); ERROR_NOT_FOUND when there are none, as in
// NVML.
func (d *Device) GetProcessUtilization(lastSeenTimestamp uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
	if d.lost() {
		return nil, nvml.ERROR_GPU_IS_LOST
	}
	return samplesSince(d.srv.view.Load().procUtil[d.uuid], lastSeenTimestamp)
}

func samplesSince(all []nvml.ProcessUtilizationSample, lastSeen uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
	var out []nvml.ProcessUtilizationSample
	for _, s := range all {
		if s.TimeStamp > lastSeen {
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		return nil, nvml.ERROR_NOT_FOUND
	}
	return out, nvml.SUCCESS
}

func copyProcs(p []nvml.ProcessInfo) []nvml.ProcessInfo {
	if len(p) == 0 {
		return nil
	}
	return append([]nvml.ProcessInfo(nil), p...)
}

const simEventTypes = nvml.EventTypeXidCriticalError | nvml.EventTypeSingleBitEccError | nvml.EventTypeDoubleBitEccError

func (d *Device) GetSupportedEventTypes() (uint64, nvml.Return) {
	if d.lost() {
		return 0, nvml.ERROR_GPU_IS_LOST
	}
	return simEventTypes, nvml.SUCCESS
}

func (d *Device) RegisterEvents(mask uint64, set nvml.EventSet) nvml.Return {
	if d.lost() {
		return nvml.ERROR_GPU_IS_LOST
	}
	es, ok := set.(*EventSet)
	if !ok || es.srv != d.srv {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	if mask&^simEventTypes != 0 {
		return nvml.ERROR_NOT_SUPPORTED
	}
	return es.register(d, mask)
}

// MigDevice is a MIG device handle, which the go-nvml mock does not have:
// one per compute instance, with its own MIG- UUID.
type MigDevice struct {
	*mock.Device // unimplemented methods panic, as a reminder to add them here
	parent       *Device
	index        int
	uuid         string
	gi, ci       uint32
	profile      string
	giProfile    nvml.GpuInstanceProfileInfo
	ciProfile    nvml.ComputeInstanceProfileInfo
}

var _ nvml.Device = (*MigDevice)(nil)

func (m *MigDevice) lost() bool { return m.parent.lost() }

func (m *MigDevice) GetUUID() (string, nvml.Return) { return m.uuid, nvml.SUCCESS }

// GetName is what NVML reports for a MIG device: parent name and profile.
func (m *MigDevice) GetName() (string, nvml.Return) {
	if m.lost() {
		return "", nvml.ERROR_GPU_IS_LOST
	}
	return m.parent.name + " MIG " + m.profile, nvml.SUCCESS
}

func (m *MigDevice) IsMigDeviceHandle() (bool, nvml.Return) { return true, nvml.SUCCESS }

func (m *MigDevice) GetDeviceHandleFromMigDeviceHandle() (nvml.Device, nvml.Return) {
	return m.parent, nvml.SUCCESS
}

func (m *MigDevice) GetIndex() (int, nvml.Return) { return m.index, nvml.SUCCESS }

func (m *MigDevice) GetGpuInstanceId() (int, nvml.Return) {
	if m.lost() {
		return 0, nvml.ERROR_GPU_IS_LOST
	}
	return int(m.gi), nvml.SUCCESS
}

func (m *MigDevice) GetComputeInstanceId() (int, nvml.Return) {
	if m.lost() {
		return 0, nvml.ERROR_GPU_IS_LOST
	}
	return int(m.ci), nvml.SUCCESS
}

func (m *MigDevice) GetAttributes() (nvml.DeviceAttributes, nvml.Return) {
	if m.lost() {
		return nvml.DeviceAttributes{}, nvml.ERROR_GPU_IS_LOST
	}
	return nvml.DeviceAttributes{
		MultiprocessorCount:       m.ciProfile.MultiprocessorCount,
		SharedCopyEngineCount:     m.ciProfile.SharedCopyEngineCount,
		SharedDecoderCount:        m.ciProfile.SharedDecoderCount,
		SharedEncoderCount:        m.ciProfile.SharedEncoderCount,
		SharedJpegCount:           m.ciProfile.SharedJpegCount,
		SharedOfaCount:            m.ciProfile.SharedOfaCount,
		GpuInstanceSliceCount:     m.giProfile.SliceCount,
		ComputeInstanceSliceCount: m.ciProfile.SliceCount,
		MemorySizeMB:              m.giProfile.MemorySizeMB,
	}, nvml.SUCCESS
}

func (m *MigDevice) GetMemoryInfo() (nvml.Memory, nvml.Return) {
	if m.lost() {
		return nvml.Memory{}, nvml.ERROR_GPU_IS_LOST
	}
	return memory(m.giProfile.MemorySizeMB<<20, m.parent.srv.view.Load().usedBytes[m.uuid]), nvml.SUCCESS
}

// GetUtilizationRates answers from the control file and the loads; real
// NVML reports "not supported" for MIG devices.
func (m *MigDevice) GetUtilizationRates() (nvml.Utilization, nvml.Return) {
	if m.lost() {
		return nvml.Utilization{}, nvml.ERROR_GPU_IS_LOST
	}
	return m.parent.srv.view.Load().util[m.uuid], nvml.SUCCESS
}

// Sensors and clocks belong to the physical GPU; NVML has none per instance.
func (m *MigDevice) GetTemperature(nvml.TemperatureSensors) (uint32, nvml.Return) {
	return 0, nvml.ERROR_NOT_SUPPORTED
}
func (m *MigDevice) GetPowerUsage() (uint32, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
func (m *MigDevice) GetClockInfo(nvml.ClockType) (uint32, nvml.Return) {
	return 0, nvml.ERROR_NOT_SUPPORTED
}
func (m *MigDevice) GetTotalEccErrors(nvml.MemoryErrorType, nvml.EccCounterType) (uint64, nvml.Return) {
	return 0, nvml.ERROR_NOT_SUPPORTED
}

func (m *MigDevice) GetComputeRunningProcesses() ([]nvml.ProcessInfo, nvml.Return) {
	if m.lost() {
		return nil, nvml.ERROR_GPU_IS_LOST
	}
	return copyProcs(m.parent.srv.view.Load().procs[m.uuid]), nvml.SUCCESS
}

func (m *MigDevice) GetMPSComputeRunningProcesses() ([]nvml.ProcessInfo, nvml.Return) {
	if m.lost() {
		return nil, nvml.ERROR_GPU_IS_LOST
	}
	return nil, nvml.SUCCESS
}

// GetProcessUtilization reports the utilisation each load of known pid puts
// on the instance, in percent of the instance's own SMs (see the Device
// method). Real NVML may not support it on MIG devices.
func (m *MigDevice) GetProcessUtilization(lastSeenTimestamp uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
	if m.lost() {
		return nil, nvml.ERROR_GPU_IS_LOST
	}
	return samplesSince(m.parent.srv.view.Load().procUtil[m.uuid], lastSeenTimestamp)
}
