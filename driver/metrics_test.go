package driver

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/driver/checkpoint"
	"github.com/nomad-gpu/nomad-gpu/driver/gpuwatch"
	"github.com/nomad-gpu/nomad-gpu/gpu"
	"github.com/nomad-gpu/nomad-gpu/internal/metrics"
	"github.com/nomad-gpu/nomad-gpu/wire/base"
	"github.com/nomad-gpu/nomad-gpu/wire/drivers"
)

const metricsHost = "gpu-node-1"

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

// metricsDriver is a driver whose tasks are made up in memory: the
// metrics' bookkeeping needs no processes.
func metricsDriver(t *testing.T, edit func(*Config)) (*Driver, *fakeClock) {
	t.Helper()
	d := New(nil)
	cfg := &Config{}
	if err := decodeDefaults(cfg); err != nil {
		t.Fatal(err)
	}
	cfg.Metrics.NodeName = metricsHost
	if edit != nil {
		edit(cfg)
	}
	if err := d.SetConfig(cfg, nil); err != nil {
		t.Fatal(err)
	}
	clock := &fakeClock{t: time.Unix(1_800_000_000, 0)}
	d.metrics.now = clock.now
	t.Cleanup(func() { d.Shutdown() })
	return d, clock
}

// fakeTask is a started run of task `name` of allocation alloc, of job
// "train" (ID "train-7") and group "g", in the default namespace.
func fakeTask(d *Driver, alloc, name, run string, ckpt *checkpoint.Run) *task {
	cfg := &drivers.TaskConfig{ID: alloc + "/" + name + "/" + run, Name: name, JobName: "train", JobID: "train-7", TaskGroupName: "g", AllocID: alloc}
	t := &task{id: cfg.ID, cfg: cfg, done: make(chan struct{})}
	if ckpt != nil {
		t.ckpt = &checkpointer{run: ckpt}
	}
	d.store.add(t)
	d.metrics.started(t)
	return t
}

// destroy does what DestroyTask does for the metrics.
func destroy(d *Driver, t *task) {
	d.store.remove(t.id)
	d.metrics.destroyed(t)
}

func taskRow(name, alloc, task string, v float64, extra ...string) string {
	labels := []string{`alloc_id="` + alloc + `"`, `host="` + metricsHost + `"`, `job="train"`, `namespace="default"`, `task="` + task + `"`, `task_group="g"`}
	labels = append(labels, extra...)
	slices.Sort(labels)
	return fmt.Sprintf("%s{%s} %g", name, strings.Join(labels, ","), v)
}

func expectMetric(name string, rows ...string) string {
	m := metrics.Find(contract.DriverMetrics(), name)
	return fmt.Sprintf("# HELP %s %s\n# TYPE %s %s\n%s\n", name, m.Help, name, m.Type, strings.Join(rows, "\n"))
}

// histogram returns the sample count and sum of a histogram series of
// the task's labels.
func histogram(t *testing.T, c prometheus.Collector, name, alloc string) (uint64, float64) {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if labelOf(m, contract.LabelAllocID) == alloc {
				return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
			}
		}
	}
	return 0, 0
}

