package driver

import (
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/internal/metrics"
)

const bytesPerMiB = 1 << 20

// checkpointBuckets span a small checkpoint's commit (tens of ms) to a
// large one written on a slow store (half an hour), in seconds.
var checkpointBuckets = []float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800}

// taskMetrics is the driver's Prometheus exporter: counters and histograms
// of what happened to each task, fed by the driver as it happens, and the
// GPU memory each task holds and its utilisation of its slice, read from
// the watchdog at scrape time. A
// task's series carry its node, namespace, job, group, allocation and task
// (contract.TaskLabels); they go task_retention after the task is
// destroyed, or stay on while another run of the same task (a restart in the
// same allocation) is alive.
type taskMetrics struct {
	d   *Driver
	exp *metrics.Exporter
	now func() time.Time

	memUsed, memLimit, util *prometheus.Desc

	requests  *prometheus.CounterVec
	results   *prometheus.CounterVec
	commitDur *prometheus.HistogramVec
	reqDur    *prometheus.HistogramVec
	size      *prometheus.GaugeVec
	lastOK    *prometheus.GaugeVec
	restores  *prometheus.CounterVec
	preempts  *prometheus.CounterVec
	kills     *prometheus.CounterVec

	// mu guards the maps and every change to the vectors, so a series is
	// never deleted between a task's lookup and its increment.
	mu        sync.Mutex
	host      string
	retention time.Duration
	series    map[string]*taskSeries // by labelKey
	byTask    map[string]string      // live task ID → labelKey
	pending   map[string]time.Time   // task ID → its outstanding checkpoint request
}

// taskSeries is one label set and the live task runs that use it.
type taskSeries struct {
	labels  prometheus.Labels
	tasks   map[string]bool
	expires time.Time // once no run is live
}

func newTaskMetrics(d *Driver) *taskMetrics {
	ms := contract.DriverMetrics()
	find := func(name string) contract.Metric { return metrics.Find(ms, name) }
	counter := func(name string) *prometheus.CounterVec {
		m := find(name)
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: m.Name, Help: m.Help}, m.Labels)
	}
	gauge := func(name string) *prometheus.GaugeVec {
		m := find(name)
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: m.Name, Help: m.Help}, m.Labels)
	}
	histogram := func(name string) *prometheus.HistogramVec {
		m := find(name)
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: m.Name, Help: m.Help, Buckets: checkpointBuckets}, m.Labels)
	}
	descs := metrics.Descs(ms)
	m := &taskMetrics{
		d: d, now: time.Now,
		memUsed:   descs[contract.MetricTaskGPUMemoryUsed],
		memLimit:  descs[contract.MetricTaskGPUMemoryLimit],
		util:      descs[contract.MetricTaskGPUUtilization],
		requests:  counter(contract.MetricTaskCheckpointRequests),
		results:   counter(contract.MetricTaskCheckpoints),
		commitDur: histogram(contract.MetricTaskCheckpointDuration),
		reqDur:    histogram(contract.MetricTaskCheckpointReqDur),
		size:      gauge(contract.MetricTaskCheckpointSize),
		lastOK:    gauge(contract.MetricTaskCheckpointLastOK),
		restores:  counter(contract.MetricTaskRestores),
		preempts:  counter(contract.MetricTaskPreemptions),
		kills:     counter(contract.MetricTaskEnforcementKills),
		host:      metrics.Config{}.Host(),
		retention: 5 * time.Minute,
		series:    map[string]*taskSeries{},
		byTask:    map[string]string{},
		pending:   map[string]time.Time{},
	}
	m.exp = metrics.NewExporter(d.logger.Named("metrics"), m)
	return m
}

func (m *taskMetrics) vectors() []prometheus.Collector {
	return []prometheus.Collector{m.requests, m.results, m.commitDur, m.reqDur, m.size, m.lastOK, m.restores, m.preempts, m.kills}
}

// setConfig takes the plugin config; runtime says it is the agent's
// runtime SetConfig, which makes this process the one that serves.
func (m *taskMetrics) setConfig(cfg *Config, runtime bool) {
	m.mu.Lock()
	m.host = cfg.Metrics.exporter().Host()
	m.retention = cfg.Metrics.TaskRetention
	m.mu.Unlock()
	m.exp.SetConfig(cfg.Metrics.exporter())
	if runtime {
		m.exp.Activate()
	}
}

// activate serves the configured address, retrying one that failed.
func (m *taskMetrics) activate() { m.exp.Activate() }

func (m *taskMetrics) close() { m.exp.Close() }

// labelsLocked is t's label set, registering t as a live run of it while
// the driver knows the task. A task already destroyed (a late event) is
// counted in series that expire as if it had just been destroyed.
func (m *taskMetrics) labelsLocked(t *task) prometheus.Labels {
	if key, ok := m.byTask[t.id]; ok {
		return m.series[key].labels
	}
	values := m.labelValuesLocked(t)
	key := strings.Join(values, "\x00")
	s := m.series[key]
	if s == nil {
		l := prometheus.Labels{}
		for i, name := range contract.TaskLabels {
			l[name] = values[i]
		}
		s = &taskSeries{labels: l, tasks: map[string]bool{}}
		m.series[key] = s
	}
	if m.d.store.get(t.id) == t {
		s.tasks[t.id] = true
		m.byTask[t.id] = key
	} else if len(s.tasks) == 0 {
		s.expires = m.now().Add(m.retention)
	}
	return s.labels
}

