package gpuwatch

import (
	"context"
	"errors"
	"path/filepath"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/gpu"
)

const (
	devA = "GPU-aaaaaaaa-0000-0000-0000-000000000001"
	devB = "GPU-bbbbbbbb-0000-0000-0000-000000000002"
	migC = "MIG-cccccccc-0000-0000-0000-000000000003"
)

// fakeSource serves set process lists and counts calls per device.
type fakeSource struct {
	mu    sync.Mutex
	procs map[string][]gpu.Process
	errs  map[string]error
	calls map[string]int
}

func newFakeSource() *fakeSource {
	return &fakeSource{procs: map[string][]gpu.Process{}, errs: map[string]error{}, calls: map[string]int{}}
}

func (f *fakeSource) Processes(uuid string) ([]gpu.Process, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls[uuid]++
	if err := f.errs[uuid]; err != nil {
		return nil, err
	}
	return slices.Clone(f.procs[uuid]), nil
}

func (f *fakeSource) set(uuid string, ps ...gpu.Process) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.procs[uuid] = ps
}

func (f *fakeSource) callCounts() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]int{}
	for k, v := range f.calls {
		out[k] = v
	}
	return out
}

func pidsOf(p ...int) func() ([]int, error) {
	return func() ([]int, error) { return p, nil }
}

type recorder struct {
	mu sync.Mutex
	vs []Violation
}

func (r *recorder) record(v Violation) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.vs = append(r.vs, v)
}

func (r *recorder) take() []Violation {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.vs
	r.vs = nil
	return out
}

func TestUsageCountsOwnPidsOnly(t *testing.T) {
	tests := []struct {
		name  string
		procs map[string][]gpu.Process
		tasks []Task
		want  map[string]map[string]uint64
	}{
		{
			name: "neighbour on the same GPU is not counted",
			procs: map[string][]gpu.Process{devA: {
				{PID: 10, UsedMiB: 100}, {PID: 11, UsedMiB: 200}, {PID: 20, UsedMiB: 5000}, {PID: 999, UsedMiB: 7}}},
			tasks: []Task{
				{ID: "t1", Devices: []DeviceLimit{{UUID: devA, LimitMiB: 1000}}, Pids: pidsOf(10, 11, 12)},
				{ID: "t2", Devices: []DeviceLimit{{UUID: devA, LimitMiB: 8000}}, Pids: pidsOf(20)},
			},
			want: map[string]map[string]uint64{"t1": {devA: 300}, "t2": {devA: 5000}},
		},
		{
			name: "per device, zero where the task holds nothing",
			procs: map[string][]gpu.Process{
				devA: {{PID: 10, UsedMiB: 100}},
				devB: {{PID: 20, UsedMiB: 50}},
				migC: {{PID: 11, UsedMiB: 64}}},
			tasks: []Task{{ID: "t1", Devices: []DeviceLimit{{UUID: devA, LimitMiB: 0}, {UUID: devB, LimitMiB: 0}, {UUID: migC, LimitMiB: 0}}, Pids: pidsOf(10, 11)}},
			want:  map[string]map[string]uint64{"t1": {devA: 100, devB: 0, migC: 64}},
		},
		{
			name:  "task without pids",
			procs: map[string][]gpu.Process{devA: {{PID: 10, UsedMiB: 100}}},
			tasks: []Task{{ID: "t1", Devices: []DeviceLimit{{UUID: devA, LimitMiB: 0}}}},
			want:  map[string]map[string]uint64{"t1": {devA: 0}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src := newFakeSource()
			for u, ps := range tc.procs {
				src.set(u, ps...)
			}
			w := New(src, time.Hour, nil, nil)
			for _, task := range tc.tasks {
				if w.Usage(task.ID) != nil {
					t.Errorf("%s: usage before the first round", task.ID)
				}
				w.Add(task)
			}
			w.Check()
			for id, want := range tc.want {
				if got := w.Usage(id); !reflect.DeepEqual(got, want) {
					t.Errorf("Usage(%s) = %v, want %v", id, got, want)
				}
			}
		})
	}
}

