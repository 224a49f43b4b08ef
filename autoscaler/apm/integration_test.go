package apm

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/e2e/cluster"
	"github.com/nomad-gpu/nomad-gpu/gpu/sim"
	"github.com/nomad-gpu/nomad-gpu/internal/testenv"
	"github.com/nomad-gpu/nomad-gpu/wire/autoscaler"
)

// gpuJob is a batch job of one group of count allocations, each asking for
// n of device, placed in pool; extra goes in the group.
func gpuJob(id, pool, device string, count, n int, extra string) string {
	return fmt.Sprintf(`
job %q {
  type        = "batch"
  node_pool   = %q
  datacenters = ["dc*"]
  group "g" {
    count = %d
    restart {
      attempts = 0
      mode     = "fail"
    }
    %s
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/sleep"
        args    = ["600"]
      }
      resources {
        cpu    = 20
        memory = 16
        device %q {
          count = %d
        }
      }
    }
  }
}`, id, pool, count, extra, device, n)
}

func newTestPlugin(t testing.TB, addr string, extra map[string]string) *Plugin {
	t.Helper()
	cfg := map[string]string{"nomad_address": addr, "min_refresh_interval": "50ms", "sync_timeout": "20s"}
	for k, v := range extra {
		cfg[k] = v
	}
	p := New(nil)
	if err := p.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func query(t testing.TB, p *Plugin, q string) float64 {
	t.Helper()
	to := time.Now().Add(-time.Minute).Truncate(time.Second)
	ms, err := p.Query(q, autoscaler.TimeRange{From: to.Add(-time.Minute), To: to})
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	if len(ms) != 1 || !ms[0].Time.Equal(to) {
		t.Fatalf("%s: %v: want one point at %v", q, ms, to)
	}
	return ms[0].Value
}

// waitValue polls q until it answers want.
func waitValue(t testing.TB, p *Plugin, q string, want float64, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got := query(t, p, q)
		if math.Abs(got-want) < 1e-9 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s = %v after %v, want %v", q, got, timeout, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestIntegrationQueue runs against a real Nomad server with no clients:
// GPU jobs cannot be placed, so their evaluations block.
func TestIntegrationQueue(t *testing.T) {
	c := cluster.Start(t, cluster.Options{Clients: 0})
	nc := c.API()
	for _, pool := range []string{"gpu", "empty"} {
		if _, err := nc.NodePools().Register(&api.NodePool{Name: pool}, nil); err != nil {
			t.Fatal(err)
		}
	}
	p := newTestPlugin(t, c.Server().HTTPAddr(), map[string]string{"default_gpus_per_node": "8"})

	// Nothing queued, no nodes: every metric is one 0 point.
	all := func(filter string) []string {
		var qs []string
		for _, m := range metricNames {
			qs = append(qs, m+filter)
		}
		return qs
	}
	for _, q := range append(all("{pool=gpu}"), all("{pool=nosuch}")...) {
		if v := query(t, p, q); v != 0 {
			t.Errorf("%s = %v before any job, want 0", q, v)
		}
	}

	start := time.Now()
	c.RunJob(t, gpuJob("train", "gpu", "nvidia/gpu", 3, 2, ""))
	c.RunJob(t, gpuJob("infer", "gpu", "gpu", 2, 1, `constraint {
      attribute = "${node.class}"
      value     = "a100"
    }`))
	c.RunJob(t, gpuJob("slice", "gpu", "nvidia/mig/1g.10gb", 4, 1, ""))
	c.RunJob(t, gpuJob("elsewhere", "default", "nvidia/gpu", 5, 1, ""))

	waitValue(t, p, "gpus_queued{pool=gpu}", 3*2+2*1, 30*time.Second)
	waitValue(t, p, "gpus_queued{pool=gpu,device=nvidia/mig/1g.10gb}", 4, 10*time.Second)
	waitValue(t, p, "gpus_queued", 3*2+2+5, 10*time.Second)
	for q, want := range map[string]float64{
		"allocs_queued{pool=gpu}":                                 5,
		"allocs_queued{pool=gpu,state=blocked}":                   5,
		"allocs_queued{pool=gpu,state=pending}":                   0,
		"gpus_queued{pool=gpu,class=a100}":                        8,
		"gpus_queued{pool=gpu,class=h100}":                        6,
		"gpus_queued{pool=gpu,datacenter=dc1}":                    8,
		"gpus_queued{pool=gpu,datacenter=eu1}":                    0,
		"gpus_queued{pool=default}":                               5,
		"nodes_needed{pool=gpu}":                                  1, // 8 GPUs, default_gpus_per_node 8
		"nodes_needed{pool=gpu,gpus_per_node=4}":                  2,
		"nodes_needed{pool=gpu,gpus_per_node=2}":                  4, // 3 × (2) + 2 × (1) → 3 + 1
		"nodes_needed{pool=gpu,gpus_per_node=1}":                  2, // the 2-GPU asks never fit
		"nodes_needed{pool=gpu,device=nvidia/mig/1g.10gb}":        1,
		"gpu_alloc_pct{pool=gpu}":                                 0,
		"gpu_util_pct{pool=gpu}":                                  0,
		"gpus_queued{pool=empty}":                                 0,
		"nodes_needed{pool=empty}":                                0,
		"wait_max_seconds{pool=empty}":                            0,
		"gpus_queued{pool=nosuch,device=nvidia/mps}":              0,
		"allocs_queued{pool=gpu,device=nvidia/mig/1g.10gb}":       4,
		"wait_mean_seconds{pool=gpu,device=nvidia/mig/2g.20gb}":   0,
		"gpus_queued{pool=gpu,device=nvidia/gpu/NVIDIA-H100-80G}": 8, // asks name no model: compatible
	} {
		if got := query(t, p, q); got != want {
			t.Errorf("%s = %v, want %v", q, got, want)
		}
	}
	maxWait := query(t, p, "wait_max_seconds{pool=gpu}")
	meanWait := query(t, p, "wait_mean_seconds{pool=gpu}")
	if elapsed := time.Since(start).Seconds(); maxWait <= 0 || maxWait > elapsed+1 || meanWait <= 0 || meanWait > maxWait {
		t.Errorf("wait max %v mean %v, elapsed since the first job %v", maxWait, meanWait, elapsed)
	}

	// No hint and no node: one node, to learn the shape.
	p2 := newTestPlugin(t, c.Server().HTTPAddr(), nil)
	if got := query(t, p2, "nodes_needed{pool=gpu}"); got != 1 {
		t.Errorf("nodes_needed without shape = %v, want 1", got)
	}

	// One policy evaluation's queries against a quiet cluster: the cache
	// answers, Nomad is not asked.
	evaluation := []string{
		"gpus_queued{pool=gpu}", "allocs_queued{pool=gpu}", "wait_max_seconds{pool=gpu}",
		"nodes_needed{pool=gpu}", "gpu_alloc_pct{pool=gpu}", "gpus_queued{pool=empty}",
	}
	before := p.Stats()
	for range 5 {
		for _, q := range evaluation {
			query(t, p, q)
		}
	}
	after := p.Stats()
	t.Logf("Nomad calls so far: %d %v; during 5 evaluations of %d queries: %d",
		after.Calls, after.ByEndpoint, len(evaluation), after.Calls-before.Calls)
	if d := after.Calls - before.Calls; d > 3 { // at most a watch re-arming
		t.Errorf("5 evaluations made %d Nomad calls, want ~0", d)
	}
	if n := after.ByEndpoint[EndpointJob]; n != 4 {
		t.Errorf("job spec reads = %d, want 4 (one per blocked job)", n)
	}

	// Policies query concurrently.
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				for _, q := range evaluation {
					if _, err := p.Query(q, autoscaler.TimeRange{}); err != nil {
						t.Error(err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()

	// A job stopping is seen through the blocking query.
	c.StopJob(t, "infer", false)
	waitValue(t, p, "gpus_queued{pool=gpu}", 6, 20*time.Second)
	waitValue(t, p, "allocs_queued{pool=gpu,class=a100}", 3, 5*time.Second)
	if n := p.Stats().ByEndpoint[EndpointJob]; n != 4 {
		t.Errorf("job spec reads after a stop = %d, want still 4", n)
	}
	// A new version of a job is read again (new job modify index).
	c.RunJob(t, gpuJob("train", "gpu", "nvidia/gpu", 3, 4, ""))
	waitValue(t, p, "gpus_queued{pool=gpu}", 3*4, 20*time.Second)
	t.Logf("final Nomad calls: %d %v", p.Stats().Calls, p.Stats().ByEndpoint)
}

// TestIntegrationSimNode adds one client with the device plugin's
// simulated DGX H100 (8 GPUs) in pool gpu: allocation, utilisation, a node
// shape learnt from the node, and a queue that shrinks as the scheduler
// places part of it (the blocked evaluation's FailedTGAllocs go stale; the
// job summary does not).
func TestIntegrationSimNode(t *testing.T) {
	cluster.NomadBinary(t)
	if _, err := os.Stat(filepath.Join(cluster.PluginDir(t), "nomad-device-gpu")); err != nil {
		testenv.Skip(t, testenv.Build, "nomad-device-gpu not built (make build)")
	}
	control := filepath.Join(t.TempDir(), "sim-control.json")
	c := cluster.Start(t, cluster.Options{
		Clients: 1,
		Client: cluster.ClientOptions{
			PluginDir: cluster.PluginDir(t),
			ClientHCL: `node_pool = "gpu"
node_class = "a100"`,
			ExtraHCL: fmt.Sprintf(`
plugin "nomad-device-gpu" {
  config {
    backend            = "sim"
    fingerprint_period = "2s"
    sim {
      system       = "dgxh100"
      seed         = "apm"
      control_file = %q
    }
  }
}`, control),
		},
	})
	node := c.WaitForNode(t, "client-1", func(n *api.Node) bool {
		return n.NodeResources != nil && len(n.NodeResources.Devices) > 0 && n.NodePool == "gpu"
	}, 2*time.Minute)
	p := newTestPlugin(t, c.Server().HTTPAddr(), map[string]string{"stats_ttl": "1s"})

	waitValue(t, p, "nodes_needed{pool=gpu}", 0, 10*time.Second)
	if got := query(t, p, "gpu_alloc_pct{pool=gpu}"); got != 0 {
		t.Errorf("gpu_alloc_pct idle = %v", got)
	}
	job := c.RunJob(t, gpuJob("hold", "gpu", "nvidia/gpu", 1, 2, ""))
	allocs := c.WaitForAllocs(t, *job.ID, 1, time.Minute)
	c.WaitForAllocStatus(t, allocs[0].ID, "running", time.Minute)
	waitValue(t, p, "gpu_alloc_pct{pool=gpu}", 25, 10*time.Second)
	waitValue(t, p, "gpu_alloc_pct{pool=gpu,class=a100,datacenter=dc1}", 25, 10*time.Second)

	// 10 × 2 GPUs: 3 fit on the 6 free, 7 block.
	c.RunJob(t, gpuJob("many", "gpu", "nvidia/gpu", 10, 2, ""))
	waitValue(t, p, "allocs_queued{pool=gpu,state=blocked}", 7, 30*time.Second)
	waitValue(t, p, "gpu_alloc_pct{pool=gpu}", 100, 30*time.Second)
	for q, want := range map[string]float64{
		"gpus_queued{pool=gpu,state=blocked}":    14,
		"nodes_needed{pool=gpu}":                 2, // shape 8 from the node: 7 × 2 → 4 + 3
		"nodes_needed{pool=gpu,gpus_per_node=2}": 7,
	} {
		if got := query(t, p, q); got != want {
			t.Errorf("%s = %v, want %v", q, got, want)
		}
	}
	// Freeing 2 GPUs places one more; the re-blocked eval still says 7.
	c.StopJob(t, "hold", false)
	waitValue(t, p, "allocs_queued{pool=gpu,state=blocked}", 6, 60*time.Second)
	waitValue(t, p, "gpus_queued{pool=gpu,state=blocked}", 12, 5*time.Second)

	// Utilisation from the device plugin's stats: two of eight GPUs busy.
	if got := query(t, p, "gpu_util_pct{pool=gpu}"); got != 0 {
		t.Errorf("gpu_util_pct idle = %v", got)
	}
	ctl := sim.OpenControl(control)
	ids := node.NodeResources.Devices[0].Instances
	for i, pct := range []uint32{90, 30} {
		if err := ctl.SetUtilization(ids[i].ID, pct, 10); err != nil {
			t.Fatal(err)
		}
	}
	waitValue(t, p, "gpu_util_pct{pool=gpu}", 120/8.0, 30*time.Second)
	waitValue(t, p, "gpu_util_pct{pool=gpu,class=a100,device=nvidia/gpu}", 15, time.Second)
	s := p.Stats()
	t.Logf("Nomad calls %d %v", s.Calls, s.ByEndpoint)
	if s.ByEndpoint[EndpointClientStats] == 0 {
		t.Errorf("no client stats call for gpu_util_pct")
	}
}
