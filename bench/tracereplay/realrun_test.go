package tracereplay

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestRealRunRoundTrip(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, RealRunFile)
	rr := RealRun{
		Flags:   []string{"-window", "30m"},
		Started: time.Date(2026, 12, 5, 1, 0, 0, 0, time.UTC), Elapsed: time.Minute,
		Results: []Result{{Engine: "nomad", Config: Config{Name: "baseline"}, Horizon: time.Hour,
			Jobs:       []JobRecord{{ID: "a", Runs: []Run{{Start: time.Second, End: time.Minute, Node: "n", Held: []Hold{{Kind: "mps", GPU: "GPU-1", Units: 2}}}}}},
			Distortion: &Distortion{StartP50: time.Second}}},
		Latencies: []Latencies{{Start: time.Second}},
	}
	if err := WriteRealRun(path, rr); err != nil {
		t.Fatal(err)
	}
	got, err := ReadRealRun(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, rr) {
		t.Errorf("read %+v, want %+v", got, rr)
	}
	if err := WriteRealRun(path, RealRun{Results: rr.Results}); err == nil {
		t.Error("a record without latencies was written")
	}
	if err := os.WriteFile(path, []byte("not gzip"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadRealRun(path); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("reading garbage: %v, want an error naming the file", err)
	}
}

// A node started at 10s offers its GPUs at 20s, two started at 30s offer
// theirs at 50s and 70s: boots of 10s, 20s and 40s of trace time, a median
// of 20s, 1s of wall time at compression 20.
func TestPlaceableBoot(t *testing.T) {
	s := func(at, nodes int, gpus float64) Sample {
		return Sample{At: time.Duration(at) * time.Second, Nodes: nodes, GPUs: gpus}
	}
	r := Result{Cluster: Cluster{GPUsPerNode: 8}, Compression: 20, Timeline: []Sample{
		s(0, 1, 8), s(10, 2, 8), s(20, 2, 16), s(30, 4, 16), s(50, 4, 24), s(70, 4, 32),
	}}
	if d, ok := PlaceableBoot(r); !ok || d != time.Second {
		t.Errorf("PlaceableBoot = %s, %v; want 1s", d, ok)
	}
	r.Timeline = r.Timeline[:1]
	if _, ok := PlaceableBoot(r); ok {
		t.Error("a run that started no node has a boot")
	}
}

// CommitToExit is the median Reached − Saved of the checkpointed
// preemptions whose progress the run read, negative gaps as 0, in wall
// time: gaps of 0 (−1s), 10s and 30s of trace time, and runs it leaves
// out, give 10s, 0.5s at compression 20.
func TestCommitToExit(t *testing.T) {
	run := func(preempted, checkpointed, known bool, saved, reached int) Run {
		return Run{Preempted: preempted, Checkpointed: checkpointed, ProgressKnown: known,
			Saved: time.Duration(saved) * time.Second, Reached: time.Duration(reached) * time.Second}
	}
	tests := []struct {
		name string
		runs []Run
		want time.Duration
		ok   bool
	}{
		{"median", []Run{run(true, true, true, 50, 49), run(true, true, true, 50, 60), run(true, true, true, 0, 30)}, 500 * time.Millisecond, true},
		{"only checkpointed preemptions read", []Run{
			run(true, true, true, 0, 10), run(false, true, true, 0, 90), run(true, false, true, 0, 90), run(true, true, false, 0, 90),
		}, 500 * time.Millisecond, true},
		{"none", []Run{run(false, false, true, 0, 10)}, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Result{Compression: 20, Jobs: []JobRecord{{Runs: tt.runs}}}
			if d, ok := CommitToExit(r); d != tt.want || ok != tt.ok {
				t.Errorf("CommitToExit = %s, %v; want %s, %v", d, ok, tt.want, tt.ok)
			}
		})
	}
}
