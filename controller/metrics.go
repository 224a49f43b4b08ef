package controller

import (
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/internal/metrics"
)

// Metrics are a replica's exported figures (contract.ControllerMetrics).
type Metrics struct {
	reg       *prometheus.Registry
	leader    prometheus.Gauge
	decisions *prometheus.CounterVec
	lastTick  prometheus.Gauge
	writes    prometheus.Counter
	calls     *prometheus.CounterVec
	relaid    *prometheus.CounterVec
	applied   prometheus.Histogram
	moves     *prometheus.CounterVec
	moveCost  prometheus.Counter
	gangs     *prometheus.GaugeVec
	members   *prometheus.GaugeVec
	reserve   prometheus.Counter
	queueGPUs *prometheus.GaugeVec
	// heldWaiting counts the waiting held jobs by queue and reason kind.
	heldWaiting *prometheus.GaugeVec
	usage       *prometheus.GaugeVec
	standing    *prometheus.GaugeVec
	waiting     *prometheus.GaugeVec
	ticked      sync.Once // registers lastTick with the first tick
}

// NewMetrics registers the controller's metrics.
func NewMetrics() *Metrics {
	ms := contract.ControllerMetrics()
	find := func(name string) contract.Metric { return metrics.Find(ms, name) }
	leader, decisions := find(contract.MetricControllerLeader), find(contract.MetricControllerDecisions)
	tick, writes := find(contract.MetricControllerLastTick), find(contract.MetricControllerLedgerWrite)
	calls := find(contract.MetricControllerNomadCalls)
	relaid, applied := find(contract.MetricControllerLayoutChanges), find(contract.MetricControllerLayoutApplied)
	moves, moveCost := find(contract.MetricControllerMoves), find(contract.MetricControllerMoveGPUSeconds)
	gangs, members := find(contract.MetricControllerGangs), find(contract.MetricControllerGangMembers)
	reserve := find(contract.MetricControllerReserveIdle)
	gauges := func(name string) *prometheus.GaugeVec {
		d := find(name)
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: d.Name, Help: d.Help}, d.Labels)
	}
	m := &Metrics{
		reg:       prometheus.NewRegistry(),
		leader:    prometheus.NewGauge(prometheus.GaugeOpts{Name: leader.Name, Help: leader.Help}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: decisions.Name, Help: decisions.Help}, decisions.Labels),
		lastTick:  prometheus.NewGauge(prometheus.GaugeOpts{Name: tick.Name, Help: tick.Help}),
		writes:    prometheus.NewCounter(prometheus.CounterOpts{Name: writes.Name, Help: writes.Help}),
		calls:     prometheus.NewCounterVec(prometheus.CounterOpts{Name: calls.Name, Help: calls.Help}, calls.Labels),
		relaid:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: relaid.Name, Help: relaid.Help}, relaid.Labels),
		// From a few seconds (a dev agent, a free GPU) to the minutes a
		// held GPU waits for its allocations to end; seconds apart up to
		// 15 s, where most relayouts of a free GPU land (the plugin's
		// poll and drain grace, then Nomad's 5–10 s node-update batch),
		// so that their median can be read from the buckets.
		applied: prometheus.NewHistogram(prometheus.HistogramOpts{Name: applied.Name, Help: applied.Help,
			Buckets: []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 15, 20, 30, 60, 120, 300, 600, 1800, 3600}}),
		moves:     prometheus.NewCounterVec(prometheus.CounterOpts{Name: moves.Name, Help: moves.Help}, moves.Labels),
		moveCost:  prometheus.NewCounter(prometheus.CounterOpts{Name: moveCost.Name, Help: moveCost.Help}),
		gangs:     prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: gangs.Name, Help: gangs.Help}, gangs.Labels),
		members:   prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: members.Name, Help: members.Help}, members.Labels),
		reserve:   prometheus.NewCounter(prometheus.CounterOpts{Name: reserve.Name, Help: reserve.Help}),
		queueGPUs: gauges(contract.MetricControllerQueueGPUs), usage: gauges(contract.MetricControllerQueueUsage),
		standing: gauges(contract.MetricControllerQueueStanding), waiting: gauges(contract.MetricControllerQueueWaiting),
		heldWaiting: gauges(contract.MetricControllerQueueHeld),
	}
	m.reg.MustRegister(m.leader, m.decisions, m.writes, m.calls, m.relaid, m.applied, m.moves, m.moveCost, m.gangs, m.members, m.reserve,
		m.queueGPUs, m.usage, m.standing, m.waiting, m.heldWaiting)
	return m
}

