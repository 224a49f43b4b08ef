package e2e

// The trace replay's real engine (`make bench-trace`): each configuration
// replays the same sampled trace on a fresh real Nomad cluster of sim GPU
// nodes, time compressed, and the model engine then replays it on the
// same configurations with the latencies this run measured, so the
// report can put the model's error next to each of its figures.
//
// Each trace job becomes a batch job of its priority whose task holds its
// slice (Cluster.Slice) for its scaled duration under `nomad-gpu sim-load`
// at its utilisation. The task counts its work done in milliseconds; with
// preemption on it checkpoints that count on the driver's signal, and a
// replacement resumes from it, so only the work since the commit is lost
// (what the task did between its commit and its stop).
//
// The cluster's figures come from nomad-gpu-apm's exporter
// (nomad_gpu_cluster_*: devices, allocated, utilisation, fragmentation,
// queue), scraped twice a second: the same code the dashboard shows. The
// jobs' records come from their allocations' task states.

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	"github.com/prometheus/common/expfmt"
	promodel "github.com/prometheus/common/model"

	"github.com/nomad-gpu/nomad-gpu/e2e/cluster"
	"github.com/nomad-gpu/nomad-gpu/internal/quantile"
	"github.com/nomad-gpu/nomad-gpu/internal/testenv"
	"github.com/nomad-gpu/nomad-gpu/tracereplay"
	"github.com/nomad-gpu/nomad-gpu/tracereplay/model"
	"github.com/nomad-gpu/nomad-gpu/tracereplay/report"
	"github.com/nomad-gpu/nomad-gpu/wire/autoscaler"
)

