// Command testreport reads `go test -json` on stdin and writes what a plain
// `go test` would (each package's result line, the output of failed tests,
// build errors), then one line for every skipped test saying why: without
// -v, go test hides skips, and a test that quietly stopped running looks
// like one that passes. It exits 1 when a test, a package or a build
// failed. `make test` pipes both of its go test runs through it.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"
)

func main() {
	r, err := report(os.Stdin, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testreport:", err)
		os.Exit(2)
	}
	if r.failed {
		os.Exit(1)
	}
}

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action     string
	Package    string
	Test       string
	Output     string
	ImportPath string // build-output and build-fail
}

type testID struct{ pkg, test string }

// Skip is one skipped test and why.
type Skip struct {
	Package, Test, Reason string
}

type result struct {
	failed bool
	skips  []Skip
}

func report(in io.Reader, out io.Writer) (result, error) {
	var res result
	w := out                      // unbuffered: a long run shows each package as it ends
	open := map[testID][]string{} // output of tests that have not ended
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			// Not test2json: go vet or the go command speaking.
			fmt.Fprintf(w, "%s\n", line)
			continue
		}
		id := testID{e.Package, e.Test}
		switch e.Action {
		case "build-output":
			io.WriteString(w, e.Output)
		case "build-fail":
			res.failed = true
		case "output":
			if e.Test == "" {
				if strings.TrimSpace(e.Output) != "PASS" {
					io.WriteString(w, e.Output)
				}
				continue
			}
			open[id] = append(open[id], e.Output)
		case "fail":
			res.failed = true
			if e.Test == "" {
				// A package that failed with tests still open (a
				// timeout, a panic): their output says where.
				for _, k := range sortedOpen(open, e.Package) {
					writeTestOutput(w, open[k])
					delete(open, k)
				}
				continue
			}
			writeTestOutput(w, open[id])
			delete(open, id)
		case "skip":
			if e.Test != "" {
				res.skips = append(res.skips, Skip{e.Package, e.Test, skipReason(open[id])})
			}
			delete(open, id)
		case "pass":
			delete(open, id)
		}
	}
	if err := sc.Err(); err != nil {
		return res, err
	}
	writeSkips(w, res.skips)
	return res, nil
}

func sortedOpen(open map[testID][]string, pkg string) []testID {
	var ks []testID
	for k := range open {
		if k.pkg == pkg {
			ks = append(ks, k)
		}
	}
	sort.Slice(ks, func(i, j int) bool { return ks[i].test < ks[j].test })
	return ks
}

// writeTestOutput writes a test's output as go test without -v shows a
// failed test: its logs and result line, not the run markers.
func writeTestOutput(w io.Writer, lines []string) {
	for _, l := range lines {
		t := strings.TrimSpace(l)
		if strings.HasPrefix(t, "=== RUN") || strings.HasPrefix(t, "=== PAUSE") || strings.HasPrefix(t, "=== CONT") || strings.HasPrefix(t, "=== NAME") {
			continue
		}
		io.WriteString(w, l)
	}
}

// logPrefix is the file:line a test log starts with.
var logPrefix = regexp.MustCompile(`^[\w.\-]+\.go:\d+: `)

// skipReason is the first log line of a skipped test after its --- SKIP
// line (where t.Skip's message goes), without its file:line; else its
// last log line.
func skipReason(lines []string) string {
	var logs []string
	after := -1
	for _, l := range lines {
		t := strings.TrimSpace(l)
		switch {
		case t == "" || strings.HasPrefix(t, "=== "):
		case strings.HasPrefix(t, "--- SKIP"):
			after = len(logs)
		case strings.HasPrefix(t, "--- "):
		default:
			logs = append(logs, logPrefix.ReplaceAllString(t, ""))
		}
	}
	switch {
	case after >= 0 && after < len(logs):
		return logs[after]
	case len(logs) > 0:
		return logs[len(logs)-1]
	}
	return "(no reason given)"
}

func writeSkips(w io.Writer, skips []Skip) {
	if len(skips) == 0 {
		fmt.Fprintln(w, "\nno test skipped")
		return
	}
	sort.Slice(skips, func(i, j int) bool {
		if skips[i].Package != skips[j].Package {
			return skips[i].Package < skips[j].Package
		}
		return skips[i].Test < skips[j].Test
	})
	req := os.Getenv("NOMAD_GPU_REQUIRE")
	if req == "" {
		req = "unset"
	}
	fmt.Fprintf(w, "\n%d tests skipped (NOMAD_GPU_REQUIRE %s):\n", len(skips), req)
	for _, s := range skips {
		fmt.Fprintf(w, "  SKIP %s %s: %s\n", shortPackage(s.Package), s.Test, s.Reason)
	}
}

// shortPackage drops the module path, which every package shares.
func shortPackage(p string) string {
	return strings.TrimPrefix(p, "github.com/nomad-gpu/nomad-gpu/")
}
