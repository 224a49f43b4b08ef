package devicefp

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/nomad-gpu/nomad-gpu/gpu"
)

// On a sim node with a control file, every reservation tells the task where
// sim-load writes its simulated work; nowhere else.
func TestReserveSimLoadDir(t *testing.T) {
	ctl := filepath.Join(t.TempDir(), "sim.json")
	cases := []struct {
		name    string
		edit    func(*Config)
		wantDir string
	}{
		{"sim with a control file", func(c *Config) { c.Sim.ControlFile = ctl }, ctl + ".load"},
		{"MPS shares on a sim node", func(c *Config) {
			c.Sim.ControlFile = ctl
			c.MPS = []MPSConfig{{GPUs: []string{"all"}, Shares: 2}}
		}, ctl + ".load"},
		{"sim without a control file", func(*Config) {}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := defaults(t)
			cfg.Backend, cfg.Sim.System, cfg.Sim.Seed = "sim", "dgxh100", "reserve"
			tc.edit(cfg)
			p := New(hclog.NewNullLogger())
			if err := p.SetConfig(cfg, nil); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { p.Close() })
			ids := slices.Sorted(func(yield func(string) bool) {
				for id := range p.model().byID {
					if !yield(id) {
						return
					}
				}
			})
			if len(ids) == 0 {
				t.Fatal("no devices")
			}
			res, err := p.Reserve(ids[:1])
			if err != nil {
				t.Fatal(err)
			}
			dir, ok := res.Envs[gpu.EnvSimLoadDir]
			if dir != tc.wantDir || ok != (tc.wantDir != "") {
				t.Fatalf("%s = %q (set %v), want %q", gpu.EnvSimLoadDir, dir, ok, tc.wantDir)
			}
			if dir != "" {
				if fi, err := os.Stat(dir); err != nil || !fi.IsDir() || fi.Mode()&os.ModeSticky == 0 || fi.Mode().Perm() != 0o777 {
					t.Errorf("Reserve has not made %s mode 1777: %v, %v", dir, fi, err)
				}
			}
		})
	}
	// The real library's reservations have no such thing.
	cfg := defaults(t)
	res, err := buildModel(fixture(2), cfg, nil).reserveFor([]string{"GPU-a"}, cfg, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := res.Envs[gpu.EnvSimLoadDir]; ok {
		t.Errorf("nvml backend reservation sets %s", gpu.EnvSimLoadDir)
	}
}
