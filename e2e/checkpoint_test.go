package e2e

// Checkpointed preemption against a real Nomad: a low-priority batch job
// holding every whole GPU is preempted by one 50 points higher, commits its
// count on the way out, and its replacement resumes from it; the preemption
// cooldown then keeps a second job of that priority from preempting it
// again, until the cooldown ends. And a drain: two nodes share the
// checkpoint root, and a job drained off one resumes on the other.

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/e2e/cluster"
	"github.com/nomad-gpu/nomad-gpu/e2e/harness"
)

// counterScript counts (a stand-in for training steps), resumes from its
// newest checkpoint, and on the checkpoint signal writes its count and
// commits. Its log says what it restored ("restored=N"), what it had when
// asked for a checkpoint ("signal=N"), what it committed and where it was
// stopped. The driver stops it as soon as it sees the marker, which may be
// before the line after it: the stop's trap logs the commit marked (m).
const counterScript = `n=0
if [ -n "$NOMAD_GPU_RESTORE_DIR" ]; then n=$(cat "$NOMAD_GPU_RESTORE_DIR/count"); fi
echo "restored=$n resumes=$NOMAD_GPU_RESUME_COUNT"
ck() { echo "signal=$n"; echo $n > "$NOMAD_GPU_CHECKPOINT_DIR/count"; m=$n; : > "$NOMAD_GPU_CHECKPOINT_COMMIT"; echo "committed=$m"; m=; }
trap ck USR1
trap '[ -z "$m" ] || echo "committed=$m"; echo "stopped=$n"; exit 0' INT TERM
while :; do n=$((n+1)); if [ $((n % 10)) -eq 0 ]; then echo "progress=$n"; fi; sleep 0.05; done`

// counterJob is a job of the given type and priority whose task runs
// counterScript on count whole GPUs, checkpointing when checkpoint is set.
func counterJob(id, jobType string, priority, gpus int, checkpoint bool) string {
	ck := ""
	if checkpoint {
		ck = `
        checkpoint {
          commit_timeout = "15s"
        }`
	}
	extra := ""
	if jobType == "service" {
		extra = `
    migrate {
      health_check     = "task_states"
      min_healthy_time = "1s"
    }`
	}
	return fmt.Sprintf(`
job %q {
  type     = %q
  priority = %d
  group "g" {%s
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
      kill_timeout = "20s"
      config {
        command = "/bin/sh"
        args    = ["-c", %q]%s
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
}`, id, jobType, priority, extra, counterScript, ck, gpus)
}

// holderJob is a batch job that takes one whole GPU for hold, then exits.
func holderJob(id string, priority int, hold time.Duration) string {
	return fmt.Sprintf(`
job %q {
  type     = "batch"
  priority = %d
  group "g" {
    task "t" {
      driver = "gpu"
      config {
        command = "/bin/sh"
        args    = ["-c", "echo READY; sleep %d"]
      }
      resources {
        cpu    = 50
        memory = 32
        device "nvidia/gpu" {
          count = 1
        }
      }
    }
  }
}`, id, priority, int(hold.Seconds()))
}

// checkpointCluster starts a server and one client per node, each client
// named gpu-<i> and running both plugins; the driver reaches the Nomad API
// through the server, whose address the client config needs.
// clientHCL, when given, goes into each client's client block.
func checkpointCluster(t testing.TB, nodes []harness.GPUNode, driverHCL string, clientHCL ...string) *cluster.Cluster {
	t.Helper()
	cluster.RequirePlugin(t, "nomad-device-gpu")
	cluster.RequirePlugin(t, "nomad-driver-gpu")
	c := cluster.Start(t, cluster.Options{Clients: 0})
	var opts []cluster.ClientOptions
	for i := range nodes {
		nodes[i].DriverHCL = fmt.Sprintf("nomad {\naddress = %q\n}\n%s", c.Server().HTTPAddr(), driverHCL)
		opts = append(opts, cluster.ClientOptions{Name: fmt.Sprintf("gpu-%d", i+1), PluginDir: cluster.PluginDir(t), ExtraHCL: nodes[i].HCL(t),
			ClientHCL: strings.Join(clientHCL, "\n")})
	}
	c.StartClients(t, opts...)
	for i := range nodes {
		c.WaitForNode(t, fmt.Sprintf("gpu-%d", i+1), func(n *api.Node) bool {
			d := n.Drivers["gpu"]
			return d != nil && d.Healthy && len(deviceGroups(n)) == 5
		}, 2*time.Minute)
	}
	return c
}