func TestViolationModes(t *testing.T) {
	// Per round: what the task's two pids hold on devA (limit 1000).
	rounds := [][2]uint64{{300, 200}, {900, 200}, {900, 300}, {500, 0}, {1000, 0}, {1000, 1}}
	tests := []struct {
		mode Mode
		want map[int]bool // round -> fired, with Repeat
	}{
		{ModeKill, map[int]bool{1: false, 2: true, 5: false}},
		{ModeWarn, map[int]bool{1: false, 5: false}},
		{ModeOff, map[int]bool{}},
		{"", map[int]bool{1: false, 2: true, 5: false}}, // the default is kill
	}
	for _, tc := range tests {
		t.Run(string(tc.mode), func(t *testing.T) {
			src := newFakeSource()
			var rec recorder
			w := New(src, time.Hour, nil, rec.record)
			w.Add(Task{ID: "t", Devices: []DeviceLimit{{UUID: devA, LimitMiB: 1000}}, Pids: pidsOf(10, 11), Mode: tc.mode})
			wantMode := tc.mode
			if wantMode == "" {
				wantMode = ModeKill
			}
			for i, r := range rounds {
				src.set(devA, gpu.Process{PID: 10, UsedMiB: r[0]}, gpu.Process{PID: 11, UsedMiB: r[1]}, gpu.Process{PID: 30, UsedMiB: 4000})
				w.Check()
				got := rec.take()
				repeat, fire := tc.want[i]
				if !fire {
					if len(got) != 0 {
						t.Errorf("round %d: violations %+v, want none", i, got)
					}
					continue
				}
				pids := []int{10, 11}
				if r[1] == 0 {
					pids = []int{10}
				}
				want := []Violation{{TaskID: "t", UUID: devA, UsedMiB: r[0] + r[1], LimitMiB: 1000, Pids: pids, Mode: wantMode, Repeat: repeat}}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("round %d: violations %+v, want %+v", i, got, want)
				}
			}
		})
	}
}

func TestOneProcessesCallPerDevicePerRound(t *testing.T) {
	src := newFakeSource()
	src.set(devA, gpu.Process{PID: 10, UsedMiB: 1})
	w := New(src, time.Hour, nil, nil)
	w.Add(Task{ID: "t1", Devices: []DeviceLimit{{UUID: devA, LimitMiB: 100}, {UUID: devB, LimitMiB: 100}}, Pids: pidsOf(10)})
	w.Add(Task{ID: "t2", Devices: []DeviceLimit{{UUID: devA, LimitMiB: 100}}, Pids: pidsOf(11)})
	w.Add(Task{ID: "t3", Devices: []DeviceLimit{{UUID: devA, LimitMiB: 100}, {UUID: migC, LimitMiB: 100}}, Pids: pidsOf(12)})
	for range 3 {
		w.Check()
	}
	if got, want := src.callCounts(), map[string]int{devA: 3, devB: 3, migC: 3}; !reflect.DeepEqual(got, want) {
		t.Errorf("Processes calls %v, want %v", got, want)
	}
}

func TestRemoveStopsTracking(t *testing.T) {
	src := newFakeSource()
	src.set(devA, gpu.Process{PID: 10, UsedMiB: 5000})
	src.set(devB, gpu.Process{PID: 20, UsedMiB: 5000})
	var rec recorder
	w := New(src, time.Hour, nil, rec.record)
	w.Add(Task{ID: "t1", Devices: []DeviceLimit{{UUID: devA, LimitMiB: 100}}, Pids: pidsOf(10), Mode: ModeKill})
	w.Add(Task{ID: "t2", Devices: []DeviceLimit{{UUID: devB, LimitMiB: 100}}, Pids: pidsOf(20), Mode: ModeKill})
	w.Check()
	if got := rec.take(); len(got) != 2 {
		t.Fatalf("violations %+v, want two", got)
	}
	w.Remove("t1")
	w.Remove("unknown")
	before := src.callCounts()
	w.Check()
	got := rec.take()
	if len(got) != 1 || got[0].TaskID != "t2" {
		t.Errorf("violations after Remove %+v, want only t2", got)
	}
	if w.Usage("t1") != nil {
		t.Errorf("usage of a removed task: %v", w.Usage("t1"))
	}
	if after := src.callCounts(); after[devA] != before[devA] {
		t.Errorf("device of the removed task still queried: %v -> %v", before, after)
	}
	// Re-adding starts a new episode with no figures.
	w.Add(Task{ID: "t1", Devices: []DeviceLimit{{UUID: devA, LimitMiB: 100}}, Pids: pidsOf(10), Mode: ModeWarn})
	if w.Usage("t1") != nil {
		t.Error("re-added task has figures before its first round")
	}
	w.Check()
	if got := rec.take(); len(got) != 2 || got[0].TaskID != "t1" || got[0].Mode != ModeWarn || got[0].Repeat {
		t.Errorf("violations after re-add %+v", got)
	}
}

