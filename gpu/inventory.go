package gpu

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/hashicorp/go-hclog"

	"github.com/nomad-gpu/nomad-gpu/gpu/internal/migprofile"
)

// ErrClosed is returned by an Inventory after Close.
var ErrClosed = errors.New("gpu: inventory is closed")

// NVMLError is a failed NVML call; errors.As gives the NVML return code,
// e.g. nvml.ERROR_GPU_IS_LOST.
type NVMLError struct {
	Op     string // what was asked, e.g. "memory info"
	Return nvml.Return
}

func (e *NVMLError) Error() string { return e.Op + ": " + nvml.ErrorString(e.Return) }

func nvmlErr(op string, ret nvml.Return) error { return &NVMLError{Op: op, Return: ret} }

// absent says whether a return code means "this device does not have that
// value" rather than a failure.
func absent(ret nvml.Return) bool {
	return ret == nvml.ERROR_NOT_SUPPORTED || ret == nvml.ERROR_FUNCTION_NOT_FOUND
}

// Inventory enumerates the GPUs of one node. It is safe for concurrent use.
type Inventory struct {
	lib     nvml.Interface
	backend string
	logger  hclog.Logger

	driverVersion string
	cudaVersion   string

	// life guards against use after Close: every call holds it for reading.
	life   sync.RWMutex
	closed bool

	ctx    context.Context // cancelled by Close, ends event loops
	cancel context.CancelFunc
	loops  sync.WaitGroup

	// Snapshot state, guarded by snapMu. Static facts are cached by UUID
	// (a UUID's name, memory, bus id… never change) so a periodic Snapshot
	// costs one handle, UUID and MIG-mode query per GPU and one handle and
	// UUID query per MIG device.
	snapMu  sync.Mutex
	gen     uint64
	gpus    map[string]*gpuFacts
	migs    map[string]*migFacts
	byIndex []string // UUID last seen at each index

	// Handles for Telemetry, Processes and Events, refreshed by Snapshot.
	refMu   sync.RWMutex
	refs    map[string]*devRef
	migKeys map[migKey]*migRef
}

type gpuFacts struct {
	gen           uint64
	gpu           GPU // static fields only
	memTotalBytes uint64
	complete      bool // every static fact was read
	lastMIGOn     bool
	lastMIG       []MIGDevice
	// migProfiles are read once the GPU is in MIG mode (again while
	// NVML lists none).
	migProfiles []MIGProfile
}

type migFacts struct {
	gen uint64
	mig MIGDevice // static fields only
}

type devRef struct {
	gen    uint64
	dev    nvml.Device
	parent nvml.Device // nil for a whole GPU
}

type migKey struct {
	parent string
	gi, ci uint32
}

type migRef struct {
	gen  uint64
	uuid string
}

func newInventory(lib nvml.Interface, backend string, logger hclog.Logger) (*Inventory, error) {
	inv := &Inventory{
		lib:     lib,
		backend: backend,
		logger:  logger,
		gpus:    map[string]*gpuFacts{},
		migs:    map[string]*migFacts{},
		refs:    map[string]*devRef{},
		migKeys: map[migKey]*migRef{},
	}
	inv.ctx, inv.cancel = context.WithCancel(context.Background())
	if v, ret := lib.SystemGetDriverVersion(); ret == nvml.SUCCESS {
		inv.driverVersion = v
	} else {
		logger.Warn("cannot read the driver version", "error", nvmlErr("driver version", ret))
	}
	if v, ret := lib.SystemGetCudaDriverVersion(); ret == nvml.SUCCESS {
		inv.cudaVersion = cudaVersion(v)
	} else if !absent(ret) {
		logger.Warn("cannot read the CUDA driver version", "error", nvmlErr("CUDA driver version", ret))
	}
	return inv, nil
}

// cudaVersion turns NVML's 1000*major + 10*minor into "major.minor".
func cudaVersion(v int) string {
	if v <= 0 {
		return ""
	}
	return strconv.Itoa(v/1000) + "." + strconv.Itoa(v%1000/10)
}

