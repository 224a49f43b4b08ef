package apm

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/e2e/cluster"
	"github.com/nomad-gpu/nomad-gpu/gpu/sim"
	"github.com/nomad-gpu/nomad-gpu/internal/testenv"
)

func withPriority(jobHCL string, prio int) string {
	return strings.Replace(jobHCL, `type        = "batch"`, fmt.Sprintf("type        = \"batch\"\n  priority    = %d", prio), 1)
}

// shortJob is a batch job of one allocation of 1 nvidia/gpu running
// command once: no restart, no reschedule.
func shortJob(id, command string, prio int) string {
	return fmt.Sprintf(`
job %q {
  type        = "batch"
  node_pool   = "gpu"
  datacenters = ["dc*"]
  priority    = %d
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
      driver = "raw_exec"
      config {
        command = %q
      }
      resources {
        cpu    = 20
        memory = 16
        device "nvidia/gpu" {
          count = 1
        }
      }
    }
  }
}`, id, prio, command)
}

// waitMetric scrapes until series has the value want (within 1e-9).
func waitMetric(t *testing.T, addr, series string, want float64, timeout time.Duration) map[string]float64 {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got := scrape(t, addr)
		if v, ok := got[series]; ok && math.Abs(v-want) < 1e-9 {
			return got
		}
		if time.Now().After(deadline) {
			var lines []string
			for k, v := range got {
				if strings.Contains(k, `pool="gpu"`) {
					lines = append(lines, fmt.Sprintf("%s %v", k, v))
				}
			}
			t.Fatalf("%s = %v after %v, want %v; pool gpu:\n%s", series, got[series], timeout, want, strings.Join(lines, "\n"))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// costRates waits until, between two scrapes, the cost counters of key
// grew by one node-second a second of wall time, allocated and idle times
// that.
func costRates(t *testing.T, addr, key string, allocated, idle float64) {
	t.Helper()
	gpuKey := func(state string) string {
		return "nomad_gpu_cluster_gpu_seconds_total" + strings.TrimSuffix(key, "}") + `,state="` + state + `"}`
	}
	node := "nomad_gpu_cluster_node_seconds_total" + key
	deadline := time.Now().Add(15 * time.Second)
	prev, prevAt := scrape(t, addr), time.Now()
	for {
		time.Sleep(500 * time.Millisecond)
		got, at := scrape(t, addr), time.Now()
		dn := got[node] - prev[node]
		da, di := got[gpuKey("allocated")]-prev[gpuKey("allocated")], got[gpuKey("idle")]-prev[gpuKey("idle")]
		wall := at.Sub(prevAt).Seconds()
		ok := dn > 0.5*wall && dn < wall+0.1 && math.Abs(da-allocated*dn) < 1e-6 && math.Abs(di-idle*dn) < 1e-6
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("cost over %.2fs: %v node-seconds, %v allocated and %v idle GPU-seconds; want about %.2f, %v and %v times that",
				wall, dn, da, di, wall, allocated, idle)
		}
		prev, prevAt = got, at
	}
}

// TestIntegrationMetrics: the exporter against a real Nomad server and one
// client with the device plugin's simulated DGX H100 (8 GPUs) in pool gpu.
func TestIntegrationMetrics(t *testing.T) {
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
      seed         = "apm-metrics"
      control_file = %q
    }
  }
}`, control),
		},
	})
	node := c.WaitForNode(t, "client-1", func(n *api.Node) bool {
		return n.NodeResources != nil && len(n.NodeResources.Devices) > 0 && n.NodePool == "gpu"
	}, 2*time.Minute)
	d := node.NodeResources.Devices[0]
	label := DeviceLabel(DeviceSpec{Vendor: d.Vendor, Type: d.Type, Name: d.Name})
	p := newTestPlugin(t, c.Server().HTTPAddr(), map[string]string{
		"metrics_address": "127.0.0.1:0", "stats_ttl": "1s", "finished_refresh_interval": "200ms", "prices": "gpu=2.5,gpu/h100=4",
	})
	addr := p.metricsAddr()
	capSeries := func(name string) string {
		return fmt.Sprintf(`%s{datacenter="dc1",device=%q,pool="gpu"}`, name, label)
	}

	// SetConfig started every list the figures read.
	for _, l := range figureLists {
		waitMetric(t, addr, fmt.Sprintf(`nomad_gpu_cluster_list_up{list=%q}`, listLabels[l]), 1, 20*time.Second)
	}
	got := waitMetric(t, addr, capSeries("nomad_gpu_cluster_free_devices"), 8, 30*time.Second)
	if v := got[capSeries("nomad_gpu_cluster_free_memory_bytes")]; v < 8*64*float64(gib) {
		t.Errorf("free memory %v: not 8 × ~80 GiB", v)
	}

	// hold: 2 GPUs, P0, running.
	c.RunJob(t, withPriority(gpuJob("hold", "gpu", "nvidia/gpu", 1, 2, ""), 80))
	allocs := c.WaitForAllocs(t, "hold", 1, time.Minute)
	c.WaitForAllocStatus(t, allocs[0].ID, "running", time.Minute)
	waitMetric(t, addr, capSeries("nomad_gpu_cluster_allocated_devices"), 2, 10*time.Second)
	waitMetric(t, addr, `nomad_gpu_cluster_allocs_started{pool="gpu",priority="P0"}`, 1, 10*time.Second)

	// Cost: the a100 node at its pool's price; its counters grow by 1
	// node, 2 GPUs held and 6 idle a second.
	costKey := `{node_class="a100",pool="gpu"}`
	waitMetric(t, addr, "nomad_gpu_cluster_price_per_node_hour"+costKey, 2.5, 10*time.Second)
	costRates(t, addr, costKey, 2, 6)

	// big: 8 GPUs cannot be placed: the 6 free are stranded. The mix is
	// hold's 2-GPU request and big's 8-GPU one, half each: the 6 free
	// GPUs serve the first, not the second, so FGD is 3 of 6 free.
	c.RunJob(t, withPriority(gpuJob("big", "gpu", "nvidia/gpu", 1, 8, ""), 80))
	queue := `{device="nvidia/gpu",pool="gpu",priority="P0",state="blocked"}`
	pool := `{datacenter="dc1",pool="gpu"}`
	waitMetric(t, addr, "nomad_gpu_cluster_queued_devices"+queue, 8, 30*time.Second)
	waitMetric(t, addr, capSeries("nomad_gpu_cluster_stranded_devices"), 6, 10*time.Second)
	waitMetric(t, addr, "nomad_gpu_cluster_fragmentation_gpus"+pool, 3, 10*time.Second)
	got = waitMetric(t, addr, "nomad_gpu_cluster_fragmentation_ratio"+pool, 0.5, 10*time.Second)
	for name, want := range map[string]float64{"capacity_gpus": 8, "allocated_gpus": 2, "free_gpus": 6} {
		if v := got["nomad_gpu_cluster_"+name+pool]; v != want {
			t.Errorf("%s %v, want %v", name, v, want)
		}
	}
	if v := got["nomad_gpu_cluster_queued_allocs"+queue]; v != 1 {
		t.Errorf("queued allocs %v", v)
	}
	if v := got["nomad_gpu_cluster_queue_wait_max_seconds"+queue]; v <= 0 {
		t.Errorf("queue wait %v", v)
	}

	// ok and bad: P2, one GPU each; one completes, one fails.
	c.RunJob(t, shortJob("ok", "/bin/true", 30))
	c.RunJob(t, shortJob("bad", "/bin/false", 30))
	p2 := `pool="gpu",priority="P2"`
	waitMetric(t, addr, `nomad_gpu_cluster_allocs_finished{outcome="complete",`+p2+`}`, 1, time.Minute)
	got = waitMetric(t, addr, `nomad_gpu_cluster_allocs_finished{outcome="failed",`+p2+`}`, 1, time.Minute)
	if v := got[`nomad_gpu_cluster_alloc_failure_ratio{`+p2+`}`]; v != 0.5 {
		t.Errorf("failure ratio %v", v)
	}
	for _, s := range []string{`nomad_gpu_cluster_task_run_seconds{` + p2 + `,stat="max"}`, `nomad_gpu_cluster_task_wait_seconds{` + p2 + `,stat="p50"}`} {
		if v, ok := got[s]; !ok || v < 0 || v > 600 {
			t.Errorf("%s = %v %v", s, v, ok)
		}
	}

	// Load: the two held GPUs at 80 %, the others idle.
	a, _, err := c.API().Allocations().Info(allocs[0].ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctl := sim.OpenControl(control)
	for _, id := range a.AllocatedResources.Tasks["t"].Devices[0].DeviceIDs {
		if err := ctl.SetUtilization(id, 80, 10); err != nil {
			t.Fatal(err)
		}
	}
	waitMetric(t, addr, capSeries("nomad_gpu_cluster_load_ratio"), 0.8, 30*time.Second)
	waitMetric(t, addr, capSeries("nomad_gpu_cluster_utilization_ratio"), 0.2, 10*time.Second)

	// Scrapes read the cache: no Nomad call but the watches' own (and the
	// stats refresh, once per stats_ttl).
	before := p.Stats()
	for range 20 {
		scrape(t, addr)
	}
	after := p.Stats()
	if d := (after.Calls - after.ByEndpoint[EndpointClientStats]) - (before.Calls - before.ByEndpoint[EndpointClientStats]); d > 3 {
		t.Errorf("20 scrapes: %d Nomad calls besides stats (%v → %v)", d, before.ByEndpoint, after.ByEndpoint)
	}
	// Job specs: big's only, for the queue; the priorities of the jobs
	// holding devices come from the jobs list.
	if n := after.ByEndpoint[EndpointJob]; n != 1 {
		t.Errorf("job reads %d, want 1", n)
	}
	t.Logf("Nomad calls %d %v", after.Calls, after.ByEndpoint)
}
