package e2e

// Checkpointed preemption under stress, against a real Nomad: the trace
// replay's own task (replayScript) on every whole GPU of a node, all of
// them preempted together, round after round, at moments from the first
// milliseconds after a start or restore to seconds into the work, with
// interval checkpoints committing meanwhile. Every stop must leave a
// record a replay can read (a commit and a stop, or the driver's word
// that it could not ask), and every replacement must resume from its
// predecessor's last commit: no progress lost beyond the commit-to-stop
// gap. A record that is incomplete is kept with the task's events and the
// client's log lines for its allocation, so its cause can be named.

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/e2e/cluster"
	"github.com/nomad-gpu/nomad-gpu/internal/quantile"
)

// stressPreemptions is how many checkpointed preemptions the stress test
// makes at least: NOMAD_GPU_STRESS_PREEMPTIONS, else 300.
func stressPreemptions(t *testing.T) int {
	if v := os.Getenv("NOMAD_GPU_STRESS_PREEMPTIONS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("NOMAD_GPU_STRESS_PREEMPTIONS=%q: want a positive count", v)
		}
		return n
	}
	return 300
}

// stressVictim is a low-priority batch job running the replay's task for
// an hour of work, checkpointing every second and on every stop.
func stressVictim(id, cli string) string {
	return fmt.Sprintf(`
job %q {
  type     = "batch"
  priority = 30
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
      driver       = "gpu"
      kill_timeout = "15s"
      config {
        command = "/bin/sh"
        args    = ["-c", %q]
        checkpoint {
          commit_timeout = "10s"
          interval       = "1s"
        }
      }
      resources {
        cpu    = 10
        memory = 64
        device "nvidia/gpu" {
          count = 1
        }
      }
    }
  }
}`, id, replayTask(time.Hour, 40, cli))
}

// stressPreemptor takes n whole GPUs at priority 90 for a moment.
func stressPreemptor(id string, n int) string {
	return fmt.Sprintf(`
job %q {
  type     = "batch"
  priority = 90
  group "g" {
    task "t" {
      driver = "gpu"
      config {
        command = "/bin/sleep"
        args    = ["0.5"]
      }
      resources {
        cpu    = 10
        memory = 16
        device "nvidia/gpu" {
          count = %d
        }
      }
    }
  }
}`, id, n)
}

// stressDelays are the waits, cycled, between the victims all running and
// the next preemptor's submission: its placement follows within tens of
// milliseconds, so the first hits tasks in their first moments.
var stressDelays = []time.Duration{0, 50 * time.Millisecond, 300 * time.Millisecond, time.Second, 2500 * time.Millisecond}

func TestCheckpointStress(t *testing.T) {
	cli := cluster.RequireBinary(t, "nomad-gpu")
	nodes := []gpuNode{newGPUNode(t)}
	// The client keeps every allocation until the records are read (by
	// default it collects all but 50 terminal ones).
	c := checkpointCluster(t, nodes, "", "gc_max_allocs = 2000")
	enablePreemption(t, c)
	gpus := wholeGPUs(t, c, "gpu-1")
	want := stressPreemptions(t)

	var victims []string
	records := map[string]*stressRecord{}
	for i := range gpus {
		id := fmt.Sprintf("victim-%d", i)
		c.RunJob(t, stressVictim(id, cli))
		victims = append(victims, id)
		records[id] = &stressRecord{seen: map[string]bool{}}
	}
	start := time.Now()
	rounds := (want + gpus - 1) / gpus
	for r := range rounds {
		waitAllRunning(t, c, victims, 2*time.Minute)
		// The records are read as they are made.
		for _, v := range victims {
			records[v].read(t, c, v)
		}
		time.Sleep(stressDelays[r%len(stressDelays)])
		id := fmt.Sprintf("preemptor-%d", r)
		c.RunJob(t, stressPreemptor(id, gpus))
		waitJobDone(t, c, id, 2*time.Minute)
	}
	waitAllRunning(t, c, victims, 2*time.Minute)
	t.Logf("%d rounds of %d preemptions in %s", rounds, gpus, time.Since(start).Round(time.Second))
	for _, v := range victims {
		c.StopJob(t, v, false)
	}

	var stops, checkpointed, unasked int
	var gaps []float64 // ms
	for _, v := range victims {
		s := records[v]
		s.read(t, c, v)
		stops += s.stops
		checkpointed += s.checkpointed
		unasked += s.unasked
		gaps = append(gaps, s.gaps...)
	}
	t.Logf("%d stops: %d checkpointed, %d stopped before the task handled the signal; commit-to-stop gap median %.0f ms, p95 %.0f ms",
		stops, checkpointed, unasked, quantile.Of(gaps, 0.5), quantile.Of(gaps, 0.95))
	if checkpointed < want {
		t.Errorf("%d checkpointed preemptions, want at least %d", checkpointed, want)
	}
}

