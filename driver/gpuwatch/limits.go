package gpuwatch

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/nomad-gpu/nomad-gpu/contract"
)

// DeviceLimits derives a task's watched devices from its environment:
//   - mps: each visible GPU, limited to its CUDA_MPS_PINNED_DEVICE_MEM_LIMIT
//     entry (by CUDA ordinal, i.e. position in CUDA_VISIBLE_DEVICES);
//   - mig: each visible MIG instance, limited to its memory, migMemMiB(uuid);
//   - gpu: each visible GPU with LimitMiB 0, measured for stats only, since
//     nothing else can allocate on a GPU the task holds whole.
//
// SharePercent is 100 for gpu and mig; for mps it is
// CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, the client's SM share on each of its
// GPUs (the device plugin sets it to the task's shares' thread percentages
// summed; MPS enforces that one number on every GPU of the client), 100
// when absent (MPS then does not limit the client); mps devices are Shared.
//
// A task without visible devices has none. When NOMAD_GPU_SLICE_TYPE is
// absent the type follows from the UUIDs and the pinned limit variable.
// Errors name the variable and the bad part.
func DeviceLimits(env map[string]string, migMemMiB func(uuid string) uint64) ([]DeviceLimit, error) {
	var visible []string
	for _, u := range contract.SplitList(env[contract.EnvCUDAVisibleDevices]) {
		if slices.Contains(visible, u) {
			continue
		}
		if !strings.HasPrefix(u, "GPU-") && !strings.HasPrefix(u, "MIG-") {
			return nil, fmt.Errorf("%s: %q is not a GPU- or MIG- UUID; GPU memory is attributed by UUID", contract.EnvCUDAVisibleDevices, u)
		}
		visible = append(visible, u)
	}
	if len(visible) == 0 {
		return nil, nil
	}
	typ := env[contract.EnvSliceType]
	if typ == "" {
		_, pinned := env[contract.EnvMPSPinnedMemLimit]
		switch {
		case strings.HasPrefix(visible[0], "MIG-"):
			typ = contract.SliceMIG
		case pinned:
			typ = contract.SliceMPS
		default:
			typ = contract.SliceGPU
		}
	}
	out := make([]DeviceLimit, 0, len(visible))
	switch typ {
	case contract.SliceGPU:
		for _, u := range visible {
			out = append(out, DeviceLimit{UUID: u, SharePercent: 100})
		}
	case contract.SliceMIG:
		for _, u := range visible {
			if !strings.HasPrefix(u, "MIG-") {
				return nil, fmt.Errorf("%s: %q is not a MIG- UUID but %s is %s", contract.EnvCUDAVisibleDevices, u, contract.EnvSliceType, contract.SliceMIG)
			}
			var m uint64
			if migMemMiB != nil {
				m = migMemMiB(u)
			}
			if m == 0 {
				return nil, fmt.Errorf("%s: MIG instance %q has no known memory size on this node", contract.EnvCUDAVisibleDevices, u)
			}
			out = append(out, DeviceLimit{UUID: u, LimitMiB: m, SharePercent: 100})
		}
	case contract.SliceMPS:
		limits := map[int]uint64{}
		if v, ok := env[contract.EnvMPSPinnedMemLimit]; ok {
			var err error
			if limits, err = contract.ParsePinnedMemLimit(v); err != nil {
				return nil, err
			}
		}
		for _, ord := range sortedOrdinals(limits) {
			if ord >= len(visible) {
				return nil, fmt.Errorf("%s: device ordinal %d, but %s lists %d device(s)", contract.EnvMPSPinnedMemLimit, ord, contract.EnvCUDAVisibleDevices, len(visible))
			}
		}
		share := 100.0
		if v := strings.TrimSpace(env[contract.EnvMPSThreadPercentage]); v != "" {
			t, err := strconv.ParseFloat(v, 64)
			if err != nil || math.IsNaN(t) || t <= 0 || t > 100 {
				return nil, fmt.Errorf("%s: %q is not a percentage above 0 and at most 100", contract.EnvMPSThreadPercentage, v)
			}
			share = t
		}
		for i, u := range visible {
			out = append(out, DeviceLimit{UUID: u, LimitMiB: limits[i], SharePercent: share, Shared: true})
		}
	default:
		return nil, fmt.Errorf("%s: %q is not one of %s, %s, %s", contract.EnvSliceType, typ, contract.SliceGPU, contract.SliceMIG, contract.SliceMPS)
	}
	return out, nil
}

// sortedOrdinals keeps error messages the same from run to run.
func sortedOrdinals(m map[int]uint64) []int {
	out := make([]int, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
