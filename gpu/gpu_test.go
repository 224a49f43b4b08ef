package gpu

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/hashicorp/go-hclog"
)

func TestMain(m *testing.M) {
	// Shorter NVML waits only make cancellation quicker; behaviour is the same.
	eventWait = 20 * time.Millisecond
	eventRetry = 20 * time.Millisecond
	os.Exit(m.Run())
}

func openSim(t testing.TB, sc SimConfig) *Inventory {
	t.Helper()
	inv, err := Open(Config{Backend: BackendSim, Sim: sc}, nil)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { inv.Close() })
	return inv
}

func snapshot(t testing.TB, inv *Inventory) *Snapshot {
	t.Helper()
	s, err := inv.Snapshot()
	if err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	return s
}

// eventually retries cond until it holds; control file changes reach a sim
// node on its next poll.
func eventually(t *testing.T, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func allMIG(s *Snapshot) []MIGDevice {
	var out []MIGDevice
	for _, g := range s.GPUs {
		out = append(out, g.MIG...)
	}
	return out
}

func TestSimSystems(t *testing.T) {
	tests := []struct {
		system, name, cc, arch, driver, cuda string
		memMiB                               uint64
		sms                                  int
		bus                                  []string
	}{
		{"dgxa100", "NVIDIA A100-SXM4-40GB", "8.0", "ampere", "550.54.15", "12.4", 40960, 108,
			[]string{"0000:07:00.0", "0000:0f:00.0", "0000:47:00.0", "0000:4e:00.0", "0000:87:00.0", "0000:90:00.0", "0000:b7:00.0", "0000:bd:00.0"}},
		{"dgxh100", "NVIDIA H100 80GB HBM3", "9.0", "hopper", "550.54.15", "12.4", 81920, 132,
			[]string{"0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0", "0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0"}},
		{"dgxh200", "NVIDIA H200 141GB HBM3e", "9.0", "hopper", "550.54.15", "12.4", 144384, 132,
			[]string{"0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0", "0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0"}},
		{"dgxb200", "NVIDIA B200 180GB HBM3e", "10.0", "blackwell", "560.28.03", "12.6", 184320, 148,
			[]string{"0000:1b:00.0", "0000:43:00.0", "0000:52:00.0", "0000:61:00.0", "0000:9d:00.0", "0000:c3:00.0", "0000:d1:00.0", "0000:df:00.0"}},
	}
	for _, tc := range tests {
		t.Run(tc.system, func(t *testing.T) {
			inv := openSim(t, SimConfig{System: tc.system, Seed: "node-1"})
			if inv.Backend() != BackendSim {
				t.Errorf("Backend() = %q", inv.Backend())
			}
			s := snapshot(t, inv)
			if s.DriverVersion != tc.driver || s.CUDAVersion != tc.cuda {
				t.Errorf("versions = %q, %q; want %q, %q", s.DriverVersion, s.CUDAVersion, tc.driver, tc.cuda)
			}
			if len(s.GPUs) != 8 {
				t.Fatalf("%d GPUs, want 8", len(s.GPUs))
			}
			seen := map[string]bool{}
			for i, g := range s.GPUs {
				want := GPU{Index: i, UUID: g.UUID, Name: tc.name, MemoryMiB: tc.memMiB, PCIBusID: tc.bus[i],
					ComputeCapability: tc.cc, Architecture: tc.arch, Multiprocessors: tc.sms}
				if fmt.Sprint(g) != fmt.Sprint(want) {
					t.Errorf("GPU %d =\n %+v\nwant\n %+v", i, g, want)
				}
				if !strings.HasPrefix(g.UUID, "GPU-") || len(g.UUID) != len("GPU-")+36 || seen[g.UUID] {
					t.Errorf("GPU %d: bad or duplicate UUID %q", i, g.UUID)
				}
				seen[g.UUID] = true
			}
		})
	}
}

func TestSimUUIDsDeriveFromSystemAndSeed(t *testing.T) {
	mig := []MIGLayout{{GPUs: []int{2, 5}, Profiles: []string{"3g.40gb", "2g.20gb", "1g.10gb"}}}
	uuids := func(system, seed string) []string {
		var out []string
		s := snapshot(t, openSim(t, SimConfig{System: system, Seed: seed, MIG: mig}))
		for _, g := range s.GPUs {
			out = append(out, g.UUID)
			for _, m := range g.MIG {
				out = append(out, m.UUID)
			}
		}
		return out
	}
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	base := uuids("dgxh100", "node-a")
	if len(base) != 8+6 {
		t.Fatalf("%d devices, want 14", len(base))
	}
	tests := []struct {
		name, system, seed string
		same               bool
	}{
		{"same seed", "dgxh100", "node-a", true},
		{"other seed", "dgxh100", "node-b", false},
		{"empty seed is the host name", "dgxh100", host, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := uuids(tc.system, tc.seed)
			want := base
			if tc.name == "empty seed is the host name" {
				want = uuids("dgxh100", "")
			}
			if tc.same && !slices.Equal(got, want) {
				t.Errorf("UUIDs differ:\n%v\n%v", got, want)
			}
			if !tc.same {
				for _, u := range got {
					if slices.Contains(want, u) {
						t.Errorf("UUID %s shared across seeds", u)
					}
				}
			}
		})
	}
	// Different systems never share identities even with the same seed.
	h200 := snapshot(t, openSim(t, SimConfig{System: "dgxh200", Seed: "node-a"}))
	if slices.Contains(base, h200.GPUs[0].UUID) {
		t.Error("dgxh200 GPU 0 has a dgxh100 UUID")
	}
}

