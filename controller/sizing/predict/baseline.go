package predict

import (
	"cmp"
	"fmt"
	"math"
	"slices"

	"github.com/nomad-gpu/nomad-gpu/controller/sizing/history"
)

// RuntimeBaseline is the simple baseline Runtime is measured against: the
// mean run time (Finished − Started) of every finished run passed, whatever
// its task, slice or outcome (only runs with both times set count). It
// predicts a task's whole run time. Not Known when no run has finished.
func RuntimeBaseline(runs []history.Run) Estimate {
	sum, n := 0.0, 0
	for _, r := range runs {
		if r.Started.IsZero() || r.Finished.IsZero() || r.Finished.Before(r.Started) {
			continue
		}
		sum += r.Finished.Sub(r.Started).Seconds()
		n++
	}
	if n == 0 {
		return unknown("none")
	}
	return Estimate{Seconds: sum / float64(n), Basis: fmt.Sprintf("pool mean of %d runs", n), Known: true}
}

// WaitBaseline is the simple baseline Wait is measured against: the mean
// wait (Started − Created) of the BaselineWaitRuns runs passed that
// started last (by Started, then AllocID), running or finished. Not Known
// when none has started.
func WaitBaseline(runs []history.Run) Estimate {
	var started []history.Run
	for _, r := range runs {
		if r.Started.IsZero() || r.Created.IsZero() || r.Started.Before(r.Created) {
			continue
		}
		started = append(started, r)
	}
	if len(started) == 0 {
		return unknown("none")
	}
	slices.SortFunc(started, func(a, b history.Run) int {
		return cmp.Or(b.Started.Compare(a.Started), cmp.Compare(b.AllocID, a.AllocID))
	})
	if len(started) > BaselineWaitRuns {
		started = started[:BaselineWaitRuns]
	}
	sum := 0.0
	for _, r := range started {
		sum += r.Started.Sub(r.Created).Seconds()
	}
	return Estimate{
		Seconds: sum / float64(len(started)),
		Basis:   fmt.Sprintf("mean wait of last %d started runs", len(started)),
		Known:   true,
	}
}

// MAPE is the mean absolute percentage error of pred against actual, in
// percent: the mean over i of |pred[i] − actual[i]| / |actual[i]| × 100.
// Pairs with actual[i] == 0 are skipped, since no percentage of zero is
// defined (a wait that was 0 is better measured in seconds); so are pairs
// where either value is NaN. NaN when no pair is left. It panics when the
// lengths differ.
func MAPE(pred, actual []float64) float64 {
	if len(pred) != len(actual) {
		panic(fmt.Sprintf("predict.MAPE: %d predictions, %d actuals", len(pred), len(actual)))
	}
	sum, n := 0.0, 0
	for i, a := range actual {
		p := pred[i]
		if a == 0 || math.IsNaN(a) || math.IsNaN(p) {
			continue
		}
		sum += math.Abs(p-a) / math.Abs(a)
		n++
	}
	if n == 0 {
		return math.NaN()
	}
	return 100 * sum / float64(n)
}
