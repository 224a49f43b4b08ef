package gpuwatch

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Variables of the task environment the limits come from; the device
// plugin's Reserve sets them (README's task environment contract).
const (
	EnvVisibleDevices = "CUDA_VISIBLE_DEVICES"
	EnvPinnedMemLimit = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
	EnvSliceType      = "NOMAD_GPU_SLICE_TYPE"
)

// Slice types as NOMAD_GPU_SLICE_TYPE names them.
const (
	SliceGPU = "gpu"
	SliceMIG = "mig"
	SliceMPS = "mps"
)

const mib = 1 << 20

// DeviceLimits derives a task's watched devices from its environment:
//   - mps: each visible GPU, limited to its CUDA_MPS_PINNED_DEVICE_MEM_LIMIT
//     entry (by CUDA ordinal, i.e. position in CUDA_VISIBLE_DEVICES);
//   - mig: each visible MIG instance, limited to its memory, migMemMiB(uuid);
//   - gpu: each visible GPU with LimitMiB 0, measured for stats only, since
//     nothing else can allocate on a GPU the task holds whole.
//
// A task without visible devices has none. When NOMAD_GPU_SLICE_TYPE is
// absent the type follows from the UUIDs and the pinned limit variable.
// Errors name the variable and the bad part.
func DeviceLimits(env map[string]string, migMemMiB func(uuid string) uint64) ([]DeviceLimit, error) {
	var visible []string
	for _, u := range strings.Split(env[EnvVisibleDevices], ",") {
		u = strings.TrimSpace(u)
		if u == "" || slices.Contains(visible, u) {
			continue
		}
		if !strings.HasPrefix(u, "GPU-") && !strings.HasPrefix(u, "MIG-") {
			return nil, fmt.Errorf("%s: %q is not a GPU- or MIG- UUID; GPU memory is attributed by UUID", EnvVisibleDevices, u)
		}
		visible = append(visible, u)
	}
	if len(visible) == 0 {
		return nil, nil
	}
	typ := env[EnvSliceType]
	if typ == "" {
		_, pinned := env[EnvPinnedMemLimit]
		switch {
		case strings.HasPrefix(visible[0], "MIG-"):
			typ = SliceMIG
		case pinned:
			typ = SliceMPS
		default:
			typ = SliceGPU
		}
	}
	out := make([]DeviceLimit, 0, len(visible))
	switch typ {
	case SliceGPU:
		for _, u := range visible {
			out = append(out, DeviceLimit{UUID: u})
		}
	case SliceMIG:
		for _, u := range visible {
			if !strings.HasPrefix(u, "MIG-") {
				return nil, fmt.Errorf("%s: %q is not a MIG- UUID but %s is %s", EnvVisibleDevices, u, EnvSliceType, SliceMIG)
			}
			var m uint64
			if migMemMiB != nil {
				m = migMemMiB(u)
			}
			if m == 0 {
				return nil, fmt.Errorf("%s: MIG instance %q has no known memory size on this node", EnvVisibleDevices, u)
			}
			out = append(out, DeviceLimit{UUID: u, LimitMiB: m})
		}
	case SliceMPS:
		limits := map[int]uint64{}
		if v, ok := env[EnvPinnedMemLimit]; ok {
			var err error
			if limits, err = ParsePinnedMemLimit(v); err != nil {
				return nil, err
			}
		}
		for _, ord := range sortedOrdinals(limits) {
			if ord >= len(visible) {
				return nil, fmt.Errorf("%s: device ordinal %d, but %s lists %d device(s)", EnvPinnedMemLimit, ord, EnvVisibleDevices, len(visible))
			}
		}
		for i, u := range visible {
			out = append(out, DeviceLimit{UUID: u, LimitMiB: limits[i]})
		}
	default:
		return nil, fmt.Errorf("%s: %q is not one of %s, %s, %s", EnvSliceType, typ, SliceGPU, SliceMIG, SliceMPS)
	}
	return out, nil
}

// ParsePinnedMemLimit parses CUDA_MPS_PINNED_DEVICE_MEM_LIMIT, a
// comma-separated list of <ordinal>=<size> such as "0=1G,1=512MB" (NVIDIA's
// MPS guide) or "0=20480M" (what the device plugin writes), into MiB per
// CUDA ordinal. Sizes are whole numbers with a unit K, M, G or T, optionally
// followed by B or iB, case-insensitive, in powers of 1024; sizes that are not
// whole MiB round up. A size without a unit is refused: NVIDIA documents
// none, and bytes read as MiB would be a limit a million times off.
func ParsePinnedMemLimit(v string) (map[int]uint64, error) {
	out := map[int]uint64{}
	if strings.TrimSpace(v) == "" {
		return out, nil
	}
	for _, entry := range strings.Split(v, ",") {
		e := strings.TrimSpace(entry)
		bad := func(format string, a ...any) error {
			return fmt.Errorf("%s: %q: %s", EnvPinnedMemLimit, e, fmt.Sprintf(format, a...))
		}
		if e == "" {
			return nil, fmt.Errorf("%s: %q has an empty entry", EnvPinnedMemLimit, v)
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
	return b/mib + boolToUint(b%mib != 0), nil
}

func boolToUint(b bool) uint64 {
	if b {
		return 1
	}
	return 0
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
