package queues

import (
	"math"
	"strings"
	"testing"
)

// lab is a cohort of a and b, 6 GPU-equivalents each, and c, which has
// no nominal and borrows; solo is in no cohort.
func lab(edit func(*Config)) Config {
	cfg := Config{Cohorts: []string{"lab"}, Queues: []Queue{
		{Name: "a", Nominal: 6, BorrowingLimit: Unlimited, LendingLimit: 6, Weight: 1, Cohort: "lab"},
		{Name: "b", Nominal: 6, BorrowingLimit: Unlimited, LendingLimit: 6, Weight: 1, Cohort: "lab"},
		{Name: "c", Nominal: 0, BorrowingLimit: Unlimited, LendingLimit: 0, Weight: 1, Cohort: "lab"},
		{Name: "solo", Nominal: 1.5, Weight: 1},
	}}
	if edit != nil {
		edit(&cfg)
	}
	return cfg
}

func queue(cfg *Config, name string) *Queue {
	for i := range cfg.Queues {
		if cfg.Queues[i].Name == name {
			return &cfg.Queues[i]
		}
	}
	panic(name)
}

// The borrow, lend and reclaim arithmetic on hand-computed cases.
func TestQuotaAdmit(t *testing.T) {
	for _, tc := range []struct {
		name  string
		edit  func(*Config)
		use   map[string]float64
		queue string
		gpus  float64
		want  Admission
		// reason is part of the reason it waits; reclaim what it takes back.
		reason  string
		reclaim float64
	}{
		{"within nominal", nil, nil, "a", 6, WithinNominal, "", 0},
		{"within nominal in shares", nil, map[string]float64{"a": 5.75}, "a", 0.25, WithinNominal, "", 0},
		{"b idle: a borrows all of b's", nil, nil, "a", 12, Borrowing, "", 0},
		{"b idle, c borrows too: none left", nil, map[string]float64{"a": 12}, "c", 1, Waits, "cohort: lab lends 0 now, 1 needed", 0},
		{"a borrows b's 6: b takes back what it submits", nil, map[string]float64{"a": 12}, "b", 6, WithinNominal, "", 6},
		{"b takes back one", nil, map[string]float64{"a": 12}, "b", 1, WithinNominal, "", 1},
		{"b within its nominal, a within its own: nothing to take back", nil, map[string]float64{"a": 6, "b": 2}, "b", 4, WithinNominal, "", 0},
		{"b uses 3: lends 3", nil, map[string]float64{"a": 6, "b": 3}, "a", 4, Waits, "cohort: lab lends 3 now, 4 needed", 0},
		{"b lends at most 4", func(c *Config) { queue(c, "b").LendingLimit = 4 }, map[string]float64{"a": 6}, "a", 5, Waits, "lends 4 now, 5 needed", 0},
		{"b lends at most 4: 4 borrowed", func(c *Config) { queue(c, "b").LendingLimit = 4 }, map[string]float64{"a": 6}, "a", 4, Borrowing, "", 0},
		{"b keeps 2 and uses 3: lends 3", func(c *Config) { queue(c, "b").LendingLimit = 4 }, map[string]float64{"a": 6, "b": 3}, "a", 3, Borrowing, "", 0},
		{"a's borrowing limit", func(c *Config) { queue(c, "a").BorrowingLimit = 2 }, nil, "a", 9, Waits, "quota: a would borrow 3 beyond its nominal 6; its borrowing_limit is 2", 0},
		{"c borrows from a and b", nil, map[string]float64{"a": 2, "b": 5}, "c", 5, Borrowing, "", 0},
		{"c borrows more than a and b lend", nil, map[string]float64{"a": 2, "b": 5}, "c", 6, Waits, "lends 5 now, 6 needed", 0},
		{"c borrowed 3, the cohort has 2 unused: a's 2 fit", nil, map[string]float64{"a": 2, "b": 5, "c": 3}, "a", 2, WithinNominal, "", 0},
		{"c borrowed 3, the cohort has 2 unused: a takes back 2 for 4", nil, map[string]float64{"a": 2, "b": 5, "c": 3}, "a", 4, WithinNominal, "", 2},
		{"b and c borrowed 1 each: a takes both back", nil, map[string]float64{"a": 2, "b": 7, "c": 1}, "a", 4, WithinNominal, "", 2},
		{"solo within", nil, nil, "solo", 1.5, WithinNominal, "", 0},
		{"solo beyond: no cohort", nil, map[string]float64{"solo": 1}, "solo", 1, Waits, "quota: solo would use 2 of its nominal 1.5, and it is in no cohort to borrow from", 0},
		{"an unknown queue", nil, nil, "z", 1, Waits, `queue "z": not in the queue file`, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := NewQuota(lab(tc.edit), tc.use).Admit(tc.queue, tc.gpus)
			if got.Admission != tc.want || !strings.Contains(got.Reason, tc.reason) || math.Abs(got.Reclaim-tc.reclaim) > 1e-9 {
				t.Errorf("Admit(%s, %g) = %+v; want admission %d, reason with %q, reclaim %g", tc.queue, tc.gpus, got, tc.want, tc.reason, tc.reclaim)
			}
		})
	}
}

// Borrowed, Lent and CohortFree on one state: a borrows 2, b uses 1 of
// a lendable 4 (keeps 2), c nothing.
func TestQuotaFigures(t *testing.T) {
	cfg := lab(func(c *Config) { queue(c, "b").LendingLimit = 4 })
	q := NewQuota(cfg, map[string]float64{"a": 8, "b": 1})
	for _, tc := range []struct {
		name string
		got  float64
		want float64
	}{
		{"a borrowed", q.Borrowed("a"), 2},
		{"b borrowed", q.Borrowed("b"), 0},
		{"a lends", q.Lent("a"), 0},
		{"b lends: min(4, 6 − 1)", q.Lent("b"), 4},
		{"c lends", q.Lent("c"), 0},
		{"free to a: b's 4 − a's 2", q.CohortFree("a"), 2},
		{"free to c: b's 4 − a's 2", q.CohortFree("c"), 2},
		{"free to b: a lends none", q.CohortFree("b"), 0},
		{"free to solo", q.CohortFree("solo"), 0},
	} {
		if math.Abs(tc.got-tc.want) > 1e-9 {
			t.Errorf("%s: %g, want %g", tc.name, tc.got, tc.want)
		}
	}
}
