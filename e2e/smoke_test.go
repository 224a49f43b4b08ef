// Package e2e holds end-to-end tests against real Nomad agents; see
// e2e/cluster for the harness.
package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/nomad-gpu/nomad-gpu/e2e/cluster"
)

const smokeJob = `
job "smoke" {
  type = "batch"

  group "g" {
    task "echo" {
      driver = "raw_exec"

      config {
        command = "/bin/sh"
        args    = ["-c", "echo alloc=$NOMAD_ALLOC_ID"]
      }

      resources {
        cpu    = 50
        memory = 32
      }
    }
  }
}
`

// TestSmoke checks the harness itself: a server and two clients come up, a
// raw_exec batch job runs and its stdout comes back through the logs API,
// and a client killed with SIGKILL comes back ready, as the same node, when
// restarted on its data dir.
func TestSmoke(t *testing.T) {
	c := cluster.Start(t, cluster.Options{Clients: 2})

	job := c.RunJob(t, smokeJob)
	allocs := c.WaitForAllocs(t, *job.ID, 1, time.Minute)
	id := allocs[0].ID
	c.WaitForAllocStatus(t, id, "complete", time.Minute)
	out := c.WaitForAllocLogs(t, id, "echo", "stdout", "alloc="+id, 30*time.Second)
	if got := strings.TrimSpace(out); got != "alloc="+id {
		t.Errorf("stdout = %q, want %q", got, "alloc="+id)
	}

	t.Logf("alloc %s on %s printed %q", id, allocs[0].NodeName, strings.TrimSpace(out))

	client := c.Client(t, "client-2")
	before := c.WaitForNode(t, "client-2", nil, time.Minute)
	client.Kill(t)
	c.WaitForNodeStatus(t, "client-2", cluster.NodeDown, time.Minute)
	t.Logf("client-2 killed and marked down")
	client.Restart(t)
	after := c.WaitForNode(t, "client-2", nil, 90*time.Second)
	t.Logf("client-2 restarted and ready again as node %s", after.ID)
	if after.ID != before.ID {
		t.Errorf("node ID after restart = %s, want %s (state not kept in the data dir?)", after.ID, before.ID)
	}
}
