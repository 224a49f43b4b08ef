package sizingbench

import (
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nomad-gpu/nomad-gpu/bench/tracereplay"
	"github.com/nomad-gpu/nomad-gpu/controller/sizing/history"
)

func template(id string, gpus, prio int, use float64) Template {
	return Template{
		ID:          id,
		Key:         history.Key{Namespace: "default", Job: id, Group: "train", Task: "train"},
		Slice:       history.Slice{Kind: history.SliceGPU, Count: gpus},
		GPUsPerUnit: 1, Priority: prio, TrueUse: use,
	}
}

func job(t Template, id string, at, d time.Duration) Job {
	return Job{Template: t, ID: id, Arrival: at, Duration: d}
}

// twoGPUs is one node of two whole GPUs, with no time limit.
var twoGPUs = Options{Cluster: tracereplay.Cluster{Nodes: 1, GPUsPerNode: 2}, TimeLimit: -1}

func fixed(n int) func(SizeInput) int { return func(SizeInput) int { return n } }

func TestReplaySchedule(t *testing.T) {
	big, small, urgent := template("big", 2, 50, 1), template("small", 1, 50, 1), template("urgent", 1, 80, 1)
	s := time.Second
	for _, tc := range []struct {
		name   string
		jobs   []Job
		size   func(SizeInput) int
		starts []time.Duration // per job, in the order passed
		finish []time.Duration
	}{
		{"a job waits for room", []Job{job(big, "b", 0, 100*s), job(small, "s", 10*s, 50*s)}, nil,
			[]time.Duration{0, 100 * s}, []time.Duration{100 * s, 150 * s}},
		{"higher priority first, then arrival", []Job{
			job(big, "b", 0, 100*s), job(small, "s", 10*s, 50*s), job(big, "b2", 20*s, 10*s), job(urgent, "u", 30*s, 40*s)}, nil,
			// At 100 u (prio 80) and s take the GPUs; b2 needs both and
			// waits for s to end at 150.
			[]time.Duration{0, 100 * s, 150 * s, 100 * s}, []time.Duration{100 * s, 150 * s, 160 * s, 140 * s}},
		{"no head-of-line blocking", []Job{job(small, "s1", 0, 100*s), job(big, "b", 1*s, 10*s), job(small, "s2", 2*s, 10*s)}, nil,
			[]time.Duration{0, 100 * s, 2 * s}, []time.Duration{100 * s, 110 * s, 12 * s}},
		{"shrunk below its need stretches", []Job{job(big, "b", 0, 100*s)}, fixed(1),
			[]time.Duration{0}, []time.Duration{200 * s}},
		{"more than it needs does not speed it; clipped to a node", []Job{job(small, "s", 0, 100*s)}, fixed(9),
			[]time.Duration{0}, []time.Duration{100 * s}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := twoGPUs
			o.Size = tc.size
			res := Replay(tc.jobs, o)
			for i, r := range res.Runs {
				if r.Job.ID != tc.jobs[i].ID || r.Start != tc.starts[i] || r.Finish != tc.finish[i] || r.Wait != r.Start-r.Job.Arrival {
					t.Errorf("run %s: start %v finish %v wait %v; want start %v finish %v", r.Job.ID, r.Start, r.Finish, r.Wait, tc.starts[i], tc.finish[i])
				}
			}
		})
	}
}

