package controller

// Placements a relayout refused. The servers place on a node's devices as
// they last saw them: a GPU that the device plugin has begun to drain for
// a relayout looks whole and healthy to them until the node's next update
// (seconds), and the plugin refuses the Reserve of its instances. Nomad
// then fails the allocation like any other and places it again only as
// the job's reschedule policy allows: a batch job's default is one
// attempt, so a job refused twice (or once after a failure of its own) was
// never placed again, and any job waited out its reschedule delay. The
// refusal is the cluster's doing, not the job's, so the leader asks Nomad
// to place such an allocation again: a forced reschedule (`nomad job eval
// -force-reschedule`), which Nomad grants at once whatever the attempts
// left, where the task group's reschedule policy is on at all. It asks
// once the servers stop offering the refused devices (the node's update
// showing the drain, seconds), or refusedWait after the failure: asked
// before, Nomad would place it on the same draining GPU again.

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/nomadview"
)

// NomadUnknownDevice is how Nomad's client words a Reserve of a device
// group its fingerprint lacks (a relayout removed the group since
// the servers placed on it): client/devicemanager's UnknownDeviceError,
// `operation on unknown device(s) "vendor/type/name" …`. It is the one
// place the controller matches Nomad's own English, as Nomad gives no
// structured reason; e2e TestLayoutsNomadRefusesAGoneGroup keeps it
// true against a real agent.
const NomadUnknownDevice = "operation on unknown device"

// refusedWait bounds how long a refused allocation waits for the servers
// to stop offering its devices: a node update takes seconds, and a GPU
// whose relayout failed offers its old instances again for good.
const refusedWait = 30 * time.Second

// RefusedByRelayout says whether an allocation's task events tell that
// its devices' Reserve was refused for a relayout: the device plugin's
// refusal while the GPU drains, or its or Nomad's of an instance gone
// since the placement.
func RefusedByRelayout(states map[string]*api.TaskState) bool {
	for _, ts := range states {
		if ts == nil {
			continue
		}
		for _, e := range ts.Events {
			if e == nil {
				continue
			}
			msg := e.DisplayMessage + " " + e.Message
			if strings.Contains(msg, contract.ReserveRefusedRelayout) || strings.Contains(msg, contract.ReserveRefusedGone) || strings.Contains(msg, NomadUnknownDevice) {
				return true
			}
		}
	}
	return false
}

// refusedToReplace are the allocations a relayout refused that Nomad has
// not placed again (no next allocation) and nothing else replaced (no
// live allocation of the same name), of jobs not stopped, leaving out
// those in asked (already asked for) and those whose devices the servers
// still offer, for refusedWait after the failure; by job: one forced
// reschedule places all of a job's failed allocations.
func refusedToReplace(now time.Time, snap *nomadview.Snapshot, asked map[string]bool) map[JobKey][]*api.AllocationListStub {
	live := map[string]bool{}
	for _, a := range snap.Allocs {
		live[a.Namespace+"/"+a.JobID+"/"+a.Name] = true
	}
	out := map[JobKey][]*api.AllocationListStub{}
	for _, a := range snap.Finished {
		k := JobKey{Namespace: a.Namespace, ID: a.JobID}
		switch {
		case asked[a.ID], a.ClientStatus != api.AllocClientStatusFailed, a.NextAllocation != "",
			a.DesiredStatus != api.AllocDesiredStatusRun, live[a.Namespace+"/"+a.JobID+"/"+a.Name]:
			continue
		}
		if j := snap.Job(k); j == nil || j.Stop || !RefusedByRelayout(a.TaskStates) {
			continue
		}
		if now.Sub(nomadview.FinishedAt(a)) < refusedWait && snap.StillOffered(a) {
			continue
		}
		out[k] = append(out[k], a)
	}
	return out
}

// replaceRefused asks Nomad to place again each allocation a relayout
// refused that it would not place now itself, once per allocation.
func (c *Controller) replaceRefused(ctx context.Context, now time.Time, snap *nomadview.Snapshot) {
	if c.replaced == nil {
		c.replaced = map[string]bool{}
	}
	finished := make(map[string]bool, len(snap.Finished))
	for _, a := range snap.Finished {
		finished[a.ID] = true
	}
	for id := range c.replaced {
		if !finished[id] {
			delete(c.replaced, id) // out of the read model's window: never listed again
		}
	}
	for k, allocs := range refusedToReplace(now, snap, c.replaced) {
		opts := api.EvalOptions{ForceReschedule: true}
		_, _, err := c.api.Jobs().EvaluateWithOpts(k.ID, opts, (&api.WriteOptions{Namespace: k.Namespace}).WithContext(ctx))
		if code := nomadview.StatusCode(err); err != nil && (code < 400 || code >= 500) {
			if ctx.Err() == nil {
				c.log.Warn("allocations a relayout refused were not placed again; trying on the next tick", "namespace", k.Namespace, "job", k.ID, "error", err)
			}
			continue
		}
		var what []string
		for _, a := range allocs {
			c.replaced[a.ID] = true
			what = append(what, fmt.Sprintf("alloc %s (%s) on %s", short(a.ID), a.Name, a.NodeName))
		}
		if err != nil { // refused for good (no permission in the namespace, the job gone): asked once
			c.log.Warn("allocations a relayout refused were not placed again: Nomad refused the forced reschedule", "namespace", k.Namespace, "job", k.ID, "allocs", strings.Join(what, ", "), "error", err)
			continue
		}
		c.decided(Decision{"replaced", k, strings.Join(what, ", ") + ": Reserve refused for a relayout; asked Nomad to place it again (a forced reschedule; a task group whose reschedule policy is off stays failed)"})
	}
}
