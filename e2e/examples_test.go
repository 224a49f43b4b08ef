package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nomad-gpu/nomad-gpu/e2e/cluster"
)

// The jobspecs in jobs/examples are what README tells people to run: each
// must place and run on a simulated GPU node and print its GPU environment.
func TestExampleJobs(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(cluster.RepoRoot(t), "jobs", "examples", "*.nomad.hcl"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no example jobs: %v", err)
	}
	c, _ := startGPUCluster(t)
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			job := c.RunJob(t, string(src))
			n := 1
			if g := job.TaskGroups[0]; g.Count != nil && *g.Count > 0 {
				n = *g.Count
			}
			allocs := c.WaitForAllocs(t, *job.ID, n, time.Minute)
			for _, a := range allocs {
				c.WaitForAllocStatus(t, a.ID, "running", time.Minute)
				task := job.TaskGroups[0].Tasks[0].Name
				out := c.WaitForAllocLogs(t, a.ID, task, "stdout", "-", 30*time.Second)
				if !strings.Contains(out, "GPU-") && !strings.Contains(out, "MIG-") {
					t.Errorf("%s: output has no GPU: %q", a.ID, out)
				}
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