func labelOf(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func TestTaskMetricsAfterEvents(t *testing.T) {
	ckpt := contract.MetricTaskCheckpoints
	cases := []struct {
		name    string
		ckpt    *checkpoint.Run
		events  func(d *Driver, c *fakeClock, t *task)
		metrics []string
		want    string
		// commits and requested are the two histograms' sample counts;
		// commitSum is the commit histogram's sum.
		commits, requested uint64
		commitSum          float64
	}{
		{
			name: "checkpoint requested and committed",
			ckpt: &checkpoint.Run{},
			events: func(d *Driver, c *fakeClock, t *task) {
				d.metrics.checkpointRequested(t)
				c.advance(4 * time.Second)
				d.metrics.checkpointCommitted(t, 1500*time.Millisecond, 4096)
			},
			metrics: []string{ckpt, contract.MetricTaskCheckpointRequests, contract.MetricTaskCheckpointSize, contract.MetricTaskCheckpointLastOK},
			want: expectMetric(ckpt,
				taskRow(ckpt, "a1", "train", 1, `result="committed"`),
				taskRow(ckpt, "a1", "train", 0, `result="failed"`),
				taskRow(ckpt, "a1", "train", 0, `result="timeout"`),
			) + expectMetric(contract.MetricTaskCheckpointRequests, taskRow(contract.MetricTaskCheckpointRequests, "a1", "train", 1)) +
				expectMetric(contract.MetricTaskCheckpointSize, taskRow(contract.MetricTaskCheckpointSize, "a1", "train", 4096)) +
				expectMetric(contract.MetricTaskCheckpointLastOK, taskRow(contract.MetricTaskCheckpointLastOK, "a1", "train", 1_800_000_004)),
			commits: 1, requested: 1, commitSum: 1.5,
		},
		{
			name: "a stop's checkpoint times out, then the task commits late; a commit fails",
			ckpt: &checkpoint.Run{},
			events: func(d *Driver, c *fakeClock, t *task) {
				d.metrics.checkpointRequested(t)
				c.advance(30 * time.Second)
				d.metrics.checkpointFailed(t, contract.CheckpointTimeout)
				c.advance(5 * time.Second)
				d.metrics.checkpointCommitted(t, time.Second, 1)
				d.metrics.checkpointFailed(t, contract.CheckpointFailed) // a task commit that was refused
			},
			metrics: []string{ckpt},
			want: expectMetric(ckpt,
				taskRow(ckpt, "a1", "train", 1, `result="committed"`),
				taskRow(ckpt, "a1", "train", 1, `result="failed"`),
				taskRow(ckpt, "a1", "train", 1, `result="timeout"`),
			),
			commits: 1, requested: 1, commitSum: 1,
		},
		{
			name: "a commit the task made on its own has no request duration",
			ckpt: &checkpoint.Run{},
			events: func(d *Driver, c *fakeClock, t *task) {
				d.metrics.checkpointCommitted(t, 200*time.Millisecond, 1)
				d.metrics.checkpointCommitted(t, 300*time.Millisecond, 1)
			},
			metrics: []string{contract.MetricTaskCheckpointRequests},
			want:    expectMetric(contract.MetricTaskCheckpointRequests, taskRow(contract.MetricTaskCheckpointRequests, "a1", "train", 0)),
			commits: 2, requested: 0, commitSum: 0.5,
		},
		{
			name:    "a run that restored a checkpoint",
			ckpt:    &checkpoint.Run{Restore: &checkpoint.Generation{Seq: 3}},
			metrics: []string{contract.MetricTaskRestores},
			want:    expectMetric(contract.MetricTaskRestores, taskRow(contract.MetricTaskRestores, "a1", "train", 1)),
		},
		{
			name: "preemption and enforcement kill",
			events: func(d *Driver, c *fakeClock, t *task) {
				d.metrics.preempted(t)
				d.metrics.killed(t, contract.KillGPUMemory)
			},
			metrics: []string{contract.MetricTaskPreemptions, contract.MetricTaskEnforcementKills, contract.MetricTaskRestores, ckpt},
			want: expectMetric(contract.MetricTaskPreemptions, taskRow(contract.MetricTaskPreemptions, "a1", "train", 1)) +
				expectMetric(contract.MetricTaskEnforcementKills, taskRow(contract.MetricTaskEnforcementKills, "a1", "train", 1, `reason="gpu_memory"`)) +
				// A task without a checkpoint block has no checkpoint series.
				expectMetric(contract.MetricTaskRestores, taskRow(contract.MetricTaskRestores, "a1", "train", 0)),
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d, clock := metricsDriver(t, nil)
			tk := fakeTask(d, "a1", "train", "r1", c.ckpt)
			if c.events != nil {
				c.events(d, clock, tk)
			}
			if err := testutil.CollectAndCompare(d.metrics, strings.NewReader(c.want), c.metrics...); err != nil {
				t.Error(err)
			}
			if n, sum := histogram(t, d.metrics, contract.MetricTaskCheckpointDuration, "a1"); n != c.commits || sum != c.commitSum {
				t.Errorf("commit duration: %d samples, sum %g; want %d, %g", n, sum, c.commits, c.commitSum)
			}
			if n, _ := histogram(t, d.metrics, contract.MetricTaskCheckpointReqDur, "a1"); n != c.requested {
				t.Errorf("request duration: %d samples, want %d", n, c.requested)
			}
		})
	}
}

