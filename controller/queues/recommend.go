package queues

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
)

// Use is a queue's use of GPU-equivalents over a window, as the
// controller's accounts recorded it.
type Use struct {
	// Mean, Quantile (such as the p90) and Max of its GPU-equivalents used.
	Mean, Quantile, Max float64
	// Starved is the share of the window (0 to 1) it had work waiting
	// while it used less than its nominal: capacity, not its quota, held
	// that work back, so its use understates what it wanted.
	Starved float64
}

// RecommendOptions shape a recommendation.
type RecommendOptions struct {
	// Step is what recommended nominals are rounded to, in GPU-equivalents.
	Step float64
	// Floor is the least nominal a queue with history is recommended (0: a
	// queue of a cohort with no use gets none); a multiple of Step.
	Floor float64
}

// DefaultStep is half a GPU: an MPS pair or a large MIG slice.
const DefaultStep = 0.5

// Recommendation is one queue's recommended nominal with its evidence.
type Recommendation struct {
	Queue, Cohort string
	// History is false when the window has no use recorded for the queue:
	// it keeps its nominal.
	History bool
	Use     Use
	// Nominal is the file's; Recommended the new one.
	Nominal, Recommended float64
	// LendingLimit is the lending limit with the new nominal: all of it
	// where the queue lent all of its nominal; a limit above the new
	// nominal lowered to it (LendingLowered); the file's otherwise.
	LendingLimit   float64
	LendingLowered bool
	// Reason says in one line why.
	Reason string
}

// Change is the recommended nominal less the current one.
func (r Recommendation) Change() float64 { return r.Recommended - r.Nominal }

