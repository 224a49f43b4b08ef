package driver

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nomad-gpu/nomad-gpu/driver/cgroups"
	"github.com/nomad-gpu/nomad-gpu/internal/testenv"
	"github.com/nomad-gpu/nomad-gpu/wire/drivers"
)

// leftovers lists what a task may have left behind: live processes carrying
// its marker, its state dir, its cgroup, its MPS references and its MIG
// grants, as the next plugin process would find them.
func (e *env) leftovers(d *Driver, cfg *drivers.TaskConfig) []string {
	var out []string
	if procs := markedProcesses(cfg.Env["MARKER"]); len(procs) > 0 {
		out = append(out, fmt.Sprintf("processes %v", procs))
	}
	if _, err := os.Stat(d.taskDir(cfg.ID)); err == nil {
		out = append(out, "state dir "+d.taskDir(cfg.ID))
	}
	if _, ok := cgroups.Find(e.cfg.CgroupRoot, cgroupName(cfg)); ok {
		out = append(out, "cgroup "+cgroupName(cfg))
	}
	rt := d.rt.Load()
	for _, id := range rt.mps.Tasks() {
		if id == cfg.ID {
			out = append(out, "MPS reference")
		}
	}
	if _, ok := rt.caps.Holders()[cfg.ID]; ok {
		out = append(out, "MIG grant")
	}
	return out
}

// markedProcesses are live processes whose environment carries marker.
func markedProcesses(marker string) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		var pid int
		if _, err := fmt.Sscan(e.Name(), &pid); err != nil || pid == os.Getpid() {
			continue
		}
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if strings.Contains(string(b), marker) && alive(pid) {
			out = append(out, pid)
		}
	}
	return out
}

// faultyTask is a task that takes something at every step: cgroups, an MPS
// share, a MIG capability node, a supervisor.
func (e *env) faultyTask(capNode string) *drivers.TaskConfig {
	_, share := e.mpsShare(4)
	cfg := e.taskConfig(&TaskConfig{Command: "/bin/sleep", Args: []string{"300"}}, share)
	cfg.Devices = []drivers.DeviceConfig{{HostPath: capNode}}
	return cfg
}

func (e *env) capNode() string {
	e.t.Helper()
	dir := filepath.Join(e.dir, "caps")
	os.MkdirAll(dir, 0o755)
	old := capsDir
	capsDir = dir
	e.t.Cleanup(func() { capsDir = old })
	p := filepath.Join(dir, "nvidia-cap30")
	if err := unix.Mknod(p, unix.S_IFCHR|0o400, int(unix.Mkdev(1, 3))); err != nil {
		testenv.Skipf(e.t, testenv.Mknod, "cannot make a device node here: %v", err)
	}
	return p
}

// A failure injected at any step of StartTask leaves nothing behind; so
// does the plugin dying at that step, once the next plugin process starts;
// and a running task of another alloc keeps running through both, and is
// recovered.
func TestStartTaskFaultsLeaveNothing(t *testing.T) {
	e := newEnv(t)
	capNode := e.capNode()
	bystander := e.taskConfig(&TaskConfig{Command: "/bin/sleep", Args: []string{"300"}}, nil)
	first := e.plugin()
	handle, _, err := first.StartTask(bystander)
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range startSteps {
		t.Run("error at "+step, func(t *testing.T) {
			d := e.plugin()
			d.faults = func(s string) error {
				if s == step {
					return errors.New("injected")
				}
				return nil
			}
			cfg := e.faultyTask(capNode)
			if _, _, err := d.StartTask(cfg); err == nil || !strings.Contains(err.Error(), "injected") {
				t.Fatalf("StartTask: %v", err)
			}
			if left := e.leftovers(d, cfg); len(left) > 0 {
				t.Errorf("left behind: %v", left)
			}
		})
		t.Run("SIGKILL at "+step, func(t *testing.T) {
			cfg := e.faultyTask(capNode)
			e.startInDyingPlugin(t, cfg, step)
			next := e.plugin()
			if err := next.RecoverTask(&drivers.TaskHandle{Version: 1, Config: bystander, DriverState: handle.DriverState}); err != nil {
				t.Fatalf("the other alloc's task was not recovered: %v", err)
			}
			if left := e.leftovers(next, cfg); len(left) > 0 {
				t.Errorf("left behind after the next plugin start: %v", left)
			}
			if tk := next.store.get(bystander.ID); tk == nil || !tk.proc.Running() {
				t.Fatal("the other alloc's task is not running")
			}
		})
	}
	var st syscall.Stat_t
	syscall.Stat(capNode, &st)
	if st.Uid != 0 || st.Mode&0o777 != 0o400 {
		t.Errorf("MIG node after all faults: uid %d mode %o, want 0 400", st.Uid, st.Mode&0o777)
	}
	last := e.plugin()
	last.RecoverTask(&drivers.TaskHandle{Version: 1, Config: bystander, DriverState: handle.DriverState})
	if err := last.DestroyTask(bystander.ID, true); err != nil {
		t.Fatal(err)
	}
	if left := e.leftovers(last, bystander); len(left) > 0 {
		t.Errorf("bystander left behind: %v", left)
	}
}

