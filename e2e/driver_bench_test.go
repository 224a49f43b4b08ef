package e2e

// BenchmarkStartLatency measures what the gpu driver adds to a task start
// over Nomad's built-in raw_exec, on one cluster in one run (target: median
// ratio ≤ 1.10), and the resident memory of the per-task supervisor
// processes (target ≤ 10 MiB each).
//
// Jobs run one at a time, interleaved gpu, raw_exec, gpu, … so that load
// drifts on the box hit both drivers alike. Each is a service job whose task
// sleeps; it is measured from just before the Register call until the
// server shows its task "running", then stopped (purged) and waited for
// until terminal, so the next job starts on a quiet node with the devices
// free again. Two variants: with one whole GPU (`device "nvidia/gpu"`, the
// fair comparison: both pay the device plugin's Reserve) and without.
//
//	go test -run '^$' -bench StartLatency -benchtime 1x ./e2e/
//
// "Running" is when the client marks the task running (its
// TaskState.StartedAt, right after the driver's StartTask returns): that is
// the median, p90 and ratio reported. The moment the server shows it too
// (api-*) is also reported but says little: the client sends such
// non-urgent alloc updates in a batch once a second, and as each job here
// starts right after the previous one's (urgent) terminal update, every
// start lands about a second later, whatever the driver. The "Task Setup" →
// "Started" part (the task runner's hooks after the task dir, then the
// driver's StartTask) shows where a difference comes from.

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/e2e/cluster"
)

// latencyJobsPerDriver is how many jobs per driver and variant are measured.
const latencyJobsPerDriver = 20

// latencySample is one measured job.
type latencySample struct {
	total  time.Duration // Register → task "running" as the server shows it
	client time.Duration // Register → the client's StartedAt for the task
	setup  time.Duration // "Task Setup" event → "Started" event
}

func latencyJob(id, driver string, device bool) string {
	dev := ""
	if device {
		dev = `
        device "nvidia/gpu" {
          count = 1
        }`
	}
	return fmt.Sprintf(`
job %q {
  type = "service"
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
      driver       = %q
      kill_timeout = "2s"
      config {
        command = "/bin/sleep"
        args    = ["3600"]
      }
      resources {
        cpu    = 20
        memory = 16%s
      }
    }
  }
}`, id, driver, dev)
}

