package sim

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

func migNode(t *testing.T, ctl, seed string, profiles ...string) *Server {
	t.Helper()
	srv, err := New(Config{System: "dgxh100", Seed: seed, ControlFile: ctl, ControlPoll: 5 * time.Millisecond,
		MIG: []MIGLayout{{GPUs: []int{1}, Profiles: profiles}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown() })
	return srv
}

// migState is a GPU's MIG devices as NVML lists them: profile, GPU and
// compute instance ids, placement start (from the GPU instance) and UUID.
func migState(t *testing.T, d nvml.Device) []string {
	t.Helper()
	var out []string
	n, _ := d.GetMaxMigDeviceCount()
	for i := range n {
		m, ret := d.GetMigDeviceHandleByIndex(i)
		if ret == nvml.ERROR_NOT_FOUND {
			continue
		}
		uuid, _ := m.GetUUID()
		name, _ := m.GetName()
		gi, _ := m.GetGpuInstanceId()
		ci, _ := m.GetComputeInstanceId()
		inst, ret := d.GetGpuInstanceById(gi)
		if ret != nvml.SUCCESS {
			t.Fatalf("GPU instance %d of %s: %v", gi, uuid, ret)
		}
		info, _ := inst.GetInfo()
		out = append(out, fmt.Sprintf("%s gi%d ci%d @%d %s", name[strings.LastIndex(name, " ")+1:], gi, ci, info.Placement.Start, uuid))
	}
	return out
}

func profileInfo(t *testing.T, d nvml.Device, id int) nvml.GpuInstanceProfileInfo {
	t.Helper()
	info, ret := d.GetGpuInstanceProfileInfo(id)
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	return info
}

// The NVML calls that remake a GPU's instances: destroy refuses what is in
// use, creation places lowest free first, and the MIG device handles
// follow, with the UUIDs a config layout of the same geometry gets.
func TestMIGInstancesThroughNVML(t *testing.T) {
	srv := migNode(t, "", "nvml", "3g.40gb", "3g.40gb")
	d := srv.devices[1]
	three := profileInfo(t, d, nvml.GPU_INSTANCE_PROFILE_3_SLICE)
	gis, ret := d.GetGpuInstances(&three)
	if ret != nvml.SUCCESS || len(gis) != 2 {
		t.Fatalf("GetGpuInstances = %d, %v", len(gis), ret)
	}
	if ret := gis[0].Destroy(); ret != nvml.ERROR_IN_USE {
		t.Errorf("destroying a GPU instance with a compute instance: %v, want ERROR_IN_USE", ret)
	}
	for _, gi := range gis {
		ciProf, _ := gi.GetComputeInstanceProfileInfo(nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
		cis, ret := gi.GetComputeInstances(&ciProf)
		if ret != nvml.SUCCESS || len(cis) != 1 {
			t.Fatalf("GetComputeInstances = %d, %v", len(cis), ret)
		}
		if ret := cis[0].Destroy(); ret != nvml.SUCCESS {
			t.Fatal(ret)
		}
		if ret := gi.Destroy(); ret != nvml.SUCCESS {
			t.Fatal(ret)
		}
	}
	if got := migState(t, d); len(got) != 0 || len(d.geometry()) != 0 {
		t.Fatalf("after destroying everything: %v", got)
	}
	one := profileInfo(t, d, nvml.GPU_INSTANCE_PROFILE_1_SLICE)
	for range 7 {
		gi, ret := d.CreateGpuInstance(&one)
		if ret != nvml.SUCCESS {
			t.Fatal(ret)
		}
		ciProf, _ := gi.GetComputeInstanceProfileInfo(nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
		if _, ret := gi.CreateComputeInstance(&ciProf); ret != nvml.SUCCESS {
			t.Fatal(ret)
		}
		if _, ret := gi.CreateComputeInstance(&ciProf); ret != nvml.ERROR_INSUFFICIENT_RESOURCES {
			t.Errorf("second compute instance: %v", ret)
		}
	}
	if _, ret := d.CreateGpuInstance(&one); ret != nvml.ERROR_INSUFFICIENT_RESOURCES {
		t.Errorf("8th 1g instance: %v", ret)
	}
	if _, ret := d.CreateGpuInstanceWithPlacement(&three, &nvml.GpuInstancePlacement{Start: 4, Size: 3}); ret != nvml.ERROR_INSUFFICIENT_RESOURCES {
		t.Errorf("3g over 1g instances: %v", ret)
	}
	if _, ret := d.CreateGpuInstanceWithPlacement(&three, &nvml.GpuInstancePlacement{Start: 1, Size: 3}); ret != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("3g at a placement it has not: %v", ret)
	}
	got := migState(t, d)
	want := migState(t, migNode(t, "", "nvml", slices.Repeat([]string{"1g.10gb"}, 7)...).devices[1])
	if !slices.Equal(got, want) || !strings.HasPrefix(got[6], "1g.10gb gi6 ci0 @6 MIG-") {
		t.Errorf("made through NVML:\n %v\nfrom a layout:\n %v", got, want)
	}
	for _, m := range got {
		uuid := m[strings.LastIndex(m, " ")+1:]
		if h, ret := srv.DeviceGetHandleByUUID(uuid); ret != nvml.SUCCESS || h.(*MigDevice).uuid != uuid {
			t.Errorf("DeviceGetHandleByUUID(%s): %v", uuid, ret)
		}
	}
}

// A compute instance a process runs on cannot be destroyed.
func TestMIGDestroyInUse(t *testing.T) {
	ctl := filepath.Join(t.TempDir(), "ctl.json")
	srv := migNode(t, ctl, "busy", "3g.40gb", "3g.40gb")
	d := srv.devices[1]
	if err := OpenControl(ctl).SetProcessMemory(42, d.migs[1].uuid, 100); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "process listed", func() string {
		if procs, _ := d.migs[1].GetComputeRunningProcesses(); len(procs) != 1 {
			return fmt.Sprintf("%d processes", len(procs))
		}
		return ""
	})
	gis := d.gpuInstances(nil)
	for k, want := range []nvml.Return{nvml.SUCCESS, nvml.ERROR_IN_USE} {
		if ret := gis[k].computeInstances(nil)[0].Destroy(); ret != want {
			t.Errorf("compute instance on GPU instance %d: %v, want %v", k, ret, want)
		}
	}
}

// A geometry one server of a node sets through ChangeMIG reaches the
// node's other servers on their next poll, and a server opened later, with
// the file's record of the node's devices kept up to date; a server of
// another node is left alone.
func TestChangeMIGSharedThroughControlFile(t *testing.T) {
	ctl := filepath.Join(t.TempDir(), "ctl.json")
	a := migNode(t, ctl, "n", "3g.40gb", "3g.40gb")
	b := migNode(t, ctl, "n", "3g.40gb", "3g.40gb")
	other := migNode(t, ctl, "m", "3g.40gb", "3g.40gb")
	if data, _ := os.ReadFile(ctl); strings.Contains(string(data), "mig_geometry") {
		t.Fatalf("mig_geometry written before any change:\n%s", data)
	}
	gpu := a.devices[1].uuid
	start, before := migState(t, a.devices[1]), migState(t, other.devices[1])
	tests := []struct {
		name     string
		profiles []string
	}{
		{"seven 1g", slices.Repeat([]string{"1g.10gb"}, 7)},
		{"none", []string{}},
		{"mixed", []string{"4g.40gb", "2g.20gb", "1g.10gb"}},
		{"back", []string{"3g.40gb", "3g.40gb"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := a.ChangeMIG(gpu, func() error { return a.devices[1].rebuild(tc.profiles) }); err != nil {
				t.Fatal(err)
			}
			want := migState(t, a.devices[1])
			if len(want) != len(tc.profiles) {
				t.Fatalf("server a has %v", want)
			}
			waitFor(t, "server b follows", func() string {
				if got := migState(t, b.devices[1]); !slices.Equal(got, want) {
					return fmt.Sprintf("%v, want %v", got, want)
				}
				return ""
			})
			st, err := ReadControl(ctl)
			if err != nil {
				t.Fatal(err)
			}
			if g := st.MIGGeometry[gpu]; !slices.Equal(g, tc.profiles) {
				t.Errorf("mig_geometry = %v, want %v", g, tc.profiles)
			}
			recorded := st.Nodes["dgxh100/n"].Devices
			for _, m := range want {
				if uuid := m[strings.LastIndex(m, " ")+1:]; !slices.Contains(recorded, uuid) {
					t.Errorf("node record lacks %s: %v", uuid, recorded)
				}
			}
			if len(recorded) != 8+len(want) {
				t.Errorf("node record has %d devices, want %d", len(recorded), 8+len(want))
			}
			if got := migState(t, other.devices[1]); !slices.Equal(got, before) {
				t.Errorf("another node changed: %v", got)
			}
		})
	}
	if got := migState(t, a.devices[1]); !slices.Equal(got, start) {
		t.Errorf("back to the config's geometry: %v, want %v", got, start)
	}
	if err := a.ChangeMIG(gpu, func() error { return a.devices[1].rebuild([]string{"7g.80gb"}) }); err != nil {
		t.Fatal(err)
	}
	late := migNode(t, ctl, "n", "1g.10gb")
	if got, want := migState(t, late.devices[1]), migState(t, a.devices[1]); !slices.Equal(got, want) {
		t.Errorf("a server opened later has %v, want %v", got, want)
	}
	if err := a.ChangeMIG(a.devices[1].uuid[:10], func() error { return nil }); err == nil {
		t.Error("ChangeMIG of no GPU of the node succeeded")
	}
}
