package realengine

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
// (what the task did between its commit and its stop). With a preemption
// cooldown as well, a `nomad-gpu controller` protects preempted jobs once
// their replacement runs, as the model's Policy says.
//
// The cluster's figures come from nomad-gpu-apm's exporter
// (nomad_gpu_cluster_*: devices, allocated, utilisation, fragmentation,
// queue), scraped twice a second: the same code the dashboard shows. The
// jobs' records come from their allocations' task states.

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	"github.com/prometheus/common/expfmt"
	promodel "github.com/prometheus/common/model"

	"github.com/nomad-gpu/nomad-gpu/autoscaler/strategy/gpuqueue"
	"github.com/nomad-gpu/nomad-gpu/bench/tracereplay"
	"github.com/nomad-gpu/nomad-gpu/bench/tracereplay/report"
	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/contract/gpulayout"
	"github.com/nomad-gpu/nomad-gpu/controller"
	"github.com/nomad-gpu/nomad-gpu/e2e/cluster"
	"github.com/nomad-gpu/nomad-gpu/e2e/harness"
	"github.com/nomad-gpu/nomad-gpu/internal/quantile"
	"github.com/nomad-gpu/nomad-gpu/internal/testenv"
	"github.com/nomad-gpu/nomad-gpu/nomadview"
	"github.com/nomad-gpu/nomad-gpu/wire/autoscaler"
)

