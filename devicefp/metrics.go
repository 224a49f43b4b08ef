package devicefp

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/gpu"
	"github.com/nomad-gpu/nomad-gpu/internal/metrics"
)

const bytesPerMiB = 1 << 20

// deviceMetrics is the device plugin's Prometheus exporter: a collector
// that reads, at scrape time, the fingerprint the plugin last sent and one
// round of telemetry (the path Nomad's stats take), the XID events seen,
// and the node's device allocations.
type deviceMetrics struct {
	p     *Plugin
	exp   *metrics.Exporter
	descs map[string]*prometheus.Desc

	// mu guards xids, runtime and the allocation watch.
	mu   sync.Mutex
	xids map[xidKey]uint64
	// runtime: this is the agent's runtime launch (it fingerprints).
	runtime bool
	// The allocation watch runs, with watchKey's settings, while metrics
	// are served or, in the runtime launch, while layouts are followed
	// (layout.go: who holds a GPU, shares_in_use, the node's metadata).
	watch    *allocWatcher
	stop     context.CancelFunc
	watchKey string
}

type xidKey struct {
	uuid string
	xid  uint64
}

func newDeviceMetrics(p *Plugin) *deviceMetrics {
	m := &deviceMetrics{p: p, descs: metrics.Descs(contract.DeviceMetrics()), xids: map[xidKey]uint64{}}
	m.exp = metrics.NewExporter(p.logger.Named("metrics"), m)
	return m
}

// setConfig takes a new plugin config; runtime says it is the agent's
// runtime SetConfig (not a validation launch's), which makes this process
// the one that serves.
func (m *deviceMetrics) setConfig(cfg *Config, runtime bool) {
	m.exp.SetConfig(cfg.Metrics)
	if runtime {
		m.activate()
	} else {
		m.syncWatch(cfg)
	}
}

// activate serves the configured address (retrying a failed bind) and
// follows the node's allocations while it does.
func (m *deviceMetrics) activate() {
	m.exp.Activate() // a failure is logged and retried at the next call
	m.mu.Lock()
	m.runtime = true
	m.mu.Unlock()
	m.syncWatch(m.p.config())
}

func (m *deviceMetrics) syncWatch(cfg *Config) {
	m.mu.Lock()
	defer m.mu.Unlock()
	key := ""
	if m.exp.Enabled() || m.runtime && cfg.Layout.Enabled {
		key = cfg.Nomad.Address + "\x00" + cfg.Nomad.Token + "\x00" + cfg.Metrics.Host()
	}
	if key == m.watchKey {
		return
	}
	if m.stop != nil {
		m.stop()
		m.watch, m.stop = nil, nil
	}
	m.watchKey = key
	if key == "" {
		return
	}
	w, err := newAllocWatcher(cfg.Nomad, cfg.Metrics.Host(), m.p.logger.Named("allocations"))
	if err != nil {
		m.p.logger.Warn("device allocations will not be known", "error", err)
		return
	}
	w.onChange = m.p.wakeFingerprint // shares_in_use follows the allocations
	ctx, cancel := context.WithCancel(context.Background())
	m.watch, m.stop = w, cancel
	go w.run(ctx)
}

func (m *deviceMetrics) close() {
	m.exp.Close()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stop != nil {
		m.stop()
	}
	m.watch, m.stop, m.watchKey = nil, nil, ""
}

// xid counts an XID event, whether or not the health policy counts it.
func (m *deviceMetrics) xid(ev gpu.Event) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.xids[xidKey{ev.UUID, ev.XID}]++
}

func (m *deviceMetrics) watcher() *allocWatcher {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.watch
}

func (m *deviceMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range m.descs {
		ch <- d
	}
}

