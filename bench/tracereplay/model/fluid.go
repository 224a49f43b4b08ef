package model

import (
	"cmp"
	"container/heap"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/nomad-gpu/nomad-gpu/bench/tracereplay"
)

// FluidName is the fluid reference's configuration name.
const FluidName = "fluid pool"

// FluidVersion is the fluid reference's Result.Version.
const FluidVersion = "fluid-1"

// fluidUnit is the pool's resolution: a millionth of a GPU, so that
// fractions add up exactly (0.1 + 0.2 does not in floating point).
const fluidUnit = 1e6

// Fluid replays tr on the fluid reference: what a configuration waits
// beyond it is lost to packing (node boundaries, whole GPUs and shares,
// device kinds) and to latencies, not to the scheduler's order. Its
// rules:
//
//   - One pool of every GPU of the cluster, Cluster.Nodes ×
//     GPUsPerNode GPU-equivalents (the fixed cluster's: an autoscaled
//     configuration, or one given more nodes, has more at times). A job
//     takes exactly the GPU-equivalents it asks for (Job.Requested: a
//     0.25-GPU job takes 0.25) out of the pool, wherever they are.
//   - No latency: a job placed runs at once; no node boots, nothing is
//     relaid. Nothing is preempted or moved, so a job runs once, for its
//     duration.
//   - Scheduling is the model's: the waiting jobs by priority (highest
//     first), then the age of their evaluation (their arrival, as
//     nothing is preempted), then trace order; each placed on its own
//     where it fits, a job that does not fit blocking none behind it
//     (backfill), at every arrival and finish.
//   - Records and the horizon are the model's (Run): runs still going at
//     the horizon end there (Open); jobs arriving after it are never
//     submitted. The timeline has a sample at 0 and after every instant
//     something changed, with the cluster's nodes.
//
// Options.Config and Policy are not used; Latencies are none.
func Fluid(tr tracereplay.Trace, o Options) (tracereplay.Result, error) {
	o.Config = tracereplay.Config{Name: FluidName}
	if err := validate(tr, &o); err != nil {
		return tracereplay.Result{}, err
	}
	horizon := o.Horizon
	if horizon == 0 {
		horizon = defaultHorizon(tr)
	}
	poolGPUs := o.Cluster.Nodes * o.Cluster.GPUsPerNode
	if poolGPUs <= 0 {
		return tracereplay.Result{}, fmt.Errorf("cluster: %d nodes of %d GPUs; the fluid pool needs at least one GPU", o.Cluster.Nodes, o.Cluster.GPUsPerNode)
	}
	free := int64(poolGPUs) * fluidUnit
	recs := make([]tracereplay.JobRecord, len(tr.Jobs))
	units := make([]int64, len(tr.Jobs))
	for i, j := range tr.Jobs {
		req := j.Requested()
		recs[i] = j.Record(tracereplay.Slice{Kind: "gpu", Count: int(math.Ceil(req)), GPUs: req})
		units[i] = int64(math.Round(req * fluidUnit))
	}
	// Trace order within one arrival and priority; Trace keeps jobs
	// sorted by arrival, but sort the arrivals anyway.
	arrivals := make([]int, len(tr.Jobs))
	for i := range arrivals {
		arrivals[i] = i
	}
	slices.SortStableFunc(arrivals, func(a, b int) int { return cmp.Compare(tr.Jobs[a].Arrival, tr.Jobs[b].Arrival) })
	before := func(a, b int) int {
		return cmp.Or(cmp.Compare(recs[b].Priority, recs[a].Priority), cmp.Compare(recs[a].Arrival, recs[b].Arrival), cmp.Compare(a, b))
	}

	var waiting []int // in scheduling order
	var running finishHeap
	sample := func(at time.Duration) tracereplay.Sample {
		held := float64(int64(poolGPUs)*fluidUnit-free) / fluidUnit
		var busy float64
		for _, f := range running {
			busy += recs[f.job].Requested * recs[f.job].Util / 100
		}
		return tracereplay.Sample{At: at, Nodes: o.Cluster.Nodes, GPUs: float64(poolGPUs), Allocated: held, Busy: busy, Queued: len(waiting)}
	}
	timeline := []tracereplay.Sample{sample(0)}
	next := 0 // into arrivals
	for {
		now := time.Duration(math.MaxInt64)
		if next < len(arrivals) {
			now = tr.Jobs[arrivals[next]].Arrival
		}
		if len(running) > 0 {
			now = min(now, running[0].at)
		}
		if now > horizon {
			break
		}
		for len(running) > 0 && running[0].at == now {
			f := heap.Pop(&running).(finish)
			free += units[f.job]
			recs[f.job].Done, recs[f.job].Finish = true, now
		}
		for next < len(arrivals) && tr.Jobs[arrivals[next]].Arrival == now {
			id := arrivals[next]
			at, _ := slices.BinarySearchFunc(waiting, id, before)
			waiting = slices.Insert(waiting, at, id)
			next++
		}
		kept := waiting[:0]
		for _, id := range waiting {
			if units[id] > free {
				kept = append(kept, id)
				continue
			}
			free -= units[id]
			recs[id].Runs = []tracereplay.Run{{Start: now, End: now + tr.Jobs[id].Duration, Node: "pool"}}
			heap.Push(&running, finish{at: now + tr.Jobs[id].Duration, job: id})
		}
		waiting = kept
		if now > 0 {
			timeline = append(timeline, sample(now))
		} else {
			timeline[0] = sample(0)
		}
	}
	for _, f := range running {
		run := &recs[f.job].Runs[0]
		run.End, run.Open = horizon, true
	}
	if last := timeline[len(timeline)-1]; last.At < horizon {
		last.At = horizon
		timeline = append(timeline, last)
	}
	return tracereplay.Result{
		Engine: "model", Version: FluidVersion, Config: o.Config, Cluster: o.Cluster, Compression: o.Compression,
		Horizon: horizon, Jobs: recs, Timeline: timeline, PlacementsRecorded: true,
	}, nil
}

// finish is a running job's end.
type finish struct {
	at  time.Duration
	job int
}

// finishHeap orders finishes by time, then trace order.
type finishHeap []finish

func (h finishHeap) Len() int { return len(h) }
func (h finishHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].job < h[j].job
}
func (h finishHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *finishHeap) Push(x any)   { *h = append(*h, x.(finish)) }
func (h *finishHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
