package apm

import (
	"net/http"
	"slices"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/nomad-gpu/nomad-gpu/controller/sizing"
	"github.com/nomad-gpu/nomad-gpu/controller/sizing/predict"
	"github.com/nomad-gpu/nomad-gpu/internal/metrics"
)

// MetricSpec describes one metric family the exporter serves.
type MetricSpec struct {
	Name   string
	Type   string // "gauge" or "counter"
	Labels []string
	Help   string
}

// Label names.
const (
	labelPool       = "pool"
	labelDatacenter = "datacenter"
	labelDevice     = "device"
	labelPriority   = "priority"
	labelState      = "state"
	labelOutcome    = "outcome"
	labelStat       = "stat"
	labelList       = "list"
	labelEndpoint   = "endpoint"
	labelNamespace  = "namespace"
	labelJob        = "job"
	labelTaskGroup  = "task_group"
	labelTask       = "task"
	labelAllocID    = "alloc_id"
	labelBasis      = "basis"
	labelNodeClass  = "node_class"
)

// MetricsPath is where the exporter serves the metrics.
const MetricsPath = "/metrics"

// Indices of the exported metrics.
const (
	mDevices = iota
	mAllocatedDevices
	mFreeDevices
	mFreeMemory
	mStrandedDevices
	mStrandedSlices
	mStrandedMemory
	mAllocatedRatio
	mUtilization
	mLoad
	mCapacityGPUs
	mAllocatedGPUs
	mFreeGPUs
	mFragmentationGPUs
	mFragmentation
	mQueuedAllocs
	mQueuedDevices
	mQueueWaitMax
	mQueueWaitMean
	mQueuedNeverFit
	mTaskWait
	mTaskRun
	mAllocsStarted
	mAllocsFinished
	mFailureRatio
	mPredictedRuntime
	mPredictedRemaining
	mPredictedWait
	mListUp
	mNomadRequests
	mNodeSeconds
	mGPUSeconds
	mNodePrice
	numMetrics
)

var (
	capacityLabels = []string{labelPool, labelDatacenter, labelDevice}
	// The GPU-equivalent figures span device kinds: no device label.
	poolLabels  = []string{labelPool, labelDatacenter}
	queueLabels = []string{labelPool, labelDevice, labelPriority, labelState}
	taskLabels  = []string{labelPool, labelPriority}
	// One series per GPU task of a running allocation, one per queued
	// task group; basis is a sizing.BasisKind, a bounded set.
	predictedTaskLabels = []string{labelNamespace, labelJob, labelTaskGroup, labelTask, labelAllocID, labelBasis}
	predictedWaitLabels = []string{labelNamespace, labelJob, labelTaskGroup, labelPool, labelDevice, labelBasis}
	// The cost figures: prices are set by pool and node class.
	costLabels = []string{labelPool, labelNodeClass}
)

// GPU-seconds states, the state label of the GPU-seconds counter.
const (
	GPUAllocated = "allocated"
	GPUIdle      = "idle"
)

