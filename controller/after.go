package controller

import (
	"context"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/controller/queues"
	"github.com/nomad-gpu/nomad-gpu/nomadview"
)

// dependency is why the held job k's meta nomad_gpu_after holds it, ""
// when nothing does (docs/design/queues.md, rule 1); its error names a
// value that is not allowed. runs are the dependencies' runs read this
// tick (each is read once a tick).
func (g *Gangs) dependency(ctx context.Context, snap *nomadview.Snapshot, k JobKey, job *api.Job, runs map[queues.Dep]queues.DepRun, n gangNomad) (string, error) {
	v, ok := job.Meta[contract.MetaAfter]
	if !ok {
		return "", nil
	}
	deps, err := queues.ParseAfter(k.Namespace, k.ID, v)
	if err != nil {
		return "", err
	}
	return queues.HeldBy(deps, func(d queues.Dep) queues.DepRun {
		r, ok := runs[d]
		if !ok {
			r = g.depRun(ctx, snap, d, n)
			runs[d] = r
		}
		return r
	}), nil
}

// depRun is what dependency d's latest run is: the allocations created
// since its job was last written (registered again, or scaled), the
// newest of each rescheduling chain. A job stopped by hand failed; a job
// not dead, or dead with no allocation since, has not completed; one
// whose allocations cannot be read is taken as not completed this tick.
func (g *Gangs) depRun(ctx context.Context, snap *nomadview.Snapshot, d queues.Dep, n gangNomad) queues.DepRun {
	k := JobKey{Namespace: d.Namespace, ID: d.Job}
	stub := snap.Jobs[k]
	switch {
	case stub == nil:
		return queues.DepMissing
	case stub.Stop:
		return queues.DepFailed
	case stub.Status != "dead":
		return queues.DepUnfinished
	}
	allocs, err := n.allocations(ctx, k)
	if err != nil {
		g.log.Debug("dependency: its allocations cannot be read; tried on the next tick", "namespace", k.Namespace, "job", k.ID, "error", err)
		return queues.DepUnfinished
	}
	return latestRun(allocs, stub.JobModifyIndex)
}

// latestRun judges the allocations of a dead job's run since index.
func latestRun(allocs []*api.AllocationListStub, index uint64) queues.DepRun {
	seen := false
	for _, a := range allocs {
		if a.CreateIndex < index || a.NextAllocation != "" {
			continue
		}
		seen = true
		if a.ClientStatus != api.AllocClientStatusComplete || a.DesiredStatus != api.AllocDesiredStatusRun {
			return queues.DepFailed
		}
	}
	if !seen {
		return queues.DepUnfinished
	}
	return queues.DepComplete
}