func TestTraceReplay(t *testing.T) {
	out := os.Getenv("BENCH_TRACE_DIR")
	if out == "" {
		t.Skip("e2e: BENCH_TRACE_DIR not set (make bench-trace sets it); skipping")
	}
	var p tracereplay.Params
	fs := flag.NewFlagSet("bench-trace", flag.ContinueOnError)
	p.Register(fs)
	if err := fs.Parse(strings.Fields(os.Getenv("BENCH_TRACE_FLAGS"))); err != nil {
		t.Fatalf("BENCH_TRACE_FLAGS: %v", err)
	}
	if p.GPUsPerNode != 8 {
		t.Fatalf("gpus-per-node: %d; the real engine's sim nodes (dgxh100) have 8", p.GPUsPerNode)
	}
	setup, err := p.Load()
	if err != nil {
		t.Fatalf("bench-trace: %v", err)
	}
	cluster.NomadBinary(t)
	for _, cfg := range setup.Configs {
		if cfg.Autoscale != "" {
			cluster.AutoscalerBinary(t)
		}
	}
	cluster.RequirePlugin(t, "nomad-device-gpu")
	cluster.RequirePlugin(t, "nomad-driver-gpu")
	if os.Geteuid() != 0 {
		testenv.Skip(t, testenv.Root, "e2e: the gpu driver needs a root Nomad client")
	}
	t.Logf("bench-trace: %s; %d configs, horizon %s (%s wall each)", setup.Trace.Source, len(setup.Configs),
		setup.Horizon, time.Duration(float64(setup.Horizon)/setup.Compression).Round(time.Second))

	started := time.Now()
	var real []tracereplay.Result
	var boots, starts []time.Duration
	for _, cfg := range setup.Configs {
		t.Run(cfg.Name, func(t *testing.T) {
			r, m := replayOnNomad(t, setup, cfg)
			if t.Failed() {
				return // the report leaves out what did not replay cleanly
			}
			real = append(real, r)
			boots = append(boots, m.boots...)
			starts = append(starts, m.startLatency)
		})
	}
	if len(real) == 0 {
		return
	}
	lat := calibrate(tracereplay.DefaultLatencies(), boots, starts)
	t.Logf("model latencies from this run: start %s, boot %s", lat.Start, lat.Boot)
	var modelled []tracereplay.Result
	for _, rr := range real {
		cfg := rr.Config
		r, err := model.Run(setup.Trace, model.Options{
			Cluster: setup.Cluster, Config: cfg, Policy: setup.Policy, Latencies: lat,
			Compression: setup.Compression, Horizon: setup.Horizon,
		})
		if err != nil {
			t.Fatalf("model %s: %v", cfg.Name, err)
		}
		modelled = append(modelled, r)
	}
	err = report.Write(out, report.Run{
		Title: "Trace replay: " + filepath.Base(p.TracePath()), Trace: setup.Trace, Seed: setup.Seed,
		Attribution: setup.Attribution, Real: real, Model: modelled, Started: started, Elapsed: time.Since(started),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("bench-trace: report in %s", filepath.Join(out, "report.md"))
}

// calibrate sets the model's start and boot latencies to this run's
// medians, keeping the defaults where the run measured none.
func calibrate(l tracereplay.Latencies, boots, starts []time.Duration) tracereplay.Latencies {
	med := func(ds []time.Duration) time.Duration {
		var xs []float64
		for _, d := range ds {
			if d > 0 {
				xs = append(xs, d.Seconds())
			}
		}
		if len(xs) == 0 {
			return 0
		}
		return time.Duration(quantile.Of(xs, 0.5) * float64(time.Second))
	}
	if d := med(boots); d > 0 {
		l.Boot = d
	}
	if d := med(starts); d > 0 {
		l.Start = d
	}
	return l
}

// replayMeasures are the latencies one real replay saw.
type replayMeasures struct {
	boots []time.Duration
	// startLatency is the 10th percentile of submit-to-running, wall
	// clock: the jobs that found room at once.
	startLatency time.Duration
}

// replayScript is the task of a replayed job: it works for WORK ms in all
// under sim-load, resuming from its checkpoint's count when it has one,
// and on the checkpoint signal commits the count of ms done so far. It
// logs restored=, committed= and stopped= with that count.
const replayScript = `done=0
if [ -n "$NOMAD_GPU_RESTORE_DIR" ] && [ -f "$NOMAD_GPU_RESTORE_DIR/done" ]; then done=$(cat "$NOMAD_GPU_RESTORE_DIR/done"); fi
echo "restored=$done"
start=$(date +%s%3N)
sofar() { echo $((done + $(date +%s%3N) - start)); }
ck() { d=$(sofar); echo $d > "$NOMAD_GPU_CHECKPOINT_DIR/done"; : > "$NOMAD_GPU_CHECKPOINT_COMMIT"; echo "committed=$d"; }
trap ck USR1
trap 'echo "stopped=$(sofar)"; exit 0' INT TERM
left=$((WORK - done))
if [ $left -gt 0 ]; then
  "$CLI" sim-load --util UTIL --duration "$left"ms &
  sleep $((left / 1000)).$(printf %03d $((left % 1000))) & s=$!
  while kill -0 $s 2>/dev/null; do wait $s; done
fi
echo "finished=$(sofar)"`

// replayJob is the Nomad job of a trace job.
// With a commitTimeout the task checkpoints; 0 leaves the block out.
func replayJob(j tracereplay.Job, s tracereplay.Slice, work time.Duration, cli string, commitTimeout time.Duration) string {
	script := strings.NewReplacer("WORK", strconv.FormatInt(work.Milliseconds(), 10),
		"UTIL", strconv.FormatFloat(j.EffectiveUtil(), 'f', 0, 64), `"$CLI"`, "'"+cli+"'").Replace(replayScript)
	ck := ""
	if commitTimeout > 0 {
		ck = fmt.Sprintf(`
        checkpoint {
          commit_timeout = %q
        }`, commitTimeout)
	}
	return fmt.Sprintf(`
job %q {
  type      = "batch"
  priority  = %d
  node_pool = "gpu"
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
      kill_timeout = "15s"
      config {
        command = "/bin/sh"
        args    = ["-c", %q]%s
      }
      resources {
        cpu    = 10
        memory = 24
        device %q {
          count = %d
        }
      }
    }
  }
}`, j.ID, j.EffectivePriority(), script, ck, s.Device(), s.Count)
}

// layoutFor is the sim node layout a configuration's nodes have.
func layoutFor(c tracereplay.Cluster, f tracereplay.Features) *nodeLayout {
	l := &nodeLayout{}
	if !f.Slices {
		return l
	}
	gpu := c.GPUsPerNode - 1
	for i := 0; i < c.MIGGPUs; i++ {
		l.mig = append(l.mig, gpu)
		gpu--
	}
	l.migProfiles = c.MIGProfiles
	for i := 0; i < c.MPSGPUs; i++ {
		l.mps = append(l.mps, gpu)
		gpu--
	}
	l.mpsShares = c.MPSShares
	return l
}

// replayOnNomad replays the trace on a fresh cluster in configuration cfg.
func replayOnNomad(t *testing.T, s tracereplay.Setup, cfg tracereplay.Config) (tracereplay.Result, replayMeasures) {
	cli := cluster.RequireBinary(t, "nomad-gpu")
	apmBin := cluster.RequireBinary(t, "nomad-gpu-apm")
	c := cluster.Start(t, cluster.Options{Clients: 0})
	if cfg.Preemption {
		enablePreemption(t, c)
	}
	pool := newSimPool(t, c, "gpu")
	layout := layoutFor(s.Cluster, cfg.Features)
	driverHCL := fmt.Sprintf("nomad {\naddress = %q\n}\nisolation {\nunveil_paths = [%q]\n}", c.Server().HTTPAddr(), "rx:"+filepath.Dir(cli))
	if cfg.Preemption {
		driverHCL += fmt.Sprintf("\npreemption {\ncooldown = %q\n}", s.Policy.PreemptionCooldown)
	}
	// One checkpoint root for the pool, as on a shared filesystem: a
	// preempted job may resume on another node.
	shared := newGPUNode(t).checkpointRoot()
	pool.configure = func(n *gpuNode) { n.layout, n.driverHCL, n.sharedCheckpoints = layout, driverHCL, shared }

	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	apmAddr := freeAddr(t)
	apmc, err := autoscaler.Launch(ctx, apmBin, autoscaler.TypeAPM, map[string]string{"metrics_address": apmAddr, "stats_ttl": "1s"},
		autoscaler.WithNomad(&api.Config{Address: c.Server().HTTPAddr()}))
	if err != nil {
		t.Fatalf("launching nomad-gpu-apm: %v", err)
	}
	t.Cleanup(apmc.Kill)

	nodes := s.Cluster.Nodes
	if cfg.Autoscale != "" {
		nodes = min(max(nodes, s.Cluster.MinNodes), s.Cluster.MaxNodes)
	}
	pool.scaleTo(t, nodes, 3*time.Minute)
	if cfg.Autoscale != "" {
		var policy string
		boot := calibrate(tracereplay.DefaultLatencies(), pool.bootTimes(), nil).Boot
		if cfg.Autoscale == tracereplay.AutoscaleTargetValue {
			policy = targetValuePolicy(pool.URL(), s.Cluster.MinNodes, s.Cluster.MaxNodes, s.Policy)
		} else {
			policy = gpuQueuePolicy(pool.URL(), s.Cluster.MinNodes, s.Cluster.MaxNodes, s.Cluster.WholeGPUs(cfg.Features), s.Policy, boot)
		}
		c.StartAutoscaler(t, cluster.AutoscalerOptions{
			PluginDir: autoscalerPlugins(t), HCL: autoscalerAgentHCL,
			Policies: map[string]string{"gpu-pool.hcl": policy},
		})
	}
	// The nodes' devices are fingerprinted a moment after they are ready.
	waitDevices(t, c, pool, s.Cluster.GPUsPerNode)

	wall := func(d time.Duration) time.Duration { return time.Duration(float64(d) / s.Compression) }
	trace := func(d time.Duration) time.Duration { return time.Duration(float64(d) * s.Compression) }
	res := tracereplay.Result{
		Engine: "nomad", Version: nomadVersion(t, c), Config: cfg, Cluster: s.Cluster,
		Compression: s.Compression, Horizon: s.Horizon,
	}
	clipped := 0
	t0 := time.Now()
	sampler := startSampler(t, "http://"+apmAddr+"/metrics", pool, s.Cluster, t0, s.Compression, wall(s.Horizon))
	submitted := make(map[string]time.Time, len(s.Trace.Jobs))
	for _, j := range s.Trace.Jobs {
		if d := time.Until(t0.Add(wall(j.Arrival))); d > 0 {
			time.Sleep(d)
		}
		sl := s.Cluster.Slice(j, cfg.Features)
		if sl.Kind == "gpu" && sl.Count < j.GPUs {
			clipped++
		}
		submitted[j.ID] = time.Now()
		var commit time.Duration
		if cfg.Preemption {
			commit = s.Policy.CommitTimeout
		}
		c.RunJob(t, replayJob(j, sl, wall(j.Duration), cli, commit))
	}
	res.Timeline = sampler.wait()
	if clipped > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("%d jobs asked for more whole GPUs than a node has; clipped to %d", clipped, s.Cluster.WholeGPUs(cfg.Features)))
	}

	stubs, _, err := c.API().Allocations().List(nil)
	if err != nil {
		t.Fatalf("listing allocations: %v", err)
	}
	byJob := map[string][]*api.AllocationListStub{}
	for _, a := range stubs {
		byJob[a.JobID] = append(byJob[a.JobID], a)
	}
	horizon := t0.Add(wall(s.Horizon))
	at := func(w time.Time) time.Duration { return trace(w.Sub(t0)) }
	var waits []float64
	failed := false
	slow := 0
	// Preemptions whose lost work the task logs no longer tell: the node
	// that ran the allocation was removed (scaled in) before they were read.
	preempted, unread := 0, 0
	stopLog := func(allocID, key string) int {
		v, ok := logValue(c, allocID, key)
		if !ok {
			unread++
		}
		return v
	}
	for _, j := range s.Trace.Jobs {
		rec := tracereplay.JobRecord{ID: j.ID, Arrival: j.Arrival, Slice: s.Cluster.Slice(j, cfg.Features)}
		allocs := byJob[j.ID]
		sort.Slice(allocs, func(a, b int) bool { return allocs[a].CreateIndex < allocs[b].CreateIndex })
		var prevStopped = -1
		for _, a := range allocs {
			st := a.TaskStates["t"]
			if st == nil || st.StartedAt.IsZero() || st.StartedAt.After(horizon) {
				continue
			}
			if len(rec.Starts) == 0 {
				waits = append(waits, st.StartedAt.Sub(submitted[j.ID]).Seconds())
			}
			rec.Starts = append(rec.Starts, at(st.StartedAt))
			if prevStopped >= 0 {
				// Work between the commit and the stop is redone.
				if restored := stopLog(a.ID, "restored"); restored >= 0 && prevStopped > restored {
					rec.LostWork += trace(time.Duration(prevStopped-restored) * time.Millisecond)
				}
				prevStopped = -1
			}
			switch {
			case a.PreemptedByAllocation != "" || a.DesiredStatus == api.AllocDesiredStatusEvict:
				rec.Preemptions++
				preempted++
				prevStopped = stopLog(a.ID, "stopped")
			case a.ClientStatus == api.AllocClientStatusComplete && !st.Failed && !st.FinishedAt.After(horizon):
				rec.Done, rec.Finish = true, at(st.FinishedAt)
			}
		}
		res.Jobs = append(res.Jobs, rec)
		if os.Getenv("BENCH_TRACE_DEBUG") != "" && len(rec.Starts) > 0 && slow < 3 &&
			(!rec.Done || rec.Finish-rec.Starts[0] > 2*j.Duration+10*time.Minute) && rec.Arrival < s.Horizon/2 {
			slow++
			for _, a := range allocs {
				if info, _, err := c.API().Allocations().Info(a.ID, nil); err == nil {
					t.Logf("%s: slow job %s (duration %s): %s", cfg.Name, j.ID, j.Duration, cluster.AllocSummary(info))
				}
			}
		}
		for _, a := range allocs {
			// A replay whose tasks fail measures nothing: say why, once.
			if a.ClientStatus == api.AllocClientStatusFailed && !failed {
				failed = true
				if info, _, err := c.API().Allocations().Info(a.ID, nil); err == nil {
					t.Errorf("%s: job %s failed: %s", cfg.Name, j.ID, cluster.AllocSummary(info))
				}
			}
		}
	}
	if unread > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("%d task logs of the %d preemptions could not be read, their nodes removed (scaled in) first: those preemptions count no lost work, so lost work is a lower bound", unread, preempted))
	}
	m := replayMeasures{boots: pool.bootTimes()}
	if len(waits) > 0 {
		m.startLatency = time.Duration(quantile.Of(waits, 0.1) * float64(time.Second))
	}
	_, _, removed, errs := pool.snapshot()
	for _, e := range errs {
		t.Errorf("sim pool: %v", e)
	}
	for _, r := range removed {
		if len(r.running) > 0 {
			t.Errorf("the pool removed %s while it ran %v", r.name, r.running)
		}
	}
	t.Logf("%s: %d jobs submitted in %s, %d allocations", cfg.Name, len(submitted), time.Since(t0).Round(time.Second), len(stubs))
	return res, m
}