func TestReplayGPUHours(t *testing.T) {
	h := time.Hour
	four := Options{Cluster: tracereplay.Cluster{Nodes: 1, GPUsPerNode: 4}} // time limit 1.5
	for _, tc := range []struct {
		name       string
		tpl        Template
		size       func(SizeInput) int
		runtime    time.Duration
		timedOut   bool
		held, used float64
	}{
		{"over-asking, as asked", template("t", 2, 50, 0.5), nil, h, false, 2, 1},
		{"over-asking, sized to its need", template("t", 2, 50, 0.5), fixed(1), h, false, 1, 1},
		{"fitting", template("t", 2, 50, 0.75), nil, h, false, 2, 1.5},
		{"starved within the limit stretches", template("t", 1, 50, 1.4), nil, 84 * time.Minute, false, 1.4, 1.4},
		{"starved past the limit times out", template("t", 1, 50, 1.8), nil, 90 * time.Minute, true, 1.5, 1.5},
		{"starved, grown to its need", template("t", 1, 50, 1.8), fixed(2), h, false, 2, 1.8},
		{"shrunk below its need stretches", template("t", 4, 50, 0.5), fixed(1), 90 * time.Minute, true, 1.5, 1.5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := four
			o.Size = tc.size
			res := Replay([]Job{job(tc.tpl, "t#1", 0, h)}, o)
			r := res.Runs[0]
			if r.Runtime != tc.runtime || r.TimedOut != tc.timedOut {
				t.Errorf("runtime %v timed out %v; want %v %v", r.Runtime, r.TimedOut, tc.runtime, tc.timedOut)
			}
			if math.Abs(r.RequestedGPUHours-tc.held) > 1e-9 || math.Abs(r.UsedGPUHours-tc.used) > 1e-9 {
				t.Errorf("GPU-hours requested %v, used %v; want %v, %v", r.RequestedGPUHours, r.UsedGPUHours, tc.held, tc.used)
			}
			if u := res.Usage; u.Runs != 1 || u.RequestedGPUHours != r.RequestedGPUHours || u.UsedGPUHours != r.UsedGPUHours ||
				u.MeanJCT != r.JCT() || u.MeanWait+u.MeanRuntime != u.MeanJCT || (u.Timeouts == 1) != tc.timedOut ||
				(u.Resized == 1) != (r.Given.Count != tc.tpl.Slice.Count) ||
				(tc.timedOut && (u.TimedOutGPUHours != r.RequestedGPUHours || u.UsefulGPUHours != 0)) ||
				(!tc.timedOut && (u.TimedOutGPUHours != 0 || u.UsefulGPUHours != r.UsedGPUHours)) {
				t.Errorf("usage %+v of run %+v", u, r)
			}
		})
	}
}

func TestReplaySamples(t *testing.T) {
	mps := Template{ID: "m", Key: history.Key{Namespace: "default", Job: "m", Group: "train", Task: "train"},
		Slice: history.Slice{Kind: history.SliceMPS, Count: 2}, GPUsPerUnit: 0.25, Priority: 50, TrueUse: 0.5, MemShare: 0.5}
	gpu := template("g", 1, 50, 1.2)
	gpu.MemShare = 0.4
	o := Options{Cluster: tracereplay.Cluster{Nodes: 1, GPUsPerNode: 2, MPSGPUs: 1, MPSShares: 4}}
	m := time.Minute
	for _, tc := range []struct {
		name       string
		jobs       []Job
		n          int // samples seen by the last arrival
		util       float64
		mem, limit uint64
	}{
		// One share of 4 GiB used of two: 50 %, memory 0.5 × 1 share.
		{"running MPS run, sampled to now", []Job{job(mps, "m#1", 0, time.Hour), job(mps, "m#2", 30*m+30*time.Second, time.Hour)},
			30, 50, 2 << 30, 8 << 30},
		{"finished run, to its finish", []Job{job(mps, "m#1", 0, 10*m), job(mps, "m#2", time.Hour, time.Hour)}, 10, 50, 2 << 30, 8 << 30},
		// Minutes 5 to 10 are in the window.
		{"older than the window", []Job{job(mps, "m#1", 0, 10*m), job(mps, "m#2", SampleWindow+5*m, time.Hour)}, 6, 50, 2 << 30, 8 << 30},
		// Starved: 100 %, memory 0.4 × 1 GPU; 60 min × 1.2 = 72 min is
		// within 90.
		{"starved whole GPU", []Job{job(gpu, "g#1", 0, time.Hour), job(gpu, "g#2", 2*time.Hour, time.Hour)}, 72, 100, memOf(0.4, 16<<30), 16 << 30},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got SizeInput
			o := o
			o.Size = func(in SizeInput) int { got = in; return in.Template.Slice.Count }
			Replay(tc.jobs, o)
			if len(got.Samples) != tc.n {
				t.Fatalf("%d samples; want %d", len(got.Samples), tc.n)
			}
			last := tc.jobs[len(tc.jobs)-1]
			for i, s := range got.Samples {
				if s.UtilPct != tc.util || s.MemBytes != tc.mem || s.MemLimitBytes != tc.limit || s.Key != last.Template.Key ||
					(i > 0 && !s.Time.After(got.Samples[i-1].Time)) {
					t.Errorf("sample %d: %+v; want util %v mem %v of %v", i, s, tc.util, tc.mem, tc.limit)
				}
			}
			if want := map[string]int{history.SliceMPS: 4, history.SliceGPU: 1}[last.Template.Slice.Kind]; got.MaxCount != want {
				t.Errorf("max count %d; want %d", got.MaxCount, want)
			}
		})
	}
}

