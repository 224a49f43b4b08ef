package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/nomad-gpu/nomad-gpu/bench/tracereplay"
	"github.com/nomad-gpu/nomad-gpu/bench/tracereplay/figures"
	"github.com/nomad-gpu/nomad-gpu/bench/tracereplay/model"
	"github.com/nomad-gpu/nomad-gpu/bench/tracereplay/report"
)

const benchTraceUsage = `usage: bench-trace [flags]

Replays a GPU job trace (the replay CSV format, or the Philly extract
converted on the fly) on a discrete-event model of the Nomad scheduler and
the autoscaler, once per configuration compared (baseline, each part of
nomad-gpu on its own, and all of them), and writes a Markdown report with
plots to -out. It runs clusters of 1,000 nodes and traces of 10,000+ jobs
in seconds. The same replay on real Nomad agents, which also calibrates
this model, is 'make bench-trace' (docs/trace-replay.md).

-convert writes the selected jobs as a replay CSV instead, for editing or
for another tool.

-sweep models every window of the trace, one every -sweep of trace
time, each sampled as one window is, and writes one report pooling them
(` + sweepFile + `): a figure's difference between configurations on a
single window can be that window's chance.

-real reads the record a real run ('make bench-trace') left beside its
report (real-run.json.gz), runs the model on it again with the latencies
it measured, and rewrites the report to -out: the sample comes from the
record's flags, and the other sample flags are not used.

Flags:
`

func runBenchTrace(args []string, stdout, stderr io.Writer) int {
	var p tracereplay.Params
	fs := flag.NewFlagSet("bench-trace", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, benchTraceUsage)
		fs.PrintDefaults()
	}
	p.Register(fs)
	out := fs.String("out", "bench-trace", "directory the report and plots are written to")
	convert := fs.String("convert", "", `write the selected jobs to this replay CSV ("-": stdout) and exit`)
	real := fs.String("real", "", "a real run's record ("+tracereplay.RealRunFile+"): model it again and rewrite its report to -out")
	frontier := fs.String("frontier", "", `model every configuration at each node count of "lo:hi" (an autoscaled one with it as its maximum, from -min-nodes) and write the cost–wait frontier against baseline on -nodes to `+frontierFile+` in -out (with -sweep: every window's, pooled)`)
	purchase := fs.Duration("purchase", 0, "with -frontier: the mean wait promised; model every configuration (without -configs: "+purchaseConfigs+") on each reserved base and burst maximum in -frontier's range and write the cheapest cluster meeting it, and nomad-gpu's against stock Nomad's, to "+purchaseFile+" in -out (with -sweep: one cluster for every window, pooled)")
	sweep := fs.Duration("sweep", 0, "model a window of -window every this much trace time, from the trace's start to its end, and pool their figures into "+sweepFile+" in -out (0: one window)")
	// The model runs in trace time; its -compression only scales its
	// wall-clock latencies and policy times. 1 models a cluster in real
	// time; a real run's compression models that run.
	fs.Lookup("compression").DefValue = "1"
	p.Compression = 1
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "bench-trace: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if *purchase != 0 && !flagSet(fs, "configs") {
		p.Configs = purchaseConfigs
	}
	if *frontier != "" {
		r, err := parseNodeRange(*frontier)
		if err == nil {
			err = checkFrontier(p, *convert, *real)
		}
		if err == nil && *sweep != 0 {
			err = checkSweep(*sweep, p, *convert, *real)
		}
		if err == nil && *purchase != 0 {
			err = checkPurchase(*purchase)
		}
		if err != nil {
			fmt.Fprintf(stderr, "bench-trace: %v\n", err)
			return 2
		}
		if *purchase != 0 {
			return runPurchase(p, r, *purchase, *sweep, *out, stdout, stderr)
		}
		return runFrontier(p, r, *sweep, *out, stdout, stderr)
	}
	if *purchase != 0 {
		fmt.Fprintf(stderr, "bench-trace: purchase: no -frontier; allowed: -purchase with -frontier lo:hi, the range of node counts searched\n")
		return 2
	}
	if *sweep != 0 {
		if err := checkSweep(*sweep, p, *convert, *real); err != nil {
			fmt.Fprintf(stderr, "bench-trace: %v\n", err)
			return 2
		}
		return runSweep(p, *sweep, *out, stdout, stderr)
	}
	if *real != "" {
		return remodel(*real, *out, stdout, stderr)
	}
	setup, err := p.Load()
	if err != nil {
		fmt.Fprintf(stderr, "bench-trace: %v\n", err)
		return 2
	}
	if *convert != "" {
		w := stdout
		if *convert != "-" {
			f, err := os.Create(*convert)
			if err != nil {
				fmt.Fprintf(stderr, "bench-trace: convert: %v\n", err)
				return 1
			}
			defer f.Close()
			w = f
		}
		if err := tracereplay.WriteCSV(w, setup.Trace); err != nil {
			fmt.Fprintf(stderr, "bench-trace: convert: %v\n", err)
			return 1
		}
		fmt.Fprintf(stderr, "%s\n", setup.Trace.Source)
		return 0
	}

	started := time.Now()
	results, err := modelConfigs(setup)
	if err != nil {
		fmt.Fprintf(stderr, "bench-trace: %v\n", err)
		return 1
	}
	err = report.Write(*out, report.Run{
		Title: "Trace replay (model): " + filepath.Base(p.TracePath()), Trace: setup.Trace, Seed: setup.Seed,
		Attribution: setup.Attribution, Model: results, Started: started, Elapsed: time.Since(started),
		Prices: figures.Prices{Reserved: setup.PriceReserved, OnDemand: setup.PriceOnDemand, Spot: setup.PriceSpot}, Notes: setup.Notes,
	})
	if err != nil {
		fmt.Fprintf(stderr, "bench-trace: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "%s: %d jobs × %d configs on %d–%d nodes in %s; report: %s\n", setup.Trace.Source, len(setup.Trace.Jobs),
		len(setup.Configs), setup.Cluster.MinNodes, setup.Cluster.MaxNodes, time.Since(started).Round(time.Millisecond), filepath.Join(*out, "report.md"))
	return 0
}