// Backend is "nvml" or "sim".
func (i *Inventory) Backend() string { return i.backend }

// Close stops event streams and unloads NVML. Further calls fail with
// ErrClosed. It is safe to call more than once.
func (i *Inventory) Close() error {
	i.life.Lock()
	if i.closed {
		i.life.Unlock()
		return nil
	}
	i.closed = true
	i.cancel()
	i.life.Unlock()
	// Event loops must be out of NVML before it is unloaded.
	i.loops.Wait()
	if ret := i.lib.Shutdown(); ret != nvml.SUCCESS {
		return fmt.Errorf("gpu: %w", nvmlErr("shutdown", ret))
	}
	return nil
}

// Snapshot enumerates every GPU and MIG instance now. It fails as a whole
// only when NVML cannot count the GPUs; a GPU that cannot be read is reported
// with GPU.Err set.
func (i *Inventory) Snapshot() (*Snapshot, error) {
	i.life.RLock()
	defer i.life.RUnlock()
	if i.closed {
		return nil, ErrClosed
	}
	return i.snapshot()
}

func (i *Inventory) snapshot() (*Snapshot, error) {
	i.snapMu.Lock()
	defer i.snapMu.Unlock()
	n, ret := i.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("gpu: %w", nvmlErr("device count", ret))
	}
	i.gen++
	snap := &Snapshot{DriverVersion: i.driverVersion, CUDAVersion: i.cudaVersion, GPUs: make([]GPU, n)}
	if len(i.byIndex) < n {
		i.byIndex = append(i.byIndex, make([]string, n-len(i.byIndex))...)
	}
	for idx := range snap.GPUs {
		snap.GPUs[idx] = i.readGPU(idx)
	}
	i.sweep()
	return snap, nil
}

func (i *Inventory) readGPU(idx int) GPU {
	g := GPU{Index: idx}
	dev, ret := i.lib.DeviceGetHandleByIndex(idx)
	if ret != nvml.SUCCESS {
		return i.fromCache(g, i.byIndex[idx], fmt.Errorf("GPU %d: %w", idx, nvmlErr("device handle", ret)))
	}
	uuid, ret := dev.GetUUID()
	if ret != nvml.SUCCESS {
		return i.fromCache(g, i.byIndex[idx], fmt.Errorf("GPU %d: %w", idx, nvmlErr("UUID", ret)))
	}
	i.byIndex[idx] = uuid
	f := i.gpus[uuid]
	if f == nil || !f.complete {
		nf, err := readGPUFacts(dev, uuid)
		if f == nil || err == nil {
			f = nf
			i.gpus[uuid] = f
		}
		if err != nil {
			return i.fromCache(g, uuid, fmt.Errorf("GPU %d (%s): %w", idx, uuid, err))
		}
	}
	f.gen = i.gen
	g = f.gpu
	g.Index = idx
	i.setRef(uuid, dev, nil)

	mode, _, ret := dev.GetMigMode()
	switch {
	case ret == nvml.SUCCESS:
		g.MIGEnabled = mode == nvml.DEVICE_MIG_ENABLE
	case absent(ret):
	default:
		return i.fromCache(g, uuid, fmt.Errorf("GPU %d (%s): %w", idx, uuid, nvmlErr("MIG mode", ret)))
	}
	if g.MIGEnabled {
		migs, err := i.readMIG(dev, f, idx)
		if err != nil {
			return i.fromCache(g, uuid, fmt.Errorf("GPU %d (%s): %w", idx, uuid, err))
		}
		g.MIG = migs
		if len(f.migProfiles) == 0 {
			f.migProfiles = readMIGProfiles(dev, f.memTotalBytes)
		}
		g.MIGProfiles = slices.Clone(f.migProfiles)
	}
	if f.lastMIGOn != g.MIGEnabled || !slices.Equal(f.lastMIG, g.MIG) {
		f.lastMIGOn, f.lastMIG = g.MIGEnabled, slices.Clone(g.MIG)
	}
	return g
}