// sequential is n runs of t, one every gap, each lasting d.
func sequential(t Template, n int, gap, d time.Duration) []Job {
	var jobs []Job
	for i := range n {
		jobs = append(jobs, job(t, fmt.Sprintf("%s#%d", t.ID, i+1), time.Duration(i)*gap, d))
	}
	return jobs
}

func TestAutoSize(t *testing.T) {
	h := time.Hour
	mps := func(id string, shares int, use float64) Template {
		return Template{ID: id, Key: history.Key{Namespace: "default", Job: id, Group: "train", Task: "train"},
			Slice: history.Slice{Kind: history.SliceMPS, Count: shares}, GPUsPerUnit: 0.25, Priority: 50, TrueUse: use, MemShare: 0.5}
	}
	withMem := func(t Template) Template { t.MemShare = 0.5; return t }
	o := Options{Cluster: tracereplay.Cluster{Nodes: 2, GPUsPerNode: 8, MPSGPUs: 1, MPSShares: 4}} // 7 whole GPUs, 4 shares a node
	for _, tc := range []struct {
		name string
		tpl  Template
		// counts is what each of 8 runs, an hour apart and 30 min long at
		// their need, is given under auto. From the 8th, the first run's
		// samples are out of SampleWindow: only the last run's slice has
		// samples.
		counts []int
		// cmpReq and cmpJCT compare auto's requested GPU-hours and mean
		// JCT with static's: −1 less, 0 equal, 1 more.
		cmpReq, cmpJCT, cmpShare int // cmpShare compares used / requested
		staticTO, autoTO         int
	}{
		// p95 30 % of 4 GPUs: shrink to ceil(1.2 / 0.7) = 2.
		{"over-asking whole GPUs shrink", withMem(template("over", 4, 50, 0.3)), []int{4, 2, 2, 2, 2, 2, 2, 2}, -1, 0, 1, 0, 0},
		// p95 30 % of 2 shares: ceil(0.6 / 0.7) = 1.
		{"over-asking shares shrink", mps("share", 2, 0.3), []int{2, 1, 1, 1, 1, 1, 1, 1}, -1, 0, 1, 0, 0},
		// 50 % is above Idle: kept.
		{"over-asking above idle is kept", withMem(template("half", 2, 50, 0.5)), []int{2, 2, 2, 2, 2, 2, 2, 2}, 0, 0, 0, 0, 0},
		{"one whole GPU cannot shrink", withMem(template("one", 1, 50, 0.3)), []int{1, 1, 1, 1, 1, 1, 1, 1}, 0, 0, 0, 0, 0},
		{"fitting is kept", withMem(template("fit", 2, 50, 0.75)), []int{2, 2, 2, 2, 2, 2, 2, 2}, 0, 0, 0, 0, 0},
		// 100 % of 1 GPU: grow ×2 to the bound of 2, where it fits (90 %
		// is saturated, but the bound holds it); each static run times out
		// (1.8 > 1.5).
		{"starved grows", withMem(template("starved", 1, 50, 1.8)), []int{1, 2, 2, 2, 2, 2, 2, 2}, 1, -1, -1, 8, 1},
		{"starved shares grow to a GPU's shares", mps("sshare", 2, 1.6), []int{2, 4, 4, 4, 4, 4, 4, 4}, 1, -1, -1, 8, 1},
		// 1.2 is within the limit: static runs are slow, not killed.
		{"starved within the limit grows", withMem(template("slow", 2, 50, 1.2)), []int{2, 4, 4, 4, 4, 4, 4, 4}, 1, -1, -1, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			jobs := sequential(tc.tpl, 8, h, 30*time.Minute)
			static, auto := CompareSizing(jobs, o)
			for i, r := range auto.Runs {
				if r.Given.Count != tc.counts[i] {
					t.Errorf("auto run %d given %d; want %v", i+1, r.Given.Count, tc.counts)
					break
				}
			}
			for _, r := range static.Runs {
				if r.Given != tc.tpl.Slice {
					t.Errorf("static run %s given %+v", r.Job.ID, r.Given)
				}
			}
			cmpf := func(a, b float64) int {
				switch {
				case a < b-1e-9:
					return -1
				case a > b+1e-9:
					return 1
				}
				return 0
			}
			s, a := static.Usage, auto.Usage
			if got := cmpf(a.RequestedGPUHours, s.RequestedGPUHours); got != tc.cmpReq {
				t.Errorf("requested auto %v vs static %v: %d; want %d", a.RequestedGPUHours, s.RequestedGPUHours, got, tc.cmpReq)
			}
			if got := cmpf(a.MeanJCT.Seconds(), s.MeanJCT.Seconds()); got != tc.cmpJCT {
				t.Errorf("mean JCT auto %v vs static %v: %d; want %d", a.MeanJCT, s.MeanJCT, got, tc.cmpJCT)
			}
			if got := cmpf(a.UsedShare(), s.UsedShare()); got != tc.cmpShare {
				t.Errorf("used share auto %v vs static %v: %d; want %d", a.UsedShare(), s.UsedShare(), got, tc.cmpShare)
			}
			if s.Timeouts != tc.staticTO || a.Timeouts != tc.autoTO {
				t.Errorf("timeouts static %d auto %d; want %d %d", s.Timeouts, a.Timeouts, tc.staticTO, tc.autoTO)
			}
			for _, res := range []Result{static, auto} {
				for _, r := range res.Runs {
					if r.UsedGPUHours > r.RequestedGPUHours+1e-12 || r.UsedGPUHours <= 0 {
						t.Errorf("run %s given %d: used %v of %v GPU-hours", r.Job.ID, r.Given.Count, r.UsedGPUHours, r.RequestedGPUHours)
					}
				}
			}
		})
	}
}