func BenchmarkStartLatency(b *testing.B) {
	cluster.RequirePlugin(b, "nomad-device-gpu")
	cluster.RequirePlugin(b, "nomad-driver-gpu")
	if os.Geteuid() != 0 {
		b.Skip("e2e: the gpu driver needs a root Nomad client; skipping")
	}
	// One cluster and one fixed set of jobs, whatever b.N is: the figures
	// are latencies of single starts, not a per-op cost.
	b.StopTimer()
	node := newGPUNode(b)
	c := cluster.Start(b, cluster.Options{
		Clients: 1,
		Client:  cluster.ClientOptions{PluginDir: cluster.BinDir(b), ExtraHCL: node.hcl(b)},
	})
	c.WaitForNode(b, "client-1", func(n *api.Node) bool {
		g, r := n.Drivers["gpu"], n.Drivers["raw_exec"]
		return g != nil && g.Healthy && r != nil && r.Healthy && len(deviceGroups(n)) == 5
	}, 2*time.Minute)

	drivers := []string{"gpu", "raw_exec"}
	// Warm-up, not measured: the gpu driver opens its runtime (MPS manager,
	// watchdog) on the first StartTask, and both drivers' binaries get into
	// the page cache.
	for i := 0; i < 2; i++ {
		for _, d := range drivers {
			measureStart(b, c, fmt.Sprintf("warm-%s-%d", d, i), latencyJob(fmt.Sprintf("warm-%s-%d", d, i), d, true))
		}
	}

	type variant struct {
		name   string // metric prefix
		device bool
	}
	for _, v := range []variant{{"", true}, {"nodev-", false}} {
		samples := map[string][]latencySample{}
		for i := 0; i < latencyJobsPerDriver; i++ {
			for _, d := range drivers {
				id := fmt.Sprintf("lat-%s%s-%02d", v.name, d, i)
				samples[d] = append(samples[d], measureStart(b, c, id, latencyJob(id, d, v.device)))
			}
		}
		reportLatency(b, v.name, samples)
	}

	// Supervisor memory with several tasks running side by side.
	const rssTasks = 6
	rssHCL := strings.Replace(latencyJob("rss", "gpu", false), `group "g" {`, fmt.Sprintf("group \"g\" {\n    count = %d", rssTasks), 1)
	c.RunJob(b, rssHCL)
	for _, a := range c.WaitForAllocs(b, "rss", rssTasks, time.Minute) {
		c.WaitForAllocStatus(b, a.ID, "running", time.Minute)
	}
	var rss, anon, pss []float64
	deadline := time.Now().Add(30 * time.Second)
	for {
		sups := supervisorPIDs(filepath.Join(node.dir, "state"))
		if len(sups) >= rssTasks {
			rss, anon, pss = nil, nil, nil
			for _, pid := range sups {
				rss = append(rss, float64(procStatusKB(pid, "VmRSS"))/1024)
				anon = append(anon, float64(procStatusKB(pid, "RssAnon"))/1024)
				pss = append(pss, float64(procFieldKB(pid, "smaps_rollup", "Pss"))/1024)
			}
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("want %d supervisors running, found %v", rssTasks, sups)
		}
		time.Sleep(200 * time.Millisecond)
	}
	b.ReportMetric(mean(rss), "supervisor-VmRSS-MiB")
	b.ReportMetric(mean(anon), "supervisor-RssAnon-MiB")
	b.ReportMetric(mean(pss), "supervisor-Pss-MiB")
	// VmRSS counts the binary's page-cache pages in full in every process;
	// RssAnon is each supervisor's own, Pss its fair share of both.
	b.Logf("supervisor memory over %d tasks (target ≤ 10 MiB): VmRSS %.1f MiB (max %.1f), RssAnon %.1f MiB (max %.1f), Pss %.1f MiB (max %.1f)",
		len(rss), mean(rss), slices.Max(rss), mean(anon), slices.Max(anon), mean(pss), slices.Max(pss))
	c.StopJob(b, "rss", true)
	b.ReportMetric(0, "ns/op")
}

// measureStart registers the job, waits (blocking queries) for its task to
// run, then stops it, waits for the allocation to be terminal and purges it.
func measureStart(b *testing.B, c *cluster.Cluster, id, hcl string) latencySample {
	b.Helper()
	job, err := c.API().Jobs().ParseHCL(hcl, true)
	if err != nil {
		b.Fatalf("parse job %s: %v", id, err)
	}
	t0 := time.Now()
	if _, _, err := c.API().Jobs().Register(job, nil); err != nil {
		b.Fatalf("register %s: %v", id, err)
	}
	var s latencySample
	var allocID string
	var idx uint64
	deadline := time.Now().Add(2 * time.Minute)
	for allocID == "" {
		stubs, meta, err := c.API().Jobs().Allocations(id, true, &api.QueryOptions{WaitIndex: idx, WaitTime: 5 * time.Second})
		now := time.Now()
		if err != nil {
			b.Fatalf("allocations of %s: %v", id, err)
		}
		idx = meta.LastIndex
		for _, a := range stubs {
			ts := a.TaskStates["t"]
			if ts != nil && ts.State == "running" {
				s.total = now.Sub(t0)
				s.client = ts.StartedAt.Sub(t0)
				allocID = a.ID
			}
			if terminalStatus(a.ClientStatus) {
				full, _, _ := c.API().Allocations().Info(a.ID, nil)
				b.Fatalf("job %s: alloc ended %s before running\n%s", id, a.ClientStatus, cluster.AllocSummary(full))
			}
		}
		if allocID == "" && now.After(deadline) {
			b.Fatalf("job %s: no running task after 2m\n%+v", id, stubs)
		}
	}
	// Stop, wait until the client has stopped the task, then purge: purging
	// at once would drop the allocation from the server while the client
	// still tears it down, overlapping the next measurement.
	c.StopJob(b, id, false)
	a := waitAllocTerminal(b, c, allocID, time.Minute)
	c.StopJob(b, id, true)
	var setup, started int64
	for _, ev := range a.TaskStates["t"].Events {
		switch ev.Type {
		case api.TaskSetup:
			setup = ev.Time
		case api.TaskStarted:
			if started == 0 {
				started = ev.Time
			}
		}
	}
	if setup > 0 && started > setup {
		s.setup = time.Duration(started - setup)
	}
	return s
}