// logValue is the last key=N the allocation's task logged, -1 if none;
// ok is false, with -1, where its logs cannot be read (its node is gone).
func logValue(c *cluster.Cluster, allocID, key string) (n int, ok bool) {
	logs, err := c.TryAllocLogs(allocID, "t", "stdout")
	if err != nil {
		return -1, false
	}
	re := regexp.MustCompile(`(?m)^` + key + `=(\d+)`)
	ms := re.FindAllStringSubmatch(logs, -1)
	if len(ms) == 0 {
		return -1, true
	}
	n, _ = strconv.Atoi(ms[len(ms)-1][1])
	return n, true
}

func nomadVersion(t testing.TB, c *cluster.Cluster) string {
	self, err := c.API().Agent().Self()
	if err != nil {
		t.Fatalf("agent self: %v", err)
	}
	if v, ok := self.Config["Version"].(map[string]any); ok {
		return fmt.Sprintf("Nomad %v%v", v["Version"], prerelease(v["VersionPrerelease"]))
	}
	return "Nomad (version unknown)"
}

func prerelease(v any) string {
	if s, ok := v.(string); ok && s != "" {
		return "-" + s
	}
	return ""
}

// waitDevices waits until every ready node of the pool shows the devices
// of its layout, so that the first jobs are not queued for a fingerprint.
func waitDevices(t testing.TB, c *cluster.Cluster, pool *simPool, gpus int) {
	t.Helper()
	pool.mu.Lock()
	var names []string
	for name, n := range pool.nodes {
		if n.state == "ready" {
			names = append(names, name)
		}
	}
	pool.mu.Unlock()
	for _, name := range names {
		c.WaitForNode(t, name, func(n *api.Node) bool {
			d := n.Drivers["gpu"]
			if d == nil || !d.Healthy || n.NodeResources == nil {
				return false
			}
			physical := map[string]bool{}
			for _, g := range n.NodeResources.Devices {
				for _, in := range g.Instances {
					if in.Locality != nil && in.Locality.PciBusID != "" {
						physical[in.Locality.PciBusID] = true
					}
				}
			}
			return len(physical) == gpus
		}, 2*time.Minute)
	}
}