func (m *deviceMetrics) Collect(ch chan<- prometheus.Metric) {
	p := m.p
	host := p.config().Metrics.Host()
	model := p.model()
	// Without NVML, devices keep their info and health series.
	smp, _ := p.newSampler(time.Now())
	w := m.watcher()
	var view allocView
	if w != nil {
		view = w.current()
		ch <- m.gauge(contract.MetricDeviceAllocationsKnown, boolValue(view.known), host)
	}
	for _, g := range model.groups {
		product := g.Name
		if a, ok := g.Attributes[contract.AttrParentProduct]; ok && a.String != nil {
			product = *a.String
		}
		for _, d := range g.Devices {
			s := model.byID[d.ID]
			lv := []string{host, d.ID, s.typ, strconv.Itoa(s.gpuIndex)}
			profile := ""
			if s.typ == contract.SliceMIG {
				profile = s.groupName
			}
			ch <- m.gauge(contract.MetricDeviceInfo, 1, slices.Concat(lv, []string{g.Name, s.gpuUUID, product, profile, s.pciBusID})...)
			ch <- m.gauge(contract.MetricDeviceHealthy, boolValue(d.Healthy), lv...)
			if view.known {
				uses := view.byDevice[d.ID]
				ch <- m.gauge(contract.MetricDeviceAllocated, boolValue(len(uses) > 0), lv...)
				for _, u := range uses {
					ch <- m.gauge(contract.MetricDeviceAllocationInfo, 1, host, d.ID, u.namespace, u.job, u.group, u.allocID, u.task)
				}
			}
			if smp == nil {
				continue
			}
			if t := smp.telemetry(s.visibleUUID()); t != nil {
				m.collectTelemetry(ch, lv, s, t, smp)
			}
		}
	}
	m.mu.Lock()
	for k, n := range m.xids {
		ch <- prometheus.MustNewConstMetric(m.descs[contract.MetricXIDErrors], prometheus.CounterValue, float64(n), host, k.uuid, strconv.FormatUint(k.xid, 10))
	}
	m.mu.Unlock()
}

func (m *deviceMetrics) collectTelemetry(ch chan<- prometheus.Metric, lv []string, s *slice, t *gpu.Telemetry, smp *sampler) {
	opt := func(name string, v *uint32, scale float64) {
		if v != nil {
			ch <- m.gauge(name, float64(*v)*scale, lv...)
		}
	}
	if s.typ == contract.SliceMPS {
		// Its task's utilisation of the share (0 without a task), where
		// the driver measures it; else (a driver that writes none, or NVML samples
		// no per-process utilisation) no series: the GPU's figures are
		// every client's, not the share's. Nothing measures a share's
		// memory bandwidth.
		if pct, ok := shareUtilization(smp.published(s.gpuUUID), s.id); ok {
			ch <- m.gauge(contract.MetricDeviceUtilization, pct, lv...)
		}
	} else {
		opt(contract.MetricDeviceUtilization, t.GPUUtilPercent, 1)
		opt(contract.MetricDeviceMemUtilization, t.MemUtilPercent, 1)
	}
	opt(contract.MetricDeviceTemperature, t.TemperatureC, 1)
	opt(contract.MetricDevicePower, t.PowerMilliW, 1e-3)
	opt(contract.MetricDeviceSMClock, t.SMClockMHz, 1e6)
	opt(contract.MetricDeviceMemClock, t.MemClockMHz, 1e6)
	for _, e := range []struct {
		kind string
		v    *uint64
	}{{contract.ECCCorrected, t.ECCCorrected}, {contract.ECCUncorrected, t.ECCUncorrected}} {
		if e.v != nil {
			ch <- prometheus.MustNewConstMetric(m.descs[contract.MetricDeviceECCErrors], prometheus.CounterValue, float64(*e.v), slices.Concat(lv, []string{e.kind})...)
		}
	}
	if s.typ == contract.SliceMPS {
		used := smp.shareUsage(s.gpuUUID)[s.id]
		ch <- m.gauge(contract.MetricDeviceMemoryUsed, float64(used)*bytesPerMiB, lv...)
		ch <- m.gauge(contract.MetricDeviceMemoryTotal, float64(s.memLimitMiB)*bytesPerMiB, lv...)
		ch <- m.gauge(contract.MetricDeviceMPSThreadPercent, float64(s.threadPercent), lv...)
		return
	}
	ch <- m.gauge(contract.MetricDeviceMemoryUsed, float64(t.MemoryUsedMiB)*bytesPerMiB, lv...)
	if t.MemoryTotalMiB > 0 {
		ch <- m.gauge(contract.MetricDeviceMemoryTotal, float64(t.MemoryTotalMiB)*bytesPerMiB, lv...)
	}
}

func (m *deviceMetrics) gauge(name string, v float64, lv ...string) prometheus.Metric {
	return prometheus.MustNewConstMetric(m.descs[name], prometheus.GaugeValue, v, lv...)
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// MetricsAddr is where the plugin serves its metrics ("" when it does not):
// for tests and the e2e suite.
func (p *Plugin) MetricsAddr() string { return p.metrics.exp.Addr() }
