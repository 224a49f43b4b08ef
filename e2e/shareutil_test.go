package e2e

// An MPS task's device stats, as `nomad alloc status -stats` shows them,
// are its own share's load, not its GPU's: two tasks on shares of one GPU
// at different loads each see their own.

import (
	"fmt"
	"math"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/e2e/cluster"
	"github.com/nomad-gpu/nomad-gpu/e2e/harness"
)

// shareLoadJob is a service job whose task holds one MPS share and keeps
// it at util % with `nomad-gpu sim-load`.
func shareLoadJob(id, cli string, util int) string {
	return fmt.Sprintf(`
job %q {
  group "g" {
    restart {
      attempts = 0
      mode     = "fail"
    }
    task "t" {
      driver       = "gpu"
      kill_timeout = "3s"
      config {
        command = %q
        args    = ["sim-load", "--util", "%d", "--duration", "10m"]
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
}`, id, cli, util)
}

// The sim's share arithmetic (gpu/sim, cmd/nomad-gpu/simload.go): an MPS
// client with CUDA_MPS_ACTIVE_THREAD_PERCENTAGE T running `sim-load --util
// U` puts U×T/100 % of the GPU's SMs on it, which the sim reports as that
// process's SM utilisation (GetProcessUtilization, whole percent). The gpu
// driver divides its task's processes' figure by T: the task's utilisation
// of its share, U again, which it publishes for the device plugin. GPU 4
// is 4 shares, T = 25: at U = 20 and 80 the processes put 5 % and 20 % on
// the GPU (whole percent, so nothing is lost to rounding), the GPU is at
// 25 %, and each share's own figure is its task's U.
func TestMPSShareStatsAreTheTasksOwn(t *testing.T) {
	cli := cluster.RequireBinary(t, "nomad-gpu")
	c, _ := startGPUCluster(t, func(n *harness.GPUNode) {
		n.DriverHCL = fmt.Sprintf("isolation {\nunveil_paths = [%q]\n}", "rx:"+filepath.Dir(cli))
	})
	const gpuUtil = 25.0 // (20 + 80) × 25/100
	levels := map[string]int{"share-low": 20, "share-high": 80}
	for id, util := range levels {
		c.RunJob(t, shareLoadJob(id, cli, util))
	}
	allocs := map[string]*api.Allocation{}
	shares := map[string]string{} // job → the share its task holds
	for id := range levels {
		a := nextAlloc(t, c, id, 0, 2*time.Minute)
		allocs[id] = a
		var ids []string
		for _, d := range a.AllocatedResources.Tasks["t"].Devices {
			ids = append(ids, d.DeviceIDs...)
		}
		if len(ids) != 1 {
			t.Fatalf("%s holds %v, want one MPS share", id, ids)
		}
		shares[id] = ids[0]
	}
	gLow, _, okLow := contract.ParseShareID(shares["share-low"])
	gHigh, _, okHigh := contract.ParseShareID(shares["share-high"])
	if !okLow || !okHigh || gLow != gHigh || shares["share-low"] == shares["share-high"] {
		t.Fatalf("the tasks hold %v, want two shares of one GPU", shares)
	}

	// Each allocation's device stats: only its own share, whose "GPU
	// utilization" (and "MPS utilization") is its task's level and whose
	// "Physical GPU utilization" is the GPU's, both tasks'.
	near := func(v *float64, want float64) bool { return v != nil && math.Abs(*v-want) <= 1 }
	var last []string
	deadline := time.Now().Add(2 * time.Minute)
	for {
		last = last[:0]
		ok := true
		for id, util := range levels {
			st := allocShareStats(c, allocs[id])
			last = append(last, fmt.Sprintf("%s (%d %%): %s", id, util, statsText(st)))
			own := st[shares[id]]
			if len(st) != 1 || own == nil ||
				!near(own["GPU utilization"], float64(util)) || !near(own["MPS utilization"], float64(util)) ||
				!near(own["Physical GPU utilization"], gpuUtil) {
				ok = false
			}
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 2m, allocation device stats:\n%s\nwant each task's own share at its level, GPU utilization %v (Physical GPU utilization %v, both tasks)",
				strings.Join(last, "\n"), levels, gpuUtil)
		}
		time.Sleep(time.Second)
	}
	t.Logf("allocation device stats:\n%s", strings.Join(last, "\n"))

	// The GPU's two free shares, in the node's stats: no task, 0; the GPU's
	// figure still on them.
	hs, err := c.API().Nodes().Stats(allocs["share-low"].NodeID, nil)
	if err != nil {
		t.Fatal(err)
	}
	free := 0
	for _, g := range hs.DeviceStats {
		for id, ds := range g.InstanceStats {
			if gpu, _, ok := contract.ParseShareID(id); !ok || gpu != gLow || id == shares["share-low"] || id == shares["share-high"] {
				continue
			}
			free++
			v := statFloats(ds)
			if u := v["GPU utilization"]; u == nil || *u != 0 || !near(v["Physical GPU utilization"], gpuUtil) {
				t.Errorf("free share %s: %s, want GPU utilization 0, Physical GPU utilization %v", id, floatsText(v), gpuUtil)
			}
		}
	}
	if free != 2 {
		t.Errorf("%d free shares of %s in the node's stats, want 2", free, gLow)
	}

	for id := range levels {
		c.StopJob(t, id, false)
	}
	for _, a := range allocs {
		c.WaitForAllocStatus(t, a.ID, "complete", time.Minute)
	}
}

// allocShareStats is the allocation's task "t"'s device stats, as `nomad
// alloc status -stats` reads them: its devices' percentages by device ID;
// nil when they cannot be read yet.
func allocShareStats(c *cluster.Cluster, a *api.Allocation) map[string]map[string]*float64 {
	st, err := c.API().Allocations().Stats(a, nil)
	if err != nil || st.Tasks["t"] == nil || st.Tasks["t"].ResourceUsage == nil {
		return nil
	}
	out := map[string]map[string]*float64{}
	for _, g := range st.Tasks["t"].ResourceUsage.DeviceStats {
		if g == nil {
			continue
		}
		for id, ds := range g.InstanceStats {
			out[id] = statFloats(ds)
		}
	}
	return out
}

// statFloats is a device's percentage stats by name.
func statFloats(ds *api.DeviceStats) map[string]*float64 {
	out := map[string]*float64{}
	if ds == nil || ds.Stats == nil {
		return out
	}
	for name, v := range ds.Stats.Attributes {
		if v != nil && v.FloatNumeratorVal != nil && v.Unit == "%" {
			out[name] = v.FloatNumeratorVal
		}
	}
	return out
}

func statsText(st map[string]map[string]*float64) string {
	if st == nil {
		return "unavailable"
	}
	var parts []string
	for id, v := range st {
		parts = append(parts, id+" {"+floatsText(v)+"}")
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

func floatsText(v map[string]*float64) string {
	var parts []string
	for name, f := range v {
		parts = append(parts, fmt.Sprintf("%s=%v", name, *f))
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}
