package report

import (
	"image/png"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nomad-gpu/nomad-gpu/bench/tracereplay"
	"github.com/nomad-gpu/nomad-gpu/bench/tracereplay/figures"
	"github.com/nomad-gpu/nomad-gpu/bench/tracereplay/model"
	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/internal/snapshot"
)

const h = time.Hour

func TestHuman(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{0, "0s"},
		{2500 * time.Millisecond, "2.5s"},
		{45 * time.Second, "45s"},
		{59700 * time.Millisecond, "1m 00s"},
		{14*time.Minute + 5*time.Second, "14m 05s"},
		{59*time.Minute + 59*time.Second + 600*time.Millisecond, "1h 00m"},
		{1*h + 2*time.Minute + 29*time.Second, "1h 02m"},
		{26*h + 3*time.Minute, "26h 03m"},
		{-90 * time.Second, "-1m 30s"},
	} {
		if got := Human(tc.d); got != tc.want {
			t.Errorf("Human(%v) = %q, want %q", tc.d, got, tc.want)
		}
	}
}

func rowNamed(t *testing.T, name string) row {
	t.Helper()
	i := slices.IndexFunc(rows, func(r row) bool { return r.name == name })
	if i < 0 {
		t.Fatalf("no row %q", name)
	}
	return rows[i]
}

// The calibration rule, per kind of figure: shares by their difference
// in points; counts relative to max(real, 10); durations to max(real,
// 60 s); GPU-hours, node-hours and cost to max(real, 1). A real 0 is
// compared like any other value, and so is a model 0.
func TestCalibrationError(t *testing.T) {
	for _, tc := range []struct {
		name string
		k    kind
		m, r float64
		want float64
	}{
		{"share: points", percent, 0.612, 0.581, 0.031},
		{"share: points, not relative, near 0", percent, 0.002, 0.001, 0.001},
		{"share: real 0", percent, 0.05, 0, 0.05},
		{"share: model 0", percent, 0, 0.05, 0.05},
		{"count above its floor: relative", count, 21, 20, 0.05},
		{"count below its floor: over 10", count, 2, 1, 0.1},
		{"count: real 0", count, 3, 0, 0.3},
		{"count: model 0", count, 0, 4, 0.4},
		{"count: both 0", count, 0, 0, 0},
		{"duration above its floor: relative", duration, 845, 755, 90.0 / 755},
		{"duration below its floor: over 60 s", duration, 46, 21, 25.0 / 60},
		{"duration: real 0", duration, 45, 0, 0.75},
		{"duration: model 0", duration, 0, 120, 1},
		{"wall clock is a duration", wall, 0.2, 0.1, 0.1 / 60},
		{"amount above its floor: relative", amount, 30, 40, 0.25},
		{"amount below its floor: over 1", amount, 0.2, 0.06, 0.14},
		{"amount: real 0", amount, 1.2, 0, 1.2},
		{"amount: model 0", amount, 0, 0.06, 0.06},
	} {
		if got := calibrationError(tc.k, tc.m, tc.r); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("%s: calibrationError(%v, %v) = %v, want %v", tc.name, tc.m, tc.r, got, tc.want)
		}
	}
}

// Each figure is of the kind the rule needs, so that the rule above is
// the one applied to it.
func TestRowKinds(t *testing.T) {
	for _, tc := range []struct {
		row  string
		want kind
	}{
		{"GPU useful allocation", percent},
		{"fragmentation (FGD) of capacity", percent},
		{"wait mean", duration},
		{"JCT mean (common jobs)", duration},
		{"unstarted", count},
		{"done / jobs", count},
		{"layout changes to whole", count},
		{"peak nodes", count},
		{"re-wait hours", amount},
		{"lost GPU-hours", amount},
		{"moving GPU-hours", amount},
		{"node-hours", amount},
		{"cost", amount},
		{"cost per useful GPU-hour", amount},
	} {
		if got := rowNamed(t, tc.row).kind; got != tc.want {
			t.Errorf("%s: kind %d, want %d", tc.row, got, tc.want)
		}
	}
}