// Labels are those of Nomad's allocation metrics: the namespace (default
// when unset), the job's name (its ID when it has none), group, alloc, task.
func TestTaskMetricLabels(t *testing.T) {
	d, _ := metricsDriver(t, nil)
	fakeTask(d, "a1", "train", "r1", nil)
	b := &task{id: "a2/eval/r1", cfg: &drivers.TaskConfig{ID: "a2/eval/r1", Name: "eval", JobID: "eval-job", TaskGroupName: "e", Namespace: "ml", AllocID: "a2"}, done: make(chan struct{})}
	d.store.add(b)
	d.metrics.started(b)
	d.metrics.preempted(b)
	want := expectMetric(contract.MetricTaskPreemptions,
		taskRow(contract.MetricTaskPreemptions, "a1", "train", 0),
		`nomad_gpu_task_preemptions_total{alloc_id="a2",host="`+metricsHost+`",job="eval-job",namespace="ml",task="eval",task_group="e"} 1`,
	)
	if err := testutil.CollectAndCompare(d.metrics, strings.NewReader(want), contract.MetricTaskPreemptions); err != nil {
		t.Error(err)
	}
}

func TestTaskSeriesRemovedAfterDestroy(t *testing.T) {
	count := func(d *Driver) int { return testutil.CollectAndCount(d.metrics, contract.MetricTaskPreemptions) }
	t.Run("at once with task_retention 0", func(t *testing.T) {
		d, _ := metricsDriver(t, func(c *Config) { c.Metrics.TaskRetention = 0 })
		tk := fakeTask(d, "a1", "train", "r1", &checkpoint.Run{})
		d.metrics.preempted(tk)
		destroy(d, tk)
		if n := testutil.CollectAndCount(d.metrics); n != 0 {
			t.Fatalf("%d series left", n)
		}
	})
	t.Run("after task_retention", func(t *testing.T) {
		d, clock := metricsDriver(t, func(c *Config) { c.Metrics.TaskRetention = 5 * time.Minute })
		tk := fakeTask(d, "a1", "train", "r1", nil)
		d.metrics.preempted(tk)
		destroy(d, tk)
		clock.advance(4 * time.Minute)
		if count(d) != 1 {
			t.Fatal("a destroyed task's series went before the retention: the last scrape would miss its preemption")
		}
		clock.advance(2 * time.Minute)
		if n := testutil.CollectAndCount(d.metrics); n != 0 || len(d.metrics.series) != 0 {
			t.Fatalf("%d series, %d label sets left after the retention", n, len(d.metrics.series))
		}
	})
	t.Run("a restart in the same allocation keeps them", func(t *testing.T) {
		d, clock := metricsDriver(t, func(c *Config) { c.Metrics.TaskRetention = time.Minute })
		first := fakeTask(d, "a1", "train", "r1", nil)
		d.metrics.preempted(first)
		destroy(d, first)
		second := fakeTask(d, "a1", "train", "r2", nil)
		clock.advance(time.Hour)
		if got := testutil.ToFloat64(d.metrics.preempts.With(d.metrics.series[strings.Join([]string{metricsHost, "default", "train", "g", "a1", "train"}, "\x00")].labels)); got != 1 || count(d) != 1 {
			t.Fatalf("counter %g, %d series while the second run lives", got, count(d))
		}
		destroy(d, second)
		clock.advance(2 * time.Minute)
		if count(d) != 0 {
			t.Fatal("series left after both runs")
		}
	})
	t.Run("an event after destroy does not leak", func(t *testing.T) {
		d, clock := metricsDriver(t, func(c *Config) { c.Metrics.TaskRetention = time.Minute })
		tk := fakeTask(d, "a1", "train", "r1", nil)
		destroy(d, tk)
		clock.advance(2 * time.Minute)
		d.metrics.preempted(tk) // the stop reason arrived late
		if count(d) != 1 {
			t.Fatal("a late preemption is not counted")
		}
		clock.advance(2 * time.Minute)
		if count(d) != 0 || len(d.metrics.series) != 0 || len(d.metrics.byTask) != 0 {
			t.Fatal("a late event kept the destroyed task's series")
		}
	})
}

type fakeSource map[string][]gpu.Process

