package e2e

// Moving checkpointed work against a real Nomad: two nodes of 4 GPUs
// sharing a checkpoint root, two 1-GPU jobs running on each, and a 4-GPU
// job queued. The controller moves two movable jobs off one node, the
// 4-GPU job runs there, and the moved jobs resume from their checkpoints;
// jobs that did not opt in are never moved; a budget of one consolidation
// an hour holds a second one.

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/e2e/cluster"
	"github.com/nomad-gpu/nomad-gpu/e2e/harness"
	"github.com/nomad-gpu/nomad-gpu/internal/testenv"
)

// moveCluster is two sim nodes, gpu-1 and gpu-2, of 4 whole GPUs each,
// sharing a checkpoint root; it returns their node IDs.
func moveCluster(t *testing.T) (*cluster.Cluster, [2]string) {
	t.Helper()
	return moveClusterWith(t, nil, "")
}

// moveClusterWith is moveCluster with each node's device plugin config
// extended by deviceHCL (when not nil) and clientHCL in each client block.
// A node whose plugin follows layouts is ready once the servers show its
// 8 GPUs' layout groups: the controller plans on them.
func moveClusterWith(t *testing.T, deviceHCL func(harness.GPUNode) string, clientHCL string) (*cluster.Cluster, [2]string) {
	t.Helper()
	c, ids := fourGPUCluster(t, 2, func(c *cluster.Cluster, n *harness.GPUNode) {
		n.DriverHCL = fmt.Sprintf("nomad {\naddress = %q\n}", c.Server().HTTPAddr())
		if deviceHCL != nil {
			n.DeviceHCL = deviceHCL(*n)
		}
	}, clientHCL, func(n *api.Node) bool { return deviceHCL == nil || len(layoutGroups(n)) == 8 })
	return c, [2]string{ids[0], ids[1]}
}

// fourGPUCluster is a server and count clients gpu-1 … gpu-<count>, each
// a fourGPUNode sharing one checkpoint root, shaped by edit once the
// server runs, with clientHCL in each client block; ready is what a
// node must show besides a healthy gpu driver and 4 whole GPUs. It
// returns the nodes' IDs.
func fourGPUCluster(t *testing.T, count int, edit func(*cluster.Cluster, *harness.GPUNode), clientHCL string, ready func(*api.Node) bool) (*cluster.Cluster, []string) {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Skip(t, testenv.Root, "e2e: the gpu driver needs a root Nomad client")
	}
	cluster.RequirePlugin(t, "nomad-device-gpu")
	cluster.RequirePlugin(t, "nomad-driver-gpu")
	shared := filepath.Join(harness.NewGPUNode(t).Dir, "shared-checkpoints")
	c := cluster.Start(t, cluster.Options{Clients: 0})
	var opts []cluster.ClientOptions
	for i := range count {
		n := fourGPUNode(t)
		n.SharedCheckpoints = shared
		edit(c, &n)
		opts = append(opts, cluster.ClientOptions{Name: fmt.Sprintf("gpu-%d", i+1), PluginDir: cluster.PluginDir(t), ExtraHCL: n.HCL(t), ClientHCL: clientHCL})
	}
	c.StartClients(t, opts...)
	ids := make([]string, count)
	for i := range ids {
		ids[i] = c.WaitForNode(t, fmt.Sprintf("gpu-%d", i+1), func(n *api.Node) bool {
			d := n.Drivers["gpu"]
			return d != nil && d.Healthy && wholeGPUsOf(n) == 4 && ready(n)
		}, 2*time.Minute).ID
	}
	return c, ids
}

// movableJob is counterJob (batch, 1 GPU, checkpointing) with job meta
// nomad_gpu_movable = "true" where movable.
func movableJob(id string, movable bool) string {
	hcl := counterJob(id, "batch", 50, 1, true)
	if !movable {
		return hcl
	}
	return strings.Replace(hcl, "  group \"g\" {", "  meta {\n    nomad_gpu_movable = \"true\"\n  }\n  group \"g\" {", 1)
}

// runOn runs the jobs on one node, the other made ineligible meanwhile,
// and waits until each counts.
func runOn(t *testing.T, c *cluster.Cluster, node, other string, jobs ...string) map[string]*api.Allocation {
	t.Helper()
	setEligible(t, c, other, false)
	defer setEligible(t, c, other, true)
	out := map[string]*api.Allocation{}
	for _, j := range jobs {
		c.RunJob(t, movableJob(j, strings.HasPrefix(j, "train")))
		a := nextAlloc(t, c, j, 0, 2*time.Minute)
		if a.NodeID != node {
			t.Fatalf("%s placed on %s, want %s", j, a.NodeID, node)
		}
		out[j] = a
	}
	for _, a := range out {
		waitProgress(t, c, a.ID, 20)
	}
	return out
}

func setEligible(t *testing.T, c *cluster.Cluster, node string, eligible bool) {
	t.Helper()
	if _, err := c.API().Nodes().ToggleEligibility(node, eligible, nil); err != nil {
		t.Fatalf("node %s eligibility %v: %v", node, eligible, err)
	}
}

