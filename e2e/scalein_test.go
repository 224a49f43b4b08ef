package e2e

// Scale-in by consolidation against a real Nomad and nomad-autoscaler:
// two sim nodes of the autoscaled pool each run two 1-GPU checkpointing
// jobs, well above the idle floor, with an empty queue. On one node both
// are movable; on the other one is not. The controller moves the movable
// node's two onto the other node, marks the emptied node, the APM counts
// it in nodes_removable, gpu-queue's removable check scales the pool in,
// and the target removes exactly that node. The moved jobs resume from
// their checkpoints; the node of the job that may not move is never
// removed, nor is that job stopped.

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/bench/tracereplay"
	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/e2e/cluster"
	"github.com/nomad-gpu/nomad-gpu/e2e/harness"
)

// poolCounterJob is counterJob (batch, 1 GPU, checkpointing) in the gpu
// node pool, movable where asked.
func poolCounterJob(id string, movable bool) string {
	hcl := strings.Replace(movableJob(id, movable), "  type     =", "  node_pool = \"gpu\"\n  type     =", 1)
	if !strings.Contains(hcl, `node_pool = "gpu"`) {
		panic("counterJob's layout changed: no node_pool set")
	}
	return hcl
}

func TestScaleInByConsolidation(t *testing.T) {
	c, pool, plugins := simPoolCluster(t)
	shared := harness.NewGPUNode(t).CheckpointRoot()
	pool.Configure = func(n *harness.GPUNode) {
		n.DriverHCL = fmt.Sprintf("nomad {\naddress = %q\n}", c.Server().HTTPAddr())
		n.SharedCheckpoints = shared
	}
	pool.ScaleTo(t, 2, 3*time.Minute)
	names := pool.ReadyNodes()
	slices.Sort(names)
	var ids [2]string
	for i, name := range names {
		ids[i] = c.WaitForNode(t, name, func(n *api.Node) bool {
			d := n.Drivers["gpu"]
			return d != nil && d.Healthy && wholeGPUsOf(n) > 0
		}, 2*time.Minute).ID
	}

	// Two movable jobs on the first node; one movable and one that may
	// not move on the second.
	allocs := map[string]*api.Allocation{}
	for i, jobs := range [][]string{{"train-1", "train-2"}, {"train-3", "fixed-1"}} {
		setEligible(t, c, ids[1-i], false)
		for _, j := range jobs {
			c.RunJob(t, poolCounterJob(j, strings.HasPrefix(j, "train")))
			a := nextAlloc(t, c, j, 0, 2*time.Minute)
			if a.NodeID != ids[i] {
				t.Fatalf("%s placed on %s, want %s", j, a.NodeID, names[i])
			}
			allocs[j] = a
		}
		setEligible(t, c, ids[1-i], true)
	}
	for _, a := range allocs {
		waitProgress(t, c, a.ID, 20)
	}

	ctl := c.StartController(t, "controller", "-tick", "200ms", "-log-level", "debug",
		"-scale-in-pools", "gpu", "-scale-in-quiet", "5s", "-scale-in-min-nodes", "1", "-scale-in-wait", "3m")
	policy := harness.GPUQueuePolicy(pool.URL(), 1, 2, 5, tracereplay.Policy{
		EvalInterval: 2 * time.Second, Cooldown: 4 * time.Second, MaxScaleUp: 2, MaxScaleDown: 1,
		IdleFloor: 30, ScaleInAfter: 15 * time.Second,
	}, 20*time.Second, false)
	policy = harness.WithRemovable(policy)
	c.StartAutoscaler(t, cluster.AutoscalerOptions{PluginDir: plugins, HCL: harness.AutoscalerAgentHCL,
		Policies: map[string]string{"gpu-pool.hcl": policy}})

	// The first node is emptied and removed; nothing else is. Meanwhile
	// the moved jobs' logs are read while their node is there: the last
	// reading says what each had done, and once stopped what it committed.
	seen := map[string]map[string]int{}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		for _, j := range []string{"train-1", "train-2"} {
			if log, err := c.TryAllocLogs(allocs[j].ID, "t", "stdout"); err == nil {
				seen[j] = counts(log)
			}
		}
		_, _, removed, errs := pool.Snapshot()
		if len(errs) > 0 {
			t.Fatalf("sim pool errors: %v", errs)
		}
		if len(removed) > 0 {
			if len(removed) != 1 || removed[0].Name != names[0] || len(removed[0].Running) != 0 {
				t.Fatalf("removed %+v; want %s alone, running nothing", removed, names[0])
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no node removed in 3m; controller log:\n%s", tail(ctl.Log(), 40))
		}
		time.Sleep(250 * time.Millisecond)
	}
	if !strings.Contains(ctl.Log(), "scale-in-marked") {
		t.Error("the controller did not log marking the node for removal")
	}
	if got := ctl.MetricByLabel(t, contract.MetricControllerMoves, contract.LabelMoveReason)["scale-in"]; got != 2 {
		t.Errorf("%s{reason=scale-in} = %v, want 2", contract.MetricControllerMoves, got)
	}

	// The moved jobs resume where they committed (read before the node
	// went), or at least where they were last seen, on the second node.
	for _, j := range []string{"train-1", "train-2"} {
		before := seen[j]
		next := nextAlloc(t, c, j, 1, 2*time.Minute)
		log := c.WaitForAllocLogs(t, next.ID, "t", "stdout", "restored=", time.Minute)
		got := counts(log)["restored"]
		t.Logf("%s: last seen before the move %v; restored %d", j, before, got)
		if committed, ok := before["committed"]; ok && got != committed {
			t.Errorf("%s moved: its next run restored %d, it committed %d (progress lost)", j, got, committed)
		}
		if stopped, ok := before["stopped"]; ok && stopped-got > 1 {
			t.Errorf("%s moved: stopped at %d, its next run restored %d: more than one step lost", j, stopped, got)
		}
		if got < before["progress"] || got == 0 {
			t.Errorf("%s moved: its next run restored %d, it had counted %d before the move (progress lost)", j, got, before["progress"])
		}
		if next.NodeID != ids[1] {
			t.Errorf("%s's next run is on %s, want %s", j, next.NodeID, names[1])
		}
	}
	// The jobs of the second node were never stopped, and it stays.
	time.Sleep(10 * time.Second)
	for _, j := range []string{"train-3", "fixed-1"} {
		if got, _, err := c.API().Allocations().Info(allocs[j].ID, nil); err != nil || got.DesiredStatus != api.AllocDesiredStatusRun {
			t.Errorf("%s's allocation was stopped (%v): %s", j, err, cluster.AllocSummary(got))
		}
	}
	if _, _, removed, _ := pool.Snapshot(); len(removed) != 1 {
		t.Errorf("removed %+v; want the first node alone", removed)
	}
}
