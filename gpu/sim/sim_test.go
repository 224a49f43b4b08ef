package sim

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

func TestPlan(t *testing.T) {
	tests := []struct {
		system   string
		profiles []string
		starts   []uint32 // placements chosen; nil = must not fit
	}{
		{"dgxh100", []string{"7g.80gb"}, []uint32{0}},
		{"dgxh100", slices.Repeat([]string{"1g.10gb"}, 7), []uint32{0, 1, 2, 3, 4, 5, 6}},
		{"dgxh100", []string{"1g.10gb", "4g.40gb"}, []uint32{4, 0}},
		{"dgxh100", []string{"3g.40gb", "3g.40gb"}, []uint32{0, 4}},
		{"dgxh100", []string{"2g.20gb", "3g.40gb", "1g.10gb", "1g.10gb"}, []uint32{0, 4, 2, 3}},
		{"dgxh100", []string{"1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "4g.40gb"}, nil},
		{"dgxh100", []string{"3g.40gb", "4g.40gb"}, []uint32{4, 0}},
		{"dgxa100", []string{"3g.20gb", "2g.10gb", "1g.5gb"}, []uint32{0, 4, 6}},
		{"dgxa100", []string{"7g.40gb", "1g.5gb"}, nil},
		{"dgxa100", []string{"1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb"}, []uint32{0, 2, 4, 6}},
		{"dgxb200", []string{"4g.90gb", "2g.45gb", "1g.23gb"}, []uint32{0, 4, 6}},
		{"dgxh200", []string{"1g.18gb+me", "1g.18gb", "2g.35gb"}, []uint32{0, 1, 2}},
		{"dgxh200", []string{"1g.18gb+me", "1g.18gb+me"}, nil}, // one +me instance per GPU
		{"dgxh200", nil, []uint32{}},
	}
	for _, tc := range tests {
		t.Run(tc.system+"/"+strings.Join(tc.profiles, ","), func(t *testing.T) {
			insts, err := systems[tc.system].plan(tc.profiles)
			if tc.starts == nil {
				if err == nil {
					t.Fatalf("plan fits: %+v", insts)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := []uint32{}
			for k, in := range insts {
				got = append(got, in.placement.Start)
				if in.profile.name != tc.profiles[k] {
					t.Errorf("instance %d is %s, want %s", k, in.profile.name, tc.profiles[k])
				}
			}
			if !slices.Equal(got, tc.starts) {
				t.Errorf("placements %v, want %v", got, tc.starts)
			}
		})
	}
}

func TestDeriveUUID(t *testing.T) {
	re := regexp.MustCompile(`^GPU-[0-9a-f]{8}-[0-9a-f]{4}-8[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	seen := map[string]bool{}
	for _, seed := range []string{"a", "b", "ab", ""} {
		for i := range 8 {
			u := gpuUUID("dgxh100", seed, i)
			if !re.MatchString(u) || seen[u] {
				t.Errorf("bad or duplicate UUID %q", u)
			}
			seen[u] = true
		}
	}
	// Parts are length-prefixed, so shifting text between them changes the ID.
	if deriveUUID("a", "bc") == deriveUUID("ab", "c") {
		t.Error("ambiguous UUID derivation")
	}
	if migUUID("dgxh100", "s", 0, "1g.10gb", 0) == migUUID("dgxh100", "s", 0, "1g.10gb", 1) {
		t.Error("MIG UUID ignores the placement")
	}
}

func TestControlStateJSON(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ctl.json")
	ctl := OpenControl(path)
	if ctl.Path() != path {
		t.Errorf("Path() = %q", ctl.Path())
	}
	st, err := ReadControl(path)
	if err != nil || st.Version != 0 || len(st.XIDEvents) != 0 {
		t.Fatalf("missing file: %+v, %v", st, err)
	}
	steps := []func() error{
		func() error { return ctl.InjectXID("GPU-a", 79) },
		func() error { return ctl.SetUtilization("MIG-b", 50, 10) },
		func() error { return ctl.SetProcessMemory(7, "MIG-b", 300) },
		func() error { return ctl.SetGPULost("GPU-c", true) },
	}
	for _, s := range steps {
		if err := s(); err != nil {
			t.Fatal(err)
		}
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var generic map[string]any
	if err := json.Unmarshal(raw, &generic); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k := range generic {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if want := []string{"last_event_id", "lost_gpus", "processes", "utilization", "version", "xid_events"}; !slices.Equal(keys, want) {
		t.Errorf("keys %v, want %v", keys, want)
	}
	for _, frag := range []string{`"gpu_percent": 50`, `"mem_percent": 10`, `"used_mib": 300`, `"pid": 7`, `"xid": 79`, `"id": 1`, `"uuid": "GPU-a"`} {
		if !strings.Contains(string(raw), frag) {
			t.Errorf("file lacks %s:\n%s", frag, raw)
		}
	}
	if err := ctl.ClearXIDs(); err != nil {
		t.Fatal(err)
	}
	if err := ctl.InjectXID("GPU-a", 48); err != nil {
		t.Fatal(err)
	}
	if err := ctl.Clear(); err != nil {
		t.Fatal(err)
	}
	st, err = ReadControl(path)
	if err != nil {
		t.Fatal(err)
	}
	want := ControlState{Version: ControlVersion, LastEventID: 2}
	if fmt.Sprint(st) != fmt.Sprint(want) {
		t.Errorf("after Clear: %+v, want %+v", st, want)
	}
	// No temporary files are left behind.
	entries, _ := os.ReadDir(filepath.Dir(path))
	for _, e := range entries {
		if e.Name() != "ctl.json" && e.Name() != "ctl.json.lock" {
			t.Errorf("stray file %s", e.Name())
		}
	}
}

func TestReadControlErrors(t *testing.T) {
	dir := t.TempDir()
	tests := []struct{ name, content, wantErr string }{
		{"empty file is empty state", "", ""},
		{"garbage", "{not json", "sim control"},
		{"newer version", `{"version": 99}`, "version 99 is newer"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_"))
			if err := os.WriteFile(path, []byte(tc.content), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := ReadControl(path)
			if (err == nil) != (tc.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("err = %v, want %q", err, tc.wantErr)
			}
			if tc.wantErr != "" {
				if err := OpenControl(path).InjectXID("GPU-x", 1); err == nil {
					t.Error("writer overwrote a file it cannot read")
				}
			}
		})
	}
}

// checkWrites verifies that every write of every writer is in the file.
func checkWrites(t *testing.T, path string, writers, each int) {
	t.Helper()
	st, err := ReadControl(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.XIDEvents) != writers*each || st.LastEventID != uint64(writers*each) {
		t.Fatalf("%d events, last id %d; want %d", len(st.XIDEvents), st.LastEventID, writers*each)
	}
	for k, e := range st.XIDEvents {
		if e.ID != uint64(k+1) {
			t.Fatalf("event %d has id %d", k, e.ID)
		}
	}
	if len(st.Processes) != writers*each {
		t.Fatalf("%d processes, want %d", len(st.Processes), writers*each)
	}
}

func TestControlConcurrentWriters(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ctl.json")
	const writers, each = 4, 25
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			ctl := OpenControl(path) // own descriptor, own flock
			for k := range each {
				pid := uint32(w*1000 + k)
				if err := ctl.InjectXID(fmt.Sprintf("GPU-%d", w), uint64(k)); err != nil {
					errs <- err
					return
				}
				if err := ctl.SetProcessMemory(pid, "GPU-x", 1); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	checkWrites(t, path, writers, each)
}

// Writers in separate processes, as e2e tests and a CLI would be.
func TestControlConcurrentWriterProcesses(t *testing.T) {
	if path := os.Getenv("SIM_CONTROL_WRITER"); path != "" {
		id, _ := strconv.Atoi(os.Getenv("SIM_CONTROL_WRITER_ID"))
		ctl := OpenControl(path)
		for k := range 25 {
			if err := ctl.InjectXID("GPU-p", uint64(k)); err != nil {
				t.Fatal(err)
			}
			if err := ctl.SetProcessMemory(uint32(id*1000+k), "GPU-p", 1); err != nil {
				t.Fatal(err)
			}
		}
		return
	}
	path := filepath.Join(t.TempDir(), "ctl.json")
	var cmds []*exec.Cmd
	for id := range 3 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestControlConcurrentWriterProcesses$")
		cmd.Env = append(os.Environ(), "SIM_CONTROL_WRITER="+path, "SIM_CONTROL_WRITER_ID="+strconv.Itoa(id))
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
	}
	for _, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("writer process: %v", err)
		}
	}
	checkWrites(t, path, 3, 25)
}

// The sim answers for MIG handles what NVML does, so code written against
// real NVML works on it.
func TestMIGHandles(t *testing.T) {
	srv, err := New(Config{System: "dgxh100", Seed: "h", MIG: []MIGLayout{{GPUs: []int{2}, Profiles: []string{"4g.40gb", "2g.20gb"}}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	parent, _ := srv.DeviceGetHandleByIndex(2)
	if mode, _, ret := parent.GetMigMode(); ret != nvml.SUCCESS || mode != nvml.DEVICE_MIG_ENABLE {
		t.Fatalf("MIG mode %d, %v", mode, ret)
	}
	n, ret := parent.GetMaxMigDeviceCount()
	if ret != nvml.SUCCESS || n != 7 {
		t.Fatalf("max MIG devices %d, %v", n, ret)
	}
	var found []string
	for i := range n {
		m, ret := parent.GetMigDeviceHandleByIndex(i)
		if ret == nvml.ERROR_NOT_FOUND {
			continue
		}
		if ret != nvml.SUCCESS {
			t.Fatalf("handle %d: %v", i, ret)
		}
		isMIG, _ := m.IsMigDeviceHandle()
		p, _ := m.GetDeviceHandleFromMigDeviceHandle()
		uuid, _ := m.GetUUID()
		name, _ := m.GetName()
		gi, _ := m.GetGpuInstanceId()
		inst, ret := parent.GetGpuInstanceById(gi)
		if ret != nvml.SUCCESS {
			t.Fatalf("GPU instance %d: %v", gi, ret)
		}
		info, _ := inst.GetInfo()
		byUUID, ret := srv.DeviceGetHandleByUUID(uuid)
		if !isMIG || p != parent || ret != nvml.SUCCESS || byUUID != m || info.Device != parent {
			t.Errorf("MIG %d: isMIG=%v parent ok=%v byUUID=%v", i, isMIG, p == parent, ret)
		}
		found = append(found, name)
	}
	if want := []string{"NVIDIA H100 80GB HBM3 MIG 4g.40gb", "NVIDIA H100 80GB HBM3 MIG 2g.20gb"}; !slices.Equal(found, want) {
		t.Errorf("MIG devices %v, want %v", found, want)
	}
	if _, ret := parent.GetMigDeviceHandleByIndex(7); ret != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("index 7: %v", ret)
	}
	whole, _ := srv.DeviceGetHandleByIndex(0)
	if _, ret := whole.GetMigDeviceHandleByIndex(0); ret != nvml.ERROR_NOT_SUPPORTED {
		t.Errorf("MIG handle on a non-MIG GPU: %v", ret)
	}
	if d, ret := srv.DeviceGetHandleByPciBusId("00000000:3A:00.0"); ret != nvml.SUCCESS || d != parent {
		t.Errorf("by bus id: %v", ret)
	}
}

func TestEventSetTimeoutAndFree(t *testing.T) {
	srv, err := New(Config{System: "dgxa100", Seed: "e"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	set, _ := srv.EventSetCreate()
	d, _ := srv.DeviceGetHandleByIndex(0)
	if ret := d.RegisterEvents(nvml.EventTypeXidCriticalError, set); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	start := time.Now()
	if _, ret := set.Wait(30); ret != nvml.ERROR_TIMEOUT || time.Since(start) < 30*time.Millisecond {
		t.Errorf("Wait = %v after %v", ret, time.Since(start))
	}
	done := make(chan nvml.Return)
	go func() { _, ret := set.Wait(60_000); done <- ret }()
	time.Sleep(10 * time.Millisecond)
	set.Free()
	select {
	case ret := <-done:
		if ret != nvml.ERROR_UNINITIALIZED {
			t.Errorf("Wait after Free = %v", ret)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Free did not end Wait")
	}
	other, _ := New(Config{System: "dgxa100", Seed: "e"}, nil)
	foreign, _ := other.EventSetCreate()
	if ret := d.RegisterEvents(nvml.EventTypeXidCriticalError, foreign); ret != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("registering on another node's set: %v", ret)
	}
}
