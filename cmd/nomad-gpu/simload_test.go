package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nomad-gpu/nomad-gpu/gpu"
	"github.com/nomad-gpu/nomad-gpu/gpu/sim"
)

func TestSimLoadFlags(t *testing.T) {
	dir := t.TempDir()
	task := map[string]string{"CUDA_VISIBLE_DEVICES": "GPU-a,MIG-b", "NVIDIA_VISIBLE_DEVICES": "GPU-a,MIG-b", sim.EnvLoadDir: dir}
	mps := map[string]string{"CUDA_VISIBLE_DEVICES": "GPU-a,GPU-c", sim.EnvLoadDir: dir,
		"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=20480M,1=10240M"}
	with := func(base map[string]string, kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		want    string // the record's devices, ramp and, after "|", the load dir
		wantErr string
	}{
		{"task defaults: full load on the task's devices", nil, task,
			"GPU-a u=100 m=50 mem=0/0; MIG-b u=100 m=50 mem=0/0; ramp=0 dur=0s|" + dir, ""},
		{"everything", []string{"--util", "80", "--mem-util=30", "--memory", "20GiB", "--duration", "5m", "--ramp", "30s"}, task,
			"GPU-a u=80 m=30 mem=21474836480/0; MIG-b u=80 m=30 mem=21474836480/0; ramp=30000 dur=5m0s|" + dir, ""},
		{"memory percent, bare seconds, single dash", []string{"-memory", "50%", "-duration", "90"}, task,
			"GPU-a u=100 m=50 mem=0/50; MIG-b u=100 m=50 mem=0/50; ramp=0 dur=1m30s|" + dir, ""},
		{"memory units", []string{"--memory", "1.5G"}, task,
			"GPU-a u=100 m=50 mem=1610612736/0; MIG-b u=100 m=50 mem=1610612736/0; ramp=0 dur=0s|" + dir, ""},
		{"NVIDIA_VISIBLE_DEVICES when CUDA's is unset", []string{"--memory", "512MB"}, map[string]string{"NVIDIA_VISIBLE_DEVICES": "GPU-n", sim.EnvLoadDir: dir},
			"GPU-n u=100 m=50 mem=536870912/0; ramp=0 dur=0s|" + dir, ""},
		{"outside Nomad", []string{"--devices", "GPU-x, MIG-y", "--load-dir", dir + "/", "--util", "10"}, nil,
			"GPU-x u=10 m=5 mem=0/0; MIG-y u=10 m=5 mem=0/0; ramp=0 dur=0s|" + dir, ""},
		{"MPS client: util of its thread share, memory of its pinned limit", []string{"--util", "80", "--memory", "50%"}, mps,
			"GPU-a u=20 m=10 mem=10737418240/0; GPU-c u=20 m=10 mem=5368709120/0; ramp=0 dur=0s|" + dir, ""},
		{"MPS limits only for the devices CUDA sees", []string{"--devices", "GPU-z", "--util", "80", "--memory", "50%"}, mps,
			"GPU-z u=80 m=40 mem=0/50; ramp=0 dur=0s|" + dir, ""},

		{"util out of range", []string{"--util", "120"}, task, "", "--util: 120 is out of range; allowed: 0 to 100"},
		{"util not a number", []string{"--util", "lots"}, task, "", `--util: "lots" is not a number`},
		{"mem-util out of range", []string{"--mem-util", "-1"}, task, "", "--mem-util: -1 is out of range"},
		{"memory without unit", []string{"--memory", "20"}, task, "", `--memory: "20" has no unit`},
		{"memory unknown unit", []string{"--memory", "20XB"}, task, "", `--memory: "20XB": unknown unit "XB"`},
		{"memory garbage", []string{"--memory", "big"}, task, "", `--memory: "big" is not a size`},
		{"memory percent over 100", []string{"--memory", "150%"}, task, "", `--memory: "150%": a percentage must be above 0 and at most 100`},
		{"memory over an MPS client's pinned limit", []string{"--memory", "30GiB"}, mps, "",
			"--memory: 30 GiB is more than this MPS client may allocate on GPU-a (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT gives CUDA device 0 20480 MiB)"},
		{"bad thread percentage", nil, with(mps, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "0"), "", `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE: "0" is not a percentage`},
		{"bad pinned limit", nil, with(mps, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=lots"), "", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"},
		{"duration garbage", []string{"--duration", "soon"}, task, "", `--duration: "soon" is not a duration`},
		{"negative duration", []string{"--duration", "-5s"}, task, "", "--duration: -5s is negative"},
		{"negative ramp", []string{"--ramp", "-1"}, task, "", "--ramp: -1s is negative"},
		{"ramp longer than the load", []string{"--ramp", "10m", "--duration", "5m"}, task, "", "--ramp: 10m0s is longer than --duration 5m0s"},
		{"no devices", nil, map[string]string{sim.EnvLoadDir: dir}, "", "--devices: none given, and neither CUDA_VISIBLE_DEVICES nor NVIDIA_VISIBLE_DEVICES"},
		{"index instead of UUID in the environment", nil, with(task, "CUDA_VISIBLE_DEVICES", "0,1"), "",
			`CUDA_VISIBLE_DEVICES: "0" is not a GPU- or MIG- UUID (sim-load needs UUIDs, as the device plugin sets them); pass --devices`},
		{"bad --devices", []string{"--devices", "GPU-a,all"}, task, "", `--devices: "all" is not a GPU- or MIG- UUID`},
		{"device twice", []string{"--devices", "GPU-a,GPU-a"}, task, "", "--devices: GPU-a is listed twice"},
		{"no load dir", nil, map[string]string{"CUDA_VISIBLE_DEVICES": "GPU-a"}, "", "--load-dir: not given and NOMAD_GPU_SIM_LOAD_DIR is not set"},
		{"positional argument", []string{"60"}, task, "", `unexpected argument "60"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			getenv := func(k string) string { return tc.env[k] }
			var stderr bytes.Buffer
			opts, err := parseSimLoad(tc.args, getenv, &stderr)
			var rec sim.LoadRecord
			if err == nil {
				rec, _, err = planSimLoad(opts, getenv)
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var parts []string
			for _, d := range rec.Devices {
				parts = append(parts, fmt.Sprintf("%s u=%v m=%v mem=%d/%v", d.UUID, d.UtilPercent, d.MemUtilPercent, d.MemoryBytes, d.MemoryPercent))
			}
			parts = append(parts, fmt.Sprintf("ramp=%d dur=%s", rec.RampMS, opts.duration))
			if got := strings.Join(parts, "; ") + "|" + opts.loadDir; got != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

func TestSimLoadUsage(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if rc := run([]string{"sim-load", "-h"}, &stdout, &stderr); rc != 0 || !strings.Contains(stderr.String(), "--memory SIZE") {
		t.Errorf("rc %d, usage %q", rc, stderr.String())
	}
	stderr.Reset()
	if rc := run([]string{"sim-load", "--bogus"}, &stdout, &stderr); rc != 2 || !strings.Contains(stderr.String(), "bogus") {
		t.Errorf("rc %d, stderr %q", rc, stderr.String())
	}
	stderr.Reset()
	// A directory from the task's environment must be there already.
	missing := filepath.Join(t.TempDir(), "sim.json.load")
	env := map[string]string{sim.EnvLoadDir: missing}
	rc := simLoad(context.Background(), []string{"--devices", "GPU-a"}, func(k string) string { return env[k] }, &stdout, &stderr)
	if rc != 1 || !strings.Contains(stderr.String(), "is "+strings.TrimSuffix(missing, ".load")+" the node's control file") {
		t.Errorf("rc %d, stderr %q", rc, stderr.String())
	}
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Errorf("made the directory from the environment: %v", err)
	}
	// --load-dir is made, but not its parent.
	stderr.Reset()
	noParent := filepath.Join(missing, "x", "sim.json.load")
	rc = simLoad(context.Background(), []string{"--devices", "GPU-a", "--load-dir", noParent}, func(string) string { return "" }, &stdout, &stderr)
	if rc != 1 || !strings.Contains(stderr.String(), "--load-dir: sim load directory "+noParent) {
		t.Errorf("rc %d, stderr %q", rc, stderr.String())
	}
	stdout.Reset()
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // stops at once, after starting
	rc = simLoad(ctx, []string{"--devices", "GPU-a", "--load-dir", missing}, func(string) string { return "" }, &stdout, &stderr)
	if fi, err := os.Stat(missing); rc != 0 || err != nil || fi.Mode()&os.ModeSticky == 0 || !strings.Contains(stdout.String(), "made the load directory") {
		t.Errorf("rc %d, %v, %v, stdout %q", rc, fi, err, stdout.String())
	}
	if entries, _ := os.ReadDir(missing); len(entries) != 0 {
		t.Errorf("left %v", entries)
	}
}

// TestSimLoadHelperProcess is the nomad-gpu command when the test binary
// is run by startSimLoad.
func TestSimLoadHelperProcess(t *testing.T) {
	if os.Getenv("NOMAD_GPU_SIM_LOAD_HELPER") != "1" {
		t.Skip("run by TestSimLoadCommand")
	}
	i := slices.Index(os.Args, "--")
	os.Exit(run(os.Args[i+1:], os.Stdout, os.Stderr))
}

// startSimLoad runs `nomad-gpu sim-load args…` as a process of its own with
// the task environment env, and waits for it to say it has started.
func startSimLoad(t *testing.T, env []string, args ...string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"-test.run=^TestSimLoadHelperProcess$", "--", "sim-load"}, args...)...)
	cmd.Env = append([]string{"NOMAD_GPU_SIM_LOAD_HELPER=1", "PATH=" + os.Getenv("PATH")}, env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	sc := bufio.NewScanner(out)
	if !sc.Scan() || !strings.HasPrefix(sc.Text(), "sim-load: ") {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("sim-load did not start: %q, stderr %s", sc.Text(), stderr.String())
	}
	go func() {
		for sc.Scan() {
		}
	}()
	return cmd, &stderr
}

func eventually(t *testing.T, what string, cond func() string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		msg := cond()
		if msg == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s", what, msg)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func telemetryIs(inv *gpu.Inventory, uuid string, util uint32, usedMiB uint64) func() string {
	return func() string {
		tm, err := inv.Telemetry(uuid)
		if err != nil {
			return err.Error()
		}
		if tm.GPUUtilPercent == nil || *tm.GPUUtilPercent != util || tm.MemoryUsedMiB != usedMiB {
			return fmt.Sprintf("util %v%%, %d MiB used; want %d%%, %d MiB", ptrVal(tm.GPUUtilPercent), tm.MemoryUsedMiB, util, usedMiB)
		}
		return ""
	}
}

func ptrVal(p *uint32) any {
	if p == nil {
		return nil
	}
	return *p
}

// The built command against a sim node reading its load directory: the
// devices' telemetry rises while sim-load runs and falls when it is stopped
// or its time is up.
func TestSimLoadCommand(t *testing.T) {
	ctl := filepath.Join(t.TempDir(), "sim.json")
	inv, err := gpu.Open(gpu.Config{Backend: gpu.BackendSim, Sim: gpu.SimConfig{System: "dgxh100", Seed: "sim-load", ControlFile: ctl,
		ControlPoll: 10 * time.Millisecond, MIG: []gpu.MIGLayout{{GPUs: []int{1}, Profiles: []string{"3g.40gb", "4g.40gb"}}}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer inv.Close()
	snap, err := inv.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	gpu0, gpu1, gpu2 := snap.GPUs[0].UUID, snap.GPUs[1].UUID, snap.GPUs[2].UUID
	mig3g := snap.GPUs[1].MIG[0].UUID
	dir := gpu.SimLoadDir(ctl)
	if err := gpu.PrepareSimLoadDir(dir); err != nil { // as the device plugin's Reserve does
		t.Fatal(err)
	}

	t.Run("a task's devices, until stopped", func(t *testing.T) {
		cmd, stderr := startSimLoad(t, []string{gpu.EnvSimLoadDir + "=" + dir, "CUDA_VISIBLE_DEVICES=" + gpu0 + "," + mig3g},
			"--util", "80", "--memory", "10GiB")
		eventually(t, "GPU loaded", telemetryIs(inv, gpu0, 80, 10240))
		eventually(t, "MIG instance loaded", telemetryIs(inv, mig3g, 80, 10240))
		eventually(t, "its parent loaded by its share", telemetryIs(inv, gpu1, 34, 10240))
		tm, _ := inv.Telemetry(gpu0)
		if *tm.PowerMilliW != 574000 || *tm.TemperatureC != 69 {
			t.Errorf("power %d mW, %d °C", *tm.PowerMilliW, *tm.TemperatureC)
		}
		procs, err := inv.Processes(gpu0)
		if err != nil || !slices.Equal(procs, []gpu.Process{{PID: uint32(cmd.Process.Pid), UsedMiB: 10240}}) {
			t.Errorf("processes %v, %v; want sim-load's pid %d", procs, err, cmd.Process.Pid)
		}
		cmd.Process.Signal(syscall.SIGTERM)
		if err := cmd.Wait(); err != nil {
			t.Fatalf("sim-load on SIGTERM: %v, stderr %s", err, stderr)
		}
		eventually(t, "GPU idle again", telemetryIs(inv, gpu0, 0, 0))
		eventually(t, "parent idle again", telemetryIs(inv, gpu1, 0, 0))
		if entries, _ := os.ReadDir(dir); len(entries) != 0 {
			t.Errorf("left in the load dir: %v", entries)
		}
	})

	t.Run("an MPS client, for a while", func(t *testing.T) {
		start := time.Now()
		cmd, stderr := startSimLoad(t, []string{gpu.EnvSimLoadDir + "=" + dir, "CUDA_VISIBLE_DEVICES=" + gpu2,
			"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=20480M"},
			"--util", "60", "--memory", "50%", "--duration", "1.5s")
		eventually(t, "share loaded", telemetryIs(inv, gpu2, 30, 10240))
		if err := cmd.Wait(); err != nil {
			t.Fatalf("sim-load: %v, stderr %s", err, stderr)
		}
		if d := time.Since(start); d < 1500*time.Millisecond {
			t.Errorf("ended after %v", d)
		}
		eventually(t, "share idle again", telemetryIs(inv, gpu2, 0, 0))
	})

	t.Run("outside Nomad, killed", func(t *testing.T) {
		cmd, _ := startSimLoad(t, nil, "--load-dir", dir, "--devices", gpu0, "--util", "40", "--ramp", "200ms")
		eventually(t, "ramped up", telemetryIs(inv, gpu0, 40, 0))
		cmd.Process.Kill()
		cmd.Wait()
		eventually(t, "a killed sim-load's load ends", telemetryIs(inv, gpu0, 0, 0))
	})
}
