package queues

import (
	"math"
	"slices"
	"testing"
	"time"
)

// Standings on a hand-computed case: a (weight 2) used 3 hours, b
// (weight 1) 1 hour, c (inactive) 4: among a and b, a had 3/4 of the use
// for 2/3 of the weight (1.125), b 1/4 for 1/3 (0.75).
func TestStandings(t *testing.T) {
	cfg := lab(func(c *Config) { queue(c, "a").Weight = 2 })
	got := Standings(cfg, map[string]float64{"a": 3, "b": 1, "c": 4}, map[string]bool{"a": true, "b": true})
	want := map[string]float64{"a": 1.125, "b": 0.75}
	if len(got) != len(want) {
		t.Fatalf("standings %v, want %v", got, want)
	}
	for q, w := range want {
		if math.Abs(got[q]-w) > 1e-9 {
			t.Errorf("%s stands at %g, want %g", q, got[q], w)
		}
	}
	// No use yet: every active queue at 0.
	if got := Standings(cfg, nil, map[string]bool{"a": true, "b": true}); got["a"] != 0 || got["b"] != 0 {
		t.Errorf("no use: %v", got)
	}
}

// The one rule: priority tier first, then standing, then deadline (none
// last), then age, then name; jobs a dependency holds left out.
func TestOrder(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	at := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	ws := []Waiting{
		{Namespace: "a", ID: "a-old", Queue: "a", Priority: 50, Submitted: at(0)},
		{Namespace: "b", ID: "b-new", Queue: "b", Priority: 50, Submitted: at(5)},
		{Namespace: "a", ID: "a-urgent", Queue: "a", Priority: 60, Submitted: at(9)},
		{Namespace: "b", ID: "b-deadline-late", Queue: "b", Priority: 50, Submitted: at(7), Deadline: at(120)},
		{Namespace: "b", ID: "b-deadline-soon", Queue: "b", Priority: 50, Submitted: at(8), Deadline: at(60)},
		{Namespace: "b", ID: "b-after", Queue: "b", Priority: 90, Submitted: at(1), HeldBy: "after prep: running"},
		{Namespace: "a", ID: "a-twin-2", Queue: "a", Priority: 50, Submitted: at(3)},
		{Namespace: "a", ID: "a-twin-1", Queue: "a", Priority: 50, Submitted: at(3)},
	}
	in := slices.Clone(ws)
	got := Order(ws, map[string]float64{"a": 1.125, "b": 0.75})
	var ids []string
	for _, w := range got {
		ids = append(ids, w.ID)
	}
	want := []string{"a-urgent", "b-deadline-soon", "b-deadline-late", "b-new", "a-old", "a-twin-1", "a-twin-2"}
	if !slices.Equal(ids, want) {
		t.Errorf("order %v\nwant  %v", ids, want)
	}
	if !slices.Equal(ws, in) {
		t.Error("Order changed its input")
	}
}