// readMIGProfiles lists the GPU instance profiles a GPU in MIG mode can
// make (GetGpuInstanceProfileInfo of every profile ID; the ones it has
// no instance of are left out), fewest slices first, then by memory.
// Empty, not nil, when it makes none.
func readMIGProfiles(dev nvml.Device, memTotalBytes uint64) []MIGProfile {
	out := []MIGProfile{}
	for _, p := range migProfileInfos(dev, memTotalBytes) {
		out = append(out, p.MIGProfile)
	}
	return out
}

// migProfileInfo is a GPU instance profile under its name, with what NVML
// needs to make an instance of it.
type migProfileInfo struct {
	MIGProfile
	info nvml.GpuInstanceProfileInfo
}

// migProfileInfos is readMIGProfiles with NVML's profile infos.
func migProfileInfos(dev nvml.Device, memTotalBytes uint64) []migProfileInfo {
	var out []migProfileInfo
	for id := range nvml.GPU_INSTANCE_PROFILE_COUNT {
		info, ret := dev.GetGpuInstanceProfileInfo(id)
		if ret != nvml.SUCCESS || info.InstanceCount == 0 || info.SliceCount == 0 {
			continue
		}
		n := int(info.SliceCount)
		out = append(out, migProfileInfo{info: info, MIGProfile: MIGProfile{
			Name:   migprofile.Name(id, n, n, info.MemorySizeMB, memTotalBytes),
			Slices: n, MemoryMiB: info.MemorySizeMB, Max: int(info.InstanceCount),
		}})
	}
	slices.SortStableFunc(out, func(a, b migProfileInfo) int {
		return cmp.Or(cmp.Compare(a.Slices, b.Slices), cmp.Compare(a.MemoryMiB, b.MemoryMiB))
	})
	return out
}

// fromCache completes a GPU that failed with what this Inventory last knew
// of it, so the caller can still tell which GPU (and which MIG instances)
// went bad.
func (i *Inventory) fromCache(g GPU, uuid string, err error) GPU {
	g.Err = err
	f := i.gpus[uuid]
	if f == nil {
		if uuid != "" {
			g.UUID = uuid
		}
		return g
	}
	f.gen = i.gen
	idx := g.Index
	g.UUID, g.Name, g.MemoryMiB, g.PCIBusID = f.gpu.UUID, f.gpu.Name, f.gpu.MemoryMiB, f.gpu.PCIBusID
	g.ComputeCapability, g.Architecture, g.Multiprocessors = f.gpu.ComputeCapability, f.gpu.Architecture, f.gpu.Multiprocessors
	g.Index = idx
	if g.MIG == nil && f.lastMIGOn {
		g.MIGEnabled = true
		g.MIG = slices.Clone(f.lastMIG)
		g.MIGProfiles = slices.Clone(f.migProfiles)
		for k := range g.MIG {
			m := &g.MIG[k]
			m.ParentIndex = idx
			if mf := i.migs[m.UUID]; mf != nil {
				mf.gen = i.gen
			}
			// Keep attributing XIDs to the instances of a failing GPU.
			if m.Err == nil {
				i.setMIGKey(migKey{g.UUID, uint32(m.GPUInstanceID), uint32(m.ComputeInstanceID)}, m.UUID)
			}
		}
	}
	return g
}

// readGPUFacts reads what never changes for a GPU. On error the facts read
// so far are returned with it.
func readGPUFacts(dev nvml.Device, uuid string) (*gpuFacts, error) {
	f := &gpuFacts{gpu: GPU{UUID: uuid}}
	var errs []error
	check := func(op string, ret nvml.Return) bool {
		if ret == nvml.SUCCESS {
			return true
		}
		if !absent(ret) {
			errs = append(errs, nvmlErr(op, ret))
		}
		return false
	}
	if name, ret := dev.GetName(); check("name", ret) {
		f.gpu.Name = name
	}
	if mem, ret := dev.GetMemoryInfo(); check("memory info", ret) {
		f.memTotalBytes = mem.Total
		f.gpu.MemoryMiB = mem.Total >> 20
	}
	if pci, ret := dev.GetPciInfo(); check("PCI info", ret) {
		f.gpu.PCIBusID = PCIBusID(pci)
	}
	if major, minor, ret := dev.GetCudaComputeCapability(); check("compute capability", ret) {
		f.gpu.ComputeCapability = strconv.Itoa(major) + "." + strconv.Itoa(minor)
	}
	if arch, ret := dev.GetArchitecture(); check("architecture", ret) {
		f.gpu.Architecture = archName(arch)
	}
	// NVML documents device attributes for MIG handles only; on a whole GPU
	// any failure just leaves the SM count unknown.
	if attrs, ret := dev.GetAttributes(); ret == nvml.SUCCESS {
		f.gpu.Multiprocessors = int(attrs.MultiprocessorCount)
	}
	f.complete = len(errs) == 0
	return f, errors.Join(errs...)
}

