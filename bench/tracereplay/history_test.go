package tracereplay

import (
	"errors"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nomad-gpu/nomad-gpu/controller/sizing/history"
)

// TestFromRuns: recorded runs become jobs on hand-made examples: one job
// a piece of work (an allocation and its replacements of one submission),
// arriving at its submission, running its runs' summed time, asking for
// its slice.
func TestFromRuns(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	at := func(min float64) time.Time { return t0.Add(time.Duration(min * float64(time.Minute))) }
	key := func(ns string) history.Key { return history.Key{Namespace: ns, Job: "train", Group: "g", Task: "t"} }
	gpu := func(n int) history.Slice { return history.Slice{Kind: history.SliceGPU, Count: n} }
	runs := []history.Run{
		// Preempted after 10 minutes, replaced, 20 more: one job of 30
		// minutes arriving at its submission (2 minutes before placement).
		{Key: key("a"), AllocID: "1", Name: "train.g[0]", Slice: gpu(2), Priority: 70, Submitted: at(0), Created: at(2), Started: at(3), Finished: at(13), Outcome: history.OutcomePreempted},
		{Key: key("a"), AllocID: "2", Name: "train.g[0]", Slice: gpu(2), Priority: 70, Submitted: at(0), Created: at(14), Started: at(15), Finished: at(35), Outcome: history.OutcomeComplete},
		// The same name, submitted again: another job.
		{Key: key("a"), AllocID: "3", Name: "train.g[0]", Slice: gpu(2), Submitted: at(40), Created: at(40), Started: at(41), Finished: at(46)},
		// A run recorded before runs had names or submissions: alone,
		// arriving when placed; 2 of 8 MPS shares.
		{Key: key("b"), AllocID: "4", Slice: history.Slice{Kind: history.SliceMPS, Count: 2}, Created: at(5), Started: at(6), Finished: at(7)},
		// Named but without a submission: each alone, though they share
		// a name (which submission each ran is not known).
		{Key: key("c"), AllocID: "7", Name: "svc.g[0]", Slice: gpu(1), Created: at(20), Started: at(20), Finished: at(22)},
		{Key: key("c"), AllocID: "8", Name: "svc.g[0]", Slice: gpu(1), Created: at(30), Started: at(30), Finished: at(33)},
		// Still running at Until (minute 60): cut there; a 3g MIG slice.
		{Key: key("b"), AllocID: "5", Name: "infer.g[1]", Slice: history.Slice{Kind: history.SliceMIG, Count: 1, Profile: "3g.40gb"}, Submitted: at(50), Created: at(50), Started: at(50), Outcome: history.OutcomeRunning},
		// Never started: left out.
		{Key: key("b"), AllocID: "6", Name: "wait.g[0]", Slice: gpu(1), Submitted: at(55), Created: at(58)},
	}
	jobs, epoch, st, err := FromRuns(runs, HistoryOptions{Shares: 8, Until: at(60)})
	if err != nil {
		t.Fatal(err)
	}
	if !epoch.Equal(t0) {
		t.Errorf("epoch %v, want %v (the first arrival)", epoch, t0)
	}
	want := []struct {
		arrival, duration float64 // minutes
		gpus              int
		fraction          float64
		priority          int
		team              string
	}{
		{0, 30, 2, 1, 70, "a"},
		{5, 1, 1, 0.25, 0, "b"},
		{20, 2, 1, 1, 0, "c"},
		{30, 3, 1, 1, 0, "c"},
		{40, 5, 2, 1, 0, "a"},
		{50, 10, 1, 3.0 / 7, 0, "b"},
	}
	if len(jobs) != len(want) {
		t.Fatalf("%d jobs, want %d: %+v", len(jobs), len(want), jobs)
	}
	for i, w := range want {
		j := jobs[i]
		if j.Arrival != time.Duration(w.arrival*float64(time.Minute)) || j.Duration != time.Duration(w.duration*float64(time.Minute)) ||
			j.GPUs != w.gpus || math.Abs(j.Fraction-w.fraction) > 1e-9 || j.Priority != w.priority || j.Team != w.team {
			t.Errorf("job %d = %+v, want %+v", i, j, w)
		}
	}
	if st != (HistoryStats{Runs: 8, Jobs: 6, Unstarted: 1, Running: 1, Unsubmitted: 3}) {
		t.Errorf("stats %+v", st)
	}
	if !strings.Contains(st.Note(), "8 runs made 6 jobs") {
		t.Errorf("note %q", st.Note())
	}
}

