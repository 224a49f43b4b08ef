package report

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"gonum.org/v1/plot/plotter"

	"github.com/nomad-gpu/nomad-gpu/bench/tracereplay/figures"
	"github.com/nomad-gpu/nomad-gpu/internal/snapshot"
)

// The purchase question (issue 39): for our work and the waits we
// promise, what is the cheapest cluster, and does nomad-gpu make it
// cheaper? One sample modelled at a range of cluster sizes (a fixed
// cluster's nodes, an autoscaled pool's maximum over its reserved
// minimum) gives each configuration points of cost against wait. A
// configuration is read at the reference's wait (what serving as well
// costs it) and at the reference's cost (how well it serves for as
// much), the reference being the baseline on the run's -nodes: one
// figure at equal service, one at equal money, where a table of one
// cluster size gives neither. Many samples (windows of a sweep) pool
// into one frontier (Frontier.Add).

// FrontierPoint is one configuration modelled at one size.
type FrontierPoint struct {
	// Nodes is a fixed cluster's node count, or an autoscaled pool's
	// maximum (its minimum, the reserved base, is the run's).
	Nodes int
	// Cost is figures.Figures.Cost; NodeHours and LostGPUHours its
	// figures of the same names.
	Cost, NodeHours, LostGPUHours float64
	// Wait is the mean wait (with re-waits), WaitP95 its 95th
	// percentile (0 when pooled: Frontier.Add), WaitTop the mean of the
	// highest priority tier; Jobs and TopJobs the jobs they are over.
	Wait, WaitP95, WaitTop time.Duration
	Jobs, TopJobs          int
	// SpotNodeHours and SpotReclaims are the figures of the same names
	// (Features.Spot; 0 without spot nodes).
	SpotNodeHours float64
	SpotReclaims  int
}

// add pools q into p: sums, and means weighed by their jobs. A pooled
// point has no 95th percentile.
func (p *FrontierPoint) add(q FrontierPoint) {
	mean := func(a time.Duration, n int, b time.Duration, m int) time.Duration {
		if n+m == 0 {
			return 0
		}
		return time.Duration((float64(a)*float64(n) + float64(b)*float64(m)) / float64(n+m))
	}
	p.Cost, p.NodeHours, p.LostGPUHours = p.Cost+q.Cost, p.NodeHours+q.NodeHours, p.LostGPUHours+q.LostGPUHours
	p.SpotNodeHours, p.SpotReclaims = p.SpotNodeHours+q.SpotNodeHours, p.SpotReclaims+q.SpotReclaims
	p.Wait, p.WaitTop = mean(p.Wait, p.Jobs, q.Wait, q.Jobs), mean(p.WaitTop, p.TopJobs, q.WaitTop, q.TopJobs)
	p.Jobs, p.TopJobs, p.WaitP95 = p.Jobs+q.Jobs, p.TopJobs+q.TopJobs, 0
}

// PointOf is the frontier point of a result's figures at nodes.
func PointOf(nodes int, f figures.Figures) FrontierPoint {
	p := FrontierPoint{Nodes: nodes, Cost: f.Cost, NodeHours: f.NodeHours, LostGPUHours: f.LostGPUHours, Wait: f.Wait.Mean, WaitP95: f.Wait.P95, Jobs: f.Wait.N,
		SpotNodeHours: f.SpotNodeHours, SpotReclaims: f.SpotReclaims}
	if len(f.WaitByTier) > 0 {
		top := f.WaitByTier[slices.Max(slices.Collect(maps.Keys(f.WaitByTier)))]
		p.WaitTop, p.TopJobs = top.Mean, top.N
	}
	return p
}

// FrontierCurve is one configuration's points, by size.
type FrontierCurve struct {
	Config string
	// Strategy is the configuration's autoscaling strategy ("" fixed):
	// the gpu-queue curves are read against target-value's too
	// (againstTargetValue).
	Strategy string `json:",omitempty"`
	Points   []FrontierPoint
	// Spot says the configuration's burst nodes are spot nodes
	// (Features.Spot): the report gives their node-hours and reclaims.
	Spot bool
}