func TestReplayPredictions(t *testing.T) {
	a, b := template("a", 1, 50, 1), template("b", 2, 50, 1)
	s := time.Second
	// a runs four times, one after another; b holds both GPUs from 1000 s.
	jobs := []Job{
		job(a, "a#1", 0, 100*s), job(a, "a#2", 200*s, 100*s), job(a, "a#3", 400*s, 130*s), job(a, "a#4", 600*s, 100*s),
		job(b, "b#1", 1000*s, 300*s), job(a, "a#5", 1010*s, 100*s),
	}
	res := Replay(jobs, twoGPUs)
	r := res.Runs
	for _, tc := range []struct {
		name  string
		got   string
		known bool
		secs  float64
		want  string
		wsecs float64
	}{
		{"no history", r[0].RuntimeModel.Basis, r[0].RuntimeModel.Known, r[0].RuntimeModel.Seconds, "none", 0},
		{"pool level before 3 own runs", r[2].RuntimeModel.Basis, r[2].RuntimeModel.Known, 0, "none", 0},
		{"own runs", r[3].RuntimeModel.Basis, r[3].RuntimeModel.Known, r[3].RuntimeModel.Seconds, "job p50 of 3 runs", 100},
		{"baseline mean", r[3].RuntimeBaseline.Basis, r[3].RuntimeBaseline.Known, r[3].RuntimeBaseline.Seconds, "pool mean of 3 runs", 110},
		{"wait: fits now", r[1].WaitModel.Basis, r[1].WaitModel.Known, r[1].WaitModel.Seconds, "fits now", 0},
		// b#1 is predicted from a's pool runs of gpu (p50 of 4: 100 s);
		// a#5's wait is when b#1 is predicted to end.
		{"wait: behind b", r[5].WaitModel.Basis, r[5].WaitModel.Known, r[5].WaitModel.Seconds, "list schedule of 1 running, 0 ahead", 90},
		{"wait baseline", r[5].WaitBaseline.Basis, r[5].WaitBaseline.Known, r[5].WaitBaseline.Seconds, "mean wait of last 5 started runs", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.got != tc.want || tc.known != (tc.want != "none") || math.Abs(tc.secs-tc.wsecs) > 1e-9 {
				t.Errorf("basis %q known %v seconds %v; want %q %v", tc.got, tc.known, tc.secs, tc.want, tc.wsecs)
			}
		})
	}
	if got := r[5].Wait; got != 290*s {
		t.Errorf("a#5 waited %v; want 290s", got)
	}
	if res.RuntimeErrors.N == 0 || res.WaitErrors.N == 0 {
		t.Errorf("nothing compared: %+v %+v", res.RuntimeErrors, res.WaitErrors)
	}
}

