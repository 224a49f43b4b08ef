package tracereplay

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/nomad-gpu/nomad-gpu/internal/atomicfile"
)

// RealRun is what a real replay measured, kept beside its report: the
// flags that chose its sample (so the same Setup loads again), and per
// configuration the Result and the model latencies it measured. The model
// can then be run, and the report rewritten, against the measured run
// without replaying it (`bench-trace -real`).
type RealRun struct {
	Flags     []string
	Started   time.Time
	Elapsed   time.Duration
	Results   []Result
	Latencies []Latencies
}

// PlaceableBoot is the median time, wall clock, from a node's start (the
// timeline's node count rising) to its GPUs being offered (the ready GPUs
// rising): a node's boot as the scheduler sees it, device fingerprint
// included. ok is false when the run started no node after its first
// sample (a fixed cluster).
func PlaceableBoot(r Result) (d time.Duration, ok bool) {
	per := float64(r.Cluster.GPUsPerNode)
	if per <= 0 || r.Compression <= 0 || len(r.Timeline) == 0 {
		return 0, false
	}
	var started []time.Duration // nodes started and not yet offering GPUs, FIFO
	var boots []time.Duration
	prev := r.Timeline[0]
	for _, s := range r.Timeline[1:] {
		for range max(0, s.Nodes-prev.Nodes) {
			started = append(started, s.At)
		}
		for n := int((s.GPUs - prev.GPUs + per/2) / per); n > 0 && len(started) > 0; n-- {
			boots = append(boots, s.At-started[0])
			started = started[1:]
		}
		prev = s
	}
	if len(boots) == 0 {
		return 0, false
	}
	slices.Sort(boots)
	return time.Duration(float64(boots[len(boots)/2]) / r.Compression), true
}

// CommitToExit is the median, wall clock, of the work a checkpointed
// preemption's victim did after its checkpoint's commit (Reached − Saved,
// from its task's log; 0 where the log says it stopped first): the time
// from its commit to its exit. ok is false when the run has no such
// preemption.
func CommitToExit(r Result) (d time.Duration, ok bool) {
	if r.Compression <= 0 {
		return 0, false
	}
	var gaps []time.Duration
	for _, j := range r.Jobs {
		for _, run := range j.Runs {
			if run.Interrupted() && run.Checkpointed && run.ProgressKnown {
				gaps = append(gaps, max(0, run.Reached-run.Saved))
			}
		}
	}
	if len(gaps) == 0 {
		return 0, false
	}
	slices.Sort(gaps)
	return time.Duration(float64(gaps[len(gaps)/2]) / r.Compression), true
}

// RealRunFile is its file name in a report's directory.
const RealRunFile = "real-run.json.gz"

// WriteRealRun writes rr to path, gzipped JSON, atomically.
func WriteRealRun(path string, rr RealRun) error {
	if len(rr.Results) != len(rr.Latencies) {
		return fmt.Errorf("real run: %d results but %d latencies", len(rr.Results), len(rr.Latencies))
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if err := json.NewEncoder(zw).Encode(rr); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return atomicfile.Replace(path, buf.Bytes(), 0o644)
}

// ReadRealRun reads a file WriteRealRun wrote.
func ReadRealRun(path string) (RealRun, error) {
	var rr RealRun
	f, err := os.Open(path)
	if err != nil {
		return rr, err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return rr, fmt.Errorf("%s: %w", path, err)
	}
	if err := json.NewDecoder(zr).Decode(&rr); err != nil {
		return rr, fmt.Errorf("%s: %w", path, err)
	}
	if len(rr.Results) == 0 || len(rr.Results) != len(rr.Latencies) {
		return rr, fmt.Errorf("%s: %d results and %d latencies; want as many of each, at least one", path, len(rr.Results), len(rr.Latencies))
	}
	return rr, nil
}
