package apm

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/nomadview"
)

// Endpoints the plugin calls, as Stats names them: the lists of its
// nomadview.Watcher (each a blocking query), the blocked jobs' spec reads,
// and the nodes' stats.
const (
	EndpointNodes    = nomadview.EndpointNodes    // GET /v1/nodes?resources=true
	EndpointEvals    = nomadview.EndpointEvals    // GET /v1/evaluations?status=blocked
	EndpointAllocs   = nomadview.EndpointAllocs   // GET /v1/allocations?resources=true&filter=...
	EndpointJobs     = nomadview.EndpointJobs     // GET /v1/jobs?meta=true, with summaries and priorities
	EndpointFinished = nomadview.EndpointFinished // terminal allocations, newest first, at most finished_max_allocs (only with metrics_address)
	EndpointJob      = nomadview.EndpointJob      // GET /v1/job/:id, once per job modify index of a blocked job
	// EndpointClientStats is GET /v1/client/stats?node_id=, once per node
	// per stats_ttl.
	EndpointClientStats = "client_stats"
)

// counter counts Nomad API calls by endpoint.
type counter struct {
	total atomic.Uint64
	mu    sync.Mutex
	by    map[string]uint64
}

func (c *counter) add(endpoint string) {
	c.total.Add(1)
	c.mu.Lock()
	if c.by == nil {
		c.by = map[string]uint64{}
	}
	c.by[endpoint]++
	c.mu.Unlock()
}

func (c *counter) snapshot() map[string]uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.by)
}

// Deadlines of the calls that do not block: a job read, and a node's
// stats (a client RPC through the server).
const (
	callTimeout  = 30 * time.Second
	statsTimeout = 10 * time.Second
)

// listLabels name the watcher's lists in the exporter's list label.
var listLabels = map[nomadview.List]string{
	nomadview.Nodes:    "nodes",
	nomadview.Blocked:  "blocked_evaluations",
	nomadview.Jobs:     "jobs",
	nomadview.Allocs:   "allocations",
	nomadview.Finished: "finished_allocations",
}

// figureLists are the lists the cluster figures read.
var figureLists = []nomadview.List{nomadview.Nodes, nomadview.Blocked, nomadview.Jobs, nomadview.Allocs, nomadview.Finished}

// cache is the cluster state: a nomadview.Watcher's lists, each started on
// the first query or scrape that needs it, the figures' Snapshot made from
// its latest snapshot, and device stats fetched on demand (and, for the
// cluster figures, refreshed in the background).
type cache struct {
	cl    *api.Client
	cfg   *Config
	log   hclog.Logger
	calls *counter
	view  *nomadview.Watcher

	ctx          context.Context
	cancel       context.CancelFunc
	wg           sync.WaitGroup
	startMu      sync.Mutex // orders the stats refresh's start before close's Wait
	closed       bool
	statsStarted bool // the background stats refresh runs

	// metrics is whether the cluster figures are on (metrics_address):
	// only then are allocation runs made for the task figures.
	metrics bool

	// cost is the plugin's cost meter, which this cache's observations
	// feed as generation costGen (runCost, with the stats refresh).
	cost    *costMeter
	costGen uint64

	snapMu sync.Mutex
	from   *nomadview.Snapshot // what snap was made from
	snap   *Snapshot
	// forecasts is whether a query has needed the runtime forecast
	// (nodes_needed with beyond): from then on snapshots carry runs.
	forecasts bool

	statsFetchMu sync.Mutex            // one stats refresh at a time
	statsMu      sync.Mutex            // guards stats
	stats        map[string]statsEntry // by node ID
}

type statsEntry struct {
	at   time.Time
	util []InstanceUtil
}

func newCache(cl *api.Client, cfg *Config, log hclog.Logger, calls *counter, cost *costMeter, costGen uint64) *cache {
	ctx, cancel := context.WithCancel(context.Background())
	view := nomadview.NewWatcher(cl, nomadview.Config{
		Namespace: cfg.Namespace,
		BlockWait: cfg.BlockWait,
		// min_refresh_interval 0 means no coalescing; nomadview's 0 is
		// its default.
		MinRefresh:      max(cfg.MinRefresh, time.Nanosecond),
		FinishedRefresh: cfg.FinishedRefresh,
		FinishedMax:     cfg.FinishedMax,
		FinishedWindow:  cfg.FinishedWindow,
		CallTimeout:     callTimeout,
		Log:             log,
		OnCall:          calls.add,
	})
	return &cache{
		cl: cl, cfg: cfg, log: log, calls: calls, view: view,
		ctx: ctx, cancel: cancel,
		stats:   map[string]statsEntry{},
		metrics: cfg.MetricsAddress != "",
		cost:    cost, costGen: costGen,
	}
}

