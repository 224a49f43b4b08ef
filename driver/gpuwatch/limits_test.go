package gpuwatch

import (
	"reflect"
	"strings"
	"testing"
)

func TestParsePinnedMemLimit(t *testing.T) {
	tests := []struct {
		in      string
		want    map[int]uint64
		wantErr string
	}{
		{in: "", want: map[int]uint64{}},
		{in: "0=20480M", want: map[int]uint64{0: 20480}},
		{in: "0=1G,1=512MB", want: map[int]uint64{0: 1024, 1: 512}},
		{in: " 0 = 8g , 2=4096m ", want: map[int]uint64{0: 8192, 2: 4096}},
		{in: "0=1T", want: map[int]uint64{0: 1 << 20}},
		{in: "0=2048K,1=1536K,2=1KB", want: map[int]uint64{0: 2, 1: 2, 2: 1}}, // partial MiB rounds up
		{in: "0=4GiB,1=100MiB", want: map[int]uint64{0: 4096, 1: 100}},
		{in: "0=0M", want: map[int]uint64{0: 0}},
		{in: "0=1024", wantErr: `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT: "0=1024": size "1024" has no unit (K, M, G or T, e.g. 1024M)`},
		{in: "0=12X", wantErr: `"0=12X": size "12X": unit "X" is not one of K, M, G, T`},
		{in: "0=1.5G", wantErr: `"0=1.5G": size "1.5G": unit ".5G" is not one of`},
		{in: "0=G", wantErr: `"0=G": size "G" does not start with a whole number`},
		{in: "0=-1G", wantErr: `does not start with a whole number`},
		{in: "1G", wantErr: `"1G": want <device ordinal>=<size>, e.g. 0=1G`},
		{in: "x=1G", wantErr: `"x=1G": device ordinal "x" is not a number`},
		{in: "-1=1G", wantErr: `device ordinal "-1" is not a number`},
		{in: "0=1G,0=2G", wantErr: `"0=2G": device ordinal 0 is given twice`},
		{in: "0=1G,,1=1G", wantErr: `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT: "0=1G,,1=1G" has an empty entry`},
		{in: "0=99999999999999999999G", wantErr: `value out of range`},
		{in: "0=99999999999T", wantErr: `is too large`},
	}
	for _, tc := range tests {
		got, err := ParsePinnedMemLimit(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParsePinnedMemLimit(%q) error %v, want %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParsePinnedMemLimit(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestDeviceLimits(t *testing.T) {
	const (
		g0 = "GPU-00000000-0000-0000-0000-000000000000"
		g1 = "GPU-11111111-0000-0000-0000-000000000000"
		m0 = "MIG-00000000-0000-0000-0000-000000000000"
		m1 = "MIG-11111111-0000-0000-0000-000000000000"
	)
	migMem := func(uuid string) uint64 {
		return map[string]uint64{m0: 9856, m1: 40192}[uuid]
	}
	tests := []struct {
		name    string
		env     map[string]string
		want    []DeviceLimit
		wantErr string
	}{
		{name: "no GPU", env: map[string]string{"PATH": "/bin"}},
		{name: "empty visible devices", env: map[string]string{EnvVisibleDevices: ""}},
		{
			name: "mps, one GPU",
			env:  map[string]string{EnvVisibleDevices: g0, EnvSliceType: SliceMPS, EnvPinnedMemLimit: "0=20480M"},
			want: []DeviceLimit{{g0, 20480}},
		},
		{
			name: "mps, two GPUs, limits by ordinal",
			env:  map[string]string{EnvVisibleDevices: g0 + "," + g1, EnvSliceType: SliceMPS, EnvPinnedMemLimit: "1=8G,0=4096M"},
			want: []DeviceLimit{{g0, 4096}, {g1, 8192}},
		},
		{
			name: "mps, a GPU without an entry is measured only",
			env:  map[string]string{EnvVisibleDevices: g0 + "," + g1, EnvSliceType: SliceMPS, EnvPinnedMemLimit: "1=8G"},
			want: []DeviceLimit{{g0, 0}, {g1, 8192}},
		},
		{
			name: "mps inferred from the pinned limit",
			env:  map[string]string{EnvVisibleDevices: g0, EnvPinnedMemLimit: "0=1G"},
			want: []DeviceLimit{{g0, 1024}},
		},
		{
			name:    "mps, ordinal beyond the visible devices",
			env:     map[string]string{EnvVisibleDevices: g0, EnvSliceType: SliceMPS, EnvPinnedMemLimit: "0=1G,3=1G"},
			wantErr: "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT: device ordinal 3, but CUDA_VISIBLE_DEVICES lists 1 device(s)",
		},
		{
			name:    "mps, bad pinned limit",
			env:     map[string]string{EnvVisibleDevices: g0, EnvSliceType: SliceMPS, EnvPinnedMemLimit: "0=lots"},
			wantErr: `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT: "0=lots"`,
		},
		{
			name: "mig",
			env:  map[string]string{EnvVisibleDevices: m0 + "," + m1, EnvSliceType: SliceMIG},
			want: []DeviceLimit{{m0, 9856}, {m1, 40192}},
		},
		{
			name: "mig inferred from the UUID",
			env:  map[string]string{EnvVisibleDevices: m1},
			want: []DeviceLimit{{m1, 40192}},
		},
		{
			name:    "mig of unknown size",
			env:     map[string]string{EnvVisibleDevices: "MIG-99999999-0000-0000-0000-000000000000", EnvSliceType: SliceMIG},
			wantErr: `CUDA_VISIBLE_DEVICES: MIG instance "MIG-99999999-0000-0000-0000-000000000000" has no known memory size`,
		},
		{
			name:    "mig slice with a GPU UUID",
			env:     map[string]string{EnvVisibleDevices: g0, EnvSliceType: SliceMIG},
			wantErr: `"` + g0 + `" is not a MIG- UUID but NOMAD_GPU_SLICE_TYPE is mig`,
		},
		{
			name: "whole GPUs are measured only",
			env:  map[string]string{EnvVisibleDevices: g0 + ", " + g1 + "," + g0, EnvSliceType: SliceGPU},
			want: []DeviceLimit{{g0, 0}, {g1, 0}},
		},
		{
			name:    "index instead of UUID",
			env:     map[string]string{EnvVisibleDevices: "0,1", EnvSliceType: SliceGPU},
			wantErr: `CUDA_VISIBLE_DEVICES: "0" is not a GPU- or MIG- UUID`,
		},
		{
			name:    "unknown slice type",
			env:     map[string]string{EnvVisibleDevices: g0, EnvSliceType: "vgpu"},
			wantErr: `NOMAD_GPU_SLICE_TYPE: "vgpu" is not one of gpu, mig, mps`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DeviceLimits(tc.env, migMem)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("= %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}
