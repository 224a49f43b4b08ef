package queues

import (
	"fmt"
	"math"
)

// Quota is the cohort arithmetic over the queues' use now (Kueue's
// ClusterQueue quotas): a queue keeps nominal − lending_limit for itself
// and lends the rest of its nominal while it does not use it; beyond its
// nominal it borrows, up to its borrowing limit, what the other queues
// of its cohort lend and others have not borrowed already.
type Quota struct {
	queues map[string]Queue
	use    map[string]float64
}

// NewQuota is the arithmetic over cfg's queues with use, each queue's
// GPU-equivalents held now (admitted or running; a queue missing holds
// none).
func NewQuota(cfg Config, use map[string]float64) *Quota {
	q := &Quota{queues: map[string]Queue{}, use: use}
	for _, x := range cfg.Queues {
		q.queues[x.Name] = x
	}
	return q
}

// Borrowed is what queue name uses beyond its nominal.
func (qt *Quota) Borrowed(name string) float64 {
	return max(0, qt.use[name]-qt.queues[name].Nominal)
}

// Lent is what queue name lends now and does not use: its lendable
// nominal less what its use takes of it (its use takes the part it keeps
// first).
func (qt *Quota) Lent(name string) float64 {
	q := qt.queues[name]
	return max(0, min(q.LendingLimit, q.Nominal-qt.use[name]))
}

// CohortFree is what queue name could borrow now: what the other queues
// of its cohort lend, less what every queue of it has borrowed.
func (qt *Quota) CohortFree(name string) float64 {
	q := qt.queues[name]
	if q.Cohort == "" {
		return 0
	}
	lent, borrowed := 0.0, 0.0
	for n, r := range qt.queues {
		if r.Cohort != q.Cohort {
			continue
		}
		if n != name {
			lent += qt.Lent(n)
		}
		borrowed += qt.Borrowed(n)
	}
	return max(0, lent-borrowed)
}

// Admission is how a job would be admitted into its queue.
type Admission int

// Admissions.
const (
	// WithinNominal: the queue's use stays within its nominal quota.
	WithinNominal Admission = iota
	// Borrowing: beyond its nominal, on what its cohort lends.
	Borrowing
	// Waits: its queue may not take it now (Verdict.Reason says why).
	Waits
)

// Verdict is Admit's answer.
type Verdict struct {
	Admission Admission
	// Reason says why it waits, in the words nomad-gpu queue shows.
	Reason string
	// Reclaim is how much borrowed work the cohort may take back for it:
	// a job within its queue's nominal that would take the cohort's use
	// past the sum of its nominal quotas, some of that use borrowed. It is
	// the most the quotas allow; the controller takes back only what the
	// job needs to fit (Nomad's plan says), since a cluster may have
	// capacity no quota names.
	Reclaim float64
}

// Admit says whether a job of gpus GPU-equivalents may be admitted into
// queue name now.
func (qt *Quota) Admit(name string, gpus float64) Verdict {
	q, ok := qt.queues[name]
	if !ok {
		return Verdict{Admission: Waits, Reason: fmt.Sprintf("queue %q: not in the queue file", name)}
	}
	after := qt.use[name] + gpus
	if after <= q.Nominal+epsilon {
		return Verdict{Admission: WithinNominal, Reclaim: qt.reclaim(q, gpus)}
	}
	borrow := after - q.Nominal
	switch {
	case q.Cohort == "":
		return Verdict{Admission: Waits, Reason: fmt.Sprintf("quota: %s would use %s of its nominal %s, and it is in no cohort to borrow from",
			name, gpuEq(after), gpuEq(q.Nominal))}
	case borrow > q.BorrowingLimit+epsilon:
		return Verdict{Admission: Waits, Reason: fmt.Sprintf("quota: %s would borrow %s beyond its nominal %s; its borrowing_limit is %s",
			name, gpuEq(borrow), gpuEq(q.Nominal), gpuEq(q.BorrowingLimit))}
	}
	if need, free := borrow-qt.Borrowed(name), qt.CohortFree(name); need > free+epsilon {
		return Verdict{Admission: Waits, Reason: fmt.Sprintf("cohort: %s lends %s now, %s needed", q.Cohort, gpuEq(free), gpuEq(need))}
	}
	return Verdict{Admission: Borrowing}
}

// reclaim is how much borrowed work must yield for gpus more of q's
// nominal: the part by which the cohort's use would pass its nominal
// total, no more than is borrowed.
func (qt *Quota) reclaim(q Queue, gpus float64) float64 {
	if q.Cohort == "" {
		return 0
	}
	use, nominal, borrowed := gpus, 0.0, 0.0
	for n, r := range qt.queues {
		if r.Cohort == q.Cohort {
			use += qt.use[n]
			nominal += r.Nominal
			borrowed += qt.Borrowed(n)
		}
	}
	return min(borrowed, max(0, use-nominal))
}

// epsilon absorbs float sums of shares (thirds, sevenths).
const epsilon = 1e-9

// gpuEq writes GPU-equivalents: "6", "0.5", "0.333".
func gpuEq(x float64) string {
	if math.IsInf(x, 1) {
		return "unlimited"
	}
	return fmt.Sprintf("%.3g", x)
}
