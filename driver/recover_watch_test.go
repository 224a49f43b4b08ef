package driver

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nomad-gpu/nomad-gpu/gpu"
	"github.com/nomad-gpu/nomad-gpu/wire/drivers"
)

// migNode gives the env's sim node a MIG-mode GPU 1 with one 1g.10gb
// instance and a watchdog that never ticks by itself (tests run its rounds
// with Check), and returns the instance and its parent GPU.
func (e *env) migNode() (gpu.MIGDevice, gpu.GPU) {
	e.t.Helper()
	e.cfg.GPU.Sim.MIG = []gpu.MIGLayout{{GPUs: []int{1}, Profiles: []string{"1g.10gb"}}}
	e.cfg.GPU.Sim.ControlPoll = 5 * time.Millisecond
	e.cfg.WatchdogInterval = time.Hour
	inv, err := gpu.Open(e.cfg.gpuConfig(), nil)
	if err != nil {
		e.t.Fatal(err)
	}
	snap, err := inv.Snapshot()
	inv.Close()
	if err != nil {
		e.t.Fatal(err)
	}
	parent := snap.GPUs[1]
	if len(parent.MIG) != 1 {
		e.t.Fatalf("GPU 1 has MIG instances %+v, want one 1g.10gb", parent.MIG)
	}
	mig := parent.MIG[0]
	if mig.MemoryMiB == 0 || mig.MemoryMiB >= parent.MemoryMiB {
		e.t.Fatalf("MIG instance of %d MiB on a GPU of %d MiB", mig.MemoryMiB, parent.MemoryMiB)
	}
	return mig, parent
}

func migEnv(uuid string) map[string]string {
	return map[string]string{"CUDA_VISIBLE_DEVICES": uuid, "NOMAD_GPU_SLICE_TYPE": "mig"}
}

// setGPUMemory makes pid hold mib MiB on the device, as the sim's NVML
// reports it, and waits until d's inventory sees it.
func (e *env) setGPUMemory(d *Driver, pid int, uuid string, mib uint64) {
	e.t.Helper()
	if err := gpu.OpenControl(e.control).SetProcessMemory(uint32(pid), uuid, mib); err != nil {
		e.t.Fatal(err)
	}
	eventually(e.t, "the sim reporting the task's GPU memory", func() bool {
		inv, err := d.inventory()
		if err != nil {
			return false
		}
		ps, err := inv.Processes(uuid)
		return err == nil && slices.Contains(ps, gpu.Process{PID: uint32(pid), UsedMiB: mib})
	})
}

func (tk *task) killReasonNow() string {
	tk.mu.Lock()
	defer tk.mu.Unlock()
	return tk.killReason
}

// overLimitKill checks that one watchdog round over the limit killed the
// task: the kill is under way when Check returns, and the task ends by
// SIGKILL with the reason, with no further round.
func overLimitKill(t *testing.T, d *Driver, id string) {
	t.Helper()
	tk := d.store.get(id)
	d.rt.Load().watch.Check()
	if r := tk.killReasonNow(); !strings.Contains(r, "GPU memory limit exceeded") {
		t.Fatalf("after the first round over the limit the task is not being killed (kill reason %q)", r)
	}
	res := wait(t, d, id, 10*time.Second)
	if res.Signal != int(syscall.SIGKILL) || res.Err == nil || !strings.Contains(res.Err.Error(), "GPU memory limit exceeded") {
		t.Fatalf("exit %+v: want a SIGKILL for the GPU memory limit", res)
	}
}

// The watchdog kills a task in the first round that finds it over its
// limit, not in a later one: with the watchdog's own ticker out of the way,
// a single round is all the task gets.
func TestWatchdogKillsOnFirstRoundOverLimit(t *testing.T) {
	e := newEnv(t)
	mig, parent := e.migNode()
	d := e.plugin()
	cfg := e.taskConfig(&TaskConfig{Command: "/bin/sleep", Args: []string{"300"}}, migEnv(mig.UUID))
	if _, _, err := d.StartTask(cfg); err != nil {
		t.Fatal(err)
	}
	e.reapOnCleanup(cfg.ID)
	tk := d.store.get(cfg.ID)
	pid := tk.proc.TaskPID()

	// Within the limit: measured, not killed.
	e.setGPUMemory(d, pid, mig.UUID, 100)
	d.rt.Load().watch.Check()
	if u := d.rt.Load().watch.Usage(cfg.ID); u[mig.UUID] != 100 {
		t.Fatalf("usage %v after a round, want 100 MiB on %s", u, mig.UUID)
	}
	if r := tk.killReasonNow(); r != "" || tk.exited() {
		t.Fatalf("task within its limit killed: %q", r)
	}

	// Over any limit, the instance's and the parent GPU's alike.
	e.setGPUMemory(d, pid, mig.UUID, parent.MemoryMiB+1)
	overLimitKill(t, d, cfg.ID)
	if err := d.DestroyTask(cfg.ID, true); err != nil {
		t.Error(err)
	}
}

