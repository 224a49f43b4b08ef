package e2e

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/e2e/cluster"
	"github.com/nomad-gpu/nomad-gpu/e2e/harness"
)

// gangCluster is three sim nodes of 4 whole GPUs (gpu-1 … gpu-3) sharing
// one checkpoint root, as a gang's nodes must; their tasks may run the
// build's nomad-gpu; batch preemption is on.
func gangCluster(t *testing.T) *cluster.Cluster {
	t.Helper()
	c, _ := fourGPUCluster(t, 3, func(c *cluster.Cluster, n *harness.GPUNode) {
		n.DriverHCL = fmt.Sprintf("nomad {\naddress = %q\n}\n%s", c.Server().HTTPAddr(), unveilNomadGPU(t))
	}, "", func(*api.Node) bool { return true })
	c.EnablePreemption(t)
	return c
}

// partialWatch samples a gang every second and keeps the longest stretch
// in which a member ran while another was not placed.
type partialWatch struct {
	mu      sync.Mutex
	longest time.Duration
	stop    chan struct{}
	done    chan struct{}
}

func watchPartial(t *testing.T, c *cluster.Cluster, job string, members int) *partialWatch {
	w := &partialWatch{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		var since time.Time
		for {
			select {
			case <-w.stop:
				return
			case <-time.After(time.Second):
			}
			all, _, err := c.API().Jobs().Allocations(job, false, nil)
			if err != nil {
				continue
			}
			placed, running := 0, 0
			for _, a := range all {
				if a.DesiredStatus != api.AllocDesiredStatusRun {
					continue
				}
				switch a.ClientStatus {
				case api.AllocClientStatusRunning:
					running++
					placed++
				case api.AllocClientStatusPending:
					placed++
				}
			}
			now := time.Now()
			if running == 0 || placed >= members {
				since = time.Time{}
				continue
			}
			if since.IsZero() {
				since = now
			}
			w.mu.Lock()
			w.longest = max(w.longest, now.Sub(since))
			w.mu.Unlock()
		}
	}()
	t.Cleanup(w.end)
	return w
}

func (w *partialWatch) end() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

func (w *partialWatch) longestPartial() time.Duration {
	w.end()
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.longest
}

var (
	stepLine     = regexp.MustCompile(`(?m)^step (\d+)$`)
	restoredLine = regexp.MustCompile(`(?m)^rank (\d) of 2: (?:restored step (\d+)|starting at step 0)$`)
	rankEvent    = regexp.MustCompile(`gang: rank (\d) of 2; master ([^ ]+):(\d+)`)
)

// gangMember is one running member as the test reads it.
type gangMember struct {
	alloc *api.Allocation
	rank  int
}

