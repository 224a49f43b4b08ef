package controller

import (
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)

// A deadline raise and a preemption protection on the same job, begun and
// ended in every order: after each step the job's priority is its own or
// the highest raise still in force, and at the end its own again. The
// protection ends by expiring (its Until passes) or by being ended (the
// job was preempted anyway); the deadline raise is ended by its module.
func TestLedgerRaisesInEveryOrder(t *testing.T) {
	const own, deadline, protect = 30, 70, 90
	steps := []string{"begin-deadline", "end-deadline", "begin-protect", "end-protect"}
	for _, protectEnds := range []string{"expire", "end"} {
		for _, order := range orders(steps) {
			name := protectEnds + ":" + strings.Join(order, ",")
			t.Run(name, func(t *testing.T) {
				e := NewEntry("default", "train", own)
				now := t0
				want := map[string]int{}
				for _, step := range order {
					now = now.Add(time.Minute)
					switch step {
					case "begin-deadline":
						e.Begin(Raise{Key: "deadline", Priority: deadline, Since: now})
						want["deadline"] = deadline
					case "end-deadline":
						e.End("deadline")
						delete(want, "deadline")
					case "begin-protect":
						e.Begin(Raise{Key: "preemption/a1", Priority: protect, Since: now, Until: now.Add(90 * time.Second)})
						want["protect"] = protect
					case "end-protect":
						if protectEnds == "end" {
							e.End("preemption/a1")
						} else {
							now = now.Add(30 * time.Second) // 90s after its begin at the earliest
							if over := e.Expire(now); len(over) != 1 {
								t.Fatalf("%s: expired %v, want the protection", step, over)
							}
						}
						delete(want, "protect")
					}
					// A protection not ended by hand is over 90s after it began.
					if _, ok := want["protect"]; ok {
						if r, _ := e.Get("preemption/a1"); !r.InForce(now) {
							delete(want, "protect")
						}
					}
					exp := own
					for _, p := range want {
						exp = max(exp, p)
					}
					if got := e.Want(now); got != exp {
						t.Fatalf("after %s: want %d, ledger says %d (%+v)", step, exp, got, e.Raises)
					}
					// The controller writes what the ledger wants, and sees it.
					e.Writing = e.Want(now)
					e.Observe(e.Writing)
				}
				e.Expire(now.Add(time.Hour))
				if got := e.Want(now.Add(time.Hour)); got != own || !e.Idle() {
					t.Errorf("at the end: priority %d, idle %v (%+v); want %d and idle", got, e.Idle(), e, own)
				}
			})
		}
	}
}

// orders are the permutations of steps in which each "begin-x" comes
// before its "end-x".
func orders(steps []string) [][]string {
	var out [][]string
	var walk func(done []string, left []string)
	walk = func(done, left []string) {
		if len(left) == 0 {
			out = append(out, append([]string(nil), done...))
			return
		}
		for i, s := range left {
			if strings.HasPrefix(s, "end-") && !contains(done, "begin-"+strings.TrimPrefix(s, "end-")) {
				continue
			}
			rest := append(append([]string(nil), left[:i]...), left[i+1:]...)
			walk(append(done, s), rest)
		}
	}
	walk(nil, steps)
	return out
}

func contains(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}

// Observe tells a hand change from the controller's own writes, including
// a write the previous leader recorded but died before making or after
// making.
func TestLedgerObserve(t *testing.T) {
	tests := []struct {
		name             string
		applied, writing int
		current          int
		own, wantApplied int
		changed          bool
	}{
		{"unchanged", 30, 0, 30, 30, 30, false},
		{"our write landed", 30, 90, 90, 30, 90, true},
		{"our write never made", 30, 90, 30, 30, 30, true},
		{"changed by hand", 30, 0, 50, 50, 50, true},
		{"changed by hand while raised", 90, 0, 50, 50, 50, true},
		{"changed by hand during our write", 30, 90, 60, 60, 60, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := Entry{Own: 30, Applied: tt.applied, Writing: tt.writing}
			changed := e.Observe(tt.current)
			if changed != tt.changed || e.Own != tt.own || e.Applied != tt.wantApplied || e.Writing != 0 {
				t.Errorf("Observe(%d) = %v: own %d applied %d writing %d; want %v, own %d applied %d writing 0",
					tt.current, changed, e.Own, e.Applied, e.Writing, tt.changed, tt.own, tt.wantApplied)
			}
		})
	}
}

// A priority set by hand while a raise is in force is the job's own from
// then on: the raise still lifts the job, and its end restores the new
// own priority, not the old one.
func TestLedgerHandChangeDuringRaise(t *testing.T) {
	e := NewEntry("default", "train", 30)
	e.Begin(Raise{Key: "preemption/a1", Priority: 90, Since: t0, Until: t0.Add(time.Minute)})
	e.Writing = e.Want(t0)
	e.Observe(90)
	e.Observe(50) // by hand
	if got := e.Want(t0.Add(time.Second)); got != 90 {
		t.Errorf("in the raise: %d, want 90", got)
	}
	e.Expire(t0.Add(time.Minute))
	if got := e.Want(t0.Add(time.Minute)); got != 50 {
		t.Errorf("after the raise: %d, want 50 (set by hand)", got)
	}
}
