package apm

import (
	"fmt"
	"maps"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nomad-gpu/nomad-gpu/internal/metrics"
	"github.com/nomad-gpu/nomad-gpu/wire/autoscaler"
)

// PluginName is the plugin's name, which the agent's apm block's driver
// must equal.
const PluginName = "nomad-gpu-apm"

// Plugin is the nomad-gpu-apm APM.
type Plugin struct {
	log   hclog.Logger
	calls counter
	// cost accumulates the cost counters over the plugin's life, across
	// reconfigurations.
	cost costMeter

	queries atomic.Uint64

	// reg holds the cluster figures' collector; handler serves it.
	reg     *prometheus.Registry
	handler http.Handler

	mu      sync.Mutex
	raw     map[string]string
	cfg     *Config
	cache   *cache
	metrics *metrics.Server // nil: metrics_address unset
	closed  bool
}

var _ autoscaler.APM = (*Plugin)(nil)

// New returns an unconfigured plugin; a nil logger logs nothing.
func New(log hclog.Logger) *Plugin {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	p := &Plugin{log: log, reg: prometheus.NewRegistry()}
	p.reg.MustRegister(newClusterCollector(p.scrapeInput))
	p.handler = p.metricsHandler()
	return p
}

// SetConfig validates the config and (re)connects to Nomad. Nothing is
// read from Nomad until a query needs it, unless metrics_address is set:
// then the exporter listens there and the lists the cluster figures read
// start at once. Called again with the same map, it keeps the cache; with
// another, it drops the cache and starts over, and moves the exporter only
// if metrics_address changed. A bad config, or an address it cannot
// listen on, is an error that keeps the running config.
func (p *Plugin) SetConfig(config map[string]string) error {
	cfg, err := ParseConfig(config)
	if err != nil {
		return fmt.Errorf("%s: %w", PluginName, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return fmt.Errorf("%s: closed", PluginName)
	}
	if p.cache != nil && maps.Equal(p.raw, config) {
		return nil
	}
	cl, err := newNomadClient(cfg)
	if err != nil {
		return fmt.Errorf("%s: config: %w", PluginName, err)
	}
	if err := p.setMetricsAddress(cfg.MetricsAddress); err != nil {
		cl.Close()
		return fmt.Errorf("%s: config: %s = %q: %w (%s)", PluginName, cfgMetricsAddress, cfg.MetricsAddress, err, keyHelp(cfgMetricsAddress))
	}
	old := p.cache
	p.raw, p.cfg = maps.Clone(config), cfg
	// The old cache's rates stop counting; the new one's count once its
	// lists are read.
	p.cache = newCache(cl, cfg, p.log, &p.calls, &p.cost, p.cost.claim(time.Now()))
	if cfg.MetricsAddress != "" {
		p.cache.start(figureLists, true)
	}
	if old != nil {
		go old.close()
	}
	return nil
}

// Close stops the background watches and the exporter.
func (p *Plugin) Close() {
	p.mu.Lock()
	c, e := p.cache, p.metrics
	p.cache, p.metrics, p.closed = nil, nil, true
	p.mu.Unlock()
	p.cost.claim(time.Now())
	if e != nil {
		e.Close()
	}
	if c != nil {
		c.close()
	}
}

// Stats are the plugin's counters.
type Stats struct {
	// Calls is how many Nomad API requests the plugin has made, and
	// ByEndpoint the same by endpoint (Endpoint* constants).
	Calls      uint64
	ByEndpoint map[string]uint64
	// Queries is how many queries were answered or refused.
	Queries uint64
}

// Stats returns the counters so far.
func (p *Plugin) Stats() Stats {
	return Stats{Calls: p.calls.total.Load(), ByEndpoint: p.calls.snapshot(), Queries: p.queries.Load()}
}

// Query answers one query (see the package documentation) with a single
// point stamped r.To (now when r.To is unset). The value describes the
// cluster as the cache holds it now; the time range selects nothing.
func (p *Plugin) Query(query string, r autoscaler.TimeRange) ([]autoscaler.Metric, error) {
	p.queries.Add(1)
	q, err := ParseQuery(query)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", PluginName, err)
	}
	p.mu.Lock()
	c := p.cache
	p.mu.Unlock()
	if c == nil {
		return nil, fmt.Errorf("%s: not configured (SetConfig not called, or closed)", PluginName)
	}
	v, err := p.evaluate(c, q)
	if err != nil {
		return nil, fmt.Errorf("%s: %s: %w", PluginName, q.Metric, err)
	}
	at := r.To
	if at.IsZero() || at.Unix() <= 0 {
		at = time.Now()
	}
	return []autoscaler.Metric{{Time: at, Value: v}}, nil
}

func (p *Plugin) evaluate(c *cache, q Query) (float64, error) {
	if err := c.ensure(needs(q)); err != nil {
		return 0, err
	}
	snap := *c.snapshotFor(q.Beyond > 0)
	snap.Now = time.Now()
	if q.Metric == MetricUtilPct {
		util, err := c.utilization(q, &snap)
		if err != nil {
			return 0, err
		}
		snap.Util = util
	}
	if q.Metric == MetricNodesNeeded {
		r := NodesNeeded(q, &snap)
		p.log.Debug("nodes_needed", "query", q.String(), "nodes", r.Nodes, "shape", r.Shape, "shape_from", r.ShapeFrom,
			"queued_allocs", r.QueuedAllocs, "placed_on_free", r.PlacedOnFree, "unfittable", r.Unfittable, "served_in_time", r.ServedInTime)
		return float64(r.Nodes), nil
	}
	v, err := Evaluate(q, &snap)
	if err != nil {
		return 0, err
	}
	return v, nil
}