// exportedMetrics are every metric family the exporter serves. The package
// documentation defines each figure.
var exportedMetrics = [numMetrics]MetricSpec{
	mDevices: {"nomad_gpu_cluster_devices", "gauge", capacityLabels,
		"Healthy device instances of schedulable (ready, eligible, not draining) nodes."},
	mAllocatedDevices: {"nomad_gpu_cluster_allocated_devices", "gauge", capacityLabels,
		"Healthy device instances of schedulable nodes held by pending or running allocations."},
	mFreeDevices: {"nomad_gpu_cluster_free_devices", "gauge", capacityLabels,
		"Healthy device instances of schedulable nodes held by no allocation."},
	mFreeMemory: {"nomad_gpu_cluster_free_memory_bytes", "gauge", capacityLabels,
		"Device memory of the free instances."},
	mStrandedDevices: {"nomad_gpu_cluster_stranded_devices", "gauge", capacityLabels,
		"Free instances of device groups that no queued request that could go to their node fits, while some could."},
	mStrandedSlices: {"nomad_gpu_cluster_stranded_slices", "gauge", capacityLabels,
		"Free MIG instances and MPS shares on GPUs of which another slice is held."},
	mStrandedMemory: {"nomad_gpu_cluster_stranded_memory_bytes", "gauge", capacityLabels,
		"Device memory of the free instances that are stranded devices or stranded slices (each once)."},
	mAllocatedRatio: {"nomad_gpu_cluster_allocated_ratio", "gauge", capacityLabels,
		"Allocated over healthy instances of schedulable nodes (gpu_alloc_pct / 100); 0 with none."},
	mUtilization: {"nomad_gpu_cluster_utilization_ratio", "gauge", capacityLabels,
		"Mean utilisation (0-1) of the instances of ready nodes that report it (gpu_util_pct / 100)."},
	mLoad: {"nomad_gpu_cluster_load_ratio", "gauge", capacityLabels,
		"Mean utilisation (0-1) of the allocated instances of ready nodes that report it."},
	mCapacityGPUs: {"nomad_gpu_cluster_capacity_gpus", "gauge", poolLabels,
		"GPU-equivalents of the healthy whole GPUs (1), MIG instances (compute slices / 7) and MPS shares (1 / the GPU's shares) of schedulable nodes."},
	mAllocatedGPUs: {"nomad_gpu_cluster_allocated_gpus", "gauge", poolLabels,
		"GPU-equivalents of those held by pending or running allocations."},
	mFreeGPUs: {"nomad_gpu_cluster_free_gpus", "gauge", poolLabels,
		"GPU-equivalents of those held by no allocation."},
	mFragmentationGPUs: {"nomad_gpu_cluster_fragmentation_gpus", "gauge", poolLabels,
		"FGD fragmentation: the expected free GPU-equivalents that a request drawn from the pool's mix of request shapes (its running, pending and queued allocations' device requests) cannot use, summed over schedulable nodes."},
	mFragmentation: {"nomad_gpu_cluster_fragmentation_ratio", "gauge", poolLabels,
		"FGD fragmentation over free GPU-equivalents (fragmentation_gpus / free_gpus); 0 with nothing free."},
	mQueuedAllocs: {"nomad_gpu_cluster_queued_allocs", "gauge", queueLabels,
		"Queued allocations asking for the device: unplaced allocations of blocked evaluations and pending allocations."},
	mQueuedDevices: {"nomad_gpu_cluster_queued_devices", "gauge", queueLabels,
		"Devices asked for by queued allocations (per-allocation ask times allocations)."},
	mQueueWaitMax: {"nomad_gpu_cluster_queue_wait_max_seconds", "gauge", queueLabels,
		"Longest wait of queued allocations (now minus the blocked evaluation's or pending allocation's create time)."},
	mQueueWaitMean: {"nomad_gpu_cluster_queue_wait_mean_seconds", "gauge", queueLabels,
		"Per-allocation mean wait of queued allocations."},
	mQueuedNeverFit: {"nomad_gpu_cluster_queued_never_fit_allocs", "gauge", queueLabels,
		"Queued allocations that never fit: one asks for more whole GPUs than any node of its pool has, so it waits until the job changes or bigger nodes join (nomad-gpu top says never fits)."},
	mTaskWait: {"nomad_gpu_cluster_task_wait_seconds", "gauge", append(slices.Clone(taskLabels), labelStat),
		"Wait (first task start minus create time) of GPU allocations whose first task started within finished_window: stat p50, p90, p99 (nearest rank), max, mean."},
	mTaskRun: {"nomad_gpu_cluster_task_run_seconds", "gauge", append(slices.Clone(taskLabels), labelStat),
		"Run time (finish minus first task start) of GPU allocations that finished within finished_window: stat p50, p90, p99 (nearest rank), max, mean."},
	mAllocsStarted: {"nomad_gpu_cluster_allocs_started", "gauge", taskLabels,
		"GPU allocations whose first task started within finished_window."},
	mAllocsFinished: {"nomad_gpu_cluster_allocs_finished", "gauge", append(slices.Clone(taskLabels), labelOutcome),
		"GPU allocations that finished within finished_window, by client status (complete, failed, lost)."},
	mFailureRatio: {"nomad_gpu_cluster_alloc_failure_ratio", "gauge", taskLabels,
		"Failed plus lost over finished GPU allocations within finished_window."},
	mPredictedRuntime: {"nomad_gpu_job_predicted_runtime_seconds", "gauge", predictedTaskLabels,
		"Predicted whole run time of the GPU tasks of running allocations (elapsed plus predicted remaining), from Nomad's allocations of the pool within finished_window: basis job (the task's own last runs' median), pool (the pool's runs of its slice or kind), elapsed (outlived its history or has none: taken to be half done). Only known estimates."},
	mPredictedRemaining: {"nomad_gpu_job_predicted_remaining_seconds", "gauge", predictedTaskLabels,
		"Predicted run time left of the GPU tasks of running allocations: the median of the basis's runs that lasted longer than the task has so far, less its elapsed time. Only known estimates."},
	mPredictedWait: {"nomad_gpu_job_predicted_wait_seconds", "gauge", predictedWaitLabels,
		"Predicted time until all queued allocations of a blocked task group are placed: a list schedule of its pool's slices of its unit (device) by priority, then age, as running tasks end when predicted (basis fits_now or list_schedule). Only known estimates."},
	mListUp: {"nomad_gpu_cluster_list_up", "gauge", []string{labelList},
		"1 when the plugin's list of this kind has been read and has not been failing for over max_staleness."},
	mNomadRequests: {"nomad_gpu_cluster_nomad_requests_total", "counter", []string{labelEndpoint},
		"Nomad API requests the plugin made, by endpoint."},
	mNodeSeconds: {"nomad_gpu_cluster_node_seconds_total", "counter", costLabels,
		"Node-seconds of ready nodes with GPUs (schedulable or not) since the exporter started, counted at every change of the cluster and every scrape."},
	mGPUSeconds: {"nomad_gpu_cluster_gpu_seconds_total", "counter", append(slices.Clone(costLabels), labelState),
		"GPU-equivalent-seconds of the healthy GPUs, MIG instances and MPS shares of those nodes since the exporter started: state allocated (held by a pending or running allocation) or idle (the others, and GPUs being relaid)."},
	mNodePrice: {"nomad_gpu_cluster_price_per_node_hour", "gauge", costLabels,
		"The price of one node-hour of the pool's nodes of the class, from the prices key; absent where none is set."},
}

