package sizingbench

import (
	"fmt"
	"math"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nomad-gpu/nomad-gpu/sizing/history"
	"github.com/nomad-gpu/nomad-gpu/tracereplay"
)

const phillyPath = "/work/shared/traces/philly.csv"

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

// twoGPUs is one node of two whole GPUs.
var twoGPUs = Options{Cluster: tracereplay.Cluster{Nodes: 1, GPUsPerNode: 2}}

func TestReplaySchedule(t *testing.T) {
	big, small, urgent := template("big", 2, 50, 1), template("small", 1, 50, 1), template("urgent", 1, 80, 1)
	s := time.Second
	for _, tc := range []struct {
		name   string
		jobs   []Job
		size   func(Template, []history.Run) int
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
		{"shrunk below its need stretches", []Job{job(big, "b", 0, 100*s)}, func(Template, []history.Run) int { return 1 },
			[]time.Duration{0}, []time.Duration{200 * s}},
		{"more than it needs does not speed it; clipped to a node", []Job{job(small, "s", 0, 100*s)}, func(Template, []history.Run) int { return 9 },
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
	tpl := template("t", 2, 50, 0.5) // needs 1 of its 2 GPUs
	h := time.Hour
	for _, tc := range []struct {
		name       string
		size       func(Template, []history.Run) int
		held, used float64
	}{
		{"as asked", nil, 2, 1},
		{"sized to its need", func(Template, []history.Run) int { return 1 }, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := twoGPUs
			o.Size = tc.size
			r := Replay([]Job{job(tpl, "t#1", 0, h)}, o).Runs[0]
			if math.Abs(r.GPUHours-tc.held) > 1e-9 || math.Abs(r.UsedGPUHours-tc.used) > 1e-9 {
				t.Errorf("GPU-hours held %v, used %v; want %v, %v", r.GPUHours, r.UsedGPUHours, tc.held, tc.used)
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
					gpuh += float64(j.Template.Slice.Count) * j.Template.GPUsPerUnit * j.Duration.Hours()
				}
				span = time.Duration(gpuh / (o.Load * 32) * float64(time.Hour))
			}
			per := map[string]int{}
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
				if u := j.Template.TrueUse; u < 0.25 || u > 1 {
					t.Errorf("%s true use %v", j.ID, u)
				}
				if !strings.HasPrefix(j.ID, j.Template.ID+"#") {
					t.Errorf("ID %s of template %s", j.ID, j.Template.ID)
				}
			}
			if last := jobs[len(jobs)-1].Arrival; last < span*8/10 {
				t.Errorf("last arrival %v; want arrivals spread over %v", last, span)
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
	if _, err := os.Stat(phillyPath); err != nil {
		tb.Skipf("no Philly extract: %v", err)
	}
	jobs, source, err := LoadPhilly(phillyPath, o)
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
//	go test -v -run '^$' -bench Prediction -benchtime 1x ./tracereplay/sizingbench/
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
