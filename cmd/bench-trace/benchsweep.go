package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/nomad-gpu/nomad-gpu/bench/tracereplay"
	"github.com/nomad-gpu/nomad-gpu/bench/tracereplay/figures"
	"github.com/nomad-gpu/nomad-gpu/bench/tracereplay/report"
)

// sweepFile is the report -sweep writes in -out.
const sweepFile = "sweep.md"

// checkSweep refuses the flags a sweep cannot honour, naming them.
func checkSweep(step time.Duration, p tracereplay.Params, convert, real string) error {
	switch {
	case step < 0:
		return fmt.Errorf("sweep: %s; allowed: 0 (one window) or a positive step such as 12h", step)
	case p.Window <= 0:
		return fmt.Errorf("sweep: %s with window %s; allowed: a sweep of windows of a positive -window", step, p.Window)
	case p.Start != "":
		return fmt.Errorf("sweep, start: both given; allowed: one of them (a sweep starts every window itself)")
	case p.BusiestMinGPUs > 0:
		return fmt.Errorf("sweep, busiest-min-gpus: both given; allowed: one of them (a sweep models every window, not the busiest)")
	case convert != "":
		return fmt.Errorf("sweep, convert: both given; allowed: one of them")
	case real != "":
		return fmt.Errorf("sweep, real: both given; allowed: one of them (a real run is one window)")
	case slices.Contains(strings.Split(strings.ReplaceAll(p.Configs, " ", ""), ","), "alone"):
		return fmt.Errorf("sweep, configs: alone; allowed: configurations of the whole sample (a sweep gives +queues' waits alone from the model)")
	}
	return nil
}

// runSweep models a window every step from the trace's start to its last
// arrival and writes the pooled report.
func runSweep(p tracereplay.Params, step time.Duration, out string, stdout, stderr io.Writer) int {
	started := time.Now()
	var sw *report.Sweep
	span, skipped, rc := eachWindow(p, step, stderr, func(setup tracereplay.Setup) error {
		if sw == nil {
			sw = report.NewSweep(configNames(setup.Configs))
			sw.Prices = figures.Prices{Reserved: setup.PriceReserved, OnDemand: setup.PriceOnDemand, Spot: setup.PriceSpot}
		}
		results, err := modelConfigs(setup)
		if err == nil {
			err = sw.Add(setup.Trace, results)
		}
		return err
	})
	if rc != 0 {
		return rc
	}
	sw.Skipped = skipped
	path := filepath.Join(out, sweepFile)
	if rc := writeReport(path, sw.Markdown("Trace replay (model), many windows", sweepWhat(p, step, span, started)), stderr); rc != 0 {
		return rc
	}
	fmt.Fprintf(stdout, "%d windows × %d configs in %s; report: %s\n", sw.Windows, len(sw.Configs), time.Since(started).Round(time.Millisecond), path)
	return 0
}

// eachWindow loads a window of p every step from the trace's start to its
// last arrival and calls model with each that holds jobs. It returns the
// trace's span, the windows skipped for holding no job, and an exit code
// (not 0: it wrote why to stderr; 1 too where no window holds a job).
func eachWindow(p tracereplay.Params, step time.Duration, stderr io.Writer, model func(tracereplay.Setup) error) (time.Duration, int, int) {
	span, err := traceSpan(p)
	if err != nil {
		fmt.Fprintf(stderr, "bench-trace: %v\n", err)
		return 0, 0, 2
	}
	skipped, modelled := 0, 0
	for start := time.Duration(0); start <= span; start += step {
		q := p
		q.Start = start.String()
		setup, err := q.Load()
		if errors.Is(err, tracereplay.ErrNoJobs) {
			skipped++
			continue
		}
		if err != nil {
			fmt.Fprintf(stderr, "bench-trace: window at %s: %v\n", q.Start, err)
			return span, skipped, 2
		}
		if err := model(setup); err != nil {
			fmt.Fprintf(stderr, "bench-trace: window at %s: %v\n", q.Start, err)
			return span, skipped, 1
		}
		modelled++
	}
	if modelled == 0 {
		fmt.Fprintf(stderr, "bench-trace: sweep: no window of %s holds a job\n", p.Window)
		return span, skipped, 1
	}
	return span, skipped, 0
}

// sweepWhat says how a sweep's windows were drawn and modelled.
func sweepWhat(p tracereplay.Params, step, span time.Duration, started time.Time) string {
	sample := fmt.Sprintf("load %.2f of %d nodes", p.OfferedLoad, p.Nodes)
	if p.Jobs > 0 {
		sample = fmt.Sprintf("%d jobs", p.Jobs)
	}
	return fmt.Sprintf("A window of %s every %s of %s (%s of trace), each sampled as one window is (seed %d, %s), modelled in %s.",
		p.Window, step, filepath.Base(p.TracePath()), span.Round(time.Hour), p.Seed, sample, time.Since(started).Round(time.Second))
}

// writeReport writes a report's Markdown to path, creating its directory;
// not 0 when it could not (it wrote why to stderr).
func writeReport(path, md string, stderr io.Writer) int {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		fmt.Fprintf(stderr, "bench-trace: %v\n", err)
		return 1
	}
	if err := os.WriteFile(path, []byte(md), 0o644); err != nil {
		fmt.Fprintf(stderr, "bench-trace: %v\n", err)
		return 1
	}
	return 0
}

// traceSpan is the time from the trace's zero to its last arrival.
func traceSpan(p tracereplay.Params) (time.Duration, error) {
	p.Window, p.Start, p.BusiestMinGPUs, p.Jobs, p.OfferedLoad = 0, "", 0, 0, 0
	setup, err := p.Load()
	if err != nil {
		return 0, err
	}
	return setup.Trace.Span(), nil
}

func configNames(cs []tracereplay.Config) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.Name
	}
	return out
}
