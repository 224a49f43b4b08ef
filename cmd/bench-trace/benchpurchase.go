package main

import (
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/nomad-gpu/nomad-gpu/bench/tracereplay"
	"github.com/nomad-gpu/nomad-gpu/bench/tracereplay/report"
)

// purchaseFile is the report -purchase writes in -out.
const purchaseFile = "purchase.md"

// purchaseConfigs are -purchase's configurations when -configs is not
// given: stock Nomad fixed and autoscaled, nomad-gpu fixed, autoscaled
// and with spot burst.
const purchaseConfigs = "baseline,target-value,nomad-gpu-fixed,nomad-gpu,nomad-gpu-spot"

// flagSet says whether the command line set flag name.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// stockConfigs are the configurations of stock Nomad, whose cheapest
// answer nomad-gpu's is read against.
var stockConfigs = []string{"baseline", "stock-preemption", "target-value"}

// checkPurchase refuses what -purchase cannot honour, naming the flag.
func checkPurchase(target time.Duration) error {
	if target <= 0 {
		return fmt.Errorf("purchase: %s; allowed: a mean wait above 0 (10m, say)", target)
	}
	return nil
}

// purchaseCluster is one cluster a configuration is modelled on.
type purchaseCluster struct{ base, max int }

// purchaseClusters are the clusters a configuration is modelled on
// within r: a fixed one on each node count, all reserved; an autoscaled
// one on each reserved base and each maximum at or above it.
func purchaseClusters(cfg tracereplay.Config, r nodeRange) []purchaseCluster {
	var out []purchaseCluster
	for base := r.lo; base <= r.hi; base++ {
		if cfg.Autoscale == "" {
			out = append(out, purchaseCluster{base, base})
			continue
		}
		for top := base; top <= r.hi; top++ {
			out = append(out, purchaseCluster{base, top})
		}
	}
	return out
}

// runPurchase answers the purchase question for target on p's sample,
// or with step on a window of the trace every step, one cluster bought
// for all of them: each configuration modelled on every cluster of r,
// its cheapest that meets the target, and nomad-gpu's against stock
// Nomad's.
func runPurchase(p tracereplay.Params, r nodeRange, target, step time.Duration, out string, stdout, stderr io.Writer) int {
	started := time.Now()
	var pooled purchasePooled
	var what, notes string
	if step != 0 {
		span, _, rc := eachWindow(p, step, stderr, pooled.add(r))
		if rc != 0 {
			return rc
		}
		what = sweepWhat(p, step, span, started)
	} else {
		setup, err := p.Load()
		if err != nil {
			fmt.Fprintf(stderr, "bench-trace: %v\n", err)
			return 2
		}
		if err := pooled.add(r)(setup); err != nil {
			fmt.Fprintf(stderr, "bench-trace: purchase: %v\n", err)
			return 1
		}
		what = fmt.Sprintf("Sample: %s; %d jobs.", setup.Trace.Source, len(setup.Trace.Jobs))
		if len(setup.Notes) > 0 {
			notes = "\n\n" + strings.Join(setup.Notes, "\n\n")
		}
	}
	pu := pooled.choose(target)
	if step != 0 {
		pu.Windows = pooled.windows
	}
	what = fmt.Sprintf("%s Prices %g a reserved node-hour, %g on demand, %g spot; clusters of %d to %d nodes (-frontier), %d modelled in %s.%s",
		what, p.PriceReserved, p.PriceOnDemand, p.PriceSpot, r.lo, r.hi, pooled.modelled, time.Since(started).Round(time.Millisecond), notes)
	path := filepath.Join(out, purchaseFile)
	if rc := writeReport(path, pu.Markdown("Trace replay (model): the cheapest cluster for a mean wait of "+report.Human(target), what), stderr); rc != 0 {
		return rc
	}
	fmt.Fprintf(stdout, "%s\nreport: %s\n", pu.Verdict(), path)
	return 0
}

// purchasePooled is each configuration's points on every cluster, pooled
// over the windows modelled so far.
type purchasePooled struct {
	configs  []tracereplay.Config
	points   [][]report.PurchasePoint // by configuration, then cluster
	windows  int
	modelled int
}

// add is a window's modelling: setup's points, pooled into those before.
func (pp *purchasePooled) add(r nodeRange) func(tracereplay.Setup) error {
	return func(setup tracereplay.Setup) error {
		points, err := purchasePoints(setup, r)
		if err != nil {
			return err
		}
		for _, ps := range points {
			pp.modelled += len(ps)
		}
		pp.windows++
		if pp.points == nil {
			pp.configs, pp.points = setup.Configs, points
			return nil
		}
		for i := range points {
			for k := range points[i] {
				if err := pp.points[i][k].Add(points[i][k]); err != nil {
					return fmt.Errorf("%s: %w", setup.Configs[i].Name, err)
				}
			}
		}
		return nil
	}
}

// choose is each configuration's answer for target on the pooled points.
func (pp *purchasePooled) choose(target time.Duration) report.Purchase {
	pu := report.Purchase{Target: target}
	for i, cfg := range pp.configs {
		a := report.Choose(cfg.Name, pp.points[i], target)
		a.Stock = slices.Contains(stockConfigs, cfg.Name)
		a.NomadGPU, a.Spot = strings.HasPrefix(cfg.Name, "nomad-gpu"), cfg.Spot
		pu.Answers = append(pu.Answers, a)
	}
	return pu
}

// purchasePoints models each of setup's configurations on every cluster
// of r, as many runs at once as there are CPUs.
func purchasePoints(setup tracereplay.Setup, r nodeRange) ([][]report.PurchasePoint, error) {
	points := make([][]report.PurchasePoint, len(setup.Configs))
	var g errgroup.Group
	g.SetLimit(runtime.GOMAXPROCS(0))
	for i, cfg := range setup.Configs {
		clusters := purchaseClusters(cfg, r)
		points[i] = make([]report.PurchasePoint, len(clusters))
		for k, c := range clusters {
			g.Go(func() error {
				cl, sized := setup.Cluster, cfg
				cl.Nodes, cl.MinNodes, cl.MaxNodes, sized.Nodes = c.base, c.base, c.max, c.base
				f, err := modelFigures(setup, sized, cl)
				if err != nil {
					return fmt.Errorf("%s on %d–%d nodes: %w", cfg.Name, c.base, c.max, err)
				}
				points[i][k] = report.PurchasePointOf(c.base, c.max, f)
				return nil
			})
		}
	}
	return points, g.Wait()
}
