package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nomad-gpu/nomad-gpu/bench/tracereplay/report"
	"github.com/nomad-gpu/nomad-gpu/controller/sizing/history"
)

const benchTraceCSV = `id,arrival_s,duration_s,gpus,gpu_fraction,priority
a,0,600,1,,30
b,60,1200,2,,80
c,120,300,1,0.25,50
`

// benchTraceFile writes benchTraceCSV into a new directory, returned
// with the file's path.
func benchTraceFile(t *testing.T) (dir, trace string) {
	t.Helper()
	dir = t.TempDir()
	trace = filepath.Join(dir, "trace.csv")
	if err := os.WriteFile(trace, []byte(benchTraceCSV), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, trace
}

func TestBenchTrace(t *testing.T) {
	dir, trace := benchTraceFile(t)
	out := filepath.Join(dir, "report")
	var stdout, stderr bytes.Buffer
	if rc := runBenchTrace([]string{"-trace", trace, "-window", "0", "-nodes", "1", "-min-nodes", "1", "-max-nodes", "2", "-out", out}, &stdout, &stderr); rc != 0 {
		t.Fatalf("exit %d: %s", rc, stderr.String())
	}
	report, err := os.ReadFile(filepath.Join(out, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"baseline", "nomad-gpu", "wait p95", "model-wait-cdf.png"} {
		if !strings.Contains(string(report), want) {
			t.Errorf("report.md lacks %q", want)
		}
	}

	stdout.Reset()
	if rc := runBenchTrace([]string{"-trace", trace, "-window", "0", "-convert", "-"}, &stdout, &stderr); rc != 0 {
		t.Fatalf("convert: exit %d: %s", rc, stderr.String())
	}
	if lines := strings.Count(stdout.String(), "\n"); lines != 4 || !strings.HasPrefix(stdout.String(), "id,") {
		t.Errorf("convert wrote %d lines:\n%s", lines, stdout.String())
	}

	for args, want := range map[string]string{
		"-trace " + trace + " -configs fast": `configs: "fast" is not a configuration`,
		"-trace " + trace + " -mps-shares 1": "mps_shares: 1; allowed: 2 to 48",
		"-trace /nonexistent.csv":            "trace: open /nonexistent.csv",
	} {
		stderr.Reset()
		if rc := runBenchTrace(strings.Fields(args), &stdout, &stderr); rc != 2 || !strings.Contains(stderr.String(), want) {
			t.Errorf("%s: exit %d, stderr %q; want 2 and %q", args, rc, stderr.String(), want)
		}
	}
}

// A sweep of the small trace: windows of 2m every 1m from 0 to its last
// arrival (120 s) hold a, a–b–c and b–c: three windows, none empty.
func TestBenchTraceSweep(t *testing.T) {
	dir, trace := benchTraceFile(t)
	out := filepath.Join(dir, "sweep")
	base := []string{"-trace", trace, "-window", "2m", "-nodes", "1", "-min-nodes", "1", "-max-nodes", "2", "-configs", "baseline,nomad-gpu-fixed"}
	var stdout, stderr bytes.Buffer
	if rc := runBenchTrace(append(base, "-sweep", "1m", "-out", out), &stdout, &stderr); rc != 0 {
		t.Fatalf("exit %d: %s", rc, stderr.String())
	}
	report, err := os.ReadFile(filepath.Join(out, sweepFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"3 windows modelled, 0 holding no job skipped", "| figure | baseline | nomad-gpu-fixed |", "wait mean, every job of every window"} {
		if !strings.Contains(string(report), want) {
			t.Errorf("%s lacks %q:\n%s", sweepFile, want, report)
		}
	}

	for _, tc := range []struct{ args, want string }{
		{"-sweep -1h", "sweep: -1h0m0s; allowed: 0 (one window) or a positive step"},
		{"-sweep 1h -window 0", "sweep: 1h0m0s with window 0s"},
		{"-sweep 1h -start 10m", "sweep, start: both given"},
		{"-sweep 1h -busiest-min-gpus 4", "sweep, busiest-min-gpus: both given"},
		{"-sweep 1h -convert x.csv", "sweep, convert: both given"},
		{"-sweep 1h -real x.json.gz", "sweep, real: both given"},
		{"-sweep 1h -configs +queues,alone -teams a=1,b=1", "sweep, configs: alone"},
	} {
		stderr.Reset()
		if rc := runBenchTrace(append(slices.Clone(base), strings.Fields(tc.args)...), &stdout, &stderr); rc != 2 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%s: exit %d, stderr %q; want 2 and %q", tc.args, rc, stderr.String(), tc.want)
		}
	}
}

// A frontier of the small trace on 1 to 2 nodes: every configuration at
// each size, read against baseline on -nodes; flags it cannot honour
// exit 2 naming them.
func TestBenchTraceFrontier(t *testing.T) {
	dir, trace := benchTraceFile(t)
	out := filepath.Join(dir, "frontier")
	base := []string{"-trace", trace, "-nodes", "1", "-min-nodes", "1", "-max-nodes", "2", "-configs", "baseline,nomad-gpu-fixed,nomad-gpu"}
	var stdout, stderr bytes.Buffer
	if rc := runBenchTrace(append(slices.Clone(base), "-frontier", "1:2", "-out", out), &stdout, &stderr); rc != 0 {
		t.Fatalf("exit %d: %s", rc, stderr.String())
	}
	md, err := os.ReadFile(filepath.Join(out, frontierFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Reference: baseline on 1 node,", "| baseline | at most 29.3 | at most 1.00× |", "| nomad-gpu-fixed |", "| nomad-gpu | 2 ", "(" + report.FrontierPlot + ")"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("%s lacks %q:\n%s", frontierFile, want, md)
		}
	}
	if _, err := os.Stat(filepath.Join(out, report.FrontierPlot)); err != nil {
		t.Error(err)
	}
	// With -sweep, the three windows of TestBenchTraceSweep, pooled.
	if rc := runBenchTrace(append(slices.Clone(base), "-frontier", "1:2", "-sweep", "1m", "-window", "2m", "-out", out), &stdout, &stderr); rc != 0 {
		t.Fatalf("sweep: exit %d: %s", rc, stderr.String())
	}
	if md, err = os.ReadFile(filepath.Join(out, frontierFile)); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Pooled over 3 windows", "| baseline | 1 * |", " | – | "} {
		if !strings.Contains(string(md), want) {
			t.Errorf("pooled %s lacks %q:\n%s", frontierFile, want, md)
		}
	}
	for _, tc := range []struct{ args, want string }{
		{"-frontier 3", `frontier: "3"; allowed: lo:hi`},
		{"-frontier 2:1", `frontier: "2:1"; allowed`},
		{"-frontier 0:2", `frontier: "0:2"; allowed`},
		{"-frontier 1:2 -sweep -1h", "sweep: -1h0m0s; allowed"},
		{"-frontier 1:2 -real x.json.gz", "frontier, real: both given"},
		{"-frontier 1:2 -configs nomad-gpu-fixed", "frontier, configs: no baseline"},
		{"-frontier 1:2 -configs baseline,+autoscale,fixed-like-autoscale", "frontier, configs: fixed-like-autoscale"},
		{"-frontier 1:2 -configs baseline,nomad-gpu-fixed@3", "frontier, configs: nomad-gpu-fixed@3"},
	} {
		stderr.Reset()
		if rc := runBenchTrace(append(slices.Clone(base), strings.Fields(tc.args)...), &stdout, &stderr); rc != 2 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%s: exit %d, stderr %q; want 2 and %q", tc.args, rc, stderr.String(), tc.want)
		}
	}
}

