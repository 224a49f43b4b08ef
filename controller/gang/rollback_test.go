package gang

import (
	"testing"
	"time"
)

func TestRollback(t *testing.T) {
	admitted := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	const bound = 30 * time.Second
	running := func(n string) Member { return Member{Name: n, Placed: true, Running: true} }
	pending := func(n string) Member { return Member{Name: n, Placed: true} }
	unplaced := func(n string) Member { return Member{Name: n} }
	cases := []struct {
		name    string
		members []Member
		after   time.Duration
		want    bool
		reason  string
		restart bool
	}{
		{"all running", []Member{running("w[0]"), running("w[1]")}, time.Hour, false, "", false},
		{"one unplaced, before the bound", []Member{running("w[0]"), unplaced("w[1]")}, bound - time.Nanosecond, false, "", false},
		{"one unplaced at the bound", []Member{running("w[0]"), unplaced("w[1]")}, bound, true,
			"1 of 2 members not running 30s after admission (w[1]) while w[0] holds GPUs", false},
		{"placed, not running, holds GPUs too", []Member{pending("w[0]"), unplaced("w[1]"), unplaced("w[2]")}, time.Minute, true,
			"3 of 3 members not running 30s after admission (w[1]) while w[0] holds GPUs", false},
		{"two pending wait for each other", []Member{pending("w[0]"), pending("w[1]")}, time.Minute, true,
			"2 of 2 members not running 30s after admission (w[0]) while w[1] holds GPUs", false},
		{"none holds GPUs", []Member{unplaced("w[0]"), unplaced("w[1]")}, time.Hour, false, "", false},
		{"a lone member holds only its own", []Member{pending("w[0]")}, time.Hour, false, "", false},
		{"a member done waits for nobody", []Member{{Name: "w[0]", Done: true}, running("w[1]")}, time.Hour, false, "", false},
		{"a member done holds nothing", []Member{{Name: "w[0]", Done: true}, unplaced("w[1]")}, time.Hour, false, "", false},
		{"an unplaced member is not running", []Member{unplaced("w[0]"), running("w[1]")}, time.Hour, true,
			"1 of 2 members not running 30s after admission (w[0]) while w[1] holds GPUs", false},
		{"a failed member ends the run at once", []Member{{Name: "w[0]", Ended: "failed"}, running("w[1]")}, time.Second, true,
			"member w[0] failed; the gang stops as one (its members checkpoint) and is admitted again", true},
		{"so does a preempted one with nobody else holding", []Member{{Name: "w[0]", Ended: "preempted"}, unplaced("w[1]")}, time.Second, true,
			"member w[0] preempted; the gang stops as one (its members checkpoint) and is admitted again", true},
		{"no members", nil, time.Hour, false, "", false},
	}
	for _, c := range cases {
		got, restart, reason := Rollback(c.members, admitted, admitted.Add(c.after), bound)
		if got != c.want || reason != c.reason || restart != c.restart {
			t.Errorf("%s: Rollback = %v, %v, %q; want %v, %v, %q", c.name, got, restart, reason, c.want, c.restart, c.reason)
		}
	}
	if got, _, _ := Rollback([]Member{running("w[0]"), unplaced("w[1]")}, time.Time{}, admitted, bound); got {
		t.Error("Rollback of a gang never admitted")
	}
}