// readMIG enumerates the MIG devices of a MIG-enabled GPU.
func (i *Inventory) readMIG(dev nvml.Device, parent *gpuFacts, parentIdx int) ([]MIGDevice, error) {
	maxN, ret := dev.GetMaxMigDeviceCount()
	if ret != nvml.SUCCESS {
		return nil, nvmlErr("max MIG device count", ret)
	}
	out := make([]MIGDevice, 0, maxN)
	for j := range maxN {
		md, ret := dev.GetMigDeviceHandleByIndex(j)
		if ret == nvml.ERROR_NOT_FOUND || ret == nvml.ERROR_INVALID_ARGUMENT {
			continue // no instance at this index
		}
		if ret != nvml.SUCCESS {
			return nil, nvmlErr("MIG device handle "+strconv.Itoa(j), ret)
		}
		uuid, ret := md.GetUUID()
		if ret != nvml.SUCCESS {
			return nil, nvmlErr("MIG device "+strconv.Itoa(j)+" UUID", ret)
		}
		f := i.migs[uuid]
		var m MIGDevice
		if f != nil {
			f.gen = i.gen
			m = f.mig
		} else {
			var err error
			m, err = readMIGFacts(dev, md, parent)
			m.UUID = uuid
			if err == nil {
				i.migs[uuid] = &migFacts{gen: i.gen, mig: m}
			} else {
				m.Err = fmt.Errorf("MIG device %d (%s): %w", j, uuid, err)
			}
		}
		m.ParentIndex, m.Index = parentIdx, j
		out = append(out, m)
		i.setRef(uuid, md, dev)
		if m.Err == nil {
			i.setMIGKey(migKey{parent.gpu.UUID, uint32(m.GPUInstanceID), uint32(m.ComputeInstanceID)}, uuid)
		}
	}
	return out, nil
}

func readMIGFacts(parent, md nvml.Device, pf *gpuFacts) (MIGDevice, error) {
	m := MIGDevice{ParentUUID: pf.gpu.UUID}
	attrs, ret := md.GetAttributes()
	if ret != nvml.SUCCESS {
		return m, nvmlErr("attributes", ret)
	}
	gi, ret := md.GetGpuInstanceId()
	if ret != nvml.SUCCESS {
		return m, nvmlErr("GPU instance id", ret)
	}
	ci, ret := md.GetComputeInstanceId()
	if ret != nvml.SUCCESS {
		return m, nvmlErr("compute instance id", ret)
	}
	m.GPUInstanceID, m.ComputeInstanceID = gi, ci
	m.Multiprocessors = int(attrs.MultiprocessorCount)
	m.MemoryMiB = attrs.MemorySizeMB
	if m.MemoryMiB == 0 {
		if mem, ret := md.GetMemoryInfo(); ret == nvml.SUCCESS {
			m.MemoryMiB = mem.Total >> 20
		}
	}
	// The GPU instance profile only adds suffixes such as "+me"; reading it
	// needs privileges the plugin may lack, so failing is not an error.
	giProfile := -1
	if inst, ret := parent.GetGpuInstanceById(gi); ret == nvml.SUCCESS {
		if info, ret := inst.GetInfo(); ret == nvml.SUCCESS {
			giProfile = int(info.ProfileId)
		}
	}
	m.Profile = migprofile.Name(giProfile, int(attrs.GpuInstanceSliceCount), int(attrs.ComputeInstanceSliceCount), m.MemoryMiB, pf.memTotalBytes)
	return m, nil
}