func TestCalibrationCells(t *testing.T) {
	for _, tc := range []struct {
		row  string
		m, r Figures
		want string
	}{
		{"GPU allocated", Figures{AllocUtil: 0.612}, Figures{AllocUtil: 0.581}, "61.2 % (±3.1 pp)"},
		{"fragmentation (FGD) of capacity", Figures{FragCapacity: 0.05}, Figures{}, "5.0 % (±5.0 pp)"},
		{"wait p95", Figures{Wait: figures.Dist{P95: 14*time.Minute + 5*time.Second}}, Figures{Wait: figures.Dist{P95: 755 * time.Second}}, "14m 05s (±12 %)"},
		{"wait mean", Figures{Wait: figures.Dist{Mean: 45 * time.Second}}, Figures{}, "45s (±75 %)"},
		{"preemptions", Figures{Preemptions: 21}, Figures{Preemptions: 20}, "21 (±5.0 %)"},
		{"unstarted", Figures{Unstarted: 3}, Figures{}, "3 (±30 %)"},
		{"lost GPU-hours", Figures{LostGPUHours: 1.2}, Figures{}, "1.20 (±120 %)"},
		{"node-hours", Figures{NodeHours: 30}, Figures{NodeHours: 40}, "30.0 (±25 %)"},
		{"done / jobs", Figures{Done: 270, Jobs: 300}, Figures{Done: 300, Jobs: 300}, "270 / 300 (±10 %)"},
		{"preempting placements", Figures{PreemptingPlacements: 30, PreemptingPlacementsKnown: true}, Figures{PreemptingPlacements: 25, PreemptingPlacementsKnown: true}, "30 (±20 %)"},
		// A real run recorded before the figure existed is not a 0.
		{"preempting placements", Figures{PreemptingPlacements: 30, PreemptingPlacementsKnown: true}, Figures{}, "30 (real: not recorded)"},
	} {
		if got := rowNamed(t, tc.row).calibrated(tc.m, tc.r); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.row, got, tc.want)
		}
	}
}

// The mean is over every figure both engines recorded, real zeros
// included; cross-checks and figures a record lacks are left out.
func TestCalibrationMean(t *testing.T) {
	for _, tc := range []struct {
		name      string
		m, r      Figures
		sum       float64 // of the errors
		worst     string
		overNames []string
	}{
		{
			name:  "every figure equal",
			m:     Figures{AllocUtil: 0.5, Done: 10, Jobs: 10, NodeHours: 4},
			r:     Figures{AllocUtil: 0.5, Done: 10, Jobs: 10, NodeHours: 4},
			worst: "GPU allocated",
		},
		{
			// 10 pp, 50 % (wait mean), 70 % (7 preemptions against 0),
			// the rest 0; telemetry (a cross-check) and preempting
			// placements (not recorded by the real run) left out.
			name: "real zeros count",
			m: Figures{AllocUtil: 0.6, Wait: figures.Dist{Mean: 15 * time.Minute}, Done: 100, Jobs: 100, NodeHours: 10, Preemptions: 7, TelemetryAlloc: 0.9,
				PreemptingPlacements: 7, PreemptingPlacementsKnown: true},
			r:   Figures{AllocUtil: 0.5, Wait: figures.Dist{Mean: 10 * time.Minute}, Done: 100, Jobs: 100, NodeHours: 10, TelemetryAlloc: 0.5, PreemptingPlacements: 3},
			sum: 0.1 + 0.5 + 0.7, worst: "preemptions", overNames: []string{"wait mean", "preemptions"},
		},
		{
			// The model's 0 against a real 0.06 GPU-hours: 6 %, not 100 %.
			name: "model zero",
			m:    Figures{},
			r:    Figures{LostGPUHours: 0.06},
			sum:  0.06, worst: "lost GPU-hours",
		},
	} {
		c := calibration(tc.m, tc.r)
		n := 0 // every figure both recorded, zeros included
		for _, rw := range rows {
			if !rw.check && rw.recorded(tc.m) && rw.recorded(tc.r) {
				n++
			}
		}
		var over []string
		for _, e := range c.errs {
			if e.err > overThreshold {
				over = append(over, e.name)
			}
		}
		if len(c.errs) != n || math.Abs(c.mean()-tc.sum/float64(n)) > 1e-9 || c.worst().name != tc.worst || !slices.Equal(over, tc.overNames) {
			t.Errorf("%s: mean %v over %d, worst %q, over 25 %% %v; want %v over %d, worst %q, over %v",
				tc.name, c.mean(), len(c.errs), c.worst().name, over, tc.sum/float64(n), n, tc.worst, tc.overNames)
		}
	}
}