// wholeGPUs is how many whole GPUs the node offers.
func wholeGPUs(t testing.TB, c *cluster.Cluster, node string) int {
	t.Helper()
	n := c.WaitForNode(t, node, func(*api.Node) bool { return true }, time.Minute)
	for _, d := range n.NodeResources.Devices {
		if d.Type == "gpu" {
			return len(d.Instances)
		}
	}
	t.Fatalf("node %s has no whole GPUs: %s", node, cluster.NodeSummary(n))
	return 0
}

var logCount = regexp.MustCompile(`(?m)^(restored|signal|committed|stopped|progress)=(\d+)`)

// counts is the last value of each of counterScript's log keys.
func counts(log string) map[string]int {
	out := map[string]int{}
	for _, m := range logCount.FindAllStringSubmatch(log, -1) {
		out[m[1]], _ = strconv.Atoi(m[2])
	}
	return out
}

// waitProgress waits until the allocation's task has counted to at least n.
func waitProgress(t testing.TB, c *cluster.Cluster, allocID string, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		if counts(c.AllocLogs(t, allocID, "t", "stdout"))["progress"] >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("alloc %s did not count to %d: %s", allocID, n, c.AllocLogs(t, allocID, "t", "stdout"))
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// nextAlloc waits for an allocation of the job other than those seen, and
// returns it once running.
func nextAlloc(t testing.TB, c *cluster.Cluster, jobID string, seen int, timeout time.Duration) *api.Allocation {
	t.Helper()
	stubs := c.WaitForAllocs(t, jobID, seen+1, timeout)
	return c.WaitForAllocStatus(t, stubs[seen].ID, "running", timeout)
}

// checkpointOutcome says whether one of the driver's events of task t
// gave the checkpoint this outcome (contract.EventDetailCheckpoint).
func checkpointOutcome(a *api.Allocation, outcome string) bool {
	if st := a.TaskStates["t"]; st != nil {
		for _, e := range st.Events {
			if e.Details[contract.EventDetailCheckpoint] == outcome {
				return true
			}
		}
	}
	return false
}

// taskEvents are the messages of the driver's task events of the alloc's
// task t.
func taskEvents(t testing.TB, c *cluster.Cluster, allocID string) string {
	t.Helper()
	return taskEventsOf(t, c, allocID, "t")
}

// taskEventsOf are the messages of the task events of the alloc's task.
func taskEventsOf(t testing.TB, c *cluster.Cluster, allocID, task string) string {
	t.Helper()
	a, _, err := c.API().Allocations().Info(allocID, nil)
	if err != nil {
		t.Fatal(err)
	}
	var msgs []string
	if st := a.TaskStates[task]; st != nil {
		for _, e := range st.Events {
			if e.DisplayMessage != "" {
				msgs = append(msgs, e.DisplayMessage)
			}
		}
	}
	return strings.Join(msgs, "\n")
}

// waitTerminal waits until the client is done with the allocation: its
// task has exited, so its log and events are complete.
func waitTerminal(t testing.TB, c *cluster.Cluster, allocID string) *api.Allocation {
	t.Helper()
	return waitTerminalWithin(t, c, allocID, time.Minute)
}

func jobPriority(t testing.TB, c *cluster.Cluster, id string) int {
	t.Helper()
	j, _, err := c.API().Jobs().Info(id, nil)
	if err != nil {
		t.Fatal(err)
	}
	return *j.Priority
}

// A preempted checkpointing task commits what it has when asked, and its
// replacement resumes from there, every time it is preempted. (What
// protects it from being preempted again at once is the controller's:
// TestPreemptionProtection.)
func TestCheckpointedPreemption(t *testing.T) {
	nodes := []harness.GPUNode{harness.NewGPUNode(t)}
	c := checkpointCluster(t, nodes, "")
	c.EnablePreemption(t)
	gpus := wholeGPUs(t, c, "gpu-1")

	const low, high = 30, 80
	c.RunJob(t, counterJob("low", "batch", low, gpus, true))
	first := nextAlloc(t, c, "low", 0, 2*time.Minute)
	waitProgress(t, c, first.ID, 30)

	// The preemptor needs one GPU, and the low job holds them all.
	c.RunJob(t, holderJob("high-1", high, 8*time.Second))
	c.WaitForAllocStatus(t, c.WaitForAllocs(t, "high-1", 1, time.Minute)[0].ID, "running", 2*time.Minute)
	preempted := waitTerminal(t, c, first.ID)
	if preempted.PreemptedByAllocation == "" {
		t.Fatalf("the low job's alloc was not preempted: %s", cluster.AllocSummary(preempted))
	}
	before := counts(c.AllocLogs(t, first.ID, "t", "stdout"))
	if before["committed"] == 0 || before["committed"] != before["signal"] {
		t.Fatalf("the preempted task did not commit what it had when asked: %v", before)
	}
	events := taskEvents(t, c, first.ID)
	if want := "(preempted by alloc " + preempted.PreemptedByAllocation[:8] + ")"; !strings.Contains(events, "checkpoint committed: generation 1") || !strings.Contains(events, want) {
		t.Errorf("task events of the preempted alloc:\n%s\nwant generation 1 committed %s", events, want)
	}
	if p := jobPriority(t, c, "low"); p != low {
		t.Errorf("the driver changed the preempted job's priority to %d; it writes nothing", p)
	}

	// The replacement runs once high-1 has exited, and goes on from there.
	second := nextAlloc(t, c, "low", 1, 2*time.Minute)
	log := c.WaitForAllocLogs(t, second.ID, "t", "stdout", "restored=", time.Minute)
	if got := counts(log)["restored"]; got != before["committed"] {
		t.Fatalf("the replacement restored %d, the preempted task committed %d:\n%s", got, before["committed"], log)
	}
	if !strings.Contains(log, "resumes=1") {
		t.Errorf("the replacement's resume count: %s", log)
	}
	if !strings.Contains(taskEvents(t, c, second.ID), "restoring checkpoint generation 1") {
		t.Errorf("no restore event: %s", taskEvents(t, c, second.ID))
	}

	// Preempted again, it resumes from its newer checkpoint.
	waitProgress(t, c, second.ID, before["committed"]+20)
	c.RunJob(t, holderJob("high-2", high, 5*time.Second))
	c.WaitForAllocStatus(t, c.WaitForAllocs(t, "high-2", 1, time.Minute)[0].ID, "running", 2*time.Minute)
	waitTerminal(t, c, second.ID)
	again := counts(c.AllocLogs(t, second.ID, "t", "stdout"))
	third := nextAlloc(t, c, "low", 2, 2*time.Minute)
	log = c.WaitForAllocLogs(t, third.ID, "t", "stdout", "restored=", time.Minute)
	if got := counts(log)["restored"]; got != again["committed"] || got <= before["committed"] {
		t.Fatalf("after the second preemption the replacement restored %d; committed %d (first %d)", got, again["committed"], before["committed"])
	}
	c.StopJob(t, "low", true)
}

func TestCheckpointedDrain(t *testing.T) {
	shared := filepath.Join(harness.NewGPUNode(t).Dir, "shared-checkpoints")
	nodes := []harness.GPUNode{harness.NewGPUNode(t), harness.NewGPUNode(t)}
	for i := range nodes {
		nodes[i].SharedCheckpoints = shared
	}
	c := checkpointCluster(t, nodes, "")

	c.RunJob(t, counterJob("train", "service", 50, 1, true))
	first := nextAlloc(t, c, "train", 0, 2*time.Minute)
	waitProgress(t, c, first.ID, 30)
	from := first.NodeID

	nomadCLI(t, c, "node", "drain", "-enable", "-yes", "-detach", "-deadline", "2m", from)
	second := nextAlloc(t, c, "train", 1, 2*time.Minute)
	if second.NodeID == from {
		t.Fatalf("the replacement is on the drained node")
	}
	waitTerminal(t, c, first.ID)
	before := counts(c.AllocLogs(t, first.ID, "t", "stdout"))
	if before["committed"] == 0 {
		t.Fatalf("the drained task committed nothing: %v\n%s", before, taskEvents(t, c, first.ID))
	}
	if ev := taskEvents(t, c, first.ID); !strings.Contains(ev, "(node drain)") {
		t.Errorf("the drained task's commit does not say it was a drain:\n%s", ev)
	}
	log := c.WaitForAllocLogs(t, second.ID, "t", "stdout", "restored=", time.Minute)
	if got := counts(log)["restored"]; got != before["committed"] {
		t.Fatalf("the replacement on the other node restored %d, the drained task committed %d:\n%s", got, before["committed"], log)
	}
	c.StopJob(t, "train", true)
}