// Pareto is the curve's efficient points, cheapest first: those no other
// point matches or beats on both cost and mean wait. Their waits fall as
// their costs rise.
func (c FrontierCurve) Pareto() []FrontierPoint {
	ps := slices.Clone(c.Points)
	slices.SortFunc(ps, func(a, b FrontierPoint) int { return cmp.Or(cmp.Compare(a.Cost, b.Cost), cmp.Compare(a.Wait, b.Wait)) })
	var out []FrontierPoint
	for _, p := range ps {
		if len(out) == 0 || p.Wait < out[len(out)-1].Wait {
			out = append(out, p)
		}
	}
	return out
}

// Reading says how a frontier figure was read off the points.
type Reading int

const (
	// Interpolated: between the two efficient points around it, linearly.
	Interpolated Reading = iota
	// AtMost: every point does better than asked; the figure is the
	// nearest point's, a bound (the cheapest point's cost at a wait; the
	// dearest point's wait at a cost).
	AtMost
	// NotReached: no point does as well as asked (no point waits as
	// little; no point costs as little).
	NotReached
)

// CostAt is the least cost at which the curve waits w or less on average.
func (c FrontierCurve) CostAt(w time.Duration) (float64, Reading) {
	return c.atWait(w, func(p FrontierPoint) float64 { return p.Cost })
}

// NodeHoursAt is the node-hours of CostAt's reading: those of the
// efficient points around it, between them in the same proportion.
func (c FrontierCurve) NodeHoursAt(w time.Duration) (float64, Reading) {
	return c.atWait(w, func(p FrontierPoint) float64 { return p.NodeHours })
}

// atWait reads v of the cheapest efficient point waiting w or less,
// linearly between it and the one before.
func (c FrontierCurve) atWait(w time.Duration, v func(FrontierPoint) float64) (float64, Reading) {
	ps := c.Pareto()
	i := slices.IndexFunc(ps, func(p FrontierPoint) bool { return p.Wait <= w })
	switch {
	case i < 0:
		return 0, NotReached
	case i == 0:
		return v(ps[0]), AtMost
	}
	a, b := ps[i-1], ps[i]
	frac := float64(a.Wait-w) / float64(a.Wait-b.Wait)
	return v(a) + frac*(v(b)-v(a)), Interpolated
}

// WaitAt is the least mean wait the curve gives for cost or less.
func (c FrontierCurve) WaitAt(cost float64) (time.Duration, Reading) {
	ps := c.Pareto()
	j := -1
	for k, p := range ps {
		if p.Cost <= cost {
			j = k
		}
	}
	switch {
	case j < 0:
		return 0, NotReached
	case j == len(ps)-1:
		return ps[j].Wait, AtMost
	}
	a, b := ps[j], ps[j+1]
	frac := (cost - a.Cost) / (b.Cost - a.Cost)
	return a.Wait - time.Duration(frac*float64(a.Wait-b.Wait)), Interpolated
}

// Frontier is the run's curves and its reference point.
type Frontier struct {
	// Reference names the reference (the baseline on -nodes) and Ref is
	// its point.
	Reference string
	Ref       FrontierPoint
	Curves    []FrontierCurve
	// Windows is how many samples Add pooled (0: one, not pooled).
	Windows int
}

// Add pools g, the same configurations at the same sizes on another
// sample (a window of a sweep), into f: costs and node-hours add up, mean
// waits are over every job of both. An empty f takes g.
func (f *Frontier) Add(g Frontier) error {
	if len(f.Curves) == 0 {
		f.Reference, f.Ref = g.Reference, g.Ref
		f.Curves = make([]FrontierCurve, len(g.Curves))
		for i, c := range g.Curves {
			f.Curves[i] = FrontierCurve{Config: c.Config, Strategy: c.Strategy, Points: slices.Clone(c.Points), Spot: c.Spot}
		}
		for i := range f.Curves {
			for k := range f.Curves[i].Points {
				f.Curves[i].Points[k].WaitP95 = 0
			}
		}
		f.Ref.WaitP95, f.Windows = 0, 1
		return nil
	}
	if len(g.Curves) != len(f.Curves) {
		return fmt.Errorf("frontier: %d configurations to pool into %d", len(g.Curves), len(f.Curves))
	}
	for i, c := range g.Curves {
		if c.Config != f.Curves[i].Config || len(c.Points) != len(f.Curves[i].Points) {
			return fmt.Errorf("frontier: %s at %d sizes to pool into %s at %d", c.Config, len(c.Points), f.Curves[i].Config, len(f.Curves[i].Points))
		}
	}
	for i, c := range g.Curves {
		for k, p := range c.Points {
			f.Curves[i].Points[k].add(p)
		}
	}
	f.Ref.add(g.Ref)
	f.Windows++
	return nil
}