// synth replays a made-up trace on a made-up cluster, coarsely (whole
// minutes, GPUs pooled across nodes), so that the report has plausible
// results to show; stretch scales job durations to make a model differ.
func synth(engine string, cfg tracereplay.Config, c tracereplay.Cluster, stretch float64) tracereplay.Result {
	rng := rand.New(rand.NewPCG(1, 2))
	const horizon = 6 * h
	type job struct {
		rec  tracereplay.JobRecord
		gpus float64
		left time.Duration
	}
	var jobs []*job
	for at := time.Duration(0); at < 5*h; at += time.Duration(2+rng.IntN(8)) * time.Minute {
		j := tracereplay.Job{ID: "j", Arrival: at, Duration: time.Duration(float64(20+rng.IntN(90))*stretch) * time.Minute, GPUs: 1 + rng.IntN(4), Fraction: 1}
		if rng.IntN(3) == 0 {
			j.Fraction = 0.3
		}
		s := c.Slice(j, cfg.Features)
		jobs = append(jobs, &job{rec: j.Record(s), gpus: s.GPUs, left: j.Duration})
	}
	nodes := c.Nodes
	r := tracereplay.Result{Engine: engine, Version: map[string]string{"nomad": "1.11.0", "model": "model/1"}[engine], Config: cfg, Cluster: c, Compression: 60, Horizon: horizon}
	for now := time.Duration(0); now <= horizon; now += time.Minute {
		var held, busy, queued float64
		var running []*job
		for _, j := range jobs {
			if j.rec.Arrival <= now && !j.rec.Done && len(j.rec.Runs) > 0 {
				running = append(running, j)
				held += j.gpus
			}
		}
		for _, j := range jobs {
			if j.rec.Arrival > now || len(j.rec.Runs) > 0 {
				continue
			}
			if held+j.gpus <= float64(nodes*c.GPUsPerNode) {
				j.rec.Runs = append(j.rec.Runs, tracereplay.Run{Start: now, End: horizon, Open: true, Node: "pooled",
					Held: []tracereplay.Hold{{Kind: j.rec.Slice.Kind, Profile: j.rec.Slice.Profile, GPU: "0", Units: j.rec.Slice.Count}}})
				held += j.gpus
				running = append(running, j)
			} else {
				queued += j.gpus
			}
		}
		for _, j := range running {
			busy += 0.8 * j.gpus
			if j.left -= time.Minute; j.left <= 0 {
				j.rec.Done, j.rec.Finish = true, now+time.Minute
				j.rec.Runs[0].End, j.rec.Runs[0].Open = j.rec.Finish, false
			}
		}
		r.Timeline = append(r.Timeline, tracereplay.Sample{At: now, Nodes: nodes, GPUs: float64(nodes * c.GPUsPerNode), Allocated: held, Busy: busy})
		if cfg.Autoscale != "" && now%(10*time.Minute) == 0 {
			want := int(math.Ceil((held + queued) / float64(c.GPUsPerNode)))
			nodes = max(c.MinNodes, min(c.MaxNodes, want))
		}
	}
	for _, j := range jobs {
		r.Jobs = append(r.Jobs, j.rec)
	}
	return r
}

func sampleRun(real bool) Run {
	c := tracereplay.Cluster{Nodes: 3, MinNodes: 1, MaxNodes: 6, GPUsPerNode: 4, MPSGPUs: 1, MPSShares: 4, MIGGPUs: 1, MIGProfiles: []string{"3g.40gb", "2g.20gb", "1g.10gb"}}
	cfgs := []tracereplay.Config{
		{Name: "baseline"},
		{Name: "+slices", Features: tracereplay.Features{Slices: true}},
		{Name: "nomad-gpu", Features: tracereplay.Features{Slices: true, Preemption: true, Autoscale: tracereplay.AutoscaleGPUQueue}},
	}
	run := Run{
		Title:       "Trace replay: synthetic",
		Trace:       tracereplay.Trace{Source: "synthetic: 2–9 min apart, 20–110 min long", Jobs: []tracereplay.Job{{ID: "a"}, {ID: "b", Arrival: 5 * h}}},
		Seed:        7,
		Attribution: "Synthetic jobs; no trace licence applies.",
		Started:     time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC),
		Elapsed:     12*time.Minute + 3*time.Second,
	}
	for _, cfg := range cfgs {
		if real {
			run.Real = append(run.Real, synth("nomad", cfg, c, 1))
		}
		run.Model = append(run.Model, synth("model", cfg, c, 1.1))
	}
	if real {
		run.Real[0].Notes = []string{"3 jobs clipped to a node's 4 GPUs"}
	}
	return run
}