// runningMembers waits until the job has two running allocations newer
// than the seen ones, and reads each one's rank from its task events.
func runningMembers(t *testing.T, c *cluster.Cluster, job string, seen int) [2]gangMember {
	t.Helper()
	stubs := c.WaitForAllocs(t, job, seen+2, 3*time.Minute)
	var out [2]gangMember
	for i, s := range stubs[seen : seen+2] {
		a := c.WaitForAllocStatus(t, s.ID, "running", 2*time.Minute)
		deadline := time.Now().Add(time.Minute)
		for {
			if m := rankEvent.FindStringSubmatch(taskEventsOf(t, c, a.ID, "member")); m != nil {
				out[i] = gangMember{alloc: a, rank: int(m[1][0] - '0')}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("alloc %s has no rank event: %s", a.ID, taskEventsOf(t, c, a.ID, "member"))
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
	if out[0].rank == out[1].rank {
		t.Fatalf("both members are rank %d", out[0].rank)
	}
	if out[0].rank == 1 {
		out[0], out[1] = out[1], out[0]
	}
	return out
}

// lastStep is the last "step N" of a member's output.
func lastStep(t *testing.T, c *cluster.Cluster, allocID string) int {
	t.Helper()
	m := stepLine.FindAllStringSubmatch(c.AllocLogs(t, allocID, "member", "stdout"), -1)
	if len(m) == 0 {
		return 0
	}
	n, _ := strconv.Atoi(m[len(m)-1][1])
	return n
}

// restoredSteps are the steps both members of a run restored.
func restoredSteps(t *testing.T, c *cluster.Cluster, members [2]gangMember) [2]int {
	t.Helper()
	var out [2]int
	for i, m := range members {
		log := c.WaitForAllocLogs(t, m.alloc.ID, "member", "stdout", "rank ", time.Minute)
		r := restoredLine.FindStringSubmatch(log)
		if r == nil {
			t.Fatalf("member %d's output tells no start: %q", i, log)
		}
		out[i], _ = strconv.Atoi(r[2])
	}
	return out
}

// waitSteps waits until both members have printed step n.
func waitSteps(t *testing.T, c *cluster.Cluster, members [2]gangMember, n int) {
	t.Helper()
	for _, m := range members {
		c.WaitForAllocLogs(t, m.alloc.ID, "member", "stdout", fmt.Sprintf("step %d\n", n), 2*time.Minute)
	}
}

// The Done-when of gangs against real Nomad, on three sim nodes of 4
// GPUs: a gang of two 4-GPU members that checkpoint every step
// (jobs/examples/gang-sim.nomad.hcl, nomad-gpu sim-train). Sampled every
// second, no member runs while the other is not placed for longer than
// the admission bound; both start with the right rendezvous and exchange
// their steps. Killing one member's task restarts both from the same
// step, losing at most one; a high-priority job preempting one member
// stops the other too, both checkpointed, and the gang runs again later
// from the step both committed, losing at most the step in flight.
func TestGangLifecycle(t *testing.T) {
	c := gangCluster(t)
	// One node is full with a job preemption leaves alone (priority 85 is
	// within 10 of the preemptor's), so the gang runs on the other two
	// and a preemptor must take a member's GPUs.
	c.RunJob(t, strings.Replace(holderJob("filler", 85, time.Hour), "count = 1", "count = 4", 1))
	c.WaitForAllocStatus(t, c.WaitForAllocs(t, "filler", 1, time.Minute)[0].ID, "running", 2*time.Minute)
	ctl := c.StartController(t, "controller", "-tick", "200ms", "-preemption-cooldown", "0", "-layouts=false", "-moves=false", "-gang-retry", "3s")
	watch := watchPartial(t, c, "train", 2)
	runGang(t, c, "train", 4, true, func(j *api.Job) {
		j.TaskGroups[0].Tasks[0].Config["args"] = []string{"sim-train", "--steps", "0", "--step-time", "1s"}
	})

	first := runningMembers(t, c, "train", 0)
	t.Run("rendezvous", func(t *testing.T) {
		m := rankEvent.FindStringSubmatch(taskEventsOf(t, c, first[1].alloc.ID, "member"))
		var port api.PortMapping
		for _, p := range first[0].alloc.AllocatedResources.Shared.Ports {
			if p.Label == contract.GangRendezvousPort {
				port = p
			}
		}
		if m[2] != port.HostIP || m[3] != strconv.Itoa(port.Value) {
			t.Errorf("rank 1 was told master %s:%s; rank 0's rendezvous port is %s:%d", m[2], m[3], port.HostIP, port.Value)
		}
		waitSteps(t, c, first, 3)
		if log := c.AllocLogs(t, first[0].alloc.ID, "member", "stdout"); !strings.Contains(log, "rendezvous: all 2 members joined rank 0 on port "+m[3]) {
			t.Errorf("rank 0's output: %s", log)
		}
		if log := c.AllocLogs(t, first[1].alloc.ID, "member", "stdout"); !strings.Contains(log, "rendezvous: rank 1 of 2 joined rank 0 at "+m[2]+":"+m[3]) {
			t.Errorf("rank 1's output: %s", log)
		}
		if restored := restoredSteps(t, c, first); restored != [2]int{0, 0} {
			t.Errorf("the first run restored steps %v", restored)
		}
	})

	t.Run("a member killed restarts both from the same step", func(t *testing.T) {
		waitSteps(t, c, first, 5)
		pid := taskPID(t, c, first[1].alloc.ID)
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatalf("killing rank 1's task (pid %d): %v", pid, err)
		}
		waitTerminal(t, c, first[1].alloc.ID)
		waitTerminal(t, c, first[0].alloc.ID)
		reached := max(lastStep(t, c, first[0].alloc.ID), lastStep(t, c, first[1].alloc.ID))
		second := runningMembers(t, c, "train", 2)
		restored := restoredSteps(t, c, second)
		if restored[0] != restored[1] || restored[0] < reached-1 {
			t.Fatalf("restored steps %v after the gang reached step %d: want one step for both, at most one lost", restored, reached)
		}
		if !strings.Contains(ctl.Log(), "gang-requeued") {
			t.Errorf("no gang-requeued decision in the controller's log")
		}
		waitSteps(t, c, second, restored[0]+3)
		first = second
	})

	t.Run("a member preempted stops both, checkpointed", func(t *testing.T) {
		c.RunJob(t, holderJob("urgent", 90, 10*time.Second))
		for _, m := range first {
			waitTerminal(t, c, m.alloc.ID)
		}
		preempted := 0
		for _, m := range first {
			a, _, err := c.API().Allocations().Info(m.alloc.ID, nil)
			if err != nil {
				t.Fatal(err)
			}
			if a.PreemptedByAllocation != "" {
				preempted++
			}
			if !strings.Contains(taskEventsOf(t, c, a.ID, "member"), "checkpoint committed") {
				t.Errorf("rank %d was stopped without a commit: %s", m.rank, taskEventsOf(t, c, a.ID, "member"))
			}
		}
		if preempted != 1 {
			t.Fatalf("%d members preempted, want 1", preempted)
		}
		reached := max(lastStep(t, c, first[0].alloc.ID), lastStep(t, c, first[1].alloc.ID))
		third := runningMembers(t, c, "train", 4)
		restored := restoredSteps(t, c, third)
		if restored[0] != restored[1] || restored[0] < reached-1 {
			t.Fatalf("restored steps %v after the gang reached step %d: want one step for both, at most the one in flight lost", restored, reached)
		}
		t.Logf("preempted at step %d, resumed from step %d", reached, restored[0])
	})

	d := watch.longestPartial()
	if d > 30*time.Second+2*time.Second {
		t.Errorf("a member ran for %s while another was not placed; the bound is 30s", d)
	}
	t.Logf("longest a member ran while another was not placed: %s (sampled every second)", d)
	c.StopJob(t, "train", true)
}

// taskPID is the host pid of the member's task, from the driver's
// "started as host pid" event.
func taskPID(t *testing.T, c *cluster.Cluster, allocID string) int {
	t.Helper()
	a, _, err := c.API().Allocations().Info(allocID, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st := a.TaskStates["member"]; st != nil {
		for _, e := range st.Events {
			if pid, err := strconv.Atoi(e.Details["pid"]); err == nil && pid > 1 {
				// The wrong process killed would fail the test far from here.
				if cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err != nil || !strings.Contains(string(cmd), "sim-train") {
					t.Fatalf("alloc %s's task pid %d is not sim-train: %q (%v)", allocID, pid, cmd, err)
				}
				return pid
			}
		}
	}
	t.Fatalf("alloc %s has no pid event", allocID)
	return 0
}
