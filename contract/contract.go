// Package contract is the contract between the two plugins of this
// repository: the nomad-device-gpu device plugin (devicefp), which offers
// GPUs, MIG instances and MPS shares to Nomad and writes a task's reservation
// into its environment, and the gpu task driver (driver), which reads that
// environment to confine the task, run its MPS daemon and watch its GPU
// memory. The two are built and may be upgraded separately, so they meet
// only through the names and formats below, which docs/contracts.md
// section documents for users as well.
//
// Changing any value here is a breaking change: a device plugin and a driver
// built from different versions would silently misread each other, and
// jobspecs that name devices or attributes would stop matching.
//
// The package is a leaf: it imports nothing of this module.
package contract

import (
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Vendor and slice types name devices in jobspecs: device "nvidia/gpu",
// "nvidia/mig/<profile>", "nvidia/mps". A device's Nomad type is its slice
// type, which is also what NOMAD_GPU_SLICE_TYPE holds.
const (
	Vendor   = "nvidia"
	SliceGPU = "gpu" // a whole GPU
	SliceMIG = "mig" // a MIG instance
	SliceMPS = "mps" // an MPS share of a GPU
)

// DriverName is the task driver's name in jobspecs (`driver = "gpu"`):
// the controller reads a job's tasks by it (a task of this driver with a
// `checkpoint` block, DriverCheckpointBlock, can be moved).
const (
	DriverName            = "gpu"
	DriverCheckpointBlock = "checkpoint"
)

// Task environment the device plugin's Reserve sets, per device request.
const (
	// EnvCUDAVisibleDevices and EnvNvidiaVisibleDevices list the task's GPU-
	// and MIG- UUIDs (MPS: the shared GPU's), comma-separated, in GPU index
	// order: position i is CUDA device ordinal i.
	EnvCUDAVisibleDevices   = "CUDA_VISIBLE_DEVICES"
	EnvNvidiaVisibleDevices = "NVIDIA_VISIBLE_DEVICES"
	// EnvMPSPipeDirectory is MPSPipeDir(<mps_pipe_root>, <GPU-UUID>): the
	// shared GPU's MPS daemon.
	EnvMPSPipeDirectory = "CUDA_MPS_PIPE_DIRECTORY"
	// EnvMPSThreadPercentage is the task's SM share in percent, summed over
	// its shares.
	EnvMPSThreadPercentage = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
	// EnvMPSPinnedMemLimit is the task's device memory limit per CUDA
	// ordinal, in FormatPinnedMemLimit's format.
	EnvMPSPinnedMemLimit = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
	// EnvDeviceIDs lists the Nomad device IDs reserved, comma-separated
	// (Nomad never passes device IDs to task drivers itself).
	EnvDeviceIDs = "NOMAD_GPU_DEVICE_IDS"
	// EnvSliceType is SliceGPU, SliceMIG or SliceMPS.
	EnvSliceType = "NOMAD_GPU_SLICE_TYPE"
)

// NvidiaVisibleDevicesNone is the NVIDIA_VISIBLE_DEVICES value that gives a
// task no GPU (the NVIDIA container toolkit's "void"); CUDA_VISIBLE_DEVICES
// is then empty.
const NvidiaVisibleDevicesNone = "void"

// Device attributes, usable in jobspecs as ${device.attr.<name>}.
const (
	AttrMemory            = "memory" // MiB; MPS: per share
	AttrComputeCapability = "compute_capability"
	AttrArchitecture      = "architecture"
	AttrDriverVersion     = "driver_version"
	AttrCUDAVersion       = "cuda_version"
	AttrMultiprocessors   = "multiprocessors" // MIG: the instance's
	AttrMIGProfile        = "mig_profile"     // mig
	AttrParentProduct     = "parent_product"  // mig, mps
	AttrParentMemory      = "parent_memory"   // mig, mps; MiB
	AttrParentIndex       = "parent_index"    // mps
	AttrMPSShares         = "mps_shares"
	AttrMPSThreadPercent  = "mps_thread_percentage"
	AttrMPSMemoryLimit    = "mps_memory_limit" // MiB
)

// MPS pipe directories: the device plugin hands a task holding MPS shares
// MPSPipeDir(mps_pipe_root, GPU) as CUDA_MPS_PIPE_DIRECTORY; the driver runs
// that GPU's MPS control daemon there and publishes the shares' usage in it.
const (
	// DefaultMPSPipeRoot is the default of both plugins' pipe root setting
	// (device plugin mps_pipe_root, driver mps.pipe_root); the two must agree.
	DefaultMPSPipeRoot = "/run/nomad-gpu/mps"
	// ShareUsageFile, inside a GPU's pipe directory, is where the driver
	// publishes what each MPS share's task uses and the device plugin
	// reads it for stats.
	ShareUsageFile = "nomad-gpu-share-usage.json"
)

// MPSPipeDir is <pipeRoot>/<GPU-UUID>, that GPU's CUDA_MPS_PIPE_DIRECTORY.
func MPSPipeDir(pipeRoot, gpuUUID string) string { return filepath.Join(pipeRoot, gpuUUID) }

// shareInfix separates the GPU UUID from the share number in a share ID.
const shareInfix = "-mps-"

// ShareID is the Nomad device ID of MPS share n (0-based) of a GPU:
// <GPU-UUID>-mps-<n>. It is stable across restarts because GPU UUIDs are.
func ShareID(gpuUUID string, n int) string {
	return gpuUUID + shareInfix + strconv.Itoa(n)
}

// ParseShareID is ShareID's inverse. ok is false for anything ShareID does
// not produce from a GPU- UUID and a share number ≥ 0: other device IDs
// (GPU-, MIG- UUIDs), a missing or empty UUID, a number with a sign or
// leading zeros, or one too large for an int.
func ParseShareID(id string) (gpuUUID string, n int, ok bool) {
	i := strings.LastIndex(id, shareInfix)
	if i < 0 {
		return "", 0, false
	}
	gpuUUID, num := id[:i], id[i+len(shareInfix):]
	if !strings.HasPrefix(gpuUUID, "GPU-") || len(gpuUUID) == len("GPU-") || strings.ContainsAny(gpuUUID, ",/ \t\n") {
		return "", 0, false
	}
	if num == "" || (len(num) > 1 && num[0] == '0') || strings.IndexFunc(num, func(r rune) bool { return r < '0' || r > '9' }) >= 0 {
		return "", 0, false
	}
	n, err := strconv.Atoi(num)
	if err != nil {
		return "", 0, false
	}
	return gpuUUID, n, true
}

// JoinList and SplitList read and write the comma-separated lists of
// CUDA_VISIBLE_DEVICES, NVIDIA_VISIBLE_DEVICES and NOMAD_GPU_DEVICE_IDS.
// SplitList trims blanks around items and drops empty ones.
func JoinList(items []string) string { return strings.Join(items, ",") }

func SplitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// FormatPinnedMemLimit writes CUDA_MPS_PINNED_DEVICE_MEM_LIMIT as the
// device plugin does: <ordinal>=<MiB>M per CUDA ordinal, comma-separated, in
// ordinal order ("0=20480M,1=40960M"). An empty map is "".
func FormatPinnedMemLimit(mibByOrdinal map[int]uint64) string {
	ords := make([]int, 0, len(mibByOrdinal))
	for o := range mibByOrdinal {
		ords = append(ords, o)
	}
	slices.Sort(ords)
	parts := make([]string, len(ords))
	for i, o := range ords {
		parts[i] = strconv.Itoa(o) + "=" + strconv.FormatUint(mibByOrdinal[o], 10) + "M"
	}
	return strings.Join(parts, ",")
}

// ParsePinnedMemLimit parses CUDA_MPS_PINNED_DEVICE_MEM_LIMIT, a
// comma-separated list of <ordinal>=<size> such as "0=1G,1=512MB" (NVIDIA's
// MPS guide) or "0=20480M" (what FormatPinnedMemLimit writes), into MiB per
// CUDA ordinal. Sizes are whole numbers with a unit K, M, G or T, optionally
// followed by B or iB, case-insensitive, in powers of 1024; sizes that are not
// whole MiB round up. A size without a unit is refused: NVIDIA documents
// none, and bytes read as MiB would be a limit a million times off. Errors
// name the variable and the bad entry. An empty value is no limit.
func ParsePinnedMemLimit(v string) (map[int]uint64, error) {
	out := map[int]uint64{}
	if strings.TrimSpace(v) == "" {
		return out, nil
	}
	for _, entry := range strings.Split(v, ",") {
		e := strings.TrimSpace(entry)
		bad := func(format string, a ...any) error {
			return fmt.Errorf("%s: %q: %s", EnvMPSPinnedMemLimit, e, fmt.Sprintf(format, a...))
		}
		if e == "" {
			return nil, fmt.Errorf("%s: %q has an empty entry", EnvMPSPinnedMemLimit, v)
		}
		ordS, size, ok := strings.Cut(e, "=")
		if !ok {
			return nil, bad("want <device ordinal>=<size>, e.g. 0=1G")
		}
		ordS, size = strings.TrimSpace(ordS), strings.TrimSpace(size)
		ord, err := strconv.Atoi(ordS)
		if err != nil || ord < 0 {
			return nil, bad("device ordinal %q is not a number", ordS)
		}
		if _, dup := out[ord]; dup {
			return nil, bad("device ordinal %d is given twice", ord)
		}
		n, err := parseSizeMiB(size)
		if err != nil {
			return nil, bad("%v", err)
		}
		out[ord] = n
	}
	return out, nil
}

const mib = 1 << 20

func parseSizeMiB(s string) (uint64, error) {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	if i == 0 {
		return 0, fmt.Errorf("size %q does not start with a whole number", s)
	}
	n, err := strconv.ParseUint(s[:i], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("size %q: %v", s, err)
	}
	unit := strings.ToUpper(strings.TrimSpace(s[i:]))
	if unit == "" {
		return 0, fmt.Errorf("size %q has no unit (K, M, G or T, e.g. %sM)", s, s[:i])
	}
	var mult uint64
	unit = strings.TrimSuffix(strings.TrimSuffix(unit, "B"), "I")
	switch unit {
	case "K":
		mult = 1 << 10
	case "M":
		mult = 1 << 20
	case "G":
		mult = 1 << 30
	case "T":
		mult = 1 << 40
	default:
		return 0, fmt.Errorf("size %q: unit %q is not one of K, M, G, T (optionally followed by B)", s, strings.TrimSpace(s[i:]))
	}
	if n > math.MaxUint64/mult {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	b := n * mult
	out := b / mib
	if b%mib != 0 {
		out++
	}
	return out, nil
}
