package driver

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nomad-gpu/nomad-gpu/driver/procfs"
	"github.com/nomad-gpu/nomad-gpu/internal/testenv"
	"github.com/nomad-gpu/nomad-gpu/wire/drivers"
)

// A non-root task is given its MIG instance's capability nodes for its
// lifetime; two tasks of one user share a node, and the original owner
// comes back only when the last one goes.
func TestMIGCapsGrantedAndRevoked(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	old := capsDir
	capsDir = dir
	t.Cleanup(func() { capsDir = old })
	private := filepath.Join(dir, "nvidia-cap21")
	if err := unix.Mknod(private, unix.S_IFCHR|0o400, int(unix.Mkdev(1, 3))); err != nil {
		testenv.Skipf(t, testenv.Mknod, "cannot make a device node here: %v", err)
	}
	os.Chmod(private, 0o400)
	d := e.plugin()
	owner := func() (uint32, uint32) {
		var st syscall.Stat_t
		syscall.Stat(private, &st)
		return st.Uid, st.Mode & 0o777
	}
	var ids []string
	for i := 0; i < 2; i++ {
		cfg := e.taskConfig(&TaskConfig{Command: "/bin/sleep", Args: []string{"100"}}, nil)
		cfg.Devices = []drivers.DeviceConfig{{HostPath: private}, {HostPath: "/dev/nvidiactl"}}
		if _, _, err := d.StartTask(cfg); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, cfg.ID)
		if uid, mode := owner(); uid != 65534 || mode&0o400 == 0 {
			t.Fatalf("task %d running: node owned by %d, mode %o", i, uid, mode)
		}
	}
	for i, id := range ids {
		if err := d.DestroyTask(id, true); err != nil {
			t.Fatal(err)
		}
		uid, mode := owner()
		if last := i == len(ids)-1; last && (uid != 0 || mode != 0o400) {
			t.Fatalf("after the last task: uid %d mode %o, want 0 400", uid, mode)
		} else if !last && uid != 65534 {
			t.Fatalf("the first task's exit took the node from the second (uid %d)", uid)
		}
	}
}

func TestOOMKillIsReported(t *testing.T) {
	e := newEnv(t)
	d := e.plugin()
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		testenv.Skip(t, testenv.Python3, "no python3 on PATH to allocate memory with")
	}
	cfg := e.taskConfig(&TaskConfig{Command: "/usr/bin/python3", Args: []string{"-c", "b = bytearray(256 << 20); import time; time.sleep(5)"}}, nil)
	cfg.Resources.Linux.MemoryLimitBytes = 32 << 20
	if _, _, err := d.StartTask(cfg); err != nil {
		t.Fatal(err)
	}
	res := wait(t, d, cfg.ID, 30*time.Second)
	if !res.OOMKilled || res.Signal != int(syscall.SIGKILL) {
		t.Fatalf("exit %+v: want an OOM kill", res)
	}
	destroyTask(t, d, cfg.ID)
}

func TestMPSTaskWithoutMPSBinariesFailsClearly(t *testing.T) {
	e := newEnv(t)
	e.cfg.MPS.ControlBinary = "/nonexistent/nvidia-cuda-mps-control"
	d := e.plugin()
	cfg := e.taskConfig(&TaskConfig{Command: "/bin/true"}, map[string]string{
		"CUDA_VISIBLE_DEVICES": "GPU-x", "NOMAD_GPU_SLICE_TYPE": "mps",
		"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "50", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=1024M",
	})
	_, _, err := d.StartTask(cfg)
	if err == nil || !strings.Contains(err.Error(), "MPS") || !strings.Contains(err.Error(), "/nonexistent/nvidia-cuda-mps-control") {
		t.Fatalf("error %v: want one naming MPS and the missing binary", err)
	}
	if fp := d.fingerprint(); fp.Attributes["driver.gpu.mps"].Text() != "false" || !strings.Contains(fp.HealthDescription, "MPS") {
		t.Fatalf("fingerprint does not say MPS is unavailable: %+v", fp)
	}
}

