package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/e2e/cluster"
)

// gangJobSpec is a gang of two members of gpus whole GPUs each, submitted
// at count 0 as the gang conventions ask (docs/design/gangs.md).
func gangJobSpec(id string, gpus int) string {
	return fmt.Sprintf(`
job %q {
  type = "batch"
  meta {
    nomad_gpu_gang = "true"
  }
  group "worker" {
    count = 0
    meta {
      nomad_gpu_gang_members = "2"
    }
    restart {
      attempts = 0
      mode     = "fail"
    }
    reschedule {
      attempts  = 0
      unlimited = false
    }
    network {
      port "rendezvous" {}
    }
    task "t" {
      driver       = "gpu"
      kill_timeout = "3s"
      config {
        command = "/bin/sh"
        args    = ["-c", "echo READY; while true; do sleep 0.2; done"]
      }
      resources {
        cpu    = 50
        memory = 32
        device "nvidia/gpu" {
          count = %d
        }
      }
    }
  }
}`, id, gpus)
}

// liveAllocs are the job's allocations that hold or will hold devices.
func liveAllocs(t *testing.T, c interface{ API() *api.Client }, id string) []*api.AllocationListStub {
	t.Helper()
	all, _, err := c.API().Jobs().Allocations(id, false, nil)
	if err != nil {
		t.Fatalf("allocations of %s: %v", id, err)
	}
	var out []*api.AllocationListStub
	for _, a := range all {
		if a.ClientStatus == api.AllocClientStatusPending || a.ClientStatus == api.AllocClientStatusRunning {
			out = append(out, a)
		}
	}
	return out
}

// Gangs against real Nomad, on a node of 4 whole GPUs: a gang of two
// 1-GPU members is admitted by the controller and both run; a second gang
// of two 2-GPU members does not fit beside it and is never placed in part
// while it waits (stock Nomad would place one member on the 2 free GPUs);
// once the first is stopped, the second is admitted and both its members
// run.
func TestGangAdmission(t *testing.T) {
	c, _ := startGPUCluster(t)
	ctl := c.StartController(t, "controller", "-tick", "200ms", "-preemption-cooldown", "0", "-layouts=false", "-moves=false")

	c.RunJob(t, gangJobSpec("gang-a", 1))
	for _, a := range c.WaitForAllocs(t, "gang-a", 2, time.Minute) {
		c.WaitForAllocStatus(t, a.ID, "running", time.Minute)
	}

	c.RunJob(t, gangJobSpec("gang-b", 2))
	deadline := time.Now().Add(8 * time.Second)
	for time.Now().Before(deadline) {
		if n := len(liveAllocs(t, c, "gang-b")); n != 0 {
			t.Fatalf("gang-b has %d allocations while only one of its members fits: placed in part", n)
		}
		time.Sleep(250 * time.Millisecond)
	}
	if log := ctl.Log(); !strings.Contains(log, "gang-waiting") || !strings.Contains(log, "gang-b") {
		t.Errorf("no gang-waiting decision for gang-b in the controller's log")
	}

	if _, _, err := c.API().Jobs().Deregister("gang-a", false, nil); err != nil {
		t.Fatalf("stopping gang-a: %v", err)
	}
	for _, a := range c.WaitForAllocs(t, "gang-b", 2, time.Minute) {
		c.WaitForAllocStatus(t, a.ID, "running", time.Minute)
	}
	if log := ctl.Log(); strings.Count(log, "gang-admitted") < 2 {
		t.Errorf("the controller's log has %d gang-admitted decisions, want 2 (gang-a, gang-b)", strings.Count(log, "gang-admitted"))
	}
}

// A waiting gang outlives Nomad's garbage collection of dead batch jobs:
// on servers that collect them after 10 s, the same job at count 0
// without the gang meta is collected, while the controller's fresh
// evaluations (-gang-keep) keep the gang (it cannot fit: there is no
// client).
func TestGangKeptWhileWaiting(t *testing.T) {
	c := cluster.Start(t, cluster.Options{Clients: 0, ServerHCL: "job_gc_threshold = \"10s\"\njob_gc_interval = \"2s\"\neval_gc_threshold = \"10s\"\nbatch_eval_gc_threshold = \"10s\""})
	c.StartController(t, "controller", "-tick", "200ms", "-preemption-cooldown", "0", "-layouts=false", "-moves=false", "-gang-keep", "3s")
	c.RunJob(t, gangJobSpec("gang", 1))
	c.RunJob(t, strings.Replace(gangJobSpec("plain", 1), `nomad_gpu_gang = "true"`, `purpose = "a batch job at count 0, no gang"`, 1))
	exists := func(id string) bool {
		_, _, err := c.API().Jobs().Info(id, nil)
		return err == nil
	}
	deadline := time.Now().Add(time.Minute)
	for exists("plain") {
		if time.Now().After(deadline) {
			t.Fatalf("the plain count-0 batch job was not garbage-collected in a minute: the servers' GC settings did not take")
		}
		time.Sleep(time.Second)
	}
	for range 15 { // 15 s more: past another threshold
		if !exists("gang") {
			t.Fatalf("the waiting gang was garbage-collected")
		}
		time.Sleep(time.Second)
	}
}
