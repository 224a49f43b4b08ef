package gpuwatch

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/gpu"
	"github.com/nomad-gpu/nomad-gpu/gpu/sim"
)

// fakeUtilSource is a fakeSource that also samples utilisation.
type fakeUtilSource struct {
	*fakeSource
	umu      sync.Mutex
	perPID   map[string]map[uint32]float64
	utilErrs map[string]error
	device   map[string]uint32 // the device's own utilisation; absent: none
	since    []time.Time
}

func newFakeUtilSource() *fakeUtilSource {
	return &fakeUtilSource{fakeSource: newFakeSource(), perPID: map[string]map[uint32]float64{},
		utilErrs: map[string]error{}, device: map[string]uint32{}}
}

func (f *fakeUtilSource) ProcessUtilization(uuid string, since time.Time) (map[uint32]float64, error) {
	f.umu.Lock()
	defer f.umu.Unlock()
	f.since = append(f.since, since)
	if err := f.utilErrs[uuid]; err != nil {
		return nil, err
	}
	out := map[uint32]float64{}
	for k, v := range f.perPID[uuid] {
		out[k] = v
	}
	return out, nil
}

func (f *fakeUtilSource) Telemetry(uuid string) (gpu.Telemetry, error) {
	f.umu.Lock()
	defer f.umu.Unlock()
	u, ok := f.device[uuid]
	if !ok {
		return gpu.Telemetry{}, nil
	}
	return gpu.Telemetry{GPUUtilPercent: &u}, nil
}

var errNotSupported = fmt.Errorf("gpu: x: per-process utilization: %w", gpu.ErrNotSupported)

