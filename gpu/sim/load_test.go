package sim

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/hashicorp/go-hclog"
)

func validRecord() LoadRecord {
	now := time.Now()
	return LoadRecord{Version: 1, Start: now, Heartbeat: now, HeartbeatMS: 1000,
		Devices: []DeviceLoad{{UUID: "GPU-a", UtilPercent: 50}}}
}

func TestLoadRecordValidate(t *testing.T) {
	tests := []struct {
		name    string
		edit    func(*LoadRecord)
		wantErr string
	}{
		{"valid", func(*LoadRecord) {}, ""},
		{"MIG and memory", func(r *LoadRecord) {
			r.Devices = []DeviceLoad{{UUID: "MIG-b", UtilPercent: 100, MemUtilPercent: 40, MemoryBytes: 1 << 30}, {UUID: "GPU-c", MemoryPercent: 100}}
		}, ""},
		{"newer version", func(r *LoadRecord) { r.Version = 2 }, "version: 2"},
		{"no version", func(r *LoadRecord) { r.Version = 0 }, "version: 0"},
		{"no start", func(r *LoadRecord) { r.Start = time.Time{} }, "start: missing"},
		{"no heartbeat", func(r *LoadRecord) { r.Heartbeat = time.Time{} }, "heartbeat: missing"},
		{"zero interval", func(r *LoadRecord) { r.HeartbeatMS = 0 }, "heartbeat_ms: 0 is out of range"},
		{"huge interval", func(r *LoadRecord) { r.HeartbeatMS = 3_600_000 }, "heartbeat_ms: 3600000 is out of range"},
		{"negative ramp", func(r *LoadRecord) { r.RampMS = -1 }, "ramp_ms: -1"},
		{"until before start", func(r *LoadRecord) { r.Until = r.Start.Add(-time.Second) }, "until: before start"},
		{"no devices", func(r *LoadRecord) { r.Devices = nil }, "devices: empty"},
		{"too many devices", func(r *LoadRecord) {
			r.Devices = nil
			for i := range 65 {
				r.Devices = append(r.Devices, DeviceLoad{UUID: fmt.Sprintf("GPU-%d", i)})
			}
		}, "devices: 65 entries"},
		{"not a UUID", func(r *LoadRecord) { r.Devices[0].UUID = "0" }, `devices[0].uuid: "0" is not a GPU- or MIG- UUID`},
		{"twice", func(r *LoadRecord) { r.Devices = append(r.Devices, r.Devices[0]) }, "devices[1].uuid: GPU-a is listed twice"},
		{"util over 100", func(r *LoadRecord) { r.Devices[0].UtilPercent = 101 }, "devices[0].util_percent: 101 is out of range"},
		{"negative mem util", func(r *LoadRecord) { r.Devices[0].MemUtilPercent = -1 }, "devices[0].mem_util_percent: -1"},
		{"memory percent over 100", func(r *LoadRecord) { r.Devices[0].MemoryPercent = 150 }, "devices[0].memory_percent: 150"},
		{"both memories", func(r *LoadRecord) { r.Devices[0].MemoryBytes, r.Devices[0].MemoryPercent = 1, 1 }, "exclusive"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := validRecord()
			tc.edit(&r)
			err := r.Validate()
			if (err == nil) != (tc.wantErr == "") || err != nil && !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Validate() = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

func TestLoadLiveness(t *testing.T) {
	t0 := time.Date(2025, 6, 1, 10, 0, 0, 0, time.UTC)
	rec := func(hb time.Duration, until time.Duration) *LoadRecord {
		r := &LoadRecord{Version: 1, Start: t0, Heartbeat: t0.Add(hb), HeartbeatMS: 1000}
		if until != 0 {
			r.Until = t0.Add(until)
		}
		return r
	}
	tests := []struct {
		name string
		rec  *LoadRecord
		at   time.Duration
		lock lockState
		want bool
	}{
		{"fresh, writer holds its lock", rec(0, 0), time.Second, lockHeld, true},
		{"fresh, lock unknown", rec(0, 0), time.Second, lockUnknown, true},
		{"fresh, lock free: writer gone", rec(0, 0), time.Second, lockFree, false},
		{"heartbeat 3 intervals old", rec(0, 0), 3 * time.Second, lockHeld, true},
		{"heartbeat missed 3 times", rec(0, 0), 3*time.Second + time.Millisecond, lockHeld, false},
		{"refreshed heartbeat", rec(10*time.Second, 0), 12 * time.Second, lockUnknown, true},
		{"before until", rec(4*time.Second, 5*time.Second), 5*time.Second - time.Millisecond, lockHeld, true},
		{"at until", rec(4*time.Second, 5*time.Second), 5 * time.Second, lockHeld, false},
		{"heartbeat from the future", rec(time.Hour, 0), 0, lockHeld, false},
		{"heartbeat slightly ahead (clock steps)", rec(2*time.Second, 0), 0, lockHeld, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.rec.liveAt(t0.Add(tc.at), tc.lock); got != tc.want {
				t.Errorf("liveAt = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestLoadRamp(t *testing.T) {
	t0 := time.Now()
	for _, tc := range []struct {
		ramp int64
		at   time.Duration
		want float64
	}{
		{0, 0, 1}, {10_000, -time.Second, 0}, {10_000, 0, 0}, {10_000, 2500 * time.Millisecond, 0.25},
		{10_000, 10 * time.Second, 1}, {10_000, time.Hour, 1},
	} {
		r := LoadRecord{Start: t0, RampMS: tc.ramp}
		if got := r.rampAt(t0.Add(tc.at)); got != tc.want {
			t.Errorf("ramp %dms at %v: %v, want %v", tc.ramp, tc.at, got, tc.want)
		}
	}
}

// loadTestNode: dgxh100 (80 GiB, 70-700 W, 33 °C idle) with GPU 1 in MIG
// mode (1g.10gb, 3g.40gb).
func loadTestNode(t *testing.T, ctl string) *Server {
	t.Helper()
	srv, err := New(Config{System: "dgxh100", Seed: "load", ControlFile: ctl, ControlPoll: 5 * time.Millisecond,
		MIG: []MIGLayout{{GPUs: []int{1}, Profiles: []string{"1g.10gb", "3g.40gb"}}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown() })
	return srv
}

// nvmlState reads a device as the inventory does, through nvml.Interface.
func nvmlState(lib nvml.Interface, uuid string) string {
	d, ret := lib.DeviceGetHandleByUUID(uuid)
	if ret != nvml.SUCCESS {
		return ret.String()
	}
	u, _ := d.GetUtilizationRates()
	m, _ := d.GetMemoryInfo()
	s := fmt.Sprintf("util=%d/%d mem=%d", u.Gpu, u.Memory, m.Used>>20)
	if temp, ret := d.GetTemperature(nvml.TEMPERATURE_GPU); ret == nvml.SUCCESS {
		p, _ := d.GetPowerUsage()
		sm, _ := d.GetClockInfo(nvml.CLOCK_SM)
		s += fmt.Sprintf(" temp=%d power=%d sm=%d", temp, p/1000, sm)
	}
	return s
}

func nvmlProcs(lib nvml.Interface, uuid string) string {
	d, _ := lib.DeviceGetHandleByUUID(uuid)
	ps, _ := d.GetComputeRunningProcesses()
	var out []string
	for _, p := range ps {
		s := fmt.Sprintf("%d:%d", p.Pid, p.UsedGpuMemory>>20)
		if p.GpuInstanceId != noInstance {
			s += fmt.Sprintf("@%d/%d", p.GpuInstanceId, p.ComputeInstanceId)
		}
		out = append(out, s)
	}
	return strings.Join(out, ",")
}

// The load model, table-driven: each case is the control state and the
// live loads; the devices are read back through the NVML calls.
func TestLoadModel(t *testing.T) {
	srv := loadTestNode(t, "")
	gpu0, _ := srv.devices[0].GetUUID()
	gpu1, _ := srv.devices[1].GetUUID()
	gpu2, _ := srv.devices[2].GetUUID()
	mig1g, mig3g := srv.devices[1].migs[0].uuid, srv.devices[1].migs[1].uuid
	gi3g, ci3g := srv.devices[1].migs[1].gi, srv.devices[1].migs[1].ci
	now := time.Now()
	load := func(pid uint32, devs ...DeviceLoad) liveLoad {
		return liveLoad{rec: &LoadRecord{Version: 1, Start: now, Heartbeat: now, HeartbeatMS: 1000, Devices: devs}, pid: pid}
	}
	ramped := load(0, DeviceLoad{UUID: gpu0, UtilPercent: 80, MemUtilPercent: 40, MemoryBytes: 8 << 30})
	ramped.rec.Start, ramped.rec.RampMS = now.Add(-5*time.Second), 10_000
	tests := []struct {
		name  string
		ctl   ControlState
		loads []liveLoad
		want  map[string]string // uuid → nvmlState
		procs map[string]string // uuid → nvmlProcs
	}{
		{name: "idle", want: map[string]string{
			gpu0: "util=0/0 mem=0 temp=33 power=70 sm=345", mig3g: "util=0/0 mem=0"}},
		{name: "one load on a GPU: power and temperature follow",
			loads: []liveLoad{load(0, DeviceLoad{UUID: gpu0, UtilPercent: 80, MemUtilPercent: 30, MemoryBytes: 20 << 30})},
			want:  map[string]string{gpu0: "util=80/30 mem=20480 temp=69 power=574 sm=1980", gpu2: "util=0/0 mem=0 temp=33 power=70 sm=345"}},
		{name: "loads add up and cap at 100 %",
			loads: []liveLoad{load(0, DeviceLoad{UUID: gpu0, UtilPercent: 70, MemUtilPercent: 60}), load(0, DeviceLoad{UUID: gpu0, UtilPercent: 50, MemUtilPercent: 50})},
			want:  map[string]string{gpu0: "util=100/100 mem=0 temp=78 power=700 sm=1980"}},
		{name: "loads add to the control file's utilization",
			ctl:   ControlState{Utilization: map[string]Utilization{gpu0: {GPUPercent: 30, MemPercent: 10}}},
			loads: []liveLoad{load(0, DeviceLoad{UUID: gpu0, UtilPercent: 50, MemUtilPercent: 20})},
			want:  map[string]string{gpu0: "util=80/30 mem=0 temp=69 power=574 sm=1980"}},
		{name: "MIG load lands on the instance and, slice-weighted, on the parent",
			loads: []liveLoad{load(0, DeviceLoad{UUID: mig3g, UtilPercent: 70, MemUtilPercent: 35, MemoryBytes: 20 << 30})},
			want: map[string]string{mig3g: "util=70/35 mem=20480", mig1g: "util=0/0 mem=0",
				gpu1: "util=30/15 mem=20480 temp=46 power=259 sm=1980"}},
		{name: "every instance busy",
			loads: []liveLoad{load(0, DeviceLoad{UUID: mig1g, UtilPercent: 100}), load(0, DeviceLoad{UUID: mig3g, UtilPercent: 100})},
			want:  map[string]string{mig1g: "util=100/0 mem=0", mig3g: "util=100/0 mem=0", gpu1: "util=57/0 mem=0 temp=58 power=429 sm=1980"}},
		{name: "what an instance's cap cuts off does not reach the parent",
			ctl:   ControlState{Utilization: map[string]Utilization{mig3g: {GPUPercent: 50}}},
			loads: []liveLoad{load(0, DeviceLoad{UUID: mig3g, UtilPercent: 80})},
			want:  map[string]string{mig3g: "util=100/0 mem=0", gpu1: "util=42/0 mem=0 temp=51 power=334 sm=1980"}},
		{name: "a MIG-mode GPU's own control entry is the base for its instances' loads",
			ctl:   ControlState{Utilization: map[string]Utilization{gpu1: {GPUPercent: 10}, mig3g: {GPUPercent: 50}}},
			loads: []liveLoad{load(0, DeviceLoad{UUID: mig3g, UtilPercent: 35})},
			want:  map[string]string{mig3g: "util=85/0 mem=0", gpu1: "util=25/0 mem=0 temp=44 power=227 sm=1980"}},
		{name: "MPS clients share the GPU (each already scaled to its thread share)",
			loads: []liveLoad{load(0, DeviceLoad{UUID: gpu2, UtilPercent: 25, MemoryBytes: 10 << 30}), load(0, DeviceLoad{UUID: gpu2, UtilPercent: 30, MemoryBytes: 5 << 30})},
			want:  map[string]string{gpu2: "util=55/0 mem=15360 temp=57 power=416 sm=1980"}},
		{name: "memory as a percent of each device",
			loads: []liveLoad{load(0, DeviceLoad{UUID: mig1g, MemoryPercent: 50}, DeviceLoad{UUID: gpu0, MemoryPercent: 25})},
			want:  map[string]string{mig1g: "util=0/0 mem=5120", gpu1: "util=0/0 mem=5120 temp=33 power=70 sm=345", gpu0: "util=0/0 mem=20480 temp=33 power=70 sm=345"}},
		{name: "memory caps at the device's",
			ctl:   ControlState{Processes: []ProcessMemory{{PID: 9, UUID: mig1g, UsedMiB: 4096}}},
			loads: []liveLoad{load(0, DeviceLoad{UUID: gpu0, MemoryBytes: 100 << 30}), load(0, DeviceLoad{UUID: mig1g, MemoryBytes: 8 << 30})},
			want:  map[string]string{gpu0: "util=0/0 mem=81920 temp=33 power=70 sm=345", mig1g: "util=0/0 mem=10240", gpu1: "util=0/0 mem=12288 temp=33 power=70 sm=345"}},
		{name: "a ramp scales utilization, not memory",
			loads: []liveLoad{ramped},
			want:  map[string]string{gpu0: "util=40/20 mem=8192 temp=51 power=322 sm=1980"}},
		{name: "unknown devices are ignored",
			loads: []liveLoad{load(7, DeviceLoad{UUID: "GPU-not-here", UtilPercent: 90}, DeviceLoad{UUID: "MIG-nope", MemoryBytes: 1 << 30})},
			want:  map[string]string{gpu0: "util=0/0 mem=0 temp=33 power=70 sm=345"}, procs: map[string]string{gpu0: ""}},
		{name: "writers with a known pid are processes, a MIG one also on the parent",
			ctl: ControlState{Processes: []ProcessMemory{{PID: 100, UUID: gpu0, UsedMiB: 512}}},
			loads: []liveLoad{
				load(4242, DeviceLoad{UUID: mig3g, UtilPercent: 10, MemoryBytes: 2 << 30}, DeviceLoad{UUID: gpu0, UtilPercent: 10, MemoryBytes: 1 << 30}),
				load(0, DeviceLoad{UUID: gpu0, MemoryBytes: 1 << 30}), // pid not visible: memory only
			},
			want: map[string]string{gpu0: "util=10/0 mem=2560 temp=37 power=133 sm=1980"},
			procs: map[string]string{gpu0: "100:512,4242:1024", mig3g: fmt.Sprintf("4242:2048@%d/%d", gi3g, ci3g),
				gpu1: fmt.Sprintf("4242:2048@%d/%d", gi3g, ci3g), mig1g: ""}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv.view.Store(srv.derive(tc.ctl, tc.loads, now))
			for uuid, want := range tc.want {
				if got := nvmlState(srv, uuid); got != want {
					t.Errorf("%s: %s, want %s", uuid[:8], got, want)
				}
			}
			for uuid, want := range tc.procs {
				if got := nvmlProcs(srv, uuid); got != want {
					t.Errorf("%s processes: %q, want %q", uuid[:8], got, want)
				}
			}
		})
	}
}

// fakeLocks stands in for the kernel's record locks for writers in this
// process, whose own locks F_GETLK cannot see.
type fakeLocks struct {
	mu    sync.Mutex
	state map[string]lockState // by lock file name; absent: held if the file exists
}

func (f *fakeLocks) check(path string) (lockState, uint32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if st, ok := f.state[filepath.Base(path)]; ok {
		return st, 0
	}
	if _, err := os.Lstat(path); err != nil {
		return lockUnknown, 0
	}
	return lockHeld, 4242
}

func (f *fakeLocks) set(w *LoadWriter, st lockState) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.state[filepath.Base(w.lockPath)] = st
}

func useFakeLocks(t *testing.T) *fakeLocks {
	f := &fakeLocks{state: map[string]lockState{}}
	saved := loadLockState
	loadLockState = f.check
	t.Cleanup(func() { loadLockState = saved })
	return f
}

func waitFor(t *testing.T, what string, cond func() string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		msg := cond()
		if msg == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s", what, msg)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func wantState(srv nvml.Interface, uuid, want string) func() string {
	return func() string {
		if got := nvmlState(srv, uuid); got != want {
			return fmt.Sprintf("%s, want %s", got, want)
		}
		return ""
	}
}

// Records written to the load directory reach every node that reads it,
// and leave when closed, expired, stale or their writer is gone.
func TestLoadDirectory(t *testing.T) {
	locks := useFakeLocks(t)
	ctl := filepath.Join(t.TempDir(), "control.json")
	srv := loadTestNode(t, ctl)
	other := loadTestNode(t, ctl) // the other plugin process on the node
	dir := LoadDir(ctl)
	if dir != ctl+".load" {
		t.Fatalf("LoadDir = %s", dir)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("a node made its load directory: %v", err)
	}
	if err := PrepareLoadDir(dir); err != nil { // as the device plugin's Reserve does
		t.Fatal(err)
	}
	fi, err := os.Stat(dir)
	if err != nil || fi.Mode()&(fs.ModePerm|fs.ModeSticky) != fs.ModePerm|fs.ModeSticky || !fi.IsDir() {
		t.Fatalf("load dir: %v, %v", fi.Mode(), err)
	}
	gpu0, _ := srv.devices[0].GetUUID()
	mig3g := srv.devices[1].migs[1].uuid
	const idle = "util=0/0 mem=0 temp=33 power=70 sm=345"

	w, err := StartLoad(dir, LoadRecord{Devices: []DeviceLoad{{UUID: gpu0, UtilPercent: 80, MemUtilPercent: 30, MemoryBytes: 20 << 30}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []*Server{srv, other} {
		waitFor(t, "load seen", wantState(s, gpu0, "util=80/30 mem=20480 temp=69 power=574 sm=1980"))
	}
	if got := nvmlProcs(srv, gpu0); got != "4242:20480" {
		t.Errorf("processes %q", got)
	}
	if err := w.Refresh(time.Now()); err != nil {
		t.Fatal(err)
	}
	w2, err := StartLoad(dir, LoadRecord{Devices: []DeviceLoad{{UUID: mig3g, UtilPercent: 70}}})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "second load", wantState(srv, mig3g, "util=70/0 mem=0"))
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "closed load gone", wantState(srv, gpu0, idle))
	if _, err := os.Stat(w.Path()); !os.IsNotExist(err) {
		t.Errorf("record left behind: %v", err)
	}
	locks.set(w2, lockFree) // its writer died: the lock went with it
	waitFor(t, "dead writer's load gone", wantState(srv, mig3g, "util=0/0 mem=0"))

	// A writer that stops refreshing drops out after three heartbeats.
	w3, err := StartLoad(dir, LoadRecord{HeartbeatMS: 150, Devices: []DeviceLoad{{UUID: gpu0, UtilPercent: 20}}})
	if err != nil {
		t.Fatal(err)
	}
	defer w3.Close()
	waitFor(t, "heartbeat load", wantState(srv, gpu0, "util=20/0 mem=0 temp=42 power=196 sm=1980"))
	waitFor(t, "stale load gone", wantState(srv, gpu0, idle))

	// One with an end time ends by itself.
	start := time.Now()
	w4, err := StartLoad(dir, LoadRecord{Until: start.Add(500 * time.Millisecond), Devices: []DeviceLoad{{UUID: gpu0, UtilPercent: 10}}})
	if err != nil {
		t.Fatal(err)
	}
	defer w4.Close()
	waitFor(t, "timed load", wantState(srv, gpu0, "util=10/0 mem=0 temp=37 power=133 sm=1980"))
	waitFor(t, "timed load over", wantState(srv, gpu0, idle))
	if time.Since(start) < 500*time.Millisecond {
		t.Error("load ended before its time")
	}
}

// Whatever lies in the world-writable directory, the node reads only its
// records, never blocks, follows no link, and keeps going.
func TestLoadDirectoryJunk(t *testing.T) {
	useFakeLocks(t)
	ctl := filepath.Join(t.TempDir(), "control.json")
	srv := loadTestNode(t, ctl)
	dir := LoadDir(ctl)
	if err := PrepareLoadDir(dir); err != nil {
		t.Fatal(err)
	}
	gpu0, _ := srv.devices[0].GetUUID()
	secret := filepath.Join(t.TempDir(), "secret.json")
	good, _ := json.Marshal(LoadRecord{Version: 1, Start: time.Now(), Heartbeat: time.Now().Add(time.Hour), HeartbeatMS: 100_000,
		Devices: []DeviceLoad{{UUID: gpu0, UtilPercent: 99}}})
	os.WriteFile(secret, good, 0o600)
	os.Symlink(secret, filepath.Join(dir, "load-link.json"))
	if err := syscall.Mkfifo(filepath.Join(dir, "load-fifo.json"), 0o666); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "load-garbage.json"), []byte("{not json"), 0o644)
	os.WriteFile(filepath.Join(dir, "load-big.json"), make([]byte, maxLoadRecord+1), 0o644)
	bad, _ := json.Marshal(LoadRecord{Version: 1, Start: time.Now(), Heartbeat: time.Now(), HeartbeatMS: 100_000,
		Devices: []DeviceLoad{{UUID: gpu0, UtilPercent: 500}}})
	os.WriteFile(filepath.Join(dir, "load-invalid.json"), bad, 0o644)
	os.Link(filepath.Join(dir, "load-invalid.json"), filepath.Join(dir, "load-hardlink.json"))
	os.Mkdir(filepath.Join(dir, "load-dir.json"), 0o755)
	w, err := StartLoad(dir, LoadRecord{Devices: []DeviceLoad{{UUID: gpu0, UtilPercent: 5}}})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	waitFor(t, "only the real record counts", wantState(srv, gpu0, "util=5/0 mem=0 temp=35 power=101 sm=1980"))
}

// Dead records, orphaned lock files and temporary files are removed once a
// minute old; live ones and young ones stay.
func TestLoadGarbageCollection(t *testing.T) {
	locks := useFakeLocks(t)
	dir := filepath.Join(t.TempDir(), "ctl.json.load")
	if err := prepareLoadDir(dir); err != nil {
		t.Fatal(err)
	}
	sc := &loadScanner{dir: dir, logger: hclog.NewNullLogger(), lock: locks.check, files: map[string]*loadFile{}}
	old := time.Now().Add(-2 * loadGCAge)
	dead, err := StartLoad(dir, LoadRecord{Devices: []DeviceLoad{{UUID: "GPU-x", UtilPercent: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	locks.set(dead, lockFree)
	live, err := StartLoad(dir, LoadRecord{Devices: []DeviceLoad{{UUID: "GPU-y", UtilPercent: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	young, err := StartLoad(dir, LoadRecord{Devices: []DeviceLoad{{UUID: "GPU-z", UtilPercent: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	locks.set(young, lockFree)
	tmp := filepath.Join(dir, ".load-0123.json.tmp-42")
	os.WriteFile(tmp, nil, 0o644)
	other := filepath.Join(dir, "README")
	os.WriteFile(other, nil, 0o644)
	for _, p := range []string{dead.path, dead.lockPath, live.path, live.lockPath, tmp, other} {
		os.Chtimes(p, old, old)
	}
	if got := sc.scan(time.Now()); len(got) != 1 || got[0].name != filepath.Base(live.path) {
		t.Errorf("live loads %v", got)
	}
	sc.scan(time.Now()) // the dead record's lock is an orphan now
	var names []string
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		names = append(names, e.Name())
	}
	want := []string{"README", filepath.Base(live.lockPath), filepath.Base(live.path), filepath.Base(young.lockPath), filepath.Base(young.path)}
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Errorf("left %v, want %v", names, want)
	}
}

func TestPrepareLoadDir(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "a.load")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := PrepareLoadDir(dir); err != nil {
		t.Fatal(err)
	}
	if err := PrepareLoadDir(dir); err != nil { // again: it is there
		t.Fatal(err)
	}
	if err := PrepareLoadDir(filepath.Join(root, "no", "parent.load")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("no parent: %v", err)
	}
	if fi, _ := os.Stat(dir); fi.Mode()&(fs.ModePerm|fs.ModeSticky) != fs.ModePerm|fs.ModeSticky {
		t.Errorf("mode %v", fi.Mode())
	}
	target := filepath.Join(root, "elsewhere")
	os.Mkdir(target, 0o700)
	link := filepath.Join(root, "b.load")
	os.Symlink(target, link)
	if err := PrepareLoadDir(link); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("symlink: %v", err)
	}
	if fi, _ := os.Stat(target); fi.Mode().Perm() != 0o700 {
		t.Errorf("the link's target was changed: %v", fi.Mode())
	}
	if _, err := StartLoad(filepath.Join(root, "missing"), validRecord()); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("StartLoad in a missing directory: %v", err)
	}
}

// A writer in another process: the node sees it by its pid through the
// kernel's record lock, and drops its load the moment it is killed, long
// before its heartbeat would go stale.
func TestLoadWriterProcess(t *testing.T) {
	if dir := os.Getenv("SIM_LOAD_WRITER"); dir != "" {
		w, err := StartLoad(dir, LoadRecord{HeartbeatMS: 60_000, Devices: []DeviceLoad{{UUID: os.Getenv("SIM_LOAD_UUID"), UtilPercent: 60, MemoryBytes: 3 << 30}}})
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		fmt.Println("ready", w.Path())
		time.Sleep(time.Minute)
		os.Exit(0)
	}
	ctl := filepath.Join(t.TempDir(), "control.json")
	srv := loadTestNode(t, ctl)
	if err := PrepareLoadDir(LoadDir(ctl)); err != nil {
		t.Fatal(err)
	}
	gpu0, _ := srv.devices[0].GetUUID()
	cmd := exec.Command(os.Args[0], "-test.run=^TestLoadWriterProcess$")
	cmd.Env = append(os.Environ(), "SIM_LOAD_WRITER="+LoadDir(ctl), "SIM_LOAD_UUID="+gpu0)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	waitFor(t, "writer's load", wantState(srv, gpu0, "util=60/0 mem=3072 temp=60 power=448 sm=1980"))
	if got, want := nvmlProcs(srv, gpu0), strconv.Itoa(cmd.Process.Pid)+":3072"; got != want {
		t.Errorf("processes %q, want %q", got, want)
	}
	cmd.Process.Kill()
	cmd.Wait()
	start := time.Now()
	waitFor(t, "killed writer's load gone", wantState(srv, gpu0, "util=0/0 mem=0 temp=33 power=70 sm=345"))
	if time.Since(start) > 5*time.Second {
		t.Errorf("took %v", time.Since(start))
	}
	entries, _ := os.ReadDir(LoadDir(ctl))
	if len(entries) != 2 {
		t.Errorf("a killed writer leaves its record and lock until collected: %v", entries)
	}
}