var pngLink = regexp.MustCompile(`!\[[^\]]*\]\(([^)]+)\)`)

func TestWrite(t *testing.T) {
	for _, tc := range []struct {
		name     string
		run      Run
		prefixes []string
		calib    bool
	}{
		{"real and model", sampleRun(true), []string{"real", "model"}, true},
		{"model only", sampleRun(false), []string{"model"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "out")
			if tc.name == "real and model" {
				if d := os.Getenv("REPORT_SAMPLE_OUT"); d != "" {
					dir = d
				}
			}
			if err := Write(dir, tc.run); err != nil {
				t.Fatal(err)
			}
			md, err := os.ReadFile(filepath.Join(dir, "report.md"))
			if err != nil {
				t.Fatal(err)
			}
			s := string(md)
			want := []string{"# Trace replay: synthetic", "## Method", tc.run.Attribution, tc.run.Trace.Source, "2 jobs", "seed 7", "2026-03-01 12:00:00 UTC", "12m 03s",
				"4 GPUs per node", "1 GPU in MIG mode as 3g.40gb + 2g.20gb + 1g.10gb", "60×", "horizon 6h 00m"}
			for _, r := range slices.Concat(tc.run.Real, tc.run.Model) {
				want = append(want, "| "+r.Config.Name+" |")
			}
			for _, rw := range rows {
				want = append(want, "| "+rw.name+" |")
			}
			main := tc.run.Real
			if len(main) == 0 {
				main = tc.run.Model
			}
			// A computed figure, as the table prints it.
			want = append(want, rows[0].cell(tc.run.compute(main)[0]))
			if tc.calib {
				want = append(want, "version 1.11.0", "### Distortion of the real run", "### Calibration", "3 jobs clipped", rows[0].calibrated(tc.run.compute(tc.run.Model)[1], tc.run.compute(tc.run.Real)[1]))
			}
			for _, w := range want {
				if !strings.Contains(s, w) {
					t.Errorf("report.md lacks %q", w)
				}
			}
			if got := strings.Contains(s, "(±"); got != tc.calib {
				t.Errorf("calibration errors shown: %v, want %v", got, tc.calib)
			}

			var links []string
			for _, m := range pngLink.FindAllStringSubmatch(s, -1) {
				links = append(links, m[1])
			}
			var files []string
			for _, p := range tc.prefixes {
				for _, f := range []string{"utilisation", "nodes", "fragmentation", "wait-cdf"} {
					files = append(files, p+"-"+f+".png")
				}
			}
			if !slices.Equal(links, files) {
				t.Errorf("report links %v, want %v", links, files)
			}
			onDisk, _ := filepath.Glob(filepath.Join(dir, "*.png"))
			if len(onDisk) != len(files) {
				t.Errorf("%d PNGs written, want %d: %v", len(onDisk), len(files), onDisk)
			}
			for _, f := range files {
				fh, err := os.Open(filepath.Join(dir, f))
				if err != nil {
					t.Error(err)
					continue
				}
				img, err := png.Decode(fh)
				fh.Close()
				if err != nil {
					t.Errorf("%s: not a PNG: %v", f, err)
					continue
				}
				if b := img.Bounds(); b.Dx() != snapshot.Width || b.Dy() != snapshot.Height {
					t.Errorf("%s: %dx%d, want %dx%d", f, b.Dx(), b.Dy(), snapshot.Width, snapshot.Height)
				}
			}
		})
	}
}

func TestWriteEdges(t *testing.T) {
	if err := Write(t.TempDir(), Run{}); err == nil {
		t.Error("Write of a run without results: no error")
	}
	// A result that measured nothing still gets its report and plots.
	run := Run{Model: []tracereplay.Result{{Engine: "model", Config: tracereplay.Config{Name: "empty"}, Cluster: tracereplay.Cluster{GPUsPerNode: 1}}}}
	dir := t.TempDir()
	if err := Write(dir, run); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "model-wait-cdf.png")); err != nil {
		t.Error(err)
	}
}

