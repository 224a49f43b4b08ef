package e2e

// Relief of an overloaded MPS GPU against a real Nomad: one sim node with
// two GPUs of 4 MPS shares; three movable checkpointing clients load one
// GPU with `nomad-gpu sim-load` (each 100 % of its 25 % share: the GPU at
// 75 %), the other has none. The controller holds the busy GPU, moves one
// client, which resumes from its checkpoint on the other GPU, and the
// busy GPU's utilisation falls under the threshold.

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/e2e/cluster"
	"github.com/nomad-gpu/nomad-gpu/e2e/harness"
)

// loadedClientJob is a movable batch job whose task holds one MPS share,
// loads it fully with sim-load and counts, checkpointing (counterScript).
func loadedClientJob(id, cli string) string {
	script := fmt.Sprintf("%q sim-load --util 100 --duration 10m &\n%s", cli, counterScript)
	return fmt.Sprintf(`
job %q {
  type = "batch"
  meta {
    nomad_gpu_movable = "true"
  }
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
      kill_timeout = "20s"
      config {
        command = "/bin/sh"
        args    = ["-c", %q]
        checkpoint {
          commit_timeout = "15s"
        }
      }
      resources {
        cpu    = 50
        memory = 64
        device "nvidia/mps" {
          count = 1
        }
      }
    }
  }
}`, id, script)
}

// mpsShares is the node's MPS shares by GPU UUID: healthy or not.
func mpsShares(n *api.Node) map[string]map[string]bool {
	out := map[string]map[string]bool{}
	for _, d := range n.NodeResources.Devices {
		if d.Type != contract.SliceMPS {
			continue
		}
		for _, in := range d.Instances {
			if uuid, _, ok := contract.ParseShareID(in.ID); ok {
				if out[uuid] == nil {
					out[uuid] = map[string]bool{}
				}
				out[uuid][in.ID] = in.Healthy
			}
		}
	}
	return out
}

// allHealthy: every share of the GPU is healthy (want true) or none is.
func allHealthy(n *api.Node, gpu string, want bool) bool {
	shares := mpsShares(n)[gpu]
	for _, h := range shares {
		if h != want {
			return false
		}
	}
	return len(shares) > 0
}

// setHold writes (until set) or removes a GPU's hold in the node's metadata.
func setHold(t *testing.T, c *cluster.Cluster, node, gpu string, until *string) {
	t.Helper()
	meta := map[string]*string{contract.MetaHoldPrefix + gpu: until}
	if _, err := c.API().Nodes().Meta().Apply(&api.NodeMetaApplyRequest{NodeID: node, Meta: meta}, nil); err != nil {
		t.Fatal(err)
	}
}

// gpuUtil is the GPU's utilisation in the node's stats (every share of it
// carries it); false when not read.
func gpuUtil(c *cluster.Cluster, node, gpu string) (float64, bool) {
	hs, err := c.API().Nodes().Stats(node, nil)
	if err != nil {
		return 0, false
	}
	for _, g := range hs.DeviceStats {
		for id, ds := range g.InstanceStats {
			if u, _, ok := contract.ParseShareID(id); ok && u == gpu {
				if v := statFloats(ds)[contract.StatPhysGPUUtil]; v != nil {
					return *v, true
				}
			}
		}
	}
	return 0, false
}

// shareGPU is the GPU of the MPS share the allocation's task holds.
func shareGPU(t *testing.T, a *api.Allocation) string {
	t.Helper()
	for _, d := range a.AllocatedResources.Tasks["t"].Devices {
		for _, id := range d.DeviceIDs {
			if u, _, ok := contract.ParseShareID(id); ok {
				return u
			}
		}
	}
	t.Fatalf("alloc %s holds no MPS share", a.ID)
	return ""
}

