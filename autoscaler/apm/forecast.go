package apm

import (
	"github.com/nomad-gpu/nomad-gpu/controller/sizing"
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
	in := sizing.ForecastInput{Runs: s.TaskRuns(), Free: s.Free}
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
