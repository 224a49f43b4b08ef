package tracereplay

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Busiest is the start of the window of the given length that holds the
// most arrivals, [start, start+window); of windows holding equally many,
// the earliest. jobs must be sorted by Arrival, as a Trace's are. The
// start is always an arrival (a window holding the most can be moved to
// start at its first one); 0 when there are no jobs.
func Busiest(jobs []Job, window time.Duration) (start time.Duration) {
	return BusiestOf(jobs, window, 0)
}

// BusiestOf is Busiest counting only the arrivals of jobs asking for at
// least minGPUs whole GPUs (0 or 1: every job): the window where the most
// multi-GPU work arrives, what consolidation is for.
func BusiestOf(jobs []Job, window time.Duration, minGPUs int) (start time.Duration) {
	var counted []Job
	for _, j := range jobs {
		if j.GPUs >= minGPUs {
			counted = append(counted, j)
		}
	}
	best, end := -1, 0
	for i, j := range counted {
		// end only moves forward, so the scan is linear.
		for end < len(counted) && counted[end].Arrival < j.Arrival+window {
			end++
		}
		if n := end - i; n > best {
			best, start = n, j.Arrival
		}
	}
	return start
}

// Window is the jobs arriving in [start, start+length), in their order,
// with Arrival shifted so that the window starts at 0. jobs is not
// changed.
func Window(jobs []Job, start, length time.Duration) []Job {
	var out []Job
	for _, j := range jobs {
		if j.Arrival >= start && j.Arrival < start+length {
			j.Arrival -= start
			out = append(out, j)
		}
	}
	return out
}

// SampleJobs is n of jobs, chosen uniformly without replacement, in their
// order; all of them when n ≤ 0 or n ≥ len(jobs). The choice depends on
// the seed and the job IDs alone: the n jobs whose hash of (seed, ID) is
// smallest. So whether a job is drawn depends on which jobs it competes
// with, never on their order.
func SampleJobs(jobs []Job, n int, seed int64) []Job {
	if n <= 0 || n >= len(jobs) {
		return slices.Clone(jobs)
	}
	return pick(jobs, hashOrder(jobs, seed)[:n])
}

// SampleLoad draws jobs in the order SampleJobs does until the GPU time
// they ask for within [0, horizon] reaches load × capacity (GPU-seconds):
// a sample that offers the cluster a chosen share of what it can run.
// All jobs when they offer less.
func SampleLoad(jobs []Job, load, capacity float64, horizon time.Duration, seed int64) []Job {
	order := hashOrder(jobs, seed)
	var offered float64
	for k, i := range order {
		if offered >= load*capacity {
			return pick(jobs, order[:k])
		}
		offered += Offered(jobs[i], horizon)
	}
	return slices.Clone(jobs)
}

// Offered is the GPU-seconds job j asks for within [0, horizon].
func Offered(j Job, horizon time.Duration) float64 {
	return j.Requested() * max(0, min(j.Duration, horizon-j.Arrival)).Seconds()
}

// pick is jobs[i] for the chosen i, in jobs' order.
func pick(jobs []Job, chosen []int) []Job {
	chosen = slices.Clone(chosen)
	slices.Sort(chosen)
	out := make([]Job, len(chosen))
	for k, i := range chosen {
		out[k] = jobs[i]
	}
	return out
}

// hashOrder are jobs' indexes by their hash of (seed, ID).
func hashOrder(jobs []Job, seed int64) []int {
	type key struct {
		h uint64
		i int
	}
	keys := make([]key, len(jobs))
	for i, j := range jobs {
		keys[i] = key{jobRand("sample", seed, j.ID).Uint64(), i}
	}
	slices.SortFunc(keys, func(a, b key) int {
		if a.h != b.h {
			if a.h < b.h {
				return -1
			}
			return 1
		}
		// Equal hashes are all but impossible; IDs keep the choice
		// independent of order even then.
		return strings.Compare(jobs[a.i].ID, jobs[b.i].ID)
	})
	order := make([]int, len(keys))
	for k := range keys {
		order[k] = keys[k].i
	}
	return order
}

// Selection says which part of a trace is replayed.
type Selection struct {
	// Window is the length of trace replayed; 0 replays the whole trace.
	Window time.Duration
	// Start is where the window starts: a time "2006-01-02 15:04:05",
	// UTC, for a trace that has an epoch (the Philly extract), or a
	// duration from the trace's zero ("90m", "26h"). Busiest picks the
	// window holding the most arrivals instead (of jobs asking for at
	// least BusiestMinGPUs GPUs, where that is above 1). With neither, the
	// window starts at the trace's zero; with Window 0 both are unused.
	Start          string
	Busiest        bool
	BusiestMinGPUs int
	// Sample is the number of jobs drawn from the window with Seed (see
	// SampleJobs); 0 keeps them all.
	Sample int
	Seed   int64
}