func TestReliefOfOverloadedMPSGPU(t *testing.T) {
	cli := cluster.RequireBinary(t, "nomad-gpu")
	layout := harness.NodeLayout{MPS: []int{4, 5}, MPSShares: 4}
	c, _ := startGPUClusterWhen(t, func(n *api.Node) bool { return len(mpsShares(n)) == 2 }, func(n *harness.GPUNode) {
		n.Layout = &layout
		n.DeviceHCL = layoutNodeHCL(*n, "1s")
		n.DriverHCL = fmt.Sprintf("isolation {\nunveil_paths = [%q]\n}", "rx:"+filepath.Dir(cli))
	})
	n := c.WaitForNode(t, "client-1", func(n *api.Node) bool { return len(mpsShares(n)) == 2 }, time.Minute)
	gpus := slices.Sorted(func(yield func(string) bool) {
		for u := range mpsShares(n) {
			if !yield(u) {
				return
			}
		}
	})
	busy, idle := gpus[0], gpus[1]

	// The three clients on one GPU: the other held meanwhile, as the
	// controller would hold it (the plugin follows the same key).
	far := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	setHold(t, c, n.ID, idle, &far)
	c.WaitForNode(t, "client-1", func(n *api.Node) bool { return allHealthy(n, idle, false) }, time.Minute)
	clients := map[string]*api.Allocation{}
	for i := range 3 {
		id := fmt.Sprintf("client-%d", i)
		c.RunJob(t, loadedClientJob(id, cli))
		clients[id] = nextAlloc(t, c, id, 0, 2*time.Minute)
		if g := shareGPU(t, clients[id]); g != busy {
			t.Fatalf("%s placed on %s, want %s", id, g, busy)
		}
	}
	setHold(t, c, n.ID, idle, nil)
	c.WaitForNode(t, "client-1", func(n *api.Node) bool { return allHealthy(n, idle, true) }, time.Minute)
	for _, a := range clients {
		waitProgress(t, c, a.ID, 20)
	}
	waitUtil(t, c, n.ID, busy, func(u float64) bool { return u >= 70 }, "at least 70 (three clients at 25 % each)")

	ctl := c.StartController(t, "controller", "-tick", "200ms", "-layouts=false", "-relief-high", "60", "-relief-low", "30",
		"-relief-window", "5s", "-relief-interval", "1s", "-log-level", "debug")

	// One client moves: stopped, its next run on the idle GPU, resumed
	// from what it committed.
	var moved string
	deadline := time.Now().Add(90 * time.Second)
	for moved == "" {
		for id, a := range clients {
			if got, _, err := c.API().Allocations().Info(a.ID, nil); err == nil && got.DesiredStatus != api.AllocDesiredStatusRun {
				moved = id
			}
		}
		if moved == "" && time.Now().After(deadline) {
			t.Fatalf("no client moved within 90s; controller log:\n%s", ctl.Log())
		}
		time.Sleep(500 * time.Millisecond)
	}
	waitTerminal(t, c, clients[moved].ID)
	before := counts(c.AllocLogs(t, clients[moved].ID, "t", "stdout"))
	next := nextAlloc(t, c, moved, 1, 2*time.Minute)
	if g := shareGPU(t, next); g != idle {
		t.Errorf("%s's next run holds a share of %s, want the idle GPU %s", moved, g, idle)
	}
	log := c.WaitForAllocLogs(t, next.ID, "t", "stdout", "restored=", time.Minute)
	if got := counts(log)["restored"]; got != before["committed"] || got == 0 {
		t.Errorf("%s moved: its next run restored %d, it committed %d (progress lost)", moved, got, before["committed"])
	}

	// The busy GPU falls under the threshold; no other client moves; the
	// hold is gone.
	waitUtil(t, c, n.ID, busy, func(u float64) bool { return u < 60 }, "under 60 (two clients left)")
	deadline = time.Now().Add(30 * time.Second)
	for {
		meta, err := c.API().Nodes().Meta().Read(n.ID, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, held := meta.Dynamic[contract.MetaHoldPrefix+busy]; !held {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the hold on %s is still in the node's metadata 30s after the move", busy)
		}
		time.Sleep(500 * time.Millisecond)
	}
	time.Sleep(10 * time.Second) // two windows: a second relief would be planned by now
	if got := ctl.MetricByLabel(t, contract.MetricControllerMoves, contract.LabelMoveReason)["relief"]; got != 1 {
		t.Errorf("%s{reason=relief} = %v, want 1", contract.MetricControllerMoves, got)
	}
	for id, a := range clients {
		if id == moved {
			continue
		}
		if got, _, err := c.API().Allocations().Info(a.ID, nil); err != nil || got.DesiredStatus != api.AllocDesiredStatusRun {
			t.Errorf("%s was stopped too (%v)", id, err)
		}
	}
	if !strings.Contains(ctl.Log(), "moved alloc") {
		t.Errorf("the controller logged no move")
	}
}

// waitUtil waits up to a minute for the GPU's utilisation in the node's
// stats to meet ok.
func waitUtil(t *testing.T, c *cluster.Cluster, node, gpu string, ok func(float64) bool, want string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		u, read := gpuUtil(c, node, gpu)
		if read && ok(u) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("GPU %s's utilisation is %v (read: %v) after a minute, want %s", gpu, u, read, want)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
