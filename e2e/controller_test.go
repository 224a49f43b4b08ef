package e2e

// The controller against a real Nomad: preemption protection, and a
// leader replaced when it is killed.

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/e2e/cluster"
	"github.com/nomad-gpu/nomad-gpu/e2e/harness"
	"github.com/nomad-gpu/nomad-gpu/internal/testenv"
	"github.com/nomad-gpu/nomad-gpu/topview"
)

// fourGPUNode is a sim node with 4 whole GPUs: the other 4 are in MIG mode.
func fourGPUNode(t testing.TB) harness.GPUNode {
	n := harness.NewGPUNode(t)
	n.Layout = &harness.NodeLayout{MIG: []int{4, 5, 6, 7}, MIGProfiles: []string{"3g.40gb", "3g.40gb"}}
	return n
}

// protectionCluster is one 4-GPU node, preemption on for batch jobs, two
// priority-30 checkpointing jobs of 2 GPUs each running on it.
func protectionCluster(t testing.TB) *cluster.Cluster {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Skip(t, testenv.Root, "e2e: the gpu driver needs a root Nomad client")
	}
	cluster.RequirePlugin(t, "nomad-device-gpu")
	cluster.RequirePlugin(t, "nomad-driver-gpu")
	n := fourGPUNode(t)
	c := cluster.Start(t, cluster.Options{Clients: 0})
	n.DriverHCL = fmt.Sprintf("nomad {\naddress = %q\n}", c.Server().HTTPAddr())
	c.StartClients(t, cluster.ClientOptions{Name: "gpu-1", PluginDir: cluster.PluginDir(t), ExtraHCL: n.HCL(t)})
	c.WaitForNode(t, "gpu-1", func(n *api.Node) bool {
		d := n.Drivers["gpu"]
		return d != nil && d.Healthy && wholeGPUsOf(n) == 4
	}, 2*time.Minute)
	c.EnablePreemption(t)
	return c
}

func wholeGPUsOf(n *api.Node) int {
	if n.NodeResources == nil {
		return 0
	}
	for _, d := range n.NodeResources.Devices {
		if d.Type == "gpu" {
			return len(d.Instances)
		}
	}
	return 0
}

