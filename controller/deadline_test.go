package controller

import (
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/controller/sizing"
	"github.com/nomad-gpu/nomad-gpu/nomadview"
)

// tick is one step of a module timeline: the job as the view shows it at
// an offset from t0 on a fake clock, what the modules decide, and the
// priority the ledger then wants.
type tick struct {
	at       time.Duration
	running  bool // else queued
	priority int  // the job's priority in the view
	kinds    []string
	want     int
}

// The deadline module and preemption protection acting on one job, each
// tick, on a fake clock: the job runs at the highest raise in force, a
// deadline raise climbs a tier per minute from where the job is, and each
// module ends only its own raise.
func TestDeadlineModuleWithProtection(t *testing.T) {
	protection := func(since, until time.Duration) Raise {
		return Raise{Key: preemptionKey + "a0", Priority: 60, Reason: "preempted by alloc b0", Since: t0.Add(since), Until: t0.Add(until)}
	}
	cases := []struct {
		name    string
		protect *Raise // in the ledger before the first tick
		ticks   []tick
	}{
		{"alone: climbs a tier a minute, ends when the job starts", nil, []tick{
			{0, false, 30, []string{"deadline-raised"}, 40},
			{30 * time.Second, false, 40, nil, 40},
			{time.Minute, false, 40, []string{"deadline-raised"}, 70},
			{2 * time.Minute, false, 70, nil, 70}, // 70 is the top tier
			{3 * time.Minute, true, 70, []string{"deadline-restored"}, 30},
			{4 * time.Minute, true, 30, nil, 30},
		}},
		{"raised above a protection in force, outlives it", ptrTo(protection(0, 150*time.Second)), []tick{
			{0, false, 60, []string{"deadline-raised"}, 70},
			{time.Minute, false, 70, nil, 70},
			{3 * time.Minute, false, 70, []string{"protection-over"}, 70},
			{4 * time.Minute, true, 70, []string{"deadline-restored"}, 30},
		}},
		{"a protection above the raise wins while in force", ptrTo(protection(30*time.Second, 3*time.Minute)), []tick{
			{0, false, 30, []string{"deadline-raised"}, 40},
			{30 * time.Second, false, 40, nil, 60},
			{90 * time.Second, true, 60, []string{"deadline-restored"}, 60},
			{3 * time.Minute, true, 60, []string{"protection-over"}, 30},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			k := JobKey{Namespace: "default", ID: "urgent"}
			l := NewLedger(nil)
			if c.protect != nil {
				l.Edit(k, 30).Begin(*c.protect)
			}
			p := Protector{Cooldown: 5 * time.Minute}
			d := Deadliner{Config: sizing.DeadlineConfig{Tiers: []int{70, 40}, MaxPriority: 90, Lead: 10 * time.Minute, RaiseEvery: time.Minute}}
			for _, tk := range c.ticks {
				now := t0.Add(tk.at)
				view := deadlineView(k, tk, t0.Add(5*time.Minute))
				var kinds []string
				for _, dec := range append(p.Step(now, view, l), d.Step(now, view, l)...) {
					kinds = append(kinds, dec.Kind)
				}
				if got := l.Peek(k).Want(now); !slices.Equal(kinds, tk.kinds) || got != tk.want {
					t.Fatalf("at %s: decided %v, wants %d; want %v and %d (%+v)", tk.at, kinds, got, tk.kinds, tk.want, l.Peek(k).Raises)
				}
			}
		})
	}
}

// deadlineView is a view holding the job as tk has it, due at deadline.
func deadlineView(k JobKey, tk tick, deadline time.Time) View {
	g := api.TaskGroupSummary{Queued: 1}
	if tk.running {
		g = api.TaskGroupSummary{Running: 1}
	}
	job := &api.JobListStub{ID: k.ID, Namespace: k.Namespace, Priority: tk.priority, Status: "pending",
		Meta:       map[string]string{sizing.MetaDeadline: deadline.Format(time.RFC3339)},
		JobSummary: &api.JobSummary{Summary: map[string]api.TaskGroupSummary{"g": g}}}
	return ViewOf(&nomadview.Snapshot{Jobs: map[JobKey]*api.JobListStub{k: job}})
}

func ptrTo[T any](v T) *T { return &v }
