package driver

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nomad-gpu/nomad-gpu/wire/drivers"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/driver/gpuwatch"
	"github.com/nomad-gpu/nomad-gpu/driver/mps"
	"github.com/nomad-gpu/nomad-gpu/gpu"
)

// utilSource is a gpuwatch.UtilizationSource with set figures.
type utilSource struct {
	procs map[string][]gpu.Process
	util  map[string]map[uint32]float64
}

func (s utilSource) Processes(uuid string) ([]gpu.Process, error) { return s.procs[uuid], nil }
func (s utilSource) ProcessUtilization(uuid string, _ time.Time) (map[uint32]float64, error) {
	if u, ok := s.util[uuid]; ok {
		return u, nil
	}
	return nil, gpu.ErrNotSupported
}
func (s utilSource) Telemetry(string) (gpu.Telemetry, error) { return gpu.Telemetry{}, nil }

// Each MPS share's task's memory (split over its shares) and utilisation
// of its slice (the same on each of its shares) reach the device plugin.
func TestWriteShareUsage(t *testing.T) {
	root := t.TempDir()
	d, _ := metricsDriver(t, func(c *Config) { c.MPS.PipeRoot = root })
	mgr, err := mps.NewManager(mps.Config{PipeRoot: root, LogRoot: t.TempDir(), StateDir: t.TempDir()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	const g = "GPU-aaaaaaaa-0000-0000-0000-000000000001"
	if err := os.MkdirAll(contract.MPSPipeDir(root, g), 0o755); err != nil {
		t.Fatal(err)
	}
	// "two" holds 2 of 4 shares (50 % of the SMs) and runs them flat out:
	// 30 + 20 % of the GPU. "one" holds 1 (25 %) at 20 %: 5 % of the GPU.
	src := utilSource{
		procs: map[string][]gpu.Process{g: {{PID: 100, UsedMiB: 2000}, {PID: 101, UsedMiB: 1000}, {PID: 200, UsedMiB: 500}}},
		util:  map[string]map[uint32]float64{g: {100: 30, 101: 20, 200: 5}},
	}
	w := gpuwatch.New(src, time.Hour, nil, nil)
	rt := &runtimeState{watch: w, mps: mgr}
	add := func(name string, shares []string, threads string, pids ...int) {
		env := map[string]string{
			contract.EnvSliceType: contract.SliceMPS, contract.EnvCUDAVisibleDevices: g, contract.EnvDeviceIDs: strings.Join(shares, ","),
			contract.EnvMPSThreadPercentage: threads, contract.EnvMPSPinnedMemLimit: "0=20G",
		}
		cfg := &drivers.TaskConfig{ID: "a/" + name + "/r", Name: name, AllocID: "a", DeviceEnv: env}
		tk := &task{id: cfg.ID, cfg: cfg, done: make(chan struct{}), mpsGPUs: []string{g}}
		d.store.add(tk)
		limits, err := gpuwatch.DeviceLimits(env, nil)
		if err != nil {
			t.Fatal(err)
		}
		w.Add(gpuwatch.Task{ID: tk.id, Devices: limits, Mode: gpuwatch.ModeOff, Pids: func() ([]int, error) { return pids, nil }})
	}
	add("two", []string{g + "-mps-0", g + "-mps-1"}, "50", 100, 101)
	add("one", []string{g + "-mps-2"}, "25", 200)
	w.Check()
	now := time.Now().Truncate(time.Second)
	d.writeShareUsage(rt, now)
	u, err := gpu.ReadShareUsage(gpu.ShareUsagePath(root, g))
	if err != nil {
		t.Fatal(err)
	}
	wantMem := map[string]uint64{g + "-mps-0": 1500, g + "-mps-1": 1500, g + "-mps-2": 500}
	wantUtil := map[string]float64{g + "-mps-0": 100, g + "-mps-1": 100, g + "-mps-2": 20}
	if !u.UpdatedAt.Equal(now) || len(u.Shares) != len(wantMem) || len(u.Util) != len(wantUtil) {
		t.Fatalf("published %+v", u)
	}
	for id, v := range wantMem {
		if u.Shares[id] != v {
			t.Errorf("%s memory %d, want %d", id, u.Shares[id], v)
		}
	}
	for id, v := range wantUtil {
		if got, ok := u.Util[id]; !ok || got != v {
			t.Errorf("%s utilization %v, want %v", id, got, v)
		}
	}

	// Where NVML samples no per-process utilisation, the shares' memory is
	// still published, their utilisation is not (but the key is there).
	delete(src.util, g)
	w.Check()
	d.writeShareUsage(rt, now)
	if u, err = gpu.ReadShareUsage(gpu.ShareUsagePath(root, g)); err != nil || len(u.Shares) != 3 || u.Util == nil || len(u.Util) != 0 {
		t.Errorf("unmeasured: %+v, %v", u, err)
	}
}