// preemptedOf are the job's allocations Nomad preempted.
func preemptedOf(t testing.TB, c *cluster.Cluster, job string) []*api.AllocationListStub {
	t.Helper()
	stubs, _, err := c.API().Jobs().Allocations(job, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	var out []*api.AllocationListStub
	for _, a := range stubs {
		if a.PreemptedByAllocation != "" {
			out = append(out, a)
		}
	}
	return out
}

func waitPriority(t testing.TB, c *cluster.Cluster, job string, want int, within time.Duration) time.Time {
	t.Helper()
	deadline := time.Now().Add(within)
	for jobPriority(t, c, job) != want {
		if time.Now().After(deadline) {
			t.Fatalf("job %s at priority %d after %s, want %d", job, jobPriority(t, c, job), within, want)
		}
		time.Sleep(200 * time.Millisecond)
	}
	return time.Now()
}

const protectCooldown = 40 * time.Second

// A priority-90 job of 2 GPUs on a 4-GPU node running two priority-30
// checkpointing jobs of 2 GPUs preempts exactly one of them: the
// preempted job is not raised while it waits, so it preempts nobody.
// Once it resumes from its checkpoint it is protected for the cooldown
// (raised in place, no restart): a second priority-90 job inside the
// cooldown does not preempt it; after the cooldown it is back at its own
// priority and a third can. The agent started seconds before.
func TestPreemptionProtection(t *testing.T) {
	c := protectionCluster(t)
	ctl := c.StartController(t, "controller", "-preemption-cooldown", protectCooldown.String(), "-tick", "200ms")
	const low, high = 30, 90
	c.RunJob(t, counterJob("low-a", "batch", low, 2, true))
	c.RunJob(t, counterJob("low-b", "batch", low, 2, true))
	a := nextAlloc(t, c, "low-a", 0, 2*time.Minute)
	b := nextAlloc(t, c, "low-b", 0, 2*time.Minute)
	waitProgress(t, c, a.ID, 10)
	waitProgress(t, c, b.ID, 10)

	c.RunJob(t, holderJob2("high-1", high, 2, 12*time.Second))
	c.WaitForAllocStatus(t, c.WaitForAllocs(t, "high-1", 1, time.Minute)[0].ID, "running", 2*time.Minute)
	time.Sleep(3 * time.Second) // a storm would preempt the other one now
	pa, pb := preemptedOf(t, c, "low-a"), preemptedOf(t, c, "low-b")
	if len(pa)+len(pb) != 1 {
		t.Fatalf("preempted: low-a %d, low-b %d allocations; want exactly one in all", len(pa), len(pb))
	}
	victim, other := "low-a", "low-b"
	if len(pb) == 1 {
		victim, other = other, victim
	}
	if p := jobPriority(t, c, victim); p != low {
		t.Errorf("the preempted job waits at priority %d, want its own %d", p, low)
	}

	// It resumes from its checkpoint once high-1 is done, and is raised in
	// place.
	first := waitTerminal(t, c, preemptedOf(t, c, victim)[0].ID)
	committed := counts(c.AllocLogs(t, first.ID, "t", "stdout"))["committed"]
	resumed := nextAlloc(t, c, victim, 1, 2*time.Minute)
	log := c.WaitForAllocLogs(t, resumed.ID, "t", "stdout", "restored=", time.Minute)
	if got := counts(log)["restored"]; got != committed || committed == 0 {
		t.Fatalf("the replacement restored %d; the preempted task committed %d", got, committed)
	}
	protectedAt := waitPriority(t, c, victim, high, 10*time.Second)
	if !strings.Contains(ctl.Log(), "kind=protected") {
		t.Errorf("the controller logged no protection")
	}
	topShowsProtection(t, c, victim, low, high)

	// Inside the cooldown a job of 90 cannot preempt it (it preempts the
	// other one instead).
	c.RunJob(t, holderJob2("high-2", high, 2, 5*time.Minute))
	c.WaitForAllocStatus(t, c.WaitForAllocs(t, "high-2", 1, time.Minute)[0].ID, "running", 2*time.Minute)
	if got := preemptedOf(t, c, victim); len(got) != 1 {
		t.Fatalf("the protected job was preempted inside its cooldown: %d preempted allocations", len(got))
	}
	c.StopJob(t, "high-2", true)

	// After the cooldown: its own priority again, the same allocation
	// running, and a job of 90 can preempt it.
	back := waitPriority(t, c, victim, low, protectCooldown+20*time.Second)
	if d := back.Sub(protectedAt); d < protectCooldown-time.Second {
		t.Errorf("protected for %s, want the cooldown %s", d, protectCooldown)
	}
	if a, _, _ := c.API().Allocations().Info(resumed.ID, nil); a == nil || a.ClientStatus != "running" {
		t.Fatalf("restoring the priority restarted the task: %s", cluster.AllocSummary(a))
	}
	_ = other
	c.RunJob(t, holderJob2("high-3", high, 2, 5*time.Second))
	c.WaitForAllocStatus(t, c.WaitForAllocs(t, "high-3", 1, time.Minute)[0].ID, "running", 2*time.Minute)
	deadline := time.Now().Add(30 * time.Second)
	for len(preemptedOf(t, c, victim)) != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("after the cooldown a job of %d did not preempt %s", high, victim)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// topShowsProtection checks that `nomad-gpu top -json` shows a leader and
// the job's raise in force, from its own priority to raised, with its end.
func topShowsProtection(t *testing.T, c *cluster.Cluster, job string, own, raised int) {
	t.Helper()
	v := topJSON(t, c)
	if v.Controller == nil || !v.Controller.Leading || v.Controller.Leader == "" {
		t.Fatalf("top -json controller: %+v (error %q), want a named leader", v.Controller, v.ControllerError)
	}
	for _, r := range v.Controller.Raises {
		if r.Job == job && r.InForce && r.Own == own && r.Priority == raised && r.Until != nil && r.Until.After(time.Now()) {
			return
		}
	}
	t.Errorf("top -json shows no raise of %s from %d to %d in force: %+v", job, own, raised, v.Controller.Raises)
}

// topJSON is what `nomad-gpu top -json` shows of the cluster.
func topJSON(t *testing.T, c *cluster.Cluster) topview.View {
	t.Helper()
	out, err := exec.Command(cluster.RequireBinary(t, "nomad-gpu"), "top", "-json", "-address", c.Server().HTTPAddr()).Output()
	if err != nil {
		t.Fatalf("nomad-gpu top -json: %v", err)
	}
	var v topview.View
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("top -json: %v\n%s", err, out)
	}
	return v
}

// holderJob2 is holderJob with a GPU count.
func holderJob2(id string, priority, gpus int, hold time.Duration) string {
	return strings.Replace(holderJob(id, priority, hold), "count = 1", fmt.Sprintf("count = %d", gpus), 1)
}

// Two replicas: the one holding the lock acts, the other writes nothing.
// SIGKILL of the leader while a protection it made is in force: the other
// leads within the lock TTL and restores the job's priority on time.
func TestControllerFailover(t *testing.T) {
	c := protectionCluster(t)
	// The shortest TTL with a 1s lock delay (Nomad is given 10s, its least).
	const ttl, cooldown = 23 * time.Second, 30 * time.Second
	args := []string{"-preemption-cooldown", cooldown.String(), "-tick", "200ms", "-lock-ttl", ttl.String(), "-lock-delay", "1s"}
	r1 := c.StartController(t, "replica-1", args...)
	waitMetric(t, r1, contract.MetricControllerLeader, 1, 30*time.Second)
	r2 := c.StartController(t, "replica-2", args...)
	time.Sleep(2 * time.Second)
	if v := r2.Metric(t, contract.MetricControllerLeader); v != 0 {
		t.Fatalf("replica-2 leader=%v while replica-1 leads", v)
	}

	c.RunJob(t, counterJob("low-a", "batch", 30, 2, true))
	c.RunJob(t, counterJob("low-b", "batch", 30, 2, true))
	waitProgress(t, c, nextAlloc(t, c, "low-a", 0, 2*time.Minute).ID, 5)
	waitProgress(t, c, nextAlloc(t, c, "low-b", 0, 2*time.Minute).ID, 5)
	c.RunJob(t, holderJob2("high-1", 90, 2, 5*time.Second))
	var victim string
	deadline := time.Now().Add(time.Minute)
	for victim == "" {
		for _, j := range []string{"low-a", "low-b"} {
			if len(preemptedOf(t, c, j)) > 0 {
				victim = j
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("high-1 preempted nobody")
		}
		time.Sleep(200 * time.Millisecond)
	}
	protectedAt := waitPriority(t, c, victim, 90, 2*time.Minute)
	w1, w2 := r1.Metric(t, contract.MetricControllerLedgerWrite), r2.Metric(t, contract.MetricControllerLedgerWrite)
	if w1 <= 0 || w2 != 0 {
		t.Fatalf("ledger writes before the kill: replica-1 %v, replica-2 %v; want some and none", w1, w2)
	}
	r1.Kill()
	killed := time.Now()
	// Waited for longer than the bound checked below, so that a late
	// takeover says how late.
	took := waitMetric(t, r2, contract.MetricControllerLeader, 1, ttl+10*time.Second).Sub(killed)
	t.Logf("replica-2 led %s after the kill (lock TTL %s, lock delay 1s)", took.Round(100*time.Millisecond), ttl)
	if took > ttl {
		t.Errorf("replica-2 took the lead %s after the kill; want within the lock TTL %s", took, ttl)
	}
	back := waitPriority(t, c, victim, 30, cooldown+20*time.Second)
	if late := back.Sub(protectedAt.Add(cooldown)); late > 3*time.Second {
		t.Errorf("priority restored %s after the cooldown's end", late)
	}
	if w := r2.Metric(t, contract.MetricControllerLedgerWrite); w <= 0 {
		t.Errorf("replica-2 wrote nothing to the ledger after taking the lead")
	}
}

// waitMetric waits until the replica's metric is want, and says when.
func waitMetric(t testing.TB, p *cluster.Controller, name string, want float64, within time.Duration) time.Time {
	t.Helper()
	deadline := time.Now().Add(within)
	for p.Metric(t, name) != want {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s is %v after %s, want %v", p.Name(), name, p.Metric(t, name), within, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return time.Now()
}

// jobs/controller/controller.nomad.hcl runs as written (raw_exec, the
// binary built here): two replicas on two nodes, reaching Nomad through
// the task API with their workload identity, registered as a Nomad
// service; exactly one leads.
func TestControllerJob(t *testing.T) {
	cli := cluster.RequireBinary(t, "nomad-gpu")
	rawExec := cluster.ClientOptions{ExtraHCL: "plugin \"raw_exec\" {\n  config {\n    enabled = true\n  }\n}"}
	c := cluster.Start(t, cluster.Options{Clients: 2, Client: rawExec})
	src, err := os.ReadFile(filepath.Join(cluster.RepoRoot(t), "jobs", "controller", "controller.nomad.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	job := c.RunJobVars(t, string(src), fmt.Sprintf("driver = \"raw_exec\"\nnomad_gpu = %q", cli))
	allocs := c.WaitForAllocs(t, *job.ID, 2, time.Minute)
	for _, a := range allocs {
		c.WaitForAllocStatus(t, a.ID, "running", time.Minute)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		regs, _, err := c.API().Services().Get("nomad-gpu-controller", nil)
		leaders, answered := 0.0, 0
		for _, r := range regs {
			p := &cluster.Controller{MetricsURL: fmt.Sprintf("http://%s:%d/metrics", r.Address, r.Port)}
			if v, ok := p.TryMetric(contract.MetricControllerLeader); ok {
				leaders += v
				answered++
			}
		}
		if err == nil && answered == 2 && leaders == 1 {
			return
		}
		if time.Now().After(deadline) {
			for _, a := range allocs {
				t.Logf("%s stderr:\n%s", a.ID[:8], c.AllocLogs(t, a.ID, "controller", "stderr"))
			}
			t.Fatalf("after 1m: %d registrations (%v), %d answered, leaders %v; want 2, 2, 1", len(regs), err, answered, leaders)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