// labelValuesLocked are t's values of contract.TaskLabels, named as
// Nomad's own allocation metrics name them (job: the job's name).
func (m *taskMetrics) labelValuesLocked(t *task) []string {
	c := t.cfg
	ns := c.Namespace
	if ns == "" {
		ns = "default"
	}
	job := c.JobName
	if job == "" {
		job = c.JobID
	}
	return []string{m.host, ns, job, c.TaskGroupName, c.AllocID, c.Name}
}

func withLabel(l prometheus.Labels, name, value string) prometheus.Labels {
	out := make(prometheus.Labels, len(l)+1)
	for k, v := range l {
		out[k] = v
	}
	out[name] = value
	return out
}

// started registers a started or recovered run, with its counters at 0 so
// that the first event is an increase, and counts its restore.
func (m *taskMetrics) started(t *task) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.labelsLocked(t)
	m.preempts.With(l)
	m.kills.With(withLabel(l, contract.LabelReason, contract.KillGPUMemory))
	m.restores.With(l)
	if t.ckpt == nil {
		return
	}
	m.requests.With(l)
	for _, r := range []string{contract.CheckpointCommitted, contract.CheckpointFailed, contract.CheckpointTimeout} {
		m.results.With(withLabel(l, contract.LabelResult, r))
	}
	if t.ckpt.run.Restore != nil {
		m.restores.With(l).Inc()
	}
}

func (m *taskMetrics) checkpointRequested(t *task) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.requests.With(m.labelsLocked(t)).Inc()
	m.pending[t.id] = m.now()
}

func (m *taskMetrics) checkpointCommitted(t *task, took time.Duration, bytes int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.labelsLocked(t)
	now := m.now()
	m.results.With(withLabel(l, contract.LabelResult, contract.CheckpointCommitted)).Inc()
	m.commitDur.With(l).Observe(took.Seconds())
	if at, ok := m.pending[t.id]; ok {
		m.reqDur.With(l).Observe(now.Sub(at).Seconds())
		delete(m.pending, t.id)
	}
	m.size.With(l).Set(float64(bytes))
	m.lastOK.With(l).Set(float64(now.UnixNano()) / 1e9)
}

// checkpointFailed counts a checkpoint that was not committed: result is
// contract.CheckpointFailed or contract.CheckpointTimeout. A request that
// timed out stays outstanding: the task may still commit it.
func (m *taskMetrics) checkpointFailed(t *task, result string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.results.With(withLabel(m.labelsLocked(t), contract.LabelResult, result)).Inc()
	if result != contract.CheckpointTimeout {
		delete(m.pending, t.id)
	}
}

func (m *taskMetrics) preempted(t *task) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.preempts.With(m.labelsLocked(t)).Inc()
}

func (m *taskMetrics) killed(t *task, reason string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.kills.With(withLabel(m.labelsLocked(t), contract.LabelReason, reason)).Inc()
}

// destroyed lets t's series go after the retention, unless another run of
// the same task is live then.
func (m *taskMetrics) destroyed(t *task) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.pending, t.id)
	key, ok := m.byTask[t.id]
	if !ok {
		return
	}
	delete(m.byTask, t.id)
	s := m.series[key]
	delete(s.tasks, t.id)
	if len(s.tasks) == 0 {
		s.expires = m.now().Add(m.retention)
	}
	m.sweepLocked()
}

// sweepLocked deletes the series whose runs are all gone and whose
// retention is over.
func (m *taskMetrics) sweepLocked() {
	now := m.now()
	for key, s := range m.series {
		if len(s.tasks) > 0 || now.Before(s.expires) {
			continue
		}
		for _, v := range m.vectors() {
			v.(interface {
				DeletePartialMatch(prometheus.Labels) int
			}).DeletePartialMatch(s.labels)
		}
		delete(m.series, key)
	}
}

func (m *taskMetrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- m.memUsed
	ch <- m.memLimit
	ch <- m.util
	for _, v := range m.vectors() {
		v.Describe(ch)
	}
}

func (m *taskMetrics) Collect(ch chan<- prometheus.Metric) {
	m.mu.Lock()
	m.sweepLocked()
	for _, v := range m.vectors() {
		v.Collect(ch)
	}
	m.mu.Unlock()
	rt := m.d.rt.Load()
	if rt == nil {
		return
	}
	for _, t := range m.d.store.all() {
		used, limits, util := rt.watch.Usage(t.id), rt.watch.Limits(t.id), rt.watch.Utilization(t.id)
		if len(used) == 0 && len(limits) == 0 && len(util) == 0 {
			continue
		}
		m.mu.Lock()
		lv := m.labelValuesLocked(t)
		m.mu.Unlock()
		for uuid, mib := range used {
			ch <- prometheus.MustNewConstMetric(m.memUsed, prometheus.GaugeValue, float64(mib)*bytesPerMiB, append(lv[:len(lv):len(lv)], uuid)...)
		}
		for uuid, mib := range limits {
			ch <- prometheus.MustNewConstMetric(m.memLimit, prometheus.GaugeValue, float64(mib)*bytesPerMiB, append(lv[:len(lv):len(lv)], uuid)...)
		}
		for uuid, pct := range util {
			ch <- prometheus.MustNewConstMetric(m.util, prometheus.GaugeValue, pct, append(lv[:len(lv):len(lv)], uuid)...)
		}
	}
}

// MetricsAddr is where the plugin serves its metrics ("" when it does not).
func (d *Driver) MetricsAddr() string { return d.metrics.exp.Addr() }
