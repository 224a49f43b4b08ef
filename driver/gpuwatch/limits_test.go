package gpuwatch

import (
	"reflect"
	"strings"
	"testing"

	"github.com/nomad-gpu/nomad-gpu/contract"
)

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
		{name: "empty visible devices", env: map[string]string{contract.EnvCUDAVisibleDevices: ""}},
		{
			name: "mps, one GPU",
			env:  map[string]string{contract.EnvCUDAVisibleDevices: g0, contract.EnvSliceType: contract.SliceMPS, contract.EnvMPSPinnedMemLimit: "0=20480M"},
			want: []DeviceLimit{{g0, 20480, 100, true}},
		},
		{
			name: "mps, two GPUs, limits by ordinal",
			env:  map[string]string{contract.EnvCUDAVisibleDevices: g0 + "," + g1, contract.EnvSliceType: contract.SliceMPS, contract.EnvMPSPinnedMemLimit: "1=8G,0=4096M"},
			want: []DeviceLimit{{g0, 4096, 100, true}, {g1, 8192, 100, true}},
		},
		{
			name: "mps, a GPU without an entry is measured only",
			env:  map[string]string{contract.EnvCUDAVisibleDevices: g0 + "," + g1, contract.EnvSliceType: contract.SliceMPS, contract.EnvMPSPinnedMemLimit: "1=8G"},
			want: []DeviceLimit{{g0, 0, 100, true}, {g1, 8192, 100, true}},
		},
		{
			name: "mps inferred from the pinned limit",
			env:  map[string]string{contract.EnvCUDAVisibleDevices: g0, contract.EnvMPSPinnedMemLimit: "0=1G"},
			want: []DeviceLimit{{g0, 1024, 100, true}},
		},
		{
			name: "mps, the thread percentage is the share of each GPU",
			env: map[string]string{contract.EnvCUDAVisibleDevices: g0 + "," + g1, contract.EnvSliceType: contract.SliceMPS,
				contract.EnvMPSPinnedMemLimit: "0=10G,1=10G", contract.EnvMPSThreadPercentage: "50"},
			want: []DeviceLimit{{g0, 10240, 50, true}, {g1, 10240, 50, true}},
		},
		{
			name:    "mps, bad thread percentage",
			env:     map[string]string{contract.EnvCUDAVisibleDevices: g0, contract.EnvSliceType: contract.SliceMPS, contract.EnvMPSThreadPercentage: "0"},
			wantErr: `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE: "0" is not a percentage`,
		},
		{
			name:    "mps, ordinal beyond the visible devices",
			env:     map[string]string{contract.EnvCUDAVisibleDevices: g0, contract.EnvSliceType: contract.SliceMPS, contract.EnvMPSPinnedMemLimit: "0=1G,3=1G"},
			wantErr: "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT: device ordinal 3, but CUDA_VISIBLE_DEVICES lists 1 device(s)",
		},
		{
			name:    "mps, bad pinned limit",
			env:     map[string]string{contract.EnvCUDAVisibleDevices: g0, contract.EnvSliceType: contract.SliceMPS, contract.EnvMPSPinnedMemLimit: "0=lots"},
			wantErr: `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT: "0=lots"`,
		},
		{
			name: "mig",
			env:  map[string]string{contract.EnvCUDAVisibleDevices: m0 + "," + m1, contract.EnvSliceType: contract.SliceMIG},
			want: []DeviceLimit{{m0, 9856, 100, false}, {m1, 40192, 100, false}},
		},
		{
			name: "mig inferred from the UUID",
			env:  map[string]string{contract.EnvCUDAVisibleDevices: m1},
			want: []DeviceLimit{{m1, 40192, 100, false}},
		},
		{
			name:    "mig of unknown size",
			env:     map[string]string{contract.EnvCUDAVisibleDevices: "MIG-99999999-0000-0000-0000-000000000000", contract.EnvSliceType: contract.SliceMIG},
			wantErr: `CUDA_VISIBLE_DEVICES: MIG instance "MIG-99999999-0000-0000-0000-000000000000" has no known memory size`,
		},
		{
			name:    "mig slice with a GPU UUID",
			env:     map[string]string{contract.EnvCUDAVisibleDevices: g0, contract.EnvSliceType: contract.SliceMIG},
			wantErr: `"` + g0 + `" is not a MIG- UUID but NOMAD_GPU_SLICE_TYPE is mig`,
		},
		{
			name: "whole GPUs are measured only",
			env:  map[string]string{contract.EnvCUDAVisibleDevices: g0 + ", " + g1 + "," + g0, contract.EnvSliceType: contract.SliceGPU},
			want: []DeviceLimit{{g0, 0, 100, false}, {g1, 0, 100, false}},
		},
		{
			name:    "index instead of UUID",
			env:     map[string]string{contract.EnvCUDAVisibleDevices: "0,1", contract.EnvSliceType: contract.SliceGPU},
			wantErr: `CUDA_VISIBLE_DEVICES: "0" is not a GPU- or MIG- UUID`,
		},
		{
			name:    "unknown slice type",
			env:     map[string]string{contract.EnvCUDAVisibleDevices: g0, contract.EnvSliceType: "vgpu"},
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