// FrontierPlot is the PNG Markdown links.
const FrontierPlot = "frontier.png"

// Markdown is the frontier's report: the two readings of every curve
// against the reference, then each curve's points. what says how the
// run was made.
func (f Frontier) Markdown(title, what string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s\n\n%s\n\n", title, what)
	fmt.Fprintf(&b, "Reference: %s on %s, mean wait %s at cost %.1f. Each configuration at the reference's mean wait (the least cost at which it waits as little) and at the reference's cost (the least mean wait it gives for as much), read off its efficient points (no other point of it both cheaper and shorter), linearly between the two around the reference; \"at most\" where every point does better (the nearest point's figure bounds it), \"not reached\" where none does as well.\n\n",
		f.Reference, plural(f.Ref.Nodes, "node"), Human(f.Ref.Wait), f.Ref.Cost)
	b.WriteString("| configuration | cost at the reference's wait | × reference | mean wait at the reference's cost | × reference |\n|---|---:|---:|---:|---:|\n")
	for _, c := range f.Curves {
		cost, cr := c.CostAt(f.Ref.Wait)
		wait, wr := c.WaitAt(f.Ref.Cost)
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", cellText(c.Config),
			readingText(cr, fmt.Sprintf("%.1f", cost)), readingText(cr, timesText(cost, f.Ref.Cost)),
			readingText(wr, Human(wait)), readingText(wr, timesText(wait.Seconds(), f.Ref.Wait.Seconds())))
	}
	b.WriteString(f.againstTargetValue())
	fmt.Fprintf(&b, "\n![cost against mean wait](%s)\n\n", FrontierPlot)
	spot := slices.ContainsFunc(f.Curves, func(c FrontierCurve) bool { return c.Spot })
	b.WriteString("Every point (nodes: a fixed cluster's, or an autoscaled pool's maximum over its reserved minimum; * marks the efficient points):\n\n| configuration | nodes | node-hours | cost | wait mean | wait p95 | top tier's mean wait | lost GPU-hours |")
	if spot {
		b.WriteString(" spot node-hours | spot reclaims |")
	}
	b.WriteString("\n|---|---:|---:|---:|---:|---:|---:|---:|")
	if spot {
		b.WriteString("---:|---:|")
	}
	b.WriteString("\n")
	for _, c := range f.Curves {
		efficient := c.Pareto()
		for _, p := range c.Points {
			p95 := Human(p.WaitP95)
			if f.Windows > 0 {
				p95 = "–" // a percentile does not pool
			}
			mark := ""
			if slices.Contains(efficient, p) {
				mark = " *"
			}
			fmt.Fprintf(&b, "| %s | %d%s | %.2f | %.1f | %s | %s | %s | %.2f |", cellText(c.Config), p.Nodes, mark, p.NodeHours, p.Cost,
				Human(p.Wait), p95, Human(p.WaitTop), p.LostGPUHours)
			if spot {
				fmt.Fprintf(&b, " %.2f | %d |", p.SpotNodeHours, p.SpotReclaims)
			}
			b.WriteString("\n")
		}
	}
	b.WriteString("\n")
	return b.String()
}

// TargetValue is the configuration the gpu-queue curves are read
// against (issue 39: at equal node-hours at most 0.8× its wait, or at
// equal wait at most 0.85× its node-hours).
const TargetValue = "target-value"

