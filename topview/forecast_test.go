package topview

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// finishedRun is a complete allocation of job on node 1 whose task t held
// a whole GPU for d, ending at end.
func finishedRun(id, job string, end time.Time, d time.Duration) *api.AllocationListStub {
	a := allocStub(id, job, node1ID, "complete",
		&api.AllocatedDeviceResource{Vendor: "nvidia", Type: "gpu", Name: h100, DeviceIDs: []string{gpuB}})
	a.CreateTime = end.Add(-d - time.Minute).UnixNano()
	a.TaskStates = map[string]*api.TaskState{"t": {State: "dead", StartedAt: end.Add(-d), FinishedAt: end}}
	return a
}

// oneTaskJob is a job whose group g has one task asking for n of dev.
func oneTaskJob(id, task, dev string, n uint64) *api.Job {
	return &api.Job{
		ID: ptr(id), Namespace: ptr("default"), Type: ptr("batch"), JobModifyIndex: ptr(uint64(10)), NodePool: ptr("gpu"),
		TaskGroups: []*api.TaskGroup{{Name: ptr("g"), Tasks: []*api.Task{
			{Name: "zz-cpu", Resources: &api.Resources{}},
			{Name: task, Resources: &api.Resources{Devices: []*api.RequestedDevice{{Name: dev, Count: ptr(n)}}}},
		}}},
	}
}

// forecastInput is the fixture with train's task started 4m ago and the
// given finished allocations.
func forecastFixture(finished ...*api.AllocationListStub) *Input {
	in := fixtureInput()
	in.Allocs[0].TaskStates = map[string]*api.TaskState{"t": {State: "running", StartedAt: t0.Add(-4 * time.Minute)}}
	in.Finished = finished
	return in
}

// queueBlocked adds a blocked evaluation of job, created a minute ago.
func queueBlocked(in *Input, job *api.Job) {
	in.Blocked = append(in.Blocked, blockedEval("e-"+*job.ID, *job.ID, t0.Add(-time.Minute), &api.AllocationMetric{NodesEvaluated: 1, NodePool: "gpu", NodesExhausted: 1}))
	in.Specs[JobKey{Namespace: "default", ID: *job.ID}] = job
	in.Jobs[JobKey{Namespace: "default", ID: *job.ID}] = listedJob(job)
}

func secs(p *int64) string { return num(p) }