func TestSimMIG56(t *testing.T) {
	inv := openSim(t, SimConfig{System: "dgxh100", Seed: "mig", MIG: []MIGLayout{{
		GPUs:     []int{0, 1, 2, 3, 4, 5, 6, 7},
		Profiles: slices.Repeat([]string{"1g.10gb"}, 7),
	}}})
	s := snapshot(t, inv)
	migs := allMIG(s)
	if len(migs) != 56 {
		t.Fatalf("%d MIG devices, want 56", len(migs))
	}
	seen := map[string]bool{}
	for _, g := range s.GPUs {
		if !g.MIGEnabled || len(g.MIG) != 7 || g.Err != nil {
			t.Errorf("GPU %d: MIGEnabled=%v, %d MIG devices, err %v", g.Index, g.MIGEnabled, len(g.MIG), g.Err)
		}
		gis := map[int]bool{}
		for j, m := range g.MIG {
			if !strings.HasPrefix(m.UUID, "MIG-") || seen[m.UUID] {
				t.Errorf("bad or duplicate MIG UUID %q", m.UUID)
			}
			seen[m.UUID] = true
			want := MIGDevice{UUID: m.UUID, ParentUUID: g.UUID, ParentIndex: g.Index, Index: j, Profile: "1g.10gb",
				MemoryMiB: 10240, Multiprocessors: 16, GPUInstanceID: m.GPUInstanceID}
			if m != want {
				t.Errorf("MIG %d/%d = %+v, want %+v", g.Index, j, m, want)
			}
			if gis[m.GPUInstanceID] {
				t.Errorf("GPU %d: GPU instance id %d used twice", g.Index, m.GPUInstanceID)
			}
			gis[m.GPUInstanceID] = true
		}
	}
	// A second look is served from the cache and must say the same.
	if s2 := snapshot(t, inv); fmt.Sprint(s2) != fmt.Sprint(s) {
		t.Error("second Snapshot differs from the first")
	}
}

// Every profile a system accepts comes back under the same name, so a layout
// written for the sim names what the inventory reports.
func TestSimMIGProfileNamesRoundTrip(t *testing.T) {
	want := map[string][]string{
		"dgxa100": {"1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"},
		"dgxh100": {"1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"},
		"dgxh200": {"1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"},
		"dgxb200": {"1g.23gb", "1g.23gb+me", "1g.45gb", "2g.45gb", "3g.90gb", "4g.90gb", "7g.180gb"},
	}
	if got := SimSystems(); !slices.Equal(got, []string{"dgxa100", "dgxb200", "dgxh100", "dgxh200"}) {
		t.Errorf("SimSystems() = %v", got)
	}
	for system, profiles := range want {
		t.Run(system, func(t *testing.T) {
			if got := SimProfiles(system); !slices.Equal(got, profiles) {
				t.Errorf("SimProfiles = %v, want %v", got, profiles)
			}
			var layouts []MIGLayout
			for i, p := range profiles {
				layouts = append(layouts, MIGLayout{GPUs: []int{i}, Profiles: []string{p}})
			}
			s := snapshot(t, openSim(t, SimConfig{System: system, Seed: "x", MIG: layouts}))
			for i, p := range profiles {
				if len(s.GPUs[i].MIG) != 1 || s.GPUs[i].MIG[0].Profile != p {
					t.Errorf("GPU %d: MIG %+v, want one %s", i, s.GPUs[i].MIG, p)
				}
			}
		})
	}
}