func (s fakeSource) Processes(uuid string) ([]gpu.Process, error) { return s[uuid], nil }

// GPU memory comes from the watchdog's last round, per device, with the
// slice's limit where it has one; it goes with the task.
func TestTaskGPUMemoryMetrics(t *testing.T) {
	d, _ := metricsDriver(t, func(c *Config) { c.Metrics.TaskRetention = time.Hour })
	w := gpuwatch.New(fakeSource{"GPU-a": {{PID: 100, UsedMiB: 3000}, {PID: 999, UsedMiB: 7}}, "MIG-b": {{PID: 101, UsedMiB: 512}}}, time.Hour, nil, nil)
	d.rt.Store(&runtimeState{watch: w})
	tk := fakeTask(d, "a1", "train", "r1", nil)
	w.Add(gpuwatch.Task{ID: tk.id, Mode: gpuwatch.ModeOff,
		Devices: []gpuwatch.DeviceLimit{{UUID: "GPU-a", LimitMiB: 20480}, {UUID: "MIG-b", LimitMiB: 9856}},
		Pids:    func() ([]int, error) { return []int{100, 101}, nil }})
	w.Check()
	used, limit := contract.MetricTaskGPUMemoryUsed, contract.MetricTaskGPUMemoryLimit
	want := expectMetric(used,
		taskRow(used, "a1", "train", 3000<<20, `uuid="GPU-a"`),
		taskRow(used, "a1", "train", 512<<20, `uuid="MIG-b"`),
	) + expectMetric(limit,
		taskRow(limit, "a1", "train", 20480<<20, `uuid="GPU-a"`),
		taskRow(limit, "a1", "train", 9856<<20, `uuid="MIG-b"`),
	)
	if err := testutil.CollectAndCompare(d.metrics, strings.NewReader(want), used, limit); err != nil {
		t.Error(err)
	}
	destroy(d, tk)
	w.Remove(tk.id)
	if n := testutil.CollectAndCount(d.metrics, used, limit); n != 0 {
		t.Fatalf("%d GPU memory series after destroy", n)
	}
}

// A task's utilisation of its slice, per device, from the watchdog's last
// round: an MPS task holding 2 of 4 shares (50 % of the SMs) flat out is at
// 100 %, a task at half of a whole GPU at 50 %, a MIG task at its
// instance's 70 %; it goes with the task.
func TestTaskGPUUtilizationMetrics(t *testing.T) {
	d, _ := metricsDriver(t, func(c *Config) { c.Metrics.TaskRetention = time.Hour })
	src := utilSource{
		procs: map[string][]gpu.Process{},
		util:  map[string]map[uint32]float64{"GPU-a": {100: 30, 101: 20, 999: 40}, "GPU-b": {200: 50}, "MIG-c": {300: 70}},
	}
	w := gpuwatch.New(src, time.Hour, nil, nil)
	d.rt.Store(&runtimeState{watch: w})
	pids := func(p ...int) func() ([]int, error) { return func() ([]int, error) { return p, nil } }
	mps := fakeTask(d, "a1", "mps", "r1", nil)
	whole := fakeTask(d, "a2", "whole", "r1", nil)
	mig := fakeTask(d, "a3", "mig", "r1", nil)
	w.Add(gpuwatch.Task{ID: mps.id, Mode: gpuwatch.ModeOff, Pids: pids(100, 101),
		Devices: []gpuwatch.DeviceLimit{{UUID: "GPU-a", LimitMiB: 20480, SharePercent: 50, Shared: true}}})
	w.Add(gpuwatch.Task{ID: whole.id, Mode: gpuwatch.ModeOff, Pids: pids(200), Devices: []gpuwatch.DeviceLimit{{UUID: "GPU-b", SharePercent: 100}}})
	w.Add(gpuwatch.Task{ID: mig.id, Mode: gpuwatch.ModeOff, Pids: pids(300), Devices: []gpuwatch.DeviceLimit{{UUID: "MIG-c", LimitMiB: 9856, SharePercent: 100}}})
	w.Check()
	name := contract.MetricTaskGPUUtilization
	want := expectMetric(name,
		taskRow(name, "a1", "mps", 100, `uuid="GPU-a"`),
		taskRow(name, "a2", "whole", 50, `uuid="GPU-b"`),
		taskRow(name, "a3", "mig", 70, `uuid="MIG-c"`),
	)
	if err := testutil.CollectAndCompare(d.metrics, strings.NewReader(want), name); err != nil {
		t.Error(err)
	}
	for _, tk := range []*task{mps, whole, mig} {
		destroy(d, tk)
		w.Remove(tk.id)
	}
	if n := testutil.CollectAndCount(d.metrics, name); n != 0 {
		t.Fatalf("%d utilization series after destroy", n)
	}
}