func TestTaskWithoutGPUsSeesNone(t *testing.T) {
	e := newEnv(t)
	d := e.plugin()
	cfg := e.taskConfig(&TaskConfig{Command: "/bin/sh", Args: []string{"-c", `test "${CUDA_VISIBLE_DEVICES-unset}" = "" && test "$NVIDIA_VISIBLE_DEVICES" = void`}}, nil)
	cfg.Env["CUDA_VISIBLE_DEVICES"] = "0,1"
	if _, _, err := d.StartTask(cfg); err != nil {
		t.Fatal(err)
	}
	if res := wait(t, d, cfg.ID, 30*time.Second); res.ExitCode != 0 {
		t.Fatalf("a task without a GPU reservation saw GPUs: %+v", res)
	}
	destroyTask(t, d, cfg.ID)
}

// Exec runs as the task (user, environment, directory) while the root shim
// in between gets nothing of the task's environment.
func TestExecRunsAsTheTask(t *testing.T) {
	e := newEnv(t)
	d := e.plugin()
	cfg := e.taskConfig(&TaskConfig{Command: "/bin/sleep", Args: []string{"300"}}, nil)
	cfg.DriverConfig.(*TaskConfig).WorkDir = cfg.Env["NOMAD_TASK_DIR"]
	cfg.Env["TASK_MARK"] = "from-task"
	cfg.Env["LD_PRELOAD"] = "/nonexistent-ngd-test.so"
	if _, _, err := d.StartTask(cfg); err != nil {
		t.Fatal(err)
	}
	defer destroyTask(t, d, cfg.ID)
	res, err := d.ExecTask(cfg.ID, []string{"/bin/sh", "-c", "id -un; pwd; echo $TASK_MARK; exit 4"}, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(res.Stdout), "nobody\n"+cfg.Env["NOMAD_TASK_DIR"]+"\nfrom-task\n"; got != want || res.ExitResult.ExitCode != 4 {
		t.Fatalf("exec: stdout %q stderr %q exit %+v", got, res.Stderr, res.ExitResult)
	}
	// The loader complains about LD_PRELOAD only where the task's env is
	// used: once, in the command itself, never before it in the shim.
	if n := strings.Count(string(res.Stderr), "nonexistent-ngd-test.so"); n > 2 {
		t.Fatalf("the root exec shim ran with the task's LD_PRELOAD: %q", res.Stderr)
	}
	// A forked child that keeps stdout open does not hold exec past its end.
	start := time.Now()
	res, err = d.ExecTask(cfg.ID, []string{"/bin/sh", "-c", "sleep 60 & exit 0"}, 30*time.Second)
	if err != nil || res.ExitResult.ExitCode != 0 || time.Since(start) > 15*time.Second {
		t.Fatalf("exec with a lingering child: %+v, %v after %s", res, err, time.Since(start))
	}
}

func TestRecoveryKeepsMPSCeiling(t *testing.T) {
	e := newEnv(t)
	first := e.plugin()
	env := map[string]string{
		"CUDA_VISIBLE_DEVICES": "GPU-recover", "NOMAD_GPU_SLICE_TYPE": "mps",
		"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "50", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=40960M",
	}
	cfg := e.taskConfig(&TaskConfig{Command: "/bin/sleep", Args: []string{"300"}}, env)
	h, _, err := first.StartTask(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Passed or failed, the task, its supervisor and the MPS daemon go:
	// first destroyed as a fresh plugin would, then, should any survive
	// that, killed by their recorded identities (cleanups run last first).
	proc := first.store.get(cfg.ID).proc
	leftovers := []int{proc.TaskPID(), proc.SupervisorPID(), first.rt.Load().mps.Status()["GPU-recover"].PID}
	var ids []procfs.Identity
	for _, pid := range leftovers {
		if id, err := procfs.Identify(pid); err == nil {
			ids = append(ids, id)
		}
	}
	t.Cleanup(func() {
		for _, id := range ids {
			if id.Alive() {
				t.Errorf("pid %d outlived the test's cleanup; killing it", id.PID)
				syscall.Kill(id.PID, syscall.SIGKILL)
			}
		}
	})
	e.reapOnCleanup(cfg.ID)
	first.Shutdown()
	second := e.plugin()
	if err := second.RecoverTask(&drivers.TaskHandle{Version: 1, Config: &drivers.TaskConfig{ID: cfg.ID, Name: "t", AllocID: cfg.AllocID}, DriverState: h.DriverState}); err != nil {
		t.Fatal(err)
	}
	if c := second.rt.Load().mps.Status()["GPU-recover"].Ceiling; c.ThreadPercentage != 50 || c.PinnedMemMiB != 40960 {
		t.Fatalf("ceiling after recovery %+v, want the task's 50%% / 40960 MiB", c)
	}
	if err := second.StopTask(cfg.ID, time.Second, ""); err != nil {
		t.Errorf("stop: %v", err)
	}
	if err := second.DestroyTask(cfg.ID, true); err != nil {
		t.Errorf("destroy: %v", err)
	}
}

// The devices cgroup fences a task off the GPUs it did not reserve: opening
// another GPU's node fails with EPERM, its own gets past the cgroup (and
// then fails with ENXIO, as there is no driver behind these test nodes).
func TestDeviceFence(t *testing.T) {
	e := newEnv(t)
	// Landlock would refuse the other nodes first (EACCES): this is the
	// cgroup's fence alone.
	e.cfg.Isolation.Landlock = LandlockOff
	d := e.plugin()
	dir := filepath.Join(e.dir, "dev")
	os.MkdirAll(filepath.Join(dir, "nvidia-caps"), 0o755)
	os.Chmod(e.dir, 0o755)
	mk := func(name string, major, minor uint32) string {
		p := filepath.Join(dir, name)
		if err := syscall.Mknod(p, syscall.S_IFCHR|0o666, int(unixMkdev(major, minor))); err != nil {
			testenv.Skipf(t, testenv.Mknod, "mknod: %v", err)
		}
		os.Chmod(p, 0o666)
		return p
	}
	mine, other := mk("nvidia1", 195, 1), mk("nvidia0", 195, 0)
	otherCap := mk("nvidia-caps/nvidia-cap21", 240, 21)
	old := devDir
	devDir = dir
	t.Cleanup(func() { devDir = old })

	out := filepath.Join(e.dir, "fence.out")
	script := fmt.Sprintf(`for f in %s %s %s; do (exec 3<"$f") 2>>%s || true; done`, mine, other, otherCap, out)
	os.WriteFile(out, nil, 0o666)
	os.Chmod(out, 0o666)
	cfg := e.taskConfig(&TaskConfig{Command: "/bin/sh", Args: []string{"-c", script}}, nil)
	cfg.Devices = []drivers.DeviceConfig{{TaskPath: "/dev/nvidia1", HostPath: mine, Permissions: "rw"}}
	if _, _, err := d.StartTask(cfg); err != nil {
		t.Fatal(err)
	}
	wait(t, d, cfg.ID, 30*time.Second)
	destroyTask(t, d, cfg.ID)
	b, _ := os.ReadFile(out)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 3 {
		t.Fatalf("output %q", b)
	}
	if strings.Contains(lines[0], "not permitted") {
		t.Errorf("own GPU node fenced: %s", lines[0])
	}
	for _, l := range lines[1:] {
		if !strings.Contains(l, "not permitted") {
			t.Errorf("another GPU's node not fenced: %s", l)
		}
	}
}

func unixMkdev(major, minor uint32) uint64 {
	return uint64(major&0xfff)<<8 | uint64(minor&0xff) | uint64(minor&^0xff)<<12 | uint64(major&^0xfff)<<32
}
