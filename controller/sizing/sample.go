package sizing

import (
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/controller/sizing/history"
)

// TaskDevices is one task of a running allocation and the GPU devices it
// was given.
type TaskDevices struct {
	Key     history.Key
	AllocID string
	NodeID  string
	Devices *api.AllocatedDeviceResource
}

// GPUTasks are the tasks of allocations (listed with resources=true) that
// hold NVIDIA GPUs, MIG instances or MPS shares.
func GPUTasks(allocs []*api.AllocationListStub) []TaskDevices {
	var out []TaskDevices
	for _, a := range allocs {
		if a.AllocatedResources == nil {
			continue
		}
		for task, res := range a.AllocatedResources.Tasks {
			for _, d := range res.Devices {
				if d == nil || d.Vendor != "nvidia" || len(d.DeviceIDs) == 0 {
					continue
				}
				switch d.Type {
				case history.SliceGPU, history.SliceMIG, history.SliceMPS:
					out = append(out, TaskDevices{Key: history.Key{Namespace: a.Namespace, Job: a.JobID, Group: a.TaskGroup, Task: task},
						AllocID: a.ID, NodeID: a.NodeID, Devices: d})
				}
			}
		}
	}
	return out
}

// SliceOf is the slice a task was given.
func (t TaskDevices) SliceOf() history.Slice {
	s := history.Slice{Kind: t.Devices.Type, Count: len(t.Devices.DeviceIDs)}
	if s.Kind == history.SliceMIG {
		s.Profile = t.Devices.Name
	}
	return s
}

// SampleTasks turns the node device stats (by node ID) into one sample per
// task: the mean over its devices of its utilisation of each (an MPS
// share's "MPS utilization", else the instance's "GPU utilization") and the
// sum of their memory used and limits. A task whose node's stats lack any
// of its devices' utilisation has no sample: a guess would teach the sizer
// a wrong size.
func SampleTasks(tasks []TaskDevices, stats map[string][]*api.DeviceGroupStats, now time.Time) []history.Sample {
	var out []history.Sample
	for _, t := range tasks {
		inst := instanceStats(stats[t.NodeID], t.Devices)
		utilName, memName := contract.StatGPUUtil, contract.StatMemUsed
		if t.Devices.Type == history.SliceMPS {
			utilName, memName = contract.StatShareUtil, contract.StatShareUsed
		}
		s := history.Sample{Key: t.Key, AllocID: t.AllocID, Time: now, Slice: t.SliceOf()}
		var sum float64
		ok := true
		for _, id := range t.Devices.DeviceIDs {
			ds := inst[id]
			if ds == nil || ds.Stats == nil {
				ok = false
				break
			}
			u, found := value(ds.Stats.Attributes[utilName])
			if !found {
				ok = false
				break
			}
			sum += u
			if m := ds.Stats.Attributes[memName]; m != nil && m.IntNumeratorVal != nil {
				s.MemBytes += uint64(max(0, *m.IntNumeratorVal)) << 20
				if m.IntDenominatorVal != nil {
					s.MemLimitBytes += uint64(max(0, *m.IntDenominatorVal)) << 20
				}
			}
		}
		if !ok {
			continue
		}
		s.UtilPct = min(100, sum/float64(len(t.Devices.DeviceIDs)))
		out = append(out, s)
	}
	return out
}

func instanceStats(groups []*api.DeviceGroupStats, d *api.AllocatedDeviceResource) map[string]*api.DeviceStats {
	for _, g := range groups {
		if g != nil && g.Vendor == d.Vendor && g.Type == d.Type && g.Name == d.Name {
			return g.InstanceStats
		}
	}
	return nil
}

func value(v *api.StatValue) (float64, bool) {
	switch {
	case v == nil:
		return 0, false
	case v.FloatNumeratorVal != nil:
		return *v.FloatNumeratorVal, true
	case v.IntNumeratorVal != nil:
		return float64(*v.IntNumeratorVal), true
	}
	return 0, false
}

// killedOverGPUMemory says e is the gpu driver's event of its GPU-memory
// watchdog killing the task (warn mode only warns): its details, not its
// message.
func killedOverGPUMemory(e *api.TaskEvent) bool {
	return e.Type == api.TaskDriverMessage && e.Details[contract.EventDetailAction] == contract.EventActionKill &&
		e.Details[contract.EventDetailLimitMiB] != ""
}

// RunOf is the run record of one GPU task of an allocation: its slice, its
// times and how it ended. Preempted: Nomad preempted the allocation; a
// failed task killed by the driver's GPU-memory enforcement is "killed";
// a complete one that Nomad killed (stopped, moved, drained) "stopped".
// Its job (nil when not known) gives its priority and, when submitted no
// later than the allocation was created, its submission: a version
// submitted after runs in a later allocation, not this one.
func RunOf(a *api.AllocationListStub, t TaskDevices, pool string, job *api.JobListStub) history.Run {
	r := history.Run{Key: t.Key, AllocID: a.ID, Name: a.Name, Slice: t.SliceOf(), Pool: pool,
		Created: time.Unix(0, a.CreateTime), Outcome: history.OutcomeRunning}
	if job != nil {
		r.Priority = job.Priority
		if job.SubmitTime > 0 && job.SubmitTime <= a.CreateTime {
			r.Submitted = time.Unix(0, job.SubmitTime)
		}
	}
	killing := false
	if st := a.TaskStates[t.Key.Task]; st != nil {
		r.Started, r.Finished = st.StartedAt, st.FinishedAt
		for _, e := range st.Events {
			switch {
			case e == nil:
			case killedOverGPUMemory(e):
				r.Outcome = history.OutcomeKilled
			case e.Type == api.TaskKilling:
				killing = true
			case e.Type == api.TaskStarted:
				killing = false // a restart's kill: its last run ended by itself, or not
			}
		}
	}
	switch {
	case a.PreemptedByAllocation != "":
		r.Outcome = history.OutcomePreempted
	case r.Outcome == history.OutcomeKilled:
	case a.ClientStatus == api.AllocClientStatusComplete && killing:
		// Nomad's task runner kills a task it stops ("Killing"); one that
		// ends by itself has no such event.
		r.Outcome = history.OutcomeStopped
	case a.ClientStatus == api.AllocClientStatusComplete:
		r.Outcome = history.OutcomeComplete
	case a.ClientStatus == api.AllocClientStatusFailed:
		r.Outcome = history.OutcomeFailed
	case a.ClientStatus == api.AllocClientStatusLost:
		r.Outcome = history.OutcomeLost
	}
	return r
}