func TestBuildTaskPredictions(t *testing.T) {
	ten := 10 * time.Minute
	tests := []struct {
		name string
		in   *Input
		// train's prediction: remaining, runtime, basis
		remaining, runtime, basis string
	}{
		{
			// One run is fewer than predict.MinRuns (3) at every level:
			// sizing takes the task to be half done after 4m, which is
			// elapsed time, not a prediction.
			name: "one finished run: elapsed only, no figures", in: forecastFixture(finishedRun("f1", "train", t0.Add(-time.Hour), ten)),
			remaining: "nil", runtime: "nil", basis: "elapsed",
		},
		{
			// Three runs of 10m, but train has run 4m; with 12m it has
			// outlived them all: elapsed again.
			name: "outlived its history: elapsed only, no figures",
			in: func() *Input {
				in := forecastFixture(finishedRun("f1", "train", t0.Add(-3*time.Hour), ten),
					finishedRun("f2", "train", t0.Add(-2*time.Hour), ten), finishedRun("f3", "train", t0.Add(-time.Hour), ten))
				in.Allocs[0].TaskStates["t"].StartedAt = t0.Add(-12 * time.Minute)
				return in
			}(),
			remaining: "nil", runtime: "nil", basis: "elapsed",
		},
		{
			name: "sysbatch: forecast as batch",
			in: func() *Input {
				in := forecastFixture(finishedRun("f1", "train", t0.Add(-3*time.Hour), ten),
					finishedRun("f2", "train", t0.Add(-2*time.Hour), ten), finishedRun("f3", "train", t0.Add(-time.Hour), ten))
				in.Allocs[0].JobType = "sysbatch"
				return in
			}(),
			remaining: "360", runtime: "600", basis: "job",
		},
		{
			// The median of its own runs longer than 4m (10m), less 4m.
			name: "three of its own runs: job p50",
			in: forecastFixture(finishedRun("f1", "train", t0.Add(-3*time.Hour), ten),
				finishedRun("f2", "train", t0.Add(-2*time.Hour), ten), finishedRun("f3", "train", t0.Add(-time.Hour), ten)),
			remaining: "360", runtime: "600", basis: "job",
		},
		{
			name: "three runs of other jobs on one GPU: pool p50",
			in: forecastFixture(finishedRun("f1", "other", t0.Add(-3*time.Hour), ten),
				finishedRun("f2", "other", t0.Add(-2*time.Hour), 20*time.Minute), finishedRun("f3", "other", t0.Add(-time.Hour), 30*time.Minute)),
			remaining: "960", runtime: "1200", basis: "pool",
		},
		{
			name: "history unreadable: unknown",
			in: func() *Input {
				in := forecastFixture(finishedRun("f1", "train", t0.Add(-time.Hour), ten))
				in.HistoryError = "list finished allocations: HTTP 500: boom"
				return in
			}(),
			remaining: "nil", runtime: "nil", basis: "none",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := Build(tc.in)
			var train *AllocRef
			for _, a := range v.Nodes[0].GPUs[0].Allocations {
				if a.Job == "train" {
					train = &a
				}
			}
			if train == nil || train.Prediction == nil {
				t.Fatalf("no prediction for train: %+v", v.Nodes[0].GPUs[0].Allocations)
			}
			p := train.Prediction
			if secs(p.RemainingSeconds) != tc.remaining || secs(p.RuntimeSeconds) != tc.runtime || p.Basis != tc.basis {
				t.Errorf("prediction %s/%s %s, want %s/%s %s", secs(p.RemainingSeconds), secs(p.RuntimeSeconds), p.Basis,
					tc.remaining, tc.runtime, tc.basis)
			}
			// Tasks never started and without history are unknown.
			infer := v.Nodes[0].GPUs[3].Slices[0].Alloc
			if infer == nil || infer.Job != "infer" || infer.Prediction == nil || infer.Prediction.Basis != "none" ||
				infer.Prediction.RemainingSeconds != nil {
				t.Errorf("infer %+v", infer)
			}
		})
	}
}

// Services and system jobs run until stopped: a time left or run time
// would be made up, whatever the history holds. Their blocked work still
// gets a predicted wait.
func TestBuildNoRuntimeForJobsThatDoNotEnd(t *testing.T) {
	ten := 10 * time.Minute
	for _, typ := range []string{"service", "system", ""} {
		t.Run("type "+typ, func(t *testing.T) {
			in := forecastFixture(finishedRun("f1", "train", t0.Add(-3*time.Hour), ten),
				finishedRun("f2", "train", t0.Add(-2*time.Hour), ten), finishedRun("f3", "train", t0.Add(-time.Hour), ten))
			in.Allocs[0].JobType = typ
			in.Nodes[0].NodeResources.Devices[0].Instances[0].Healthy = true
			job := oneTaskJob("web", "main", "nvidia/gpu", 1)
			job.Type = ptr(typ)
			queueBlocked(in, job)
			v := Build(in)
			if a := v.Nodes[0].GPUs[0].Allocations[0]; a.Job != "train" || a.Prediction != nil {
				t.Errorf("train (%q) predicted: %+v", typ, a.Prediction)
			}
			for _, e := range v.Queue {
				if e.Job == "web" && (e.PredictedRuntimeSeconds != nil || e.PredictedWaitSeconds == nil) {
					t.Errorf("web (%q) queued: wait %s, run %s; want a wait and no run time", typ, secs(e.PredictedWaitSeconds), secs(e.PredictedRuntimeSeconds))
				}
			}
		})
	}
}

