package devicefp

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nomad-gpu/nomad-gpu/gpu"
	"github.com/nomad-gpu/nomad-gpu/wire/schema"
)

func defaults(t testing.TB) *Config {
	t.Helper()
	cfg := &Config{}
	if err := schema.Decode(nil, cfg); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// fixture builds a synthetic snapshot: n H100s, the listed ones in MIG mode
// with two instances each.
func fixture(n int, migGPUs ...int) *gpu.Snapshot {
	snap := &gpu.Snapshot{DriverVersion: "550.54.15", CUDAVersion: "12.4"}
	isMIG := map[int]bool{}
	for _, i := range migGPUs {
		isMIG[i] = true
	}
	for i := 0; i < n; i++ {
		g := gpu.GPU{
			Index: i, UUID: "GPU-" + string(rune('a'+i)), Name: "NVIDIA H100 80GB HBM3",
			MemoryMiB: 81559, PCIBusID: "0000:0" + string(rune('1'+i)) + ":00.0",
			ComputeCapability: "9.0", Architecture: "hopper", Multiprocessors: 132,
		}
		if isMIG[i] {
			g.MIGEnabled = true
			for j, p := range []string{"3g.40gb", "1g.10gb"} {
				g.MIG = append(g.MIG, gpu.MIGDevice{
					UUID: "MIG-" + string(rune('a'+i)) + string(rune('0'+j)), ParentUUID: g.UUID, ParentIndex: i,
					Index: j, Profile: p, MemoryMiB: uint64(40000 / (1 + 3*j)), Multiprocessors: 60 / (1 + j),
					GPUInstanceID: j + 1, ComputeInstanceID: 0,
				})
			}
		}
		snap.GPUs = append(snap.GPUs, g)
	}
	return snap
}

func TestBuildModel(t *testing.T) {
	cases := []struct {
		name      string
		snap      *gpu.Snapshot
		edit      func(*Config)
		unhealthy map[string]string
		want      map[string]int // group → device count
		check     func(t *testing.T, m *model)
	}{
		{
			name: "whole GPUs",
			snap: fixture(2),
			want: map[string]int{"gpu/NVIDIA H100 80GB HBM3": 2},
			check: func(t *testing.T, m *model) {
				a := m.groups[0].Attributes
				if a["memory"].Text() != "81559 MiB" || a["compute_capability"].Text() != "9.0" || a["cuda_version"].Text() != "12.4" || a["driver_version"].Text() != "550.54.15" || a["architecture"].Text() != "hopper" || a["multiprocessors"].Text() != "132" {
					t.Errorf("attributes %v", a)
				}
				if m.groups[0].Devices[1].PCIBusID != "0000:02:00.0" {
					t.Errorf("pci %q", m.groups[0].Devices[1].PCIBusID)
				}
			},
		},
		{
			name: "MIG GPU is not offered whole",
			snap: fixture(2, 1),
			want: map[string]int{"gpu/NVIDIA H100 80GB HBM3": 1, "mig/3g.40gb": 1, "mig/1g.10gb": 1},
			check: func(t *testing.T, m *model) {
				s := m.byID["MIG-b1"]
				if s == nil || s.gpuUUID != "GPU-b" || s.visibleUUID() != "MIG-b1" {
					t.Fatalf("slice %+v", s)
				}
			},
		},
		{
			name: "MPS shares replace the whole GPU",
			snap: fixture(3, 2),
			edit: func(c *Config) { c.MPS = []MPSConfig{{GPUs: []string{"all"}, Shares: 4}} },
			want: map[string]int{"mps/GPU-a": 4, "mps/GPU-b": 4, "mig/3g.40gb": 1, "mig/1g.10gb": 1},
			check: func(t *testing.T, m *model) {
				s := m.byID["GPU-a-mps-3"]
				if s == nil || s.threadPercent != 25 || s.memLimitMiB != 81559/4 {
					t.Fatalf("share %+v", s)
				}
			},
		},
		{
			name: "ignored by index, UUID and MIG UUID",
			snap: fixture(4, 3),
			edit: func(c *Config) { c.IgnoredGPUIDs = []string{"0", "GPU-b", "MIG-d0"} },
			want: map[string]int{"gpu/NVIDIA H100 80GB HBM3": 1, "mig/1g.10gb": 1},
		},
		{
			name:      "an XID on a GPU covers its slices; on a MIG only itself",
			snap:      fixture(2, 1),
			unhealthy: map[string]string{"GPU-b": "XID 79", "GPU-a": ""},
			want:      map[string]int{"gpu/NVIDIA H100 80GB HBM3": 1, "mig/3g.40gb": 1, "mig/1g.10gb": 1},
			check: func(t *testing.T, m *model) {
				for _, g := range m.groups {
					for _, d := range g.Devices {
						wantHealthy := g.Type == "gpu"
						if d.Healthy != wantHealthy {
							t.Errorf("%s healthy=%v (%s)", d.ID, d.Healthy, d.HealthDescription)
						}
					}
				}
			},
		},
		{
			name: "a GPU NVML cannot read is listed unhealthy with the reason",
			snap: func() *gpu.Snapshot {
				s := fixture(1)
				s.GPUs[0].Err = errors.New("GPU is lost")
				return s
			}(),
			want: map[string]int{"gpu/NVIDIA H100 80GB HBM3": 1},
			check: func(t *testing.T, m *model) {
				d := m.groups[0].Devices[0]
				if d.Healthy || !strings.Contains(d.HealthDescription, "GPU is lost") {
					t.Errorf("device %+v", d)
				}
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := defaults(t)
			if c.edit != nil {
				c.edit(cfg)
			}
			m := buildModel(c.snap, cfg, c.unhealthy, nil)
			checkWire(t, m.groups)
			got := map[string]int{}
			for _, g := range m.groups {
				if g.Vendor != "nvidia" {
					t.Errorf("vendor %q", g.Vendor)
				}
				for k, a := range g.Attributes {
					if err := a.Validate(); err != nil {
						t.Errorf("%s/%s attribute %s: %v", g.Type, g.Name, k, err)
					}
				}
				got[g.Type+"/"+g.Name] = len(g.Devices)
			}
			if len(got) != len(c.want) {
				t.Fatalf("groups %v, want %v", got, c.want)
			}
			for k, n := range c.want {
				if got[k] != n {
					t.Errorf("group %s has %d devices, want %d (all: %v)", k, got[k], n, got)
				}
			}
			if c.check != nil {
				c.check(t, m)
			}
		})
	}
}

func TestSignatureChangesWithHealthOnly(t *testing.T) {
	cfg := defaults(t)
	a := buildModel(fixture(2), cfg, nil, nil)
	b := buildModel(fixture(2), cfg, nil, nil)
	c := buildModel(fixture(2), cfg, map[string]string{"GPU-a": "XID 48"}, nil)
	if a.signature != b.signature {
		t.Error("identical snapshots differ")
	}
	if a.signature == c.signature {
		t.Error("health change not in the signature: Nomad would never hear of it")
	}
}

func TestReserve(t *testing.T) {
	cfg := defaults(t)
	cfg.MPS = []MPSConfig{{GPUs: []string{"0", "1"}, Shares: 4}}
	m := buildModel(fixture(3, 2), cfg, nil, nil)
	cases := []struct {
		name string
		ids  []string
		want map[string]string
		err  string
	}{
		{name: "whole GPU", ids: []string{"GPU-c"}, err: "device GPU-c no longer exists on this node"},
		{name: "MIG", ids: []string{"MIG-c1", "MIG-c0"}, want: map[string]string{
			"CUDA_VISIBLE_DEVICES": "MIG-c0,MIG-c1", "NVIDIA_VISIBLE_DEVICES": "MIG-c0,MIG-c1", "NOMAD_GPU_SLICE_TYPE": "mig",
		}},
		{name: "two shares of one GPU are summed", ids: []string{"GPU-a-mps-0", "GPU-a-mps-1"}, want: map[string]string{
			"CUDA_VISIBLE_DEVICES": "GPU-a", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "50", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=40778M",
			"CUDA_MPS_PIPE_DIRECTORY": "/run/nomad-gpu/mps/GPU-a", "NOMAD_GPU_DEVICE_IDS": "GPU-a-mps-0,GPU-a-mps-1", "NOMAD_GPU_SLICE_TYPE": "mps",
		}},
		{name: "shares on two GPUs", ids: []string{"GPU-b-mps-0", "GPU-a-mps-2", "GPU-b-mps-1"}, want: map[string]string{
			"CUDA_VISIBLE_DEVICES": "GPU-a,GPU-b", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=20389M,1=40778M",
		}},
		{name: "unknown", ids: []string{"GPU-zz"}, err: "device GPU-zz no longer exists on this node"},
		{name: "mixed types", ids: []string{"MIG-c0", "GPU-a-mps-0"}, err: "different types"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res, err := m.reserve(c.ids, cfg.MPSPipeRoot)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range c.want {
				if res.Envs[k] != v {
					t.Errorf("%s=%q, want %q", k, res.Envs[k], v)
				}
			}
		})
	}
}

