package driver

import (
	"strings"
	"testing"

	"github.com/nomad-gpu/nomad-gpu/contract"
)

func TestCheckPipeDirectory(t *testing.T) {
	share := func(dir string) map[string]string {
		return map[string]string{contract.EnvSliceType: contract.SliceMPS, contract.EnvCUDAVisibleDevices: "GPU-a", contract.EnvMPSPipeDirectory: dir}
	}
	for _, c := range []struct {
		name    string
		env     map[string]string
		wantErr string
	}{
		{"the same root", share(contract.MPSPipeDir("/run/nomad-gpu/mps", "GPU-a")), ""},
		{"a whole GPU has no pipe", map[string]string{contract.EnvSliceType: contract.SliceGPU}, ""},
		{"another root", share(contract.MPSPipeDir("/var/run/mps", "GPU-a")), "set the device plugin's mps_pipe_root and the driver's mps.pipe_root to the same directory"},
		{"another GPU's", share(contract.MPSPipeDir("/run/nomad-gpu/mps", "GPU-b")), "mps_pipe_root"},
		{"an empty one", share(""), `CUDA_MPS_PIPE_DIRECTORY=""`},
		{"none given (the task's CUDA finds the daemon as configured)", map[string]string{contract.EnvSliceType: contract.SliceMPS, contract.EnvCUDAVisibleDevices: "GPU-a"}, ""},
	} {
		err := checkPipeDirectory(c.env, "/run/nomad-gpu/mps")
		if c.wantErr == "" && err != nil || c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)) {
			t.Errorf("%s: %v, want %q", c.name, err, c.wantErr)
		}
	}
}
