package e2e

// BenchmarkStartLatency measures what the gpu driver adds to a task start
// over Nomad's built-in raw_exec, on one cluster in one run (target: median
// ratio ≤ 1.10), what each of its isolation steps costs, and the resident
// memory of the per-task supervisor processes (target ≤ 10 MiB each).
//
// The cluster has one client per gpu driver plugin config (isoVariants:
// full isolation, the default; none; private PID namespace only; Landlock
// only), because a client runs one config of a plugin and restarting it
// between phases would put drift on the box between the variants. Jobs run
// one at a time in rounds: each round starts one job on every variant and
// one raw_exec job, in an order that rotates round by round, with raw_exec
// on each client in turn, so that load drifting on the box (other builds
// and tests share its two cores) hits every driver and variant alike. Each
// is a service job whose task sleeps, pinned to its node; it is measured
// from just before the Register call until the server shows its task
// "running", then stopped (purged) and waited for until terminal, so the
// next job starts on quiet nodes with the devices free again. These rounds
// hold one whole GPU (`device "nvidia/gpu"`, the fair comparison: both
// drivers pay the device plugin's Reserve), and their full-isolation and
// raw_exec jobs are the headline gpu/raw_exec figures; a second pass,
// without a device, compares the default config with raw_exec alone, as
// before.
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
//
// An isolation step's cost is also given as the median over rounds of the
// difference to the variant without isolation in the same round: pairing
// by round cancels what drifts between rounds, which a difference of two
// medians would not. driver/supervisor's BenchmarkStartIsolation measures
// the same steps without Nomad in the way.

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/e2e/cluster"
	"github.com/nomad-gpu/nomad-gpu/e2e/harness"
	"github.com/nomad-gpu/nomad-gpu/internal/quantile"
	"github.com/nomad-gpu/nomad-gpu/internal/testenv"
)

// latencyRounds is how many jobs per driver and variant are measured:
// 20 rounds of five jobs plus 20 pairs without a device keep the whole
// benchmark under three minutes on a 2-core box.
const latencyRounds = 20

// isoVariant is one gpu driver plugin config, run by a client of its own
// named gpu-<name>.
type isoVariant struct {
	name      string
	isolation string // body of the plugin's isolation block; "" for the defaults
	pidNS     bool   // what the node must then fingerprint
	landlock  bool
}

// isoVariants: full isolation comes first, as the headline figures are its.
var isoVariants = []isoVariant{
	{"full", "", true, true},
	{"none", "pid_mode = \"host\"\nlandlock = \"off\"", false, false},
	{"pidns", "landlock = \"off\"", true, false},
	{"landlock", "pid_mode = \"host\"", false, true},
}

func (v isoVariant) node() string { return "gpu-" + v.name }

// withIsolation puts an isolation block into the driver's plugin config
// that harness.GPUNode.HCL writes.
func withIsolation(t testing.TB, hcl, body string) string {
	t.Helper()
	if body == "" {
		return hcl
	}
	const at = "plugin \"nomad-driver-gpu\" {\n  config {\n"
	if strings.Count(hcl, at) != 1 {
		t.Fatalf("e2e: no single %q in the node's plugin config to add isolation to:\n%s", at, hcl)
	}
	block := "    isolation {\n      " + strings.ReplaceAll(body, "\n", "\n      ") + "\n    }\n"
	return strings.Replace(hcl, at, at+block, 1)
}

// latencySample is one measured job.
type latencySample struct {
	total  time.Duration // Register → task "running" as the server shows it
	client time.Duration // Register → the client's StartedAt for the task
	setup  time.Duration // "Task Setup" event → "Started" event
}