// ExportedMetrics describes every metric family the exporter serves.
func ExportedMetrics() []MetricSpec {
	out := make([]MetricSpec, len(exportedMetrics))
	for i, m := range exportedMetrics {
		m.Labels = slices.Clone(m.Labels)
		out[i] = m
	}
	return out
}

// MetricNames are the names of every metric the exporter serves, sorted.
// All are gauges or counters, so each family's name is also its series'.
func MetricNames() []string {
	out := make([]string, len(exportedMetrics))
	for i, m := range exportedMetrics {
		out[i] = m.Name
	}
	slices.Sort(out)
	return out
}

// taskStats are the stat label values of the task time gauges.
var taskStats = []string{"p50", "p90", "p99", "max", "mean"}

var outcomes = []string{OutcomeComplete, OutcomeFailed, OutcomeLost}

// scrapeInput is what one scrape reports on.
type scrapeInput struct {
	snap  *Snapshot // nil: not configured
	opt   FigureOptions
	lists []listState
	calls map[string]uint64
	// cost are the cost counters, prices the node-hour prices.
	cost   map[CostKey]CostTotals
	prices Prices
}

// clusterCollector computes the cluster figures at scrape time from what
// input returns (the cache's snapshot: no Nomad call).
type clusterCollector struct {
	descs [numMetrics]*prometheus.Desc
	input func() scrapeInput
}

func newClusterCollector(input func() scrapeInput) *clusterCollector {
	c := &clusterCollector{input: input}
	for i, m := range exportedMetrics {
		c.descs[i] = prometheus.NewDesc(m.Name, m.Help, m.Labels, nil)
	}
	return c
}