func TestFailuresKeepLastFigures(t *testing.T) {
	src := newFakeSource()
	src.set(devA, gpu.Process{PID: 10, UsedMiB: 500})
	var rec recorder
	w := New(src, time.Hour, nil, rec.record)
	var pidErr error
	var mu sync.Mutex
	w.Add(Task{ID: "t", Devices: []DeviceLimit{{UUID: devA, LimitMiB: 100}}, Mode: ModeWarn, Pids: func() ([]int, error) {
		mu.Lock()
		defer mu.Unlock()
		return []int{10}, pidErr
	}})
	w.Check()
	if got := rec.take(); len(got) != 1 {
		t.Fatalf("violations %+v", got)
	}

	src.set(devA, gpu.Process{PID: 10, UsedMiB: 50})
	src.mu.Lock()
	src.errs[devA] = errors.New("GPU is lost")
	src.mu.Unlock()
	w.Check()
	if got := w.Usage("t"); got[devA] != 500 {
		t.Errorf("usage while the device fails %v, want the last figure 500", got)
	}

	src.mu.Lock()
	delete(src.errs, devA)
	src.mu.Unlock()
	mu.Lock()
	pidErr = errors.New("no such process")
	mu.Unlock()
	w.Check()
	if got := w.Usage("t"); got[devA] != 500 {
		t.Errorf("usage while pids fail %v, want the last figure 500", got)
	}
	if got := rec.take(); len(got) != 0 {
		t.Errorf("violations while unmeasured %+v", got)
	}

	// The episode is still open (nothing measured it closed), so a warn
	// task that comes back over does not warn again.
	mu.Lock()
	pidErr = nil
	mu.Unlock()
	src.set(devA, gpu.Process{PID: 10, UsedMiB: 700})
	w.Check()
	if got := rec.take(); len(got) != 0 {
		t.Errorf("violations %+v; the episode had not ended", got)
	}
}

func TestCallbackMayRemove(t *testing.T) {
	src := newFakeSource()
	src.set(devA, gpu.Process{PID: 10, UsedMiB: 500})
	var w *Watchdog
	var kills []string
	w = New(src, time.Hour, nil, func(v Violation) {
		kills = append(kills, v.TaskID)
		w.Remove(v.TaskID)
	})
	w.Add(Task{ID: "t", Devices: []DeviceLimit{{UUID: devA, LimitMiB: 100}}, Pids: pidsOf(10)})
	w.Check()
	w.Check()
	if !slices.Equal(kills, []string{"t"}) {
		t.Errorf("kills %v, want one", kills)
	}
}

