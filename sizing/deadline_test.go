package sizing

import (
	"strings"
	"testing"
	"time"
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
		{"capped by max", 40, now.Add(90 * time.Minute), time.Hour, time.Hour, 60, DeadlineStep{}, "highest tier the sizer may give (60)"},
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
