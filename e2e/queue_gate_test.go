package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/e2e/cluster"
	"github.com/nomad-gpu/nomad-gpu/e2e/harness"
	"github.com/nomad-gpu/nomad-gpu/topview"
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
func runHeld(t *testing.T, c *cluster.Cluster, ns, id string, steps int, stepTime string, meta map[string]string, edit ...func(*api.Job)) {
	t.Helper()
	runGang(t, c, id, 1, true, append([]func(*api.Job){func(j *api.Job) {
		j.Namespace = new(ns)
		j.TaskGroups[0].Meta[contract.MetaGangMembers] = "1"
		j.TaskGroups[0].Tasks[0].Config["args"] = []string{"sim-train", "--steps", strconv.Itoa(steps), "--step-time", stepTime}
		for k, v := range meta {
			j.Meta[k] = v
		}
	}}, edit...)...)
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
	lastSteps := stoppedLastSteps(t, c, "a")
	if len(lastSteps) != 6 || len(runningJobs(t, c, "a")) != 6 {
		t.Fatalf("a's jobs stopped %v, %d running; want six taken back, six running\n%s", lastSteps, len(runningJobs(t, c, "a")), decisions(ctl.Log()))
	}
	for job := range lastSteps {
		waitingAs(t, c, "a", job, "cohort", "cohort: lab lends 0 now", 30*time.Second)
		break
	}
	// b's jobs end after 20 steps; the reclaimed run again and resume.
	waitNamespaceRunning(t, c, "a", 12, 3*time.Minute)
	checkResumed(t, c, "a", lastSteps)
}

// stoppedLastSteps are the jobs of namespace ns with an allocation
// stopped, each with the last step that allocation printed.
func stoppedLastSteps(t *testing.T, c *cluster.Cluster, ns string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, a := range nsAllocs(t, c, ns) {
		if a.DesiredStatus == api.AllocDesiredStatusStop {
			out[a.JobID] = lastStep(t, c, a.ID)
		}
	}
	return out
}