// queued is how many allocations of the job's group g wait.
func queued(t *testing.T, c *cluster.Cluster, job string) int {
	t.Helper()
	s, _, err := c.API().Jobs().Summary(job, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s.Summary["g"].Queued
}

// holdsWaiting checks for d that the job stays queued and no allocation
// of jobs is stopped.
func holdsWaiting(t *testing.T, c *cluster.Cluster, job string, allocs map[string]*api.Allocation, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		time.Sleep(time.Second)
		for j, a := range allocs {
			if got, _, err := c.API().Allocations().Info(a.ID, nil); err != nil || got.DesiredStatus != api.AllocDesiredStatusRun {
				t.Fatalf("%s's allocation was stopped (%v): %s", j, err, cluster.AllocSummary(got))
			}
		}
	}
	if n := queued(t, c, job); n != 1 {
		t.Fatalf("%s: %d queued, want it still waiting", job, n)
	}
}

func TestConsolidation(t *testing.T) {
	c, nodes := moveCluster(t)
	ctl := c.StartController(t, "controller", "-tick", "200ms", "-move-budget-hour", "1", "-move-settle", "30s", "-log-level", "debug")

	// Jobs that did not opt in are never moved: the 4-GPU job waits.
	fixed := runOn(t, c, nodes[0], nodes[1], "fixed-1", "fixed-2")
	for j, a := range runOn(t, c, nodes[1], nodes[0], "fixed-3", "fixed-4") {
		fixed[j] = a
	}
	c.RunJob(t, holderJob2("hpc-0", 50, 4, 10*time.Second))
	holdsWaiting(t, c, "hpc-0", fixed, 15*time.Second)
	for _, j := range []string{"hpc-0", "fixed-1", "fixed-2", "fixed-3", "fixed-4"} {
		c.StopJob(t, j, true)
	}

	// Movable ones are: two move off one node, the 4-GPU job runs there.
	train := runOn(t, c, nodes[0], nodes[1], "train-1", "train-2")
	for j, a := range runOn(t, c, nodes[1], nodes[0], "train-3", "train-4") {
		train[j] = a
	}
	queuedAt := time.Now()
	c.RunJob(t, holderJob2("hpc-1", 50, 4, 5*time.Minute))
	hpc := nextAlloc(t, c, "hpc-1", 0, 90*time.Second)
	if d := time.Since(queuedAt); d > 60*time.Second {
		t.Errorf("the 4-GPU job ran %s after it was queued, want within 60s", d.Round(time.Second))
	}
	var moved []string
	for j, a := range train {
		got, _, err := c.API().Allocations().Info(a.ID, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got.DesiredStatus == api.AllocDesiredStatusRun {
			continue
		}
		moved = append(moved, j)
		if a.NodeID != hpc.NodeID {
			t.Errorf("%s was moved off %s; the 4-GPU job runs on %s", j, a.NodeID, hpc.NodeID)
		}
		waitTerminal(t, c, a.ID)
		before := counts(c.AllocLogs(t, a.ID, "t", "stdout"))
		next := nextAlloc(t, c, j, 1, 2*time.Minute)
		log := c.WaitForAllocLogs(t, next.ID, "t", "stdout", "restored=", time.Minute)
		if got := counts(log)["restored"]; got != before["committed"] || got == 0 {
			t.Errorf("%s moved: its next run restored %d, it committed %d (progress lost)", j, got, before["committed"])
		}
		if next.NodeID == hpc.NodeID {
			t.Errorf("%s's next run is on the node freed for the 4-GPU job", j)
		}
	}
	if len(moved) != 2 {
		t.Fatalf("moved %v, want two jobs of one node", moved)
	}
	if got := ctl.MetricByLabel(t, contract.MetricControllerMoves, contract.LabelMoveReason)["consolidate"]; got != 2 {
		t.Errorf("%s{reason=consolidate} = %v, want 2", contract.MetricControllerMoves, got)
	}
	if !strings.Contains(ctl.Log(), "moved alloc") {
		t.Errorf("the controller logged no move")
	}

	// The budget of one consolidation an hour is spent: spread 2 and 2
	// again, a second 4-GPU job waits.
	for _, j := range append(moved, "hpc-1") {
		c.StopJob(t, j, true)
	}
	free, other := hpc.NodeID, nodes[0]
	if free == nodes[0] {
		other = nodes[1]
	}
	more := runOn(t, c, free, other, "train-5", "train-6")
	c.RunJob(t, holderJob2("hpc-2", 50, 4, 10*time.Second))
	holdsWaiting(t, c, "hpc-2", more, 15*time.Second)
	if got := ctl.MetricByLabel(t, contract.MetricControllerMoves, contract.LabelMoveReason)["consolidate"]; got != 2 {
		t.Errorf("moves after the budget was spent: %v, want still 2", got)
	}
}
