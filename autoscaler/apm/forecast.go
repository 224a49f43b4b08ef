package apm

import (
	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/controller/sizing"
	"github.com/nomad-gpu/nomad-gpu/controller/sizing/predict"
)

// ForecastOf is the runtime and wait forecast (sizing.Forecast) of the
// snapshot, at s.Now: the predicted remaining and total run time of the GPU
// tasks of its pending and running allocations and the predicted wait of
// its blocked task groups. Its history is the GPU task runs of s.Runs:
// Nomad's own allocations, those pending or running and those finished
// within finished_window (the sizer's history store is not read). The free
// slices are FreeSlices'; pending allocations are not queued work here:
// they hold their slices already.
func ForecastOf(s *Snapshot) sizing.Forecasts {
	in := sizing.ForecastInput{Runs: s.TaskRuns(), Free: FreeSlices(s)}
	for i := range s.Work {
		w := &s.Work[i]
		if w.Source != FromBlockedEval || w.Allocs <= 0 {
			continue
		}
		q := sizing.QueuedWork{Namespace: w.Namespace, Job: w.JobID, Group: w.Group, Task: w.Task,
			Pool: w.Pool, Priority: w.Priority, Since: w.Since, Allocs: w.Allocs}
		for _, a := range w.Asks {
			q.Asks = append(q.Asks, sizing.Ask{Name: a.Device.String(), Count: a.Count})
		}
		in.Queued = append(in.Queued, q)
	}
	return sizing.Forecast(in, s.Now)
}

// FreeSlices are, per node pool and unit (whole GPUs, MPS shares, MIG
// instances of one profile), the healthy nvidia device instances of
// schedulable nodes that no pending or running allocation holds.
func FreeSlices(s *Snapshot) map[string]predict.Capacity {
	out := map[string]predict.Capacity{}
	held := map[string]bool{}
	for i := range s.Nodes {
		n := &s.Nodes[i]
		if !n.Schedulable() {
			continue
		}
		n.markHeld(held)
		for gi := range n.Devices {
			g := &n.Devices[gi]
			if g.Vendor != contract.Vendor {
				continue
			}
			var u predict.Unit
			switch g.Type {
			case contract.SliceGPU, contract.SliceMPS:
				u = predict.Unit{Kind: g.Type}
			case contract.SliceMIG:
				u = predict.Unit{Kind: g.Type, Profile: g.Name}
			default:
				continue
			}
			c := out[n.Pool]
			if c == nil {
				c = predict.Capacity{}
				out[n.Pool] = c
			}
			for _, in := range g.Instances {
				if in.Healthy && !held[in.ID] {
					c[u]++
				}
			}
		}
	}
	return out
}