// A real run's incomplete records get a file of their evidence; a run
// without any gets none.
func TestWriteIncomplete(t *testing.T) {
	for _, tc := range []struct {
		name       string
		incomplete []tracereplay.IncompleteRecord
		want       []string // in the file; nil: no file
	}{
		{name: "none"},
		{name: "one", incomplete: []tracereplay.IncompleteRecord{{Job: "philly-1", Alloc: "a1b2", Node: "gpu-2",
			TaskLog: "restored=2881\n", Events: "13:00:01.000 Killing: Sent interrupt", AgentLog: "[INFO] client: alloc a1b2 killed"}},
			want: []string{"## real: job philly-1, allocation a1b2 on gpu-2", "Cause: not told by the driver's events", "restored=2881", "Sent interrupt", "alloc a1b2 killed"}},
		{name: "starved", incomplete: []tracereplay.IncompleteRecord{{Job: "philly-2", Alloc: "c3d4", Node: "gpu-4", TaskLog: "restored=0\n",
			Events:     "15:54:35.381 Driver: checkpoint requested (stop): SIGUSR1, 10s to commit\n15:54:45.378 Driver: checkpoint not committed within 10s; stopping the task\n15:54:51.389 Terminated: Exit Code: 137, Signal: 9",
			Checkpoint: []string{contract.CheckpointRequested, contract.CheckpointTimeout}, KilledBy: 9}},
			want: []string{"Cause: asked to checkpoint, its task did not commit within its commit_timeout", "Nomad killed it at its kill_timeout"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := sampleRun(true)
			run.Real[0].Config.Name = "real"
			run.Real[0].Incomplete = tc.incomplete
			dir := t.TempDir()
			if err := Write(dir, run); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(filepath.Join(dir, IncompleteFile))
			if tc.want == nil {
				if err == nil {
					t.Errorf("%s written with no incomplete record", IncompleteFile)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(string(b), w) {
					t.Errorf("%s lacks %q:\n%s", IncompleteFile, w, b)
				}
			}
		})
	}
}

// Layout changes are counted per direction; a configuration with layouts
// whose engine did not record them says so, one without changes none.
func TestLayoutChangeRows(t *testing.T) {
	var toMPS, toWhole row
	for _, rw := range rows {
		switch rw.name {
		case "layout changes to MPS":
			toMPS = rw
		case "layout changes to whole":
			toWhole = rw
		}
	}
	changes := []tracereplay.LayoutChange{{To: "mps:8"}, {To: "mps:8"}, {To: "whole"}}
	layouts := tracereplay.Config{Name: "+layouts", Features: tracereplay.Features{Layouts: true}}
	tests := []struct {
		name       string
		r          tracereplay.Result
		mps, whole string
	}{
		{"recorded", tracereplay.Result{Config: layouts, LayoutChanges: changes, LayoutsRecorded: true}, "2", "1"},
		{"not recorded", tracereplay.Result{Config: layouts}, "not recorded", "not recorded"},
		{"no layouts", tracereplay.Result{Config: tracereplay.Config{Name: "+slices", Features: tracereplay.Features{Slices: true}}}, "0", "0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.r.Horizon = time.Hour
			f := figures.Compute(tt.r, figures.Options{})
			if got := toMPS.cell(f); got != tt.mps {
				t.Errorf("to MPS = %q, want %q", got, tt.mps)
			}
			if got := toWhole.cell(f); got != tt.whole {
				t.Errorf("to whole = %q, want %q", got, tt.whole)
			}
		})
	}
}

