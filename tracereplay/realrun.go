package tracereplay

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/nomad-gpu/nomad-gpu/internal/atomicfile"
)

// RealRun is what a real replay measured, kept beside its report: the
// flags that chose its sample (so the same Setup loads again), and per
// configuration the Result and the model latencies it measured. The model
// can then be run, and the report rewritten, against the measured run
// without replaying it (`nomad-gpu bench-trace -real`).
type RealRun struct {
	Flags     []string
	Started   time.Time
	Elapsed   time.Duration
	Results   []Result
	Latencies []Latencies
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