// stressRecord is what one victim job's allocations said so far.
type stressRecord struct {
	stops, checkpointed, unasked int
	gaps                         []float64 // commit-to-stop, ms
	// saved is the progress the next run must restore; seen the
	// allocations read.
	saved int
	seen  map[string]bool
}

// read reads the victim job's terminal allocations not read yet, in
// order: each stopped one logged its stop and, unless the driver says it
// could not ask, a commit; each later one restored its predecessor's
// last commit.
func (rec *stressRecord) read(t *testing.T, c *cluster.Cluster, job string) {
	t.Helper()
	stubs, _, err := c.API().Jobs().Allocations(job, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(stubs, func(a, b *api.AllocationListStub) int { return int(a.CreateIndex) - int(b.CreateIndex) })
	for _, a := range stubs {
		if rec.seen[a.ID] || a.DesiredStatus == api.AllocDesiredStatusRun && a.ClientStatus != api.AllocClientStatusComplete && a.ClientStatus != api.AllocClientStatusFailed {
			continue
		}
		info := waitTerminalWithin(t, c, a.ID, time.Minute)
		rec.seen[a.ID] = true
		if st := info.TaskStates["t"]; st == nil || st.StartedAt.IsZero() {
			continue // preempted before its task started: nothing to record
		}
		rec.check(t, c, job, a.ID)
	}
}

// check reads one terminal allocation's record.
func (rec *stressRecord) check(t *testing.T, c *cluster.Cluster, job, allocID string) {
	t.Helper()
	logs := c.AllocLogs(t, allocID, "t", "stdout")
	events := taskEvents(t, c, allocID)
	name := fmt.Sprintf("%s alloc %s", job, allocID[:8])
	restored, ok := logValue(logs, "restored")
	if !ok {
		t.Errorf("%s logged no restore%s", name, stressDiagnosis(c, job, allocID, logs))
		return
	}
	if restored != rec.saved {
		t.Errorf("%s restored %d ms, its predecessor's last commit was %d ms%s", name, restored, rec.saved, stressDiagnosis(c, job, allocID, logs))
	}
	committed, hasCommit := logValue(logs, "committed")
	stopped, hasStop := logValue(logs, "stopped")
	rec.stops++
	switch {
	case strings.Contains(events, "checkpoint not requested"):
		rec.unasked++
		if hasCommit {
			rec.saved = committed
		}
	case !hasCommit || !hasStop:
		t.Errorf("%s: incomplete record (commit %v, stop %v)%s", name, hasCommit, hasStop, stressDiagnosis(c, job, allocID, logs))
	default:
		rec.checkpointed++
		rec.gaps = append(rec.gaps, float64(stopped-committed))
		rec.saved = committed
	}
}

// stressDiagnosis is an incomplete record's evidence, as the trace
// replay keeps it.
func stressDiagnosis(c *cluster.Cluster, job, allocID, logs string) string {
	in := incompleteEvidence(c, job, allocID, "gpu-1", logs)
	return fmt.Sprintf("\ntask log:\n%s\ntask events:\n%s\nagent log:\n%s", in.TaskLog, in.Events, in.AgentLog)
}

// waitAllRunning waits until each job has a running allocation.
func waitAllRunning(t *testing.T, c *cluster.Cluster, jobs []string, timeout time.Duration) {
	t.Helper()
	if got := waitRunningCount(t, c, jobs, len(jobs), timeout); got < len(jobs) {
		t.Fatalf("%d of %d jobs running after %s", got, len(jobs), timeout)
	}
}

// waitJobDone waits until the job's allocation has completed.
func waitJobDone(t *testing.T, c *cluster.Cluster, job string, timeout time.Duration) {
	t.Helper()
	a := c.WaitForAllocs(t, job, 1, timeout)[0]
	if got := waitTerminalWithin(t, c, a.ID, timeout); got.ClientStatus != api.AllocClientStatusComplete {
		t.Fatalf("preemptor %s: %s", job, cluster.AllocSummary(got))
	}
}