// Packing loss is a configuration's wait mean over the fluid pool's, the
// pool run on the report's own sample and cluster. Two nodes of one GPU,
// four 10-minute jobs at 0: two half-GPU jobs and two 1-GPU jobs. Nomad
// gives each half-GPU job a whole GPU, so both 1-GPU jobs wait 10 minutes
// (mean 5m); the pool fits both halves in one GPU, and one 1-GPU job
// waits (mean 2m 30s): 2.00×.
func TestPackingLoss(t *testing.T) {
	const m = time.Minute
	tr := tracereplay.Trace{Source: "four jobs", Jobs: []tracereplay.Job{
		{ID: "a", Duration: 10 * m, GPUs: 1, Fraction: 0.5},
		{ID: "b", Duration: 10 * m, GPUs: 1, Fraction: 0.5},
		{ID: "c", Duration: 10 * m, GPUs: 1, Fraction: 1},
		{ID: "d", Duration: 10 * m, GPUs: 1, Fraction: 1},
	}}
	cl := tracereplay.Cluster{Nodes: 2, MinNodes: 2, MaxNodes: 2, GPUsPerNode: 1}
	for _, tc := range []struct {
		name       string
		cluster    tracereplay.Cluster
		fluid      string
		loss, cell string
	}{
		{"two nodes", cl, "2m 30s", "2.00×", "| packing loss (wait mean ÷ fluid pool's) | 2.00× |"},
		// No fixed node: no pool to compare with.
		{"no fixed node", tracereplay.Cluster{MaxNodes: 2, GPUsPerNode: 1}, "not run", "–", "| packing loss (wait mean ÷ fluid pool's) | – |"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := model.Run(tr, model.Options{Cluster: cl, Config: tracereplay.Config{Name: "baseline"}, Horizon: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			r.Cluster = tc.cluster
			run, err := Run{Trace: tr, Model: []tracereplay.Result{r}}.withFluid()
			if err != nil {
				t.Fatal(err)
			}
			f := run.compute(run.Model)[0]
			if f.Wait.Mean != 5*m {
				t.Fatalf("model wait mean %s, want 5m", f.Wait.Mean)
			}
			if got := rowNamed(t, "wait mean, fluid pool").cell(f); got != tc.fluid {
				t.Errorf("fluid pool's wait mean %q, want %q", got, tc.fluid)
			}
			if got := rowNamed(t, "packing loss (wait mean ÷ fluid pool's)").cell(f); got != tc.loss {
				t.Errorf("packing loss %q, want %q", got, tc.loss)
			}
			dir := t.TempDir()
			if err := Write(dir, Run{Trace: tr, Model: []tracereplay.Result{r}}); err != nil {
				t.Fatal(err)
			}
			md, err := os.ReadFile(filepath.Join(dir, "report.md"))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(md), tc.cell) {
				t.Errorf("report.md lacks %q", tc.cell)
			}
		})
	}
}

// The report's JCT rows compare every configuration of a table over the
// same jobs: those every configuration of that engine finished.
func TestReportJCTOverCommonJobs(t *testing.T) {
	cl := tracereplay.Cluster{Nodes: 1, MinNodes: 1, MaxNodes: 1, GPUsPerNode: 1}
	result := func(name string, finish map[string]time.Duration) tracereplay.Result {
		r := tracereplay.Result{Engine: "model", Config: tracereplay.Config{Name: name}, Cluster: cl, Horizon: 10 * h}
		for _, id := range []string{"a", "b", "c"} {
			j := tracereplay.JobRecord{ID: id, Requested: 1}
			if at, ok := finish[id]; ok {
				j.Done, j.Finish = true, at
			}
			r.Jobs = append(r.Jobs, j)
		}
		return r
	}
	for _, tc := range []struct {
		name  string
		rs    []tracereplay.Result
		means []string // "JCT mean (common jobs)" per configuration
	}{
		{"the second finished fewer", []tracereplay.Result{
			result("x", map[string]time.Duration{"a": h, "b": 2 * h, "c": 9 * h}),
			result("y", map[string]time.Duration{"a": 3 * h, "b": 4 * h}),
		}, []string{"1h 30m", "3h 30m"}},
		{"the first finished fewer", []tracereplay.Result{
			result("x", map[string]time.Duration{"b": 2 * h}),
			result("y", map[string]time.Duration{"a": h, "b": 4 * h, "c": 5 * h}),
		}, []string{"2h 00m", "4h 00m"}},
	} {
		run := Run{Model: tc.rs}
		fs := run.compute(run.Model)
		var got []string
		for _, f := range fs {
			got = append(got, rowNamed(t, "JCT mean (common jobs)").cell(f))
		}
		if !slices.Equal(got, tc.means) {
			t.Errorf("%s: JCT means %v, want %v", tc.name, got, tc.means)
		}
	}
}