func TestValidate(t *testing.T) {
	h100 := func(mig ...MIGLayout) Config {
		return Config{Backend: BackendSim, Sim: SimConfig{System: "dgxh100", MIG: mig}}
	}
	tests := []struct {
		name string
		cfg  Config
		want []string // substrings of the error, one per problem; none = valid
	}{
		{"nvml default", Config{}, nil},
		{"nvml ignores sim.system", Config{Backend: "nvml", Sim: SimConfig{System: "nope"}}, nil},
		{"nvml with a sim seed", Config{Backend: "nvml", Sim: SimConfig{Seed: "node-1"}}, []string{`sim: only used with backend = "sim" (backend is "nvml")`}},
		{"sim plain", h100(), nil},
		{"full 1g layout", h100(MIGLayout{GPUs: []int{0, 7}, Profiles: slices.Repeat([]string{"1g.10gb"}, 7)}), nil},
		{"mixed layout in any order", h100(MIGLayout{GPUs: []int{1}, Profiles: []string{"1g.10gb", "1g.10gb", "4g.40gb"}}), nil},
		{"MIG on with no instances", h100(MIGLayout{GPUs: []int{3}}), nil},
		{"bad backend", Config{Backend: "cuda"}, []string{`backend: "cuda" is not a backend; allowed: nvml, sim`}},
		{"no system", Config{Backend: BackendSim}, []string{"sim.system: required; allowed: dgxa100, dgxb200, dgxh100, dgxh200"}},
		{"unknown system", Config{Backend: BackendSim, Sim: SimConfig{System: "dgx9"}},
			[]string{`sim.system: "dgx9" is not a simulated system; allowed: dgxa100, dgxb200, dgxh100, dgxh200`}},
		{"unknown profile", h100(MIGLayout{GPUs: []int{0}, Profiles: []string{"1g.10gb", "3g.40gb", "5g.10gb"}}),
			[]string{`sim.mig[0].profiles[2]: "5g.10gb" is not a MIG profile of NVIDIA H100 80GB HBM3; allowed: 1g.10gb, 1g.10gb+me, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb`}},
		{"profile of another GPU", h100(MIGLayout{GPUs: []int{0}, Profiles: []string{"1g.5gb"}}),
			[]string{`sim.mig[0].profiles[0]: "1g.5gb" is not a MIG profile of NVIDIA H100 80GB HBM3`}},
		{"GPU out of range", h100(MIGLayout{GPUs: []int{0, 9}, Profiles: []string{"7g.80gb"}}),
			[]string{"sim.mig[0].gpus[1]: GPU 9 does not exist (dgxh100 has GPUs 0-7)"}},
		{"negative GPU", h100(MIGLayout{GPUs: []int{-1}}), []string{"sim.mig[0].gpus[0]: GPU -1 does not exist"}},
		{"no GPUs", h100(MIGLayout{Profiles: []string{"7g.80gb"}}), []string{"sim.mig[0].gpus: empty"}},
		{"GPU in two layouts", h100(MIGLayout{GPUs: []int{1, 2}}, MIGLayout{GPUs: []int{3, 2}}),
			[]string{"sim.mig[1].gpus[1]: GPU 2 is already in mig[0]; a GPU has one layout"}},
		{"GPU twice in one layout", h100(MIGLayout{GPUs: []int{4, 4}}), []string{"sim.mig[0].gpus[1]: GPU 4 is listed twice"}},
		{"too many slices", h100(MIGLayout{GPUs: []int{0}, Profiles: []string{"4g.40gb", "4g.40gb"}}),
			[]string{`sim.mig[0].profiles[1]: "4g.40gb": at most 1 instance(s) of this profile fit on NVIDIA H100 80GB HBM3`}},
		{"8 x 1g", h100(MIGLayout{GPUs: []int{0}, Profiles: slices.Repeat([]string{"1g.10gb"}, 8)}),
			[]string{`sim.mig[0].profiles[7]: "1g.10gb": at most 7 instance(s)`}},
		{"placements collide", h100(MIGLayout{GPUs: []int{0}, Profiles: []string{"7g.80gb", "1g.10gb"}}),
			[]string{"sim.mig[0].profiles: 7g.80gb, 1g.10gb do not fit together on one NVIDIA H100 80GB HBM3"}},
		{"3g+3g+1g does not fit", h100(MIGLayout{GPUs: []int{0}, Profiles: []string{"3g.40gb", "3g.40gb", "2g.20gb"}}),
			[]string{"sim.mig[0].profiles: 3g.40gb, 3g.40gb, 2g.20gb do not fit together"}},
		{"several problems at once", h100(MIGLayout{GPUs: []int{8}, Profiles: []string{"9g"}}, MIGLayout{}),
			[]string{"sim.mig[0].gpus[0]: GPU 8 does not exist", `sim.mig[0].profiles[0]: "9g" is not a MIG profile`, "sim.mig[1].gpus: empty"}},
		{"negative poll", Config{Backend: BackendSim, Sim: SimConfig{System: "dgxa100", ControlPoll: -time.Second}},
			[]string{"sim.control_poll: -1s is negative"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want %q", tc.want)
			}
			lines := strings.Split(err.Error(), "\n")
			if len(lines) != len(tc.want) {
				t.Errorf("Validate() has %d problems, want %d:\n%v", len(lines), len(tc.want), err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate() =\n%v\nwant it to contain\n%s", err, w)
				}
			}
			if _, oerr := Open(tc.cfg, nil); oerr == nil {
				t.Error("Open accepted a config that Validate rejects")
			}
		})
	}
}

// The nvml backend: on a machine without the NVIDIA driver (like CI) Open
// fails, without a panic, with the error that tells an operator what to
// install; where a driver is present the same inventory reads the real GPUs.
func TestNVMLBackend(t *testing.T) {
	noLibrary := "gpu: cannot load NVML (libnvidia-ml.so.1): " + nvml.ErrorString(nvml.ERROR_LIBRARY_NOT_FOUND) +
		"; is the NVIDIA driver installed and its library on the loader path?"
	for _, backend := range []string{"", BackendNVML} {
		t.Run("backend="+backend, func(t *testing.T) {
			inv, err := Open(Config{Backend: backend}, nil)
			if err != nil {
				// The library loads but finds no driver or GPU: NVML's own words.
				if got := err.Error(); got != noLibrary && !strings.HasPrefix(got, "gpu: NVML init failed: ") {
					t.Fatalf("Open without NVML: %q, want %q or NVML's init error", got, noLibrary)
				}
				t.Skipf("no NVML here (%v): the real-GPU checks did not run", err)
			}
			defer inv.Close()
			checkRealGPUs(t, inv)
		})
	}
}

var sysfsBusID = regexp.MustCompile(`^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$`)

