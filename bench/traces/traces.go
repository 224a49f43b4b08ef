// Package traces carries the job traces that tests, benchmarks and
// `bench-trace` replay, embedded, so that a clone or a built
// binary needs no file from elsewhere. Their licences and attribution are
// in README.md beside them.
package traces

import (
	"bytes"
	"compress/gzip"
	"io"

	_ "embed"
)

// PhillyName names the embedded Philly extract in reports.
const PhillyName = "traces/philly.csv.gz"

//go:embed philly.csv.gz
var phillyGzip []byte

// Philly returns the Philly extract (philly.csv, CC-BY-4.0; see README.md)
// as CSV.
func Philly() io.ReadCloser {
	r, err := gzip.NewReader(bytes.NewReader(phillyGzip))
	if err != nil {
		// The embedded file is part of the build: a bad one is a broken build.
		panic("traces: embedded " + PhillyName + ": " + err.Error())
	}
	return r
}
