package driver

import (
	"context"
	"fmt"
	"github.com/nomad-gpu/nomad-gpu/driver/procfs"
	"github.com/nomad-gpu/nomad-gpu/internal/testenv"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nomad-gpu/nomad-gpu/driver/supervisor"
	"github.com/nomad-gpu/nomad-gpu/gpu"
	"github.com/nomad-gpu/nomad-gpu/wire/drivers"
)

// The test binary is also the supervisor and shim, as the plugin binary is.
func TestMain(m *testing.M) {
	if code, ok := supervisor.Dispatch(os.Args); ok {
		os.Exit(code)
	}
	if len(os.Args) == 3 && os.Args[1] == "die-starting" {
		os.Exit(dieStarting(os.Args[2]))
	}
	os.Exit(m.Run())
}

type env struct {
	t       testing.TB
	dir     string
	control string
	cfg     *Config
}

func newEnv(t testing.TB) *env {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Skip(t, testenv.Root, "driver tests need root (users, cgroups)")
	}
	dir, err := os.MkdirTemp("", "ngd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	// Tasks run as nobody and must reach their alloc dirs below it, as
	// under a Nomad data_dir made 0755.
	os.Chmod(dir, 0o755)
	e := &env{t: t, dir: dir, control: filepath.Join(dir, "sim.json")}
	cfg := &Config{}
	if err := decodeDefaults(cfg); err != nil {
		t.Fatal(err)
	}
	cfg.StateDir = filepath.Join(dir, "state")
	// Not the default under /var/lib: a test makes nothing outside its dir.
	cfg.Checkpoint.Root = filepath.Join(dir, "checkpoints")
	// Nor the default agent address: an agent on 127.0.0.1:4646 (make dev)
	// is not the test's. This one knows no allocation, as Nomad would not
	// know the tests' made-up ones.
	nomad := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(nomad.Close)
	cfg.Nomad.Address = nomad.URL
	cfg.CgroupRoot = "nomad-gpu-test"
	cfg.WatchdogInterval = 200 * time.Millisecond
	cfg.MPS.ControlBinary, _ = filepath.Abs("mps/testdata/fake-nvidia-cuda-mps-control")
	cfg.MPS.PipeRoot = filepath.Join(dir, "mps")
	cfg.MPS.LogRoot = filepath.Join(dir, "mpslog")
	cfg.GPU.Backend = "sim"
	cfg.GPU.Sim = gpu.SimConfig{System: "dgxh100", Seed: "driver-test", ControlFile: e.control}
	e.cfg = cfg
	return e
}

// plugin is one plugin process's worth of driver; a test makes a second one
// to play a plugin restart.
func (e *env) plugin() *Driver {
	d := New(hclog.NewNullLogger())
	exe, err := os.Executable()
	if err != nil {
		e.t.Fatal(err)
	}
	d.SetExecutable(exe)
	// Its own copy: tests change e.cfg for the next plugin while this
	// one's loops still read its config.
	cfg := *e.cfg
	if err := d.SetConfig(&cfg, nil); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { d.Shutdown() })
	return d
}

var taskSeq atomic.Int64

func (e *env) taskConfig(tc *TaskConfig, deviceEnv map[string]string) *drivers.TaskConfig {
	alloc := fmt.Sprintf("alloc%04d-%d", taskSeq.Add(1), os.Getpid())
	allocDir := e.allocDir(alloc, "t")
	envm := map[string]string{
		"PATH": "/usr/bin:/bin", "MARKER": "ngd-" + alloc,
		"NOMAD_TASK_DIR":    filepath.Join(allocDir, "t", "local"),
		"NOMAD_SECRETS_DIR": filepath.Join(allocDir, "t", "secrets"),
		"NOMAD_ALLOC_DIR":   filepath.Join(allocDir, "alloc"),
	}
	for k, v := range deviceEnv {
		envm[k] = v
	}
	return &drivers.TaskConfig{
		ID: alloc + "/t/abcd", Name: "t", AllocID: alloc, AllocDir: allocDir, DriverConfig: tc,
		Env: envm, DeviceEnv: deviceEnv,
		Resources: &drivers.Resources{CPUShares: 100, MemoryMB: 64, Linux: &drivers.LinuxResources{MemoryLimitBytes: 64 << 20}},
	}
}

