package devicefp

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/nomad-gpu/nomad-gpu/contract"
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
	res, err := buildModel(fixture(2), cfg, nil, nil).reserveFor([]string{"GPU-a"}, cfg, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := res.Envs[gpu.EnvSimLoadDir]; ok {
		t.Errorf("nvml backend reservation sets %s", gpu.EnvSimLoadDir)
	}
}

// A task holding MPS shares of several GPUs (reserve.go): CUDA sees its GPUs
// in index order whatever the order of the request; the task talks to the
// MPS daemon of the first of them; the thread percentage, one number for the
// whole client, is the smallest per-GPU sum; the pinned-memory limit lists
// each GPU's own sum under its CUDA ordinal. The GPUs differ in share count
// and memory, so "first GPU" and "smallest" give different answers.
func TestReserveMPSSharesOnSeveralGPUs(t *testing.T) {
	dir := t.TempDir()
	oldDev := devRoot
	t.Cleanup(func() { devRoot = oldDev })
	devRoot = dir
	for _, p := range []string{"nvidiactl", "nvidia0", "nvidia1", "nvidia2"} {
		if err := os.WriteFile(filepath.Join(dir, p), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	cfg := defaults(t)
	cfg.MPSPipeRoot = "/run/mps-test"
	// GPU-a: 2 shares of 50% and 40779 MiB; GPU-b: 4 of 25% and 10240 MiB;
	// GPU-c: 3 of 33% and 31943 MiB.
	cfg.MPS = []MPSConfig{
		{GPUs: []string{"0"}, Shares: 2},
		{GPUs: []string{"GPU-b"}, Shares: 4},
		{GPUs: []string{"2"}, Shares: 3},
	}
	snap := fixture(3)
	snap.GPUs[1].MemoryMiB = 40960
	snap.GPUs[2].MemoryMiB = 95830
	m := buildModel(snap, cfg, nil, nil)

	cases := []struct {
		name    string
		ids     []string
		visible string // CUDA_ and NVIDIA_VISIBLE_DEVICES
		pipe    string // the GPU whose daemon the task talks to
		threads string
		pinned  string
		idList  string
		devices string
	}{
		{
			name: "the second GPU has the smaller percentage",
			ids:  []string{"GPU-a-mps-1", "GPU-b-mps-3"},
			// GPU-a 50%, GPU-b 25%
			visible: "GPU-a,GPU-b", pipe: "GPU-a", threads: "25", pinned: "0=40779M,1=10240M",
			idList: "GPU-a-mps-1,GPU-b-mps-3", devices: "/dev/nvidiactl /dev/nvidia0 /dev/nvidia1",
		},
		{
			name: "asked for out of index order; the last GPU has the smallest sum",
			ids:  []string{"GPU-c-mps-2", "GPU-b-mps-0", "GPU-a-mps-0", "GPU-b-mps-1"},
			// GPU-a 50%, GPU-b 25+25%, GPU-c 33%
			visible: "GPU-a,GPU-b,GPU-c", pipe: "GPU-a", threads: "33", pinned: "0=40779M,1=20480M,2=31943M",
			idList: "GPU-a-mps-0,GPU-b-mps-0,GPU-b-mps-1,GPU-c-mps-2", devices: "/dev/nvidiactl /dev/nvidia0 /dev/nvidia1 /dev/nvidia2",
		},
		{
			name: "not GPU 0: ordinals and the daemon follow the visible list",
			ids:  []string{"GPU-c-mps-0", "GPU-b-mps-2"},
			// GPU-b 25%, GPU-c 33%: GPU-b is ordinal 0 though it is GPU 1
			visible: "GPU-b,GPU-c", pipe: "GPU-b", threads: "25", pinned: "0=10240M,1=31943M",
			idList: "GPU-b-mps-2,GPU-c-mps-0", devices: "/dev/nvidiactl /dev/nvidia1 /dev/nvidia2",
		},
		{
			name: "the minimum is over per-GPU sums, not single shares",
			ids:  []string{"GPU-b-mps-2", "GPU-b-mps-0", "GPU-a-mps-1", "GPU-b-mps-1"},
			// GPU-a 50%, GPU-b 3×25% = 75%; its single shares are 25%
			visible: "GPU-a,GPU-b", pipe: "GPU-a", threads: "50", pinned: "0=40779M,1=30720M",
			idList: "GPU-a-mps-1,GPU-b-mps-0,GPU-b-mps-1,GPU-b-mps-2", devices: "/dev/nvidiactl /dev/nvidia0 /dev/nvidia1",
		},
		{
			name: "a repeated ID counts once",
			ids:  []string{"GPU-c-mps-1", "GPU-c-mps-1", "GPU-b-mps-0", "GPU-c-mps-0"},
			// GPU-b 25%, GPU-c 33+33% = 66%
			visible: "GPU-b,GPU-c", pipe: "GPU-b", threads: "25", pinned: "0=10240M,1=63886M",
			idList: "GPU-b-mps-0,GPU-c-mps-0,GPU-c-mps-1", devices: "/dev/nvidiactl /dev/nvidia1 /dev/nvidia2",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res, err := m.reserve(c.ids, cfg.MPSPipeRoot)
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]string{
				contract.EnvCUDAVisibleDevices:   c.visible,
				contract.EnvNvidiaVisibleDevices: c.visible,
				contract.EnvDeviceIDs:            c.idList,
				contract.EnvSliceType:            contract.SliceMPS,
				contract.EnvMPSPipeDirectory:     contract.MPSPipeDir(cfg.MPSPipeRoot, c.pipe),
				contract.EnvMPSThreadPercentage:  c.threads,
				contract.EnvMPSPinnedMemLimit:    c.pinned,
			}
			for k, v := range want {
				if got, ok := res.Envs[k]; got != v || !ok {
					t.Errorf("%s = %q (set %v), want %q", k, got, ok, v)
				}
			}
			for k, v := range res.Envs {
				if _, ok := want[k]; !ok {
					t.Errorf("unexpected %s = %q", k, v)
				}
			}
			var got []string
			for _, d := range res.Devices {
				got = append(got, d.TaskPath)
				if d.HostPath != filepath.Join(dir, strings.TrimPrefix(d.TaskPath, "/dev/")) || d.Permissions != "rw" {
					t.Errorf("device %+v", d)
				}
			}
			if g := strings.Join(got, " "); g != c.devices {
				t.Errorf("devices %s, want %s", g, c.devices)
			}
		})
	}
}
