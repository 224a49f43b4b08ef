package main

import (
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nomad-gpu/nomad-gpu/bench/tracereplay"
	"github.com/nomad-gpu/nomad-gpu/bench/tracereplay/figures"
	"github.com/nomad-gpu/nomad-gpu/bench/tracereplay/model"
	"github.com/nomad-gpu/nomad-gpu/bench/tracereplay/report"
)

// frontierFile is the report -frontier writes in -out.
const frontierFile = "frontier.md"

// frontierReference is the configuration whose point on -nodes the
// frontier reads every configuration against.
const frontierReference = "baseline"

// nodeRange is -frontier's "lo:hi".
type nodeRange struct{ lo, hi int }

// parseNodeRange reads -frontier: "lo:hi", 1 ≤ lo ≤ hi.
func parseNodeRange(s string) (nodeRange, error) {
	a, b, ok := strings.Cut(s, ":")
	lo, err1 := strconv.Atoi(strings.TrimSpace(a))
	hi, err2 := strconv.Atoi(strings.TrimSpace(b))
	if !ok || err1 != nil || err2 != nil || lo < 1 || hi < lo || hi-lo > 200 {
		return nodeRange{}, fmt.Errorf("frontier: %q; allowed: lo:hi, node counts with 1 ≤ lo ≤ hi ≤ lo+200 (2:8, say)", s)
	}
	return nodeRange{lo, hi}, nil
}

// checkFrontier refuses the flags a frontier cannot honour, naming them.
func checkFrontier(p tracereplay.Params, convert, real string) error {
	switch {
	case convert != "":
		return fmt.Errorf("frontier, convert: both given; allowed: one of them")
	case real != "":
		return fmt.Errorf("frontier, real: both given; allowed: one of them (a real run is one cluster size)")
	}
	cs, err := tracereplay.ParseConfigs(p.Configs, p.Strategy)
	if err != nil {
		return err
	}
	seen := false
	for _, c := range cs {
		switch {
		case c.Alone != "" || c.NodesLike != "" || c.Nodes > 0:
			return fmt.Errorf("frontier, configs: %s; allowed: configurations whose size the frontier sets (not alone, fixed-like-autoscale, nor one @N nodes)", c.Name)
		case c.Name == frontierReference:
			seen = true
		}
	}
	if !seen {
		return fmt.Errorf("frontier, configs: no %s; allowed: a list with %s, the reference the frontier is read against", frontierReference, frontierReference)
	}
	return nil
}

// runFrontier models every configuration at each size of r on one
// sample, or with step on a window of the trace every step, pooled, and
// writes the frontier's report and plot to out.
func runFrontier(p tracereplay.Params, r nodeRange, step time.Duration, out string, stdout, stderr io.Writer) int {
	started := time.Now()
	var f report.Frontier
	model := func(setup tracereplay.Setup) error {
		g, err := modelFrontier(setup, r)
		if err == nil {
			err = f.Add(g)
		}
		return err
	}
	var what string
	if step != 0 {
		span, _, rc := eachWindow(p, step, stderr, model)
		if rc != 0 {
			return rc
		}
		what = sweepWhat(p, step, span, started) + fmt.Sprintf(" Pooled over %d windows: costs and node-hours add up, mean waits are over every job.", f.Windows)
	} else {
		setup, err := p.Load()
		if err != nil {
			fmt.Fprintf(stderr, "bench-trace: %v\n", err)
			return 2
		}
		if f, err = modelFrontier(setup, r); err != nil {
			fmt.Fprintf(stderr, "bench-trace: frontier: %v\n", err)
			return 1
		}
		what = fmt.Sprintf("Sample: %s; %d jobs, offered load %.2f of %d nodes (-nodes).", setup.Trace.Source, len(setup.Trace.Jobs), p.OfferedLoad, p.Nodes)
	}
	spot := ""
	if slices.ContainsFunc(f.Curves, func(c report.FrontierCurve) bool { return c.Spot }) {
		spot = fmt.Sprintf(", %g spot (spot nodes reclaimed at %g a node-hour)", p.PriceSpot, p.SpotReclaimRate)
	}
	what += fmt.Sprintf(" Prices %g a reserved node-hour, %g on demand%s; the model at compression %g×, %d sizes in %s.",
		p.PriceReserved, p.PriceOnDemand, spot, p.Compression, r.hi-r.lo+1, time.Since(started).Round(time.Millisecond))
	path := filepath.Join(out, frontierFile)
	if rc := writeReport(path, f.Markdown("Trace replay (model): cost against wait", what), stderr); rc != 0 {
		return rc
	}
	if err := f.WritePlot(out); err != nil {
		fmt.Fprintf(stderr, "bench-trace: frontier: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "%d sizes × %d configs; report: %s\n", r.hi-r.lo+1, len(f.Curves), path)
	return 0
}

// modelFrontier is the frontier of setup's configurations over r: a
// fixed configuration on each node count, an autoscaled one with each as
// its maximum (from its reserved minimum, -min-nodes, up: what it may
// burst to), and the reference on the setup's -nodes.
func modelFrontier(setup tracereplay.Setup, r nodeRange) (report.Frontier, error) {
	f := report.Frontier{Reference: frontierReference}
	for _, cfg := range setup.Configs {
		if cfg.Name == frontierReference {
			p, err := frontierPoint(setup, cfg, setup.Cluster, setup.Cluster.Nodes)
			if err != nil {
				return f, err
			}
			f.Ref = p
		}
		c := report.FrontierCurve{Config: cfg.Name, Strategy: cfg.Autoscale, Spot: cfg.Spot}
		for n := r.lo; n <= r.hi; n++ {
			cl, sized := setup.Cluster, cfg
			if cfg.Autoscale != "" {
				if n < cl.MinNodes {
					continue
				}
				cl.MaxNodes = n
			} else {
				sized.Nodes = n
			}
			p, err := frontierPoint(setup, sized, cl, n)
			if err != nil {
				return f, err
			}
			c.Points = append(c.Points, p)
		}
		f.Curves = append(f.Curves, c)
	}
	return f, nil
}

// frontierPoint models cfg on cluster cl, setup's sample, as point n.
func frontierPoint(setup tracereplay.Setup, cfg tracereplay.Config, cl tracereplay.Cluster, n int) (report.FrontierPoint, error) {
	fs, err := modelFigures(setup, cfg, cl)
	if err != nil {
		return report.FrontierPoint{}, fmt.Errorf("%s on %d nodes: %w", cfg.Name, n, err)
	}
	return report.PointOf(n, fs), nil
}

// modelFigures models cfg on cluster cl, setup's sample, at the model's
// default latencies, and computes its figures at setup's prices.
func modelFigures(setup tracereplay.Setup, cfg tracereplay.Config, cl tracereplay.Cluster) (figures.Figures, error) {
	res, err := model.Run(setup.Trace, model.Options{
		Cluster: cl, Config: cfg, Policy: setup.Policy, Latencies: tracereplay.DefaultLatencies(),
		Compression: setup.Compression, Horizon: setup.Horizon, Seed: setup.Seed,
	})
	if err != nil {
		return figures.Figures{}, err
	}
	return figures.Compute(res, figures.Options{Prices: figures.Prices{Reserved: setup.PriceReserved, OnDemand: setup.PriceOnDemand, Spot: setup.PriceSpot}}), nil
}
