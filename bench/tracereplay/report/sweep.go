package report

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/nomad-gpu/nomad-gpu/bench/tracereplay"
	"github.com/nomad-gpu/nomad-gpu/bench/tracereplay/figures"
	"github.com/nomad-gpu/nomad-gpu/internal/quantile"
)

// Sweep pools the model's figures over many windows of one trace. One
// window is one draw of arrivals: two configurations can differ on it by
// a third with no difference of policy at all (docs/trace-replay.md,
// moves), so a claim about a policy needs many. Waits are pooled over
// every job of every window (a busy window weighs by its jobs); each
// window's ratio to the first configuration gives the paired view: its
// median and how many windows the configuration wins.
type Sweep struct {
	// Configs are the configurations' names, the first the reference.
	Configs []string
	// Queues and Shares are the team queues (tracereplay.Cluster.Queues)
	// and their weights' shares; none without -teams.
	Queues []string
	Shares []float64
	// Windows are the windows added, Skipped the windows holding no job.
	Windows, Skipped int
	// Prices price the node-hours: the report gives the pooled cost
	// where a configuration has spot nodes.
	Prices figures.Prices
	acc    []sweepAcc
	// spot says a configuration has spot nodes (Features.Spot).
	spot bool
}

// sweepAcc is one configuration's sums over the windows.
type sweepAcc struct {
	wait, big           pooled
	byKind              map[string]*pooled
	partialGPUH, idleH  float64
	reservations        int
	useful, frag        float64 // Σ over windows
	moves               int
	looks               tracereplay.MoveLooks
	lostGPUH, nodeHours float64
	ratios, kindRatios  []float64 // per window: mean wait over the reference's; the same for KindManyGPUs
	diffs               []float64 // per window: mean wait minus the reference's, seconds
	// shorter and longer count the windows with a mean wait below and
	// above the reference's, [0] of every job, [1] of KindManyGPUs.
	shorter, longer [2]int
	// By team queue: the GPU-seconds held while every queue waited
	// (figures.QueueWaitGPUSeconds), the waits, and with queues the
	// waits alone on the queue's nominal (pooled by the queue's jobs).
	queueHeld             map[string]float64
	queueWait, queueAlone map[string]*pooled
	reclaims              int
	// Spot capacity (Features.Spot): node-hours by kind, cost, useful
	// GPU-hours, spot reclaims and what they cost.
	reservedH, onDemandH, spotH  float64
	cost, usefulGPUH             float64
	spotReclaims                 int
	spotReclaimGPUH, spotLostGPU float64
}

// pooled is a mean over every job of every window.
type pooled struct {
	n   int
	sum float64 // seconds
}

func (p *pooled) add(d figures.Dist) {
	p.n += d.N
	p.sum += d.Mean.Seconds() * float64(d.N)
}

func (p pooled) mean() time.Duration {
	if p.n == 0 {
		return 0
	}
	return time.Duration(p.sum / float64(p.n) * float64(time.Second))
}

// NewSweep is an empty sweep of configs, the first the reference.
func NewSweep(configs []string) *Sweep {
	s := &Sweep{Configs: configs, acc: make([]sweepAcc, len(configs))}
	for i := range s.acc {
		s.acc[i].byKind = map[string]*pooled{}
		s.acc[i].queueHeld, s.acc[i].queueWait, s.acc[i].queueAlone = map[string]float64{}, map[string]*pooled{}, map[string]*pooled{}
	}
	return s
}

// Add takes one window's results, one per configuration in order, with
// the figures computed as the report computes them.
func (s *Sweep) Add(trace tracereplay.Trace, rs []tracereplay.Result) error {
	if len(rs) != len(s.Configs) {
		return fmt.Errorf("sweep: %d results for %d configurations", len(rs), len(s.Configs))
	}
	fs := make([]figures.Figures, len(rs))
	for i, r := range rs {
		// No JCT is pooled, so no common set of jobs is needed.
		fs[i] = figures.Compute(r, figures.Options{Mix: figures.MixOf(trace.Jobs, r.Cluster, r.Config.Features), Prices: s.Prices})
		s.spot = s.spot || r.Config.Spot
	}
	s.Queues, s.Shares = rs[0].Cluster.Queues()
	s.add(fs)
	for i, r := range rs {
		s.acc[i].addQueues(fs[i], r.QueueAlone, len(s.Queues))
	}
	return nil
}