func (i *Inventory) setRef(uuid string, dev, parent nvml.Device) {
	i.refMu.Lock()
	defer i.refMu.Unlock()
	r := i.refs[uuid]
	if r == nil {
		r = &devRef{}
		i.refs[uuid] = r
	}
	r.gen, r.dev, r.parent = i.gen, dev, parent
}

func (i *Inventory) setMIGKey(k migKey, uuid string) {
	i.refMu.Lock()
	defer i.refMu.Unlock()
	r := i.migKeys[k]
	if r == nil {
		r = &migRef{}
		i.migKeys[k] = r
	}
	r.gen, r.uuid = i.gen, uuid
}

// sweep forgets devices the latest Snapshot did not see, so a node whose
// MIG layout changes often does not accumulate stale entries.
func (i *Inventory) sweep() {
	for k, f := range i.gpus {
		if f.gen != i.gen {
			delete(i.gpus, k)
		}
	}
	for k, f := range i.migs {
		if f.gen != i.gen {
			delete(i.migs, k)
		}
	}
	i.refMu.Lock()
	defer i.refMu.Unlock()
	for k, r := range i.refs {
		if r.gen != i.gen {
			delete(i.refs, k)
		}
	}
	for k, r := range i.migKeys {
		if r.gen != i.gen {
			delete(i.migKeys, k)
		}
	}
}

// PCIBusID returns a GPU's PCI address in the form Linux uses in sysfs
// (/sys/bus/pci/devices/0000:03:00.0), which is what Nomad matches for NUMA
// locality. NVML spells the domain with 8 hex digits and upper-case letters
// ("00000000:3B:00.0"); the domain is printed with at least 4 digits, as the
// kernel does, so a domain above ffff keeps its digits.
func PCIBusID(p nvml.PciInfo) string {
	s := cString(p.BusId[:])
	if s == "" {
		s = cString(p.BusIdLegacy[:])
	}
	if s == "" {
		return fmt.Sprintf("%04x:%02x:%02x.0", p.Domain, p.Bus, p.Device)
	}
	return NormalizePCIBusID(s)
}

// NormalizePCIBusID turns any NVML or nvidia-smi spelling of a PCI address
// into the sysfs form; a string it does not understand is returned lower-case.
func NormalizePCIBusID(s string) string {
	s = strings.ToLower(strings.TrimSpace(s))
	if strings.Count(s, ":") == 1 {
		s = "0000:" + s // no domain: domain 0
	}
	dom, rest, ok := strings.Cut(s, ":")
	if !ok {
		return s
	}
	d, err := strconv.ParseUint(dom, 16, 32)
	if err != nil {
		return s
	}
	return fmt.Sprintf("%04x:%s", d, rest)
}

func cString(b []int8) string {
	n := 0
	for n < len(b) && b[n] != 0 {
		n++
	}
	out := make([]byte, n)
	for k := range out {
		out[k] = byte(b[k])
	}
	return string(out)
}

var archNames = map[nvml.DeviceArchitecture]string{
	nvml.DEVICE_ARCH_KEPLER:    "kepler",
	nvml.DEVICE_ARCH_MAXWELL:   "maxwell",
	nvml.DEVICE_ARCH_PASCAL:    "pascal",
	nvml.DEVICE_ARCH_VOLTA:     "volta",
	nvml.DEVICE_ARCH_TURING:    "turing",
	nvml.DEVICE_ARCH_AMPERE:    "ampere",
	nvml.DEVICE_ARCH_ADA:       "ada",
	nvml.DEVICE_ARCH_HOPPER:    "hopper",
	nvml.DEVICE_ARCH_BLACKWELL: "blackwell",
	nvml.DEVICE_ARCH_RUBIN:     "rubin",
}

func archName(a nvml.DeviceArchitecture) string { return archNames[a] }
