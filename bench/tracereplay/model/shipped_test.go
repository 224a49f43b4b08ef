package model

import (
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/nomad-gpu/nomad-gpu/bench/tracereplay"
)

// shippedJobs, shippedSpan and shippedMeanDur make the synthetic sample of
// the shipped configuration's benchmark: 10,000 jobs of synthetic's mix
// (whole GPUs up to 8, fractions, three priorities) at an offered load of
// 0.85 of 1,000 8-GPU nodes over bench-trace's horizon (the span plus a
// quarter of it). Jobs run long beside the span: 10,000 jobs asking for
// 1.8 GPUs on average fill 8,000 GPUs that much only if each runs for
// about 40 % of the horizon. (The 8-GPU jobs are gangs of 2 × 4 since
// jobs bigger than a node's 6 whole GPUs with slices are kept whole.)
const (
	shippedJobs    = 10000
	shippedSpan    = 6 * time.Hour
	shippedMeanDur = 340 * time.Minute
)

// shippedSetup is what `bench-trace -trace <sample> -jobs 10000
// -window 0 -nodes 1000 -min-nodes 100 -max-nodes 1000 -configs nomad-gpu`
// models: the flags' defaults (the model's compression 1, seed 1,
// policy, shares, strategy) read through Params.Load as bench-trace reads
// them, so the configuration is the shipped one, not a lighter one.
func shippedSetup(tb testing.TB) (tracereplay.Trace, Options, float64) {
	return shippedSetupOf(tb, shippedJobs, 1000)
}

// shippedSetupOf is shippedSetup's sample and pool scaled to jobs on
// nodes (the pool's minimum a tenth of it): the same load where jobs per
// node are 10.
func shippedSetupOf(tb testing.TB, jobs, nodes int) (tracereplay.Trace, Options, float64) {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "sample.csv")
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	if err := tracereplay.WriteCSV(f, synthetic(jobs, shippedSpan, shippedMeanDur)); err != nil {
		tb.Fatal(err)
	}
	if err := f.Close(); err != nil {
		tb.Fatal(err)
	}
	n := strconv.Itoa(nodes)
	setup, o := setupOf(tb, "-trace", path, "-jobs", strconv.Itoa(jobs), "-window", "0", "-nodes", n,
		"-min-nodes", strconv.Itoa(nodes/10), "-max-nodes", n, "-configs", "nomad-gpu")
	if len(setup.Configs) != 1 || len(setup.Trace.Jobs) != jobs {
		tb.Fatalf("%d configs, %d jobs; want 1 and %d", len(setup.Configs), len(setup.Trace.Jobs), jobs)
	}
	var offered float64
	for _, j := range setup.Trace.Jobs {
		offered += tracereplay.Offered(j, setup.Horizon)
	}
	capacity := float64(setup.Cluster.Nodes*setup.Cluster.GPUsPerNode) * setup.Horizon.Seconds()
	return setup.Trace, o, offered / capacity
}

// setupOf is what bench-trace's flags args model, read through
// Params.Load as bench-trace reads them (the model's compression 1
// unless args say otherwise), and the options of its first
// configuration at the default latencies.
func setupOf(tb testing.TB, args ...string) (tracereplay.Setup, Options) {
	tb.Helper()
	var p tracereplay.Params
	fs := flag.NewFlagSet("bench-trace", flag.ContinueOnError)
	p.Register(fs)
	p.Compression = 1 // bench-trace's default for the model
	if err := fs.Parse(args); err != nil {
		tb.Fatal(err)
	}
	setup, err := p.Load()
	if err != nil {
		tb.Fatal(err)
	}
	return setup, Options{
		Cluster: setup.Cluster, Config: setup.Configs[0], Policy: setup.Policy, Latencies: tracereplay.DefaultLatencies(),
		Compression: setup.Compression, Horizon: setup.Horizon, Seed: setup.Seed,
	}
}

// BenchmarkShippedNomadGPU10kJobs1000Nodes is the shipped nomad-gpu
// configuration (layouts, moves, checkpointed preemption, gpu-queue
// autoscaling) on 10,000 jobs at an offered load of 0.85 of 1,000 nodes:
// the size frontiers of configurations are modelled at.
func BenchmarkShippedNomadGPU10kJobs1000Nodes(b *testing.B) {
	tr, o, load := shippedSetup(b)
	if load < 0.84 || load > 0.86 {
		b.Fatalf("offered load %.3f; want 0.85", load)
	}
	b.ReportAllocs()
	var runs int
	start := time.Now()
	for b.Loop() {
		if _, err := Run(tr, o); err != nil {
			b.Fatal(err)
		}
		runs++
	}
	b.ReportMetric(time.Since(start).Seconds()/float64(runs), "s/run")
	b.ReportMetric(load, "load")
}