// Every metric of the contract's list, and nothing else, passes the linter.
func TestTaskMetricsLintAndContract(t *testing.T) {
	d, _ := metricsDriver(t, nil)
	w := gpuwatch.New(utilSource{procs: map[string][]gpu.Process{"GPU-a": {{PID: 100, UsedMiB: 10}}}, util: map[string]map[uint32]float64{"GPU-a": {100: 5}}}, time.Hour, nil, nil)
	d.rt.Store(&runtimeState{watch: w})
	tk := fakeTask(d, "a1", "train", "r1", &checkpoint.Run{Restore: &checkpoint.Generation{Seq: 1}})
	w.Add(gpuwatch.Task{ID: tk.id, Mode: gpuwatch.ModeOff, Devices: []gpuwatch.DeviceLimit{{UUID: "GPU-a", LimitMiB: 100}}, Pids: func() ([]int, error) { return []int{100}, nil }})
	w.Check()
	d.metrics.checkpointRequested(tk)
	d.metrics.checkpointCommitted(tk, time.Second, 10)
	d.metrics.preempted(tk)
	d.metrics.killed(tk, contract.KillGPUMemory)

	problems, err := testutil.CollectAndLint(d.metrics)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(d.metrics)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got, want []string
	for _, f := range fams {
		got = append(got, f.GetName())
	}
	for _, m := range contract.DriverMetrics() {
		want = append(want, m.Name)
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("exported %v\ncontract  %v", got, want)
	}
}

func TestDriverMetricsEndpoint(t *testing.T) {
	d, _ := metricsDriver(t, func(c *Config) { c.Metrics.Address = "127.0.0.1:0" })
	fakeTask(d, "a1", "train", "r1", nil)
	if d.MetricsAddr() != "" {
		t.Fatal("a validation launch must not listen")
	}
	cfg := *d.config()
	if err := d.SetConfig(&cfg, &base.AgentConfig{}); err != nil {
		t.Fatal(err)
	}
	addr := d.MetricsAddr()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `nomad_gpu_task_preemptions_total{alloc_id="a1"`) {
		t.Fatalf("%s: %.400s", resp.Status, body)
	}
	d.SetConfig(&cfg, &base.AgentConfig{})
	if d.MetricsAddr() != addr {
		t.Fatal("SetConfig again bound twice")
	}
	cfg.Metrics.Address = ""
	d.SetConfig(&cfg, &base.AgentConfig{})
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil || d.MetricsAddr() != "" {
		if c != nil {
			c.Close()
		}
		t.Fatal("still listening with metrics.address unset")
	}
}

func TestMetricsConfigErrors(t *testing.T) {
	cases := []struct {
		edit func(*Config)
		want string
	}{
		{func(c *Config) { c.Metrics.Address = "localhost" }, `metrics.address: "localhost" is not a host:port address`},
		{func(c *Config) { c.Metrics.NodeName = "node\n" }, `metrics.node_name:`},
		{func(c *Config) { c.Metrics.TaskRetention = -time.Second }, `metrics.task_retention: -1s is out of range; allowed: 0 (at once) to 24h`},
		{func(c *Config) { c.Metrics.TaskRetention = 25 * time.Hour }, `metrics.task_retention: 25h0m0s is out of range`},
	}
	for _, c := range cases {
		cfg := &Config{}
		decodeDefaults(cfg)
		if cfg.Metrics.TaskRetention != 5*time.Minute || cfg.Metrics.Address != "" {
			t.Fatalf("defaults %+v", cfg.Metrics)
		}
		c.edit(cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %v, want %q", err, c.want)
		}
	}
}

