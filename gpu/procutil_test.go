package gpu

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/nomad-gpu/nomad-gpu/gpu/sim"
)

func (d *faultyDevice) GetProcessUtilization(lastSeen uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
	if r, ok := d.faults["process utilization"]; ok {
		return nil, r
	}
	return d.Device.GetProcessUtilization(lastSeen)
}

// A sim-load writer in another process (its lock is what names its pid):
// the inventory reports its SM utilisation by pid on the GPU and on the MIG
// instance, of each device's own SMs.
func TestProcessUtilization(t *testing.T) {
	if dir := os.Getenv("GPU_PROCUTIL_WRITER"); dir != "" {
		var devs []sim.DeviceLoad
		if err := json.Unmarshal([]byte(os.Getenv("GPU_PROCUTIL_DEVICES")), &devs); err != nil {
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
	ctl := filepath.Join(t.TempDir(), "control.json")
	inv := openSim(t, SimConfig{System: "dgxh100", Seed: "procutil", ControlFile: ctl, ControlPoll: 5 * time.Millisecond,
		MIG: []MIGLayout{{GPUs: []int{1}, Profiles: []string{"3g.40gb"}}}})
	s := snapshot(t, inv)
	gpu0, mig := s.GPUs[0].UUID, s.GPUs[1].MIG[0].UUID
	if err := PrepareSimLoadDir(SimLoadDir(ctl)); err != nil {
		t.Fatal(err)
	}
	if u, err := inv.ProcessUtilization(gpu0, time.Time{}); err != nil || len(u) != 0 {
		t.Fatalf("idle: %v, %v", u, err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestProcessUtilization$")
	cmd.Env = append(os.Environ(), "GPU_PROCUTIL_WRITER="+SimLoadDir(ctl),
		fmt.Sprintf(`GPU_PROCUTIL_DEVICES=[{"uuid":%q,"util_percent":50},{"uuid":%q,"util_percent":70}]`, gpu0, mig))
	cmd.Stdout = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	pid := uint32(cmd.Process.Pid)
	eventually(t, "writer's utilisation", func() error {
		u, err := inv.ProcessUtilization(gpu0, time.Now().Add(-time.Second))
		if err != nil || len(u) != 1 || u[pid] != 50 {
			return fmt.Errorf("GPU: %v, %v; want %d at 50", u, err, pid)
		}
		return nil
	})
	if u, err := inv.ProcessUtilization(mig, time.Now().Add(-time.Second)); err != nil || len(u) != 1 || u[pid] != 70 {
		t.Errorf("MIG instance: %v, %v; want %d at 70", u, err, pid)
	}
	// Nothing newer than the future.
	if u, err := inv.ProcessUtilization(gpu0, time.Now().Add(time.Hour)); err != nil || len(u) != 0 {
		t.Errorf("since the future: %v, %v", u, err)
	}
	if _, err := inv.ProcessUtilization("GPU-nope", time.Time{}); !errors.Is(err, ErrUnknownDevice) {
		t.Errorf("unknown device: %v", err)
	}
	cmd.Process.Kill()
	cmd.Wait()
	eventually(t, "killed writer's utilisation gone", func() error {
		if u, err := inv.ProcessUtilization(gpu0, time.Time{}); err != nil || len(u) != 0 {
			return fmt.Errorf("%v, %v", u, err)
		}
		return nil
	})
}

func TestProcessUtilizationNotSupported(t *testing.T) {
	inv, _ := openFaulty(t, map[int]map[string]nvml.Return{
		1: {"process utilization": nvml.ERROR_NOT_SUPPORTED},
		2: {"process utilization": nvml.ERROR_UNKNOWN},
	})
	s := snapshot(t, inv)
	_, err := inv.ProcessUtilization(s.GPUs[1].UUID, time.Time{})
	if !errors.Is(err, ErrNotSupported) {
		t.Errorf("NOT_SUPPORTED: %v, want ErrNotSupported", err)
	}
	_, err = inv.ProcessUtilization(s.GPUs[2].UUID, time.Time{})
	var ne *NVMLError
	if errors.Is(err, ErrNotSupported) || !errors.As(err, &ne) || ne.Return != nvml.ERROR_UNKNOWN {
		t.Errorf("a failure: %v, want an NVMLError", err)
	}
	inv.Close()
	if _, err := inv.ProcessUtilization(s.GPUs[0].UUID, time.Time{}); !errors.Is(err, ErrClosed) {
		t.Errorf("after Close: %v", err)
	}
}