func TestTraceReplay(t *testing.T) {
	out := os.Getenv("BENCH_TRACE_DIR")
	if out == "" {
		t.Skip("bench-trace: BENCH_TRACE_DIR not set (make bench-trace sets it); skipping")
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
	for _, cfg := range setup.Configs {
		// Before anything starts: a configuration it does not run fails
		// the run, rather than being half replayed.
		if err := cfg.RealEngine(); err != nil {
			t.Fatalf("bench-trace: %v", err)
		}
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
	var lats []tracereplay.Latencies
	var distorted []string
	for _, cfg := range setup.Configs {
		t.Run(cfg.Name, func(t *testing.T) {
			cfg, err := tracereplay.Resolve(cfg, real)
			if err != nil {
				t.Fatal(err)
			}
			r, lat := replayOnNomad(t, setup, cfg)
			if t.Failed() {
				return // the report leaves out what did not replay as written
			}
			real = append(real, r)
			lats = append(lats, lat)
			for _, v := range r.Distortion.Violations(r.Compression) {
				distorted = append(distorted, cfg.Name+": "+v)
			}
		})
	}
	if len(real) == 0 {
		return
	}
	for i, r := range real {
		t.Logf("model latencies of %s from this run: %+v", r.Config.Name, lats[i])
	}
	// The record names how jobs bigger than a node were replayed: bench-trace
	// -real reads a record without it as one from before the flag.
	flags := append(strings.Fields(os.Getenv("BENCH_TRACE_FLAGS")), "-multi-node="+p.MultiNode)
	rr := tracereplay.RealRun{Flags: flags, Started: started, Elapsed: time.Since(started), Results: real, Latencies: lats}
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := report.FromReal(out, "Trace replay: "+filepath.Base(p.TracePath()), setup, rr); err != nil {
		t.Fatal(err)
	}
	t.Logf("bench-trace: report in %s", filepath.Join(out, "report.md"))
	// The report is written either way, so the distortion can be read.
	for _, d := range distorted {
		t.Errorf("bench-trace: the real run is over its distortion limits: %s", d)
	}
}

// median is the median of ds; 0 for none.
func median(ds []time.Duration) time.Duration {
	return quantileOf(ds, 0.5)
}

func quantileOf(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	xs := make([]float64, len(ds))
	for i, d := range ds {
		xs[i] = d.Seconds()
	}
	return time.Duration(quantile.Of(xs, q) * float64(time.Second))
}

// cpuTimes reads the machine's busy and total CPU time (USER_HZ ticks)
// from /proc/stat.
func cpuTimes(t testing.TB) (busy, total uint64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		t.Fatalf("reading /proc/stat: %v", err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	for i, f := range strings.Fields(line)[1:] {
		v, _ := strconv.ParseUint(f, 10, 64)
		total += v
		if i != 3 && i != 4 { // idle, iowait
			busy += v
		}
	}
	return busy, total
}

// replayJob is the Nomad job of a trace job.
// With a commitTimeout the task checkpoints; 0 leaves the block out.
// Movable opts the job in to the controller's moves (Features.Moves). Its
// memory is 64 MiB: sim-load alone (the nomad-gpu binary) has a resident
// set of about 23.5 MiB, and at 24 MiB a task can be killed for memory
// when its shell forks to commit a checkpoint, and lose its work.
func replayJob(j tracereplay.Job, s tracereplay.Slice, work time.Duration, cli string, commitTimeout time.Duration, movable bool) string {
	script := harness.ReplayTask(work, j.EffectiveUtil(), cli)
	ck, meta := "", ""
	if commitTimeout > 0 {
		ck = fmt.Sprintf(`
        checkpoint {
          commit_timeout = %q
        }`, commitTimeout)
	}
	if movable {
		meta = fmt.Sprintf(`
  meta {
    %s = "true"
  }`, controller.MetaMovable)
	}
	return fmt.Sprintf(`
job %q {
  type      = "batch"
  priority  = %d
  node_pool = "gpu"%s
  group "g" {
    restart {
      attempts = 0
      mode     = "fail"
    }
    reschedule {
      attempts       = 1
      interval       = "24h"
      delay          = "5s"
      delay_function = "constant"
      unlimited      = false
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
        memory = 64
        device %q {
          count = %d
        }
      }
    }
  }
}`, j.ID, j.EffectivePriority(), meta, script, ck, s.Device(), s.Count)
}

// layoutFor is the sim node layout a configuration's nodes have.
func layoutFor(c tracereplay.Cluster, f tracereplay.Features) *harness.NodeLayout {
	l := &harness.NodeLayout{}
	if !f.Slices {
		return l
	}
	gpu := c.GPUsPerNode - 1
	for i := 0; i < c.MIGGPUs; i++ {
		l.MIG = append(l.MIG, gpu)
		gpu--
	}
	l.MIGProfiles = c.MIGProfiles
	for i := 0; i < c.MPSGPUs; i++ {
		l.MPS = append(l.MPS, gpu)
		gpu--
	}
	l.MPSShares = c.MPSShares
	return l
}

// replayOnNomad replays the trace on a fresh cluster in configuration
// cfg, and says what the model's latencies are in it.
func replayOnNomad(t *testing.T, s tracereplay.Setup, cfg tracereplay.Config) (tracereplay.Result, tracereplay.Latencies) {
	s.Trace = s.Cluster.JobsOf(s.Trace, cfg)
	refuseStockGangPreemption(t, s, cfg)
	cli := cluster.RequireBinary(t, "nomad-gpu")
	apmBin := cluster.RequireBinary(t, "nomad-gpu-apm")
	c := cluster.Start(t, cluster.Options{Clients: 0})
	if cfg.Preemption {
		c.EnablePreemption(t)
	}
	pool := harness.NewSimPool(t, c, "gpu")
	layout := layoutFor(s.Cluster, cfg.Features)
	driverHCL := fmt.Sprintf("nomad {\naddress = %q\n}\nisolation {\nunveil_paths = [%q]\n}", c.Server().HTTPAddr(), "rx:"+filepath.Dir(cli))
	if !cfg.Gangs {
		driverHCL += fmt.Sprintf("\ngang {\nwait = %q\n}", stockGangWait)
	}
	if cfg.Queues {
		makeQueueNamespaces(t, c, s)
	}
	ctl := replayController(t, c, cfg, s)
	// One checkpoint root for the pool, as on a shared filesystem: a
	// preempted job may resume on another node.
	shared := harness.NewGPUNode(t).CheckpointRoot()
	pool.Configure = func(n *harness.GPUNode) {
		n.Layout, n.DriverHCL, n.SharedCheckpoints = layout, driverHCL, shared
		if cfg.Layouts {
			n.DeviceHCL = replayLayoutHCL(*n)
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	apmAddr := harness.FreeAddr(t)
	apmc, err := autoscaler.Launch(ctx, apmBin, autoscaler.TypeAPM, map[string]string{"metrics_address": apmAddr, "stats_ttl": "1s"},
		autoscaler.WithNomad(&api.Config{Address: c.Server().HTTPAddr()}))
	if err != nil {
		t.Fatalf("launching nomad-gpu-apm: %v", err)
	}
	t.Cleanup(apmc.Kill)

	pool.ScaleTo(t, cfg.StartNodes(s.Cluster), 3*time.Minute)
	// The nodes' devices are fingerprinted a moment after they are ready;
	// wait for them before an autoscaler starts, which may remove nodes
	// at once (target-value scales in an idle pool).
	waitDevices(t, c, pool, s.Cluster.GPUsPerNode)
	lat := tracereplay.DefaultLatencies()
	if d := median(pool.BootTimes()); d > 0 {
		lat.Boot = d
	}
	var strategyMetrics string
	if cfg.Autoscale != "" {
		var policy string
		hcl := harness.AutoscalerAgentHCL
		if cfg.Autoscale == tracereplay.AutoscaleTargetValue {
			policy = harness.TargetValuePolicy(pool.URL(), s.Cluster.MinNodes, s.Cluster.MaxNodes, s.Policy)
		} else {
			// gpu-queue takes a boot_time of at least 1s: the real one,
			// not the compressed one.
			boot := max(time.Second, lat.Boot.Round(time.Second))
			policy = harness.GPUQueuePolicy(pool.URL(), s.Cluster.MinNodes, s.Cluster.MaxNodes, s.Cluster.WholeGPUs(cfg.Features), s.Policy, boot, cfg.Layouts)
			if cfg.ScaleIn {
				// Nodes the controller empties for removal go at once.
				policy = harness.WithRemovable(policy)
			}
			// Its check runs tell whether the policy ran as written.
			addr := harness.FreeAddr(t)
			strategyMetrics = "http://" + addr + gpuqueue.MetricsPath
			hcl = strings.Replace(hcl, `driver = "gpu-queue"`, fmt.Sprintf("driver = \"gpu-queue\"\n  config = {\n    metrics_address = %q\n  }", addr), 1)
		}
		c.StartAutoscaler(t, cluster.AutoscalerOptions{
			PluginDir: harness.AutoscalerPlugins(t), HCL: hcl,
			Policies: map[string]string{"gpu-pool.hcl": policy},
		})
	}
	featuresAsWritten(t, c, cfg, ctl)

	wall := func(d time.Duration) time.Duration { return time.Duration(float64(d) / s.Compression) }
	trace := func(d time.Duration) time.Duration { return time.Duration(float64(d) * s.Compression) }
	res := tracereplay.Result{
		Engine: "nomad", Version: nomadVersion(t, c), Config: cfg, Cluster: s.Cluster,
		Compression: s.Compression, Horizon: s.Horizon, Distortion: &tracereplay.Distortion{},
		PlacementsRecorded: true,
	}
	busy0, total0 := cpuTimes(t)
	t0 := time.Now()
	var layouts *layoutSampler
	if cfg.Layouts {
		layouts = &layoutSampler{c: c, pool: "gpu", last: map[string]string{}}
	}
	// An MPS share is 1/shares of a GPU: the static mps blocks', or with
	// layouts the share count the controller relays GPUs to.
	mpsShares := s.Cluster.MPSShares
	if cfg.Layouts {
		mpsShares = s.Cluster.Shares()
	}
	sampler := startSampler(t, "http://"+apmAddr+"/metrics", pool, mpsShares, t0, s.Compression, wall(s.Horizon), layouts)
	submitted := make(map[string]time.Time, len(s.Trace.Jobs))
	regEval := make(map[string]string, len(s.Trace.Jobs))
	var lags []time.Duration
	for _, j := range s.Trace.Jobs {
		due := t0.Add(wall(j.Arrival))
		if d := time.Until(due); d > 0 {
			time.Sleep(d)
		}
		sl := s.Cluster.Slice(j, cfg.Features)
		submitted[j.ID] = time.Now()
		lags = append(lags, max(0, submitted[j.ID].Sub(due)))
		var commit time.Duration
		if cfg.Checkpoints {
			commit = s.Policy.CommitTimeout
		}
		jobHCL := replayJob(j, sl, wall(j.Duration), cli, commit, cfg.Moves)
		switch q := s.Cluster.QueueOf(j.Team); {
		case sl.Members > 1:
			regEval[j.ID] = registerJob(t, c, replayGangJob(j, sl, wall(j.Duration), cli, commit, cfg.Gangs))
		case cfg.Queues && q != "":
			regEval[j.ID] = registerHeld(t, c, jobHCL, q)
		default:
			regEval[j.ID] = registerJob(t, c, jobHCL)
		}
	}
	res.Timeline = sampler.wait()
	if cfg.Reservations {
		// The controller's own counts, read at the horizon: its idle
		// GPU-seconds are wall clock.
		decisions := ctl.MetricByLabel(t, contract.MetricControllerDecisions, "kind")
		res.Reservations = int(decisions["reserved"])
		res.ReservationIdleGPUHours = ctl.Metric(t, contract.MetricControllerReserveIdle) * s.Compression / 3600
		res.Notes = append(res.Notes, fmt.Sprintf("%d reservations made; %d jobs backfilled on their GPUs (the controller's decisions)",
			res.Reservations, int(decisions["backfilled"])))
	}
	if layouts != nil {
		res.LayoutChanges, res.LayoutsRecorded = layouts.changes, true
	}
	if strategyMetrics != "" {
		res.Notes = append(res.Notes, checksAsWritten(t, strategyMetrics)...)
	}
	busy1, total1 := cpuTimes(t)
	if total1 > total0 {
		res.Distortion.CPUBusy = float64(busy1-busy0) / float64(total1-total0)
	}
	res.Distortion.SubmitLagP50, res.Distortion.SubmitLagP95 = quantileOf(lags, 0.5), quantileOf(lags, 0.95)

	stubs, _, err := c.API().Allocations().List(&api.QueryOptions{Namespace: "*", Params: map[string]string{"resources": "true"}})
	if err != nil {
		t.Fatalf("listing allocations: %v", err)
	}
	rc := recordCollector{c: c, t0: t0, horizon: t0.Add(wall(s.Horizon)), trace: trace, byID: map[string]*api.AllocationListStub{},
		moved: movedAllocs(t, c, cfg), startsByKind: map[string][]time.Duration{}, removed: map[string]harness.RemovedNode{}}
	_, _, removedNodes, _ := pool.Snapshot()
	for _, r := range removedNodes {
		rc.removed[r.Name] = r
	}
	if cfg.Queues {
		rc.reclaimed = reclaimedJobs(ctl.Log())
	}
	byJob := map[string][]*api.AllocationListStub{}
	for _, a := range stubs {
		byJob[a.JobID] = append(byJob[a.JobID], a)
		rc.byID[a.ID] = a
	}
	for _, j := range s.Trace.Jobs {
		rec := j.Record(s.Cluster.Slice(j, cfg.Features))
		rec.Submitted = trace(submitted[j.ID].Sub(t0))
		if rec.Slice.Members > 1 {
			_, step := gangSteps(wall(j.Duration))
			rc.collectGang(t, &rec, byJob[j.ID], trace(step))
			res.Jobs = append(res.Jobs, rec)
			continue
		}
		rc.collect(t, &rec, byJob[j.ID])
		// A job its first evaluation placed (it was not blocked) tells
		// the scheduler's own latency.
		if as := byJob[j.ID]; len(as) > 0 && as[0].EvalID == regEval[j.ID] {
			rc.places = append(rc.places, time.Unix(0, as[0].CreateTime).Sub(submitted[j.ID]))
		}
		res.Jobs = append(res.Jobs, rec)
	}
	res.Notes = append(res.Notes, rc.notes()...)
	res.Incomplete = rc.incomplete
	res.Distortion.StartP50, res.Distortion.StartP95, res.Distortion.StartP99 = quantileOf(rc.starts, 0.5), quantileOf(rc.starts, 0.95), quantileOf(rc.starts, 0.99)
	res.Distortion.PreemptP50 = median(rc.preempts)
	if d := median(rc.places) + median(rc.starts); d > 0 {
		lat.Start = d
	}
	lat.StartByKind = startSpreads(median(rc.places), rc.startsByKind)
	if d := median(rc.preempts); d > 0 {
		lat.Preempt = d
	}
	if p50, p95 := layoutApplyQuantiles(t, ctl); cfg.Layouts && p50 > 0 {
		lat.Layout, lat.LayoutP95 = p50, p95
	}
	_, _, removed, errs := pool.Snapshot()
	for _, e := range errs {
		t.Errorf("sim pool: %v", e)
	}
	for _, r := range removed {
		if len(r.Running) > 0 {
			t.Errorf("the pool removed %s while it ran %v", r.Name, r.Running)
		}
	}
	t.Logf("%s: %d jobs submitted in %s, %d allocations", cfg.Name, len(submitted), time.Since(t0).Round(time.Second), len(stubs))
	if ctl != nil {
		t.Logf("%s: the controller's decisions: %s", cfg.Name, controllerDecisions(t, ctl))
	}
	return res, lat
}

// movedAllocs are the allocations the controller moved, from its move
// history (controller.MovesVariable); none without Features.Moves.
func movedAllocs(t *testing.T, c *cluster.Cluster, cfg tracereplay.Config) map[string]bool {
	out := map[string]bool{}
	if !cfg.Moves {
		return out
	}
	records, _, err := controller.LoadMoves(context.Background(), c.API(), "default")
	if err != nil {
		t.Fatalf("%s: reading the controller's moves: %v", cfg.Name, err)
	}
	for _, r := range records {
		out[r.Alloc] = true
	}
	return out
}

// layoutsAsWritten fails the replay when a pool node does not follow
// layouts: its device plugin publishes no layout group per GPU.
func layoutsAsWritten(t *testing.T, c *cluster.Cluster, cfg tracereplay.Config) {
	t.Helper()
	nodes, _, err := c.API().Nodes().List(&api.QueryOptions{Params: map[string]string{"resources": "true"}})
	if err != nil {
		t.Fatalf("listing nodes: %v", err)
	}
	for _, n := range nodes {
		if n.NodePool != "gpu" || n.Status != api.NodeStatusReady || n.NodeResources == nil {
			continue
		}
		groups := 0
		for _, d := range n.NodeResources.Devices {
			if d.Type == contract.SliceLayout {
				groups++
			}
		}
		if groups == 0 {
			t.Fatalf("%s: node %s publishes no GPU layout: its device plugin does not follow layouts, so the configuration would not run as written", cfg.Name, n.Name)
		}
	}
}

// registerJob submits a job and returns its evaluation's ID.
func registerJob(t *testing.T, c *cluster.Cluster, jobHCL string) string {
	t.Helper()
	job, err := c.API().Jobs().ParseHCLOpts(&api.JobsParseRequest{JobHCL: jobHCL, Canonicalize: true})
	if err != nil {
		t.Fatalf("parse job: %v", err)
	}
	resp, _, err := c.API().Jobs().Register(job, nil)
	if err != nil {
		t.Fatalf("register job %s: %v", *job.ID, err)
	}
	return resp.EvalID
}

// replayController starts the controller, one replica, when the
// configuration protects preempted work (checkpointed preemption with a
// cooldown: it raises a preempted job once its replacement runs, as the
// model's Policy says), lays GPUs out, moves work or admits gangs (with
// reservations, where it has them). Nil when it does none of these.
func replayController(t *testing.T, c *cluster.Cluster, cfg tracereplay.Config, s tracereplay.Setup) *cluster.Controller {
	p := s.Policy
	protect := cfg.Checkpoints && p.PreemptionCooldown > 0
	if !protect && !cfg.Layouts && !cfg.Moves && !cfg.Gangs && !cfg.Queues {
		return nil
	}
	cooldown := time.Duration(0)
	if protect {
		cooldown = p.PreemptionCooldown
	}
	args := []string{"-preemption-cooldown", cooldown.String(), "-tick", harness.ReplayControllerTick.String(), "-layouts=" + strconv.FormatBool(cfg.Layouts),
		"-moves=" + strconv.FormatBool(cfg.Moves), "-gangs=" + strconv.FormatBool(cfg.Gangs || cfg.Queues)}
	if cfg.Queues {
		// The queues admit through the gangs' gate.
		args = append(args, "-queues", queueFile(t, s, cfg))
	}
	if cfg.Reservations {
		args = append(args, "-reservations", "-reserve-max-hold", p.ReservationMaxHold.String())
	}
	if cfg.Layouts {
		args = append(args, "-layout-shares", "*="+strconv.Itoa(s.Cluster.Shares()), "-layout-min-interval", p.LayoutMinInterval.String())
	}
	if cfg.Moves {
		// Relief is off: replay tasks' load is the trace's, not a
		// platform rule's to move.
		args = append(args, "-move-budget-hour", strconv.Itoa(p.MoveBudgetHour), "-move-budget-job-day", strconv.Itoa(p.MoveBudgetJobDay),
			"-move-settle", p.MoveSettle.String(), "-move-hold", p.MoveHold.String(), "-relief-high", "0")
	}
	args = append(args, scaleInArgs(cfg, s)...)
	return c.StartController(t, "controller", args...)
}

// scaleInArgs are the controller's scale-in flags of a configuration with
// Features.ScaleIn: the replay's node pool emptied down to the policy's
// min, after the quiet period and with the wait of its Policy; none
// without.
func scaleInArgs(cfg tracereplay.Config, s tracereplay.Setup) []string {
	if !cfg.ScaleIn {
		return nil
	}
	p := s.Policy
	return []string{"-scale-in-pools", "gpu", "-scale-in-quiet", p.ScaleInQuiet.String(),
		"-scale-in-min-nodes", strconv.Itoa(s.Cluster.MinNodes), "-scale-in-wait", p.ScaleInWait.String()}
}

// startSpreads are the starts' median and tail by kind of slice, each
// the scheduler's median placement (place) plus the kind's starts, for
// the kinds with at least minSpreadStarts starts.
func startSpreads(place time.Duration, byKind map[string][]time.Duration) map[string]tracereplay.Spread {
	out := map[string]tracereplay.Spread{}
	for kind, ds := range byKind {
		if len(ds) < minSpreadStarts {
			continue
		}
		p50 := place + median(ds)
		out[kind] = tracereplay.Spread{P50: p50, P95: p50 + quantileOf(ds, 0.95) - median(ds), P99: p50 + quantileOf(ds, 0.99) - median(ds)}
	}
	return out
}

// minSpreadStarts is the fewest starts of a kind that tell its spread.
const minSpreadStarts = 10

// layoutApplyQuantiles are the median and 95th percentile of the
// controller's relayouts, decision to applied
// (nomad_gpu_controller_layout_apply_seconds), interpolated within its
// buckets as Prometheus's histogram_quantile does; 0 without a relayout
// or a controller.
func layoutApplyQuantiles(t *testing.T, ctl *cluster.Controller) (p50, p95 time.Duration) {
	if ctl == nil {
		return 0, 0
	}
	h := ctl.Histogram(t, contract.MetricControllerLayoutApplied)
	if h == nil || h.GetSampleCount() == 0 {
		return 0, 0
	}
	var bounds, counts []float64
	for _, b := range h.GetBucket() {
		bounds, counts = append(bounds, b.GetUpperBound()), append(counts, float64(b.GetCumulativeCount()))
	}
	at := func(q float64) time.Duration {
		return time.Duration(quantile.FromBuckets(bounds, counts, float64(h.GetSampleCount()), q) * float64(time.Second))
	}
	return at(0.5), at(0.95)
}

// replayLayoutHCL is the device plugin's layout block of a replay node:
// the defaults an operator runs (poll 2s, drain grace 3s), its agent's
// metadata, a state file of its own.
func replayLayoutHCL(n harness.GPUNode) string {
	return fmt.Sprintf("nomad {\n  address = %q\n}\nlayout {\n  enabled    = true\n  state_file = %q\n}", cluster.SelfHTTPAddr, filepath.Join(n.Dir, "layouts.json"))
}

// layoutSampler reads the pool's GPU layouts from the node list, one
// request a sample, and records every change it sees. The servers learn
// of a change with the node's next update (5–10 s batches), so a change
// is timed as the servers saw it.
type layoutSampler struct {
	c       *cluster.Cluster
	pool    string
	last    map[string]string // node/GPU → layout
	changes []tracereplay.LayoutChange
}

// look is the ready nodes' MPS GPUs now; it records changes since the
// last look at trace time at. Only the sampler's goroutine calls it.
func (l *layoutSampler) look(at time.Duration) []tracereplay.NodeLayout {
	stubs, _, err := l.c.API().Nodes().List(&api.QueryOptions{Params: map[string]string{"resources": "true"}})
	if err != nil {
		return nil
	}
	var out []tracereplay.NodeLayout
	for _, n := range stubs {
		if n.NodePool != l.pool || n.Status != api.NodeStatusReady || n.NodeResources == nil {
			continue
		}
		nl := tracereplay.NodeLayout{Node: n.Name}
		for _, d := range n.NodeResources.Devices {
			if d.Type != contract.SliceLayout {
				continue
			}
			current := nomadview.AttrString(d.Attributes, contract.AttrLayoutCurrent)
			key := n.Name + "/" + d.Name
			if before, seen := l.last[key]; seen && before != current {
				l.changes = append(l.changes, tracereplay.LayoutChange{At: at, Node: n.Name, GPU: d.Name, From: before, To: current})
			}
			l.last[key] = current
			if lay, err := gpulayout.Parse(current); err == nil && lay.Kind == gpulayout.MPS {
				used, _ := nomadview.AttrInt(sharesGroup(n, d.Name), contract.AttrSharesInUse)
				nl.MPS = append(nl.MPS, tracereplay.MPSGPU{GPU: d.Name, Shares: lay.Shares, Free: max(0, lay.Shares-used)})
			}
		}
		if len(nl.MPS) > 0 {
			out = append(out, nl)
		}
	}
	return out
}

// sharesGroup is the attributes of the MPS group of a GPU.
func sharesGroup(n *api.NodeListStub, gpu string) map[string]*api.Attribute {
	for _, d := range n.NodeResources.Devices {
		if d.Type == contract.SliceMPS && d.Name == gpu {
			return d.Attributes
		}
	}
	return nil
}

// featuresAsWritten fails the replay when a feature of the configuration
// is off: a node's gpu driver reporting no MPS with slices, or no leading
// controller with protection (ctl). A configuration that did not happen
// must not be reported.
func featuresAsWritten(t *testing.T, c *cluster.Cluster, cfg tracereplay.Config, ctl *cluster.Controller) {
	t.Helper()
	if ctl != nil {
		if v := waitLeader(t, ctl, 30*time.Second); v != 1 {
			t.Fatalf("%s: the controller does not lead (%s = %v after 30s): preempted work would not be protected", cfg.Name, contract.MetricControllerLeader, v)
		}
	}
	if cfg.Layouts {
		layoutsAsWritten(t, c, cfg)
		return
	}
	if !cfg.Slices {
		return
	}
	nodes, _, err := c.API().Nodes().List(nil)
	if err != nil {
		t.Fatalf("listing nodes: %v", err)
	}
	for _, stub := range nodes {
		n, _, err := c.API().Nodes().Info(stub.ID, nil)
		if err != nil || n.NodePool != "gpu" || n.Status != api.NodeStatusReady {
			continue
		}
		d := n.Drivers["gpu"]
		if d == nil {
			t.Fatalf("%s: node %s has no gpu driver", cfg.Name, n.Name)
		}
		if got := d.Attributes["driver.gpu.mps"]; got != "true" {
			t.Fatalf("%s: node %s reports driver.gpu.mps = %q, want \"true\": the configuration would not run as written", cfg.Name, n.Name, got)
		}
	}
}

// waitLeader is the controller's leader gauge once it is 1, or its last
// value when within has passed first.
func waitLeader(t testing.TB, ctl *cluster.Controller, within time.Duration) float64 {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		v := ctl.Metric(t, contract.MetricControllerLeader)
		if v == 1 || time.Now().After(deadline) {
			return v
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// controllerDecisions are the controller's decisions by kind, for the log.
func controllerDecisions(t testing.TB, ctl *cluster.Controller) string {
	t.Helper()
	kinds := ctl.MetricByLabel(t, contract.MetricControllerDecisions, "kind")
	var out []string
	for _, k := range slices.Sorted(maps.Keys(kinds)) {
		out = append(out, fmt.Sprintf("%s %v", k, kinds[k]))
	}
	relaid := ctl.MetricByLabel(t, contract.MetricControllerLayoutChanges, contract.LabelLayoutKind)
	for _, k := range slices.Sorted(maps.Keys(relaid)) {
		out = append(out, fmt.Sprintf("relaid to %s %v", k, relaid[k]))
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}

// checksAsWritten fails the replay when a gpu-queue check of its policy
// was refused or never succeeded: a pool whose checks are refused never
// scales, and a report of it as autoscaled would be false. Checks that
// erred now and then (a metric not a number) are noted.
func checksAsWritten(t *testing.T, metrics string) (notes []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	runs, err := gpuqueue.ReadCheckRuns(ctx, metrics)
	if err != nil {
		t.Fatalf("reading gpu-queue's check runs: %v", err)
	}
	if len(runs) == 0 {
		t.Fatalf("gpu-queue ran no check: the policy never ran")
	}
	for _, r := range runs {
		switch {
		case r.Refused > 0 || r.Failing():
			t.Errorf("gpu-queue check %q (pool %s) failed %.0f of %.0f runs (%.0f refused): the policy did not run as written; the autoscaler's log says why",
				r.Check, r.Pool, r.Failures(), r.Failures()+r.OK, r.Refused)
		case r.Error > 0:
			notes = append(notes, fmt.Sprintf("gpu-queue check %q erred in %.0f of %.0f runs", r.Check, r.Error, r.Error+r.OK))
		}
	}
	return notes
}

// recordCollector turns a replay's allocations into job records: their
// runs, what they held, and their checkpoint record from the task logs.
type recordCollector struct {
	c       *cluster.Cluster
	t0      time.Time
	horizon time.Time
	trace   func(time.Duration) time.Duration
	byID    map[string]*api.AllocationListStub
	// moved are the allocations the controller moved (movedAllocs).
	moved map[string]bool
	// places are submission-to-placement latencies of jobs placed by
	// their first evaluation, starts placement-to-running ones, preempts
	// preemptor-placement-to-victim-stopped ones (wall clock).
	places, starts, preempts []time.Duration
	// startsByKind are starts by the kind of slice started (Slice.Kind).
	startsByKind map[string][]time.Duration
	// removed are the nodes the pool removed (scaled in), by name: their
	// task logs are read from their stopped agents' directories.
	removed map[string]harness.RemovedNode
	// preempted counts the preemptions and moves; unread those whose
	// progress no task log tells: neither Nomad nor the removed node's
	// directory had it.
	preempted, unread int
	// untold are the task logs read around preemptions that tell no
	// restore: those runs' progress is unknown.
	untold int
	failed bool
	// refused are allocations whose Reserve a relayout refused (placed on
	// a GPU being relaid out before the servers saw it so): Nomad places
	// them again, as the jobs' reschedule policy says; refusedJobs their
	// jobs.
	refused     int
	refusedJobs []string
	// oom are the tasks the kernel killed for memory; silent are the
	// preempted runs whose log tells neither a commit nor a stop (the
	// task died without handling its stop: its progress since its last
	// checkpoint is counted lost).
	oom, silent int
	// incomplete is the silent runs' evidence.
	incomplete []tracereplay.IncompleteRecord
	// stoppedMembers are gang members Nomad told to stop (preempted, or
	// the gang rolled back) while they waited for their peers: the gpu
	// driver refuses to start them, which Nomad records as a failure.
	stoppedMembers int
	// reclaimed are the jobs a team queue took runs back from
	// (Features.Queues): their runs Nomad was told to stop.
	reclaimed map[string]bool
}

func (rc *recordCollector) at(w time.Time) time.Duration { return rc.trace(w.Sub(rc.t0)) }

// startedTask counts allocation a of rec's job as a preempting placement
// where it is one, and is its task's state where the task started by the
// horizon, else nil.
func (rc *recordCollector) startedTask(rec *tracereplay.JobRecord, a *api.AllocationListStub) *api.TaskState {
	if len(a.PreemptedAllocations) > 0 && !time.Unix(0, a.CreateTime).After(rc.horizon) {
		rec.PreemptingPlacements++
	}
	st := a.TaskStates["t"]
	if st == nil || st.StartedAt.IsZero() || st.StartedAt.After(rc.horizon) {
		return nil
	}
	return st
}

// collect fills rec's runs from the job's allocations.
func (rc *recordCollector) collect(t *testing.T, rec *tracereplay.JobRecord, allocs []*api.AllocationListStub) {
	sort.Slice(allocs, func(a, b int) bool { return allocs[a].CreateIndex < allocs[b].CreateIndex })
	for _, a := range allocs {
		if a.ClientStatus == api.AllocClientStatusFailed {
			rc.failedAlloc(t, rec.ID, a.ID)
		}
		st := rc.startedTask(rec, a)
		if st == nil {
			continue
		}
		for _, e := range st.Events {
			if e != nil && e.Details["oom_killed"] == "true" {
				rc.oom++
			}
		}
		rc.starts = append(rc.starts, st.StartedAt.Sub(time.Unix(0, a.CreateTime)))
		rc.startsByKind[rec.Slice.Kind] = append(rc.startsByKind[rec.Slice.Kind], rc.starts[len(rc.starts)-1])
		run := tracereplay.Run{Start: rc.at(st.StartedAt), Node: a.NodeName, Held: held(a)}
		preempted := a.PreemptedByAllocation != "" || a.DesiredStatus == api.AllocDesiredStatusEvict
		switch {
		case st.FinishedAt.IsZero() || st.FinishedAt.After(rc.horizon):
			run.End, run.Open = rc.at(rc.horizon), true
		case preempted:
			run.End, run.Preempted = rc.at(st.FinishedAt), true
			if by := rc.byID[a.PreemptedByAllocation]; by != nil {
				rc.preempts = append(rc.preempts, st.FinishedAt.Sub(time.Unix(0, by.CreateTime)))
			}
		case rc.moved[a.ID]:
			run.End, run.Moved = rc.at(st.FinishedAt), true
		case rc.reclaimed[rec.ID] && a.DesiredStatus == api.AllocDesiredStatusStop:
			// Scaled to 0 by the controller for a lending queue.
			run.End, run.Reclaimed = rc.at(st.FinishedAt), true
		default:
			run.End = rc.at(st.FinishedAt)
			if a.ClientStatus == api.AllocClientStatusComplete && !st.Failed {
				rec.Done, rec.Finish = true, run.End
			}
		}
		// The checkpoint record matters around preemptions and moves
		// only: read the stopped run's and its successor's.
		prevStopped := len(rec.Runs) > 0 && rec.Runs[len(rec.Runs)-1].Interrupted()
		if run.Interrupted() || prevStopped {
			rc.progress(rec.ID, a.ID, &run)
		}
		if run.Interrupted() {
			rc.preempted++
		}
		rec.Runs = append(rec.Runs, run)
	}
}

// progress reads the run's checkpoint record from its task's log.
func (rc *recordCollector) progress(job, allocID string, run *tracereplay.Run) {
	logs, err := rc.taskLog(allocID, run.Node)
	if err != nil {
		if run.Interrupted() {
			rc.unread++
		}
		return
	}
	if !readProgress(logs, run, rc.trace) {
		rc.untold++
		return
	}
	_, stopped := harness.LogValue(logs, "stopped")
	_, committed := harness.LogValue(logs, "committed")
	if run.Interrupted() && !stopped && !committed {
		rc.silent++
		rc.incomplete = append(rc.incomplete, harness.IncompleteEvidence(rc.c, job, allocID, run.Node, logs))
	}
}

// taskLog is the replay task's stdout in allocation allocID on node:
// from Nomad, or, where the pool removed the node (Nomad reads a log from
// its client, which is gone), from the stopped agent's directory.
func (rc *recordCollector) taskLog(allocID, node string) (string, error) {
	logs, err := rc.c.TryAllocLogs(allocID, "t", "stdout")
	if r, ok := rc.removed[node]; err != nil && ok {
		return r.AllocLogs(allocID, "t", "stdout")
	}
	return logs, err
}

// readProgress fills the run's progress from its task's log: restored=,
// committed= and stopped= in ms of work done (wall clock), turned into
// trace time by trace. A log that tells no restore (the task was stopped
// before its first line: a checkpoint signal's default action kills it)
// leaves the run's progress unknown, and readProgress says so: that is
// not a restore of nothing, and counting it as one would count its
// predecessor's checkpoint lost.
func readProgress(logs string, run *tracereplay.Run, trace func(time.Duration) time.Duration) (told bool) {
	ms := func(key string) (time.Duration, bool) {
		v, ok := harness.LogValue(logs, key)
		return time.Duration(v) * time.Millisecond, ok
	}
	restored, restoredOK := ms("restored")
	if !restoredOK {
		return false
	}
	stopped, stoppedOK := ms("stopped")
	committed, committedOK := ms("committed")
	run.ProgressKnown = true
	run.Restored, run.Reached = trace(restored), trace(stopped)
	if !stoppedOK {
		run.Reached = run.Restored + (run.End - run.Start)
	}
	if committedOK {
		run.Checkpointed, run.Saved = true, trace(committed)
		// Work ms are wall ms: the work done after the commit is the
		// wall-clock gap from commit to exit.
		run.StopGap = max(0, stopped-committed)
	}
	return true
}

// failedAlloc counts an allocation a relayout refused, and fails the
// replay, once, on any other failure: a replay whose tasks fail measures
// nothing.
func (rc *recordCollector) failedAlloc(t *testing.T, job, id string) {
	info, _, err := rc.c.API().Allocations().Info(id, nil)
	if err == nil && controller.RefusedByRelayout(info.TaskStates) {
		rc.refused++
		if !slices.Contains(rc.refusedJobs, job) {
			rc.refusedJobs = append(rc.refusedJobs, job)
		}
		return
	}
	if rc.failed {
		return
	}
	rc.failed = true
	if err == nil {
		t.Errorf("job %s failed: %s", job, cluster.AllocSummary(info))
	}
}

func (rc *recordCollector) notes() []string {
	var notes []string
	if rc.stoppedMembers > 0 {
		notes = append(notes, fmt.Sprintf("%d gang members were told to stop (preempted, or their gang rolled back) while they waited for their peers; the gpu driver refused to start them, which Nomad records as failed", rc.stoppedMembers))
	}
	if rc.refused > 0 {
		notes = append(notes, fmt.Sprintf("%d allocations were placed on a GPU being relaid out before the servers saw it so: their Reserve was refused, and the controller asked Nomad to place them again at once (a forced reschedule): jobs %s", rc.refused, strings.Join(rc.refusedJobs, ", ")))
	}
	if rc.unread > 0 {
		notes = append(notes, fmt.Sprintf("%d task logs of the %d preemptions and moves could not be read, from Nomad nor from their removed nodes' directories: those count no lost work, so lost work is a lower bound", rc.unread, rc.preempted))
	}
	if rc.oom > 0 {
		notes = append(notes, fmt.Sprintf("%d tasks were killed for memory (the kernel's OOM killer)", rc.oom))
	}
	if rc.silent > 0 {
		notes = append(notes, fmt.Sprintf("%d preempted or moved runs logged neither a commit nor a stop: their tasks died without handling the stop, and their progress since their last checkpoint counts as lost (evidence in %s)", rc.silent, report.IncompleteFile))
	}
	if rc.untold > 0 {
		notes = append(notes, fmt.Sprintf("%d runs around preemptions were stopped before their task logged its restore: the preemptions before and after each count no lost work, so lost work is a lower bound", rc.untold))
	}
	return notes
}

// held is what the allocation holds of each GPU: whole GPUs by count, MPS
// shares by their GPU (a share's ID names it).
func held(a *api.AllocationListStub) []tracereplay.Hold {
	if a.AllocatedResources == nil || a.AllocatedResources.Tasks["t"] == nil {
		return nil
	}
	var out []tracereplay.Hold
	for _, d := range a.AllocatedResources.Tasks["t"].Devices {
		switch d.Type {
		case "mps":
			per := map[string]int{}
			for _, id := range d.DeviceIDs {
				gpu, _, ok := contract.ParseShareID(id)
				if !ok {
					gpu = id
				}
				per[gpu]++
			}
			for gpu, n := range per {
				out = append(out, tracereplay.Hold{Kind: "mps", GPU: gpu, Units: n})
			}
		case "mig":
			out = append(out, tracereplay.Hold{Kind: "mig", Profile: d.Name, Units: len(d.DeviceIDs)})
		default:
			out = append(out, tracereplay.Hold{Kind: "gpu", Units: len(d.DeviceIDs)})
		}
	}
	return out
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
func waitDevices(t testing.TB, c *cluster.Cluster, pool *harness.SimPool, gpus int) {
	t.Helper()
	for _, name := range pool.ReadyNodes() {
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
	// layouts, when set, reads the nodes' GPU layouts at each sample
	// (Features.Layouts) and records their changes.
	layouts *layoutSampler
}

func startSampler(t testing.TB, url string, pool *harness.SimPool, mpsShares int, t0 time.Time, compression float64, horizon time.Duration, layouts *layoutSampler) *sampler {
	s := &sampler{done: make(chan struct{}), layouts: layouts}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		end := t0.Add(horizon)
		failures := 0
		for now := time.Now(); !now.After(end); now = <-tick.C {
			smp, err := scrapeSample(url, mpsShares)
			if err != nil {
				failures++
				if failures == 5 {
					t.Logf("bench-trace: the APM exporter fails: %v", err)
				}
				continue
			}
			smp.At = time.Duration(float64(now.Sub(t0)) * compression)
			smp.Nodes = pool.Up()
			if s.layouts != nil {
				smp.Layouts = s.layouts.look(smp.At)
			}
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
func scrapeSample(url string, mpsShares int) (tracereplay.Sample, error) {
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
		case dev == "nvidia/mps" && mpsShares > 0:
			return 1 / float64(mpsShares)
		case strings.HasPrefix(dev, "nvidia/mig/"):
			if g, err := tracereplay.MIGSevenths(strings.TrimPrefix(dev, "nvidia/mig/")); err == nil {
				return float64(g) / 7
			}
		}
		return 1
	}
	devices, allocated := read("nomad_gpu_cluster_devices"), read("nomad_gpu_cluster_allocated_devices")
	load := read("nomad_gpu_cluster_load_ratio")
	for dev, n := range devices {
		w := weight(dev)
		smp.GPUs += n * w
		smp.Allocated += allocated[dev] * w
		smp.Busy += load[dev] * allocated[dev] * w
	}
	for _, v := range read("nomad_gpu_cluster_queued_allocs") {
		smp.Queued += int(v)
	}
	return smp, nil
}