// A task's utilisation is of its own slice: its pids' SM percent of the
// device over the slice's share of the SMs, capped at 100.
func TestUtilizationOfSlice(t *testing.T) {
	src := newFakeUtilSource()
	// devA is shared by MPS: "half" holds 2 of 4 shares (50 %) and runs
	// flat out (30 + 20 % of the GPU); "quarter" holds 1 (25 %) at half
	// speed; "greedy" holds 1 and shows more than its share.
	src.perPID[devA] = map[uint32]float64{10: 30, 11: 20, 20: 12.5, 30: 40, 99: 5}
	// devB is a whole GPU at 50 %, migC a MIG instance at 70 % of its SMs.
	src.perPID[devB] = map[uint32]float64{40: 50}
	src.perPID[migC] = map[uint32]float64{50: 70}
	w := New(src, time.Second, nil, nil)
	mps := func(share float64) []DeviceLimit {
		return []DeviceLimit{{UUID: devA, LimitMiB: 1000, SharePercent: share, Shared: true}}
	}
	w.Add(Task{ID: "half", Devices: mps(50), Pids: pidsOf(10, 11), Mode: ModeOff})
	w.Add(Task{ID: "quarter", Devices: mps(25), Pids: pidsOf(20), Mode: ModeOff})
	w.Add(Task{ID: "greedy", Devices: mps(25), Pids: pidsOf(30), Mode: ModeOff})
	w.Add(Task{ID: "idle", Devices: mps(25), Pids: pidsOf(60), Mode: ModeOff})
	w.Add(Task{ID: "whole", Devices: []DeviceLimit{{UUID: devB, SharePercent: 100}}, Pids: pidsOf(40), Mode: ModeOff})
	w.Add(Task{ID: "mig", Devices: []DeviceLimit{{UUID: migC, LimitMiB: 9856, SharePercent: 100}}, Pids: pidsOf(50), Mode: ModeOff})
	w.Add(Task{ID: "zero share is 100", Devices: []DeviceLimit{{UUID: devB}}, Pids: pidsOf(40), Mode: ModeOff})
	before := time.Now()
	w.Check()
	after := time.Now()
	want := map[string]map[string]float64{
		"half":              {devA: 100},
		"quarter":           {devA: 50},
		"greedy":            {devA: 100},
		"idle":              {devA: 0},
		"whole":             {devB: 50},
		"mig":               {migC: 70},
		"zero share is 100": {devB: 50},
	}
	for id, wu := range want {
		got := w.Utilization(id)
		if len(got) != len(wu) {
			t.Errorf("%s: %v, want %v", id, got, wu)
		}
		for uuid, v := range wu {
			if g, ok := got[uuid]; !ok || math.Abs(g-v) > 1e-9 {
				t.Errorf("%s on %s: %v, want %v", id, uuid[:8], got, v)
			}
		}
	}
	// One call per device, over the last interval.
	if len(src.since) != 3 {
		t.Errorf("%d ProcessUtilization calls, want 3", len(src.since))
	}
	// since is the round's time less the interval (1s): bounded by the
	// clock read around Check, however slow the machine.
	for _, s := range src.since {
		if s.Before(before.Add(-time.Second)) || s.After(after.Add(-time.Second)) {
			t.Errorf("since is %v before the round's start, want one interval (1s) before a time within Check (which took %v)",
				before.Sub(s), after.Sub(before))
		}
	}
	if w.Utilization("nobody") != nil {
		t.Error("unknown task has figures")
	}

	// Where NVML samples no per-process utilisation, an exclusive slice is
	// as busy as its device; an MPS share is not measured.
	src.utilErrs[devA], src.utilErrs[devB], src.utilErrs[migC] = errNotSupported, errNotSupported, errNotSupported
	src.device[devA], src.device[devB], src.device[migC] = 90, 40, 65
	w.Check()
	if got := w.Utilization("whole"); got[devB] != 40 {
		t.Errorf("whole GPU fallback: %v, want 40", got)
	}
	if got := w.Utilization("mig"); got[migC] != 65 {
		t.Errorf("MIG fallback: %v, want 65", got)
	}
	if got := w.Utilization("half"); got != nil {
		t.Errorf("MPS without per-process samples: %v, want nothing", got)
	}
	// Not even the device's own: nothing.
	delete(src.device, devB)
	w.Check()
	if got := w.Utilization("whole"); got != nil {
		t.Errorf("no utilisation at all: %v", got)
	}
	// A failed sample drops the last figure rather than keep a stale rate.
	src.utilErrs[migC] = errors.New("gpu: GPU is lost")
	w.Check()
	if got := w.Utilization("mig"); got != nil {
		t.Errorf("after a failure: %v", got)
	}
}

// A Source without utilisation measures memory only.
func TestUtilizationNeedsAUtilizationSource(t *testing.T) {
	src := newFakeSource()
	src.set(devA, gpu.Process{PID: 10, UsedMiB: 100})
	w := New(src, time.Second, nil, nil)
	w.Add(Task{ID: "t", Devices: []DeviceLimit{{UUID: devA, SharePercent: 100}}, Pids: pidsOf(10), Mode: ModeOff})
	w.Check()
	if w.Usage("t")[devA] != 100 || w.Utilization("t") != nil {
		t.Errorf("usage %v, utilization %v", w.Usage("t"), w.Utilization("t"))
	}
}

// Through the sim backend, with `nomad-gpu sim-load`'s records written by
// other processes (the sim names a writer by its lock's pid, the task's pid
// here): a task holding 2 of 4 MPS shares at 100 % of its share is at
// 100 %, not 50 %; one at 50 % of a whole GPU at 50 %; one at 70 % of a MIG
// instance at 70 %.
func TestSimUtilization(t *testing.T) {
	if dir := os.Getenv("GPUWATCH_SIM_WRITER"); dir != "" {
		var devs []sim.DeviceLoad
		if err := json.Unmarshal([]byte(os.Getenv("GPUWATCH_SIM_DEVICES")), &devs); err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		if _, err := sim.StartLoad(dir, sim.LoadRecord{HeartbeatMS: 60_000, Devices: devs}); err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		time.Sleep(time.Minute)
		os.Exit(0)
	}
	ctlPath := filepath.Join(t.TempDir(), "control.json")
	inv, err := gpu.Open(gpu.Config{Backend: gpu.BackendSim, Sim: gpu.SimConfig{
		System: "dgxh100", Seed: "util", ControlFile: ctlPath, ControlPoll: 5 * time.Millisecond,
		MIG: []gpu.MIGLayout{{GPUs: []int{2}, Profiles: []string{"3g.40gb"}}},
	}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inv.Close() })
	snap, err := inv.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	gpu0, gpu1, mig := snap.GPUs[0].UUID, snap.GPUs[1].UUID, snap.GPUs[2].MIG[0].UUID
	if err := gpu.PrepareSimLoadDir(gpu.SimLoadDir(ctlPath)); err != nil {
		t.Fatal(err)
	}
	// writer starts a load process as sim-load plans it: an MPS client's
	// utilisation of its share scaled by its thread percentage (0: not an
	// MPS client).
	writer := func(uuid string, utilOfShare, threads float64) int {
		u := utilOfShare
		if threads > 0 {
			u = utilOfShare * threads / 100
		}
		devs, _ := json.Marshal([]sim.DeviceLoad{{UUID: uuid, UtilPercent: u}})
		cmd := exec.Command(os.Args[0], "-test.run=^TestSimUtilization$")
		cmd.Env = append(os.Environ(), "GPUWATCH_SIM_WRITER="+gpu.SimLoadDir(ctlPath), "GPUWATCH_SIM_DEVICES="+string(devs))
		cmd.Stdout = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		return cmd.Process.Pid
	}
	limits := func(env map[string]string) []DeviceLimit {
		l, err := DeviceLimits(env, func(string) uint64 { return 40192 })
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	w := New(inv, 2*time.Second, nil, nil)
	// GPU 0 is MPS-shared in 4 shares of 25 %: "two" holds 2 of them
	// (50 % threads) at 100 %, "one" holds 1 at 40 %.
	mpsEnv := func(threads string) map[string]string {
		return map[string]string{contract.EnvCUDAVisibleDevices: gpu0, contract.EnvSliceType: contract.SliceMPS,
			contract.EnvMPSPinnedMemLimit: "0=20G", contract.EnvMPSThreadPercentage: threads}
	}
	w.Add(Task{ID: "two", Devices: limits(mpsEnv("50")), Pids: pidsOf(writer(gpu0, 100, 50)), Mode: ModeOff})
	w.Add(Task{ID: "one", Devices: limits(mpsEnv("25")), Pids: pidsOf(writer(gpu0, 40, 25)), Mode: ModeOff})
	w.Add(Task{ID: "whole", Devices: limits(map[string]string{contract.EnvCUDAVisibleDevices: gpu1, contract.EnvSliceType: contract.SliceGPU}),
		Pids: pidsOf(writer(gpu1, 50, 0)), Mode: ModeOff})
	w.Add(Task{ID: "mig", Devices: limits(map[string]string{contract.EnvCUDAVisibleDevices: mig, contract.EnvSliceType: contract.SliceMIG}),
		Pids: pidsOf(writer(mig, 70, 0)), Mode: ModeOff})
	want := map[string]map[string]float64{"two": {gpu0: 100}, "one": {gpu0: 40}, "whole": {gpu1: 50}, "mig": {mig: 70}}
	deadline := time.Now().Add(10 * time.Second)
	for {
		w.Check()
		msg := ""
		for id, wu := range want {
			got := w.Utilization(id)
			for uuid, v := range wu {
				if g, ok := got[uuid]; !ok || math.Abs(g-v) > 1 {
					msg += fmt.Sprintf("%s: %v, want %s at %v; ", id, got, uuid[:8], v)
				}
			}
		}
		if msg == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal(msg)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
