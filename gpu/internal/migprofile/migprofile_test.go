package migprofile

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

func TestName(t *testing.T) {
	const (
		a100_40 = 40960 << 20 // total memory as NVML reports it, in bytes
		a100_80 = 81920 << 20
		h100    = 81559 << 20
		a30     = 24576 << 20
	)
	tests := []struct {
		gi, g, c int
		memMiB   uint64
		total    uint64
		want     string
	}{
		// Sizes real drivers report (nvidia-smi mig -lgip).
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE, 1, 1, 4864, a100_40, "1g.5gb"},
		{nvml.GPU_INSTANCE_PROFILE_2_SLICE, 2, 2, 9856, a100_40, "2g.10gb"},
		{nvml.GPU_INSTANCE_PROFILE_3_SLICE, 3, 3, 19968, a100_40, "3g.20gb"},
		{nvml.GPU_INSTANCE_PROFILE_7_SLICE, 7, 7, 40192, a100_40, "7g.40gb"},
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE, 1, 1, 9856, a100_80, "1g.10gb"},
		{nvml.GPU_INSTANCE_PROFILE_3_SLICE, 3, 3, 40192, a100_80, "3g.40gb"},
		{nvml.GPU_INSTANCE_PROFILE_7_SLICE, 7, 7, 80384, a100_80, "7g.80gb"},
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE, 1, 1, 9856, h100, "1g.10gb"},
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2, 1, 1, 19968, h100, "1g.20gb"},
		{nvml.GPU_INSTANCE_PROFILE_7_SLICE, 7, 7, 80384, h100, "7g.80gb"},
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE, 1, 1, 5836, a30, "1g.6gb"},
		{nvml.GPU_INSTANCE_PROFILE_4_SLICE, 4, 4, 23680, a30, "4g.24gb"},
		// go-nvml mock sizes, a little over k/8 of the GPU.
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE, 1, 1, 18432, 144384 << 20, "1g.18gb"},
		{nvml.GPU_INSTANCE_PROFILE_3_SLICE, 3, 3, 72704, 144384 << 20, "3g.71gb"},
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE, 1, 1, 23552, 184320 << 20, "1g.23gb"},
		// Compute instance smaller than its GPU instance, and attributes.
		{nvml.GPU_INSTANCE_PROFILE_3_SLICE, 3, 1, 40192, a100_80, "1c.3g.40gb"},
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1, 1, 1, 9856, h100, "1g.10gb+me"},
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE_ALL_ME, 1, 1, 9856, h100, "1g.10gb+me.all"},
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE_NO_ME, 1, 1, 9856, h100, "1g.10gb-me"},
		{nvml.GPU_INSTANCE_PROFILE_2_SLICE_GFX, 2, 2, 19968, h100, "2g.20gb+gfx"},
		{-1, 1, 1, 9856, h100, "1g.10gb"},
		// Parent memory unknown: plain rounding.
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE, 1, 1, 10240, 0, "1g.10gb"},
	}
	for _, tc := range tests {
		if got := Name(tc.gi, tc.g, tc.c, tc.memMiB, tc.total); got != tc.want {
			t.Errorf("Name(%d, %d, %d, %d, %d) = %q, want %q", tc.gi, tc.g, tc.c, tc.memMiB, tc.total, got, tc.want)
		}
	}
}
