package devicefp

import (
	"testing"

	"github.com/nomad-gpu/nomad-gpu/contract"
)

// What the device plugin offers and reserves must read back through package
// contract, the way the gpu task driver reads it.
func TestModelFollowsContract(t *testing.T) {
	cfg := defaults(t)
	if cfg.MPSPipeRoot != contract.DefaultMPSPipeRoot {
		t.Errorf("mps_pipe_root default %q; the contract's is %q (the driver's default is the same)", cfg.MPSPipeRoot, contract.DefaultMPSPipeRoot)
	}
	cfg.MPS = []MPSConfig{{GPUs: []string{"0"}, Shares: 4}}
	m := buildModel(fixture(2), cfg, nil, nil)
	var shares []string
	for _, g := range m.groups {
		if g.Vendor != contract.Vendor {
			t.Errorf("vendor %q", g.Vendor)
		}
		if g.Type != contract.SliceMPS {
			continue
		}
		for _, d := range g.Devices {
			u, n, ok := contract.ParseShareID(d.ID)
			if !ok || u != "GPU-a" || contract.ShareID(u, n) != d.ID {
				t.Errorf("share ID %q parses as %q, %d, %v", d.ID, u, n, ok)
			}
			shares = append(shares, d.ID)
		}
	}
	if len(shares) != 4 {
		t.Fatalf("shares %v", shares)
	}
	res, err := m.reserve(shares[1:3], cfg.MPSPipeRoot)
	if err != nil {
		t.Fatal(err)
	}
	env := res.Envs
	if got := contract.SplitList(env[contract.EnvDeviceIDs]); len(got) != 2 || got[0] != shares[1] || got[1] != shares[2] {
		t.Errorf("%s = %q", contract.EnvDeviceIDs, env[contract.EnvDeviceIDs])
	}
	if env[contract.EnvSliceType] != contract.SliceMPS || env[contract.EnvMPSPipeDirectory] != contract.MPSPipeDir(cfg.MPSPipeRoot, "GPU-a") {
		t.Errorf("env %v", env)
	}
	lim, err := contract.ParsePinnedMemLimit(env[contract.EnvMPSPinnedMemLimit])
	if err != nil || len(lim) != 1 || lim[0] != 2*(81559/4) {
		t.Errorf("%s = %q: %v, %v", contract.EnvMPSPinnedMemLimit, env[contract.EnvMPSPinnedMemLimit], lim, err)
	}
}