// A task on a MIG instance is held to the instance's memory, not its
// parent GPU's: using more than the instance has, though far less than the
// GPU has, gets it killed.
func TestWatchdogMIGLimitIsTheInstanceMemory(t *testing.T) {
	e := newEnv(t)
	mig, parent := e.migNode()
	d := e.plugin()
	cfg := e.taskConfig(&TaskConfig{Command: "/bin/sleep", Args: []string{"300"}}, migEnv(mig.UUID))
	if _, _, err := d.StartTask(cfg); err != nil {
		t.Fatal(err)
	}
	e.reapOnCleanup(cfg.ID)
	if got := d.rt.Load().watch.Limits(cfg.ID); got[mig.UUID] != mig.MemoryMiB {
		t.Errorf("watchdog limits %v, want %s at the instance's %d MiB (GPU %d MiB)", got, mig.UUID, mig.MemoryMiB, parent.MemoryMiB)
	}
	used := mig.MemoryMiB + 1024
	if used >= parent.MemoryMiB {
		t.Fatalf("test needs usage %d below the GPU's %d MiB", used, parent.MemoryMiB)
	}
	e.setGPUMemory(d, d.store.get(cfg.ID).proc.TaskPID(), mig.UUID, used)
	overLimitKill(t, d, cfg.ID)
	if err := d.DestroyTask(cfg.ID, true); err != nil {
		t.Error(err)
	}
}

// After a plugin restart, RecoverTask reopens the task's cgroup and puts
// the task back under the GPU memory watchdog at its limit: going over it
// then gets the task killed by the new plugin.
func TestRecoverReopensCgroupAndRewatches(t *testing.T) {
	e := newEnv(t)
	mig, _ := e.migNode()
	first := e.plugin()
	cfg := e.taskConfig(&TaskConfig{Command: "/bin/sleep", Args: []string{"300"}}, migEnv(mig.UUID))
	h, _, err := first.StartTask(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.reapOnCleanup(cfg.ID)
	before := first.store.get(cfg.ID)
	if before.group == nil {
		t.Skip("no task cgroup here to reopen")
	}
	paths, pid := before.group.Paths(), before.proc.TaskPID()
	first.Shutdown()

	second := e.plugin()
	if err := second.RecoverTask(&drivers.TaskHandle{Version: h.Version, Config: cfg, DriverState: h.DriverState}); err != nil {
		t.Fatal(err)
	}
	tk := second.store.get(cfg.ID)
	if tk == nil {
		t.Fatal("task not known after recovery")
	}
	if tk.group == nil {
		t.Fatal("recovered task has no cgroup: it was not reopened")
	}
	if got := tk.group.Paths(); !slices.Equal(got, paths) {
		t.Fatalf("recovered cgroup %v, want the task's %v", got, paths)
	}
	if pids, err := tk.group.Pids(); err != nil || !slices.Contains(pids, pid) {
		t.Fatalf("recovered cgroup holds %v (%v), want the task's pid %d", pids, err, pid)
	}
	w := second.rt.Load().watch
	if got := w.Limits(cfg.ID); got[mig.UUID] != mig.MemoryMiB {
		t.Fatalf("after recovery the watchdog has limits %v, want %s at %d MiB", got, mig.UUID, mig.MemoryMiB)
	}
	e.setGPUMemory(second, pid, mig.UUID, 50)
	w.Check()
	if u := w.Usage(cfg.ID); u[mig.UUID] != 50 {
		t.Fatalf("after recovery the watchdog measures %v, want 50 MiB on %s", u, mig.UUID)
	}
	e.setGPUMemory(second, pid, mig.UUID, mig.MemoryMiB+1)
	overLimitKill(t, second, cfg.ID)
	if err := second.DestroyTask(cfg.ID, true); err != nil {
		t.Error(err)
	}
}

// A task that exits while no plugin runs (after the old one went, before
// the new one recovers it) is reported by the new plugin with its real exit
// code.
func TestRecoverTaskThatExitedUnwatched(t *testing.T) {
	e := newEnv(t)
	first := e.plugin()
	cfg := e.taskConfig(&TaskConfig{Command: "/bin/sh", Args: []string{"-c", `while [ ! -e "$NOMAD_TASK_DIR/go" ]; do sleep 0.05; done; exit 5`}}, nil)
	h, _, err := first.StartTask(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.reapOnCleanup(cfg.ID)
	proc := first.store.get(cfg.ID).proc
	taskPID, supPID := proc.TaskPID(), proc.SupervisorPID()
	first.Shutdown()

	if err := os.WriteFile(filepath.Join(cfg.Env["NOMAD_TASK_DIR"], "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the task and its supervisor to exit", func() bool { return !alive(taskPID) && !alive(supPID) })

	second := e.plugin()
	if err := second.RecoverTask(&drivers.TaskHandle{Version: h.Version, Config: cfg, DriverState: h.DriverState}); err != nil {
		t.Fatal(err)
	}
	res := wait(t, second, cfg.ID, 10*time.Second)
	if res.ExitCode != 5 || res.Signal != 0 || res.Err != nil {
		t.Fatalf("exit %+v, want code 5 and no error", res)
	}
	if err := second.DestroyTask(cfg.ID, true); err != nil {
		t.Error(err)
	}
}
