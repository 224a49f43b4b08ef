package controller

import (
	"math"
	"testing"
	"time"

	"github.com/nomad-gpu/nomad-gpu/controller/queues"
)

// The queues' accounts on a hand-computed case: two nodes of 4 GPUs,
// queue a (namespace default) holding 3 GPUs and waiting for 2 more,
// queue b (namespace b) holding 1, both of nominal 2 in one cohort; an
// hour on, at a half-life of an hour, a's use is 3·(1/ln 2)·(1/2) GPU-
// hours and b's a third of it: a stands at 0.75/0.5 = 1.5, b at 0.5.
func TestQueueBook(t *testing.T) {
	snap, _ := gangBenchSnapshot(2, 4, 4, 1, 2, 0)
	snap.Allocs[3].Namespace = "b"
	cfg := queues.Config{HalfLife: time.Hour, Cohorts: []string{"lab"}, Queues: []queues.Queue{
		{Name: "a", Namespaces: []string{"default"}, Nominal: 2, BorrowingLimit: queues.Unlimited, LendingLimit: 2, Weight: 1, Cohort: "lab"},
		{Name: "b", Namespaces: []string{"b"}, Nominal: 2, BorrowingLimit: queues.Unlimited, LendingLimit: 2, Weight: 1, Cohort: "lab"},
		{Name: "idle", Namespaces: []string{"idle"}, Nominal: 1, Weight: 1},
	}}
	b := NewQueueBook(cfg, map[string]queues.Usage{"idle": {Hours: 4, At: snap.Taken.Add(-time.Hour)}, "gone": {Hours: 9}})
	b.Step(snap.Taken, snap)
	got := b.Step(snap.Taken.Add(time.Hour), snap)
	want := []QueueStatus{
		{Name: "a", Use: 3, Nominal: 2, Borrowed: 1, Lent: 0, UsageHours: 3 / (2 * math.Ln2), Standing: 1.5, Active: true, Waiting: 2},
		{Name: "b", Use: 1, Nominal: 2, Borrowed: 0, Lent: 1, UsageHours: 1 / (2 * math.Ln2), Standing: 0.5, Active: true},
		{Name: "idle", Use: 0, Nominal: 1, UsageHours: 1, Active: false},
	}
	if len(got) != len(want) {
		t.Fatalf("%d queues, want %d: %+v", len(got), len(want), got)
	}
	near := func(x, y float64) bool { return math.Abs(x-y) < 1e-9 }
	for i, w := range want {
		g := got[i]
		if g.Name != w.Name || !near(g.Use, w.Use) || g.Nominal != w.Nominal || !near(g.Borrowed, w.Borrowed) || !near(g.Lent, w.Lent) ||
			!near(g.UsageHours, w.UsageHours) || !near(g.Standing, w.Standing) || g.Active != w.Active || g.Waiting != w.Waiting {
			t.Errorf("queue %s: %+v\nwant %+v", w.Name, g, w)
		}
	}
	if _, kept := b.Usage()["gone"]; kept {
		t.Error("the use of a queue no longer in the file was kept")
	}
}
