package figures

import (
	"slices"
	"time"

	"github.com/nomad-gpu/nomad-gpu/bench/tracereplay"
)

// QueueShares is each team queue's share (0–1) of the GPU-time the
// queues' jobs held while every queue had work waiting, by queue
// (tracereplay.Cluster.QueueOf of the jobs' teams): a job waits from its
// submission to its first start, and from each interruption (a
// preemption, a move, a reclaim) to its next start. Weighted fair share
// promises each queue its weight's share while all want more than they
// hold; while one waits for nothing the others may use its share, which
// says nothing of fairness. Nil without Cluster.Teams, or when the queues
// never all waited at once.
func QueueShares(r tracereplay.Result) map[string]float64 {
	return Shares(QueueWaitGPUSeconds(r))
}

// Shares is each key's share (0–1) of the sum of xs; nil when the sum is
// not above 0.
func Shares(xs map[string]float64) map[string]float64 {
	total := 0.0
	for _, x := range xs {
		total += x
	}
	if total <= 0 {
		return nil
	}
	out := make(map[string]float64, len(xs))
	for k, x := range xs {
		out[k] = x / total
	}
	return out
}

// QueueWaitGPUSeconds is the GPU-time (GPU-equivalent-seconds) each team
// queue with jobs in the run held while every such queue had work
// waiting, by queue (a queue without jobs has no entry): what
// QueueShares divides (and a sweep pools); nil without Cluster.Teams.
func QueueWaitGPUSeconds(r tracereplay.Result) map[string]float64 {
	names, _ := r.Cluster.Queues()
	if len(names) < 2 {
		return nil
	}
	index := map[string]int{}
	for i, n := range names {
		index[n] = i
	}
	type edge struct {
		at    time.Duration
		queue int
		work  int     // +1 a job's wait begins, -1 it ends
		gpus  float64 // GPU-equivalents its holding adds
	}
	var edges []edge
	h := r.Horizon
	for _, j := range r.Jobs {
		q, ok := index[r.Cluster.QueueOf(j.Team)]
		if !ok || j.Submitted > h {
			continue
		}
		for _, w := range waitSpans(j, h) {
			edges = append(edges, edge{at: w[0], queue: q, work: 1}, edge{at: w[1], queue: q, work: -1})
		}
		runs, gpus := j.Holding()
		for _, run := range runs {
			if from, to := run.Start, min(run.End, h); to > from {
				edges = append(edges, edge{at: from, queue: q, gpus: gpus}, edge{at: to, queue: q, gpus: -gpus})
			}
		}
	}
	slices.SortStableFunc(edges, func(a, b edge) int { return int(a.at - b.at) })
	work, held, gpuSeconds := make([]int, len(names)), make([]float64, len(names)), make([]float64, len(names))
	absent := make([]bool, len(names))
	for i := range work {
		if !slices.ContainsFunc(edges, func(e edge) bool { return e.queue == i }) {
			// A queue with no job in the run waits for nothing: it is no
			// party to the shares, and has no figure.
			work[i], absent[i] = 1, true
		}
	}
	var last time.Duration
	for _, e := range edges {
		if e.at > last && allPositive(work) {
			for i, g := range held {
				gpuSeconds[i] += g * (e.at - last).Seconds()
			}
		}
		last = max(last, e.at)
		work[e.queue] += e.work
		held[e.queue] += e.gpus
	}
	out := map[string]float64{}
	for i, n := range names {
		if !absent[i] {
			out[n] = gpuSeconds[i]
		}
	}
	return out
}

func allPositive(xs []int) bool {
	for _, x := range xs {
		if x <= 0 {
			return false
		}
	}
	return true
}

// waitSpans are the spans [from, to) in which job j waited within the
// horizon h (jobWaits' rule).
func waitSpans(j tracereplay.JobRecord, h time.Duration) [][2]time.Duration {
	start := h
	if len(j.Runs) > 0 {
		start = min(j.Runs[0].Start, h)
	}
	out := [][2]time.Duration{{j.Submitted, start}}
	for i, run := range j.Runs {
		if !run.Interrupted() || run.End >= h {
			continue
		}
		next := h
		if i+1 < len(j.Runs) {
			next = min(j.Runs[i+1].Start, h)
		}
		out = append(out, [2]time.Duration{run.End, next})
	}
	return slices.DeleteFunc(out, func(w [2]time.Duration) bool { return w[1] <= w[0] })
}
