// Package predict estimates a GPU task's run time and queue wait from the
// run history the sizer keeps (package sizing/history).
//
// It is a documented, simple model first, with simple baselines beside it
// so that its error can be measured against them (MAPE; the replay in
// tracereplay/sizingbench measures both on the Philly trace):
//
//   - Runtime: the median run time of the task's own recent runs, else of
//     the pool's runs of the same slice, else of the same slice kind; for a
//     task already running, the median of the runs that lasted longer than
//     it has so far.
//   - Wait: a small list-scheduling simulation of the pool: running tasks
//     free their slices when their predicted remaining time is up, tasks
//     queued ahead take them in priority order, and the wait is when the
//     task's ask first fits.
//   - RuntimeBaseline: the pool-wide mean run time. WaitBaseline: the mean
//     wait of the last runs that started.
//
// Nothing here reads a clock or a store: callers pass the runs, the time
// elapsed and the free capacity, so every estimate is a pure function of
// its arguments.
package predict

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/nomad-gpu/nomad-gpu/controller/sizing/history"
)

// The model's constants.
const (
	// JobRuns is how many of the task's latest finished runs its own
	// median is taken over.
	JobRuns = 20
	// MinRuns is the fewest runs a level (the task's own, the pool's of the
	// same slice, the pool's of the same kind) needs to be used.
	MinRuns = 3
	// BaselineWaitRuns is how many of the latest started runs
	// WaitBaseline averages.
	BaselineWaitRuns = 20
)

// Estimate is a predicted duration and what it was derived from.
type Estimate struct {
	// Seconds is the prediction, in seconds; 0 when not Known.
	Seconds float64
	// Basis says what the prediction rests on, for logs and reports:
	// "job p50 of 7 runs", "pool p50 of 312 runs of mps×2", "none".
	Basis string
	// Known is false when there was nothing to predict from.
	Known bool
}

// Duration is Seconds as a time.Duration.
func (e Estimate) Duration() time.Duration {
	return time.Duration(e.Seconds * float64(time.Second))
}

func unknown(why string) Estimate { return Estimate{Basis: why} }

// RunSeconds is the run time the model learns from a run: Finished −
// Started, for a run that completed or timed out. Other runs give false:
// running ones have no end yet; preempted, lost and stopped runs were cut
// short by the cluster, not by their work; failed, OOM-killed and memory-killed runs
// ended on an error, not on finishing their work. A timed-out run ran as
// long as it was allowed, which is what a task with that limit will do
// again, so it counts.
//
// A run restored from a checkpoint is its own allocation with its own
// Started: it counts the segment it ran, not the work done before the
// checkpoint. That under-states a resumed task's total work, but the task
// that resumes is predicted from segments of its own kind, and it keeps
// the model free of any notion of checkpoints.
func RunSeconds(r history.Run) (float64, bool) {
	if r.Outcome != history.OutcomeComplete && r.Outcome != history.OutcomeTimeout {
		return 0, false
	}
	if r.Started.IsZero() || r.Finished.IsZero() || r.Finished.Before(r.Started) {
		return 0, false
	}
	return r.Finished.Sub(r.Started).Seconds(), true
}

