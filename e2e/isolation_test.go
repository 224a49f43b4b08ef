package e2e

// Tasks of the same user on one node, under a real Nomad client: task B
// finds nothing of task A — not its environment through /proc, not its
// processes, not its alloc dir or secrets, not the MPS daemon A uses — and
// `nomad alloc exec` into B sees only B. The node's fingerprint says what
// isolation is in force.

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

const isolationSecret = "e2e-isolation-secret-of-a"

// isolationJob is a batch job of the default user (nobody) running script,
// with secret in its environment.
func isolationJob(id, device, secret, script string) string {
	dev := ""
	if device != "" {
		dev = fmt.Sprintf(`
        device %q {
          count = 1
        }`, device)
	}
	return fmt.Sprintf(`
job %q {
  type = "batch"
  group "g" {
    restart {
      attempts = 0
      mode     = "fail"
    }
    reschedule {
      attempts  = 0
      unlimited = false
    }
    task "t" {
      driver = "gpu"
      env {
        SECRET = %q
      }
      config {
        command = "/bin/sh"
        args    = ["-c", %q]
      }
      resources {
        cpu    = 50
        memory = 32%s
      }
    }
  }
}`, id, secret, script, dev)
}

func TestDriverIsolation(t *testing.T) {
	c, node := startGPUCluster(t)
	n := c.WaitForNode(t, "client-1", func(n *api.Node) bool { return n.Drivers["gpu"] != nil && n.Drivers["gpu"].Healthy }, time.Minute)
	for key, want := range map[string]string{
		"driver.gpu.pid_namespace": "true", "driver.gpu.landlock": "true", "driver.gpu.mps_pipes_masked": "true",
		"driver.gpu.allow_host_pid": "false", "driver.gpu.denied_host_uids": "0",
	} {
		if got := n.Drivers["gpu"].Attributes[key]; got != want {
			t.Errorf("fingerprint %s = %q, want %q", key, got, want)
		}
	}

	// A holds an MPS share, so its GPU's MPS daemon runs; it writes its
	// secret into its secrets dir and waits.
	a := c.RunJob(t, isolationJob("iso-a", "nvidia/mps", isolationSecret,
		`echo "$SECRET" > "$NOMAD_SECRETS_DIR/token"; echo READY; exec sleep 3600`))
	allocA := c.WaitForAllocs(t, *a.ID, 1, time.Minute)[0]
	c.WaitForAllocStatus(t, allocA.ID, "running", time.Minute)
	c.WaitForAllocLogs(t, allocA.ID, "t", "stdout", "READY", 30*time.Second)
	pidA := allocTaskPID(t, c, node, allocA.ID)
	allocDirA := filepath.Join(c.Client(t, "client-1").DataDir(), "alloc", allocA.ID)
	pipeRoot := filepath.Join(node.Dir, "mps")
	controls, _ := filepath.Glob(filepath.Join(pipeRoot, "GPU-*", "control"))
	if len(controls) != 1 {
		t.Fatalf("A's MPS daemon pipes: %v", controls)
	}

	probe := fmt.Sprintf(`
for f in /proc/[0-9]*/environ; do grep -q %[1]s "$f" 2>/dev/null && echo "environ:found:$f"; done
echo environ:done
kill -0 %[2]d 2>/dev/null && echo signal:reached || echo signal:refused
kill -TERM %[2]d 2>/dev/null && echo term:sent || echo term:refused
ls %[3]q >/dev/null 2>&1 && echo allocdir:listed || echo allocdir:refused
cat %[3]q/t/secrets/token 2>/dev/null || echo secrets:refused
echo own > "$NOMAD_SECRETS_DIR/own" && cat "$NOMAD_SECRETS_DIR/own"
ls %[4]q 2>/dev/null | wc -l | sed 's/ *//; s/^/mpsroot:/'
(echo get_server_list > %[5]q) 2>/dev/null && echo mps:opened || echo mps:refused
for p in /proc/[0-9]*; do echo "proc:$(cat $p/comm)"; done
echo PROBED
exec sleep 3600`, isolationSecret, pidA, allocDirA, pipeRoot, controls[0])
	b := c.RunJob(t, isolationJob("iso-b", "", "", probe))
	allocB := c.WaitForAllocs(t, *b.ID, 1, time.Minute)[0]
	c.WaitForAllocStatus(t, allocB.ID, "running", time.Minute)
	c.WaitForAllocLogs(t, allocB.ID, "t", "stdout", "PROBED", 30*time.Second)
	out := nomadCLI(t, c, "alloc", "logs", allocB.ID, "t")

	if strings.Contains(out, "environ:found") {
		t.Errorf("task B found task A's secret in /proc:\n%s", out)
	}
	for _, want := range []string{"environ:done", "signal:refused", "term:refused", "allocdir:refused", "secrets:refused", "\nown\n", "mpsroot:0", "mps:refused"} {
		if !strings.Contains(out, want) {
			t.Errorf("task B's probe lacks %q:\n%s", want, out)
		}
	}
	for _, l := range strings.Split(out, "\n") {
		if comm, ok := strings.CutPrefix(l, "proc:"); ok && !ownComm(comm) {
			t.Errorf("ps in task B shows a process that is not B's: %q", comm)
		}
	}

	// alloc exec joins B's namespaces: ps there shows B's processes only.
	ps := nomadCLI(t, c, "alloc", "exec", "-task", "t", allocB.ID, "/bin/sh", "-c", `for p in /proc/[0-9]*; do cat $p/comm; done`)
	if !strings.Contains(ps, "sleep") {
		t.Errorf("alloc exec does not see B's own task: %q", ps)
	}
	for _, comm := range strings.Fields(ps) {
		if !ownComm(comm) {
			t.Errorf("ps through alloc exec shows a process that is not B's: %q", comm)
		}
	}
	if a, _, err := c.API().Allocations().Info(allocA.ID, nil); err != nil || a.ClientStatus != "running" {
		t.Errorf("task A after B's probe: %v %v", a.ClientStatus, err)
	}
	for id, alloc := range map[string]string{"iso-a": allocA.ID, "iso-b": allocB.ID} {
		c.StopJob(t, id, false)
		waitAllocTerminal(t, c, alloc, time.Minute)
	}
}

// ownComm: the processes a task's namespace holds — its supervisor (init),
// the probe's shell and the commands it runs.
func ownComm(comm string) bool {
	switch comm {
	case "sh", "cat", "sleep", "ls", "wc", "sed", "grep", "nomad-driver-gp":
		return true
	}
	return false
}