func TestRun(t *testing.T) {
	src := newFakeSource()
	src.set(devA, gpu.Process{PID: 10, UsedMiB: 500})
	fired := make(chan Violation, 100)
	w := New(src, 5*time.Millisecond, nil, func(v Violation) { fired <- v })
	w.Add(Task{ID: "t", Devices: []DeviceLimit{{UUID: devA, LimitMiB: 100}}, Pids: pidsOf(10)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	select {
	case v := <-fired:
		if v.TaskID != "t" || v.UsedMiB != 500 {
			t.Errorf("violation %+v", v)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no violation from Run")
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not stop")
	}
}

// TestSimBackend drives the watchdog through the real inventory over the
// sim backend, the path the driver takes, with process memory written to
// the sim control file as a test or demo would.
func TestSimBackend(t *testing.T) {
	ctlPath := filepath.Join(t.TempDir(), "control.json")
	inv, err := gpu.Open(gpu.Config{Backend: gpu.BackendSim, Sim: gpu.SimConfig{
		System: "dgxh100", Seed: "x", ControlFile: ctlPath, ControlPoll: 5 * time.Millisecond,
		MIG: []gpu.MIGLayout{{GPUs: []int{1}, Profiles: []string{"1g.10gb"}}},
	}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inv.Close() })
	snap, err := inv.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	gpu0, mig := snap.GPUs[0].UUID, snap.GPUs[1].MIG[0]

	ctl := gpu.OpenControl(ctlPath)
	for _, p := range []struct {
		pid  uint32
		uuid string
		mib  uint64
	}{{4001, gpu0, 12000}, {4002, gpu0, 9000}, {5001, gpu0, 30000}, {6001, mig.UUID, 11000}} {
		if err := ctl.SetProcessMemory(p.pid, p.uuid, p.mib); err != nil {
			t.Fatal(err)
		}
	}

	// The sim notices the control file within its poll period.
	waitProcs := func(uuid string, n int) {
		deadline := time.Now().Add(10 * time.Second)
		for {
			ps, err := inv.Processes(uuid)
			if err != nil {
				t.Fatal(err)
			}
			if len(ps) == n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: processes %v", uuid, ps)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitProcs(gpu0, 3)
	waitProcs(mig.UUID, 1)

	var rec recorder
	w := New(inv, time.Hour, nil, rec.record)
	// An MPS task with a 20480 MiB share of GPU 0 and its neighbour.
	mpsLimits, err := DeviceLimits(map[string]string{
		contract.EnvCUDAVisibleDevices: gpu0, contract.EnvSliceType: contract.SliceMPS, contract.EnvMPSPinnedMemLimit: "0=20480M",
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	w.Add(Task{ID: "mps", Devices: mpsLimits, Pids: pidsOf(4001, 4002), Mode: ModeKill})
	w.Add(Task{ID: "neighbour", Devices: []DeviceLimit{{UUID: gpu0, LimitMiB: 40960}}, Pids: pidsOf(5001), Mode: ModeKill})
	migMem := func(uuid string) uint64 {
		if uuid == mig.UUID {
			return mig.MemoryMiB
		}
		return 0
	}
	migLimits, err := DeviceLimits(map[string]string{contract.EnvCUDAVisibleDevices: mig.UUID, contract.EnvSliceType: contract.SliceMIG}, migMem)
	if err != nil {
		t.Fatal(err)
	}
	w.Add(Task{ID: "mig", Devices: migLimits, Pids: pidsOf(6001), Mode: ModeWarn})
	w.Check()
	if got := w.Usage("mps"); got[gpu0] != 21000 {
		t.Errorf("mps usage %v", got)
	}
	if got := w.Usage("mig"); got[mig.UUID] != 11000 {
		t.Errorf("mig usage %v", got)
	}
	if got := w.Usage("neighbour"); got[gpu0] != 30000 {
		t.Errorf("neighbour usage %v", got)
	}
	got := rec.take()
	want := []Violation{
		{TaskID: "mig", UUID: mig.UUID, UsedMiB: 11000, LimitMiB: mig.MemoryMiB, Pids: []int{6001}, Mode: ModeWarn},
		{TaskID: "mps", UUID: gpu0, UsedMiB: 21000, LimitMiB: 20480, Pids: []int{4001, 4002}, Mode: ModeKill},
	}
	if mig.MemoryMiB >= 11000 {
		want = want[1:]
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("violations\n%+v\nwant\n%+v", got, want)
	}
}

func TestParseMode(t *testing.T) {
	for in, want := range map[string]Mode{"": ModeKill, "kill": ModeKill, "warn": ModeWarn, "off": ModeOff} {
		if got, err := ParseMode(in); err != nil || got != want {
			t.Errorf("ParseMode(%q) = %q, %v", in, got, err)
		}
	}
	if _, err := ParseMode("KILL"); err == nil {
		t.Error("ParseMode(KILL) accepted")
	}
}
