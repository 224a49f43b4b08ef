package sim

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// nvmlProcUtil reads GetProcessUtilization as the inventory does:
// "pid:sm/mem,…", or the return code's name when it is not SUCCESS.
func nvmlProcUtil(lib nvml.Interface, uuid string, lastSeen uint64) string {
	d, ret := lib.DeviceGetHandleByUUID(uuid)
	if ret != nvml.SUCCESS {
		return ret.String()
	}
	ss, ret := d.GetProcessUtilization(lastSeen)
	if ret != nvml.SUCCESS {
		return ret.String()
	}
	var out []string
	for _, s := range ss {
		out = append(out, fmt.Sprintf("%d:%d/%d", s.Pid, s.SmUtil, s.MemUtil))
	}
	return strings.Join(out, ",")
}

// Per-process utilisation comes from the same live loads as the device's:
// each writer of known pid, with its entry's ramped utilisation of the
// device it names (an MPS client's already scaled to its thread share by
// sim-load), a MIG instance's also on the parent weighted by its slices.
func TestProcessUtilizationModel(t *testing.T) {
	srv := loadTestNode(t, "")
	gpu0, _ := srv.devices[0].GetUUID()
	gpu1, _ := srv.devices[1].GetUUID()
	gpu2, _ := srv.devices[2].GetUUID()
	mig1g, mig3g := srv.devices[1].migs[0].uuid, srv.devices[1].migs[1].uuid
	now := time.Now()
	load := func(pid uint32, devs ...DeviceLoad) liveLoad {
		return liveLoad{rec: &LoadRecord{Version: 1, Start: now, Heartbeat: now, HeartbeatMS: 1000, Devices: devs}, pid: pid}
	}
	ramped := load(30, DeviceLoad{UUID: gpu0, UtilPercent: 80, MemUtilPercent: 40})
	ramped.rec.Start, ramped.rec.RampMS = now.Add(-5*time.Second), 10_000
	tests := []struct {
		name  string
		ctl   ControlState
		loads []liveLoad
		want  map[string]string // uuid → nvmlProcUtil(uuid, 0)
	}{
		{name: "idle: no samples", want: map[string]string{gpu0: "ERROR_NOT_FOUND", mig3g: "ERROR_NOT_FOUND"}},
		{name: "a whole GPU at 50 %",
			loads: []liveLoad{load(10, DeviceLoad{UUID: gpu0, UtilPercent: 50, MemUtilPercent: 20})},
			want:  map[string]string{gpu0: "10:50/20", gpu2: "ERROR_NOT_FOUND"}},
		{name: "MPS clients on one GPU, each its own",
			// 2 of 4 shares (50 % threads) at 100 %, and 1 of 4 at 60 %.
			loads: []liveLoad{load(11, DeviceLoad{UUID: gpu2, UtilPercent: 50}), load(12, DeviceLoad{UUID: gpu2, UtilPercent: 15})},
			want:  map[string]string{gpu2: "11:50/0,12:15/0"}},
		{name: "MIG: the instance's own SMs, slice-weighted on the parent",
			loads: []liveLoad{load(20, DeviceLoad{UUID: mig3g, UtilPercent: 70, MemUtilPercent: 35}), load(21, DeviceLoad{UUID: mig1g, UtilPercent: 100})},
			want:  map[string]string{mig3g: "20:70/35", mig1g: "21:100/0", gpu1: "20:30/15,21:14/0"}},
		{name: "a ramp scales it",
			loads: []liveLoad{ramped},
			want:  map[string]string{gpu0: "30:40/20"}},
		{name: "one pid's records add up and cap",
			loads: []liveLoad{load(40, DeviceLoad{UUID: gpu0, UtilPercent: 70}), load(40, DeviceLoad{UUID: gpu0, UtilPercent: 50})},
			want:  map[string]string{gpu0: "40:100/0"}},
		{name: "unknown pid and the control file's utilisation belong to no process",
			ctl:   ControlState{Utilization: map[string]Utilization{gpu0: {GPUPercent: 30}}},
			loads: []liveLoad{load(0, DeviceLoad{UUID: gpu0, UtilPercent: 50})},
			want:  map[string]string{gpu0: "ERROR_NOT_FOUND"}},
		{name: "a lost GPU",
			ctl:   ControlState{LostGPUs: []string{gpu0}},
			loads: []liveLoad{load(10, DeviceLoad{UUID: gpu0, UtilPercent: 50})},
			want:  map[string]string{gpu0: "ERROR_GPU_IS_LOST"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv.view.Store(srv.derive(tc.ctl, tc.loads, now))
			for uuid, want := range tc.want {
				if got := nvmlProcUtil(srv, uuid, 0); got != want {
					t.Errorf("%s: %q, want %q", uuid[:8], got, want)
				}
			}
		})
	}

	// Samples are stamped with the view's time; only newer ones are returned.
	srv.view.Store(srv.derive(ControlState{}, []liveLoad{load(10, DeviceLoad{UUID: gpu0, UtilPercent: 50})}, now))
	stamp := uint64(now.UnixMicro())
	if got := nvmlProcUtil(srv, gpu0, stamp-1); got != "10:50/0" {
		t.Errorf("since just before: %q", got)
	}
	if got := nvmlProcUtil(srv, gpu0, stamp); got != "ERROR_NOT_FOUND" {
		t.Errorf("since the sample: %q", got)
	}
}

// Through the load directory, as the inventory meets it: the writer's pid
// (here the fake lock holder's, 4242) and its load while it runs, nothing
// once it closes.
func TestProcessUtilizationFromLoadDirectory(t *testing.T) {
	useFakeLocks(t)
	ctl := filepath.Join(t.TempDir(), "control.json")
	srv := loadTestNode(t, ctl)
	if err := PrepareLoadDir(LoadDir(ctl)); err != nil {
		t.Fatal(err)
	}
	gpu0, _ := srv.devices[0].GetUUID()
	mig3g := srv.devices[1].migs[1].uuid
	w, err := StartLoad(LoadDir(ctl), LoadRecord{Devices: []DeviceLoad{{UUID: gpu0, UtilPercent: 50}, {UUID: mig3g, UtilPercent: 70}}})
	if err != nil {
		t.Fatal(err)
	}
	since := uint64(time.Now().Add(-time.Second).UnixMicro())
	waitFor(t, "GPU samples", func() string {
		if got := nvmlProcUtil(srv, gpu0, since); got != "4242:50/0" {
			return got
		}
		return ""
	})
	if got := nvmlProcUtil(srv, mig3g, since); got != "4242:70/0" {
		t.Errorf("MIG instance: %q", got)
	}
	// Loads re-derive the view every poll: samples stay fresh.
	later := uint64(time.Now().UnixMicro())
	waitFor(t, "fresh samples", func() string {
		if got := nvmlProcUtil(srv, gpu0, later); got != "4242:50/0" {
			return got
		}
		return ""
	})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "closed load has no samples", func() string {
		if got := nvmlProcUtil(srv, gpu0, 0); got != "ERROR_NOT_FOUND" {
			return got
		}
		return ""
	})
}
