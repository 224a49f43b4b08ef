package controller

import (
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/contract"
)

// MetaMinRuntime is the job meta key that sets a job's minimum runtime (a
// duration, "20m"), over its node pool's.
const MetaMinRuntime = "nomad_gpu_min_runtime"

const minRuntimeKey = "min-runtime/"

// MinRuntime keeps a just-started allocation from being preempted at all
// for a while (Slurm's PreemptExemptTime, KAI's min-runtime): a job
// preempted minutes after it started has paid its start (scheduling,
// loading data, warming caches) for nothing. Nomad has no such knob; the
// controller raises the job in place, while an allocation of it is younger
// than its minimum, to Priority, which nothing can preempt when it is
// Nomad's highest (job_max_priority, 100 by default): Nomad preempts only
// work at least 10 below the job it places.
type MinRuntime struct {
	// ByPool is the minimum runtime of allocations on a node pool's nodes.
	ByPool map[string]time.Duration
	// Priority is what an exempt job is raised to.
	Priority int
	// warned are the jobs whose bad meta was logged, with the value, so
	// it is logged once per value (the leader's loop alone touches it).
	warned map[JobKey]string
}

// Step raises the jobs with an allocation inside its minimum runtime, and
// ends the raises of allocations past it or not running.
func (m *MinRuntime) Step(now time.Time, v View, l *Ledger) []Decision {
	var out []Decision
	running := map[string]bool{}
	for _, a := range v.Snap.Allocs {
		if a.ClientStatus != api.AllocClientStatusRunning || a.DesiredStatus != api.AllocDesiredStatusRun {
			continue
		}
		running[a.ID] = true
		k := JobKey{Namespace: a.Namespace, ID: a.JobID}
		job := v.Jobs[k]
		started := startedAt(a)
		minimum, err := m.minimum(v, job, a)
		if err != nil && m.warned[k] != job.Meta[MetaMinRuntime] {
			if m.warned == nil {
				m.warned = map[JobKey]string{}
			}
			m.warned[k] = job.Meta[MetaMinRuntime]
			out = append(out, Decision{"min-runtime-skipped", k, err.Error()})
		}
		if job == nil || job.Meta[contract.MetaReservationFor] != "" || started.IsZero() || minimum <= 0 || !now.Before(started.Add(minimum)) {
			continue
		}
		key := minRuntimeKey + a.ID
		if _, ok := l.Peek(k).Get(key); ok {
			continue
		}
		r := Raise{Key: key, Priority: m.Priority, Since: started, Until: started.Add(minimum),
			Reason: fmt.Sprintf("alloc %s started %s ago; not preemptible for its minimum runtime %s", short(a.ID), now.Sub(started).Round(time.Second), minimum)}
		l.Edit(k, job.Priority).Begin(r)
		out = append(out, Decision{"min-runtime", k, r.Reason + " (until " + r.Until.UTC().Format(time.RFC3339) + ")"})
	}
	for _, k := range l.Keys() {
		for _, r := range l.Peek(k).Raises {
			id, ok := strings.CutPrefix(r.Key, minRuntimeKey)
			if !ok || (running[id] && now.Before(r.Until)) {
				continue
			}
			l.Edit(k, l.Peek(k).Own).End(r.Key)
			why := "its minimum runtime is over"
			if !running[id] {
				why = "it no longer runs"
			}
			out = append(out, Decision{"min-runtime-over", k, fmt.Sprintf("alloc %s: %s", short(id), why)})
		}
	}
	return out
}

// minimum is the allocation's minimum runtime: its job's meta, else its
// node pool's. A meta value that is not a duration is an error (and no
// minimum).
func (m *MinRuntime) minimum(v View, job *api.JobListStub, a *api.AllocationListStub) (time.Duration, error) {
	if job != nil {
		if s, ok := job.Meta[MetaMinRuntime]; ok {
			d, err := time.ParseDuration(s)
			if err != nil || d < 0 {
				return 0, fmt.Errorf("meta %s: %q is not a duration such as \"20m\"; ignored", MetaMinRuntime, s)
			}
			return d, nil
		}
	}
	if n := v.Snap.Node(a.NodeID); n != nil {
		return m.ByPool[n.NodePool], nil
	}
	return 0, nil
}

// startedAt is when the allocation's first task started; zero if none has.
func startedAt(a *api.AllocationListStub) time.Time {
	var first time.Time
	for _, ts := range a.TaskStates {
		if ts != nil && !ts.StartedAt.IsZero() && (first.IsZero() || ts.StartedAt.Before(first)) {
			first = ts.StartedAt
		}
	}
	return first
}
