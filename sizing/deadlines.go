package sizing

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/sizing/history"
)

// DeadlineConfig is how the sizer serves job deadlines (job meta
// nomad_gpu_deadline): earliest-deadline-first on top of Nomad's priority
// scheduler, one tier at a time.
type DeadlineConfig struct {
	// Tiers are the priority tiers' lower bounds (as the APM's
	// priority_tiers, e.g. 70, 40): a raise goes to the next one up.
	Tiers []int
	// MaxPriority is the highest priority the sizer gives.
	MaxPriority int
	// Lead stands in for a queued job's wait when it cannot be predicted
	// (no history of what holds the GPUs): such a job is taken to start
	// no sooner than Lead from now.
	Lead time.Duration
	// RaiseEvery is the least time between two raises of one job, so the
	// scheduler acts on one (preempting, placing) before the next.
	RaiseEvery time.Duration
}

// DefaultDeadlines are the sizer's defaults.
var DefaultDeadlines = DeadlineConfig{Tiers: []int{70, 40}, MaxPriority: 90, Lead: 10 * time.Minute, RaiseEvery: time.Minute}

// DeadlineChange is one priority change a Step made for a deadline.
type DeadlineChange struct {
	Namespace, Job string
	From, To       int
	Restore        bool // back to the priority the job had before its raises
	Reason         string
}

// queuedWait is the predicted wait and run time of a queued job, unknown
// (false) when not predicted.
type queuedWait func(ns, job string) (wait, runtime time.Duration, known bool)

// stepDeadlines raises the priority of queued jobs that would miss their
// deadline, and restores that of raised jobs once they run or end. started
// holds the jobs with an allocation that is running or has run.
func (s *Sizer) stepDeadlines(ctx context.Context, jobs []*api.JobListStub, started map[[2]string]bool, wait queuedWait, now time.Time) ([]DeadlineChange, error) {
	cfg := DefaultDeadlines
	if s.Deadlines != nil {
		cfg = *s.Deadlines
	}
	byID := map[[2]string]*api.JobListStub{}
	for _, j := range jobs {
		byID[[2]string{j.Namespace, j.ID}] = j
	}
	var out []DeadlineChange

	raises, err := s.Store.Raises(ctx)
	if err != nil {
		return nil, err
	}
	raised := map[[2]string]history.PriorityRaise{}
	for _, r := range raises {
		k := [2]string{r.Namespace, r.Job}
		j := byID[k]
		switch {
		case j == nil:
			// Purged: nothing to give back.
		case started[k] || j.Status == "dead" || j.Stop:
			if j.Priority == r.Raised {
				c := DeadlineChange{Namespace: r.Namespace, Job: r.Job, From: j.Priority, To: r.Original, Restore: true,
					Reason: fmt.Sprintf("the job has started; priority %d it had before its deadline raises is restored", r.Original)}
				if err := s.setPriority(ctx, r.Namespace, r.Job, r.Original); err != nil {
					s.Logger.Warn("cannot restore a job's priority; the next round tries again", "namespace", r.Namespace, "job", r.Job, "error", err)
					raised[k] = r
					continue
				}
				out = append(out, c)
			} else {
				s.Logger.Info("a raised job's priority was changed by someone else; left as it is", "namespace", r.Namespace, "job", r.Job, "priority", j.Priority, "raised", r.Raised)
			}
		default:
			raised[k] = r
			continue
		}
		if err := s.Store.DeleteRaise(ctx, r.Namespace, r.Job); err != nil {
			return out, err
		}
	}

	for _, j := range jobs {
		k := [2]string{j.Namespace, j.ID}
		v, ok := j.Meta[MetaDeadline]
		if !ok || started[k] || j.Stop || j.Status == "dead" || !hasQueued(j) {
			continue
		}
		deadline, err := time.Parse(time.RFC3339, v)
		if err != nil {
			s.Logger.Warn("job has a deadline that is not an RFC 3339 time; ignored", "namespace", j.Namespace, "job", j.ID, "meta", MetaDeadline, "value", v)
			continue
		}
		prev, wasRaised := raised[k]
		if wasRaised && now.Sub(prev.At) < cfg.RaiseEvery {
			continue
		}
		w, rt, known := wait(j.Namespace, j.ID)
		basis := "predicted"
		if !known {
			w, basis = cfg.Lead, fmt.Sprintf("unknown (what holds the slices has no history), taken as %s", cfg.Lead)
		}
		step := PlanDeadline(j.Priority, deadline, now, w, rt, cfg.Tiers, cfg.MaxPriority)
		if !step.Raise {
			continue
		}
		reason := step.Reason + "; wait " + basis
		if err := s.setPriority(ctx, j.Namespace, j.ID, step.Priority); err != nil {
			s.Logger.Warn("cannot raise a job's priority for its deadline; the next round tries again", "namespace", j.Namespace, "job", j.ID, "error", err)
			continue
		}
		rec := history.PriorityRaise{Namespace: j.Namespace, Job: j.ID, Original: j.Priority, Raised: step.Priority, At: now, Reason: reason}
		if wasRaised {
			rec.Original = prev.Original
		}
		if err := s.Store.PutRaise(ctx, rec); err != nil {
			return out, err
		}
		out = append(out, DeadlineChange{Namespace: j.Namespace, Job: j.ID, From: j.Priority, To: step.Priority, Reason: reason})
	}
	for _, c := range out {
		s.Logger.Info("deadline priority", "namespace", c.Namespace, "job", c.Job, "from", c.From, "to", c.To, "restore", c.Restore, "reason", c.Reason)
	}
	return out, nil
}

// hasQueued is whether some of the job's allocations wait to be placed.
func hasQueued(j *api.JobListStub) bool {
	if j.JobSummary == nil {
		return false
	}
	for _, g := range j.JobSummary.Summary {
		if g.Queued > 0 {
			return true
		}
	}
	return false
}

// setPriority registers the job with another priority and nothing else
// changed: Nomad updates its allocations in place (priority is no task
// setting), guarded by the job's modify index.
func (s *Sizer) setPriority(ctx context.Context, ns, id string, priority int) error {
	job, _, err := s.Nomad.Jobs().Info(id, (&api.QueryOptions{Namespace: ns}).WithContext(ctx))
	if err != nil {
		return err
	}
	job.Priority = &priority
	_, _, err = s.Nomad.Jobs().EnforceRegister(job, *job.JobModifyIndex, (&api.WriteOptions{Namespace: ns}).WithContext(ctx))
	return err
}
