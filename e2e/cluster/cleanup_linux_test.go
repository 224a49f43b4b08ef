//go:build linux

package cluster

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

const sleepJob = `
job "sleeper" {
  group "g" {
    task "sleep" {
      driver = "raw_exec"
      config {
        command = "/bin/sleep"
        args    = ["300"]
      }
      resources {
        cpu    = 50
        memory = 32
      }
    }
  }
}
`

// TestCleanupLeavesNothing checks the harness's own promise: after a test
// whose client crashed with a task running, no agent, executor, task or
// plugin process, no mount and no directory is left.
func TestCleanupLeavesNothing(t *testing.T) {
	NomadBinary(t) // skips, with its one line, where there is no nomad
	var (
		dir    string
		marker string
		pids   []int
		mounts int
	)
	t.Run("cluster", func(t *testing.T) {
		c := Start(t, Options{Clients: 1})
		dir, marker = c.dir, c.marker
		job := c.RunJob(t, sleepJob)
		allocs := c.WaitForAllocs(t, *job.ID, 1, time.Minute)
		c.WaitForAllocStatus(t, allocs[0].ID, "running", time.Minute)
		for _, p := range listProcs() {
			if p.marker == marker {
				pids = append(pids, p.pid)
			}
		}
		mounts = len(mountsUnder(dir))
		// Crash the client: its executor and task are orphaned.
		c.Client(t, "client-1").Kill(t)
	})
	if dir == "" {
		t.Fatal("cluster did not start")
	}
	t.Logf("cluster had %d processes and %d mounts", len(pids), mounts)
	if len(pids) < 4 { // server, client, executor, logmon, task...
		t.Errorf("only %d marked processes seen; is the marker inherited?", len(pids))
	}
	for _, pid := range pids {
		if !isZombie(pid) {
			t.Errorf("process %d still alive after cleanup", pid)
		}
	}
	if m := mountsUnder(dir); len(m) > 0 {
		t.Errorf("mounts left: %v", m)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("cluster dir %s still exists (err=%v)", dir, err)
	}
}

// TestTaskLeaks checks that teardown's leak report names what a dead task
// left: a process carrying its Nomad task environment and a gpu driver
// cgroup, and nothing once they are gone.
func TestTaskLeaks(t *testing.T) {
	ref := TaskRef{AllocID: "e2e-leak-" + strconv.Itoa(os.Getpid()), Task: "t"}
	if got := taskLeaks([]TaskRef{ref}); len(got) != 0 {
		t.Fatalf("before: %v", got)
	}
	cmd := exec.Command("/bin/sleep", "30")
	cmd.Env = append(os.Environ(), "NOMAD_ALLOC_ID="+ref.AllocID, "NOMAD_TASK_NAME="+ref.Task)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	var cg string
	if os.Geteuid() == 0 {
		if ctrls, _ := filepath.Glob("/sys/fs/cgroup/*/cgroup.procs"); len(ctrls) > 0 || fileExists("/sys/fs/cgroup/cgroup.procs") {
			parent := "/sys/fs/cgroup/nomad-gpu-leaktest-" + strconv.Itoa(os.Getpid())
			if len(ctrls) > 0 {
				parent = filepath.Join(filepath.Dir(ctrls[0]), filepath.Base(parent))
			}
			cg = filepath.Join(parent, ref.AllocID+"."+ref.Task)
			if err := os.MkdirAll(cg, 0o755); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = os.Remove(cg); _ = os.Remove(parent) })
		}
	}
	got := strings.Join(taskLeaks([]TaskRef{ref, {AllocID: "other", Task: "t"}}), "\n")
	if want := "task " + ref.String() + " is dead in Nomad but its processes [" + strconv.Itoa(cmd.Process.Pid) + "] still run"; !strings.Contains(got, want) {
		t.Errorf("leaks %q lack %q", got, want)
	}
	if cg != "" && !strings.Contains(got, "the driver left its cgroup "+cg) {
		t.Errorf("leaks %q do not name the cgroup %s", got, cg)
	}
	if strings.Contains(got, "other/t") {
		t.Errorf("leaks name a task that left nothing: %q", got)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if cg != "" {
		if err := os.Remove(cg); err != nil {
			t.Fatal(err)
		}
	}
	if got := taskLeaks([]TaskRef{ref}); len(got) != 0 {
		t.Errorf("after: %v", got)
	}
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }
