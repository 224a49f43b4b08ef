package e2e

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
)

// The jobspecs in jobs/examples are what docs/install.md tells people to
// run: each must place and run on a simulated GPU node and print its GPU
// environment. sim-load.nomad.hcl runs bin/nomad-gpu, unveiled as make dev
// does, and its GPU's utilisation must follow the load. A gang
// (gang-sim.nomad.hcl) waits at count 0 for the controller's admission
// (TestGangAdmission, TestGangLifecycle); with no controller here,
// registered, it must place nothing.
func TestExampleJobs(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(cluster.RepoRoot(t), "jobs", "examples", "*.nomad.hcl"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no example jobs: %v", err)
	}
	cli := cluster.RequireBinary(t, "nomad-gpu")
	c, _ := startGPUCluster(t, func(n *harness.GPUNode) {
		n.DriverHCL = fmt.Sprintf("isolation {\nunveil_paths = [%q]\n}", "rx:"+filepath.Dir(cli))
	})
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var vars string
			if b := filepath.Base(f); b == "sim-load.nomad.hcl" || b == "gang-sim.nomad.hcl" {
				vars = fmt.Sprintf("nomad_gpu = %q", cli)
			}
			job := c.RunJobVars(t, string(src), vars)
			if job.Meta[contract.MetaGang] == "true" {
				waitGangPlacesNothing(t, c, *job.ID)
				c.StopJob(t, *job.ID, true)
				return
			}
			n := 1
			if g := job.TaskGroups[0]; g.Count != nil && *g.Count > 0 {
				n = *g.Count
			}
			allocs := c.WaitForAllocs(t, *job.ID, n, time.Minute)
			task := job.TaskGroups[0].Tasks[0].Name
			for _, a := range allocs {
				c.WaitForAllocStatus(t, a.ID, "running", time.Minute)
				out := c.WaitForAllocLogs(t, a.ID, task, "stdout", "-", 30*time.Second)
				if !strings.Contains(out, "GPU-") && !strings.Contains(out, "MIG-") {
					t.Errorf("%s: output has no GPU: %q", a.ID, out)
				}
			}
			if vars != "" {
				waitTaskGPUUtil(t, c, allocs[0].ID, task, 80)
			}
			// Stopped, not purged, and waited for: the driver then frees each
			// task's cgroup before the next job or the cluster's teardown.
			c.StopJob(t, *job.ID, false)
			for _, a := range allocs {
				c.WaitForAllocStatus(t, a.ID, "complete", time.Minute)
			}
		})
	}
}

// waitTaskGPUUtil waits until the task's device stats show its GPU at want
// percent utilisation.
func waitTaskGPUUtil(t *testing.T, c *cluster.Cluster, allocID, task string, want float64) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	var last []float64
	for time.Now().Before(deadline) {
		last = nil
		st, err := c.API().Allocations().Stats(&api.Allocation{ID: allocID, NodeID: nodeID(t, c)}, nil)
		if err == nil && st.Tasks[task] != nil {
			for _, g := range st.Tasks[task].ResourceUsage.DeviceStats {
				for _, inst := range g.InstanceStats {
					if inst.Stats == nil {
						continue
					}
					if v := inst.Stats.Attributes["GPU utilization"]; v != nil && v.FloatNumeratorVal != nil {
						last = append(last, *v.FloatNumeratorVal)
					}
				}
			}
		}
		if len(last) == 1 && last[0] == want {
			return
		}
		time.Sleep(time.Second)
	}
	t.Fatalf("alloc %s task %s: GPU utilisation %v after a minute, want [%v]", allocID, task, last, want)
}

// waitGangPlacesNothing waits until the job's evaluations are done and
// fails if any allocation was placed: a gang at count 0 waits for the
// controller.
func waitGangPlacesNothing(t *testing.T, c *cluster.Cluster, jobID string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		evals, _, err := c.API().Jobs().Evaluations(jobID, nil)
		done := err == nil && len(evals) > 0
		for _, e := range evals {
			done = done && e.Status == api.EvalStatusComplete
		}
		if done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("gang %s: evaluations not complete after 30s (last error: %v)", jobID, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
	allocs, _, err := c.API().Jobs().Allocations(jobID, true, nil)
	if err != nil || len(allocs) != 0 {
		t.Fatalf("gang %s at count 0: %d allocations placed (%v); want none until the controller admits it", jobID, len(allocs), err)
	}
}
