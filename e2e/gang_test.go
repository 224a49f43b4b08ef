package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/e2e/cluster"
	"github.com/nomad-gpu/nomad-gpu/e2e/harness"
	"github.com/nomad-gpu/nomad-gpu/topview"
)

// runGang registers jobs/examples/gang-sim.nomad.hcl, the gang users are
// shown, running the build's nomad-gpu sim-train, as job id with each
// member asking gpus whole GPUs; without gang, the same job with no gang
// meta (a plain batch job at count 0). edit, when set, changes the job
// before it is registered.
func runGang(t *testing.T, c *cluster.Cluster, id string, gpus int, gang bool, edit ...func(*api.Job)) *api.Job {
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
	job.ID, job.Name = new(id), new(id)
	job.TaskGroups[0].Tasks[0].Resources.Devices[0].Count = new(uint64(gpus))
	if !gang {
		delete(job.Meta, contract.MetaGang)
	}
	for _, e := range edit {
		e(job)
	}
	if _, _, err := c.API().Jobs().Register(job, nil); err != nil {
		t.Fatalf("registering %s: %v", id, err)
	}
	return job
}

// unveilNomadGPU is driver HCL letting tasks run the build's nomad-gpu
// (sim-train), as make dev does.
func unveilNomadGPU(t *testing.T) string {
	return fmt.Sprintf("isolation {\nunveil_paths = [%q]\n}", "rx:"+filepath.Dir(cluster.RequireBinary(t, "nomad-gpu")))
}

