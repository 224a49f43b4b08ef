package sizing

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/controller/sizing/history"
	"github.com/nomad-gpu/nomad-gpu/controller/sizing/predict"
	"github.com/nomad-gpu/nomad-gpu/nomadview"
)

// SnapshotRuns are the run records (RunsOf) of the GPU tasks of the
// snapshot's allocations: pending and running, and finished within its
// watcher's window; each with its node's pool and its job.
func SnapshotRuns(snap *nomadview.Snapshot) []history.Run {
	pools := map[string]string{}
	for _, n := range snap.Nodes {
		if n != nil {
			pools[n.ID] = n.NodePool
		}
	}
	jobs := map[JobID]*api.JobListStub{}
	for k, j := range snap.Jobs {
		jobs[JobID{Namespace: k.Namespace, ID: k.ID}] = j
	}
	seen := map[string]bool{}
	var allocs []*api.AllocationListStub
	for _, a := range slices.Concat(snap.Allocs, snap.Finished) {
		if a != nil && !seen[a.ID] {
			seen[a.ID] = true
			allocs = append(allocs, a)
		}
	}
	return RunsOf(allocs, pools, jobs)
}

// ForecastOf is the runtime and wait forecast (Forecast) of a snapshot
// that holds nodes, allocations, finished allocations, jobs and blocked
// evaluations: the same figures top and the APM show, from the one read
// model.
func ForecastOf(snap *nomadview.Snapshot, now time.Time) Forecasts {
	in := ForecastInput{Runs: SnapshotRuns(snap), Free: FreeCapacity(snap.FreeSlices())}
	for _, g := range snap.QueuedGroups() {
		q := QueuedWork{Namespace: g.Namespace, Job: g.JobID, Group: g.Group, Task: g.GPUTask, Pool: g.Pool,
			Priority: g.Priority, Since: g.Since, Allocs: g.Count}
		for _, a := range g.Asks {
			q.Asks = append(q.Asks, Ask{Name: a.Device.String(), Count: a.Count})
		}
		in.Queued = append(in.Queued, q)
	}
	return Forecast(in, now)
}

// FreeCapacity is the free slices per node pool as the forecasts count
// them, per unit.
func FreeCapacity(free map[string]nomadview.FreeSlices) map[string]predict.Capacity {
	out := make(map[string]predict.Capacity, len(free))
	for pool, f := range free {
		c := predict.Capacity{}
		if f.GPUs > 0 {
			c[predict.Unit{Kind: contract.SliceGPU}] = f.GPUs
		}
		if f.MPS > 0 {
			c[predict.Unit{Kind: contract.SliceMPS}] = f.MPS
		}
		for _, p := range f.Profiles() {
			c[predict.Unit{Kind: contract.SliceMIG, Profile: p}] = f.MIG[p]
		}
		out[pool] = c
	}
	return out
}

// RunList is a RunSource over run records held in memory: the runs Nomad
// still remembers (SnapshotRuns), for a sizer that keeps no file.
type RunList []history.Run

// Runs are k's runs that had not finished before since, by Created, then
// AllocID.
func (l RunList) Runs(_ context.Context, k history.Key, since time.Time) ([]history.Run, error) {
	return l.filter(func(r history.Run) bool { return r.Key == k }, since), nil
}

// AllRuns are every task's runs that had not finished before since.
func (l RunList) AllRuns(_ context.Context, since time.Time) ([]history.Run, error) {
	return l.filter(func(history.Run) bool { return true }, since), nil
}

func (l RunList) filter(keep func(history.Run) bool, since time.Time) []history.Run {
	var out []history.Run
	for _, r := range l {
		if keep(r) && (r.Finished.IsZero() || !r.Finished.Before(since)) {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b history.Run) int {
		return cmp.Or(a.Created.Compare(b.Created), strings.Compare(a.AllocID, b.AllocID))
	})
	return out
}
