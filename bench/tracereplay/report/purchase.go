package report

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nomad-gpu/nomad-gpu/bench/tracereplay/figures"
)

// The purchase question answered directly: for a promised mean wait, the
// cheapest cluster each configuration meets it on, found by modelling the
// sample on every reserved base and burst maximum in a range (a fixed
// cluster's nodes are all reserved), and what nomad-gpu's cheapest costs
// against stock Nomad's. The frontier reads configurations at the
// baseline's figures; this reads them at the operator's own target.

// PurchasePoint is one configuration modelled on one cluster.
type PurchasePoint struct {
	// Base is the reserved nodes (a fixed cluster's all), Max the nodes
	// an autoscaled pool may burst to (Base for a fixed cluster).
	Base, Max int
	FrontierPoint
	// UsefulGPUHours is figures.Figures' of the same name, what
	// CostPerUsefulGPUHour divides the cost by.
	UsefulGPUHours, CostPerUsefulGPUHour float64
}

// PurchasePointOf is the point of a model run's figures on base..max.
func PurchasePointOf(base, max int, f figures.Figures) PurchasePoint {
	return PurchasePoint{Base: base, Max: max, FrontierPoint: PointOf(max, f), UsefulGPUHours: f.UsefulGPUHours, CostPerUsefulGPUHour: f.CostPerUsefulGPUHour}
}

// Add pools q, the same cluster modelled on another window, into p: one
// cluster bought for every window, so costs and hours add up and mean
// waits are over every job (FrontierPoint's pooling; no 95th
// percentile).
func (p *PurchasePoint) Add(q PurchasePoint) error {
	if p.Base != q.Base || p.Max != q.Max {
		return fmt.Errorf("purchase: the cluster %s to pool into %s", clusterText(q), clusterText(*p))
	}
	p.FrontierPoint.add(q.FrontierPoint)
	p.UsefulGPUHours += q.UsefulGPUHours
	p.CostPerUsefulGPUHour = 0
	if p.UsefulGPUHours > 0 {
		p.CostPerUsefulGPUHour = p.Cost / p.UsefulGPUHours
	}
	return nil
}

// PurchaseAnswer is one configuration's answer: the cheapest point whose
// mean wait is within the target (ties: the shorter wait), or, when none
// is, the point of the least wait.
type PurchaseAnswer struct {
	Config string
	// Stock says the configuration is stock Nomad's (no nomad-gpu part),
	// NomadGPU that it is nomad-gpu's whole (a name nomad-gpu…): the
	// answers compared.
	Stock, NomadGPU bool
	// Spot says its burst is spot nodes: cheaper, if the cloud has them
	// when asked; the verdict gives nomad-gpu's answer without them too.
	Spot bool
	Met  bool
	Best PurchasePoint
	// Tried is the clusters modelled.
	Tried int
}

// Choose is the answer of points for target.
func Choose(config string, points []PurchasePoint, target time.Duration) PurchaseAnswer {
	a := PurchaseAnswer{Config: config, Tried: len(points)}
	for i, p := range points {
		switch {
		case p.Wait <= target && (!a.Met || p.Cost < a.Best.Cost || p.Cost == a.Best.Cost && p.Wait < a.Best.Wait):
			a.Met, a.Best = true, p
		case !a.Met && (i == 0 || p.Wait < a.Best.Wait || p.Wait == a.Best.Wait && p.Cost < a.Best.Cost):
			a.Best = p
		}
	}
	return a
}

// Purchase is the answers for one target.
type Purchase struct {
	Target  time.Duration
	Answers []PurchaseAnswer
	// Windows is how many windows each answer's points pooled
	// (PurchasePoint.Add; 0: one sample, not pooled).
	Windows int
}

// cheapest is the cheapest met answer of those keep takes; ok false when
// none is met.
func (p Purchase) cheapest(keep func(PurchaseAnswer) bool) (PurchaseAnswer, bool) {
	var best PurchaseAnswer
	ok := false
	for _, a := range p.Answers {
		if keep(a) && a.Met && (!ok || a.Best.Cost < best.Best.Cost) {
			best, ok = a, true
		}
	}
	return best, ok
}