// Handler serves the metrics.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError, MaxRequestsInFlight: 2})
}

func (m *Metrics) setLeader(leading bool) {
	if leading {
		m.leader.Set(1)
		return
	}
	m.leader.Set(0)
}

func (m *Metrics) decision(kind string) { m.decisions.WithLabelValues(kind).Inc() }

func (m *Metrics) ledgerWrite() { m.writes.Inc() }

// call counts a Nomad API call of the leader's watches, by endpoint.
func (m *Metrics) call(endpoint string) { m.calls.WithLabelValues(endpoint).Inc() }

// layoutChange counts a layout asked of a GPU, by the kind relaid to.
func (m *Metrics) layoutChange(kind string) { m.relaid.WithLabelValues(kind).Inc() }

// layoutApplied records the time from a layout asked to its being offered.
func (m *Metrics) layoutApplied(d time.Duration) { m.applied.Observe(d.Seconds()) }

// moved counts an allocation moved, by reason.
func (m *Metrics) moved(reason string) { m.moves.WithLabelValues(reason).Inc() }

// moveGPUSeconds adds GPU-seconds spent moving.
func (m *Metrics) moveGPUSeconds(s float64) { m.moveCost.Add(s) }

// gangCensus sets the gang gauges from the leader's last tick.
func (m *Metrics) gangCensus(c GangCensus) {
	for state, n := range map[string]int{"waiting": c.Waiting, "placing": c.Placing, "running": c.Running} {
		m.gangs.WithLabelValues(state).Set(float64(n))
	}
	for state, n := range map[string]int{"wanted": c.Wanted, "placed": c.Placed, "running": c.MembersRunning} {
		m.members.WithLabelValues(state).Set(float64(n))
	}
}

// queues sets the queue gauges from the leader's last tick; an inactive
// queue has no standing series.
func (m *Metrics) queues(st []QueueStatus) {
	for _, q := range st {
		for figure, v := range map[string]float64{"used": q.Use, "nominal": q.Nominal, "borrowed": q.Borrowed, "lent": q.Lent} {
			m.queueGPUs.WithLabelValues(q.Name, figure).Set(v)
		}
		m.usage.WithLabelValues(q.Name).Set(q.UsageHours * 3600)
		m.waiting.WithLabelValues(q.Name).Set(float64(q.Waiting))
		if q.Active {
			m.standing.WithLabelValues(q.Name).Set(q.Standing)
		} else {
			m.standing.DeleteLabelValues(q.Name)
		}
	}
}

// heldJobs sets the waiting held jobs by queue and reason kind from the
// gangs' statuses of the leader's last tick (series no longer counted go).
func (m *Metrics) heldJobs(st []GangStatus) {
	m.heldWaiting.Reset()
	for _, g := range st {
		if g.State == "waiting" || g.State == "invalid" {
			m.heldWaiting.WithLabelValues(g.Queue, g.Kind).Inc()
		}
	}
}

// reservationIdle adds GPU-seconds a reservation held idle.
func (m *Metrics) reservationIdle(s float64) { m.reserve.Add(s) }

// tick records a leader's tick; the series appears with the first.
func (m *Metrics) tick(at time.Time) {
	m.ticked.Do(func() { m.reg.MustRegister(m.lastTick) })
	m.lastTick.Set(float64(at.UnixNano()) / 1e9)
}