// liveAllocs are the job's allocations that hold or will hold devices.
func liveAllocs(t *testing.T, c *cluster.Cluster, id string) []*api.AllocationListStub {
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

// queueEntry is `nomad-gpu top -json`'s queue entry of job's first
// group, nil when it has none.
func queueEntry(t *testing.T, c *cluster.Cluster, job string) *topview.QueueEntry {
	t.Helper()
	v := topJSON(t, c)
	for i := range v.Queue {
		if v.Queue[i].Job == job {
			return &v.Queue[i]
		}
	}
	return nil
}

// neverPlaced fails the test when job has an allocation holding or about
// to hold devices within the next d, sampled every 250 ms; while says
// why it should have none.
func neverPlaced(t *testing.T, c *cluster.Cluster, job string, d time.Duration, while string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if n := len(liveAllocs(t, c, job)); n != 0 {
			t.Fatalf("%s has %d allocations while %s", job, n, while)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// Gangs against real Nomad, on a node of 4 whole GPUs: a gang of two
// 1-GPU members is admitted by the controller and both run; a second gang
// of two 2-GPU members does not fit beside it and is never placed in part
// while it waits (stock Nomad would place one member on the 2 free GPUs);
// once the first is stopped, the second is admitted and both its members
// run.
func TestGangAdmission(t *testing.T) {
	c, _ := startGPUCluster(t, func(n *harness.GPUNode) { n.DriverHCL = unveilNomadGPU(t) })
	ctl := c.StartController(t, "controller", "-tick", "200ms", "-preemption-cooldown", "0", "-layouts=false", "-moves=false")

	runGang(t, c, "gang-a", 1, true)
	for _, a := range c.WaitForAllocs(t, "gang-a", 2, time.Minute) {
		c.WaitForAllocStatus(t, a.ID, "running", time.Minute)
	}

	runGang(t, c, "gang-b", 2, true)
	neverPlaced(t, c, "gang-b", 8*time.Second, "only one of its members fits: placed in part")
	// No evaluation says gang-b waits; the queue (top, the APM) counts
	// its members all the same.
	if q := queueEntry(t, c, "gang-b"); q == nil || q.Count != 2 || !strings.HasPrefix(q.Reason, "gang:") {
		t.Errorf("top -json's queue entry for the waiting gang-b: %+v; want its 2 members, as a gang", q)
	}
	if log := ctl.Log(); !strings.Contains(log, "gang-waiting") || !strings.Contains(log, "gang-b") {
		t.Errorf("no gang-waiting decision for gang-b in the controller's log")
	}
	waitingAs(t, c, "default", "gang-b", "gang", "gang does not fit: ", 30*time.Second)

	if _, _, err := c.API().Jobs().Deregister("gang-a", false, nil); err != nil {
		t.Fatalf("stopping gang-a: %v", err)
	}
	// Within the minute a refused gang waits for another plan while the
	// free GPUs stay as they were: the freed GPUs make it planned at once.
	for _, a := range c.WaitForAllocs(t, "gang-b", 2, 40*time.Second) {
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
	runGang(t, c, "gang", 1, true)
	runGang(t, c, "plain", 1, false)
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

// Locality against real Nomad, on three nodes of 4 GPUs in racks a, b, b
// (dynamic node meta): a gang of two 4-GPU members that asks for one
// rack is not placed while rack b has a 2-GPU job on it, though stock
// Nomad would place it across racks a and b; once that job stops, the
// gang is admitted in rack b, its job pinned there.
func TestGangLocality(t *testing.T) {
	c := gangCluster(t)
	nodes, _, err := c.API().Nodes().List(nil)
	if err != nil {
		t.Fatal(err)
	}
	rackOf := map[string]string{"gpu-1": "a", "gpu-2": "b", "gpu-3": "b"}
	for _, n := range nodes {
		rack := rackOf[n.Name]
		if _, err := c.API().Nodes().Meta().Apply(&api.NodeMetaApplyRequest{NodeID: n.ID, Meta: map[string]*string{"rack": &rack}}, nil); err != nil {
			t.Fatalf("setting %s's meta.rack: %v", n.Name, err)
		}
	}
	// The client hands its new meta to the servers a moment later: the
	// controller starts once they have every node's.
	for _, n := range nodes {
		c.WaitForNode(t, n.Name, func(node *api.Node) bool { return node.Meta["rack"] == rackOf[n.Name] }, time.Minute)
	}
	pinned := strings.Replace(holderJob2("filler", 85, 2, time.Hour), "  group \"g\" {",
		"  constraint {\n    attribute = \"${node.unique.name}\"\n    value = \"gpu-3\"\n  }\n  group \"g\" {", 1)
	c.RunJob(t, pinned)
	c.WaitForAllocStatus(t, c.WaitForAllocs(t, "filler", 1, time.Minute)[0].ID, "running", 2*time.Minute)
	ctl := c.StartController(t, "controller", "-tick", "200ms", "-preemption-cooldown", "0", "-layouts=false", "-moves=false")
	runGang(t, c, "train", 4, true, func(j *api.Job) { j.Meta[contract.MetaGangLocality] = "${meta.rack}" })

	neverPlaced(t, c, "train", 8*time.Second, "no rack has 8 free GPUs")
	if log := ctl.Log(); !strings.Contains(log, "in ${meta.rack}=b") || !strings.Contains(log, "in ${meta.rack}=a") {
		t.Errorf("the controller's log does not show the gang planned in each rack:\n%s", log)
	}

	c.StopJob(t, "filler", true)
	for _, s := range c.WaitForAllocs(t, "train", 2, 40*time.Second) {
		a := c.WaitForAllocStatus(t, s.ID, "running", time.Minute)
		if rackOf[a.NodeName] != "b" {
			t.Errorf("member %s placed on %s, rack %q; want rack b", a.Name, a.NodeName, rackOf[a.NodeName])
		}
	}
	job, _, err := c.API().Jobs().Info("train", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(job.Constraints, func(c *api.Constraint) bool { return c.LTarget == "${meta.rack}" && c.RTarget == "b" }) {
		t.Errorf("the admitted job's constraints %v do not pin rack b", job.Constraints)
	}
	c.StopJob(t, "train", true)
}

// A gang that can never be admitted is reported, never left to wait in
// silence: against real Nomad, on a node of 4 whole GPUs, a gang with no
// checkpoint block, one whose locality no node has, and one whose members
// ask more GPUs than any node has each get a gang-invalid decision naming
// the field or the group, and none is ever placed.
func TestGangInvalid(t *testing.T) {
	c, _ := startGPUCluster(t, func(n *harness.GPUNode) { n.DriverHCL = unveilNomadGPU(t) })
	ctl := c.StartController(t, "controller", "-tick", "200ms", "-preemption-cooldown", "0", "-layouts=false", "-moves=false")
	for _, tc := range []struct {
		job  string
		gpus int
		edit func(*api.Job)
		want string
	}{
		{"no-checkpoint", 1, func(j *api.Job) { delete(j.TaskGroups[0].Tasks[0].Config, "checkpoint") }, "config.checkpoint: none"},
		{"no-rack", 1, func(j *api.Job) { j.Meta[contract.MetaGangLocality] = "${meta.rack}" }, "meta." + contract.MetaGangLocality + ": no node of the job's pool and datacenters has ${meta.rack}"},
		{"too-big", 9, func(*api.Job) {}, "a member never fits: asks 9"},
	} {
		runGang(t, c, tc.job, tc.gpus, true, tc.edit)
		deadline := time.Now().Add(30 * time.Second)
		for !invalidDecision(ctl.Log(), tc.job, tc.want) {
			if time.Now().After(deadline) {
				t.Fatalf("no gang-invalid decision for %s saying %q in 30 s; the controller's log:\n%s", tc.job, tc.want, ctl.Log())
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
	for _, job := range []string{"no-checkpoint", "no-rack", "too-big"} {
		neverPlaced(t, c, job, 2*time.Second, "its spec can never be admitted")
	}
}

// invalidDecision says whether log has a gang-invalid decision for job
// whose line says want (quotes in a logged reason are escaped: want has
// none).
func invalidDecision(log, job, want string) bool {
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "gang-invalid") && strings.Contains(l, job) && strings.Contains(l, want) {
			return true
		}
	}
	return false
}