// addQueues takes one window's team queue figures; alone are the
// queues' mean waits alone on their nominal (none without queues). Its
// GPU-time while every queue waited counts only where each of the n
// queues had jobs in the window: one with none never waited, so no span
// of the window is one in which every queue waited.
func (a *sweepAcc) addQueues(f figures.Figures, alone map[string]time.Duration, n int) {
	if len(f.QueueWaitGPUSeconds) == n {
		for q, gs := range f.QueueWaitGPUSeconds {
			a.queueHeld[q] += gs
		}
	}
	for q, d := range f.WaitByQueue {
		if a.queueWait[q] == nil {
			a.queueWait[q], a.queueAlone[q] = &pooled{}, &pooled{}
		}
		a.queueWait[q].add(d)
		if w, ok := alone[q]; ok {
			a.queueAlone[q].add(figures.Dist{N: d.N, Mean: w})
		}
	}
	a.reclaims += f.Reclaims
}

// add takes one window's figures, one per configuration in order.
func (s *Sweep) add(fs []figures.Figures) {
	s.Windows++
	ref := fs[0]
	for i, f := range fs {
		a := &s.acc[i]
		a.wait.add(f.Wait)
		a.big.add(f.WaitBig)
		a.partialGPUH += f.PartialGPUHours
		a.idleH += f.ReservationIdleGPUHours
		a.reservations += f.Reservations
		for k, d := range f.WaitByKind {
			if a.byKind[k] == nil {
				a.byKind[k] = &pooled{}
			}
			a.byKind[k].add(d)
		}
		a.useful += f.UsefulUtil
		a.frag += f.FragCapacity
		a.moves += f.Moves
		a.looks.Looks += f.MoveLooks.Looks
		a.looks.WithRoom += f.MoveLooks.WithRoom
		a.lostGPUH += f.LostGPUHours
		a.nodeHours += f.NodeHours
		a.reservedH, a.onDemandH, a.spotH = a.reservedH+f.ReservedNodeHours, a.onDemandH+f.OnDemandNodeHours, a.spotH+f.SpotNodeHours
		a.cost, a.usefulGPUH = a.cost+f.Cost, a.usefulGPUH+f.UsefulGPUHours
		a.spotReclaims += f.SpotReclaims
		a.spotReclaimGPUH, a.spotLostGPU = a.spotReclaimGPUH+f.SpotReclaimGPUHours, a.spotLostGPU+f.SpotLostGPUHours
		a.diffs = append(a.diffs, (f.Wait.Mean - ref.Wait.Mean).Seconds())
		if r, ok := waitRatio(f.Wait, ref.Wait); ok {
			a.ratios = append(a.ratios, r)
			a.shorter[0], a.longer[0] = a.shorter[0]+b2i(r < 1), a.longer[0]+b2i(r > 1)
		}
		if r, ok := waitRatio(f.WaitByKind[figures.KindManyGPUs], ref.WaitByKind[figures.KindManyGPUs]); ok {
			a.kindRatios = append(a.kindRatios, r)
			a.shorter[1], a.longer[1] = a.shorter[1]+b2i(r < 1), a.longer[1]+b2i(r > 1)
		}
	}
}