func TestRecur(t *testing.T) {
	var window []tracereplay.Job
	for i := range 100 {
		window = append(window, tracereplay.Job{
			ID: "j" + string(rune('A'+i%26)) + string(rune('a'+i/26)), Arrival: time.Duration(i) * time.Minute,
			Duration: time.Duration(100+i) * time.Second, GPUs: 1 + i%3, Fraction: 1, Priority: 50,
		})
	}
	for _, tc := range []struct {
		name string
		o    Options
	}{
		{"defaults: spread by load", Options{}},
		{"narrow, over the window", Options{Templates: 5, MinRepeats: 2, MaxRepeats: 3, Jitter: 0.5, Window: time.Hour, Load: -1, Seed: 7}},
		{"high load", Options{Load: 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.o.withDefaults()
			jobs := Recur(window, tc.o)
			span := o.Window
			if o.Load > 0 {
				gpuh := 0.0
				for _, j := range jobs {
					gpuh += float64(j.Template.Slice.Count) * j.Template.GPUsPerUnit * j.Duration.Hours() * min(max(1, j.Template.TrueUse), o.TimeLimit)
				}
				span = time.Duration(gpuh / (o.Load * 32) * float64(time.Hour))
			}
			per := map[string]int{}
			classes := map[string]bool{}
			for i, j := range jobs {
				per[j.Template.ID]++
				if i > 0 && compareJobs(jobs[i-1], j) > 0 {
					t.Errorf("not sorted at %d", i)
				}
				if j.Arrival < 0 || j.Arrival >= span {
					t.Errorf("%s arrives at %v, outside [0, %v)", j.ID, j.Arrival, span)
				}
				d, td := j.Duration.Seconds(), j.Template.Duration.Seconds()
				if d < td*(1-o.Jitter)-1e-6 || d > td*(1+o.Jitter)+1e-6 {
					t.Errorf("%s lasts %vs; template %vs ±%v", j.ID, d, td, o.Jitter)
				}
				if u, ms := j.Template.TrueUse, j.Template.MemShare; !(u >= 0.3 && u < 0.9 || u >= 1.2 && u < 2) || ms < 0.3 || ms >= 0.7 {
					t.Errorf("%s true use %v, memory share %v", j.ID, u, ms)
				}
				classes[j.Template.Class()] = true
				if !strings.HasPrefix(j.ID, j.Template.ID+"#") {
					t.Errorf("ID %s of template %s", j.ID, j.Template.ID)
				}
			}
			if last := jobs[len(jobs)-1].Arrival; last < span*8/10 {
				t.Errorf("last arrival %v; want arrivals spread over %v", last, span)
			}
			if o.Templates >= 30 && len(classes) != len(Classes) {
				t.Errorf("classes %v; want all of %v", classes, Classes)
			}
			if len(per) != o.Templates {
				t.Errorf("%d templates; want %d", len(per), o.Templates)
			}
			for id, n := range per {
				if n < o.MinRepeats || n > o.MaxRepeats {
					t.Errorf("%s recurs %d times; want %d–%d", id, n, o.MinRepeats, o.MaxRepeats)
				}
			}
			if again := Recur(window, tc.o); !reflect.DeepEqual(again, jobs) {
				t.Error("Recur differs for the same seed")
			}
		})
	}
}