// nomad-gpu-spot in a report, a sweep and a frontier: its node-hours by
// kind and its reclaims where cost and lost work are, and its flags'
// errors naming them.
func TestBenchTraceSpot(t *testing.T) {
	dir, trace := benchTraceFile(t)
	base := []string{"-trace", trace, "-nodes", "2", "-min-nodes", "1", "-max-nodes", "3", "-spot-reclaim-rate", "2", "-price-spot", "20"}
	var stdout, stderr bytes.Buffer
	for _, tc := range []struct {
		args []string
		file string
		want []string
	}{
		{[]string{"-window", "0", "-configs", "baseline,nomad-gpu,nomad-gpu-spot"}, "report.md",
			[]string{"| nomad-gpu-spot |", "burst nodes spot (reclaims: 2 a node-hour)", "| node-hours spot |", "| node-hours on demand |",
				"| spot reclaims (runs stopped) |", "| lost GPU-hours to spot reclaims |", "Spot node-hours are priced at 20"}},
		{[]string{"-window", "2m", "-sweep", "1m", "-configs", "baseline,nomad-gpu-spot"}, sweepFile,
			[]string{"| node-hours spot |", "cost (55 reserved, 98 on demand, 20 spot a node-hour)", "| cost per useful GPU-hour |", "| spot reclaims (runs stopped) |"}},
		{[]string{"-window", "0", "-frontier", "1:3", "-configs", "baseline,nomad-gpu-spot"}, frontierFile,
			[]string{"| nomad-gpu-spot | 3 ", "spot node-hours | spot reclaims |", "20 spot (spot nodes reclaimed at 2 a node-hour)"}},
	} {
		out := filepath.Join(dir, strings.TrimSuffix(tc.file, ".md"))
		if rc := runBenchTrace(append(slices.Concat(base, tc.args), "-out", out), &stdout, &stderr); rc != 0 {
			t.Fatalf("%v: exit %d: %s", tc.args, rc, stderr.String())
		}
		md, err := os.ReadFile(filepath.Join(out, tc.file))
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range tc.want {
			if !strings.Contains(string(md), want) {
				t.Errorf("%s lacks %q:\n%s", tc.file, want, md)
			}
		}
	}
	// Without a spot configuration, none of it.
	out := filepath.Join(dir, "plain")
	if rc := runBenchTrace(slices.Concat(base, []string{"-window", "0", "-configs", "baseline,nomad-gpu", "-out", out}), &stdout, &stderr); rc != 0 {
		t.Fatalf("exit %d: %s", rc, stderr.String())
	}
	if md, err := os.ReadFile(filepath.Join(out, "report.md")); err != nil || strings.Contains(string(md), "spot") {
		t.Errorf("a report without spot nodes mentions them (%v):\n%s", err, md)
	}
	for _, tc := range []struct{ args, want string }{
		{"-price-spot -1", "price-spot: -1; allowed: 0 or more"},
		{"-spot-reclaim-rate -1", "spot-reclaim-rate: -1; allowed: 0 (never) or more reclaims per spot node-hour"},
		{"-configs baseline,nomad-gpu-spot -strategy target-value", "strategy: spot: on without checkpoints or gpu-queue"},
	} {
		stderr.Reset()
		if rc := runBenchTrace(append([]string{"-trace", trace, "-window", "0"}, strings.Fields(tc.args)...), &stdout, &stderr); rc != 2 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%s: exit %d, stderr %q; want 2 and %q", tc.args, rc, stderr.String(), tc.want)
		}
	}
}