// Recommend is each queue's nominal from its use over a window (use, by
// queue; a queue missing has no history), in the file's order.
//
// Within a cohort the cohort's total nominal is kept, for it is the
// capacity promised to the cohort's teams, and is shared out in
// proportion to each queue's quantile use: the nominal follows the use a
// queue reliably has, and a queue that used none gets none (it can still
// borrow what the others lend), unless Floor says otherwise. A queue
// without history keeps its nominal, and the rest is shared. Shares are
// rounded to Step by largest remainder (each rounded down, the steps
// left over one each to the largest fractions), so the total is kept
// exactly; any part of a step left (a total not a multiple of Step) goes
// to the largest share.
//
// A queue in no cohort cannot borrow, so raising its nominal would
// promise capacity taken from no one: it keeps its nominal unless its
// quantile use is below it, then gets that use rounded up to Step.
func Recommend(cfg Config, use map[string]Use, o RecommendOptions) ([]Recommendation, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	out := make([]Recommendation, len(cfg.Queues))
	byCohort := map[string][]int{}
	for i, q := range cfg.Queues {
		u, ok := use[q.Name]
		out[i] = Recommendation{Queue: q.Name, Cohort: q.Cohort, History: ok, Use: u,
			Nominal: q.Nominal, Recommended: q.Nominal, LendingLimit: q.LendingLimit}
		switch {
		case !ok:
			out[i].Reason = "no history over the window: keeps its nominal"
		case q.Cohort == "":
			out[i].alone(o)
		default:
			byCohort[q.Cohort] = append(byCohort[q.Cohort], i)
		}
	}
	var errs []error
	for _, c := range cfg.Cohorts {
		errs = append(errs, shareCohort(c, cfg.Queues, out, byCohort[c], o))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	for i, q := range cfg.Queues {
		out[i].lowerLending(q)
	}
	return out, nil
}

// Validate says what is wrong with o, naming the option (step, floor)
// and what is allowed.
func (o RecommendOptions) Validate() error {
	switch {
	case !finite(o.Step) || o.Step <= 0:
		return fmt.Errorf("step %g; allowed: more than 0 GPU-equivalents", o.Step)
	case !finite(o.Floor) || o.Floor < 0:
		return fmt.Errorf("floor %g; allowed: 0 or more GPU-equivalents", o.Floor)
	case math.Abs(o.Floor/o.Step-math.Round(o.Floor/o.Step)) > 1e-6:
		return fmt.Errorf("floor %g; allowed: a multiple of the step (%g)", o.Floor, o.Step)
	}
	return nil
}

// alone is the rule of a queue in no cohort.
func (r *Recommendation) alone(o RecommendOptions) {
	up := max(o.Floor, math.Ceil(r.Use.Quantile/o.Step-epsilon)*o.Step)
	if up >= r.Nominal {
		r.Reason = fmt.Sprintf("in no cohort it cannot borrow, and its use (%s) reaches its nominal: keeps it", gpuEq(r.Use.Quantile))
		return
	}
	r.Recommended = up
	r.Reason = fmt.Sprintf("in no cohort, its use (%s at the quantile) stays below its nominal: the rest of it stood idle", gpuEq(r.Use.Quantile))
}

// shareCohort shares the nominal of cohort's queues with history (idx)
// out by their use, filling in out.
func shareCohort(cohort string, qs []Queue, out []Recommendation, idx []int, o RecommendOptions) error {
	total, weights, used := 0.0, make([]float64, len(idx)), 0.0
	for k, i := range idx {
		total += qs[i].Nominal
		weights[k] = out[i].Use.Quantile
		used += weights[k]
	}
	if used <= epsilon {
		for _, i := range idx {
			out[i].Reason = fmt.Sprintf("cohort %q had no use over the window: keeps its nominal", cohort)
		}
		return nil
	}
	if need := o.Floor * float64(len(idx)); need > total+epsilon {
		return fmt.Errorf("floor %g: cohort %q's %d queues would need %s, its nominal total is %s; allowed: a floor up to %s",
			o.Floor, cohort, len(idx), gpuEq(need), gpuEq(total), gpuEq(total/float64(len(idx))))
	}
	exact, floored := proportional(total, weights, o.Floor)
	rounded := roundKeepingTotal(total, exact, o.Step)
	for k, i := range idx {
		out[i].Recommended = rounded[k]
		out[i].Reason = cohortReason(cohort, out[i], weights[k]/used, total, floored[k])
	}
	return nil
}

// proportional shares total out by weights, none below floor: a share
// below it is raised to it and the others share what is left, again in
// proportion (water-filling). floored says which were raised.
func proportional(total float64, weights []float64, floor float64) (shares []float64, floored []bool) {
	shares, floored = make([]float64, len(weights)), make([]bool, len(weights))
	for {
		rest, sum := total, 0.0
		for k, w := range weights {
			if floored[k] {
				rest -= floor
			} else {
				sum += w
			}
		}
		raised := false
		for k, w := range weights {
			switch {
			case floored[k]:
				shares[k] = floor
			default:
				shares[k] = rest * w / sum
				if shares[k] < floor-epsilon {
					floored[k], raised = true, true
				}
			}
		}
		if !raised {
			return shares, floored
		}
	}
}

// roundKeepingTotal rounds each share to step so that they still sum to
// total: largest remainder, then what is less than a step to the largest.
func roundKeepingTotal(total float64, shares []float64, step float64) []float64 {
	steps := make([]int, len(shares))
	left := int(math.Floor(total/step + epsilon))
	for k, s := range shares {
		steps[k] = int(math.Floor(s/step + epsilon))
		left -= steps[k]
	}
	order := make([]int, len(shares))
	for k := range order {
		order[k] = k
	}
	frac := func(k int) float64 { return shares[k]/step - float64(steps[k]) }
	slices.SortStableFunc(order, func(a, b int) int {
		if d := frac(b) - frac(a); math.Abs(d) > epsilon {
			return sign(d)
		}
		return sign(shares[b] - shares[a])
	})
	for n := 0; n < left; n++ {
		steps[order[n%len(order)]]++
	}
	out := make([]float64, len(shares))
	largest := 0
	for k, n := range steps {
		out[k] = float64(n) * step
		if shares[k] > shares[largest] {
			largest = k
		}
	}
	if part := total - float64(int(math.Floor(total/step+epsilon)))*step; part > epsilon {
		out[largest] += part
	}
	for k := range out {
		out[k] = math.Round(out[k]*1e9) / 1e9 // no float dust in the file
	}
	return out
}

func sign(x float64) int {
	switch {
	case x > 0:
		return 1
	case x < 0:
		return -1
	}
	return 0
}

func cohortReason(cohort string, r Recommendation, share, total float64, floored bool) string {
	var b strings.Builder
	switch {
	case floored && r.Use.Quantile <= epsilon:
		fmt.Fprintf(&b, "no use over the window: the floor of cohort %q's nominal %s", cohort, gpuEq(total))
	case floored:
		fmt.Fprintf(&b, "%.0f%% of cohort %q's use, below the floor: the floor of its nominal %s", 100*share, cohort, gpuEq(total))
	case r.Use.Quantile <= epsilon:
		fmt.Fprintf(&b, "no use over the window: its nominal goes to the queues of cohort %q that used theirs (it may still borrow)", cohort)
	default:
		fmt.Fprintf(&b, "%.0f%% of cohort %q's use: that share of its nominal %s", 100*share, cohort, gpuEq(total))
	}
	if r.Use.Starved > 0 && r.Change() < 0 {
		fmt.Fprintf(&b, "; it had work waiting below its nominal %.0f%% of the window, so its use may understate its demand", 100*r.Use.Starved)
	}
	return b.String()
}

// lowerLending lowers a lending limit above the new nominal, which the
// file may not keep (lending_limit is at most nominal). One equal to the
// old nominal (unset, or lending all of it) lends all of the new one.
func (r *Recommendation) lowerLending(q Queue) {
	switch {
	case q.Cohort == "":
	case q.LendingLimit >= q.Nominal-epsilon:
		r.LendingLimit = r.Recommended
	case q.LendingLimit > r.Recommended+epsilon:
		r.LendingLimit, r.LendingLowered = r.Recommended, true
		r.Reason += fmt.Sprintf("; lending_limit %s is above the new nominal: lowered to it", gpuEq(q.LendingLimit))
	}
}