func (c *clusterCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

func (c *clusterCollector) Collect(ch chan<- prometheus.Metric) {
	in := c.input()
	gauge := func(m int, v float64, lv ...string) {
		ch <- prometheus.MustNewConstMetric(c.descs[m], prometheus.GaugeValue, v, lv...)
	}
	for ep, n := range in.calls {
		ch <- prometheus.MustNewConstMetric(c.descs[mNomadRequests], prometheus.CounterValue, float64(n), ep)
	}
	for _, l := range in.lists {
		gauge(mListUp, b2f(l.up), l.label)
	}
	counter := func(m int, v float64, lv ...string) {
		ch <- prometheus.MustNewConstMetric(c.descs[m], prometheus.CounterValue, v, lv...)
	}
	for k, t := range in.cost {
		counter(mNodeSeconds, t.NodeSeconds, k.Pool, k.NodeClass)
		counter(mGPUSeconds, t.AllocatedGPUSeconds, k.Pool, k.NodeClass, GPUAllocated)
		counter(mGPUSeconds, t.IdleGPUSeconds, k.Pool, k.NodeClass, GPUIdle)
		if price, ok := in.prices.Of(k); ok {
			gauge(mNodePrice, price, k.Pool, k.NodeClass)
		}
	}
	if in.snap == nil {
		return
	}
	f := ComputeFigures(in.snap, in.opt)
	for k, v := range f.Capacity {
		lv := []string{k.Pool, k.Datacenter, k.Device}
		gauge(mDevices, float64(v.Devices), lv...)
		gauge(mAllocatedDevices, float64(v.Allocated), lv...)
		gauge(mFreeDevices, float64(v.Free), lv...)
		gauge(mFreeMemory, float64(v.FreeMemoryBytes), lv...)
		gauge(mStrandedDevices, float64(v.StrandedDevices), lv...)
		gauge(mStrandedSlices, float64(v.StrandedSlices), lv...)
		gauge(mStrandedMemory, float64(v.StrandedMemoryBytes), lv...)
		gauge(mAllocatedRatio, v.AllocatedRatio(), lv...)
		if u, ok := v.UtilizationRatio(); ok {
			gauge(mUtilization, u, lv...)
		}
		if l, ok := v.LoadRatio(); ok {
			gauge(mLoad, l, lv...)
		}
	}
	for k, v := range f.GPUs {
		gauge(mCapacityGPUs, v.Capacity, k.Pool, k.Datacenter)
		gauge(mAllocatedGPUs, v.Allocated, k.Pool, k.Datacenter)
		gauge(mFreeGPUs, v.Free, k.Pool, k.Datacenter)
		gauge(mFragmentationGPUs, v.Fragmentation, k.Pool, k.Datacenter)
		gauge(mFragmentation, v.FragmentationRatio(), k.Pool, k.Datacenter)
	}
	for k, v := range f.Queue {
		lv := []string{k.Pool, k.Device, k.Priority, k.State}
		gauge(mQueuedAllocs, float64(v.Allocs), lv...)
		gauge(mQueuedDevices, float64(v.Devices), lv...)
		gauge(mQueueWaitMax, v.WaitMaxSeconds, lv...)
		gauge(mQueueWaitMean, v.WaitMeanSeconds(), lv...)
		gauge(mQueuedNeverFit, float64(v.NeverFitAllocs), lv...)
	}
	for k, v := range f.Tasks {
		gauge(mAllocsStarted, float64(len(v.WaitSeconds)), k.Pool, k.Priority)
		for _, t := range [...]struct {
			m  int
			xs []float64
		}{{mTaskWait, v.WaitSeconds}, {mTaskRun, v.RunSeconds}} {
			m := t.m
			if len(t.xs) == 0 {
				continue
			}
			d := Summarize(t.xs)
			for i, x := range []float64{d.P50, d.P90, d.P99, d.Max, d.Mean} {
				gauge(m, x, k.Pool, k.Priority, taskStats[i])
			}
		}
		if v.Finished() == 0 {
			continue
		}
		for i, n := range []int{v.Complete, v.Failed, v.Lost} {
			gauge(mAllocsFinished, float64(n), k.Pool, k.Priority, outcomes[i])
		}
		gauge(mFailureRatio, v.FailureRatio(), k.Pool, k.Priority)
	}
	for _, t := range f.Forecast.Tasks {
		if t.State != sizing.TaskRunning || !t.Remaining.Known {
			continue
		}
		basis := sizing.BasisKind(t.Remaining)
		lv := []string{t.Key.Namespace, t.Key.Job, t.Key.Group, t.Key.Task, t.AllocID, basis}
		gauge(mPredictedRuntime, t.Runtime.Seconds, lv...)
		gauge(mPredictedRemaining, t.Remaining.Seconds, lv...)
	}
	for _, w := range f.Forecast.Queued {
		if !w.Wait.Known {
			continue
		}
		gauge(mPredictedWait, w.Wait.Seconds, w.Namespace, w.Job, w.Group, w.Pool,
			sizing.UnitLabel(predict.UnitOf(w.Slice)), sizing.BasisKind(w.Wait))
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// scrapeInput is the plugin's input to its collector: the current cache's
// snapshot (starting the lists the figures read, and the background stats
// refresh and cost meter, if not yet running), device stats no older than
// 3 × stats_ttl, the cost counters counted up to now, the prices, and the
// Nomad call counts.
func (p *Plugin) scrapeInput() scrapeInput {
	in := scrapeInput{calls: p.calls.snapshot()}
	p.mu.Lock()
	c := p.cache
	p.mu.Unlock()
	if c == nil || !c.start(figureLists, true) {
		return in
	}
	in.lists = c.listStates(figureLists)
	snap := *c.snapshot()
	snap.Now = time.Now()
	snap.Util = c.cachedUtil(3 * c.cfg.StatsTTL)
	in.snap = &snap
	in.opt = FigureOptions{Tiers: c.cfg.Tiers, Window: c.cfg.FinishedWindow}
	in.cost = p.cost.read(snap.Now)
	in.prices = c.cfg.Prices
	return in
}

// metricsHandler serves the plugin's registry.
func (p *Plugin) metricsHandler() http.Handler {
	return promhttp.HandlerFor(p.reg, promhttp.HandlerOpts{
		ErrorLog:            p.log.StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true}),
		ErrorHandling:       promhttp.ContinueOnError,
		MaxRequestsInFlight: 2,
	})
}

// setMetricsAddress (p.mu held) starts, moves or stops the exporter
// (metrics.Move).
func (p *Plugin) setMetricsAddress(addr string) error {
	mux := http.NewServeMux()
	mux.Handle(MetricsPath, p.handler)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte(PluginName + ": cluster GPU figures at " + MetricsPath + "\n"))
	})
	var err error
	p.metrics, err = metrics.Move(p.metrics, addr, mux, p.log)
	return err
}

// metricsAddr is the address the exporter listens on, "" when off.
func (p *Plugin) metricsAddr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.metrics == nil {
		return ""
	}
	return p.metrics.Addr()
}