// The purchase question on the small trace, 1 to 2 nodes: each
// configuration's cheapest cluster for the wait promised, modelled on
// every reserved base and maximum; flags it cannot honour exit 2 naming
// them.
func TestBenchTracePurchase(t *testing.T) {
	dir, trace := benchTraceFile(t)
	out := filepath.Join(dir, "purchase")
	base := []string{"-trace", trace, "-nodes", "1", "-min-nodes", "1", "-max-nodes", "2", "-configs", "baseline,nomad-gpu-fixed,nomad-gpu"}
	var stdout, stderr bytes.Buffer
	if rc := runBenchTrace(append(slices.Clone(base), "-frontier", "1:2", "-purchase", "1h", "-out", out), &stdout, &stderr); rc != 0 {
		t.Fatalf("exit %d: %s", rc, stderr.String())
	}
	md, err := os.ReadFile(filepath.Join(out, purchaseFile))
	if err != nil {
		t.Fatal(err)
	}
	// 2 fixed sizes each for baseline and nomad-gpu-fixed, 3 pools
	// (1–1, 1–2, 2–2) for nomad-gpu: 7 modelled.
	for _, want := range []string{"for a mean wait of 1h 00m", "7 modelled", "| baseline | yes | 1 reserved node |", "| nomad-gpu | yes |", "stock Nomad's cheapest cluster is 1 reserved node (baseline)"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("%s lacks %q:\n%s", purchaseFile, want, md)
		}
	}
	if !strings.Contains(stdout.String(), "nomad-gpu's is") {
		t.Errorf("stdout lacks the verdict: %q", stdout.String())
	}
	// With -sweep: one cluster bought for the three windows of 2m every
	// 1m, each modelled on the 7 clusters, pooled.
	if rc := runBenchTrace(append(slices.Clone(base), "-window", "2m", "-sweep", "1m", "-frontier", "1:2", "-purchase", "1h", "-out", out), &stdout, &stderr); rc != 0 {
		t.Fatalf("sweep: exit %d: %s", rc, stderr.String())
	}
	if md, err = os.ReadFile(filepath.Join(out, purchaseFile)); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"A window of 2m0s every 1m0s", "21 modelled", "One cluster is bought for all 3 windows", "| baseline | yes | 1 reserved node |"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("sweep: %s lacks %q:\n%s", purchaseFile, want, md)
		}
	}
	// Without -configs: purchaseConfigs, not the report's defaults (whose
	// fixed-like-autoscale no size can be set for).
	if rc := runBenchTrace([]string{"-trace", trace, "-frontier", "1:2", "-purchase", "1h", "-out", out}, &stdout, &stderr); rc != 0 {
		t.Fatalf("default configs: exit %d: %s", rc, stderr.String())
	}
	if md, err = os.ReadFile(filepath.Join(out, purchaseFile)); err != nil || strings.Count(string(md), "\n| ") != 1+len(strings.Split(purchaseConfigs, ",")) {
		t.Errorf("default configs: want a row each of %s (%v):\n%s", purchaseConfigs, err, md)
	}
	for _, tc := range []struct{ args, want string }{
		{"-purchase 10m", "purchase: no -frontier"},
		{"-frontier 1:2 -purchase -1m", "purchase: -1m0s; allowed"},
		{"-frontier 1:2 -purchase 10m -sweep 1m -start 1m", "sweep, start: both given"},
	} {
		stderr.Reset()
		if rc := runBenchTrace(append(slices.Clone(base), strings.Fields(tc.args)...), &stdout, &stderr); rc != 2 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%s: exit %d, stderr %q; want 2 and %q", tc.args, rc, stderr.String(), tc.want)
		}
	}
}