// againstTargetValue reads each gpu-queue curve against target-value's,
// where the run has both: at target-value's cost at the reference's wait
// (their wait there is the reference's), the gpu-queue curve's wait for
// that cost; at the reference's wait, its node-hours over target-value's;
// at the reference's cost, its wait over target-value's. Both pools
// burst from the same reserved minimum at the same prices, so at equal
// cost they have equal node-hours. "" without both.
func (f Frontier) againstTargetValue() string {
	i := slices.IndexFunc(f.Curves, func(c FrontierCurve) bool { return c.Config == TargetValue })
	if i < 0 || !slices.ContainsFunc(f.Curves, func(c FrontierCurve) bool { return c.Strategy == "gpu-queue" }) {
		return ""
	}
	tv := f.Curves[i]
	tvCost, tcr := tv.CostAt(f.Ref.Wait)
	tvNH, _ := tv.NodeHoursAt(f.Ref.Wait)
	tvThere, _ := tv.WaitAt(tvCost) // the reference's wait, where read between two points
	tvWait, twr := tv.WaitAt(f.Ref.Cost)
	var b strings.Builder
	fmt.Fprintf(&b, "\nAgainst %s (both autoscaled from the same reserved minimum at the same prices: at equal cost, equal node-hours): %s waits as little as the reference at cost %s (%s node-hours), and %s at the reference's cost. Each gpu-queue configuration's wait at that cost of %s's (equal node-hours; × %s's wait there), its node-hours at the reference's wait (equal wait; × %s's), and its wait at the reference's cost (× %s's):\n\n",
		TargetValue, TargetValue, readingText(tcr, fmt.Sprintf("%.1f", tvCost)), readingText(tcr, fmt.Sprintf("%.2f", tvNH)), readingText(twr, Human(tvWait)), TargetValue, TargetValue, TargetValue, TargetValue)
	b.WriteString("| configuration | wait at target-value's cost | × | node-hours at the reference's wait | × | wait at the reference's cost | × |\n|---|---:|---:|---:|---:|---:|---:|\n")
	for _, c := range f.Curves {
		if c.Strategy != "gpu-queue" {
			continue
		}
		w1, r1 := c.WaitAt(tvCost)
		if tcr == NotReached {
			r1 = NotReached
		}
		nh, r2 := c.NodeHoursAt(f.Ref.Wait)
		w3, r3 := c.WaitAt(f.Ref.Cost)
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s |\n", cellText(c.Config),
			readingText(r1, Human(w1)), readingText(r1, timesText(w1.Seconds(), tvThere.Seconds())),
			readingText(r2, fmt.Sprintf("%.2f", nh)), readingText(r2, timesText(nh, tvNH)),
			readingText(r3, Human(w3)), readingText(r3, timesText(w3.Seconds(), tvWait.Seconds())))
	}
	return b.String()
}

func readingText(r Reading, v string) string {
	switch r {
	case AtMost:
		return "at most " + v
	case NotReached:
		return "not reached"
	}
	return v
}

// timesText is v over ref, as ratioText writes it.
func timesText(v, ref float64) string {
	if ref <= 0 {
		return "–"
	}
	return ratioText(v / ref)
}

// WritePlot draws every curve's points, cost against mean wait, with the
// reference's wait and cost as dashed lines, to dir/FrontierPlot.
func (f Frontier) WritePlot(dir string) error {
	maxCost, maxWait := f.Ref.Cost, f.Ref.Wait
	for _, c := range f.Curves {
		for _, p := range c.Points {
			maxCost, maxWait = math.Max(maxCost, p.Cost), max(maxWait, p.Wait)
		}
	}
	unit, uname := timeUnit(maxWait)
	y := func(d time.Duration) float64 { return float64(d) / float64(unit) }
	ch := snapshot.Chart{Title: "Cost against mean wait, one point a cluster size", XLabel: "cost over the horizon", YLabel: "mean wait (trace " + uname + ")",
		XMax: 1.05 * maxCost, YMax: math.Max(1.05*y(maxWait), 1e-3)}
	for i, c := range f.Curves {
		ps := slices.Clone(c.Points)
		slices.SortFunc(ps, func(a, b FrontierPoint) int { return cmp.Compare(a.Cost, b.Cost) })
		var xys plotter.XYs
		for _, p := range ps {
			xys = append(xys, plotter.XY{X: p.Cost, Y: y(p.Wait)})
		}
		ch.Lines = append(ch.Lines, snapshot.Line{Label: c.Config, XYs: xys, Color: i})
	}
	ch.Lines = append(ch.Lines,
		snapshot.Line{Label: f.Reference + "'s wait", XYs: plotter.XYs{{X: 0, Y: y(f.Ref.Wait)}, {X: ch.XMax, Y: y(f.Ref.Wait)}}, Color: len(f.Curves), Dashes: 1},
		snapshot.Line{Label: f.Reference + "'s cost", XYs: plotter.XYs{{X: f.Ref.Cost, Y: 0}, {X: f.Ref.Cost, Y: ch.YMax}}, Color: len(f.Curves), Dashes: 2})
	return ch.WriteFile(filepath.Join(dir, FrontierPlot))
}