// waitRatio is d's mean over ref's, where ref waited at all.
func waitRatio(d, ref figures.Dist) (float64, bool) {
	if ref.N == 0 || ref.Mean <= 0 || d.N == 0 {
		return 0, false
	}
	return float64(d.Mean) / float64(ref.Mean), true
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Markdown is the sweep's report: title, what was swept, and the pooled
// and paired tables.
func (s *Sweep) Markdown(title, what string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s\n\n%s\n\n%d windows modelled, %d holding no job skipped.\n\n", title, what, s.Windows, s.Skipped)
	if s.Windows == 0 {
		return b.String()
	}
	b.WriteString("| figure |")
	for _, c := range s.Configs {
		fmt.Fprintf(&b, " %s |", cellText(c))
	}
	b.WriteString("\n|---|" + strings.Repeat("---:|", len(s.Configs)) + "\n")
	row := func(label string, cell func(a *sweepAcc) string) {
		fmt.Fprintf(&b, "| %s |", label)
		for i := range s.acc {
			fmt.Fprintf(&b, " %s |", cell(&s.acc[i]))
		}
		b.WriteString("\n")
	}
	w := float64(s.Windows)
	row("wait mean, every job of every window", func(a *sweepAcc) string { return fmt.Sprintf("%s (%d)", Human(a.wait.mean()), a.wait.n) })
	kinds := map[string]bool{}
	for _, a := range s.acc {
		for k := range a.byKind {
			kinds[k] = true
		}
	}
	for _, k := range slices.Sorted(maps.Keys(kinds)) {
		row("wait mean, "+k, func(a *sweepAcc) string {
			p := a.byKind[k]
			if p == nil {
				return "–"
			}
			return fmt.Sprintf("%s (%d)", Human(p.mean()), p.n)
		})
	}
	row("wait ÷ reference's, median window", func(a *sweepAcc) string { return medianCell(a.ratios, ratioText) })
	row("wait − reference's, median window", func(a *sweepAcc) string { return medianCell(a.diffs, secondsText) })
	row("windows with a shorter / longer mean wait", func(a *sweepAcc) string {
		return fmt.Sprintf("%d / %d of %d", a.shorter[0], a.longer[0], len(a.ratios))
	})
	row("4+ GPU wait ÷ reference's, median window", func(a *sweepAcc) string { return medianCell(a.kindRatios, ratioText) })
	row("windows with a shorter / longer 4+ GPU wait", func(a *sweepAcc) string {
		return fmt.Sprintf("%d / %d of %d", a.shorter[1], a.longer[1], len(a.kindRatios))
	})
	row("useful allocation, window mean", func(a *sweepAcc) string { return fmt.Sprintf("%.1f %%", 100*a.useful/w) })
	row("FGD of capacity, window mean", func(a *sweepAcc) string { return fmt.Sprintf("%.1f %%", 100*a.frag/w) })
	row("moves", func(a *sweepAcc) string { return fmt.Sprint(a.moves) })
	row("consolidation rounds with room in the cluster", func(a *sweepAcc) string {
		if a.looks.Looks == 0 {
			return "–"
		}
		return fmt.Sprintf("%d of %d", a.looks.WithRoom, a.looks.Looks)
	})
	row("lost GPU-hours", func(a *sweepAcc) string { return fmt.Sprintf("%.2f", a.lostGPUH) })
	row("wait mean, jobs asking 4+ GPUs (gangs too)", func(a *sweepAcc) string {
		return fmt.Sprintf("%s (%d)", Human(a.big.mean()), a.big.n)
	})
	row("partial-placement GPU-hours (gangs)", func(a *sweepAcc) string { return fmt.Sprintf("%.2f", a.partialGPUH) })
	row("reservations", func(a *sweepAcc) string { return fmt.Sprint(a.reservations) })
	row("reservation idle GPU-hours", func(a *sweepAcc) string { return fmt.Sprintf("%.2f", a.idleH) })
	row("node-hours", func(a *sweepAcc) string { return fmt.Sprintf("%.1f", a.nodeHours) })
	if s.spot {
		row("node-hours reserved (the minimum, paid for the horizon)", func(a *sweepAcc) string { return fmt.Sprintf("%.1f", a.reservedH) })
		row("node-hours on demand", func(a *sweepAcc) string { return fmt.Sprintf("%.1f", a.onDemandH) })
		row("node-hours spot", func(a *sweepAcc) string { return fmt.Sprintf("%.1f", a.spotH) })
		row(fmt.Sprintf("cost (%g reserved, %g on demand, %g spot a node-hour)", s.Prices.Reserved, s.Prices.OnDemand, s.Prices.Spot),
			func(a *sweepAcc) string { return fmt.Sprintf("%.0f", a.cost) })
		row("cost per useful GPU-hour", func(a *sweepAcc) string {
			if a.usefulGPUH <= 0 {
				return "–"
			}
			return fmt.Sprintf("%.2f", a.cost/a.usefulGPUH)
		})
		row("spot reclaims (runs stopped)", func(a *sweepAcc) string { return fmt.Sprint(a.spotReclaims) })
		row("spot reclaim GPU-hours (re-waits)", func(a *sweepAcc) string { return fmt.Sprintf("%.2f", a.spotReclaimGPUH) })
		row("lost GPU-hours to spot reclaims", func(a *sweepAcc) string { return fmt.Sprintf("%.2f", a.spotLostGPU) })
	}
	b.WriteString("\nWaits are pooled over every job of every window, as one window's report computes them (first wait and re-waits; jobs waiting at the horizon count their wait so far). A window's ratio is its mean wait over the reference's (the first column) in the same window, where the reference waited at all. Consolidation rounds are the model's rounds with a multi-GPU job waiting for a node; with room, those where the free whole GPUs of the nodes it may use add up to the job's ask: the only ones a move can serve.\n")
	s.queuesMarkdown(&b)
	return b.String()
}

// queuesMarkdown writes the team queues pooled over the windows: each
// queue's share of the GPU-time held while every queue waited, its mean
// wait, and with queues its mean wait alone on its nominal.
func (s *Sweep) queuesMarkdown(b *strings.Builder) {
	if len(s.Queues) < 2 {
		return
	}
	b.WriteString("\n## Team queues\n\nPooled over the windows: each queue's weight share, its share of the queues' GPU-time while every queue had work waiting (summed over the windows in which every queue had jobs), and its mean wait; for a configuration with queues, its mean wait alone on its nominal quota (each window's, weighed by the queue's jobs in it).\n\n| queue | weight share |")
	var alone []int
	for i, c := range s.Configs {
		fmt.Fprintf(b, " %s |", cellText(c))
		if len(s.acc[i].queueAlone) > 0 && s.acc[i].queueAlone[s.Queues[0]] != nil && s.acc[i].queueAlone[s.Queues[0]].n > 0 {
			alone = append(alone, i)
		}
	}
	for _, i := range alone {
		fmt.Fprintf(b, " alone on its nominal (%s) |", cellText(s.Configs[i]))
	}
	b.WriteString("\n|---|---:|" + strings.Repeat("---:|", len(s.Configs)+len(alone)) + "\n")
	for qi, q := range s.Queues {
		fmt.Fprintf(b, "| %s | %.1f %% |", cellText(q), 100*s.Shares[qi])
		for i := range s.acc {
			a := &s.acc[i]
			share, wait := figures.Shares(a.queueHeld)[q], time.Duration(0)
			if p := a.queueWait[q]; p != nil {
				wait = p.mean()
			}
			fmt.Fprintf(b, " %.1f %%, %s |", 100*share, Human(wait))
		}
		for _, i := range alone {
			fmt.Fprintf(b, " %s |", Human(s.acc[i].queueAlone[q].mean()))
		}
		b.WriteString("\n")
	}
	b.WriteString("\nRuns taken back by the queues (for a lender, or for their own work 10 above):")
	for i, c := range s.Configs {
		fmt.Fprintf(b, " %s %d;", c, s.acc[i].reclaims)
	}
	b.WriteString("\n")
}

// medianCell writes the median of xs with text; "–" for none.
func medianCell(xs []float64, text func(float64) string) string {
	if len(xs) == 0 {
		return "–"
	}
	return text(quantile.Of(xs, 0.5))
}

func ratioText(x float64) string { return fmt.Sprintf("%.2f×", x) }

func secondsText(x float64) string { return Human(time.Duration(x * float64(time.Second))) }