func TestBuildQueuePredictions(t *testing.T) {
	ten := 10 * time.Minute
	history := []*api.AllocationListStub{finishedRun("f1", "train", t0.Add(-3*time.Hour), ten),
		finishedRun("f2", "train", t0.Add(-2*time.Hour), ten), finishedRun("f3", "train", t0.Add(-time.Hour), ten)}
	tests := []struct {
		name             string
		in               func() *Input
		job              string
		wait, run, basis string
		predicted        string // the PRED WAIT and PRED RUN columns of job's row
	}{
		{
			name: "an ask larger than the pool, no history: unknown", job: "big",
			in:   func() *Input { return forecastFixture() },
			wait: "nil", run: "nil", basis: "none", predicted: "- -",
		},
		{
			// Six GPUs never fit a pool of one; its run time is the
			// pool's p50 of whole-GPU runs.
			name: "an ask larger than the pool: wait unknown, run time known", job: "big",
			in:   func() *Input { return forecastFixture(history...) },
			wait: "nil", run: "600", basis: "none", predicted: "- ~10m00s",
		},
		{
			// Shares 0 and 3 are free; no MPS run to predict its run time.
			name: "two MPS shares fit the free ones now", job: "nb",
			in: func() *Input {
				in := forecastFixture(history...)
				queueBlocked(in, oneTaskJob("nb", "main", "nvidia/mps", 2))
				return in
			},
			wait: "0", run: "nil", basis: "fits_now", predicted: "~0s -",
		},
		{
			// gpuB healthy and free, gpuA freed by train in 6m (job p50);
			// two's run time is the pool's p50 of whole-GPU runs: 10m.
			name: "two GPUs wait for train to end: list schedule", job: "two",
			in: func() *Input {
				in := forecastFixture(history...)
				in.Nodes[0].NodeResources.Devices[0].Instances[0].Healthy = true
				queueBlocked(in, oneTaskJob("two", "main", "nvidia/gpu", 2))
				return in
			},
			wait: "360", run: "600", basis: "list_schedule", predicted: "~6m00s ~10m00s",
		},
		{
			name: "history unreadable: unknown", job: "two",
			in: func() *Input {
				in := forecastFixture(history...)
				in.Nodes[0].NodeResources.Devices[0].Instances[0].Healthy = true
				queueBlocked(in, oneTaskJob("two", "main", "nvidia/gpu", 2))
				in.HistoryError = "boom"
				return in
			},
			wait: "nil", run: "nil", basis: "none", predicted: "- -",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := Build(tc.in())
			var e *QueueEntry
			for i := range v.Queue {
				if v.Queue[i].Job == tc.job {
					e = &v.Queue[i]
				}
			}
			if e == nil {
				t.Fatalf("%s not queued: %+v", tc.job, v.Queue)
			}
			if secs(e.PredictedWaitSeconds) != tc.wait || secs(e.PredictedRuntimeSeconds) != tc.run || e.PredictionBasis != tc.basis {
				t.Errorf("wait %s run %s basis %q, want %s %s %q", secs(e.PredictedWaitSeconds), secs(e.PredictedRuntimeSeconds),
					e.PredictionBasis, tc.wait, tc.run, tc.basis)
			}
			if got := predSeconds(e.PredictedWaitSeconds) + " " + predSeconds(e.PredictedRuntimeSeconds); got != tc.predicted {
				t.Errorf("PRED WAIT, PRED RUN %q, want %q", got, tc.predicted)
			}
			for _, q := range v.Queue {
				if q.State == StatePending && (q.PredictionBasis != "" || q.PredictedWaitSeconds != nil) {
					t.Errorf("pending entry forecast: %+v", q)
				}
			}
		})
	}
}