func latencyJob(id, driver, node string, device bool) string {
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
    constraint {
      attribute = "${node.unique.name}"
      value     = %q
    }
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
}`, id, node, driver, dev)
}

func BenchmarkStartLatency(b *testing.B) {
	cluster.RequirePlugin(b, "nomad-device-gpu")
	cluster.RequirePlugin(b, "nomad-driver-gpu")
	if os.Geteuid() != 0 {
		testenv.Skip(b, testenv.Root, "e2e: the gpu driver needs a root Nomad client")
	}
	// One cluster and one fixed set of jobs, whatever b.N is: the figures
	// are latencies of single starts, not a per-op cost.
	b.StopTimer()
	c := cluster.Start(b, cluster.Options{})
	var opts []cluster.ClientOptions
	var nodes []harness.GPUNode
	for _, v := range isoVariants {
		n := harness.NewGPUNode(b)
		nodes = append(nodes, n)
		opts = append(opts, cluster.ClientOptions{Name: v.node(), PluginDir: cluster.PluginDir(b), ExtraHCL: withIsolation(b, n.HCL(b), v.isolation)})
	}
	c.StartClients(b, opts...)
	for _, v := range isoVariants {
		c.WaitForNode(b, v.node(), func(n *api.Node) bool {
			g, r := n.Drivers["gpu"], n.Drivers["raw_exec"]
			return g != nil && g.Healthy && r != nil && r.Healthy && len(deviceGroups(n)) == 5 &&
				g.Attributes["driver.gpu.pid_namespace"] == fmt.Sprint(v.pidNS) && g.Attributes["driver.gpu.landlock"] == fmt.Sprint(v.landlock)
		}, 2*time.Minute)
	}
	full := isoVariants[0].node()

	// Warm-up, not measured: the gpu driver opens its runtime (MPS manager,
	// watchdog) on the first StartTask, and both drivers' binaries get into
	// the page cache.
	for _, v := range isoVariants {
		for _, d := range []string{"gpu", "raw_exec"} {
			id := fmt.Sprintf("warm-%s-%s", v.name, d)
			measureStart(b, c, id, latencyJob(id, d, v.node(), true))
		}
	}

	// samples[k][i] is round i's job for k: a variant's name or "raw_exec".
	samples := map[string][]latencySample{}
	type slot struct{ key, driver, node string }
	for i := 0; i < latencyRounds; i++ {
		round := []slot{{"raw_exec", "raw_exec", isoVariants[i%len(isoVariants)].node()}}
		for _, v := range isoVariants {
			round = append(round, slot{v.name, "gpu", v.node()})
		}
		// The job right after another may meet its teardown still under
		// way: with the order rotating by i and raw_exec's node by i mod
		// 4, over 20 rounds each of the five takes every place four times
		// and raw_exec runs on every node at every place once.
		for j := range round {
			s := round[(i+j)%len(round)]
			id := fmt.Sprintf("lat-%s-%02d", s.key, i)
			samples[s.key] = append(samples[s.key], measureStart(b, c, id, latencyJob(id, s.driver, s.node, true)))
		}
	}
	withDev := reportLatency(b, "", map[string][]latencySample{"gpu": samples["full"], "raw_exec": samples["raw_exec"]})

	nodev := map[string][]latencySample{}
	for i := 0; i < latencyRounds; i++ {
		for _, d := range []string{"gpu", "raw_exec"} {
			id := fmt.Sprintf("lat-nodev-%s-%02d", d, i)
			nodev[d] = append(nodev[d], measureStart(b, c, id, latencyJob(id, d, full, false)))
		}
	}
	noDev := reportLatency(b, "nodev-", nodev)
	reportIsolation(b, samples, fmt.Sprintf("gpu (full isolation)/raw_exec median ratio %.3f (target ≤ 1.10), API %.3f, Setup→Started %.3f; "+
		"without a device %.3f, API %.3f, Setup→Started %.3f (medians gpu %.1f ms, raw_exec %.1f ms, %d each on %s); load on the box may vary. "+
		"Rows: %d rounds of one job each, one GPU per job:",
		withDev.client, withDev.api, withDev.setup, noDev.client, noDev.api, noDev.setup,
		msQuantile(nodev["gpu"], sampleClient, 0.5), msQuantile(nodev["raw_exec"], sampleClient, 0.5), len(nodev["gpu"]), full, latencyRounds))

	// Supervisor memory with several tasks running side by side.
	const rssTasks = 6
	rssHCL := strings.Replace(latencyJob("rss", "gpu", full, false), `group "g" {`, fmt.Sprintf("group \"g\" {\n    count = %d", rssTasks), 1)
	c.RunJob(b, rssHCL)
	rssAllocs := c.WaitForAllocs(b, "rss", rssTasks, time.Minute)
	for _, a := range rssAllocs {
		c.WaitForAllocStatus(b, a.ID, "running", time.Minute)
	}
	var rss, anon, pss []float64
	deadline := time.Now().Add(30 * time.Second)
	for {
		sups := supervisorPIDs(filepath.Join(nodes[0].Dir, "state"))
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
	// Stopped, not purged, and waited for: the teardown then checks that
	// the driver freed each task, where tasks killed with their agent
	// would leave their cgroups to the harness.
	c.StopJob(b, "rss", false)
	for _, a := range rssAllocs {
		c.WaitForAllocStatus(b, a.ID, "complete", time.Minute)
	}
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

// msQuantile is the q-quantile of f over samples, in milliseconds.
func msQuantile(samples []latencySample, f func(latencySample) time.Duration, q float64) float64 {
	var xs []float64
	for _, s := range samples {
		xs = append(xs, float64(f(s))/float64(time.Millisecond))
	}
	return quantile.Of(xs, q)
}

func sampleClient(s latencySample) time.Duration { return s.client }
func sampleTotal(s latencySample) time.Duration  { return s.total }
func sampleSetup(s latencySample) time.Duration  { return s.setup }

// latencyRatios are the gpu/raw_exec median ratios of one comparison.
type latencyRatios struct{ client, api, setup float64 }

// reportLatency reports the gpu and raw_exec figures of one comparison as
// metrics whose names stay fixed, so that runs compare.
func reportLatency(b *testing.B, prefix string, samples map[string][]latencySample) latencyRatios {
	b.Helper()
	for _, d := range []string{"gpu", "raw_exec"} {
		b.ReportMetric(msQuantile(samples[d], sampleClient, 0.5), prefix+d+"-median-ms")
		b.ReportMetric(msQuantile(samples[d], sampleClient, 0.9), prefix+d+"-p90-ms")
		b.ReportMetric(msQuantile(samples[d], sampleTotal, 0.5), prefix+"api-"+d+"-median-ms")
		b.ReportMetric(msQuantile(samples[d], sampleSetup, 0.5), prefix+d+"-setup-to-started-median-ms")
	}
	ratio := func(f func(latencySample) time.Duration) float64 {
		return msQuantile(samples["gpu"], f, 0.5) / msQuantile(samples["raw_exec"], f, 0.5)
	}
	r := latencyRatios{ratio(sampleClient), ratio(sampleTotal), ratio(sampleSetup)}
	b.ReportMetric(r.client, prefix+"gpu/raw_exec-ratio")
	b.ReportMetric(r.api, prefix+"api-gpu/raw_exec-ratio")
	return r
}

// reportIsolation reports each variant's client start latency against
// raw_exec from the same rounds, and what it costs over no isolation, and
// logs them as a table under title: benchmark output is cut after ten
// lines, so the headline ratios go there too.
func reportIsolation(b *testing.B, samples map[string][]latencySample, title string) {
	b.Helper()
	// paired is the median over rounds of k's latency minus none's.
	paired := func(k string, f func(latencySample) time.Duration) float64 {
		var d []float64
		for i, s := range samples[k] {
			if i < len(samples["none"]) {
				d = append(d, float64(f(s)-f(samples["none"][i]))/float64(time.Millisecond))
			}
		}
		return quantile.Of(d, 0.5)
	}
	raw := msQuantile(samples["raw_exec"], sampleClient, 0.5)
	var t strings.Builder
	t.WriteString(title + "\n")
	fmt.Fprintf(&t, "  %-13s %3s %14s %7s %11s %14s %10s %26s\n", "driver", "n", "median ms", "p90", "API median", "Setup→Started", "/raw_exec", "Δ vs none ms, paired")
	for _, k := range []string{"raw_exec", "none", "pidns", "landlock", "full"} {
		name, med := "gpu "+k, msQuantile(samples[k], sampleClient, 0.5)
		ratio, delta := med/raw, ""
		if k == "raw_exec" {
			name = k
		} else {
			b.ReportMetric(med, "iso-"+k+"-median-ms")
			b.ReportMetric(msQuantile(samples[k], sampleSetup, 0.5), "iso-"+k+"-setup-to-started-median-ms")
			b.ReportMetric(ratio, "iso-"+k+"/raw_exec-ratio")
		}
		if k != "raw_exec" && k != "none" {
			dc, ds := paired(k, sampleClient), paired(k, sampleSetup)
			b.ReportMetric(dc, "iso-"+k+"-minus-none-ms")
			delta = fmt.Sprintf("%+.1f (setup %+.1f)", dc, ds)
		}
		fmt.Fprintf(&t, "  %-13s %3d %14.1f %7.1f %11.1f %14.1f %10.3f %26s\n", name, len(samples[k]), med,
			msQuantile(samples[k], sampleClient, 0.9), msQuantile(samples[k], sampleTotal, 0.5), msQuantile(samples[k], sampleSetup, 0.5), ratio, delta)
	}
	b.Log(strings.TrimRight(t.String(), "\n"))
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