func (c *cache) close() {
	c.startMu.Lock()
	c.closed = true
	c.startMu.Unlock()
	c.cancel()
	c.view.Close()
	c.wg.Wait()
	c.cl.Close()
}

// needs is which lists a query reads. The blocked queue reads the jobs
// list too: its summaries say how many of a group wait.
func needs(q Query) []nomadview.List {
	switch q.Metric {
	case MetricAllocPct, MetricNodesRemovable:
		return []nomadview.List{nomadview.Nodes, nomadview.Allocs}
	case MetricUtilPct, MetricNodesReady:
		return []nomadview.List{nomadview.Nodes}
	case MetricNodesNeeded:
		if q.Beyond > 0 {
			// The runtime forecast reads the finished allocations too.
			return []nomadview.List{nomadview.Nodes, nomadview.Blocked, nomadview.Jobs, nomadview.Allocs, nomadview.Finished}
		}
		return []nomadview.List{nomadview.Nodes, nomadview.Blocked, nomadview.Jobs, nomadview.Allocs}
	}
	switch q.State {
	case StateBlocked:
		return []nomadview.List{nomadview.Blocked, nomadview.Jobs}
	case StatePending:
		return []nomadview.List{nomadview.Nodes, nomadview.Allocs}
	}
	return []nomadview.List{nomadview.Nodes, nomadview.Blocked, nomadview.Jobs, nomadview.Allocs}
}

// ensure starts the lists and waits (bounded by sync_timeout) for their
// first list; it fails when one has been failing for over max_staleness.
func (c *cache) ensure(lists []nomadview.List) error {
	if !c.start(lists, false) {
		return errors.New("plugin reconfigured or closed")
	}
	deadline := time.NewTimer(c.cfg.SyncTimeout)
	defer deadline.Stop()
	for _, l := range lists {
		select {
		case <-c.view.Ready(l):
		case <-deadline.C:
			_, err := c.view.Health(l)
			if err == nil {
				err = errors.New("no answer yet")
			}
			return fmt.Errorf("no %s list from Nomad within sync_timeout %v: %v", l, c.cfg.SyncTimeout, err)
		case <-c.ctx.Done():
			return errors.New("plugin reconfigured or closed")
		}
		if since, err := c.view.Health(l); err != nil && time.Since(since) > c.cfg.MaxStaleness {
			return fmt.Errorf("nomad %s list failing since %s (over max_staleness %v): %v",
				l, since.Format(time.RFC3339), c.cfg.MaxStaleness, err)
		}
	}
	return nil
}

// start starts the lists not running yet, and with stats the background
// stats refresh and cost meter (runCost); it reports false once closed.
func (c *cache) start(lists []nomadview.List, stats bool) bool {
	c.startMu.Lock()
	defer c.startMu.Unlock()
	if c.closed || !c.view.Start(lists...) {
		return false
	}
	if stats && !c.statsStarted {
		c.statsStarted = true
		c.wg.Add(1)
		go c.runStats()
		if c.cost != nil {
			c.wg.Add(1)
			go c.runCost()
		}
	}
	return true
}

// listState is one list's health as the exporter reports it.
type listState struct {
	label string
	up    bool
}

// listStates reports, for each of lists, whether it has listed once and
// has not been failing for over max_staleness.
func (c *cache) listStates(lists []nomadview.List) []listState {
	out := make([]listState, 0, len(lists))
	for _, l := range lists {
		up := false
		select {
		case <-c.view.Ready(l):
			since, err := c.view.Health(l)
			up = err == nil || time.Since(since) <= c.cfg.MaxStaleness
		default:
		}
		out = append(out, listState{listLabels[l], up})
	}
	return out
}

// snapshot returns the figures' input made from the watcher's latest
// snapshot, made anew only when that changed. Callers must not modify it.
func (c *cache) snapshot() *Snapshot { return c.snapshotFor(false) }

// snapshotFor is snapshot, with the allocation runs the runtime forecast
// reads where forecasts is set (made anew once if the last had none).
func (c *cache) snapshotFor(forecasts bool) *Snapshot {
	v := c.view.Latest()
	c.snapMu.Lock()
	defer c.snapMu.Unlock()
	if forecasts && !c.forecasts {
		c.forecasts, c.snap = true, nil
	}
	if c.snap == nil || c.from != v {
		s := SnapshotOf(v, c.metrics || c.forecasts)
		s.DefaultGPUsPerNode = c.cfg.DefaultGPUsPerNode
		c.from, c.snap = v, s
	}
	return c.snap
}