// Select picks s from jobs, sorted by Arrival, whose zero is epoch (the
// zero Time when the trace has none, as a replay CSV): the window, with
// arrivals shifted to start at 0, then the sample. The Trace's Source
// says, in a sentence starting with sourceName, what was picked, such as
// "philly.csv: busiest 6h0m0s window from 2017-10-04 21:14:49 UTC (1947
// jobs), 300 sampled with seed 1". An error names the Selection's field.
func Select(jobs []Job, epoch time.Time, s Selection, sourceName string) (Trace, error) {
	switch {
	case s.Window < 0:
		return Trace{}, fmt.Errorf("window: %v; allowed: 0 (the whole trace) or more", s.Window)
	case s.Sample < 0:
		return Trace{}, fmt.Errorf("sample: %d; allowed: 0 (all jobs) or more", s.Sample)
	case s.Start != "" && s.Busiest:
		return Trace{}, fmt.Errorf("start, busiest: %q and busiest both given; allowed: one of them", s.Start)
	case s.BusiestMinGPUs < 0:
		return Trace{}, fmt.Errorf("busiest-min-gpus: %d; allowed: 0 or more", s.BusiestMinGPUs)
	case s.BusiestMinGPUs > 1 && !s.Busiest:
		return Trace{}, fmt.Errorf("busiest-min-gpus: %d with a start; allowed: only for the busiest window (no start)", s.BusiestMinGPUs)
	case s.Start != "" && s.Window == 0:
		return Trace{}, fmt.Errorf("start: %q with window 0 (the whole trace); allowed: a start only with a window", s.Start)
	}
	if !slices.IsSortedFunc(jobs, compareJobs) {
		jobs = slices.Clone(jobs)
		sortJobs(jobs)
	}

	var what string
	picked := jobs
	if s.Window == 0 {
		what = "whole trace"
		if !epoch.IsZero() {
			what += " from " + epoch.UTC().Format(PhillyTimeLayout) + " UTC"
		}
	} else {
		var start time.Duration
		switch {
		case s.Busiest && s.BusiestMinGPUs > 1:
			start = BusiestOf(jobs, s.Window, s.BusiestMinGPUs)
			what = fmt.Sprintf("busiest (in arrivals of jobs asking for %d+ GPUs) ", s.BusiestMinGPUs)
		case s.Busiest:
			start = Busiest(jobs, s.Window)
			what = "busiest "
		case s.Start != "":
			var err error
			if start, err = parseStart(s.Start, epoch); err != nil {
				return Trace{}, err
			}
		}
		picked = Window(jobs, start, s.Window)
		what += fmt.Sprintf("%v window from ", s.Window)
		if epoch.IsZero() {
			what += fmt.Sprintf("%v after the trace's zero", start)
		} else {
			what += epoch.Add(start).UTC().Format(PhillyTimeLayout) + " UTC"
		}
	}
	source := fmt.Sprintf("%s: %s (%d jobs)", sourceName, what, len(picked))
	switch {
	case s.Sample == 0:
	case s.Sample < len(picked):
		picked = SampleJobs(picked, s.Sample, s.Seed)
		source += fmt.Sprintf(", %d sampled with seed %d", s.Sample, s.Seed)
	default:
		source += fmt.Sprintf(", all kept: sample %d ≥ %d jobs", s.Sample, len(picked))
	}
	return Trace{Jobs: picked, Source: source}, nil
}

// parseStart reads Selection.Start as an offset from epoch.
func parseStart(v string, epoch time.Time) (time.Duration, error) {
	if d, err := time.ParseDuration(v); err == nil {
		return d, nil
	}
	at, err := time.Parse(PhillyTimeLayout, v)
	if err != nil {
		return 0, fmt.Errorf("start: %q; allowed: a time %q (UTC) or a duration from the trace's zero such as 90m", v, PhillyTimeLayout)
	}
	if epoch.IsZero() {
		return 0, fmt.Errorf("start: %q is a time, but this trace has no epoch (a replay CSV counts from its zero); allowed: a duration from the trace's zero such as 90m", v)
	}
	return at.Sub(epoch), nil
}
