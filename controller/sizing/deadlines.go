package sizing

import (
	"fmt"
	"time"

	"github.com/hashicorp/nomad/api"
)

// DeadlineConfig is how job deadlines (job meta nomad_gpu_deadline) are
// served: earliest-deadline-first on top of Nomad's priority scheduler,
// one tier at a time.
type DeadlineConfig struct {
	// Tiers are the priority tiers' lower bounds (as the APM's
	// priority_tiers, e.g. 70, 40): a raise goes to the next one up.
	Tiers []int
	// MaxPriority is the highest priority a deadline raise gives.
	MaxPriority int
	// Lead stands in for a queued job's wait when it cannot be predicted
	// (no history of what holds the GPUs): such a job is taken to start
	// no sooner than Lead from now.
	Lead time.Duration
	// RaiseEvery is the least time between two raises of one job, so the
	// scheduler acts on one (preempting, placing) before the next.
	RaiseEvery time.Duration
}

// DefaultDeadlines are the defaults of the controller's deadline module.
var DefaultDeadlines = DeadlineConfig{Tiers: []int{70, 40}, MaxPriority: 90, Lead: 10 * time.Minute, RaiseEvery: time.Minute}

// DeadlineJob is what the deadline rule reads of one job.
type DeadlineJob struct {
	// Priority is the job's priority now, raises included.
	Priority int
	// Deadline is its meta nomad_gpu_deadline; "" when it has none.
	Deadline string
	// Queued: some of its allocations wait to be placed. Started: one
	// of its allocations runs or has run. Stopped: it is stopped or dead.
	Queued, Started, Stopped bool
	// RaisedAt is when its deadline raise was last set; zero when the job
	// has none.
	RaisedAt time.Time
}

// DeadlineJobOf reads a job as the deadline rule does; raisedAt is when
// its deadline raise was last set (zero: none). A job has started when an
// allocation of it runs or has completed (its summary says so, however
// long ago), so a job placed once is never raised again.
func DeadlineJobOf(j *api.JobListStub, raisedAt time.Time) DeadlineJob {
	d := DeadlineJob{Priority: j.Priority, Deadline: j.Meta[MetaDeadline], Stopped: j.Stop || j.Status == "dead", RaisedAt: raisedAt}
	if j.JobSummary != nil {
		for _, g := range j.JobSummary.Summary {
			d.Queued = d.Queued || g.Queued > 0
			d.Started = d.Started || g.Running > 0 || g.Complete > 0
		}
	}
	return d
}

// JobWait is a queued job's predicted wait and run time; not Known when
// not predicted.
type JobWait struct {
	Wait, Runtime time.Duration
	Known         bool
}

// DeadlineAction is what the deadline rule does to a job's raise.
type DeadlineAction int

const (
	DeadlineKeep  DeadlineAction = iota // nothing changes
	DeadlineRaise                       // raise the job to Priority
	DeadlineEnd                         // end its raise: its own priority comes back
)

// DeadlineDecision is the rule's answer for one job.
type DeadlineDecision struct {
	Action   DeadlineAction
	Priority int    // with DeadlineRaise
	Reason   string // why, for people
}

// Decide is the deadline rule for one job at now: a raised job that has
// started or stopped loses its raise; a queued job that would miss its
// deadline (PlanDeadline) is raised one tier, at most once per RaiseEvery.
func (c DeadlineConfig) Decide(j DeadlineJob, w JobWait, now time.Time) DeadlineDecision {
	raised := !j.RaisedAt.IsZero()
	switch {
	case raised && j.Started:
		return DeadlineDecision{Action: DeadlineEnd, Reason: "the job has started: the priority it had before its deadline raises comes back"}
	case raised && j.Stopped:
		return DeadlineDecision{Action: DeadlineEnd, Reason: "the job is stopped: its deadline raise ends"}
	case j.Deadline == "" || j.Started || j.Stopped || !j.Queued:
		return DeadlineDecision{}
	case raised && now.Sub(j.RaisedAt) < c.RaiseEvery:
		return DeadlineDecision{Reason: fmt.Sprintf("raised %s ago, less than the %s between raises", now.Sub(j.RaisedAt).Round(time.Second), c.RaiseEvery)}
	}
	deadline, err := time.Parse(time.RFC3339, j.Deadline)
	if err != nil {
		return DeadlineDecision{Reason: fmt.Sprintf("meta %s %q is not an RFC 3339 time: ignored", MetaDeadline, j.Deadline)}
	}
	basis := "predicted"
	if !w.Known {
		w.Wait, basis = c.Lead, fmt.Sprintf("unknown (what holds the slices has no history), taken as %s", c.Lead)
	}
	step := PlanDeadline(j.Priority, deadline, now, w.Wait, w.Runtime, c.Tiers, c.MaxPriority)
	if !step.Raise {
		return DeadlineDecision{Reason: step.Reason}
	}
	return DeadlineDecision{Action: DeadlineRaise, Priority: step.Priority, Reason: step.Reason + "; wait " + basis}
}

// JobWaits are the predicted waits and run times of the queued jobs of a
// forecast: of each job, the longest of its groups'.
func JobWaits(f Forecasts) map[JobID]JobWait {
	out := map[JobID]JobWait{}
	for _, q := range f.Queued {
		if !q.Wait.Known {
			continue
		}
		k := JobID{Namespace: q.Namespace, ID: q.Job}
		w := out[k]
		w.Known = true
		w.Wait = max(w.Wait, q.Wait.Duration())
		if q.Runtime.Known {
			w.Runtime = max(w.Runtime, q.Runtime.Duration())
		}
		out[k] = w
	}
	return out
}