// utilization returns per-instance GPU utilisation of the ready nodes
// matching q that have matching devices, fetching node stats older than
// stats_ttl (one client stats call per node, 8 at a time).
func (c *cache) utilization(q Query, s *Snapshot) (map[string][]InstanceUtil, error) {
	c.statsFetchMu.Lock()
	defer c.statsFetchMu.Unlock()
	now := time.Now()
	var want, stale []string
	c.statsMu.Lock()
	for i := range s.Nodes {
		n := &s.Nodes[i]
		if n.Status != "ready" || !n.matches(q.Filter) {
			continue
		}
		if total, _, _ := n.inventory(q.Filter); total == 0 {
			continue
		}
		want = append(want, n.ID)
		if e, ok := c.stats[n.ID]; !ok || now.Sub(e.at) >= c.cfg.StatsTTL {
			stale = append(stale, n.ID)
		}
	}
	c.statsMu.Unlock()
	var failed []string
	var lastErr error
	read := nomadview.ReadNodeStats(c.ctx, c.cl, stale, 8, statsTimeout, func() { c.calls.add(EndpointClientStats) })
	for i, st := range read {
		id := stale[i]
		if st.Err != nil {
			failed = append(failed, id)
			lastErr = st.Err
			c.log.Debug("node stats failed", "node_id", id, "error", st.Err)
			continue
		}
		e := statsEntry{at: now, util: utilOf(st.Host, c.cfg.UtilStat)}
		c.statsMu.Lock()
		c.stats[id] = e
		c.statsMu.Unlock()
	}
	c.statsMu.Lock()
	defer c.statsMu.Unlock()
	out := map[string][]InstanceUtil{}
	for _, id := range want {
		if e, ok := c.stats[id]; ok {
			out[id] = e.util
		}
	}
	known := s.nodeIndex()
	for id := range c.stats {
		if _, ok := known[id]; !ok {
			delete(c.stats, id) // node gone
		}
	}
	if len(want) > 0 && len(out) == 0 && lastErr != nil {
		return nil, fmt.Errorf("device stats of %d node(s) unavailable: %v", len(failed), lastErr)
	}
	return out, nil
}

// runStats refreshes the device stats of every ready node with devices
// once per stats_ttl (the cluster figures' utilisation and load), so a
// scrape reads them from the cache.
func (c *cache) runStats() {
	defer c.wg.Done()
	select {
	case <-c.view.Ready(nomadview.Nodes):
	case <-c.ctx.Done():
		return
	}
	tick := time.NewTicker(c.cfg.StatsTTL)
	defer tick.Stop()
	for {
		_, _ = c.utilization(Query{}, c.snapshot())
		select {
		case <-tick.C:
		case <-c.ctx.Done():
			return
		}
	}
}

// runCost feeds the cost meter the cost rates of every snapshot of the
// watcher, at each change of a list, until the cache closes. Until both
// the nodes and the allocations lists have been read the rates are none
// (a node's GPUs would all look idle).
func (c *cache) runCost() {
	defer c.wg.Done()
	for v := range c.view.Watch(c.ctx) {
		var rates map[CostKey]CostRate
		if isClosed(c.view.Ready(nomadview.Nodes)) && isClosed(c.view.Ready(nomadview.Allocs)) {
			rates = CostRatesOf(v)
		}
		c.cost.observe(c.costGen, time.Now(), rates)
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// cachedUtil returns the cached device stats no older than maxAge, by node
// ID, without calling Nomad.
func (c *cache) cachedUtil(maxAge time.Duration) map[string][]InstanceUtil {
	now := time.Now()
	c.statsMu.Lock()
	defer c.statsMu.Unlock()
	out := make(map[string][]InstanceUtil, len(c.stats))
	for id, e := range c.stats {
		if now.Sub(e.at) <= maxAge {
			out[id] = e.util
		}
	}
	return out
}

func (s *Snapshot) nodeIndex() map[string]int {
	m := make(map[string]int, len(s.Nodes))
	for i := range s.Nodes {
		m[s.Nodes[i].ID] = i
	}
	return m
}

// utilOf reads each device instance's utilisation stat (a float or int
// numerator, in percent) from a node's host stats.
func utilOf(hs *api.HostStats, stat string) []InstanceUtil {
	if hs == nil {
		return nil
	}
	var out []InstanceUtil
	for _, g := range hs.DeviceStats {
		if g == nil {
			continue
		}
		for _, id := range slices.Sorted(maps.Keys(g.InstanceStats)) {
			st := g.InstanceStats[id]
			if st == nil || st.Stats == nil {
				continue
			}
			v := st.Stats.Attributes[stat]
			if v == nil {
				continue
			}
			var pct float64
			switch {
			case v.FloatNumeratorVal != nil:
				pct = *v.FloatNumeratorVal
			case v.IntNumeratorVal != nil:
				pct = float64(*v.IntNumeratorVal)
			default:
				continue
			}
			out = append(out, InstanceUtil{DeviceSpec: DeviceSpec{Vendor: g.Vendor, Type: g.Type, Name: g.Name}, ID: id, Pct: pct})
		}
	}
	return out
}
