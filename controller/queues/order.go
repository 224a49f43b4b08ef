package queues

import (
	"cmp"
	"slices"
	"time"
)

// Waiting is one waiting job as the order weighs it.
type Waiting struct {
	Namespace, ID string
	// Queue is its queue's name.
	Queue string
	// Priority is its priority with any raise the controller holds for
	// it (a deadline's tier climb).
	Priority int
	// Deadline is its nomad_gpu_deadline, zero when none; Submitted when
	// it was submitted.
	Deadline, Submitted time.Time
	// HeldBy is why a dependency holds it ("" when none holds it): such a
	// job is not ordered.
	HeldBy string
}

// Standings are each active queue's fair-share standing (active: with
// work waiting or running): its share of the active queues' use (hours,
// each queue's decayed use) over its weighted share, its weight over
// theirs. Below 1 a queue has had less than its share, above 1 more; a
// queue with no use, or every queue while none has any, stands at 0.
// Inactive queues get no standing. (The order depends on use over weight
// alone; the shares make the figure readable.)
func Standings(cfg Config, hours map[string]float64, active map[string]bool) map[string]float64 {
	total, weights := 0.0, 0.0
	for _, q := range cfg.Queues {
		if active[q.Name] {
			total += hours[q.Name]
			weights += q.Weight
		}
	}
	out := map[string]float64{}
	for _, q := range cfg.Queues {
		if !active[q.Name] {
			continue
		}
		if total <= 0 {
			out[q.Name] = 0
			continue
		}
		out[q.Name] = (hours[q.Name] / total) / (q.Weight / weights)
	}
	return out
}

// Order is ws in the one rule of docs/design/queues.md, with the jobs a
// dependency holds left out: priority (with raises) first, higher first;
// then its queue's fair-share standing, lowest first; then the earlier
// deadline, none last; then the older submission; then namespace and ID.
// ws is not changed.
func Order(ws []Waiting, standing map[string]float64) []Waiting {
	out := make([]Waiting, 0, len(ws))
	for _, w := range ws {
		if w.HeldBy == "" {
			out = append(out, w)
		}
	}
	slices.SortFunc(out, func(a, b Waiting) int {
		return cmp.Or(
			cmp.Compare(b.Priority, a.Priority),
			cmp.Compare(standing[a.Queue], standing[b.Queue]),
			compareDeadlines(a.Deadline, b.Deadline),
			a.Submitted.Compare(b.Submitted),
			cmp.Compare(a.Namespace, b.Namespace),
			cmp.Compare(a.ID, b.ID),
		)
	})
	return out
}

// compareDeadlines orders the earlier deadline first, none last.
func compareDeadlines(a, b time.Time) int {
	switch {
	case a.IsZero() && b.IsZero():
		return 0
	case a.IsZero():
		return 1
	case b.IsZero():
		return -1
	}
	return a.Compare(b)
}
