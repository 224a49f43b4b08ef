package topview

import (
	"errors"
	"math"
	"slices"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/controller/sizing"
	"github.com/nomad-gpu/nomad-gpu/controller/sizing/predict"
	"github.com/nomad-gpu/nomad-gpu/nomadview"
)

// Prediction is a GPU task's forecast (sizing.Forecast): its predicted
// remaining and whole run time, null when not known, and what they rest on
// (a sizing.Basis* kind: "job", "pool", "elapsed", "finished", "none").
type Prediction struct {
	RemainingSeconds *int64 `json:"remaining_seconds"`
	RuntimeSeconds   *int64 `json:"runtime_seconds"`
	Basis            string `json:"basis"`
}

// forecastInput is the input of sizing.Forecast for in, built as the APM
// builds it: the runs of the pending, running and finished allocations,
// the free slices of schedulable nodes per pool, and the blocked entries
// of queue as queued work.
func forecastInput(in *Input, queue []QueueEntry) sizing.ForecastInput {
	pools := map[string]string{}
	for _, n := range in.Nodes {
		if n != nil {
			pools[n.ID] = n.NodePool
		}
	}
	jobs := map[sizing.JobID]*api.JobListStub{}
	for k, j := range in.Jobs {
		jobs[sizing.JobID{Namespace: k.Namespace, ID: k.ID}] = j
	}
	seen := map[string]bool{}
	var allocs []*api.AllocationListStub
	for _, a := range slices.Concat(in.Allocs, in.Finished) {
		if a == nil || seen[a.ID] {
			continue
		}
		seen[a.ID] = true
		allocs = append(allocs, a)
	}
	fi := sizing.ForecastInput{Runs: sizing.RunsOf(allocs, pools, jobs), Free: sizing.FreeCapacity(in.FreeSlices())}
	for _, e := range queue {
		if e.State != StateBlocked {
			continue
		}
		job := in.Specs[JobKey{Namespace: e.Namespace, ID: e.Job}]
		q := sizing.QueuedWork{Namespace: e.Namespace, Job: e.Job, Group: e.Group, Pool: e.Pool, Since: e.Since, Allocs: e.Count}
		if job != nil {
			q.Task = nomadview.GPUTask(job, e.Group)
			if job.Priority != nil {
				q.Priority = *job.Priority
			}
		}
		for _, d := range e.Devices {
			q.Asks = append(q.Asks, sizing.Ask{Name: d.Name, Count: d.Count})
		}
		fi.Queued = append(fi.Queued, q)
	}
	return fi
}

// seconds is a Known estimate in whole seconds, nil when not Known.
func seconds(e predict.Estimate) *int64 {
	if !e.Known {
		return nil
	}
	s := int64(math.Round(max(e.Seconds, 0)))
	return &s
}

// addForecasts computes the forecast of in and attaches it to v: a
// Prediction to every task of a batch or sysbatch allocation forecast, a
// predicted wait to every blocked queue entry and a predicted run time to
// those of batch and sysbatch jobs. When the history could not be read
// every forecast is unknown.
func addForecasts(v *View, in *Input, held map[string]map[string][]AllocRef) {
	fc := sizing.Forecast(forecastInput(in, v.Queue), in.Now)
	unknown := in.HistoryError != ""

	jobTypes := map[string]string{} // alloc ID → job type
	for _, a := range in.Allocs {
		if a != nil {
			jobTypes[a.ID] = a.JobType
		}
	}
	type allocTask struct{ alloc, task string }
	preds := map[allocTask]*Prediction{}
	for _, t := range fc.Tasks {
		if !runsToEnd(jobTypes[t.AllocID]) {
			continue
		}
		p := &Prediction{Basis: sizing.BasisNone}
		if !unknown {
			p = taskPrediction(t)
		}
		preds[allocTask{t.AllocID, t.Key.Task}] = p
	}
	for ni := range v.Nodes {
		for gi := range v.Nodes[ni].GPUs {
			g := &v.Nodes[ni].GPUs[gi]
			for ai := range g.Allocations {
				a := &g.Allocations[ai]
				a.Prediction = preds[allocTask{a.AllocID, a.Task}]
			}
			for si := range g.Slices {
				if a := g.Slices[si].Alloc; a != nil {
					a.Prediction = preds[allocTask{a.AllocID, a.Task}]
				}
			}
		}
	}
	addQueueForecasts(v.Queue, in, fc.Queued, unknown)
}

// runsToEnd reports whether a job of this type runs until its work is
// done, so that a run time and time left mean something: batch and
// sysbatch jobs do, services and system jobs run until stopped.
func runsToEnd(jobType string) bool {
	return jobType == api.JobTypeBatch || jobType == api.JobTypeSysbatch
}

// taskPrediction is a task's forecast as top shows it. One that rests on
// nothing but the time the task has run (basis elapsed: no history, or the
// task outlived it) is no prediction: its figures are left unknown.
func taskPrediction(t sizing.TaskForecast) *Prediction {
	basis := sizing.BasisKind(t.Remaining)
	if basis == sizing.BasisElapsed {
		return &Prediction{Basis: basis}
	}
	return &Prediction{RemainingSeconds: seconds(t.Remaining), RuntimeSeconds: seconds(t.Runtime), Basis: basis}
}

// addQueueForecasts gives each blocked entry its predicted wait, and its
// run time when its job runs to an end.
func addQueueForecasts(queue []QueueEntry, in *Input, waits []sizing.WaitForecast, unknown bool) {
	type groupKey struct{ ns, job, group string }
	byGroup := map[groupKey]sizing.WaitForecast{}
	for _, w := range waits {
		byGroup[groupKey{w.Namespace, w.Job, w.Group}] = w
	}
	for i := range queue {
		e := &queue[i]
		if e.State != StateBlocked {
			continue
		}
		w, ok := byGroup[groupKey{e.Namespace, e.Job, e.Group}]
		if !ok {
			continue
		}
		if unknown {
			e.PredictionBasis = sizing.BasisNone
			continue
		}
		e.PredictedWaitSeconds = seconds(w.Wait)
		e.PredictionBasis = sizing.BasisKind(w.Wait)
		if job := in.Jobs[JobKey{Namespace: e.Namespace, ID: e.Job}]; job != nil && runsToEnd(job.Type) {
			e.PredictedRuntimeSeconds = seconds(w.Runtime)
		}
	}
}

// Forecast is the runtime and wait forecast of in, the one top shows: for
// the sizer's deadlines. It fails when the history of finished allocations
// could not be read, since every run time would then rest on less than
// Nomad knows.
func Forecast(in *Input) (sizing.Forecasts, error) {
	if in.HistoryError != "" {
		return sizing.Forecasts{}, errors.New(in.HistoryError)
	}
	return sizing.Forecast(forecastInput(in, buildQueue(in)), in.Now), nil
}
