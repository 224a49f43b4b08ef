package nomadview

import "github.com/nomad-gpu/nomad-gpu/contract"

// FreeRule is the one rule for free GPU capacity, so that no two readers
// of the cluster disagree on it: an instance is free when it is healthy
// and no pending or running allocation holds it, on a node new work can
// be placed on (Schedulable). A GPU being laid out anew offers no
// instance while its plugin drains it; whether it counts is the rule's
// one variant, CountRelaying, chosen by what a reader asks. The queue's
// forecasts and top count what Nomad can place on now (FreeSlices); the
// autoscaler's device=any figures count the capacity the controller is
// already laying out for the queue, which a node added for it would come
// too late to serve.
type FreeRule struct {
	// CountRelaying counts each GPU that is free but offers no instance
	// (Relaying) as one free whole GPU.
	CountRelaying bool
}

// Free says whether one instance is free capacity.
func (FreeRule) Free(healthy, held bool) bool { return healthy && !held }

// Relaying is the free whole GPUs the rule adds to a node's free
// instances for its relaying GPUs: all of them with CountRelaying, else
// none.
func (r FreeRule) Relaying(relaying int) int {
	if r.CountRelaying {
		return relaying
	}
	return 0
}

// Relaying says whether a GPU, by its layout group's state, current
// layout and fault ("" while healthy), is free but offers no instance:
// its plugin is switching it to another layout (draining: no allocation
// holds it, its instances are unhealthy), or it is in MIG mode with no
// instance ("mig:"). The controller lays it out for the queue, unless it
// has failed.
func Relaying(state contract.LayoutState, current, fault string) bool {
	return fault == "" && (state == contract.LayoutDraining || state != contract.LayoutError && current == "mig:")
}