// Verdict is the answer in one sentence: nomad-gpu's cheapest cluster
// for the target against stock Nomad's.
func (p Purchase) Verdict() string {
	stock, sok := p.cheapest(func(a PurchaseAnswer) bool { return a.Stock })
	ng, nok := p.cheapest(func(a PurchaseAnswer) bool { return a.NomadGPU })
	switch {
	case sok && nok:
		v := fmt.Sprintf("For a mean wait of at most %s, stock Nomad's cheapest cluster is %s (%s) at %.0f; nomad-gpu's is %s (%s) at %.0f: **%.2f×** stock Nomad's cost.",
			Human(p.Target), clusterText(stock.Best), stock.Config, stock.Best.Cost, clusterText(ng.Best), ng.Config, ng.Best.Cost, ng.Best.Cost/stock.Best.Cost)
		if od, ok := p.cheapest(func(a PurchaseAnswer) bool { return a.NomadGPU && !a.Spot }); ok && ng.Spot {
			v += fmt.Sprintf(" Without spot nodes, %s (%s) at %.0f: %.2f×.", clusterText(od.Best), od.Config, od.Best.Cost, od.Best.Cost/stock.Best.Cost)
		}
		return v
	case nok:
		return fmt.Sprintf("For a mean wait of at most %s, no stock Nomad configuration meets it in the range; nomad-gpu's cheapest is %s (%s) at %.0f.",
			Human(p.Target), clusterText(ng.Best), ng.Config, ng.Best.Cost)
	case sok:
		return fmt.Sprintf("For a mean wait of at most %s, stock Nomad's cheapest cluster is %s (%s) at %.0f; no nomad-gpu configuration meets it in the range.",
			Human(p.Target), clusterText(stock.Best), stock.Config, stock.Best.Cost)
	}
	return fmt.Sprintf("For a mean wait of at most %s, no configuration meets it in the range: widen -frontier or promise a longer wait.", Human(p.Target))
}

// clusterText is a point's cluster in words.
func clusterText(p PurchasePoint) string {
	nodes := fmt.Sprintf("%d reserved node", p.Base)
	if p.Base != 1 {
		nodes += "s"
	}
	if p.Base == p.Max {
		return nodes
	}
	return fmt.Sprintf("%s bursting to %d", nodes, p.Max)
}

// Markdown is the purchase report: the verdict, then each
// configuration's answer.
func (p Purchase) Markdown(title, what string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s\n\n%s\n\n%s\n\n", title, what, p.Verdict())
	b.WriteString("| configuration | meets the wait | cluster | cost | per useful GPU-hour | node-hours | mean wait | p95 wait | top tier's wait | lost GPU-hours | clusters modelled |\n")
	b.WriteString("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, a := range p.Answers {
		met := "yes"
		if !a.Met {
			met = "no: its least wait"
		}
		q := a.Best
		p95 := Human(q.WaitP95)
		if p.Windows > 0 {
			p95 = "–" // a percentile does not pool
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %.0f | %.2f | %.1f | %s | %s | %s | %.2f | %d |\n", a.Config, met, clusterText(q), q.Cost, q.CostPerUsefulGPUHour,
			q.NodeHours, Human(q.Wait), p95, Human(q.WaitTop), q.LostGPUHours, a.Tried)
	}
	b.WriteString("\nA fixed cluster's nodes are reserved; an autoscaled pool's reserved base is its minimum, paid whether used or not, and its burst is paid on demand (on spot where the configuration's burst is spot) while it runs. Cost is at the prices above over the sample's horizon; the cluster chosen is the cheapest whose mean wait, re-waits of preempted work included, is within the target.\n")
	if p.Windows > 0 {
		fmt.Fprintf(&b, "\nOne cluster is bought for all %d windows: its cost is theirs added up and its mean wait is over every job of them, so a cluster that meets the target on the mean may still miss it on the busiest window (-purchase without -sweep models that one).\n", p.Windows)
	}
	if slices.ContainsFunc(p.Answers, func(a PurchaseAnswer) bool { return a.Spot }) {
		b.WriteString("\nA spot burst is taken to be there whenever the pool asks for it, and reclaimed at -spot-reclaim-rate: where your cloud runs out of spot GPUs, or takes them back more often, it costs more than this says, in waits.\n")
	}
	return b.String()
}