// sampler scrapes the APM's exporter twice a second until the horizon.
type sampler struct {
	done    chan struct{}
	mu      sync.Mutex
	samples []tracereplay.Sample
}

func startSampler(t testing.TB, url string, pool *simPool, shape tracereplay.Cluster, t0 time.Time, compression float64, horizon time.Duration) *sampler {
	s := &sampler{done: make(chan struct{})}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		end := t0.Add(horizon)
		failures := 0
		for now := time.Now(); !now.After(end); now = <-tick.C {
			smp, err := scrapeSample(url, shape)
			if err != nil {
				failures++
				if failures == 5 {
					t.Logf("bench-trace: the APM exporter fails: %v", err)
				}
				continue
			}
			smp.At = time.Duration(float64(now.Sub(t0)) * compression)
			smp.Nodes = pool.up()
			s.mu.Lock()
			s.samples = append(s.samples, smp)
			s.mu.Unlock()
		}
	}()
	return s
}

// wait returns the samples once the horizon is reached.
func (s *sampler) wait() []tracereplay.Sample {
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.samples
}

// scrapeSample reads one Sample (less At and Nodes) from the APM's
// exporter: GPU-equivalents per device label, weighted as the layout
// makes them (an MPS share is 1/shares of a GPU, a MIG instance its
// sevenths).
func scrapeSample(url string, shape tracereplay.Cluster) (tracereplay.Sample, error) {
	var smp tracereplay.Sample
	resp, err := http.Get(url)
	if err != nil {
		return smp, err
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(promodel.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return smp, err
	}
	type byDevice map[string]float64
	read := func(name string) byDevice {
		out := byDevice{}
		f := families[name]
		if f == nil {
			return out
		}
		for _, m := range f.Metric {
			dev := ""
			for _, l := range m.Label {
				if l.GetName() == "device" {
					dev = l.GetValue()
				}
			}
			out[dev] += m.GetGauge().GetValue()
		}
		return out
	}
	weight := func(dev string) float64 {
		switch {
		case dev == "nvidia/mps" && shape.MPSShares > 0:
			return 1 / float64(shape.MPSShares)
		case strings.HasPrefix(dev, "nvidia/mig/"):
			if g, err := tracereplay.MIGSevenths(strings.TrimPrefix(dev, "nvidia/mig/")); err == nil {
				return float64(g) / 7
			}
		}
		return 1
	}
	devices, allocated := read("nomad_gpu_cluster_devices"), read("nomad_gpu_cluster_allocated_devices")
	free, frag := read("nomad_gpu_cluster_free_devices"), read("nomad_gpu_cluster_fragmentation_ratio")
	load := read("nomad_gpu_cluster_load_ratio")
	var freeAll, stranded float64
	for dev, n := range devices {
		w := weight(dev)
		smp.GPUs += n * w
		smp.Allocated += allocated[dev] * w
		smp.Busy += load[dev] * allocated[dev] * w
		freeAll += free[dev]
		stranded += frag[dev] * free[dev]
	}
	if freeAll > 0 {
		smp.Fragmentation = stranded / freeAll
	}
	for _, v := range read("nomad_gpu_cluster_queued_allocs") {
		smp.Queued += int(v)
	}
	return smp, nil
}
