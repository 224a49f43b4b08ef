package history

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

var (
	base = time.Date(2026, 10, 1, 12, 0, 0, 0, time.UTC)
	keyA = Key{Namespace: "default", Job: "train", Group: "g", Task: "t"}
	keyB = Key{Namespace: "ml", Job: "infer/v2", Group: "web", Task: "server"}
)

// clock is a settable Options.Now.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time   { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) set(t time.Time)  { c.mu.Lock(); c.t = t; c.mu.Unlock() }
func newClock(t time.Time) *clock { return &clock{t: t} }
func at(min int) time.Time        { return base.Add(time.Duration(min) * time.Minute) }
func sample(k Key, alloc string, min int) Sample {
	return Sample{Key: k, AllocID: alloc, Time: at(min), Slice: Slice{Kind: SliceMIG, Count: 1, Profile: "1g.10gb"},
		UtilPct: float64(min % 100), MemBytes: uint64(min) << 20, MemLimitBytes: 10 << 30}
}

func openTest(t *testing.T, path string, opts Options) *Store {
	t.Helper()
	if opts.Now == nil {
		opts.Now = newClock(base).now
	}
	s, err := Open(path, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func sampleMinutes(ss []Sample) []string {
	var out []string
	for _, s := range ss {
		out = append(out, fmt.Sprintf("%s@%d", s.AllocID, int(s.Time.Sub(base)/time.Minute)))
	}
	return out
}

func runAllocs(rs []Run) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.AllocID)
	}
	return out
}

func TestKeyString(t *testing.T) {
	for _, tc := range []struct {
		k    Key
		want string
	}{
		{keyA, "default/train/g/t"},
		{keyB, "ml/infer/v2/web/server"},
		{Key{}, "///"},
	} {
		if got := tc.k.String(); got != tc.want {
			t.Errorf("%#v.String() = %q, want %q", tc.k, got, tc.want)
		}
	}
}

func TestSampleEncoding(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    Sample
	}{
		{"mig", sample(keyA, "a1", 5)},
		{"gpu", Sample{Key: keyB, AllocID: "a2", Time: base, Slice: Slice{Kind: SliceGPU, Count: 8}, UtilPct: 99.5, MemBytes: 80 << 30}},
		{"empty", Sample{Key: keyA, Time: base.Add(time.Nanosecond)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := decodeSample(tc.s.Key, timeKey(tc.s.Time, tc.s.AllocID), encodeSample(tc.s))
			if err != nil {
				t.Fatal(err)
			}
			if !got.Time.Equal(tc.s.Time) {
				t.Errorf("time %v, want %v", got.Time, tc.s.Time)
			}
			got.Time = tc.s.Time
			if !reflect.DeepEqual(got, tc.s) {
				t.Errorf("round trip %+v, want %+v", got, tc.s)
			}
			enc := encodeSample(tc.s)
			if _, err := decodeSample(tc.s.Key, timeKey(tc.s.Time, ""), enc[:len(enc)-1]); !errors.Is(err, ErrCorrupt) {
				t.Errorf("truncated record: err %v, want ErrCorrupt", err)
			}
		})
	}
}

func TestSamplesRange(t *testing.T) {
	s := openTest(t, filepath.Join(t.TempDir(), "h.db"), Options{})
	ctx := context.Background()
	var in []Sample
	for _, m := range []int{30, 10, 20, 20, 40} {
		in = append(in, sample(keyA, "a1", m))
	}
	in = append(in, sample(keyA, "a0", 20), sample(keyB, "b1", 20))
	if err := s.AddSamples(ctx, in); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name         string
		k            Key
		since, until time.Time
		want         []string
	}{
		{"all", keyA, time.Time{}, time.Time{}, []string{"a1@10", "a0@20", "a1@20", "a1@30", "a1@40"}},
		{"since inclusive", keyA, at(20), time.Time{}, []string{"a0@20", "a1@20", "a1@30", "a1@40"}},
		{"until exclusive", keyA, at(10), at(30), []string{"a1@10", "a0@20", "a1@20"}},
		{"between samples", keyA, at(21), at(29), nil},
		{"other key", keyB, time.Time{}, time.Time{}, []string{"b1@20"}},
		{"unknown key", Key{"x", "y", "z", "w"}, time.Time{}, time.Time{}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := s.Samples(ctx, tc.k, tc.since, tc.until)
			if err != nil {
				t.Fatal(err)
			}
			if g := sampleMinutes(got); !reflect.DeepEqual(g, tc.want) {
				t.Errorf("got %v, want %v", g, tc.want)
			}
			for _, sm := range got {
				want := sample(tc.k, sm.AllocID, int(sm.Time.Sub(base)/time.Minute))
				if sm.Key != tc.k || sm.Slice != want.Slice || sm.UtilPct != want.UtilPct || sm.MemBytes != want.MemBytes || sm.MemLimitBytes != want.MemLimitBytes {
					t.Errorf("sample %+v, want %+v", sm, want)
				}
			}
		})
	}
	keys, err := s.Keys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := []Key{keyA, keyB}; !reflect.DeepEqual(keys, want) {
		t.Errorf("Keys = %v, want %v", keys, want)
	}
}