// checkResumed checks that each job of namespace ns in lastSteps runs
// again, from at most one step before the last its stopped run printed.
func checkResumed(t *testing.T, c *cluster.Cluster, ns string, lastSteps map[string]int) {
	t.Helper()
	running := runningJobs(t, c, ns)
	for job, last := range lastSteps {
		if running[job] == nil {
			t.Errorf("%s does not run again", job)
			continue
		}
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

// A queue at its nominal runs its urgent work first, as Nomad would on
// nodes of its own (yield), against real Nomad: queue a (namespace a) of
// nominal 4 in no cohort runs four checkpointing 1-GPU jobs of priority
// 30 on three sim nodes of 4 GPUs; its job of priority 80 runs within
// 60 s, one of the four taken back for it, checkpointed; that one runs
// again once the urgent job is done, from at most a step before where
// it stopped.
func TestQueueYield(t *testing.T) {
	c := gangCluster(t)
	makeNamespaces(t, c, "a")
	file := queueFile(t, `queue "a" {
  namespaces = ["a"]
  nominal    = 4
}
`)
	ctl := c.StartController(t, "controller", "-tick", "500ms", "-queues", file, "-preemption-cooldown", "0", "-layouts=false", "-moves=false")
	priority := func(p int) func(*api.Job) { return func(j *api.Job) { j.Priority = new(p) } }
	for i := range 4 {
		runHeld(t, c, "a", fmt.Sprintf("low-%d", i+1), 0, "1s", nil, priority(30))
	}
	waitNamespaceRunning(t, c, "a", 4, 3*time.Minute)
	time.Sleep(3 * time.Second) // a few steps each

	submitted := time.Now()
	runHeld(t, c, "a", "urgent", 10, "1s", nil, priority(80))
	deadline := time.Now().Add(time.Minute)
	for runningJobs(t, c, "a")["urgent"] == nil {
		if time.Now().After(deadline) {
			t.Fatalf("the urgent job does not run a minute after it was submitted\n%s", decisions(ctl.Log()))
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Logf("the urgent job ran %v after it was submitted", time.Since(submitted).Round(100*time.Millisecond))
	lastSteps := stoppedLastSteps(t, c, "a")
	if len(lastSteps) != 1 || !strings.Contains(ctl.Log(), "kind=yielded") {
		t.Fatalf("a's jobs stopped %v; want one of the low ones, yielded\n%s", lastSteps, decisions(ctl.Log()))
	}
	// The urgent job ends after 10 steps; the yielded one runs again.
	for deadline := time.Now().Add(2 * time.Minute); runningJobs(t, c, "a")["urgent"] != nil; time.Sleep(250 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the urgent job of 10 steps still runs after 2 minutes")
		}
	}
	waitNamespaceRunning(t, c, "a", 4, 2*time.Minute)
	checkResumed(t, c, "a", lastSteps)
}

// heldTemplate is the gang example as a held job of one 1-GPU member,
// parsed once: registering hundreds of copies must not parse each.
func heldTemplate(t *testing.T, c *cluster.Cluster) *api.Job {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(cluster.RepoRoot(t), "jobs", "examples", "gang-sim.nomad.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	vars := fmt.Sprintf("nomad_gpu = %q", cluster.RequireBinary(t, "nomad-gpu"))
	job, err := c.API().Jobs().ParseHCLOpts(&api.JobsParseRequest{JobHCL: string(src), Variables: vars, Canonicalize: true})
	if err != nil {
		t.Fatalf("parsing the gang example: %v", err)
	}
	job.TaskGroups[0].Meta[contract.MetaGangMembers] = "1"
	// One pool: a wait is predicted within a pool (the example's "all"
	// has no one schedule).
	job.NodePool = new("default")
	return job
}

// registerHeld registers a copy of the template as job id of namespace
// ns, running args.
func registerHeld(t *testing.T, c *cluster.Cluster, tmpl *api.Job, ns, id string, args ...string) {
	t.Helper()
	job := *tmpl
	tg := *tmpl.TaskGroups[0]
	task := *tg.Tasks[0]
	task.Config = map[string]any{"command": task.Config["command"], "checkpoint": task.Config["checkpoint"], "args": args}
	tg.Tasks = []*api.Task{&task}
	job.TaskGroups = []*api.TaskGroup{&tg}
	job.ID, job.Name, job.Namespace = new(id), new(id), new(ns)
	if _, _, err := c.API().Jobs().Register(&job, nil); err != nil {
		t.Fatalf("registering %s/%s: %v", ns, id, err)
	}
}

// gpuSeconds is the GPU-time the allocations of namespace ns ran within
// [from, to]: each one GPU, from its task's start to its end (now while
// it runs).
func gpuSeconds(t *testing.T, c *cluster.Cluster, ns string, from, to time.Time) float64 {
	t.Helper()
	sum := 0.0
	for _, a := range nsAllocs(t, c, ns) {
		st := a.TaskStates["member"]
		if st == nil || st.StartedAt.IsZero() {
			continue
		}
		end := st.FinishedAt
		if end.IsZero() || end.Before(st.StartedAt) {
			end = to
		}
		start := st.StartedAt
		if start.Before(from) {
			start = from
		}
		if end.After(to) {
			end = to
		}
		if end.After(start) {
			sum += end.Sub(start).Seconds()
		}
	}
	return sum
}

// Weighted fair share against real Nomad, on three sim nodes of 4 GPUs:
// queues a (weight 2) and b (weight 1) of nominal 0 borrow every GPU
// from the cohort's lender, queue shared (nominal 12, no work). Both are
// saturated with 40-step held jobs for 10 minutes; each queue's GPU-time
// in them is within 10 % of its weighted share (a 2/3, b 1/3). Quotas
// outrank weights: queues that each use their nominal hold it whatever
// their weights, so the weights govern what a cohort lends, as Kueue's.
func TestQueueFairShare(t *testing.T) {
	c := gangCluster(t)
	makeNamespaces(t, c, "a", "b", "shared")
	file := queueFile(t, `fair_share {
  half_life = "10m"
}
cohort "lab" {}
queue "shared" {
  namespaces = ["shared"]
  nominal    = 12
  cohort     = "lab"
}
queue "a" {
  namespaces = ["a"]
  nominal    = 0
  weight     = 2
  cohort     = "lab"
}
queue "b" {
  namespaces = ["b"]
  nominal    = 0
  weight     = 1
  cohort     = "lab"
}
`)
	c.StartController(t, "controller", "-tick", "500ms", "-queues", file, "-preemption-cooldown", "0", "-layouts=false", "-moves=false")
	tmpl := heldTemplate(t, c)
	// 12 GPUs for 11 minutes of 40-step jobs: a needs about 130, b 65.
	for i := range 150 {
		registerHeld(t, c, tmpl, "a", fmt.Sprintf("a-%03d", i), "sim-train", "--steps", "40", "--step-time", "1s")
		if i < 90 {
			registerHeld(t, c, tmpl, "b", fmt.Sprintf("b-%03d", i), "sim-train", "--steps", "40", "--step-time", "1s")
		}
	}
	deadline := time.Now().Add(3 * time.Minute)
	for len(runningJobs(t, c, "a"))+len(runningJobs(t, c, "b")) < 12 {
		if time.Now().After(deadline) {
			t.Fatalf("the cluster is not full after 3 minutes: a runs %d, b %d", len(runningJobs(t, c, "a")), len(runningJobs(t, c, "b")))
		}
		time.Sleep(time.Second)
	}
	from := time.Now()
	time.Sleep(10 * time.Minute)
	to := time.Now()
	// The jobs that wait have their places and, with the pool's finished
	// runs to learn from, predicted starts.
	r, err := queueReport(t, c)
	predicted := 0
	for _, j := range r.Jobs {
		if j.PredictedStart != nil {
			predicted++
		}
	}
	if err != nil || len(r.Jobs) == 0 || r.Jobs[0].Position != 1 || predicted == 0 {
		t.Errorf("nomad-gpu queue: %d waiting jobs, %d with a predicted start, error %v; want the next at position 1, and predictions", len(r.Jobs), predicted, err)
	} else {
		t.Logf("nomad-gpu queue: %d waiting, %d with a predicted start; next: %s/%s, %s, predicted start %v (%s)",
			len(r.Jobs), predicted, r.Jobs[0].Namespace, r.Jobs[0].Job, r.Jobs[0].Reason, r.Jobs[0].PredictedStart, r.Jobs[0].PredictionBasis)
	}
	a, b := gpuSeconds(t, c, "a", from, to), gpuSeconds(t, c, "b", from, to)
	shareA, shareB := a/(a+b), b/(a+b)
	t.Logf("GPU-time over 10 minutes: a %.0f s (%.1f %%), b %.0f s (%.1f %%); weighted shares 66.7 %%, 33.3 %%", a, 100*shareA, b, 100*shareB)
	if a+b < 0.9*12*to.Sub(from).Seconds() {
		t.Errorf("a and b ran %.0f GPU-seconds of %.0f; want the 12 GPUs saturated", a+b, 12*to.Sub(from).Seconds())
	}
	for _, q := range []struct {
		name         string
		share, wants float64
	}{{"a", shareA, 2.0 / 3}, {"b", shareB, 1.0 / 3}} {
		if q.share < 0.9*q.wants || q.share > 1.1*q.wants {
			t.Errorf("queue %s had %.1f %% of the GPU-time; want within 10 %% of its weighted share %.1f %%", q.name, 100*q.share, 100*q.wants)
		}
	}
}

// prepJob is a dependency's run: isolationJob's batch job of one GPU
// task, restarted and rescheduled never, running for run and exiting with
// code.
func prepJob(id string, run time.Duration, code int) string {
	return isolationJob(id, "nvidia/gpu", "", fmt.Sprintf("sleep %d; exit %d", int(run.Seconds()), code))
}

// queueReport is what `nomad-gpu queue -json` reports of every namespace.
func queueReport(t *testing.T, c *cluster.Cluster) (topview.WaitReport, error) {
	t.Helper()
	var r topview.WaitReport
	out, err := exec.Command(cluster.RequireBinary(t, "nomad-gpu"), "queue", "-json", "-address", c.Server().HTTPAddr(), "-namespace", "*").Output()
	if err == nil {
		err = json.Unmarshal(out, &r)
	}
	return r, err
}

// waitingAs waits until `nomad-gpu queue -json` lists job of namespace
// ns waiting for a reason of kind whose words contain want, and returns
// its line.
func waitingAs(t *testing.T, c *cluster.Cluster, ns, job, kind, want string, timeout time.Duration) topview.WaitingJob {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last topview.WaitingJob
	for {
		r, err := queueReport(t, c)
		if err == nil {
			for _, j := range r.Jobs {
				if j.Namespace == ns && j.Job == job {
					last = j
				}
			}
			if last.Kind == kind && strings.Contains(last.Reason, want) {
				return last
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("nomad-gpu queue lists %s/%s as %+v (error %v); want kind %s, a reason with %q", ns, job, last, err, kind, want)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// Dependencies and the reasons held jobs wait for, against real Nomad,
// on a node of 4 GPUs, as nomad-gpu queue lists them: held job train
// (meta nomad_gpu_after = "prep") waits for its dependency while prep
// runs, and starts only after prep completed; train-2, after prep-bad,
// which fails, waits with that reason; q/wide asks 2 GPUs of queue q,
// whose nominal is 1 and which has no cohort (quota); cap asks a GPU
// while filler and prep hold all four (capacity).
func TestQueueDependency(t *testing.T) {
	c, _ := fourGPUCluster(t, 1, func(c *cluster.Cluster, n *harness.GPUNode) {
		n.DriverHCL = fmt.Sprintf("nomad {\naddress = %q\n}\n%s", c.Server().HTTPAddr(), unveilNomadGPU(t))
	}, "", func(*api.Node) bool { return true })
	makeNamespaces(t, c, "q")
	file := queueFile(t, `queue "q" {
  namespaces = ["q"]
  nominal    = 1
}
`)
	c.StartController(t, "controller", "-tick", "500ms", "-queues", file, "-preemption-cooldown", "0", "-layouts=false", "-moves=false")
	c.RunJob(t, holderJob2("filler", 50, 3, time.Minute))
	c.RunJob(t, prepJob("prep", 8*time.Second, 0))
	for _, id := range []string{"filler", "prep"} {
		c.WaitForAllocStatus(t, c.WaitForAllocs(t, id, 1, time.Minute)[0].ID, "running", time.Minute)
	}
	c.RunJob(t, prepJob("prep-bad", time.Second, 1))
	runHeld(t, c, "default", "train", 0, "1s", map[string]string{contract.MetaAfter: "prep"})
	runHeld(t, c, "default", "train-2", 0, "1s", map[string]string{contract.MetaAfter: "prep-bad"})
	runGang(t, c, "wide", 2, true, func(j *api.Job) {
		j.Namespace = new("q")
		j.TaskGroups[0].Meta[contract.MetaGangMembers] = "1"
	})
	runHeld(t, c, "default", "cap", 0, "1s", nil)

	waitingAs(t, c, "default", "train", "dependency", "dependency: after default/prep, which has not completed yet", 30*time.Second)
	waitingAs(t, c, "q", "wide", "quota", "quota: q would use 2 of its nominal 1, and it is in no cohort to borrow from", 30*time.Second)
	capLine := waitingAs(t, c, "default", "cap", "capacity", "capacity: ", 30*time.Second)
	t.Logf("cap waits: position %d, %q, predicted start %v (%s)", capLine.Position, capLine.Reason, capLine.PredictedStart, capLine.PredictionBasis)
	done := c.WaitForAllocStatus(t, c.WaitForAllocs(t, "prep", 1, time.Minute)[0].ID, "complete", time.Minute)
	train := c.WaitForAllocStatus(t, c.WaitForAllocs(t, "train", 1, time.Minute)[0].ID, "running", time.Minute)
	if ended := done.TaskStates["t"].FinishedAt; !train.TaskStates["member"].StartedAt.After(ended) {
		t.Errorf("train started at %v, before prep ended at %v", train.TaskStates["member"].StartedAt, ended)
	}
	waitingAs(t, c, "default", "train-2", "dependency", "dependency: after default/prep-bad, whose latest run failed", 30*time.Second)
	if n := len(liveAllocs(t, c, "train-2")); n != 0 {
		t.Errorf("train-2 has %d allocations; its dependency failed", n)
	}
}