func checkRealGPUs(t *testing.T, inv *Inventory) {
	s := snapshot(t, inv)
	t.Logf("driver %s, CUDA %s", s.DriverVersion, s.CUDAVersion)
	if s.DriverVersion == "" {
		t.Error("no driver version")
	}
	for _, g := range s.GPUs {
		t.Logf("GPU %+v", g)
		if g.Err != nil || !strings.HasPrefix(g.UUID, "GPU-") || g.Name == "" || g.MemoryMiB == 0 || !sysfsBusID.MatchString(g.PCIBusID) {
			t.Errorf("GPU %d: %+v", g.Index, g)
		}
		if _, err := os.Stat("/sys/bus/pci/devices/" + g.PCIBusID); err != nil {
			t.Errorf("GPU %d: bus id %s is not in sysfs: %v", g.Index, g.PCIBusID, err)
		}
		uuids := []string{g.UUID}
		for _, m := range g.MIG {
			uuids = append(uuids, m.UUID)
		}
		for _, u := range uuids {
			tm, err := inv.Telemetry(u)
			t.Logf("%s: %s, %v", u, fmtTelemetry(tm), err)
			if err != nil || tm.MemoryTotalMiB == 0 {
				t.Errorf("Telemetry(%s) = %s, %v", u, fmtTelemetry(tm), err)
			}
			if _, err := inv.Processes(u); err != nil {
				t.Errorf("Processes(%s): %v", u, err)
			}
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := inv.Events(ctx)
	if err != nil {
		t.Fatalf("Events: %v", err)
	}
	cancel()
	for range ch {
	}
}

func TestControlDrivesTelemetryAndProcesses(t *testing.T) {
	ctlPath := filepath.Join(t.TempDir(), "control.json")
	sc := SimConfig{System: "dgxh100", Seed: "ctl", ControlFile: ctlPath, ControlPoll: 5 * time.Millisecond,
		MIG: []MIGLayout{{GPUs: []int{1}, Profiles: []string{"1g.10gb", "3g.40gb"}}}}
	inv := openSim(t, sc)
	other := openSim(t, sc) // another process on the same node, e.g. the task driver
	s := snapshot(t, inv)
	gpu0, gpu1 := s.GPUs[0].UUID, s.GPUs[1].UUID
	mig1g, mig3g := s.GPUs[1].MIG[0].UUID, s.GPUs[1].MIG[1].UUID

	idle, err := inv.Telemetry(gpu0)
	if err != nil {
		t.Fatal(err)
	}
	if *idle.GPUUtilPercent != 0 || idle.MemoryUsedMiB != 0 || idle.MemoryTotalMiB != 81920 || *idle.TemperatureC != 33 ||
		*idle.PowerMilliW != 70000 || *idle.SMClockMHz != 345 || *idle.MemClockMHz != 2619 || *idle.ECCCorrected != 0 || *idle.ECCUncorrected != 0 {
		t.Errorf("idle telemetry = %s", fmtTelemetry(idle))
	}

	ctl := OpenControl(ctlPath)
	steps := []struct {
		name  string
		write func() error
		uuid  string
		want  string // fmtTelemetry of the device
		procs []Process
	}{
		{"utilization", func() error { return ctl.SetUtilization(gpu0, 80, 30) }, gpu0,
			"util=80/30 mem=0/81920 temp=69 power=574000 sm=1980 memclk=2619 ecc=0/0", nil},
		{"process on GPU", func() error { return ctl.SetProcessMemory(100, gpu0, 2048) }, gpu0,
			"util=80/30 mem=2048/81920 temp=69 power=574000 sm=1980 memclk=2619 ecc=0/0", []Process{{100, 2048}}},
		{"second process on GPU", func() error { return ctl.SetProcessMemory(101, gpu0, 512) }, gpu0,
			"util=80/30 mem=2560/81920 temp=69 power=574000 sm=1980 memclk=2619 ecc=0/0", []Process{{100, 2048}, {101, 512}}},
		{"process on MIG", func() error { return ctl.SetProcessMemory(200, mig1g, 1024) }, mig1g,
			"util=0/0 mem=1024/10240 temp=33 power=70000 sm=345 memclk=2619 ecc=0/0", []Process{{200, 1024}}},
		{"MIG memory counts on the parent", func() error { return ctl.SetProcessMemory(201, mig3g, 4096) }, gpu1,
			"util=0/0 mem=5120/81920 temp=33 power=70000 sm=345 memclk=2619 ecc=0/0", []Process{{200, 1024}, {201, 4096}}},
		{"MIG utilization drives the parent", func() error { return ctl.SetUtilization(mig3g, 70, 50) }, gpu1,
			"util=30/21 mem=5120/81920 temp=46 power=259000 sm=1980 memclk=2619 ecc=0/0", []Process{{200, 1024}, {201, 4096}}},
		{"MIG sensors are the parent's", nil, mig3g,
			"util=70/50 mem=4096/40960 temp=46 power=259000 sm=1980 memclk=2619 ecc=0/0", []Process{{201, 4096}}},
		{"zero removes a process", func() error { return ctl.SetProcessMemory(100, gpu0, 0) }, gpu0,
			"util=80/30 mem=512/81920 temp=69 power=574000 sm=1980 memclk=2619 ecc=0/0", []Process{{101, 512}}},
		{"unknown UUIDs are ignored", func() error { return ctl.SetProcessMemory(300, "GPU-not-here", 99) }, gpu0,
			"util=80/30 mem=512/81920 temp=69 power=574000 sm=1980 memclk=2619 ecc=0/0", []Process{{101, 512}}},
		{"clear", ctl.Clear, gpu1,
			"util=0/0 mem=0/81920 temp=33 power=70000 sm=345 memclk=2619 ecc=0/0", nil},
	}
	for _, st := range steps {
		if st.write != nil {
			if err := st.write(); err != nil {
				t.Fatalf("%s: %v", st.name, err)
			}
		}
		for n, in := range []*Inventory{inv, other} {
			eventually(t, fmt.Sprintf("%s (inventory %d)", st.name, n), func() error {
				tm, err := in.Telemetry(st.uuid)
				if err != nil {
					return err
				}
				if got := fmtTelemetry(tm); got != st.want {
					return fmt.Errorf("telemetry %s, want %s", got, st.want)
				}
				ps, err := in.Processes(st.uuid)
				if err != nil {
					return err
				}
				if !slices.Equal(ps, st.procs) {
					return fmt.Errorf("processes %v, want %v", ps, st.procs)
				}
				return nil
			})
		}
	}
	if err := ctl.SetUtilization(gpu0, 101, 0); err == nil {
		t.Error("SetUtilization accepted 101%")
	}
}

func fmtTelemetry(t Telemetry) string {
	p32 := func(p *uint32) string {
		if p == nil {
			return "-"
		}
		return fmt.Sprint(*p)
	}
	p64 := func(p *uint64) string {
		if p == nil {
			return "-"
		}
		return fmt.Sprint(*p)
	}
	return fmt.Sprintf("util=%s/%s mem=%d/%d temp=%s power=%s sm=%s memclk=%s ecc=%s/%s",
		p32(t.GPUUtilPercent), p32(t.MemUtilPercent), t.MemoryUsedMiB, t.MemoryTotalMiB, p32(t.TemperatureC),
		p32(t.PowerMilliW), p32(t.SMClockMHz), p32(t.MemClockMHz), p64(t.ECCCorrected), p64(t.ECCUncorrected))
}

func TestTelemetryUnknownDevice(t *testing.T) {
	inv := openSim(t, SimConfig{System: "dgxa100", Seed: "x"})
	for _, uuid := range []string{"GPU-00000000-0000-0000-0000-000000000000", "MIG-nope", ""} {
		if _, err := inv.Telemetry(uuid); !errors.Is(err, ErrUnknownDevice) {
			t.Errorf("Telemetry(%q) error = %v, want ErrUnknownDevice", uuid, err)
		}
		if _, err := inv.Processes(uuid); !errors.Is(err, ErrUnknownDevice) {
			t.Errorf("Processes(%q) error = %v, want ErrUnknownDevice", uuid, err)
		}
	}
}

// Before any Snapshot, Telemetry finds devices through NVML itself.
func TestTelemetryBeforeSnapshot(t *testing.T) {
	sc := SimConfig{System: "dgxb200", Seed: "x", MIG: []MIGLayout{{GPUs: []int{6}, Profiles: []string{"2g.45gb"}}}}
	s := snapshot(t, openSim(t, sc))
	inv := openSim(t, sc)
	for _, uuid := range []string{s.GPUs[6].UUID, s.GPUs[6].MIG[0].UUID} {
		tm, err := inv.Telemetry(uuid)
		if err != nil {
			t.Fatalf("Telemetry(%s): %v", uuid, err)
		}
		if tm.TemperatureC == nil || *tm.TemperatureC != 30 {
			t.Errorf("Telemetry(%s) = %s", uuid, fmtTelemetry(tm))
		}
	}
}

func recvEvents(t *testing.T, ch <-chan Event, n int) []Event {
	t.Helper()
	var out []Event
	timeout := time.After(5 * time.Second)
	for len(out) < n {
		select {
		case e, ok := <-ch:
			if !ok {
				t.Fatalf("event channel closed after %d of %d events", len(out), n)
			}
			out = append(out, e)
		case <-timeout:
			t.Fatalf("got %d of %d events: %v", len(out), n, out)
		}
	}
	return out
}

func noEvent(t *testing.T, ch <-chan Event, wait time.Duration) {
	t.Helper()
	select {
	case e := <-ch:
		t.Fatalf("unexpected event %+v", e)
	case <-time.After(wait):
	}
}

func TestEventsFromControlFile(t *testing.T) {
	ctlPath := filepath.Join(t.TempDir(), "control.json")
	sc := SimConfig{System: "dgxa100", Seed: "ev", ControlFile: ctlPath, ControlPoll: 5 * time.Millisecond,
		MIG: []MIGLayout{{GPUs: []int{3}, Profiles: []string{"3g.20gb", "2g.10gb", "1g.5gb"}}}}
	inv := openSim(t, sc)
	s := snapshot(t, inv)
	gpu0, gpu3, mig := s.GPUs[0].UUID, s.GPUs[3].UUID, s.GPUs[3].MIG[2].UUID

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := inv.Events(ctx)
	if err != nil {
		t.Fatal(err)
	}
	noEvent(t, ch, 50*time.Millisecond)

	ctl := OpenControl(ctlPath)
	before := time.Now()
	for _, x := range []struct {
		uuid string
		xid  uint64
	}{{gpu0, 79}, {mig, 94}, {gpu3, 48}, {"GPU-elsewhere", 31}} {
		if err := ctl.InjectXID(x.uuid, x.xid); err != nil {
			t.Fatal(err)
		}
	}
	want := []Event{{UUID: gpu0, XID: 79}, {UUID: mig, XID: 94}, {UUID: gpu3, XID: 48}}
	check := func(name string, got []Event) {
		t.Helper()
		for k := range got {
			if got[k].Time.Before(before) || time.Since(got[k].Time) > time.Minute {
				t.Errorf("%s: event %d time %v", name, k, got[k].Time)
			}
			got[k].Time = time.Time{}
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: events %v, want %v", name, got, want)
		}
	}
	check("live subscriber", recvEvents(t, ch, 3))
	noEvent(t, ch, 50*time.Millisecond)

	// Events stay in the file: a plugin that restarts sees them again, once.
	late := openSim(t, sc)
	ch2, err := late.Events(ctx)
	if err != nil {
		t.Fatal(err)
	}
	check("later subscriber", recvEvents(t, ch2, 3))
	noEvent(t, ch2, 50*time.Millisecond)

	// After Clear nothing is replayed, and new events are still delivered.
	if err := ctl.Clear(); err != nil {
		t.Fatal(err)
	}
	cleared := openSim(t, sc)
	ch3, err := cleared.Events(ctx)
	if err != nil {
		t.Fatal(err)
	}
	noEvent(t, ch3, 50*time.Millisecond)
	if err := ctl.InjectXID(mig, 13); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]<-chan Event{"first": ch, "later": ch2, "after clear": ch3} {
		if got := recvEvents(t, c, 1); got[0].UUID != mig || got[0].XID != 13 {
			t.Errorf("%s subscriber: %+v", name, got[0])
		}
	}

	cancel()
	for _, c := range []<-chan Event{ch, ch2, ch3} {
		select {
		case _, ok := <-c:
			if ok {
				t.Error("event after cancel")
			}
		case <-time.After(5 * time.Second):
			t.Fatal("channel not closed after cancel")
		}
	}
}

func TestEventsEndOnClose(t *testing.T) {
	inv, err := Open(Config{Backend: BackendSim, Sim: SimConfig{System: "dgxh100", Seed: "c"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := inv.Events(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := inv.Close(); err != nil {
		t.Fatal(err)
	}
	if _, ok := <-ch; ok {
		t.Error("event after Close")
	}
	if err := inv.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := inv.Snapshot(); !errors.Is(err, ErrClosed) {
		t.Errorf("Snapshot after Close: %v", err)
	}
	if _, err := inv.Telemetry("GPU-x"); !errors.Is(err, ErrClosed) {
		t.Errorf("Telemetry after Close: %v", err)
	}
	if _, err := inv.Processes("GPU-x"); !errors.Is(err, ErrClosed) {
		t.Errorf("Processes after Close: %v", err)
	}
	if _, err := inv.Events(context.Background()); !errors.Is(err, ErrClosed) {
		t.Errorf("Events after Close: %v", err)
	}
}

func TestLostGPU(t *testing.T) {
	ctlPath := filepath.Join(t.TempDir(), "control.json")
	inv := openSim(t, SimConfig{System: "dgxh100", Seed: "lost", ControlFile: ctlPath, ControlPoll: 5 * time.Millisecond,
		MIG: []MIGLayout{{GPUs: []int{4}, Profiles: []string{"3g.40gb", "3g.40gb"}}}})
	before := snapshot(t, inv)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events, err := inv.Events(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ctl := OpenControl(ctlPath)
	for _, idx := range []int{2, 4} {
		if err := ctl.SetGPULost(before.GPUs[idx].UUID, true); err != nil {
			t.Fatal(err)
		}
	}
	var s *Snapshot
	eventually(t, "GPUs 2 and 4 lost", func() error {
		s = snapshot(t, inv)
		if s.GPUs[2].Err == nil || s.GPUs[4].Err == nil {
			return errors.New("no error yet")
		}
		return nil
	})
	for _, g := range s.GPUs {
		if g.Index != 2 && g.Index != 4 {
			if g.Err != nil {
				t.Errorf("healthy GPU %d: %v", g.Index, g.Err)
			}
			continue
		}
		var ne *NVMLError
		if !errors.As(g.Err, &ne) || ne.Return != nvml.ERROR_GPU_IS_LOST {
			t.Errorf("GPU %d: error %v, want ERROR_GPU_IS_LOST", g.Index, g.Err)
		}
		if !strings.Contains(g.Err.Error(), fmt.Sprintf("GPU %d (%s)", g.Index, g.UUID)) {
			t.Errorf("GPU %d: error %q does not name the GPU", g.Index, g.Err)
		}
		// The last known facts (MIG instances included) stay, so the plugin
		// can mark exactly those devices unhealthy.
		want := before.GPUs[g.Index]
		g.Err = nil
		if fmt.Sprint(g) != fmt.Sprint(want) {
			t.Errorf("lost GPU %d =\n %+v\nwant last known\n %+v", g.Index, g, want)
		}
		if _, err := inv.Telemetry(want.UUID); err == nil {
			t.Errorf("Telemetry of lost GPU %d succeeded", g.Index)
		}
	}
	if _, err := inv.Telemetry(before.GPUs[4].MIG[1].UUID); err == nil {
		t.Error("Telemetry of a MIG instance on a lost GPU succeeded")
	}
	// An XID on an instance of the lost GPU still names the instance.
	if err := ctl.InjectXID(before.GPUs[4].MIG[1].UUID, 79); err != nil {
		t.Fatal(err)
	}
	if got := recvEvents(t, events, 1)[0]; got.UUID != before.GPUs[4].MIG[1].UUID || got.XID != 79 {
		t.Errorf("event %+v, want XID 79 on %s", got, before.GPUs[4].MIG[1].UUID)
	}

	if err := ctl.SetGPULost(before.GPUs[2].UUID, false); err != nil {
		t.Fatal(err)
	}
	eventually(t, "GPU 2 back", func() error {
		return snapshot(t, inv).GPUs[2].Err
	})
}

// faultyLib wraps an nvml.Interface and makes chosen calls on chosen GPUs
// fail, to check the inventory against NVML failure modes the sim does not
// produce by itself.
type faultyLib struct {
	nvml.Interface
	faults map[int]map[string]nvml.Return // GPU index -> method -> return
}

func (f *faultyLib) DeviceGetHandleByIndex(i int) (nvml.Device, nvml.Return) {
	if r, ok := f.faults[i]["handle"]; ok {
		return nil, r
	}
	d, r := f.Interface.DeviceGetHandleByIndex(i)
	if fs, ok := f.faults[i]; ok && r == nvml.SUCCESS {
		return &faultyDevice{Device: d, faults: fs}, r
	}
	return d, r
}

type faultyDevice struct {
	nvml.Device
	faults map[string]nvml.Return
}

func (d *faultyDevice) GetName() (string, nvml.Return) {
	if r, ok := d.faults["name"]; ok {
		return "", r
	}
	return d.Device.GetName()
}

func (d *faultyDevice) GetArchitecture() (nvml.DeviceArchitecture, nvml.Return) {
	if r, ok := d.faults["arch"]; ok {
		return 0, r
	}
	return d.Device.GetArchitecture()
}

func (d *faultyDevice) GetAttributes() (nvml.DeviceAttributes, nvml.Return) {
	if r, ok := d.faults["attributes"]; ok {
		return nvml.DeviceAttributes{}, r
	}
	return d.Device.GetAttributes()
}

func (d *faultyDevice) GetMigMode() (int, int, nvml.Return) {
	if r, ok := d.faults["mig mode"]; ok {
		return 0, 0, r
	}
	return d.Device.GetMigMode()
}

func (d *faultyDevice) GetPowerUsage() (uint32, nvml.Return) {
	if r, ok := d.faults["power"]; ok {
		return 0, r
	}
	return d.Device.GetPowerUsage()
}

func (d *faultyDevice) GetTotalEccErrors(t nvml.MemoryErrorType, c nvml.EccCounterType) (uint64, nvml.Return) {
	if r, ok := d.faults["ecc"]; ok {
		return 0, r
	}
	return d.Device.GetTotalEccErrors(t, c)
}

func (d *faultyDevice) GetUtilizationRates() (nvml.Utilization, nvml.Return) {
	if r, ok := d.faults["utilization"]; ok {
		return nvml.Utilization{}, r
	}
	return d.Device.GetUtilizationRates()
}

func openFaulty(t *testing.T, faults map[int]map[string]nvml.Return) (*Inventory, *faultyLib) {
	t.Helper()
	srv := openSim(t, SimConfig{System: "dgxh100", Seed: "faults"}).lib
	lib := &faultyLib{Interface: srv, faults: faults}
	inv, err := newInventory(lib, "test", nilLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inv.Close() })
	return inv, lib
}

func TestGPUFailures(t *testing.T) {
	tests := []struct {
		name    string
		faults  map[string]nvml.Return
		wantErr string // "" = GPU healthy
		check   func(GPU) string
	}{
		{"name fails", map[string]nvml.Return{"name": nvml.ERROR_UNKNOWN}, "name: ERROR_UNKNOWN",
			func(g GPU) string {
				if g.UUID == "" || g.Name != "" || g.MemoryMiB != 81920 || g.PCIBusID == "" {
					return "known facts missing"
				}
				return ""
			}},
		{"architecture not supported is absent", map[string]nvml.Return{"arch": nvml.ERROR_NOT_SUPPORTED}, "",
			func(g GPU) string {
				if g.Architecture != "" || g.Name == "" {
					return "architecture should be absent"
				}
				return ""
			}},
		{"attributes unsupported on whole GPUs", map[string]nvml.Return{"attributes": nvml.ERROR_INVALID_ARGUMENT}, "",
			func(g GPU) string {
				if g.Multiprocessors != 0 {
					return "multiprocessors should be unknown"
				}
				return ""
			}},
		{"MIG mode not supported means no MIG", map[string]nvml.Return{"mig mode": nvml.ERROR_NOT_SUPPORTED}, "", nil},
		{"MIG mode fails", map[string]nvml.Return{"mig mode": nvml.ERROR_UNKNOWN}, "MIG mode: ERROR_UNKNOWN", nil},
		{"no handle", map[string]nvml.Return{"handle": nvml.ERROR_GPU_IS_LOST}, "GPU 3: device handle: ERROR_GPU_IS_LOST",
			func(g GPU) string {
				if g.UUID != "" {
					return "UUID cannot be known"
				}
				return ""
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			inv, _ := openFaulty(t, map[int]map[string]nvml.Return{3: tc.faults})
			s := snapshot(t, inv)
			for _, g := range s.GPUs {
				if g.Index != 3 {
					if g.Err != nil || g.Name == "" {
						t.Errorf("GPU %d affected: %+v", g.Index, g)
					}
					continue
				}
				if (g.Err == nil) != (tc.wantErr == "") || (g.Err != nil && !strings.Contains(g.Err.Error(), tc.wantErr)) {
					t.Errorf("GPU 3 error = %v, want %q", g.Err, tc.wantErr)
				}
				if tc.check != nil {
					if msg := tc.check(g); msg != "" {
						t.Errorf("GPU 3 %+v: %s", g, msg)
					}
				}
			}
		})
	}
}

// A GPU whose handle becomes unavailable keeps its identity from earlier
// snapshots.
func TestGPUFailureAfterSuccess(t *testing.T) {
	inv, lib := openFaulty(t, map[int]map[string]nvml.Return{})
	before := snapshot(t, inv)
	lib.faults[5] = map[string]nvml.Return{"handle": nvml.ERROR_UNKNOWN}
	g := snapshot(t, inv).GPUs[5]
	if g.Err == nil || g.UUID != before.GPUs[5].UUID || g.Name != before.GPUs[5].Name {
		t.Errorf("GPU 5 = %+v, want last known identity with an error", g)
	}
}

func TestTelemetryAbsentValues(t *testing.T) {
	inv, _ := openFaulty(t, map[int]map[string]nvml.Return{
		1: {"power": nvml.ERROR_NOT_SUPPORTED, "ecc": nvml.ERROR_NOT_SUPPORTED, "utilization": nvml.ERROR_NOT_SUPPORTED},
		2: {"power": nvml.ERROR_UNKNOWN},
	})
	s := snapshot(t, inv)
	tm, err := inv.Telemetry(s.GPUs[1].UUID)
	if err != nil {
		t.Fatalf("unsupported values are not errors: %v", err)
	}
	if got := fmtTelemetry(tm); got != "util=-/- mem=0/81920 temp=33 power=- sm=345 memclk=2619 ecc=-/-" {
		t.Errorf("telemetry = %s", got)
	}
	tm, err = inv.Telemetry(s.GPUs[2].UUID)
	var ne *NVMLError
	if !errors.As(err, &ne) || ne.Op != "power usage" {
		t.Errorf("error = %v, want power usage failure", err)
	}
	if tm.TemperatureC == nil || tm.MemoryTotalMiB != 81920 {
		t.Errorf("partial telemetry lost: %s", fmtTelemetry(tm))
	}
}

func TestConcurrentUse(t *testing.T) {
	ctlPath := filepath.Join(t.TempDir(), "control.json")
	inv := openSim(t, SimConfig{System: "dgxh100", Seed: "race", ControlFile: ctlPath, ControlPoll: time.Millisecond,
		MIG: []MIGLayout{{GPUs: []int{0, 1}, Profiles: []string{"2g.20gb", "2g.20gb", "2g.20gb"}}}})
	s := snapshot(t, inv)
	ctl := OpenControl(ctlPath)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := inv.Events(ctx)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 4)
	go func() {
		for k := range 20 {
			if err := ctl.InjectXID(s.GPUs[k%2].MIG[k%3].UUID, uint64(k+1)); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	for w := range 3 {
		go func() {
			for range 50 {
				if _, err := inv.Snapshot(); err != nil {
					done <- err
					return
				}
				for _, g := range s.GPUs[:3] {
					if _, err := inv.Telemetry(g.UUID); err != nil {
						done <- err
						return
					}
					if _, err := inv.Processes(g.UUID); err != nil {
						done <- err
						return
					}
				}
			}
			done <- nil
			_ = w
		}()
	}
	for range 4 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if got := recvEvents(t, ch, 20); len(got) != 20 {
		t.Fatalf("%d events", len(got))
	}
}

func TestPCIBusID(t *testing.T) {
	busID := func(s string) (a [32]int8) {
		for i := range len(s) {
			a[i] = int8(s[i])
		}
		return a
	}
	tests := []struct {
		name string
		in   nvml.PciInfo
		want string
	}{
		{"NVML 8-digit domain", nvml.PciInfo{BusId: busID("00000000:03:00.0")}, "0000:03:00.0"},
		{"upper-case hex", nvml.PciInfo{BusId: busID("00000000:B7:00.0")}, "0000:b7:00.0"},
		{"already sysfs form", nvml.PciInfo{BusId: busID("0000:3b:00.0")}, "0000:3b:00.0"},
		{"large domain keeps its digits", nvml.PciInfo{BusId: busID("00010000:01:00.0")}, "10000:01:00.0"},
		{"non-zero short domain", nvml.PciInfo{BusId: busID("00000002:C1:00.0")}, "0002:c1:00.0"},
		{"no domain", nvml.PciInfo{BusId: busID("41:00.0")}, "0000:41:00.0"},
		{"legacy field only", nvml.PciInfo{BusIdLegacy: [16]int8{'0', '0', '0', '0', ':', '8', 'A', ':', '0', '0', '.', '0'}}, "0000:8a:00.0"},
		{"numeric fields only", nvml.PciInfo{Domain: 1, Bus: 0x2a, Device: 3}, "0001:2a:03.0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := PCIBusID(tc.in); got != tc.want {
				t.Errorf("PCIBusID = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestCUDAVersion(t *testing.T) {
	for in, want := range map[int]string{12040: "12.4", 12060: "12.6", 11080: "11.8", 12000: "12.0", 13010: "13.1", 0: ""} {
		if got := cudaVersion(in); got != want {
			t.Errorf("cudaVersion(%d) = %q, want %q", in, got, want)
		}
	}
}

func BenchmarkSnapshotMIG56(b *testing.B) {
	inv := openSim(b, SimConfig{System: "dgxh100", Seed: "bench", ControlFile: filepath.Join(b.TempDir(), "control.json"),
		MIG: []MIGLayout{{GPUs: []int{0, 1, 2, 3, 4, 5, 6, 7}, Profiles: slices.Repeat([]string{"1g.10gb"}, 7)}}})
	if n := len(allMIG(snapshot(b, inv))); n != 56 {
		b.Fatalf("%d MIG devices", n)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := inv.Snapshot(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkTelemetry(b *testing.B) {
	inv := openSim(b, SimConfig{System: "dgxh100", Seed: "bench", ControlFile: filepath.Join(b.TempDir(), "control.json"),
		MIG: []MIGLayout{{GPUs: []int{1}, Profiles: []string{"1g.10gb"}}}})
	s := snapshot(b, inv)
	for _, bc := range []struct{ name, uuid string }{{"GPU", s.GPUs[0].UUID}, {"MIG", s.GPUs[1].MIG[0].UUID}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := inv.Telemetry(bc.uuid); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func nilLogger() hclog.Logger { return hclog.NewNullLogger() }

// A GPU in MIG mode lists the GPU instance profiles it can make, read
// through NVML (the sim answers GetGpuInstanceProfileInfo as the driver
// does), whatever instances it has now; a GPU not in MIG mode lists none.
func TestMIGProfiles(t *testing.T) {
	s := snapshot(t, openSim(t, SimConfig{System: "dgxh100", Seed: "p", MIG: []MIGLayout{{GPUs: []int{0}, Profiles: []string{"3g.40gb"}}}}))
	want := []MIGProfile{
		{Name: "1g.10gb", Slices: 1, MemoryMiB: 10240, Max: 7},
		{Name: "1g.10gb+me", Slices: 1, MemoryMiB: 10240, Max: 1},
		{Name: "1g.20gb", Slices: 1, MemoryMiB: 20480, Max: 4},
		{Name: "2g.20gb", Slices: 2, MemoryMiB: 20480, Max: 3},
		{Name: "3g.40gb", Slices: 3, MemoryMiB: 40960, Max: 2},
		{Name: "4g.40gb", Slices: 4, MemoryMiB: 40960, Max: 1},
		{Name: "7g.80gb", Slices: 7, MemoryMiB: 81920, Max: 1},
	}
	if got := s.GPUs[0].MIGProfiles; !slices.Equal(got, want) {
		t.Errorf("GPU 0 (MIG mode) profiles:\n%+v\nwant\n%+v", got, want)
	}
	if got := s.GPUs[1].MIGProfiles; len(got) != 0 {
		t.Errorf("GPU 1 (no MIG mode) profiles %+v, want none", got)
	}
}
