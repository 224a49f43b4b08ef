package devicefp

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/nomad-gpu/nomad-gpu/gpu"
)

// An mps block naming a GPU in MIG mode is refused at SetConfig (so the
// agent does not start) with the key, the GPU and why; "all" and GPUs with
// MIG disabled are accepted.
func TestSetConfigRefusesMPSOnMIGGPU(t *testing.T) {
	simCfg := func(dir string) gpu.SimConfig {
		return gpu.SimConfig{
			System: "dgxh100", Seed: "mps-on-mig", ControlFile: filepath.Join(dir, "sim.json"),
			MIG: []gpu.MIGLayout{{GPUs: []int{6, 7}, Profiles: []string{"3g.40gb", "1g.10gb"}}},
		}
	}
	// The UUIDs the simulated node reports, to name GPUs by UUID.
	probe := defaults(t)
	probe.Backend, probe.Sim = "sim", simCfg(t.TempDir())
	inv, err := gpu.Open(probe.gpuConfig(), nil)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := inv.Snapshot()
	inv.Close()
	if err != nil {
		t.Fatal(err)
	}
	uuid := map[int]string{}
	for _, g := range snap.GPUs {
		uuid[g.Index] = g.UUID
	}

	cases := []struct {
		name string
		mps  []MPSConfig
		want string // "" accepts
	}{
		{"MIG GPU by index", []MPSConfig{{GPUs: []string{"6"}, Shares: 4}},
			"mps[0].gpus[0]: GPU 6 (" + uuid[6] + ") is in MIG mode; MPS shares are offered only on GPUs with MIG disabled"},
		{"MIG GPU by UUID", []MPSConfig{{GPUs: []string{"4", uuid[7]}, Shares: 2}},
			"mps[0].gpus[1]: GPU 7 (" + uuid[7] + ") is in MIG mode"},
		{"MIG GPU in a later block", []MPSConfig{{GPUs: []string{"4"}, Shares: 2}, {GPUs: []string{"5", "6"}, Shares: 4}},
			"mps[1].gpus[1]: GPU 6 (" + uuid[6] + ") is in MIG mode"},
		{"GPUs without MIG", []MPSConfig{{GPUs: []string{"4", uuid[5]}, Shares: 4}}, ""},
		{"all skips MIG GPUs", []MPSConfig{{GPUs: []string{"all"}, Shares: 2}}, ""},
		{"no GPU of that index", []MPSConfig{{GPUs: []string{"12"}, Shares: 2}}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := defaults(t)
			cfg.Backend, cfg.Sim, cfg.MPS = "sim", simCfg(t.TempDir()), c.mps
			cfg.MPSPipeRoot = filepath.Join(t.TempDir(), "mps")
			p := New(nil)
			defer p.Close()
			err := p.SetConfig(cfg, nil)
			if c.want == "" {
				if err != nil {
					t.Fatalf("SetConfig: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("SetConfig error %v, want %q", err, c.want)
			}
			if got := p.config(); len(got.MPS) != 0 {
				t.Fatalf("a refused config was kept: mps %+v", got.MPS)
			}
		})
	}
}