// Runtime predicts how much longer task k, holding slice, will run, given
// that it has run for elapsed (0 for a task not yet started, when the
// prediction is its whole run time). runs are the task's and the pool's
// runs, in any order; only those RunSeconds accepts are used, and the
// caller is expected to pass the runs of one pool.
//
// The model picks the first level with at least MinRuns runs:
//
//  1. the task's own JobRuns latest runs (by Finished): "job p50 of 7 runs";
//  2. the pool's runs of the same slice, kind and count (and profile for
//     MIG): "pool p50 of 312 runs of mps×2";
//  3. the pool's runs of the same kind: "pool p50 of 900 runs of mps".
//
// The pool levels use every accepted run passed; the history's retention
// bounds them. p50 is the median: the middle run time, or the mean of the
// two middle ones.
//
// For a task not started (elapsed 0) the estimate is that median. For a
// running task it is the conditional median: of the level's runs that
// lasted longer than elapsed, the median, less elapsed. The shorter runs
// are ruled out by the task still running, and the median of the rest is
// what the history says about a run that has lasted this long; it needs no
// fitted distribution and tends to the right answer as the history grows.
// When the task has outlived every run of the level, the history says
// nothing more, and the estimate is elapsed again (the task is taken to be
// half done): the scale-free guess of a heavy-tailed run time, which grows
// with the task and never predicts that it ends now. The same doubling is
// used for a running task with no level at all.
//
// With no level and elapsed 0 the estimate is not Known ("none").
func Runtime(k history.Key, slice history.Slice, elapsed time.Duration, runs []history.Run) Estimate {
	type timed struct {
		secs     float64
		finished time.Time
		alloc    string
	}
	var own []timed
	var sameSlice, sameKind []float64
	for _, r := range runs {
		s, ok := RunSeconds(r)
		if !ok {
			continue
		}
		if r.Key == k {
			own = append(own, timed{s, r.Finished, r.AllocID})
		}
		if r.Slice.Kind != slice.Kind {
			continue
		}
		sameKind = append(sameKind, s)
		if sameUnitCount(r.Slice, slice) {
			sameSlice = append(sameSlice, s)
		}
	}
	slices.SortFunc(own, func(a, b timed) int {
		return cmp.Or(b.finished.Compare(a.finished), cmp.Compare(b.alloc, a.alloc))
	})
	if len(own) > JobRuns {
		own = own[:JobRuns]
	}
	ownSecs := make([]float64, len(own))
	for i, t := range own {
		ownSecs[i] = t.secs
	}

	e := elapsed.Seconds()
	if e < 0 {
		e = 0
	}
	for _, level := range []struct {
		secs      []float64
		what, ofs string
	}{
		{ownSecs, "job", ""},
		{sameSlice, "pool", " of " + SliceString(slice)},
		{sameKind, "pool", " of " + slice.Kind},
	} {
		if len(level.secs) < MinRuns {
			continue
		}
		desc := fmt.Sprintf("%s p50 of %d runs%s", level.what, len(level.secs), level.ofs)
		return conditionalMedian(level.secs, e, desc)
	}
	if e > 0 {
		return Estimate{Seconds: e, Basis: "elapsed×2, no history", Known: true}
	}
	return unknown("none")
}

// conditionalMedian is Runtime's estimate from one level's run times.
func conditionalMedian(secs []float64, elapsed float64, desc string) Estimate {
	if elapsed == 0 {
		return Estimate{Seconds: Median(secs), Basis: desc, Known: true}
	}
	var longer []float64
	for _, s := range secs {
		if s > elapsed {
			longer = append(longer, s)
		}
	}
	el := time.Duration(elapsed * float64(time.Second)).Round(time.Second)
	if len(longer) == 0 {
		return Estimate{Seconds: elapsed, Basis: fmt.Sprintf("elapsed×2: %s outlived, %v elapsed", desc, el), Known: true}
	}
	return Estimate{
		Seconds: Median(longer) - elapsed,
		Basis:   fmt.Sprintf("%s, %d longer than %v elapsed", desc, len(longer), el),
		Known:   true,
	}
}

// sameUnitCount says whether a and b are the same kind, count and (for
// MIG) profile.
func sameUnitCount(a, b history.Slice) bool {
	return a.Kind == b.Kind && a.Count == b.Count && (a.Kind != history.SliceMIG || a.Profile == b.Profile)
}

// SliceString writes a slice as "gpu×2", "mps×1" or "mig 1g.10gb×3".
func SliceString(s history.Slice) string {
	if s.Kind == history.SliceMIG && s.Profile != "" {
		return fmt.Sprintf("mig %s×%d", s.Profile, s.Count)
	}
	return fmt.Sprintf("%s×%d", s.Kind, s.Count)
}

// Median is the middle of xs, or the mean of the two middle values when
// there are evenly many; 0 for none. xs is not changed.
func Median(xs []float64) float64 {
	n := len(xs)
	if n == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
