package e2e

// `make dashboard-snapshot`: a short run of mixed work on a monitored sim
// cluster, then the dashboard's main panels, queried from its Prometheus
// over the run, rendered to PNG in $DASHBOARD_SNAPSHOT_DIR (docs/dashboard
// for the README).

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	"github.com/nomad-gpu/nomad-gpu/e2e/cluster"
	"github.com/nomad-gpu/nomad-gpu/internal/snapshot"
)

// snapshotPanels are the dashboard panels the snapshot renders, by title.
var snapshotPanels = []string{
	"GPU utilisation",
	"GPU memory used",
	"GPU power",
	"GPUs allocated and free by pool",
	"Queued GPU allocations",
	"Longest queue wait",
	"Fragmentation (FGD share of free GPU capacity)",
	"Checkpoints",
}

type dashPanel struct {
	Title       string
	FieldConfig struct {
		Defaults struct{ Unit string }
	}
	Targets []struct {
		Expr         string
		LegendFormat string
	}
}

// loadJob is a job of count instances whose task runs script on devices
// of device.
func loadJob(id, jobType, device string, devices, count int, script string) string {
	return fmt.Sprintf(`
job %q {
  type = %q
  group "g" {
    count = %d
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
      kill_timeout = "3s"
      config {
        command = "/bin/sh"
        args    = ["-c", %q]
      }
      resources {
        cpu    = 20
        memory = 32
        device %q {
          count = %d
        }
      }
    }
  }
}`, id, jobType, count, script, device, devices)
}

func TestDashboardSnapshot(t *testing.T) {
	out := os.Getenv("DASHBOARD_SNAPSHOT_DIR")
	if out == "" {
		t.Skip("e2e: DASHBOARD_SNAPSHOT_DIR not set (make dashboard-snapshot sets it); skipping")
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(cluster.RepoRoot(t), "jobs", "monitoring", "dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct{ Panels []dashPanel }
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("dashboard.json: %v", err)
	}
	panels := map[string]dashPanel{}
	for _, p := range dash.Panels {
		panels[p.Title] = p
	}
	for _, title := range snapshotPanels {
		if _, ok := panels[title]; !ok {
			t.Fatalf("dashboard.json has no panel %q", title)
		}
	}

	m := startMonitoredCluster(t, nil)
	c, cli := m.c, m.cli
	start := time.Now()

	// Training on 2 whole GPUs, ramping up, done after 100s; inference on
	// 2 MPS shares; MIG training; a checkpointing batch job stopped once
	// and restored; an HPC burst on 4 GPUs that queues until training is
	// done.
	c.RunJob(t, loadJob("training", "batch", "nvidia/gpu", 2, 1, cli+" sim-load --util 85 --memory 60GiB --ramp 20s --duration 100s"))
	c.RunJob(t, loadJob("inference", "service", "nvidia/mps", 1, 2, cli+" sim-load --util 40 --memory 30%"))
	c.RunJob(t, loadJob("mig-training", "batch", "nvidia/mig/3g.40gb", 1, 1, cli+" sim-load --util 70 --memory 30GiB --ramp 10s --duration 150s"))
	ckpt := counterJob("ckpt", "batch", 50, 1, true)
	c.RunJob(t, ckpt)
	first := nextAlloc(t, c, "ckpt", 0, 2*time.Minute)
	waitProgress(t, c, first.ID, 20)
	time.Sleep(10 * time.Second)
	c.RunJob(t, loadJob("hpc", "batch", "nvidia/gpu", 4, 1, cli+" sim-load --util 95 --memory 70GiB --duration 60s"))
	time.Sleep(10 * time.Second)
	c.StopJob(t, "ckpt", false)
	waitTerminal(t, c, first.ID)
	c.RunJob(t, ckpt)
	nextAlloc(t, c, "ckpt", 1, 2*time.Minute)

	hpc := nextAlloc(t, c, "hpc", 0, 4*time.Minute)
	waitTerminalWithin(t, c, hpc.ID, 2*time.Minute)
	time.Sleep(15 * time.Second)
	end := time.Now()
	t.Logf("run: %s", end.Sub(start).Round(time.Second))

	for _, title := range snapshotPanels {
		p := panels[title]
		pn := snapshot.Panel{Title: p.Title, Unit: p.FieldConfig.Defaults.Unit, Start: start, End: end}
		for _, tg := range p.Targets {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			v, _, _, err := m.prom.API.QueryRange(ctx, tg.Expr, promv1.Range{Start: start, End: end, Step: 5 * time.Second})
			cancel()
			if err != nil {
				t.Fatalf("panel %q: query %s: %v", title, tg.Expr, err)
			}
			mat, _ := v.(model.Matrix)
			for _, ss := range mat {
				labels := map[string]string{}
				for k, v := range ss.Metric {
					labels[string(k)] = string(v)
				}
				s := snapshot.Series{Label: snapshot.Legend(tg.LegendFormat, labels)}
				for _, sp := range ss.Values {
					s.Points = append(s.Points, snapshot.Point{T: sp.Timestamp.Time(), V: float64(sp.Value)})
				}
				pn.Series = append(pn.Series, s)
			}
		}
		if len(pn.Series) == 0 {
			t.Errorf("panel %q: no data over the run", title)
		}
		path := filepath.Join(out, snapshot.Slug(title)+".png")
		if err := snapshot.WriteFile(path, pn); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d series", path, len(pn.Series))
	}
}