// A handle whose driver state is corrupt, truncated or names paths that are
// not the task's fails RecoverTask, and DestroyTask then leaves no process,
// cgroup, state dir, MPS reference or MIG grant, and touches nothing else.
func TestCorruptStateThenDestroy(t *testing.T) {
	e := newEnv(t)
	capNode := e.capNode()
	outside := filepath.Join(e.dir, "not-ours")
	os.MkdirAll(outside, 0o755)
	os.WriteFile(filepath.Join(outside, "keep"), []byte("x"), 0o644)
	cases := []struct {
		name  string
		state func(good []byte) []byte
	}{
		{"truncated", func(g []byte) []byte { return g[:len(g)/2] }},
		{"garbage", func([]byte) []byte { return []byte{0xff, 0x00, 0x13} }},
		{"empty", func([]byte) []byte { return nil }},
		{"unknown version", func([]byte) []byte { return []byte(`{"version": 99}`) }},
		{"version 1 pointing elsewhere", func([]byte) []byte {
			return []byte(fmt.Sprintf(`{"version": 1, "state_dir": %q, "cgroup_paths": ["/sys/fs/cgroup/memory"], "mig_caps": [{"path": "/etc/passwd", "uid": 65534}]}`, outside))
		}},
		{"version 1 with foreign cgroup", func([]byte) []byte {
			return []byte(`{"version": 1, "state_dir": "/x", "cgroup_paths": ["/sys/fs/cgroup/memory"]}`)
		}},
		{"huge", func([]byte) []byte { return make([]byte, maxStateBytes+1) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			first := e.plugin()
			cfg := e.faultyTask(capNode)
			h, _, err := first.StartTask(cfg)
			if err != nil {
				t.Fatal(err)
			}
			first.Shutdown()
			next := e.plugin()
			bad := &drivers.TaskHandle{Version: 1, Config: cfg, DriverState: tc.state(h.DriverState)}
			if err := next.RecoverTask(bad); err == nil {
				t.Fatal("RecoverTask accepted a corrupt state")
			}
			if err := next.DestroyTask(cfg.ID, true); err != nil {
				t.Fatal(err)
			}
			if left := e.leftovers(next, cfg); len(left) > 0 {
				t.Errorf("left behind: %v", left)
			}
			if _, err := os.Stat(filepath.Join(outside, "keep")); err != nil {
				t.Errorf("destroy touched a path the corrupt state named: %v", err)
			}
			passwd, _ := os.Stat("/etc/passwd")
			if st := passwd.Sys().(*syscall.Stat_t); st.Uid != 0 {
				t.Errorf("/etc/passwd now owned by %d", st.Uid)
			}
		})
	}
}

// A destroyed task that a plugin process never knew (Nomad destroys it
// after the plugin restarted, without recovering it first) is cleaned up
// from its ID alone.
func TestDestroyUnknownTask(t *testing.T) {
	e := newEnv(t)
	capNode := e.capNode()
	first := e.plugin()
	cfg := e.faultyTask(capNode)
	if _, _, err := first.StartTask(cfg); err != nil {
		t.Fatal(err)
	}
	first.Shutdown()
	next := e.plugin()
	if err := next.DestroyTask(cfg.ID, true); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for left := e.leftovers(next, cfg); len(left) > 0; left = e.leftovers(next, cfg) {
		if time.Now().After(deadline) {
			t.Fatalf("left behind: %v", left)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// dyingStart is what the test hands a plugin process that is to die.
type dyingStart struct {
	Config   Config
	Task     drivers.TaskConfig
	Driver   TaskConfig
	CapsDir  string
	Step     string
	Executor string
}

// startInDyingPlugin starts cfg in a plugin process of its own that
// SIGKILLs itself when StartTask reaches step: nothing of it gets to undo
// anything.
func (e *env) startInDyingPlugin(t *testing.T, cfg *drivers.TaskConfig, step string) {
	t.Helper()
	exe, _ := os.Executable()
	task := *cfg
	task.DriverConfig = nil
	b, err := json.Marshal(dyingStart{Config: *e.cfg, Task: task, Driver: *cfg.DriverConfig.(*TaskConfig), CapsDir: capsDir, Step: step, Executor: exe})
	if err != nil {
		t.Fatal(err)
	}
	arg := filepath.Join(t.TempDir(), "start.json")
	os.WriteFile(arg, b, 0o600)
	out, err := exec.Command(exe, "die-starting", arg).CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("the plugin process was to die of SIGKILL at %s: %v\n%s", step, err, out)
	}
}

// dieStarting is the "die-starting" mode of the test binary: a plugin
// process that starts one task and is killed at the named step.
func dieStarting(arg string) int {
	b, err := os.ReadFile(arg)
	var s dyingStart
	if err == nil {
		err = json.Unmarshal(b, &s)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	capsDir = s.CapsDir
	d := New(nil)
	d.SetExecutable(s.Executor)
	if err := d.SetConfig(&s.Config, nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	d.faults = func(step string) error {
		if step == s.Step {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
		return nil
	}
	s.Task.DriverConfig = &s.Driver
	_, _, err = d.StartTask(&s.Task)
	fmt.Fprintln(os.Stderr, "StartTask returned:", err)
	return 3
}
