package driver

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nomad-gpu/nomad-gpu/driver/landlock"
	"github.com/nomad-gpu/nomad-gpu/driver/supervisor"
	"github.com/nomad-gpu/nomad-gpu/gpu"
)

// A task holding GPUs of a sim node may write the node's load directory,
// derived from the driver's own sim config; no other task, and no task on
// a real node, gets that rule.
func TestLandlockRulesSimLoadDir(t *testing.T) {
	e := newEnv(t)
	loadDir := e.control + ".load"
	gpuEnv := map[string]string{"CUDA_VISIBLE_DEVICES": "GPU-x", "NOMAD_GPU_SLICE_TYPE": "gpu", "NOMAD_GPU_DEVICE_IDS": "GPU-x",
		gpu.EnvSimLoadDir: "/somewhere/the/task/chose"}
	cases := []struct {
		name    string
		backend string
		env     map[string]string
		want    bool
	}{
		{"sim node, task with GPUs", "sim", gpuEnv, true},
		{"sim node, task without GPUs", "sim", nil, false},
		{"real node", "nvml", gpuEnv, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			saved := *e.cfg
			defer func() { *e.cfg = saved }()
			e.cfg.GPU.Backend = tc.backend
			if tc.backend != "sim" {
				// A real node has no sim block (SetConfig refuses one).
				e.cfg.GPU.Sim = gpu.SimConfig{System: e.cfg.GPU.Sim.System}
			}
			d := e.plugin()
			tc2 := &TaskConfig{Command: "/bin/true"}
			cfg := e.taskConfig(tc2, tc.env)
			rules, err := d.landlockRules(cfg, tc2, dirsOf(cfg), supervisor.Isolation{}, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			got := false
			for _, r := range rules {
				if r.Path == loadDir {
					got = r.Access == landlock.Read|landlock.Write
				}
				if strings.HasPrefix(r.Path, "/somewhere") {
					t.Errorf("rule from the task's environment: %v", r)
				}
			}
			if got != tc.want {
				t.Errorf("rw rule for %s: %v, want %v (rules %v)", loadDir, got, tc.want, rules)
			}
		})
	}
}

// Under Landlock, as nobody, in its own PID and mount namespaces, a task
// with GPUs puts a load record into the sim node's load directory (as
// sim-load does: a temporary file renamed into place) and the node reports
// the load; a task without GPUs cannot write there.
func TestLandlockTaskWritesSimLoad(t *testing.T) {
	e := newEnv(t)
	d := e.plugin()
	requireIsolation(t, d)
	inv, err := gpu.Open(e.cfg.gpuConfig(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer inv.Close()
	snap, err := inv.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	u := snap.GPUs[3].UUID
	loadDir := gpu.SimLoadDir(e.control)
	if err := gpu.PrepareSimLoadDir(loadDir); err != nil { // as the device plugin's Reserve does
		t.Fatal(err)
	}
	script := fmt.Sprintf(`now=$(date -u +%%Y-%%m-%%dT%%H:%%M:%%SZ)
d="$NOMAD_GPU_SIM_LOAD_DIR"
{ printf '{"version":1,"start":"%%s","heartbeat":"%%s","heartbeat_ms":60000,"devices":[{"uuid":"%s","util_percent":70,"memory_bytes":1073741824}]}' "$now" "$now" > "$d/.load-task.json.tmp-1" &&
  mv "$d/.load-task.json.tmp-1" "$d/load-task.json" && echo written || echo refused; } > "$NOMAD_TASK_DIR/out" 2>&1`, u)
	env := map[string]string{"CUDA_VISIBLE_DEVICES": u, "NOMAD_GPU_SLICE_TYPE": "gpu", "NOMAD_GPU_DEVICE_IDS": u, gpu.EnvSimLoadDir: loadDir}
	run := func(env map[string]string) string {
		cfg := e.taskConfig(&TaskConfig{Command: "/bin/sh", Args: []string{"-c", script}}, env)
		cfg.Env[gpu.EnvSimLoadDir] = loadDir
		if _, _, err := d.StartTask(cfg); err != nil {
			t.Fatal(err)
		}
		wait(t, d, cfg.ID, 30*time.Second)
		destroyTask(t, d, cfg.ID)
		out, _ := os.ReadFile(filepath.Join(cfg.Env["NOMAD_TASK_DIR"], "out"))
		return strings.TrimSpace(string(out))
	}

	if out := run(nil); !strings.HasSuffix(out, "refused") {
		t.Errorf("a task without GPUs: %q, want refused", out)
	}
	if out := run(env); out != "written" {
		t.Fatalf("a task with a GPU: %q, want written", out)
	}
	rec := filepath.Join(loadDir, "load-task.json")
	defer os.Remove(rec)
	var st syscall.Stat_t
	if err := syscall.Stat(rec, &st); err != nil || st.Uid != 65534 {
		t.Errorf("record: %v, owner %d; want the task's user", err, st.Uid)
	}
	eventually(t, "the node reports the task's load", func() bool {
		tm, err := inv.Telemetry(u)
		return err == nil && tm.GPUUtilPercent != nil && *tm.GPUUtilPercent == 70 && tm.MemoryUsedMiB == 1024
	})
}