// TestFromRunsRefuses: no MPS share count, and nothing that ran.
func TestFromRunsRefuses(t *testing.T) {
	r := history.Run{Key: history.Key{Namespace: "a", Job: "j", Group: "g", Task: "t"}, AllocID: "1", Created: time.Unix(100, 0)}
	if _, _, _, err := FromRuns([]history.Run{r}, HistoryOptions{}); err == nil || !strings.Contains(err.Error(), "history-shares") {
		t.Errorf("no shares: %v, want an error naming history-shares", err)
	}
	if _, _, _, err := FromRuns([]history.Run{r}, HistoryOptions{Shares: 8}); !errors.Is(err, ErrNoJobs) {
		t.Errorf("nothing started: %v, want ErrNoJobs", err)
	}
	if _, _, _, err := ReadHistory(filepath.Join(t.TempDir(), "missing.db"), time.Hour, HistoryOptions{Shares: 8, Until: time.Now()}); err == nil {
		t.Error("a missing history file was read")
	}
}

// TestLoadHistory: -history reads a history file's runs as the trace,
// with the note of what it made of them.
func TestLoadHistory(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sizing.db")
	s, err := history.Open(path, history.Options{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for i := range 3 {
		start := now.Add(-time.Duration(3-i) * time.Hour)
		r := history.Run{Key: history.Key{Namespace: "default", Job: "train", Group: "g", Task: "t"}, AllocID: string(rune('a' + i)),
			Name: "train.g[" + string(rune('0'+i)) + "]", Slice: history.Slice{Kind: history.SliceGPU, Count: 1}, Submitted: start,
			Created: start, Started: start, Finished: start.Add(30 * time.Minute), Outcome: history.OutcomeComplete}
		if err := s.PutRun(t.Context(), r); err != nil {
			t.Fatal(err)
		}
	}
	// Ten days old: beyond the store's default retention, within a
	// 30-day read, which must not prune it on opening.
	old := now.Add(-10 * 24 * time.Hour)
	if err := s.PutRun(t.Context(), history.Run{Key: history.Key{Namespace: "default", Job: "old", Group: "g", Task: "t"}, AllocID: "old", Name: "old.g[0]",
		Slice: history.Slice{Kind: history.SliceGPU, Count: 1}, Submitted: old, Created: old, Started: old, Finished: old.Add(time.Hour), Outcome: history.OutcomeComplete}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	p := Params{History: path, HistorySince: 30 * 24 * time.Hour, HistoryShares: 8, Compression: 1, Nodes: 4, MinNodes: 2, MaxNodes: 6,
		GPUsPerNode: 8, Configs: "baseline", Strategy: AutoscaleGPUQueue}
	if setup, err := p.Load(); err != nil || len(setup.Trace.Jobs) != 4 {
		t.Fatalf("30 days: %v, %d jobs; want 4", err, len(setup.Trace.Jobs))
	}
	p.HistorySince = 24 * time.Hour
	setup, err := p.Load()
	if err != nil {
		t.Fatal(err)
	}
	if len(setup.Trace.Jobs) != 3 || setup.Trace.Jobs[2].Arrival != 2*time.Hour || setup.Trace.Jobs[0].Duration != 30*time.Minute {
		t.Errorf("jobs %+v", setup.Trace.Jobs)
	}
	if len(setup.Notes) == 0 || !strings.Contains(setup.Notes[0], "3 runs made 3 jobs") {
		t.Errorf("notes %q", setup.Notes)
	}
	p.CSV = "x.csv"
	if _, err := p.Load(); err == nil || !strings.Contains(err.Error(), "trace, history") {
		t.Errorf("-trace and -history: %v", err)
	}
}
