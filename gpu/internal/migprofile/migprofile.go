// Package migprofile names MIG instances the way NVIDIA's tools do
// ("1g.10gb", "1c.3g.40gb", "1g.10gb+me"), from facts any nvml.Interface can
// report: slice counts, instance memory, parent memory and the GPU instance
// profile ID. Both the inventory (for what it finds) and the simulator (for
// what it accepts in a layout) use it, so a layout written for the sim names
// exactly what the inventory will later report.
package migprofile

import (
	"math"

	nvdevice "github.com/NVIDIA/go-nvlib/pkg/nvlib/device"
	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Name returns the profile name of a MIG instance. giProfileID may be -1 when
// unknown (the name then lacks attribute suffixes such as "+me").
func Name(giProfileID, giSlices, ciSlices int, memMiB, parentTotalBytes uint64) string {
	p := nvdevice.MigProfileInfo{C: ciSlices, G: giSlices, GB: MemoryGB(memMiB, parentTotalBytes)}
	switch giProfileID {
	case nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1, nvml.GPU_INSTANCE_PROFILE_2_SLICE_REV1:
		p.Attributes = []string{nvdevice.AttributeMediaExtensions}
	case nvml.GPU_INSTANCE_PROFILE_1_SLICE_ALL_ME, nvml.GPU_INSTANCE_PROFILE_2_SLICE_ALL_ME:
		p.Attributes = []string{nvdevice.AttributeMediaExtensionsAll}
	case nvml.GPU_INSTANCE_PROFILE_1_SLICE_GFX, nvml.GPU_INSTANCE_PROFILE_2_SLICE_GFX,
		nvml.GPU_INSTANCE_PROFILE_3_SLICE_GFX, nvml.GPU_INSTANCE_PROFILE_4_SLICE_GFX:
		p.Attributes = []string{nvdevice.AttributeGraphics}
	case nvml.GPU_INSTANCE_PROFILE_1_SLICE_NO_ME, nvml.GPU_INSTANCE_PROFILE_2_SLICE_NO_ME:
		p.NegAttributes = []string{nvdevice.AttributeMediaExtensions}
	}
	return p.String()
}

// MemoryGB is the "gb" figure of a profile name. NVIDIA names a profile by
// the share of the GPU's memory slices (eighths) it holds, times the GPU's
// memory in whole GB, not by the instance's own size: an A100-40GB 7g
// instance has 39.25 GiB yet is "7g.40gb". go-nvlib rounds the share up to
// the next eighth; we round to the nearest eighth instead. On real GPUs the
// two agree (an instance is always a little under its k/8 because the
// driver reserves memory), but the go-nvml mock sizes some instances a little
// over k/8 (H200 1g: 18432 of 144384 MiB) and rounding up would call that
// "1g.35gb".
func MemoryGB(memMiB, parentTotalBytes uint64) int {
	if parentTotalBytes == 0 {
		return int((memMiB + 512) / 1024)
	}
	const eighths = 8
	share := float64(memMiB) * (1 << 20) / float64(parentTotalBytes)
	share = math.Max(1, math.Round(share*eighths)) / eighths
	totalGB := float64((parentTotalBytes + (1<<30 - 1)) >> 30)
	return int(math.Round(share * totalGB))
}