func loadPhilly(tb testing.TB, o Options) ([]Job, string) {
	tb.Helper()
	jobs, source, err := LoadPhilly("", o)
	if err != nil {
		tb.Fatal(err)
	}
	return jobs, source
}

func TestPhillyReplayDeterministic(t *testing.T) {
	if testing.Short() {
		t.Skip("reads the Philly extract")
	}
	jobs, source := loadPhilly(t, Options{})
	if !strings.Contains(source, tracereplay.PhillyAttribution) || !strings.HasPrefix(source, "philly.csv: busiest 24h0m0s window") {
		t.Errorf("source %q", source)
	}
	a, b := Replay(jobs, Options{}), Replay(jobs, Options{})
	if !reflect.DeepEqual(a, b) {
		t.Error("two replays of seed 1 differ")
	}
	jobs2, _ := loadPhilly(t, Options{Seed: 2})
	if c := Replay(jobs2, Options{Seed: 2}); reflect.DeepEqual(a.Runs, c.Runs) {
		t.Error("seeds 1 and 2 replay the same")
	}
	if a.RuntimeErrors.N < len(jobs)/2 || a.WaitErrors.N < len(jobs)/2 {
		t.Errorf("few runs compared of %d: %+v %+v", len(jobs), a.RuntimeErrors, a.WaitErrors)
	}
}

// BenchmarkPrediction replays the recurring Philly workload (seed 1) and
// reports the prediction errors of the model and the baselines: MAPE in
// percent, MAE in seconds. Its log has the table for seeds 1 to 4, since
// one draw of 60 heavy-tailed templates is a small sample; go test shows
// the whole log with -v only:
//
//	go test -v -run '^$' -bench Prediction -benchtime 1x ./bench/tracereplay/sizingbench/
func BenchmarkPrediction(b *testing.B) {
	jobs, source := loadPhilly(b, Options{})
	var res Result
	for b.Loop() {
		res = Replay(jobs, Options{})
	}
	b.ReportMetric(res.RuntimeErrors.MAPEModel, "runtime_mape_model")
	b.ReportMetric(res.RuntimeErrors.MAPEBaseline, "runtime_mape_baseline")
	b.ReportMetric(res.WaitErrors.MAPEModel, "wait_mape_model")
	b.ReportMetric(res.WaitErrors.MAPEBaseline, "wait_mape_baseline")
	b.ReportMetric(res.WaitErrors.MAEModel, "wait_mae_model_s")
	b.ReportMetric(res.WaitErrors.MAEBaseline, "wait_mae_baseline_s")
	log := source + "\nseed 1:\n" + res.Table()
	for seed := int64(2); seed <= 4; seed++ {
		o := Options{Seed: seed}
		jobs, _ := loadPhilly(b, o)
		log += fmt.Sprintf("seed %d (%d runs):\n%s", seed, len(jobs), Replay(jobs, o).Table())
	}
	b.Log(log)
}

func memOf(share float64, b uint64) uint64 { return uint64(share * float64(b)) }

