package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/e2e/cluster"
)

// queueFile writes a queue file and returns its path.
func queueFile(t *testing.T, hcl string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "queues.hcl")
	if err := os.WriteFile(file, []byte(hcl), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

// makeNamespaces registers namespaces with Nomad.
func makeNamespaces(t *testing.T, c *cluster.Cluster, names ...string) {
	t.Helper()
	for _, ns := range names {
		if _, err := c.API().Namespaces().Register(&api.Namespace{Name: ns}, nil); err != nil {
			t.Fatalf("namespace %s: %v", ns, err)
		}
	}
}

// runHeld registers a held job of one 1-GPU member in namespace ns: the
// gang example (sim-train, checkpointing every step of stepTime) as a
// gang of one, which waits at count 0 for the controller's admission;
// steps 0 runs until stopped.
func runHeld(t *testing.T, c *cluster.Cluster, ns, id string, steps int, stepTime string, meta map[string]string) {
	t.Helper()
	runGang(t, c, id, 1, true, func(j *api.Job) {
		j.Namespace = new(ns)
		j.TaskGroups[0].Meta[contract.MetaGangMembers] = "1"
		j.TaskGroups[0].Tasks[0].Config["args"] = []string{"sim-train", "--steps", strconv.Itoa(steps), "--step-time", stepTime}
		for k, v := range meta {
			j.Meta[k] = v
		}
	})
}

// nsAllocs are namespace ns's allocations, oldest first.
func nsAllocs(t *testing.T, c *cluster.Cluster, ns string) []*api.AllocationListStub {
	t.Helper()
	list, _, err := c.API().Allocations().List(&api.QueryOptions{Namespace: ns})
	if err != nil {
		t.Fatalf("allocations of %s: %v", ns, err)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].CreateIndex < list[j].CreateIndex })
	return list
}

// runningJobs are the jobs of namespace ns with an allocation running.
func runningJobs(t *testing.T, c *cluster.Cluster, ns string) map[string]*api.AllocationListStub {
	t.Helper()
	out := map[string]*api.AllocationListStub{}
	for _, a := range nsAllocs(t, c, ns) {
		if a.ClientStatus == api.AllocClientStatusRunning && a.DesiredStatus == api.AllocDesiredStatusRun {
			out[a.JobID] = a
		}
	}
	return out
}

// waitNamespaceRunning waits until namespace ns has want jobs running and
// returns when it did.
func waitNamespaceRunning(t *testing.T, c *cluster.Cluster, ns string, want int, timeout time.Duration) time.Time {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got := runningJobs(t, c, ns)
		if len(got) >= want {
			return time.Now()
		}
		if time.Now().After(deadline) {
			t.Fatalf("namespace %s runs %d jobs after %v; want %d", ns, len(got), timeout, want)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

var oneRankStart = regexp.MustCompile(`(?m)^rank 0 of 1: (?:restored step (\d+)|starting at step 0)$`)

// The Done-when of queues' borrowing and reclaim against real Nomad, on
// three sim nodes of 4 GPUs: queues a and b (namespaces a, b) of nominal
// 6 each in one cohort. b idle, a's twelve checkpointing 1-GPU jobs
// borrow all 12 GPUs; b submits six 1-GPU jobs, and within 60 s b runs
// six: six of a's were taken back, checkpointed, and each runs again
// once b's are done, from at most one step before where it stopped.
func TestQueueReclaim(t *testing.T) {
	c := gangCluster(t)
	makeNamespaces(t, c, "a", "b")
	file := queueFile(t, `cohort "lab" {}
queue "a" {
  namespaces = ["a"]
  nominal    = 6
  cohort     = "lab"
}
queue "b" {
  namespaces = ["b"]
  nominal    = 6
  cohort     = "lab"
}
`)
	ctl := c.StartController(t, "controller", "-tick", "500ms", "-queues", file, "-preemption-cooldown", "0", "-layouts=false", "-moves=false")
	for i := range 12 {
		runHeld(t, c, "a", fmt.Sprintf("a-%02d", i+1), 0, "1s", nil)
	}
	waitNamespaceRunning(t, c, "a", 12, 3*time.Minute)
	time.Sleep(3 * time.Second) // a few steps each

	submitted := time.Now()
	for i := range 6 {
		runHeld(t, c, "b", fmt.Sprintf("b-%d", i+1), 20, "1s", nil)
	}
	took := waitNamespaceRunning(t, c, "b", 6, 2*time.Minute).Sub(submitted)
	t.Logf("b ran six jobs %v after it submitted them", took.Round(100*time.Millisecond))
	if took > 60*time.Second {
		t.Errorf("b ran its six jobs %v after it submitted them; want within 60s", took)
	}
	// The reclaimed: a's jobs whose allocation was stopped, with the last
	// step each printed.
	lastSteps := map[string]int{}
	for _, a := range nsAllocs(t, c, "a") {
		if a.DesiredStatus == api.AllocDesiredStatusStop {
			lastSteps[a.JobID] = lastStep(t, c, a.ID)
		}
	}
	if len(lastSteps) != 6 || len(runningJobs(t, c, "a")) != 6 {
		t.Fatalf("a's jobs stopped %v, %d running; want six taken back, six running\n%s", lastSteps, len(runningJobs(t, c, "a")), decisions(ctl.Log()))
	}
	// b's jobs end after 20 steps; the reclaimed run again and resume.
	waitNamespaceRunning(t, c, "a", 12, 3*time.Minute)
	running := runningJobs(t, c, "a")
	for job, last := range lastSteps {
		log := c.WaitForAllocLogs(t, running[job].ID, "member", "stdout", "rank 0", time.Minute)
		m := oneRankStart.FindStringSubmatch(log)
		restored := 0
		if m != nil && m[1] != "" {
			restored, _ = strconv.Atoi(m[1])
		}
		if m == nil || restored < last-1 {
			t.Errorf("%s stopped after step %d and started again %q; want from step %d or later", job, last, m, last-1)
		}
	}
}
