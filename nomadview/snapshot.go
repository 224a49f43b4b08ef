package nomadview

import (
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/contract"
)

// JobKey names a job in a namespace.
type JobKey struct{ Namespace, ID string }

// Snapshot is the cluster as the watches last listed it. It is never
// changed once made: a later change in the cluster makes a new Snapshot.
// Its API objects are shared between snapshots and must not be mutated by
// anyone (see the package doc); its slices and maps are its own.
type Snapshot struct {
	// Taken is when the snapshot was made.
	Taken time.Time
	// Nodes are every node, of any status, listed with resources.
	Nodes []*api.NodeListStub
	// Pools are the node pools (nil when not watched).
	Pools []*api.NodePool
	// Allocs are the allocations whose client status is pending or
	// running, listed with resources: the ones holding devices. Each
	// carries DesiredStatus, DesiredDescription, PreemptedByAllocation,
	// PreemptedAllocations, ClientStatus, TaskStates (with start
	// times) and JobType, but no JobVersion (zero: the event stream that
	// keeps them does not carry it).
	Allocs []*api.AllocationListStub
	// Finished are terminal allocations that hold devices and finished
	// within the watcher's FinishedWindow, newest first (nil when not
	// watched).
	Finished []*api.AllocationListStub
	// Blocked are the evaluations whose status is blocked and that failed
	// to place some task group.
	Blocked []*api.Evaluation
	// Jobs are every job with its Priority, Meta, Stop and JobSummary
	// (the summary's ModifyIndex is what queuedCount compares).
	Jobs map[JobKey]*api.JobListStub
	// Specs are the full specs of the jobs of Blocked, at their newest
	// version (a job gone since is missing).
	Specs map[JobKey]*api.Job
	// Gangs are the full specs of the live gang jobs of Jobs (IsGang),
	// at their listed version.
	Gangs map[JobKey]*api.Job
}

// Job is the listed job of key, nil when there is none.
func (s *Snapshot) Job(k JobKey) *api.JobListStub { return s.Jobs[k] }

// Summary is the job summary of key, nil when the job is not listed.
func (s *Snapshot) Summary(k JobKey) *api.JobSummary {
	if j := s.Jobs[k]; j != nil {
		return j.JobSummary
	}
	return nil
}

// Node is the node of id, nil when not listed.
func (s *Snapshot) Node(id string) *api.NodeListStub {
	for _, n := range s.Nodes {
		if n != nil && n.ID == id {
			return n
		}
	}
	return nil
}

// nodeIndex maps node ID → node.
func (s *Snapshot) nodeIndex() map[string]*api.NodeListStub {
	m := make(map[string]*api.NodeListStub, len(s.Nodes))
	for _, n := range s.Nodes {
		if n != nil {
			m[n.ID] = n
		}
	}
	return m
}

// Schedulable says whether new work can be placed on a node: ready,
// eligible and not draining.
func Schedulable(n *api.NodeListStub) bool {
	return n.Status == api.NodeStatusReady && n.SchedulingEligibility == api.NodeSchedulingEligible && !n.Drain
}

// EmptiedForRemoval says the controller emptied n for removal: it is
// ineligible, and its last drain carries contract.DrainMetaScaleIn (a
// drain since, such as the autoscaler's own, replaces the mark).
func EmptiedForRemoval(n *api.NodeListStub) bool {
	return n.SchedulingEligibility == api.NodeSchedulingIneligible && n.LastDrain != nil &&
		n.LastDrain.Meta[contract.DrainMetaScaleIn] != ""
}

// WorkOn is the pending or running allocations on a node that are work
// (IsWork).
func (s *Snapshot) WorkOn(nodeID string) []*api.AllocationListStub {
	var out []*api.AllocationListStub
	for _, a := range s.Allocs {
		if a != nil && a.NodeID == nodeID && IsWork(a) {
			out = append(out, a)
		}
	}
	return out
}

// IsWork says whether an allocation is not a system job's: a drain that
// ignores system jobs leaves them, and a node running only those is
// empty to the autoscaler's empty_ignore_system.
func IsWork(a *api.AllocationListStub) bool {
	return a.JobType != api.JobTypeSystem && a.JobType != api.JobTypeSysbatch
}
