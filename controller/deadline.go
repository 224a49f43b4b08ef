package controller

import (
	"fmt"
	"time"

	"github.com/nomad-gpu/nomad-gpu/controller/sizing"
)

// deadlineKey is the ledger raise of a job's deadline.
const deadlineKey = "deadline"

// Deadliner serves job deadlines (meta nomad_gpu_deadline) through the
// ledger: a queued job that would miss its deadline gets a raise one
// tier up (sizing.DeadlineConfig.Decide, the domain's rule), climbing a
// tier per RaiseEvery; the raise ends when the job starts or stops. The
// ledger composes it with any other raise: the job runs at the highest.
type Deadliner struct {
	Config sizing.DeadlineConfig
}

// Step decides every job's deadline raise at now. The waits are the
// forecast of the view's snapshot: from Nomad's own allocation history,
// the figures top shows.
func (d *Deadliner) Step(now time.Time, v View, l *Ledger) []Decision {
	waits := sizing.JobWaits(sizing.ForecastOf(v.Snap, now))
	var out []Decision
	for _, k := range sortedJobs(v) {
		job := v.Jobs[k]
		r, raised := l.Peek(k).Get(deadlineKey)
		dj := sizing.DeadlineJobOf(job, r.Since)
		if raised {
			// The view may not show the raise written yet.
			dj.Priority = max(dj.Priority, r.Priority)
		}
		dec := d.Config.Decide(dj, waits[sizing.JobID{Namespace: k.Namespace, ID: k.ID}], now)
		switch dec.Action {
		case sizing.DeadlineRaise:
			l.Edit(k, job.Priority).Begin(Raise{Key: deadlineKey, Priority: dec.Priority, Reason: dec.Reason, Since: now})
			out = append(out, Decision{"deadline-raised", k, fmt.Sprintf("to %d: %s", dec.Priority, dec.Reason)})
		case sizing.DeadlineEnd:
			l.Edit(k, job.Priority).End(deadlineKey)
			out = append(out, Decision{"deadline-restored", k, fmt.Sprintf("raise to %d ended: %s", r.Priority, dec.Reason)})
		}
	}
	return out
}

// sortedJobs are the view's jobs, in namespace and ID order.
func sortedJobs(v View) []JobKey {
	keys := make([]JobKey, 0, len(v.Jobs))
	for k := range v.Jobs {
		keys = append(keys, k)
	}
	sortJobKeys(keys)
	return keys
}
