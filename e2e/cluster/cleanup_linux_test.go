//go:build linux

package cluster

import (
	"os"
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