func TestDeviceNodesOnlyExisting(t *testing.T) {
	dir := t.TempDir()
	oldDev, oldCaps := devRoot, procCapsFile
	t.Cleanup(func() { devRoot, procCapsFile = oldDev, oldCaps })
	devRoot = dir
	procCapsFile = filepath.Join(dir, "mig-minors")
	for _, p := range []string{"nvidiactl", "nvidia2", "nvidia-caps/nvidia-cap21", "nvidia-caps/nvidia-cap22"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(procCapsFile, []byte("config 1\nmonitor 2\ngpu2/gi1/access 21\ngpu2/gi1/ci0/access 22\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	m := buildModel(fixture(3, 2), defaults(t), nil, nil)
	res, err := m.reserve([]string{"MIG-c0"}, "/x")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range res.Devices {
		got = append(got, d.TaskPath)
	}
	want := "/dev/nvidiactl /dev/nvidia2 /dev/nvidia-caps/nvidia-cap21 /dev/nvidia-caps/nvidia-cap22"
	if strings.Join(got, " ") != want {
		t.Fatalf("devices %v, want %s", got, want)
	}
}

func TestConfigValidate(t *testing.T) {
	cases := []struct {
		name string
		edit func(*Config)
		err  string
	}{
		{"defaults are valid", func(*Config) {}, ""},
		{"backend", func(c *Config) { c.Backend = "rocm" }, `backend: "rocm" is not a backend`},
		{"period", func(c *Config) { c.FingerprintPeriod = 1 }, "fingerprint_period"},
		{"pipe root relative", func(c *Config) { c.MPSPipeRoot = "mps" }, "mps_pipe_root"},
		{"shares too many", func(c *Config) { c.MPS = []MPSConfig{{GPUs: []string{"0"}, Shares: 49}} }, "mps[0].shares: 49 is out of range"},
		{"no gpus", func(c *Config) { c.MPS = []MPSConfig{{Shares: 2}} }, "mps[0].gpus"},
		{"MIG in mps", func(c *Config) { c.MPS = []MPSConfig{{GPUs: []string{"MIG-x"}, Shares: 2}} }, "is a MIG instance"},
		{"GPU twice", func(c *Config) {
			c.MPS = []MPSConfig{{GPUs: []string{"1"}, Shares: 2}, {GPUs: []string{"1"}, Shares: 4}}
		}, "mps[1].gpus[0]: GPU \"1\" is already shared by mps[0]"},
		{"all plus more", func(c *Config) {
			c.MPS = []MPSConfig{{GPUs: []string{"all"}, Shares: 2}, {GPUs: []string{"1"}, Shares: 4}}
		}, `"all" cannot be combined`},
		{"xid 0", func(c *Config) { c.Health.CriticalXIDs = []uint64{0} }, "health.critical_xids[0]"},
		{"sim system", func(c *Config) { c.Backend = "sim"; c.Sim.System = "dgx1" }, "sim.system"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := defaults(t)
			c.edit(cfg)
			err := cfg.Validate()
			if c.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Fatalf("error %v, want %q", err, c.err)
			}
		})
	}
}

func TestXIDPolicy(t *testing.T) {
	cfg := defaults(t)
	p := newXIDPolicy(cfg.Health)
	for xid, want := range map[uint64]bool{13: false, 31: false, 43: false, 45: false, 68: false, 109: false, 48: true, 79: true, 94: true} {
		if p.counts(xid) != want {
			t.Errorf("default policy counts(%d) = %v", xid, !want)
		}
	}
	p = newXIDPolicy(HealthConfig{CriticalXIDs: []uint64{79}})
	if p.counts(48) || !p.counts(79) {
		t.Error("critical_xids must be the only list that counts")
	}
}