func TestWriteTableForecasts(t *testing.T) {
	ten := 10 * time.Minute
	in := forecastFixture(finishedRun("f1", "train", t0.Add(-3*time.Hour), ten),
		finishedRun("f2", "train", t0.Add(-2*time.Hour), ten), finishedRun("f3", "train", t0.Add(-time.Hour), ten))
	in.Nodes[0].NodeResources.Devices[0].Instances[0].Healthy = true
	queueBlocked(in, oneTaskJob("two", "main", "nvidia/gpu", 2))
	tests := []struct {
		name   string
		edit   func(in *Input)
		want   []string
		absent []string
	}{
		{"forecasts", func(*Input) {}, []string{
			"  GPU  SLICES        TASK          ALLOC     MEM GiB  PRED LEFT",
			"  0    -             train/g/t     a0000001     29.3     ~6m00s",
			"  JOB         STATE    DEVICES              COUNT   WAIT  PRED WAIT  PRED RUN",
			"  two/g       blocked  gpu x2                   1  1m00s     ~6m00s   ~10m00s",
		}, []string{"forecasts unknown"}},
		{"a service: no time left", func(in *Input) { in.Allocs[0].JobType = "service" }, []string{
			"  0    -             train/g/t     a0000001     29.3          -",
		}, nil},
		{"history unreadable", func(in *Input) { in.HistoryError = "list finished allocations: HTTP 500: boom" }, []string{
			"forecasts unknown: list finished allocations: HTTP 500: boom",
			"  0    -             train/g/t     a0000001     29.3          -",
			"  two/g       blocked  gpu x2                   1  1m00s          -         -",
		}, []string{"~"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := *in
			in.Allocs = slices.Clone(in.Allocs)
			a := *in.Allocs[0]
			in.Allocs[0] = &a
			tc.edit(&in)
			var b strings.Builder
			if err := WriteTable(&b, Build(&in), TableOptions{}); err != nil {
				t.Fatal(err)
			}
			got := b.String()
			for _, w := range tc.want {
				if !strings.Contains(got, w+"\n") {
					t.Errorf("no line %q in\n%s", w, got)
				}
			}
			for _, w := range tc.absent {
				if strings.Contains(got, w) {
					t.Errorf("%q in\n%s", w, got)
				}
			}
		})
	}
}

func TestPredLeft(t *testing.T) {
	s := func(n int64) *int64 { return &n }
	tests := []struct {
		p    *Prediction
		want string
	}{
		{nil, "-"},
		{&Prediction{Basis: "none"}, "-"},
		{&Prediction{Basis: "elapsed"}, "-"},
		{&Prediction{RemainingSeconds: s(720), RuntimeSeconds: s(900), Basis: "job"}, "~12m00s"},
		{&Prediction{RemainingSeconds: s(0), RuntimeSeconds: s(60), Basis: "finished"}, "-"},
	}
	for _, tc := range tests {
		if got := predLeft(tc.p); got != tc.want {
			t.Errorf("predLeft(%+v) = %q, want %q", tc.p, got, tc.want)
		}
	}
}

// Forecast, what the sizer's deadlines read, is the forecast the view
// shows, and refuses an input whose history could not be read.
func TestForecastForTheSizer(t *testing.T) {
	in := fixtureInput()
	fc, err := Forecast(in)
	if err != nil {
		t.Fatal(err)
	}
	v := Build(in)
	blocked := 0
	for _, q := range v.Queue {
		if q.State != StateBlocked {
			continue
		}
		blocked++
		var found bool
		for _, w := range fc.Queued {
			if w.Job == q.Job && w.Group == q.Group {
				found = true
				if got := seconds(w.Wait); (got == nil) != (q.PredictedWaitSeconds == nil) || (got != nil && *got != *q.PredictedWaitSeconds) {
					t.Errorf("%s/%s: Forecast wait %v, view %v", q.Job, q.Group, got, q.PredictedWaitSeconds)
				}
			}
		}
		if !found {
			t.Errorf("blocked %s/%s has no forecast", q.Job, q.Group)
		}
	}
	if blocked == 0 || len(fc.Tasks) == 0 {
		t.Fatalf("the fixture has %d blocked entries and %d forecast tasks: nothing compared", blocked, len(fc.Tasks))
	}
	in.HistoryError = "list terminal allocations: 500"
	if _, err := Forecast(in); err == nil || err.Error() != in.HistoryError {
		t.Errorf("Forecast with a failed history read: %v", err)
	}
}