func TestAddSamplesValidation(t *testing.T) {
	s := openTest(t, filepath.Join(t.TempDir(), "h.db"), Options{})
	for _, tc := range []struct {
		name string
		s    Sample
		want string
	}{
		{"no task", Sample{Key: Key{Namespace: "n", Job: "j", Group: "g"}, Time: base}, "incomplete task key"},
		{"no time", Sample{Key: keyA, AllocID: "a1"}, "has no time"},
		{"nul", Sample{Key: Key{"n", "j\x00", "g", "t"}, Time: base}, "NUL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := s.AddSamples(context.Background(), []Sample{tc.s})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v, want one saying %q", err, tc.want)
			}
		})
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.AddSamples(ctx, []Sample{sample(keyA, "a", 1)}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled context: err %v", err)
	}
}

func TestMaxSamplesPerKey(t *testing.T) {
	for _, tc := range []struct {
		name    string
		max     int
		batches [][]int // minutes, a batch each
		want    []string
	}{
		{"under", 5, [][]int{{1, 2, 3}}, []string{"a@1", "a@2", "a@3"}},
		{"one batch over", 3, [][]int{{5, 1, 4, 2, 3}}, []string{"a@3", "a@4", "a@5"}},
		{"over across batches", 2, [][]int{{1, 2}, {3}, {4}}, []string{"a@3", "a@4"}},
		{"duplicate not counted", 2, [][]int{{1, 2}, {2}}, []string{"a@1", "a@2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openTest(t, filepath.Join(t.TempDir(), "h.db"), Options{MaxSamplesPerKey: tc.max})
			ctx := context.Background()
			for _, b := range tc.batches {
				var in []Sample
				for _, m := range b {
					in = append(in, sample(keyA, "a", m), sample(keyB, "b", m))
				}
				if err := s.AddSamples(ctx, in); err != nil {
					t.Fatal(err)
				}
			}
			got, err := s.Samples(ctx, keyA, time.Time{}, time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			if g := sampleMinutes(got); !reflect.DeepEqual(g, tc.want) {
				t.Errorf("kept %v, want %v", g, tc.want)
			}
			if other, _ := s.Samples(ctx, keyB, time.Time{}, time.Time{}); len(other) != len(tc.want) {
				t.Errorf("other key kept %d, want %d", len(other), len(tc.want))
			}
		})
	}
}

func TestPrune(t *testing.T) {
	ret := time.Hour
	for _, tc := range []struct {
		name        string
		now         time.Time
		wantSamples []string
		wantRuns    []string
		wantPruned  Pruned
	}{
		{"nothing old", at(60), []string{"a@0", "a@30", "a@59"}, []string{"done", "old", "running"}, Pruned{}},
		{"some old", at(60 + 30), []string{"a@30", "a@59"}, []string{"done", "running"}, Pruned{Samples: 1, Runs: 1}},
		{"boundary kept", at(60 + 59), []string{"a@59"}, []string{"done", "running"}, Pruned{Samples: 2, Runs: 1}},
		{"all old", at(60 * 24), nil, []string{"running"}, Pruned{Samples: 3, Runs: 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newClock(at(0))
			s := openTest(t, filepath.Join(t.TempDir(), "h.db"), Options{Retention: ret, Now: clk.now, PruneInterval: 24 * time.Hour})
			ctx := context.Background()
			if err := s.AddSamples(ctx, []Sample{sample(keyA, "a", 0), sample(keyA, "a", 30), sample(keyA, "a", 59)}); err != nil {
				t.Fatal(err)
			}
			for _, r := range []Run{
				{Key: keyA, AllocID: "old", Created: at(-10), Started: at(-9), Finished: at(10), Outcome: OutcomeComplete},
				{Key: keyA, AllocID: "done", Created: at(-5), Started: at(-4), Finished: at(59), Outcome: OutcomeOOM},
				{Key: keyA, AllocID: "running", Created: at(-20), Started: at(-19), Outcome: OutcomeRunning},
			} {
				if err := s.PutRun(ctx, r); err != nil {
					t.Fatal(err)
				}
			}
			p, err := s.Prune(tc.now)
			if err != nil {
				t.Fatal(err)
			}
			if p != tc.wantPruned {
				t.Errorf("pruned %+v, want %+v", p, tc.wantPruned)
			}
			got, err := s.Samples(ctx, keyA, time.Time{}, time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			if g := sampleMinutes(got); !reflect.DeepEqual(g, tc.wantSamples) {
				t.Errorf("samples %v, want %v", g, tc.wantSamples)
			}
			runs, err := s.AllRuns(ctx, time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			gotRuns := runAllocs(runs)
			// sort names for comparison: AllRuns is by Created
			want := map[string]bool{}
			for _, a := range tc.wantRuns {
				want[a] = true
			}
			if len(gotRuns) != len(want) {
				t.Errorf("runs %v, want %v", gotRuns, tc.wantRuns)
			}
			for _, a := range gotRuns {
				if !want[a] {
					t.Errorf("runs %v, want %v", gotRuns, tc.wantRuns)
				}
			}
			if tc.wantSamples == nil {
				if keys, _ := s.Keys(ctx); len(keys) != 0 {
					t.Errorf("emptied task bucket kept: %v", keys)
				}
				// the count was reset with the bucket
				if err := s.AddSamples(ctx, []Sample{sample(keyA, "a", 60*24)}); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

func TestAddSamplesPrunesPeriodically(t *testing.T) {
	clk := newClock(at(0))
	s := openTest(t, filepath.Join(t.TempDir(), "h.db"), Options{Retention: time.Hour, PruneInterval: 10 * time.Minute, Now: clk.now})
	ctx := context.Background()
	for _, step := range []struct {
		now      int // minutes
		add      int
		wantKept []string
	}{
		{0, 0, []string{"a@0"}},
		{50, 50, []string{"a@0", "a@50"}},
		{65, 65, []string{"a@50", "a@65"}}, // pruned: 65 - 0 >= interval
		{115, 115, []string{"a@65", "a@115"}},
		{120, 120, []string{"a@65", "a@115", "a@120"}}, // not due: 5 minutes since last
		{121, 0, []string{"a@65", "a@115", "a@120"}},   // too old to add
	} {
		clk.set(at(step.now))
		if err := s.AddSamples(ctx, []Sample{sample(keyA, "a", step.add)}); err != nil {
			t.Fatal(err)
		}
		got, err := s.Samples(ctx, keyA, time.Time{}, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		if g := sampleMinutes(got); !reflect.DeepEqual(g, step.wantKept) {
			t.Errorf("at %d: kept %v, want %v", step.now, g, step.wantKept)
		}
	}
}

func TestPutRunUpsert(t *testing.T) {
	s := openTest(t, filepath.Join(t.TempDir(), "h.db"), Options{})
	ctx := context.Background()
	gpu := Slice{Kind: SliceGPU, Count: 2}
	steps := []struct {
		name    string
		put     Run
		wantA   []string
		wantB   []string
		wantAll []string
	}{
		{"create a1", Run{Key: keyA, AllocID: "a1", Slice: gpu, Pool: "p", Priority: 50, Created: at(10), Outcome: OutcomeRunning},
			[]string{"a1"}, nil, []string{"a1"}},
		{"create a2 earlier", Run{Key: keyA, AllocID: "a2", Created: at(5)},
			[]string{"a2", "a1"}, nil, []string{"a2", "a1"}},
		{"create b1", Run{Key: keyB, AllocID: "b1", Created: at(7)},
			[]string{"a2", "a1"}, []string{"b1"}, []string{"a2", "b1", "a1"}},
		{"start a1", Run{Key: keyA, AllocID: "a1", Slice: gpu, Pool: "p", Priority: 50, Created: at(10), Started: at(11), Outcome: OutcomeRunning},
			[]string{"a2", "a1"}, []string{"b1"}, []string{"a2", "b1", "a1"}},
		{"recreate a2 later", Run{Key: keyA, AllocID: "a2", Created: at(20)},
			[]string{"a1", "a2"}, []string{"b1"}, []string{"b1", "a1", "a2"}},
		{"a2 moves task", Run{Key: keyB, AllocID: "a2", Created: at(20), Finished: at(30), Outcome: OutcomeLost},
			[]string{"a1"}, []string{"b1", "a2"}, []string{"b1", "a1", "a2"}},
		{"finish a1", Run{Key: keyA, AllocID: "a1", Slice: gpu, Pool: "p", Priority: 50, Created: at(10), Started: at(11), Finished: at(40), Outcome: OutcomeKilled},
			[]string{"a1"}, []string{"b1", "a2"}, []string{"b1", "a1", "a2"}},
	}
	for _, st := range steps {
		if err := s.PutRun(ctx, st.put); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		for _, c := range []struct {
			k    *Key
			want []string
		}{{&keyA, st.wantA}, {&keyB, st.wantB}, {nil, st.wantAll}} {
			var got []Run
			var err error
			if c.k != nil {
				got, err = s.Runs(ctx, *c.k, time.Time{})
			} else {
				got, err = s.AllRuns(ctx, time.Time{})
			}
			if err != nil {
				t.Fatal(err)
			}
			if g := runAllocs(got); !reflect.DeepEqual(g, c.want) {
				t.Errorf("%s: runs of %v = %v, want %v", st.name, c.k, g, c.want)
			}
		}
	}
	got, err := s.Runs(ctx, keyA, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	want := steps[len(steps)-1].put
	if len(got) != 1 || !reflect.DeepEqual(got[0], want) {
		t.Errorf("final a1 = %+v, want %+v", got, want)
	}
	for _, bad := range []Run{{Key: keyA}, {AllocID: "x"}} {
		if err := s.PutRun(ctx, bad); err == nil {
			t.Errorf("PutRun(%+v) took an invalid run", bad)
		}
	}
}

// TestPutRunKeepsSubmitted: a run's submission, once stored, survives a
// replacement that no longer knows it (the job was submitted again), and
// a replacement that knows one replaces it; Name round-trips.
func TestPutRunKeepsSubmitted(t *testing.T) {
	s := openTest(t, filepath.Join(t.TempDir(), "h.db"), Options{})
	ctx := context.Background()
	steps := []struct {
		name      string
		submitted time.Time
		want      time.Time
	}{
		{"created, submission known", at(5), at(5)},
		{"job submitted again: not known", time.Time{}, at(5)},
		{"known again", at(6), at(6)},
	}
	for _, st := range steps {
		r := Run{Key: keyA, AllocID: "a1", Name: "a.g[0]", Submitted: st.submitted, Created: at(10), Outcome: OutcomeRunning}
		if err := s.PutRun(ctx, r); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		got, err := s.Runs(ctx, keyA, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || !got[0].Submitted.Equal(st.want) || got[0].Name != "a.g[0]" {
			t.Errorf("%s: stored %+v, want submitted %v, name a.g[0]", st.name, got, st.want)
		}
	}
}

func TestRunsSince(t *testing.T) {
	s := openTest(t, filepath.Join(t.TempDir(), "h.db"), Options{})
	ctx := context.Background()
	for _, r := range []Run{
		{Key: keyA, AllocID: "early", Created: at(0), Finished: at(10), Outcome: OutcomeComplete},
		{Key: keyA, AllocID: "spans", Created: at(5), Finished: at(30), Outcome: OutcomeFailed},
		{Key: keyA, AllocID: "open", Created: at(1), Outcome: OutcomeRunning},
		{Key: keyA, AllocID: "late", Created: at(40), Finished: at(50), Outcome: OutcomeTimeout},
		{Key: keyB, AllocID: "other", Created: at(2), Finished: at(60), Outcome: OutcomePreempted},
	} {
		if err := s.PutRun(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		since   time.Time
		wantA   []string
		wantAll []string
	}{
		{time.Time{}, []string{"early", "open", "spans", "late"}, []string{"early", "open", "other", "spans", "late"}},
		{at(10), []string{"early", "open", "spans", "late"}, []string{"early", "open", "other", "spans", "late"}},
		{at(11), []string{"open", "spans", "late"}, []string{"open", "other", "spans", "late"}},
		{at(51), []string{"open"}, []string{"open", "other"}},
		{at(61), []string{"open"}, []string{"open"}},
	} {
		a, err := s.Runs(ctx, keyA, tc.since)
		if err != nil {
			t.Fatal(err)
		}
		all, err := s.AllRuns(ctx, tc.since)
		if err != nil {
			t.Fatal(err)
		}
		if g := runAllocs(a); !reflect.DeepEqual(g, tc.wantA) {
			t.Errorf("since %v: Runs = %v, want %v", tc.since, g, tc.wantA)
		}
		if g := runAllocs(all); !reflect.DeepEqual(g, tc.wantAll) {
			t.Errorf("since %v: AllRuns = %v, want %v", tc.since, g, tc.wantAll)
		}
	}
}

func TestMaxRuns(t *testing.T) {
	for _, tc := range []struct {
		name    string
		max     int
		created []int
		want    []string
	}{
		{"under", 3, []int{1, 2}, []string{"r1", "r2"}},
		{"over", 2, []int{1, 2, 3, 4}, []string{"r3", "r4"}},
		{"earliest created dropped", 2, []int{3, 1, 2}, []string{"r2", "r3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openTest(t, filepath.Join(t.TempDir(), "h.db"), Options{MaxRuns: tc.max})
			ctx := context.Background()
			for _, c := range tc.created {
				if err := s.PutRun(ctx, Run{Key: keyA, AllocID: fmt.Sprintf("r%d", c), Created: at(c)}); err != nil {
					t.Fatal(err)
				}
				// an upsert does not count twice
				if err := s.PutRun(ctx, Run{Key: keyA, AllocID: fmt.Sprintf("r%d", c), Created: at(c), Started: at(c)}); err != nil {
					t.Fatal(err)
				}
			}
			got, err := s.AllRuns(ctx, time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			if g := runAllocs(got); !reflect.DeepEqual(g, tc.want) {
				t.Errorf("kept %v, want %v", g, tc.want)
			}
			if byKey, _ := s.Runs(ctx, keyA, time.Time{}); !reflect.DeepEqual(runAllocs(byKey), tc.want) {
				t.Errorf("per-task index kept %v, want %v", runAllocs(byKey), tc.want)
			}
		})
	}
}

func TestReopenPersists(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nested", "dir", "h.db")
	ctx := context.Background()
	run := Run{Key: keyB, AllocID: "b1", Slice: Slice{Kind: SliceMPS, Count: 3}, Pool: "gpu", Priority: 70,
		Created: at(1), Started: at(2), Finished: at(3), Outcome: OutcomeComplete}
	s, err := Open(path, Options{Now: newClock(base).now})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.AddSamples(ctx, []Sample{sample(keyA, "a", 1), sample(keyA, "a", 2)}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutRun(ctx, run); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for _, check := range []struct {
		path string
		mode os.FileMode
	}{{path, 0o600}, {filepath.Dir(path), 0o700 | os.ModeDir}} {
		fi, err := os.Stat(check.path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != check.mode {
			t.Errorf("%s mode %v, want %v", check.path, fi.Mode(), check.mode)
		}
	}
	s = openTest(t, path, Options{MaxSamplesPerKey: 2})
	if s.Path() != path {
		t.Errorf("Path() = %q, want %q", s.Path(), path)
	}
	got, err := s.Samples(ctx, keyA, time.Time{}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if g := sampleMinutes(got); !reflect.DeepEqual(g, []string{"a@1", "a@2"}) {
		t.Errorf("samples after reopen %v", g)
	}
	runs, err := s.Runs(ctx, keyB, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 1 || !reflect.DeepEqual(runs[0], run) {
		t.Errorf("runs after reopen %+v, want %+v", runs, run)
	}
	// the persisted count bounds the key with the new option
	if err := s.AddSamples(ctx, []Sample{sample(keyA, "a", 3)}); err != nil {
		t.Fatal(err)
	}
	got, _ = s.Samples(ctx, keyA, time.Time{}, time.Time{})
	if g := sampleMinutes(got); !reflect.DeepEqual(g, []string{"a@2", "a@3"}) {
		t.Errorf("samples after bound %v", g)
	}
}

func TestOpenRefusesFormat(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(tx *bolt.Tx) error
		want  []string
	}{
		{"newer", func(tx *bolt.Tx) error {
			b, _ := tx.CreateBucket(bucketMeta)
			return b.Put(metaFormat, binary.BigEndian.AppendUint32(nil, FormatVersion+1))
		}, []string{"format version 2", "newer", "upgrade"}},
		{"older", func(tx *bolt.Tx) error {
			b, _ := tx.CreateBucket(bucketMeta)
			return b.Put(metaFormat, binary.BigEndian.AppendUint32(nil, 0))
		}, []string{"format version 0", "older"}},
		{"foreign bbolt file", func(tx *bolt.Tx) error {
			_, err := tx.CreateBucket([]byte("allocations"))
			return err
		}, []string{"not a history file"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "h.db")
			db, err := bolt.Open(path, 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := db.Update(tc.setup); err != nil {
				t.Fatal(err)
			}
			_ = db.Close()
			s, err := Open(path, Options{})
			if err == nil {
				_ = s.Close()
				t.Fatal("Open took the file")
			}
			if !errors.Is(err, ErrFormat) {
				t.Errorf("err %v, want ErrFormat", err)
			}
			for _, w := range append(tc.want, path) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("err %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestOpenInUse(t *testing.T) {
	path := filepath.Join(t.TempDir(), "h.db")
	_ = openTest(t, path, Options{})
	start := time.Now()
	s, err := Open(path, Options{OpenTimeout: 100 * time.Millisecond})
	if err == nil {
		_ = s.Close()
		t.Fatal("second Open took a held file")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("second Open took %v", d)
	}
	t.Log(err)
	if !errors.Is(err, ErrInUse) {
		t.Errorf("err %v, want ErrInUse", err)
	}
	for _, w := range []string{path, "in use", fmt.Sprintf("pid %d", os.Getpid())} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("err %q lacks %q", err, w)
		}
	}
}

// TestOpenInUseByOtherProcess holds the file in a child process (this test
// binary, running holdHelper) and checks the error names it.
func TestOpenInUseByOtherProcess(t *testing.T) {
	path := filepath.Join(t.TempDir(), "h.db")
	cmd := exec.Command(os.Args[0], "-test.run=^TestHoldHelper$")
	cmd.Env = append(os.Environ(), "HISTORY_HOLD_PATH="+path)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = stdin.Close(); _ = cmd.Wait() }()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "held\n" {
		t.Fatalf("helper said %q, %v", line, err)
	}
	s, err := Open(path, Options{OpenTimeout: 200 * time.Millisecond})
	if err == nil {
		_ = s.Close()
		t.Fatal("Open took a file another process holds")
	}
	t.Log(err)
	for _, w := range []string{path, "in use", fmt.Sprintf("pid %d (", cmd.Process.Pid)} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("err %q lacks %q", err, w)
		}
	}
	if !errors.Is(err, ErrInUse) {
		t.Errorf("err %v, want ErrInUse", err)
	}
}

// TestHoldHelper is the child of TestOpenInUseByOtherProcess: it holds the
// file until its stdin closes.
func TestHoldHelper(t *testing.T) {
	path := os.Getenv("HISTORY_HOLD_PATH")
	if path == "" {
		t.Skip("helper for TestOpenInUseByOtherProcess")
	}
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	fmt.Println("held")
	_, _ = io.Copy(io.Discard, os.Stdin)
}

func TestOpenCorrupt(t *testing.T) {
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"garbage", []byte(strings.Repeat("not a bbolt file\n", 1024))},
		{"short", []byte("x")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "h.db")
			if err := os.WriteFile(path, tc.data, 0o600); err != nil {
				t.Fatal(err)
			}
			s, err := Open(path, Options{})
			if err == nil {
				_ = s.Close()
				t.Fatal("Open took a corrupt file")
			}
			if !strings.Contains(err.Error(), path) {
				t.Errorf("err %q does not name %s", err, path)
			}
			t.Log(err)
		})
	}
	if _, err := Open("", Options{}); err == nil {
		t.Error("Open took an empty path")
	}
}

func BenchmarkAddSamples(b *testing.B) {
	s, err := Open(filepath.Join(b.TempDir(), "h.db"), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	batch := make([]Sample, 1000)
	for i := range batch {
		batch[i] = Sample{Key: Key{"default", fmt.Sprintf("job%d", i), "g", "t"}, AllocID: fmt.Sprintf("alloc-%d", i),
			Slice: Slice{Kind: SliceGPU, Count: 1}, UtilPct: 50, MemBytes: 1 << 30, MemLimitBytes: 16 << 30}
	}
	now := time.Now()
	for n := 0; b.Loop(); n++ {
		for i := range batch {
			batch[i].Time = now.Add(time.Duration(n) * time.Second)
		}
		if err := s.AddSamples(ctx, batch); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(batch)), "samples/op")
}
