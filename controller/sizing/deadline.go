package sizing

import (
	"fmt"
	"slices"
	"time"
)

// DeadlineStep is what the deadline rule does to a queued job's priority for its
// deadline (meta nomad_gpu_deadline, the time by which it should be done).
type DeadlineStep struct {
	Raise    bool
	Priority int    // the new priority when Raise
	Reason   string // why, or why not
}

// PlanDeadline applies earliest-deadline-first on top of Nomad's priority
// scheduler, one tier at a time: a queued job whose predicted start (now +
// predicted wait) is later than its latest start (deadline − predicted
// runtime; the deadline itself when the runtime is not known) is raised to
// the lower bound of the next tier above its priority (tiers as the APM's
// priority_tiers: decreasing lower bounds, e.g. 70, 40), never above
// maxPriority. The caller records the original priority, to restore it once
// the job runs.
func PlanDeadline(priority int, deadline, now time.Time, wait, runtime time.Duration, tiers []int, maxPriority int) DeadlineStep {
	if deadline.IsZero() {
		return DeadlineStep{Reason: "no deadline"}
	}
	latest := deadline.Add(-runtime)
	start := now.Add(wait)
	if !start.After(latest) {
		return DeadlineStep{Reason: fmt.Sprintf("predicted start %s is in time for the latest start %s", start.UTC().Format(time.RFC3339), latest.UTC().Format(time.RFC3339))}
	}
	up := slices.Clone(tiers)
	slices.Sort(up)
	for _, t := range up {
		if t <= priority {
			continue
		}
		if t > maxPriority {
			break
		}
		return DeadlineStep{Raise: true, Priority: t, Reason: fmt.Sprintf("predicted start %s misses the latest start %s (deadline %s less predicted runtime %s): priority %d → %d",
			start.UTC().Format(time.RFC3339), latest.UTC().Format(time.RFC3339), deadline.UTC().Format(time.RFC3339), runtime.Round(time.Second), priority, t)}
	}
	return DeadlineStep{Reason: fmt.Sprintf("predicted start %s misses the latest start %s, but priority %d is at the highest tier a deadline raise may give (%d)",
		start.UTC().Format(time.RFC3339), latest.UTC().Format(time.RFC3339), priority, maxPriority)}
}
