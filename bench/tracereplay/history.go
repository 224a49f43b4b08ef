package tracereplay

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/controller/sizing/history"
)

// A cluster's own record as a trace: the runs the controller's right-sizing
// history keeps (controller/sizing/history), so the replay's model answers
// the purchase question for the work an operator ran, not for Philly's.

// HistoryOptions say how recorded runs become jobs.
type HistoryOptions struct {
	// Shares is the MPS shares of a GPU on the recorded cluster: a run
	// of k shares asks for k/Shares of a GPU.
	Shares int
	// Until ends the runs still running: their duration so far.
	Until time.Time
}

// HistoryStats count what FromRuns made of the runs, for the report.
type HistoryStats struct {
	Runs, Jobs int
	// Unstarted pieces never ran (waiting, or failed before starting):
	// left out. Running pieces were still running at Until: cut there.
	// Unsubmitted pieces had no submission recorded (runs recorded
	// before runs recorded it): they arrive when first placed.
	Unstarted, Running, Unsubmitted int
}

// Note says what the record held and what was made of it.
func (st HistoryStats) Note() string {
	return fmt.Sprintf("history: %d runs made %d jobs; %d pieces of work never started (left out), %d still running (cut at the read), %d without a recorded submission (arriving when first placed)",
		st.Runs, st.Jobs, st.Unstarted, st.Running, st.Unsubmitted)
}

// pieceKey is one piece of work: the runs of one job submission with one
// allocation name (job.group[index]): an allocation and the replacements
// Nomad made for it when it was preempted, stopped or lost.
type pieceKey struct {
	namespace, name string
	submitted       time.Time
}

// FromRuns turns recorded runs into a trace: each piece of work (an
// allocation and its replacements) one job, arriving when its job was
// submitted (else when its first run was placed), running as long as its
// runs ran together (what checkpointed work needs; work that restarts
// from nothing needed less), asking for its slice (a whole GPU count, an
// MPS share's fraction, a MIG profile's sevenths), at its priority, of
// its namespace's team. The trace's zero is the first arrival; epoch is
// that instant.
func FromRuns(runs []history.Run, opts HistoryOptions) (jobs []Job, epoch time.Time, st HistoryStats, err error) {
	if opts.Shares < 1 {
		return nil, time.Time{}, st, fmt.Errorf("history-shares: %d; allowed: 1 or more", opts.Shares)
	}
	byKey := map[pieceKey][]history.Run{}
	var keys []pieceKey
	for _, r := range runs {
		st.Runs++
		k := pieceKey{namespace: r.Key.Namespace, name: r.Name, submitted: r.Submitted}
		if r.Name == "" || r.Submitted.IsZero() {
			// Recorded before runs had names, or without a submission
			// (its job was submitted again before the run was first
			// seen): which runs are one piece is not known, so alone.
			k.name = "alloc " + r.AllocID
		}
		if _, seen := byKey[k]; !seen {
			keys = append(keys, k)
		}
		byKey[k] = append(byKey[k], r)
	}
	var arrivals []time.Time
	for _, k := range keys {
		j, arrival, ok, running := jobOfPiece(k, byKey[k], opts)
		switch {
		case !ok:
			st.Unstarted++
			continue
		case running:
			st.Running++
		}
		if k.submitted.IsZero() {
			st.Unsubmitted++
		}
		jobs, arrivals = append(jobs, j), append(arrivals, arrival)
	}
	if len(jobs) == 0 {
		return nil, time.Time{}, st, ErrNoJobs
	}
	epoch = slices.MinFunc(arrivals, time.Time.Compare)
	for i := range jobs {
		jobs[i].Arrival = arrivals[i].Sub(epoch)
	}
	slices.SortStableFunc(jobs, func(a, b Job) int {
		return cmp.Or(cmp.Compare(a.Arrival, b.Arrival), cmp.Compare(a.ID, b.ID))
	})
	st.Jobs = len(jobs)
	return jobs, epoch.UTC(), st, nil
}

// jobOfPiece is one piece's job and its arrival: its submission, else its
// first run's placement; ok is false when none of its runs started,
// running true when one was still running at opts.Until.
func jobOfPiece(k pieceKey, runs []history.Run, opts HistoryOptions) (j Job, arrival time.Time, ok, running bool) {
	arrival = k.submitted
	var ran time.Duration
	for _, r := range runs {
		if k.submitted.IsZero() && (arrival.IsZero() || r.Created.Before(arrival)) {
			arrival = r.Created
		}
		if r.Started.IsZero() {
			continue
		}
		end := r.Finished
		if end.IsZero() {
			end, running = opts.Until, true
		}
		if end.After(r.Started) {
			ran += end.Sub(r.Started)
			ok = true
		}
	}
	if !ok {
		return Job{}, arrival, false, false
	}
	last := runs[len(runs)-1]
	j = Job{
		ID:       k.namespace + "/" + k.name + "@" + arrival.UTC().Format(time.RFC3339),
		Duration: max(time.Second, ran.Round(time.Second)),
		GPUs:     1, Fraction: 1,
		Priority: last.Priority,
		Team:     k.namespace,
	}
	switch s := last.Slice; s.Kind {
	case history.SliceGPU:
		j.GPUs = max(1, s.Count)
	case history.SliceMPS:
		j.Fraction = min(1, float64(max(1, s.Count))/float64(opts.Shares))
	case history.SliceMIG:
		j.Fraction = min(1, contract.MIGWeight(s.Profile)*float64(max(1, s.Count)))
	}
	return j, arrival, true, running
}

// ReadHistory reads a history store's runs of the last window before
// opts.Until (a copy of the controller's file: a live one is held) into
// jobs, as FromRuns does. Opening a store prunes it to its retention, so
// it is opened with the window's, never less than the controller's
// default: the read drops nothing the controller would have kept.
func ReadHistory(path string, window time.Duration, opts HistoryOptions) ([]Job, time.Time, HistoryStats, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, time.Time{}, HistoryStats{}, fmt.Errorf("history: %w", err)
	}
	since := opts.Until.Add(-window)
	s, err := history.Open(path, history.Options{Retention: max(window, history.DefaultRetention), Now: func() time.Time { return opts.Until }})
	if err != nil {
		return nil, time.Time{}, HistoryStats{}, fmt.Errorf("history: %w", err)
	}
	defer s.Close()
	runs, err := s.AllRuns(context.Background(), since)
	if err != nil {
		return nil, time.Time{}, HistoryStats{}, fmt.Errorf("history: %w", err)
	}
	jobs, epoch, st, err := FromRuns(runs, opts)
	if errors.Is(err, ErrNoJobs) {
		err = fmt.Errorf("history %s: no run that started since %s: %w", path, since.UTC().Format(time.RFC3339), err)
	}
	return jobs, epoch, st, err
}
