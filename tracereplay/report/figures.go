// Package report turns trace replay Results into figures, a Markdown
// report and PNG plots. Every number in the report is computed from the
// Results it is given, so a report can be regenerated and checked.
package report

import (
	"math"
	"time"

	"github.com/nomad-gpu/nomad-gpu/internal/quantile"
	"github.com/nomad-gpu/nomad-gpu/tracereplay"
)

// Figures summarise one Result over [0, Horizon].
//
// Time integrals are step integrals of the Timeline: each sample's values
// hold until the next sample (the last one's until Horizon), and the first
// sample's values also stand for the time before it. Engines sample the
// cluster when it changes, so the state between samples is the earlier
// sample's; a trapezoid would invent ramps between them.
type Figures struct {
	// AllocUtil and BusyUtil are ∫Allocated / ∫GPUs and ∫Busy / ∫GPUs,
	// as fractions.
	AllocUtil, BusyUtil float64
	// FragMean is the time mean of Sample.Fragmentation, as a fraction.
	FragMean float64
	// Waits run from arrival to first start; a job never started waits
	// until Horizon (censored: its true wait is longer).
	WaitMean, WaitP50, WaitP95, WaitMax time.Duration
	// Unstarted are the jobs with a censored wait.
	Unstarted int
	// JCTs run from arrival to finish, of Done jobs only.
	JCTMean, JCTP50, JCTP95 time.Duration
	Done, Jobs              int
	Preemptions             int
	// LostGPUHours is Σ LostWork × Slice.GPUs: GPU time spent redoing
	// work after preemptions.
	LostGPUHours float64
	// NodeHours is ∫Nodes dt, in trace hours.
	NodeHours float64
	PeakNodes int
}

// Compute summarises r.
func Compute(r tracereplay.Result) Figures {
	f := Figures{Jobs: len(r.Jobs)}
	gpus := integrate(r.Timeline, r.Horizon, func(s tracereplay.Sample) float64 { return s.GPUs })
	if gpus > 0 {
		f.AllocUtil = integrate(r.Timeline, r.Horizon, func(s tracereplay.Sample) float64 { return s.Allocated }) / gpus
		f.BusyUtil = integrate(r.Timeline, r.Horizon, func(s tracereplay.Sample) float64 { return s.Busy }) / gpus
	}
	if r.Horizon > 0 {
		f.FragMean = integrate(r.Timeline, r.Horizon, func(s tracereplay.Sample) float64 { return s.Fragmentation }) / r.Horizon.Seconds()
	}
	f.NodeHours = integrate(r.Timeline, r.Horizon, func(s tracereplay.Sample) float64 { return float64(s.Nodes) }) / 3600
	for _, s := range r.Timeline {
		if s.At <= r.Horizon {
			f.PeakNodes = max(f.PeakNodes, s.Nodes)
		}
	}

	waits := Waits(r)
	ws := make([]float64, len(waits))
	for i, w := range waits {
		ws[i] = w.Seconds()
		f.WaitMax = max(f.WaitMax, w)
	}
	f.WaitMean, f.WaitP50, f.WaitP95 = mean(ws), seconds(quantile.Of(ws, 0.5)), seconds(quantile.Of(ws, 0.95))

	var jcts []float64
	for _, j := range r.Jobs {
		if len(j.Starts) == 0 || j.Starts[0] > r.Horizon {
			f.Unstarted++
		}
		if j.Done {
			f.Done++
			jcts = append(jcts, (j.Finish - j.Arrival).Seconds())
		}
		f.Preemptions += j.Preemptions
		f.LostGPUHours += j.LostWork.Hours() * j.Slice.GPUs
	}
	f.JCTMean, f.JCTP50, f.JCTP95 = mean(jcts), seconds(quantile.Of(jcts, 0.5)), seconds(quantile.Of(jcts, 0.95))
	return f
}

// Waits are r's jobs' waits in trace order, censored at Horizon as in
// Figures (a job arriving after Horizon waits 0: it was never measured).
func Waits(r tracereplay.Result) []time.Duration {
	ws := make([]time.Duration, len(r.Jobs))
	for i, j := range r.Jobs {
		end := r.Horizon
		if len(j.Starts) > 0 && j.Starts[0] <= r.Horizon {
			end = j.Starts[0]
		}
		ws[i] = max(0, end-j.Arrival)
	}
	return ws
}

// integrate is the step integral of v over [0, horizon], in v × seconds.
func integrate(tl []tracereplay.Sample, horizon time.Duration, v func(tracereplay.Sample) float64) float64 {
	var sum float64
	for i, s := range tl {
		if s.At >= horizon {
			break
		}
		from := s.At
		if i == 0 {
			from = 0
		}
		to := horizon
		if i+1 < len(tl) {
			to = min(tl[i+1].At, horizon)
		}
		if to > from {
			sum += v(s) * (to - from).Seconds()
		}
	}
	return sum
}

func mean(xs []float64) time.Duration {
	if len(xs) == 0 {
		return 0
	}
	var s float64
	for _, x := range xs {
		s += x
	}
	return seconds(s / float64(len(xs)))
}

func seconds(s float64) time.Duration { return time.Duration(math.Round(s * float64(time.Second))) }
