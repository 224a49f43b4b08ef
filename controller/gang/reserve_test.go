package gang

import (
	"slices"
	"testing"
	"time"
)

func TestChooseReservation(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	in := func(d time.Duration) time.Time { return now.Add(d) }
	node := func(id string, free int, rel ...Release) NodeOutlook {
		return NodeOutlook{ID: id, GPUs: 8, Free: free, Releases: rel}
	}
	cases := []struct {
		name     string
		nodes    []NodeOutlook
		members  int
		per      int
		want     []string
		due      time.Time
		reserved bool
	}{
		{"the nodes freeing soonest, due at the later",
			[]NodeOutlook{
				node("a", 0, Release{8, in(3 * time.Hour)}),
				node("b", 4, Release{4, in(10 * time.Minute)}),
				node("c", 0, Release{4, in(20 * time.Minute)}, Release{4, in(30 * time.Minute)}),
			}, 2, 8, []string{"b", "c"}, in(30 * time.Minute), true},
		{"only as many releases as the member needs",
			[]NodeOutlook{
				node("a", 2, Release{2, in(5 * time.Minute)}, Release{4, in(5 * time.Hour)}),
				node("b", 0, Release{8, in(time.Hour)}),
			}, 1, 4, []string{"a"}, in(5 * time.Minute), true},
		{"ready now: the tighter fit first",
			[]NodeOutlook{node("roomy", 8), node("tight", 4, Release{4, in(time.Hour)})}, 1, 4, []string{"tight"}, now, true},
		{"an unknown end hides the GPUs behind it",
			[]NodeOutlook{
				node("a", 0, Release{4, time.Time{}}, Release{4, in(time.Minute)}),
				node("b", 0, Release{8, in(2 * time.Hour)}),
			}, 1, 8, []string{"b"}, in(2 * time.Hour), true},
		{"an unknown end past what is needed does not",
			[]NodeOutlook{node("a", 0, Release{4, time.Time{}}, Release{4, in(time.Minute)})}, 1, 4, []string{"a"}, in(time.Minute), true},
		{"a node too small never serves",
			[]NodeOutlook{{ID: "small", GPUs: 4, Free: 4}, node("b", 0, Release{8, in(time.Hour)})}, 1, 8, []string{"b"}, in(time.Hour), true},
		{"too few nodes with a known time: none",
			[]NodeOutlook{node("a", 8), node("b", 0, Release{8, time.Time{}})}, 2, 8, nil, time.Time{}, false},
	}
	for _, c := range cases {
		got, ok := Choose(c.nodes, c.members, c.per, now)
		if ok != c.reserved || !slices.Equal(got.Nodes, c.want) || !got.Due.Equal(c.due) {
			t.Errorf("%s: Choose = %v due %s, %v; want %v due %s, %v", c.name, got.Nodes, got.Due.Sub(now), ok, c.want, c.due.Sub(now), c.reserved)
		}
	}
}

func TestBackfill(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	due := now.Add(time.Hour)
	cases := []struct {
		name string
		w    Work
		want bool
	}{
		{"ends well before it is due", Work{Runtime: 20 * time.Minute, Known: true}, true},
		{"ends before, but not with the margin", Work{Runtime: 40 * time.Minute, Known: true}, false},
		{"ends after", Work{Runtime: 2 * time.Hour, Known: true}, false},
		{"unknown runtime", Work{}, false},
		{"moved off when due, losing nothing", Work{Runtime: 5 * time.Hour, Known: true, Movable: true}, true},
	}
	for _, c := range cases {
		if got := Backfill(c.w, now, due, 1.5); got != c.want {
			t.Errorf("%s: Backfill = %v, want %v", c.name, got, c.want)
		}
	}
}