func TestPhillySizing(t *testing.T) {
	if testing.Short() {
		t.Skip("reads the Philly extract")
	}
	jobs, _ := loadPhilly(t, Options{})
	static, auto := CompareSizing(jobs, Options{})
	static2, auto2 := CompareSizing(jobs, Options{})
	if !reflect.DeepEqual(static, static2) || !reflect.DeepEqual(auto, auto2) {
		t.Error("two sizing replays of seed 1 differ")
	}
	if !reflect.DeepEqual(static, Replay(jobs, Options{})) {
		t.Error("static differs from a replay without Size")
	}
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"static resizes nothing", static.Usage.Resized == 0},
		{"auto resizes some runs", auto.Usage.Resized > 0},
		{"auto requests fewer GPU-hours of over-asking templates", auto.ByClass[ClassOverAsk].RequestedGPUHours < static.ByClass[ClassOverAsk].RequestedGPUHours},
		{"auto has fewer timeouts", auto.Usage.Timeouts < static.Usage.Timeouts},
		{"auto runs starved templates faster", auto.ByClass[ClassStarved].MeanRuntime < static.ByClass[ClassStarved].MeanRuntime},
		{"auto loses fewer GPU-hours to timeouts", auto.Usage.TimedOutGPUHours < static.Usage.TimedOutGPUHours},
		{"auto puts more of what it holds into completed work", auto.Usage.UsefulShare() > static.Usage.UsefulShare()},
		{"every run counted once", static.Usage.Runs == len(jobs) && auto.Usage.Runs == len(jobs)},
	} {
		if !tc.ok {
			t.Errorf("%s:\n%s", tc.name, SizingTable(static, auto))
		}
	}
	for _, res := range []Result{static, auto} {
		sum := 0
		for _, cl := range Classes {
			sum += res.ByClass[cl].Runs
		}
		if sum != len(jobs) {
			t.Errorf("classes hold %d of %d runs", sum, len(jobs))
		}
		for _, r := range res.Runs {
			if r.UsedGPUHours > r.RequestedGPUHours+1e-12 {
				t.Errorf("run %s used %v of %v GPU-hours", r.Job.ID, r.UsedGPUHours, r.RequestedGPUHours)
			}
		}
	}
}

// BenchmarkSizing replays the recurring Philly workload (seed 1) twice,
// without sizing and with auto sizing (CompareSizing), and reports the
// GPU-hours requested and used, the share used, the mean job completion
// time and the timeouts of both. Its log has the table for seeds 1 to 4:
//
//	go test -v -run '^$' -bench Sizing -benchtime 1x ./bench/tracereplay/sizingbench/
func BenchmarkSizing(b *testing.B) {
	jobs, source := loadPhilly(b, Options{})
	var static, auto Result
	for b.Loop() {
		static, auto = CompareSizing(jobs, Options{})
	}
	for _, m := range []struct {
		name string
		u    Usage
	}{{"static", static.Usage}, {"auto", auto.Usage}} {
		b.ReportMetric(m.u.RequestedGPUHours, m.name+"_requested_gpuh")
		b.ReportMetric(m.u.UsedGPUHours, m.name+"_used_gpuh")
		b.ReportMetric(m.u.UsedShare(), m.name+"_used_ratio")
		b.ReportMetric(m.u.UsefulShare(), m.name+"_useful_ratio")
		b.ReportMetric(m.u.MeanJCT.Seconds(), m.name+"_mean_jct_s")
		b.ReportMetric(m.u.MeanWait.Seconds(), m.name+"_mean_wait_s")
		b.ReportMetric(float64(m.u.Timeouts), m.name+"_timeouts")
	}
	log := source + "\nseed 1:\n" + SizingTable(static, auto)
	for seed := int64(2); seed <= 4; seed++ {
		o := Options{Seed: seed}
		jobs, _ := loadPhilly(b, o)
		s, a := CompareSizing(jobs, o)
		log += fmt.Sprintf("seed %d (%d runs):\n%s", seed, len(jobs), SizingTable(s, a))
	}
	b.Log(log)
}