// With real tasks: a preempted task's stop checkpoint, its preemption and
// the next run's restore, then the watchdog's kill of a task over its MPS
// share, as the exporter shows them.
func TestTaskMetricsWithRealTasks(t *testing.T) {
	e := newEnv(t)
	e.cfg.Metrics.NodeName = metricsHost
	nomad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := strings.TrimPrefix(r.URL.Path, "/v1/allocation/")
		fmt.Fprintf(w, `{"ID": %q, "JobID": "train", "DesiredStatus": "evict", "PreemptedByAllocation": "b1c2d3e4-0000-4000-8000-000000000000"}`, id)
	}))
	defer nomad.Close()
	e.cfg.Nomad.Address = nomad.URL
	d := e.plugin()

	first := e.checkpointTask(defaultCheckpoint())
	first.JobName = "train"
	if _, _, err := d.StartTask(first); err != nil {
		t.Fatal(err)
	}
	progress := filepath.Join(first.Env["NOMAD_TASK_DIR"], "progress")
	eventually(t, "progress", func() bool { b, _ := os.ReadFile(progress); return len(b) > 0 && string(b) != "1\n" })
	if err := d.StopTask(first.ID, 10*time.Second, "SIGINT"); err != nil {
		t.Fatal(err)
	}
	wait(t, d, first.ID, 20*time.Second)
	l := prometheus.Labels{"host": metricsHost, "namespace": "default", "job": "train", "task_group": "g", "alloc_id": first.AllocID, "task": "t"}
	eventually(t, "preemption counted", func() bool { return testutil.ToFloat64(d.metrics.preempts.With(l)) == 1 })
	if got := testutil.ToFloat64(d.metrics.results.With(withLabel(l, contract.LabelResult, contract.CheckpointCommitted))); got != 1 {
		t.Errorf("committed checkpoints %g, want 1", got)
	}
	if got := testutil.ToFloat64(d.metrics.requests.With(l)); got != 1 {
		t.Errorf("checkpoint requests %g, want 1", got)
	}
	destroyTask(t, d, first.ID)

	next := e.checkpointTask(defaultCheckpoint())
	if _, _, err := d.StartTask(next); err != nil {
		t.Fatal(err)
	}
	nl := withLabel(l, "alloc_id", next.AllocID)
	nl["job"] = "train" // JobName unset: the job ID
	if got := testutil.ToFloat64(d.metrics.restores.With(nl)); got != 1 {
		t.Errorf("restores %g, want 1", got)
	}
	stopTask(t, d, next.ID, time.Second, "SIGKILL")
	destroyTask(t, d, next.ID)

	// The watchdog kills a task over its MPS share's memory.
	inv, err := gpu.Open(e.cfg.gpuConfig(), nil)
	if err != nil {
		t.Fatal(err)
	}
	snap, _ := inv.Snapshot()
	inv.Close()
	gpuUUID := snap.GPUs[3].UUID
	cfg := e.taskConfig(&TaskConfig{Command: "/bin/sh", Args: []string{"-c", "sleep 300"}}, map[string]string{
		"CUDA_VISIBLE_DEVICES": gpuUUID, "NOMAD_GPU_SLICE_TYPE": "mps",
		"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=20480M",
		"CUDA_MPS_PIPE_DIRECTORY": filepath.Join(e.cfg.MPS.PipeRoot, gpuUUID),
	})
	cfg.JobName, cfg.TaskGroupName, cfg.Namespace = "infer", "g", "default"
	if _, _, err := d.StartTask(cfg); err != nil {
		t.Fatal(err)
	}
	defer destroyTask(t, d, cfg.ID)
	if err := gpu.OpenControl(e.control).SetProcessMemory(uint32(d.store.get(cfg.ID).proc.TaskPID()), gpuUUID, 30000); err != nil {
		t.Fatal(err)
	}
	kl := prometheus.Labels{"host": metricsHost, "namespace": "default", "job": "infer", "task_group": "g", "alloc_id": cfg.AllocID, "task": "t", "reason": contract.KillGPUMemory}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for testutil.ToFloat64(d.metrics.kills.With(kl)) != 1 {
		select {
		case <-ctx.Done():
			t.Fatal("no enforcement kill counted")
		case <-time.After(50 * time.Millisecond):
		}
	}
	wait(t, d, cfg.ID, 30*time.Second)
}