func terminalStatus(s string) bool {
	return s == api.AllocClientStatusComplete || s == api.AllocClientStatusFailed || s == api.AllocClientStatusLost
}

// waitAllocTerminal waits, with blocking queries, until the allocation's
// client status is terminal and returns it.
func waitAllocTerminal(t testing.TB, c *cluster.Cluster, allocID string, timeout time.Duration) *api.Allocation {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var idx uint64
	var last *api.Allocation
	for {
		a, meta, err := c.API().Allocations().Info(allocID, &api.QueryOptions{WaitIndex: idx, WaitTime: 5 * time.Second})
		if err == nil {
			last, idx = a, meta.LastIndex
			if terminalStatus(a.ClientStatus) {
				return a
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("alloc %s not terminal after %v (last error: %v)\n%s", allocID, timeout, err, cluster.AllocSummary(last))
		}
		if err != nil {
			time.Sleep(100 * time.Millisecond)
		}
	}
}

func reportLatency(b *testing.B, prefix string, samples map[string][]latencySample) {
	b.Helper()
	pick := func(d string, f func(latencySample) time.Duration) []float64 {
		var out []float64
		for _, s := range samples[d] {
			out = append(out, float64(f(s))/float64(time.Millisecond))
		}
		return out
	}
	total := func(s latencySample) time.Duration { return s.total }
	client := func(s latencySample) time.Duration { return s.client }
	setup := func(s latencySample) time.Duration { return s.setup }
	for _, d := range []string{"gpu", "raw_exec"} {
		b.ReportMetric(quantile(pick(d, client), 0.5), prefix+d+"-median-ms")
		b.ReportMetric(quantile(pick(d, client), 0.9), prefix+d+"-p90-ms")
		b.ReportMetric(quantile(pick(d, total), 0.5), prefix+"api-"+d+"-median-ms")
		b.ReportMetric(quantile(pick(d, setup), 0.5), prefix+d+"-setup-to-started-median-ms")
		b.Logf("%s%-8s n=%d  register→task running (client StartedAt): median %6.1f p90 %6.1f ms | register→running seen by the API: median %6.1f p90 %6.1f ms | Task Setup→Started: median %6.1f p90 %6.1f ms",
			prefix, d, len(samples[d]),
			quantile(pick(d, client), 0.5), quantile(pick(d, client), 0.9),
			quantile(pick(d, total), 0.5), quantile(pick(d, total), 0.9),
			quantile(pick(d, setup), 0.5), quantile(pick(d, setup), 0.9))
	}
	ratio := quantile(pick("gpu", client), 0.5) / quantile(pick("raw_exec", client), 0.5)
	apiRatio := quantile(pick("gpu", total), 0.5) / quantile(pick("raw_exec", total), 0.5)
	setupRatio := quantile(pick("gpu", setup), 0.5) / quantile(pick("raw_exec", setup), 0.5)
	b.ReportMetric(ratio, prefix+"gpu/raw_exec-ratio")
	b.ReportMetric(apiRatio, prefix+"api-gpu/raw_exec-ratio")
	b.Logf("%sgpu/raw_exec median ratio %.3f (target ≤ 1.10); as seen by the API %.3f; Task Setup→Started %.3f", prefix, ratio, apiRatio, setupRatio)
}

// quantile is the q-quantile of xs, interpolated between the nearest ranks
// (so 0.5 of an even count is the mean of the middle two); 0 for none.
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	sort.Float64s(s)
	pos := q * float64(len(s)-1)
	i := int(pos)
	if i+1 >= len(s) {
		return s[len(s)-1]
	}
	return s[i] + (pos-float64(i))*(s[i+1]-s[i])
}

func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	var sum float64
	for _, x := range xs {
		sum += x
	}
	return sum / float64(len(xs))
}
