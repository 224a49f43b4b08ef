package controller

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/nomadview"
)

// JobKey names a job.
type JobKey = nomadview.JobKey

// View is what the modules read on one tick: the one snapshot of the
// cluster, with its allocations indexed by ID.
type View struct {
	Snap *nomadview.Snapshot
	// Allocs are the snapshot's live and recently finished allocations,
	// by ID: a preempted allocation is finished within seconds.
	Allocs map[string]*api.AllocationListStub
	// Jobs are the snapshot's jobs.
	Jobs map[JobKey]*api.JobListStub
}

// ViewOf indexes a snapshot for the modules.
func ViewOf(snap *nomadview.Snapshot) View {
	v := View{Snap: snap, Jobs: snap.Jobs, Allocs: make(map[string]*api.AllocationListStub, len(snap.Allocs)+len(snap.Finished))}
	for _, list := range [][]*api.AllocationListStub{snap.Finished, snap.Allocs} {
		for _, a := range list {
			v.Allocs[a.ID] = a
		}
	}
	return v
}

// Decision is one thing a module decided, logged with its reason and
// counted by kind.
type Decision struct {
	Kind   string // "protection-pending", "protected", "protection-dropped", "protection-over", "deadline-raised", "deadline-restored", "resized", "raised", "restored", "hand-change", "moved", "replaced", "gang-admitted", "gang-waiting", "gang-invalid", "gang-rolled-back", "gang-requeued", "reserved", "reservation-raised", "backfilled", "reservation-ended", "reservation-expired", "reclaimed"
	Job    JobKey
	Reason string
}

const preemptionKey = "preemption/"

// Protector is preemption protection (see the package comment).
type Protector struct {
	// Cooldown is how long a resumed job is protected.
	Cooldown time.Duration
}

// Step records new preemptions, protects jobs whose replacement runs,
// drops protections whose job was preempted anyway, and ends those over.
func (p *Protector) Step(now time.Time, v View, l *Ledger) []Decision {
	var out []Decision
	for _, a := range sortedAllocs(v.Allocs) {
		if a.PreemptedByAllocation != "" {
			out = append(out, p.preempted(v, l, a)...)
		}
	}
	for _, k := range l.Keys() {
		out = append(out, p.advance(now, v, l, k)...)
	}
	return out
}

// preempted records the preemption of a: a protection that waits for the
// job's replacement to run; and drops the protection a was running under,
// as it did not protect it.
func (p *Protector) preempted(v View, l *Ledger, a *api.AllocationListStub) []Decision {
	k := JobKey{Namespace: a.Namespace, ID: a.JobID}
	job := v.Jobs[k]
	if job == nil || job.Meta[contract.MetaReservationFor] != "" || slices.Contains(l.Peek(k).Handled, a.ID) {
		return nil // a reservation's placeholder is preempted freely
	}
	by := v.Allocs[a.PreemptedByAllocation]
	var byJob *api.JobListStub
	if by != nil {
		byJob = v.Jobs[JobKey{Namespace: by.Namespace, ID: by.JobID}]
	}
	if byJob == nil {
		// The lists are watched apart: the finished allocations may show
		// the preempted one before the live ones show its preemptor, and
		// the allocations a job the jobs list does not show yet. Looked
		// at again on the next tick (for good only where the preemptor's
		// job was purged meanwhile).
		return nil
	}
	e := l.Edit(k, job.Priority)
	e.Handled = append(e.Handled, a.ID)
	var out []Decision
	for _, r := range slices.Clone(e.Raises) {
		if strings.HasPrefix(r.Key, preemptionKey) {
			e.End(r.Key)
			out = append(out, Decision{"protection-dropped", k, fmt.Sprintf("alloc %s was preempted anyway at priority %d; its replacement waits at its own %d", short(a.ID), r.Priority, e.Own)})
		}
	}
	e.Begin(Raise{Key: preemptionKey + a.ID, Priority: byJob.Priority, AllocName: a.Name, After: a.CreateIndex,
		Reason: fmt.Sprintf("preempted by alloc %s (job %s, priority %d)", short(by.ID), by.JobID, byJob.Priority)})
	return append(out, Decision{"protection-pending", k, fmt.Sprintf("alloc %s preempted by alloc %s of job %s at priority %d; protected once its replacement runs", short(a.ID), short(by.ID), by.JobID, byJob.Priority)})
}

// advance moves one job's protections on: waiting ones start when the
// replacement runs, ones over end, and ones whose job is gone go.
func (p *Protector) advance(now time.Time, v View, l *Ledger, k JobKey) []Decision {
	cur := l.Peek(k)
	job := v.Jobs[k]
	var out []Decision
	for _, r := range cur.Raises {
		if !strings.HasPrefix(r.Key, preemptionKey) {
			continue
		}
		switch {
		case job == nil || job.Stop:
			// Not job.Status: a batch job whose only allocation was just
			// evicted reads "dead" until its replacement is placed.
			l.Edit(k, cur.Own).End(r.Key)
			out = append(out, Decision{"protection-over", k, "the job is stopped or gone"})
		case r.Since.IsZero():
			if rep := replacement(v, k, r); rep != nil {
				r.Since, r.Until = now, now.Add(p.Cooldown)
				l.Edit(k, job.Priority).Begin(r)
				out = append(out, Decision{"protected", k, fmt.Sprintf("replacement alloc %s runs: priority %d (%s) until %s", short(rep.ID), r.Priority, r.Reason, r.Until.UTC().Format(time.RFC3339))})
			}
		case !now.Before(r.Until):
			l.Edit(k, job.Priority).End(r.Key)
			out = append(out, Decision{"protection-over", k, fmt.Sprintf("cooldown over since %s", r.Until.UTC().Format(time.RFC3339))})
		}
	}
	if e := l.Peek(k); len(e.Handled) > 0 {
		kept := slices.DeleteFunc(slices.Clone(e.Handled), func(id string) bool { return v.Allocs[id] == nil })
		if len(kept) != len(e.Handled) {
			l.Edit(k, e.Own).Handled = kept
		}
	}
	return out
}

// replacement is the running allocation that took over from the one
// whose preemption r protects: same job and name, created after it.
func replacement(v View, k JobKey, r Raise) *api.AllocationListStub {
	for _, a := range v.Snap.Allocs {
		if a.Namespace != k.Namespace || a.JobID != k.ID || a.Name != r.AllocName || a.CreateIndex <= r.After {
			continue
		}
		if a.ClientStatus == api.AllocClientStatusRunning && a.DesiredStatus == api.AllocDesiredStatusRun {
			return a
		}
	}
	return nil
}

func sortedAllocs(m map[string]*api.AllocationListStub) []*api.AllocationListStub {
	out := make([]*api.AllocationListStub, 0, len(m))
	for _, a := range m {
		out = append(out, a)
	}
	slices.SortFunc(out, func(a, b *api.AllocationListStub) int { return cmp.Compare(a.CreateIndex, b.CreateIndex) })
	return out
}

func short(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}
