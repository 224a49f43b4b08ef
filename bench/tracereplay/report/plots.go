package report

import (
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"time"

	"gonum.org/v1/plot/plotter"

	"github.com/nomad-gpu/nomad-gpu/bench/tracereplay"
	"github.com/nomad-gpu/nomad-gpu/bench/tracereplay/figures"
	"github.com/nomad-gpu/nomad-gpu/internal/snapshot"
)

// plot is one PNG of a result set, as the Markdown links it.
type plot struct {
	File, Caption string
}

// timeUnit picks the X axis unit for a span of trace time: hours once
// minutes would run into the hundreds.
func timeUnit(span time.Duration) (time.Duration, string) {
	if span >= 2*time.Hour {
		return time.Hour, "h"
	}
	return time.Minute, "min"
}

// writePlots draws a result set's plots into dir, file names prefixed
// with prefix ("real", "model"), one line per result.
func writePlots(dir, prefix, who string, rs []tracereplay.Result, jobs []tracereplay.Job) ([]plot, error) {
	var horizon time.Duration
	for _, r := range rs {
		horizon = max(horizon, r.Horizon)
	}
	unit, uname := timeUnit(horizon)
	xmax := math.Max(float64(horizon)/float64(unit), 1e-3)
	x := func(d time.Duration) float64 { return float64(d) / float64(unit) }
	xlabel := fmt.Sprintf("trace time (%s)", uname)

	// series is a step line of v over [0, Horizon]: the last sample's
	// value is drawn on to Horizon, as Compute counts it.
	series := func(r tracereplay.Result, v func(tracereplay.Sample) float64) plotter.XYs {
		var xys plotter.XYs
		for _, s := range r.Timeline {
			if s.At > r.Horizon {
				break
			}
			xys = append(xys, plotter.XY{X: x(s.At), Y: v(s)})
		}
		if n := len(xys); n > 0 && xys[n-1].X < x(r.Horizon) {
			xys = append(xys, plotter.XY{X: x(r.Horizon), Y: xys[n-1].Y})
		}
		return xys
	}
	share := func(part func(tracereplay.Sample) float64) func(tracereplay.Sample) float64 {
		return func(s tracereplay.Sample) float64 {
			if s.GPUs <= 0 {
				return 0
			}
			return 100 * part(s) / s.GPUs
		}
	}

	util := snapshot.Chart{Title: who + ": GPU utilisation, telemetry (solid: allocated, dashed: busy)", XLabel: xlabel, YLabel: "% of ready GPUs", XMax: xmax, YMax: 100}
	nodes := snapshot.Chart{Title: who + ": nodes up", XLabel: xlabel, YLabel: "nodes", XMax: xmax, YMax: 1}
	frag := snapshot.Chart{Title: who + ": fragmentation (FGD) over the sample's request mix", XLabel: xlabel, YLabel: "% of ready GPU capacity", XMax: xmax, YMax: 100}
	var maxWait time.Duration
	for _, r := range rs {
		maxWait = max(maxWait, slices.Max(append(figures.Waits(r), 0)))
	}
	wunit, wname := timeUnit(maxWait)
	wait := snapshot.Chart{Title: who + ": wait CDF (unstarted jobs at their wait until the horizon)", XLabel: fmt.Sprintf("wait (trace %s)", wname), YLabel: "fraction of jobs", XMax: math.Max(1.02*float64(maxWait)/float64(wunit), 1e-3), YMax: 1}

	for i, r := range rs {
		name := r.Config.Name
		alloc := series(r, share(func(s tracereplay.Sample) float64 { return s.Allocated }))
		busy := series(r, share(func(s tracereplay.Sample) float64 { return s.Busy }))
		util.Lines = append(util.Lines,
			snapshot.Line{Label: name + " allocated", XYs: alloc, Color: i, Step: true},
			snapshot.Line{Label: name + " busy", XYs: busy, Color: i, Dashes: 1, Step: true})
		for _, xy := range append(alloc, busy...) {
			util.YMax = math.Max(util.YMax, xy.Y)
		}

		// Configurations with a fixed node count draw the same line;
		// dashes keep the ones underneath visible.
		n := series(r, func(s tracereplay.Sample) float64 { return float64(s.Nodes) })
		nodes.Lines = append(nodes.Lines, snapshot.Line{Label: name, XYs: n, Color: i, Dashes: i % 3, Step: true})
		for _, xy := range n {
			nodes.YMax = math.Max(nodes.YMax, xy.Y*1.1)
		}
		var fxy plotter.XYs
		for _, p := range figures.FGDSeries(r, figures.MixOf(jobs, r.Cluster, r.Config.Features)) {
			if p.Capacity > 0 {
				fxy = append(fxy, plotter.XY{X: x(p.At), Y: 100 * p.FGD / p.Capacity})
			}
		}
		if n := len(fxy); n > 0 && fxy[n-1].X < x(r.Horizon) {
			fxy = append(fxy, plotter.XY{X: x(r.Horizon), Y: fxy[n-1].Y})
		}
		frag.Lines = append(frag.Lines, snapshot.Line{Label: name, XYs: fxy, Color: i, Dashes: i % 3, Step: true})

		ws := figures.Waits(r)
		slices.Sort(ws)
		cdf := plotter.XYs{{X: 0, Y: 0}}
		for k, w := range ws {
			cdf = append(cdf, plotter.XY{X: float64(w) / float64(wunit), Y: float64(k+1) / float64(len(ws))})
		}
		cdf = append(cdf, plotter.XY{X: wait.XMax, Y: cdf[len(cdf)-1].Y})
		wait.Lines = append(wait.Lines, snapshot.Line{Label: name, XYs: cdf, Color: i, Dashes: i % 3, Step: true})
	}

	var out []plot
	for _, c := range []struct {
		file, caption string
		chart         snapshot.Chart
	}{
		{"utilisation", "GPU utilisation over time", util},
		{"nodes", "Nodes over time", nodes},
		{"fragmentation", "Fragmentation over time", frag},
		{"wait-cdf", "Wait CDF", wait},
	} {
		file := prefix + "-" + c.file + ".png"
		if err := c.chart.WriteFile(filepath.Join(dir, file)); err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		out = append(out, plot{File: file, Caption: who + ": " + c.caption})
	}
	return out, nil
}