// A run's configurations of one queue alone (tracereplay.Config.Alone)
// are left out of the tables of the whole sample, whose JCT they share no
// job with, and give the queues' table its "alone, run" column, in both
// engines' sections; the Method lists them.
func TestWriteAloneRuns(t *testing.T) {
	c := tracereplay.Cluster{Nodes: 2, GPUsPerNode: 4, Teams: []tracereplay.TeamWeight{{Team: "a", Weight: 1}, {Team: "*", Weight: 1}}}
	queued := tracereplay.Config{Name: "+queues", Features: tracereplay.Features{Preemption: true, Checkpoints: true, Queues: true}}
	alone := c.AloneConfigs(queued)
	run := Run{Trace: tracereplay.Trace{Source: "synthetic"}}
	for _, e := range []struct {
		engine string
		rs     *[]tracereplay.Result
	}{{"nomad", &run.Real}, {"model", &run.Model}} {
		*e.rs = append(*e.rs, synth(e.engine, queued, c, 1), synth(e.engine, alone[0], c, 1), synth(e.engine, alone[1], c, 1.2))
	}
	run.Latencies = make([]tracereplay.Latencies, len(run.Model))
	dir := t.TempDir()
	if err := Write(dir, run); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(dir, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(md)
	others := aloneWait(run.Real[2:], tracereplay.OthersQueue)
	if !strings.Contains(others, "(") || aloneWait(run.Real[2:], "a") != "not run" {
		t.Fatalf("aloneWait: %q, %q; want others' wait and a not run", others, aloneWait(run.Real[2:], "a"))
	}
	for _, w := range []string{"| alone: others |", "alone on its nominal, run |", "| " + others + " |", "(engine nomad)", "(engine model)"} {
		if !strings.Contains(s, w) {
			t.Errorf("report.md lacks %q", w)
		}
	}
	for _, line := range strings.Split(s, "\n") {
		if strings.HasPrefix(line, "| figure |") && strings.Contains(line, "alone") {
			t.Errorf("a table of the whole sample has a configuration alone: %s", line)
		}
	}
	if err := Write(t.TempDir(), Run{Model: run.Model[1:]}); err == nil || !strings.Contains(err.Error(), "only configurations of a queue alone") {
		t.Errorf("a run of configurations alone only: %v; want refused", err)
	}
}

// The frontier's readings on hand-computed points: (cost, mean wait)
// 100/40m, 200/20m, 300/10m and 250/30m, which 200/20m dominates.
func TestFrontierReadings(t *testing.T) {
	m := time.Minute
	c := FrontierCurve{Config: "x", Points: []FrontierPoint{{Nodes: 1, Cost: 100, Wait: 40 * m}, {Nodes: 2, Cost: 200, Wait: 20 * m}, {Nodes: 3, Cost: 300, Wait: 10 * m}, {Nodes: 4, Cost: 250, Wait: 30 * m}}}
	var nodes []int
	for _, p := range c.Pareto() {
		nodes = append(nodes, p.Nodes)
	}
	if !slices.Equal(nodes, []int{1, 2, 3}) {
		t.Errorf("efficient points %v; want 1, 2, 3", nodes)
	}
	for _, tc := range []struct {
		wait time.Duration
		cost float64
		r    Reading
	}{{30 * m, 150, Interpolated}, {20 * m, 200, Interpolated}, {15 * m, 250, Interpolated}, {50 * m, 100, AtMost}, {5 * m, 0, NotReached}} {
		if cost, r := c.CostAt(tc.wait); math.Abs(cost-tc.cost) > 1e-9 || r != tc.r {
			t.Errorf("cost at %s: %v (%d); want %v (%d)", tc.wait, cost, r, tc.cost, tc.r)
		}
	}
	for _, tc := range []struct {
		cost float64
		wait time.Duration
		r    Reading
	}{{150, 30 * m, Interpolated}, {250, 15 * m, Interpolated}, {400, 10 * m, AtMost}, {50, 0, NotReached}} {
		if wait, r := c.WaitAt(tc.cost); wait != tc.wait || r != tc.r {
			t.Errorf("wait at %v: %s (%d); want %s (%d)", tc.cost, wait, r, tc.wait, tc.r)
		}
	}
	f := Frontier{Reference: "ref", Ref: FrontierPoint{Nodes: 2, Cost: 200, Wait: 30 * m}, Curves: []FrontierCurve{c}}
	md := f.Markdown("t", "w")
	for _, want := range []string{"| x | 150.0 | 0.75× | 20m 00s | 0.67× |", "| x | 4 | 0.00 | 250.0 | 30m 00s |", "| x | 2 * |"} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
	dir := t.TempDir()
	if err := f.WritePlot(dir); err != nil {
		t.Fatal(err)
	}
}

// A gpu-queue curve read against target-value's: target-value waits the
// reference's 30m at cost 150 (15 node-hours, between 10 and 20) and 20m
// at the reference's cost 200; gpu-queue, a curve at 0.8× target-value's
// waits, waits 24m at cost 150 and 16m at 200, and waits 30m at cost
// 112.5 (11.25 node-hours).
func TestFrontierAgainstTargetValue(t *testing.T) {
	m := time.Minute
	curve := func(name, strategy string, f float64) FrontierCurve {
		c := FrontierCurve{Config: name, Strategy: strategy}
		for i, p := range []struct {
			cost float64
			wait time.Duration
		}{{100, 40 * m}, {200, 20 * m}, {300, 10 * m}} {
			c.Points = append(c.Points, FrontierPoint{Nodes: i + 1, Cost: p.cost, NodeHours: p.cost / 10, Wait: time.Duration(f * float64(p.wait))})
		}
		return c
	}
	tv, gq := curve("target-value", "target-value", 1), curve("+autoscale", "gpu-queue", 0.8)
	if nh, r := tv.NodeHoursAt(30 * m); math.Abs(nh-15) > 1e-9 || r != Interpolated {
		t.Errorf("target-value's node-hours at 30m: %v (%d); want 15", nh, r)
	}
	if nh, r := gq.NodeHoursAt(30 * m); math.Abs(nh-11.25) > 1e-9 || r != Interpolated {
		t.Errorf("gpu-queue's node-hours at 30m: %v (%d); want 11.25", nh, r)
	}
	f := Frontier{Reference: "ref", Ref: FrontierPoint{Nodes: 2, Cost: 200, Wait: 30 * m}, Curves: []FrontierCurve{curve("baseline", "", 1.5), gq, tv}}
	md := f.Markdown("t", "w")
	for _, want := range []string{"target-value waits as little as the reference at cost 150.0 (15.00 node-hours), and 20m 00s at the reference's cost",
		"| +autoscale | 24m 00s | 0.80× | 11.25 | 0.75× | 16m 00s | 0.80× |"} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
	if against := md[strings.Index(md, "Against"):strings.Index(md, "![cost")]; strings.Contains(against, "| baseline |") || strings.Contains(against, "| target-value |") {
		t.Errorf("only the gpu-queue curves are read against target-value:\n%s", md)
	}
	f.Curves = f.Curves[:2]
	if md := f.Markdown("t", "w"); strings.Contains(md, "Against target-value") {
		t.Errorf("read against target-value without it:\n%s", md)
	}
}

// Pooling two samples' frontiers: costs add up, mean waits weigh by their
// jobs, percentiles drop; a frontier of other configurations is refused.
func TestFrontierAdd(t *testing.T) {
	m := time.Minute
	one := func(cost float64, wait time.Duration, jobs int) Frontier {
		p := FrontierPoint{Nodes: 2, Cost: cost, NodeHours: cost / 10, Wait: wait, WaitP95: 2 * wait, Jobs: jobs, WaitTop: wait / 2, TopJobs: jobs / 2}
		return Frontier{Reference: "ref", Ref: p, Curves: []FrontierCurve{{Config: "x", Points: []FrontierPoint{p}}}}
	}
	var f Frontier
	for _, g := range []Frontier{one(100, 10*m, 10), one(300, 30*m, 30)} {
		if err := f.Add(g); err != nil {
			t.Fatal(err)
		}
	}
	got := f.Curves[0].Points[0]
	want := FrontierPoint{Nodes: 2, Cost: 400, NodeHours: 40, Wait: 25 * m, Jobs: 40, WaitTop: 12*m + 30*time.Second, TopJobs: 20}
	if got != want || f.Ref != want || f.Windows != 2 {
		t.Errorf("pooled %+v, reference %+v over %d windows; want %+v over 2", got, f.Ref, f.Windows, want)
	}
	other := one(1, m, 1)
	other.Curves[0].Config = "y"
	if err := f.Add(other); err == nil || !strings.Contains(err.Error(), "y at 1 sizes to pool into x") {
		t.Errorf("another configuration pooled: %v", err)
	}
}