// allocDir lays out an allocation's directories as the Nomad client does
// (<data_dir>/alloc/<id>/{alloc,<task>/{local,secrets,tmp}}, world-writable).
func (e *env) allocDir(alloc string, tasks ...string) string {
	root := filepath.Join(e.dir, "data", "alloc", alloc)
	dirs := []string{filepath.Join(root, "alloc")}
	for _, task := range tasks {
		for _, sub := range []string{"local", "secrets", "tmp"} {
			dirs = append(dirs, filepath.Join(root, task, sub))
		}
	}
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o777); err != nil {
			e.t.Fatal(err)
		}
	}
	for p := root; p != e.dir; p = filepath.Dir(p) {
		os.Chmod(p, 0o755)
	}
	for _, d := range dirs {
		os.Chmod(d, 0o777)
		os.Chmod(filepath.Dir(d), 0o777)
	}
	return root
}

func wait(t testing.TB, d *Driver, id string, within time.Duration) *drivers.ExitResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	ch, err := d.WaitTask(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	res, ok := <-ch
	if !ok || res == nil {
		t.Fatalf("task %s did not exit within %s", id, within)
	}
	return res
}

func TestStartWaitExitCodes(t *testing.T) {
	e := newEnv(t)
	d := e.plugin()
	cases := []struct {
		name   string
		script string
		code   int
		signal int
	}{
		{"success", "exit 0", 0, 0},
		{"failure", "exit 7", 7, 0},
		{"killed by signal", "kill -TERM $$", 128 + 15, int(syscall.SIGTERM)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := e.taskConfig(&TaskConfig{Command: "/bin/sh", Args: []string{"-c", c.script}}, nil)
			h, _, err := d.StartTask(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if h.Version < 1 || len(h.DriverState) == 0 {
				t.Fatalf("handle %+v", h)
			}
			res := wait(t, d, cfg.ID, 30*time.Second)
			if res.ExitCode != c.code || res.Signal != c.signal {
				t.Fatalf("exit %+v, want code %d signal %d", res, c.code, c.signal)
			}
			// WaitTask after exit answers at once, as often as asked.
			if again := wait(t, d, cfg.ID, time.Second); again.ExitCode != res.ExitCode {
				t.Fatalf("second wait %+v", again)
			}
			if err := d.DestroyTask(cfg.ID, true); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A started task's event names its host pid, the one InspectTask, NVML
// and ps know it by (inside its PID namespace it is 1).
func TestStartEventNamesHostPID(t *testing.T) {
	e := newEnv(t)
	d := e.plugin()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	evs, _ := d.TaskEvents(ctx)
	cfg := e.taskConfig(&TaskConfig{Command: "/bin/sh", Args: []string{"-c", "sleep 300"}}, nil)
	if _, _, err := d.StartTask(cfg); err != nil {
		t.Fatal(err)
	}
	defer destroyTask(t, d, cfg.ID)
	st, err := d.InspectTask(cfg.ID)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("started as host pid %s (supervisor pid %s)", st.Attributes["pid"], st.Attributes["supervisor_pid"])
	deadline := time.After(10 * time.Second)
	for {
		select {
		case ev := <-evs:
			if ev.TaskID == cfg.ID && strings.HasPrefix(ev.Message, "started as") {
				if ev.Message != want || ev.Annotations["pid"] != st.Attributes["pid"] {
					t.Fatalf("event %q %v, want %q", ev.Message, ev.Annotations, want)
				}
				return
			}
		case <-deadline:
			t.Fatalf("no event %q", want)
		}
	}
}

func TestStartRejectsBadInput(t *testing.T) {
	e := newEnv(t)
	d := e.plugin()
	cases := []struct {
		name string
		tc   *TaskConfig
		user string
		want string
	}{
		{"missing command", &TaskConfig{}, "", "config.command: must not be empty"},
		{"command not found", &TaskConfig{Command: "/no/such/binary"}, "", "/no/such/binary"},
		{"unknown user", &TaskConfig{Command: "/bin/true"}, "nosuchuser-ngd", `user "nosuchuser-ngd" does not exist`},
		{"root refused", &TaskConfig{Command: "/bin/true"}, "root", `user: "root" (uid 0) is denied by the plugin config (denied_host_uids = "0")`},
		{"relative work_dir", &TaskConfig{Command: "/bin/true", WorkDir: "tmp"}, "", "config.work_dir"},
		{"checkpoint signal", &TaskConfig{Command: "/bin/true", Checkpoint: []CheckpointConfig{withCheckpoint(func(c *CheckpointConfig) { c.Signal = "SIGNOPE" })}}, "", "config.checkpoint.signal"},
		{"checkpoint commit_timeout", &TaskConfig{Command: "/bin/true", Checkpoint: []CheckpointConfig{withCheckpoint(func(c *CheckpointConfig) { c.CommitTimeout = 0 })}}, "", "config.checkpoint.commit_timeout"},
		{"checkpoint interval", &TaskConfig{Command: "/bin/true", Checkpoint: []CheckpointConfig{withCheckpoint(func(c *CheckpointConfig) { c.Interval = time.Millisecond })}}, "", "config.checkpoint.interval"},
		{"checkpoint keep", &TaskConfig{Command: "/bin/true", Checkpoint: []CheckpointConfig{withCheckpoint(func(c *CheckpointConfig) { c.Keep = 0 })}}, "", "config.checkpoint.keep: 0 is out of range; allowed: 1 to 100"},
		{"two checkpoint blocks", &TaskConfig{Command: "/bin/true", Checkpoint: []CheckpointConfig{defaultCheckpoint(), defaultCheckpoint()}}, "", "config.checkpoint: 2 blocks"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := e.taskConfig(c.tc, nil)
			cfg.User = c.user
			_, _, err := d.StartTask(cfg)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want %q", err, c.want)
			}
			var rerr *drivers.RecoverableError
			if !asRecoverable(err, &rerr) || rerr.Recoverable {
				t.Fatalf("error %v should be unrecoverable", err)
			}
		})
	}
}

func asRecoverable(err error, out **drivers.RecoverableError) bool {
	r, ok := err.(*drivers.RecoverableError)
	if ok {
		*out = r
	}
	return ok
}

// A new plugin process recovers a task from its handle alone, including one
// that exited while no plugin was watching.
func TestRecoverAfterPluginRestart(t *testing.T) {
	e := newEnv(t)
	first := e.plugin()
	running := e.taskConfig(&TaskConfig{Command: "/bin/sh", Args: []string{"-c", "sleep 1; exit 3"}}, nil)
	h, _, err := first.StartTask(running)
	if err != nil {
		t.Fatal(err)
	}
	e.reapOnCleanup(running.ID)
	first.Shutdown() // the plugin dies; the task does not

	second := e.plugin()
	handle := &drivers.TaskHandle{Version: h.Version, Config: &drivers.TaskConfig{ID: running.ID, Name: "t", AllocID: running.AllocID}, DriverState: h.DriverState}
	if err := second.RecoverTask(handle); err != nil {
		t.Fatal(err)
	}
	if err := second.RecoverTask(handle); err != nil {
		t.Fatalf("recover is not idempotent: %v", err)
	}
	if res := wait(t, second, running.ID, 30*time.Second); res.ExitCode != 3 {
		t.Fatalf("exit %+v, want code 3", res)
	}
	destroyTask(t, second, running.ID)
}

func TestStopKillsTree(t *testing.T) {
	e := newEnv(t)
	d := e.plugin()
	cfg := e.taskConfig(&TaskConfig{Command: "/bin/sh", Args: []string{"-c", "trap '' TERM INT; sleep 300 & sleep 300"}}, nil)
	if _, _, err := d.StartTask(cfg); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	tk := d.store.get(cfg.ID)
	pids, _ := tk.pids()
	if len(pids) < 2 {
		t.Fatalf("task tree %v", pids)
	}
	if err := d.StopTask(cfg.ID, 500*time.Millisecond, "SIGTERM"); err != nil {
		t.Fatal(err)
	}
	res := wait(t, d, cfg.ID, 30*time.Second)
	if res.Signal != int(syscall.SIGKILL) {
		t.Fatalf("exit %+v: want killed after the grace period", res)
	}
	if err := d.DestroyTask(cfg.ID, true); err != nil {
		t.Fatal(err)
	}
	for _, p := range pids {
		if alive(p) {
			t.Errorf("pid %d survived", p)
		}
	}
}

func TestMPSWatchdogKillsOnlyTheOffender(t *testing.T) {
	e := newEnv(t)
	d := e.plugin()
	inv, err := gpu.Open(e.cfg.gpuConfig(), nil)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := inv.Snapshot()
	inv.Close()
	if err != nil {
		t.Fatal(err)
	}
	gpuUUID := snap.GPUs[3].UUID
	share := func() map[string]string {
		return map[string]string{
			"CUDA_VISIBLE_DEVICES": gpuUUID, "NOMAD_GPU_SLICE_TYPE": "mps",
			"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=20480M",
			"CUDA_MPS_PIPE_DIRECTORY": filepath.Join(e.cfg.MPS.PipeRoot, gpuUUID),
		}
	}
	events, cancel := context.WithCancel(context.Background())
	defer cancel()
	evs, _ := d.TaskEvents(events)

	var ids []string
	var pids []int
	for i := 0; i < 2; i++ {
		cfg := e.taskConfig(&TaskConfig{Command: "/bin/sh", Args: []string{"-c", "sleep 300"}}, share())
		if _, _, err := d.StartTask(cfg); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, cfg.ID)
		pids = append(pids, d.store.get(cfg.ID).proc.TaskPID())
	}
	if st := d.rt.Load().mps.Status()[gpuUUID]; len(st.Clients) != 2 {
		t.Fatalf("MPS daemon clients %+v, want both tasks", st)
	}
	ctl := gpu.OpenControl(e.control)
	if err := ctl.SetProcessMemory(uint32(pids[0]), gpuUUID, 30000); err != nil {
		t.Fatal(err)
	}
	if err := ctl.SetProcessMemory(uint32(pids[1]), gpuUUID, 1000); err != nil {
		t.Fatal(err)
	}
	res := wait(t, d, ids[0], 30*time.Second)
	if res.Err == nil || !strings.Contains(res.Err.Error(), "GPU memory limit exceeded") {
		t.Fatalf("offender exit %+v", res)
	}
	deadline := time.After(10 * time.Second)
	for {
		select {
		case ev := <-evs:
			if ev.TaskID == ids[0] && strings.Contains(ev.Message, "using 30000 MiB, limit 20480 MiB") && strings.Contains(ev.Message, gpuUUID) {
				goto neighbour
			}
		case <-deadline:
			t.Fatal("no task event naming the limit, the usage and the device")
		}
	}
neighbour:
	if d.store.get(ids[1]).exited() {
		t.Fatal("the neighbour on the same GPU was killed too")
	}
	for _, id := range ids {
		stopTask(t, d, id, time.Second, "")
		destroyTask(t, d, id)
	}
	if st, ok := d.rt.Load().mps.Status()[gpuUUID]; ok && len(st.Clients) > 0 {
		t.Fatalf("MPS daemon still has clients after both tasks left: %+v", st)
	}
}

// alive treats zombies as dead: nothing reaps orphans in some containers.
func alive(pid int) bool {
	s, err := procfs.ReadStat(pid)
	return err == nil && !s.Dead()
}