// modelConfigs runs the model once per configuration of setup.
func modelConfigs(setup tracereplay.Setup) ([]tracereplay.Result, error) {
	var results []tracereplay.Result
	for _, cfg := range setup.Configs {
		cfg, err := tracereplay.Resolve(cfg, results)
		if err != nil {
			return nil, err
		}
		r, err := model.Run(setup.Trace, model.Options{
			Cluster: setup.Cluster, Config: cfg, Policy: setup.Policy, Latencies: tracereplay.DefaultLatencies(),
			Compression: setup.Compression, Horizon: setup.Horizon, Seed: setup.Seed,
		})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", cfg.Name, err)
		}
		if cfg.Queues {
			if r.QueueAlone, err = report.AloneWaits(setup, cfg, tracereplay.DefaultLatencies()); err != nil {
				return nil, fmt.Errorf("%s: %w", cfg.Name, err)
			}
		}
		results = append(results, r)
	}
	return results, nil
}

// remodel rewrites a real run's report from its record.
func remodel(path, out string, stdout, stderr io.Writer) int {
	rr, err := tracereplay.ReadRealRun(path)
	if err != nil {
		fmt.Fprintf(stderr, "bench-trace: real: %v\n", err)
		return 2
	}
	var p tracereplay.Params
	fs := flag.NewFlagSet("bench-trace", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	p.Register(fs)
	// A record without -multi-node replayed no job bigger than a node
	// (the real engine refuses one) or predates the flag, when such jobs
	// were clipped to a node: clip reads its sample again either way.
	flags := rr.Flags
	if !slices.ContainsFunc(flags, func(f string) bool { return strings.HasPrefix(strings.TrimLeft(f, "-"), "multi-node") }) {
		flags = append([]string{"-multi-node=" + tracereplay.MultiNodeClip}, flags...)
	}
	if err := fs.Parse(flags); err != nil {
		fmt.Fprintf(stderr, "bench-trace: real: %s: its flags %q: %v\n", path, rr.Flags, err)
		return 2
	}
	setup, err := p.Load()
	if err != nil {
		fmt.Fprintf(stderr, "bench-trace: real: %s: %v\n", path, err)
		return 2
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		fmt.Fprintf(stderr, "bench-trace: %v\n", err)
		return 1
	}
	if err := report.FromReal(out, "Trace replay: "+filepath.Base(p.TracePath()), setup, rr); err != nil {
		fmt.Fprintf(stderr, "bench-trace: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "%s: %d configurations modelled again; report: %s\n", path, len(rr.Results), filepath.Join(out, "report.md"))
	return 0
}
