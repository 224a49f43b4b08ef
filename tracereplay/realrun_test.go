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