// The purchase question on a recorded history, day by day: one 1-GPU run
// of an hour a day for three days, each day a window of its own, one
// cluster bought for all of them.
func TestBenchTracePurchaseHistorySweep(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sizing.db")
	s, err := history.Open(path, history.Options{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for day := range 3 {
		start := now.Add(-time.Duration(3-day)*24*time.Hour + time.Hour)
		r := history.Run{Key: history.Key{Namespace: "default", Job: "train", Group: "g", Task: "t"}, AllocID: strconv.Itoa(day),
			Name: "train.g[0]", Slice: history.Slice{Kind: history.SliceGPU, Count: 1}, Submitted: start,
			Created: start, Started: start, Finished: start.Add(time.Hour), Outcome: history.OutcomeComplete}
		if err := s.PutRun(t.Context(), r); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "purchase")
	var stdout, stderr bytes.Buffer
	args := []string{"-history", path, "-history-since", "96h", "-window", "24h", "-sweep", "24h", "-load", "0", "-nodes", "1", "-min-nodes", "1",
		"-frontier", "1:2", "-purchase", "10m", "-configs", "baseline,nomad-gpu-fixed", "-out", out}
	if rc := runBenchTrace(args, &stdout, &stderr); rc != 0 {
		t.Fatalf("exit %d: %s", rc, stderr.String())
	}
	md, err := os.ReadFile(filepath.Join(out, purchaseFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"One cluster is bought for all 3 windows", "| baseline | yes | 1 reserved node |", "| nomad-gpu-fixed | yes | 1 reserved node |"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("%s lacks %q:\n%s", purchaseFile, want, md)
		}
	}
}
