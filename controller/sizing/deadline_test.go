package sizing

import (
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

func TestPlanDeadline(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	tiers := []int{70, 40}
	cases := []struct {
		name          string
		priority      int
		deadline      time.Time
		wait, runtime time.Duration
		max           int
		want          DeadlineStep
		reason        string
	}{
		{"none", 30, time.Time{}, time.Hour, time.Hour, 90, DeadlineStep{}, "no deadline"},
		{"in time", 30, now.Add(3 * time.Hour), time.Hour, time.Hour, 90, DeadlineStep{}, "in time"},
		{"late: next tier", 30, now.Add(90 * time.Minute), time.Hour, time.Hour, 90, DeadlineStep{Raise: true, Priority: 40}, "priority 30 → 40"},
		{"late from tier: next", 40, now.Add(90 * time.Minute), time.Hour, time.Hour, 90, DeadlineStep{Raise: true, Priority: 70}, "priority 40 → 70"},
		{"capped by max", 40, now.Add(90 * time.Minute), time.Hour, time.Hour, 60, DeadlineStep{}, "highest tier a deadline raise may give (60)"},
		{"top tier", 70, now.Add(90 * time.Minute), time.Hour, time.Hour, 100, DeadlineStep{}, "highest tier"},
		// The latest start is deadline − runtime = now + 1h: a predicted
		// start at it is on time, a second later is late.
		{"start exactly at the latest start", 30, now.Add(2 * time.Hour), time.Hour, time.Hour, 90, DeadlineStep{}, "predicted start 2026-12-01T13:00:00Z is in time for the latest start 2026-12-01T13:00:00Z"},
		{"start a second after the latest start", 30, now.Add(2 * time.Hour), time.Hour + time.Second, time.Hour, 90, DeadlineStep{Raise: true, Priority: 40}, "predicted start 2026-12-01T13:00:01Z misses the latest start 2026-12-01T13:00:00Z"},
		{"unknown runtime: deadline is the latest start", 30, now.Add(30 * time.Minute), time.Hour, 0, 90, DeadlineStep{Raise: true, Priority: 40}, "30 → 40"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := PlanDeadline(c.priority, c.deadline, now, c.wait, c.runtime, tiers, c.max)
			if got.Raise != c.want.Raise || got.Priority != c.want.Priority || !strings.Contains(got.Reason, c.reason) {
				t.Fatalf("got %+v, want %+v with %q", got, c.want, c.reason)
			}
		})
	}
}

func TestDeadlineDecide(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	cfg := DeadlineConfig{Tiers: []int{70, 40}, MaxPriority: 90, Lead: 10 * time.Minute, RaiseEvery: time.Minute}
	soon := now.Add(5 * time.Minute).Format(time.RFC3339)
	queued := DeadlineJob{Priority: 30, Deadline: soon, Queued: true}
	with := func(f func(*DeadlineJob)) DeadlineJob { j := queued; f(&j); return j }
	cases := []struct {
		name   string
		job    DeadlineJob
		wait   JobWait
		want   DeadlineAction
		prio   int
		reason string
	}{
		{"late with unknown wait: raised a tier", queued, JobWait{}, DeadlineRaise, 40, "wait unknown (what holds the slices has no history), taken as 10m0s"},
		{"late by its predicted wait", queued, JobWait{Wait: 20 * time.Minute, Known: true}, DeadlineRaise, 40, "wait predicted"},
		{"in time by its predicted wait", queued, JobWait{Wait: time.Minute, Known: true}, DeadlineKeep, 0, "in time"},
		{"raised a minute ago: the next tier", with(func(j *DeadlineJob) { j.Priority, j.RaisedAt = 40, now.Add(-time.Minute) }), JobWait{}, DeadlineRaise, 70, "40 → 70"},
		{"raised just now: not again yet", with(func(j *DeadlineJob) { j.Priority, j.RaisedAt = 40, now.Add(-30*time.Second) }), JobWait{}, DeadlineKeep, 0, "less than the 1m0s between raises"},
		{"raised and started: ended", with(func(j *DeadlineJob) { j.Started, j.RaisedAt = true, now.Add(-time.Hour) }), JobWait{}, DeadlineEnd, 0, "has started"},
		{"raised and stopped: ended", with(func(j *DeadlineJob) { j.Stopped, j.RaisedAt = true, now.Add(-time.Hour) }), JobWait{}, DeadlineEnd, 0, "is stopped"},
		{"started, never raised", with(func(j *DeadlineJob) { j.Started = true }), JobWait{}, DeadlineKeep, 0, ""},
		{"nothing queued", with(func(j *DeadlineJob) { j.Queued = false }), JobWait{}, DeadlineKeep, 0, ""},
		{"no deadline", with(func(j *DeadlineJob) { j.Deadline = "" }), JobWait{}, DeadlineKeep, 0, ""},
		{"a deadline that is no time", with(func(j *DeadlineJob) { j.Deadline = "tomorrow" }), JobWait{}, DeadlineKeep, 0, `"tomorrow" is not an RFC 3339 time`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := cfg.Decide(c.job, c.wait, now)
			if got.Action != c.want || got.Priority != c.prio || !strings.Contains(got.Reason, c.reason) {
				t.Fatalf("got %+v, want action %d priority %d with %q", got, c.want, c.prio, c.reason)
			}
		})
	}
}

func TestDeadlineJobOf(t *testing.T) {
	sum := func(g api.TaskGroupSummary) *api.JobSummary {
		return &api.JobSummary{Summary: map[string]api.TaskGroupSummary{"g": g}}
	}
	cases := []struct {
		name string
		stub *api.JobListStub
		want DeadlineJob
	}{
		{"queued", &api.JobListStub{Priority: 30, Meta: map[string]string{MetaDeadline: "x"}, JobSummary: sum(api.TaskGroupSummary{Queued: 1})}, DeadlineJob{Priority: 30, Deadline: "x", Queued: true}},
		{"running", &api.JobListStub{Priority: 30, JobSummary: sum(api.TaskGroupSummary{Running: 1})}, DeadlineJob{Priority: 30, Started: true}},
		{"ran once", &api.JobListStub{Priority: 30, Status: "dead", JobSummary: sum(api.TaskGroupSummary{Complete: 1})}, DeadlineJob{Priority: 30, Started: true, Stopped: true}},
		{"stopped", &api.JobListStub{Priority: 30, Stop: true}, DeadlineJob{Priority: 30, Stopped: true}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := DeadlineJobOf(c.stub, time.Time{}); got != c.want {
				t.Fatalf("got %+v, want %+v", got, c.want)
			}
		})
	}
}
