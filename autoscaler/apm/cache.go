package apm

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"
)

// Endpoints the plugin calls, as Stats names them.
const (
	EndpointNodes       = "nodes"        // GET /v1/nodes?resources=true (blocking)
	EndpointEvals       = "evaluations"  // GET /v1/evaluations?status=blocked (blocking)
	EndpointAllocs      = "allocations"  // GET /v1/allocations?resources=true&filter=... (blocking)
	EndpointJob         = "job"          // GET /v1/job/:id, once per job modify index
	EndpointJobSummary  = "job_summary"  // GET /v1/job/:id/summary, once per blocked eval modify index
	EndpointClientStats = "client_stats" // GET /v1/client/stats?node_id=, once per node per stats_ttl
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
	out := make(map[string]uint64, len(c.by))
	for k, v := range c.by {
		out[k] = v
	}
	return out
}

// Deadlines of the calls that do not block: a job or summary read, and a
// node's stats (a client RPC through the server).
const (
	callTimeout  = 30 * time.Second
	statsTimeout = 10 * time.Second
)

// watch kinds.
const (
	watchNodes = iota
	watchEvals
	watchAllocs
	numWatches
)

var watchNames = [numWatches]string{"nodes", "blocked evaluations", "allocations"}

// watch is one list kept fresh by blocking queries in its own goroutine.
type watch struct {
	kind  int
	ready chan struct{} // closed after the first successful list

	mu           sync.Mutex
	started      bool
	version      uint64
	data         any
	lastErr      error
	failingSince time.Time
}

func (w *watch) state() (data any, version uint64, lastErr error, failingSince time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.data, w.version, w.lastErr, w.failingSince
}

// cache is the cluster state, kept by three watches (nodes, blocked
// evaluations with their jobs, non-terminal allocations), each started on
// the first query that needs it, plus device stats fetched on demand.
type cache struct {
	cl    *api.Client
	cfg   *Config
	log   hclog.Logger
	calls *counter

	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	startMu sync.Mutex // orders watch starts before close's Wait
	closed  bool

	watches [numWatches]*watch

	// Job specs and summaries of blocked jobs, used by the evals watch only.
	jobs      map[jobKey]*jobInfo
	summaries map[string]summaryEntry // by blocked eval ID

	snapMu   sync.Mutex
	snap     *Snapshot
	snapVers [numWatches]uint64

	statsMu sync.Mutex
	stats   map[string]statsEntry // by node ID
}

type jobKey struct{ ns, id string }

type jobInfo struct {
	modifyIndex uint64
	pool        string
	dcs         []string
	stopped     bool
	groups      map[string]groupInfo
}

type groupInfo struct {
	asks       []DeviceAsk
	classRules []ClassRule
}

type summaryEntry struct {
	evalModifyIndex uint64
	firstSeen       time.Time // when this eval modify index was first seen
	queued          map[string]int
}

// summarySettle bounds how long after a blocked evaluation changes a
// summary that does not agree with it (a failed group with no queued
// allocation) is re-read on every evaluations change. The scheduler writes
// the blocked eval before it applies the plan and records the queued
// counts (later writes that move the evaluations index again), so a
// summary read at once can predate them: a new job's then reads 0 queued.
const summarySettle = 10 * time.Second

// settled reports whether a summary agrees with its blocked evaluation:
// every group that failed to place has queued allocations.
func (s summaryEntry) settled(e *api.Evaluation) bool {
	if s.queued == nil {
		return true // no summary (job gone): nothing to wait for
	}
	for tg := range e.FailedTGAllocs {
		if s.queued[tg] <= 0 {
			return false
		}
	}
	return true
}

type statsEntry struct {
	at   time.Time
	util []InstanceUtil
}

// Data the watches publish.
type (
	nodesData  []Node
	evalsData  []Work
	allocsData struct {
		used    map[string][]UsedDevices // by node ID
		pending []pendingAlloc
	}
)

type pendingAlloc struct {
	ns, job, group, node string
	created              time.Time
	devices              []UsedDevices
}

func newCache(cl *api.Client, cfg *Config, log hclog.Logger, calls *counter) *cache {
	ctx, cancel := context.WithCancel(context.Background())
	c := &cache{
		cl: cl, cfg: cfg, log: log, calls: calls,
		ctx: ctx, cancel: cancel,
		jobs:      map[jobKey]*jobInfo{},
		summaries: map[string]summaryEntry{},
		stats:     map[string]statsEntry{},
	}
	for k := range c.watches {
		c.watches[k] = &watch{kind: k, ready: make(chan struct{})}
	}
	return c
}

func (c *cache) close() {
	c.startMu.Lock()
	c.closed = true
	c.startMu.Unlock()
	c.cancel()
	c.wg.Wait()
	c.cl.Close()
}

// needs is which watches a query reads.
func needs(q Query) []int {
	switch q.Metric {
	case MetricAllocPct:
		return []int{watchNodes, watchAllocs}
	case MetricUtilPct:
		return []int{watchNodes}
	case MetricNodesNeeded:
		return []int{watchNodes, watchEvals, watchAllocs}
	}
	switch q.State {
	case StateBlocked:
		return []int{watchEvals}
	case StatePending:
		return []int{watchNodes, watchAllocs}
	}
	return []int{watchNodes, watchEvals, watchAllocs}
}

// ensure starts the watches and waits (bounded by sync_timeout) for their
// first list; it fails when one has been failing for over max_staleness.
func (c *cache) ensure(kinds []int) error {
	c.startMu.Lock()
	if c.closed {
		c.startMu.Unlock()
		return errors.New("plugin reconfigured or closed")
	}
	for _, k := range kinds {
		w := c.watches[k]
		w.mu.Lock()
		if !w.started {
			w.started = true
			c.wg.Add(1)
			go c.run(w)
		}
		w.mu.Unlock()
	}
	c.startMu.Unlock()
	deadline := time.NewTimer(c.cfg.SyncTimeout)
	defer deadline.Stop()
	for _, k := range kinds {
		w := c.watches[k]
		select {
		case <-w.ready:
		case <-deadline.C:
			_, _, err, _ := w.state()
			if err == nil {
				err = errors.New("no answer yet")
			}
			return fmt.Errorf("no %s list from Nomad within sync_timeout %v: %v", watchNames[k], c.cfg.SyncTimeout, err)
		case <-c.ctx.Done():
			return errors.New("plugin reconfigured or closed")
		}
		if _, _, err, since := w.state(); err != nil && time.Since(since) > c.cfg.MaxStaleness {
			return fmt.Errorf("nomad %s list failing since %s (over max_staleness %v): %v",
				watchNames[k], since.Format(time.RFC3339), c.cfg.MaxStaleness, err)
		}
	}
	return nil
}

// run keeps one watch fresh: a blocking list on the last index, at most
// one list per min_refresh_interval, backing off on errors.
func (c *cache) run(w *watch) {
	defer c.wg.Done()
	var index uint64
	first := true
	backoff := time.Second
	for c.ctx.Err() == nil {
		start := time.Now()
		data, idx, err := c.fetch(w.kind, index)
		if c.ctx.Err() != nil {
			return
		}
		if err != nil {
			w.mu.Lock()
			if w.lastErr == nil {
				w.failingSince = time.Now()
			}
			w.lastErr = err
			w.mu.Unlock()
			c.log.Warn("nomad list failed; retrying", "list", watchNames[w.kind], "error", err, "retry_in", backoff)
			if !sleepCtx(c.ctx, backoff) {
				return
			}
			backoff = min(2*backoff, 30*time.Second)
			continue
		}
		backoff = time.Second
		if idx < index {
			index = 0 // the index went backwards (snapshot restore): start over
		}
		changed := first || idx != index
		w.mu.Lock()
		w.lastErr, w.failingSince = nil, time.Time{}
		if changed {
			w.data = data
			w.version++
		}
		w.mu.Unlock()
		if first {
			close(w.ready)
			first = false
		}
		index = max(idx, 1) // an index of 0 would not block
		if !sleepCtx(c.ctx, c.cfg.MinRefresh-time.Since(start)) {
			return
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func (c *cache) opts(ns string, index uint64) *api.QueryOptions {
	q := &api.QueryOptions{Namespace: ns, WaitIndex: index, WaitTime: c.cfg.BlockWait, Params: map[string]string{}}
	return q.WithContext(c.ctx)
}

func (c *cache) fetch(kind int, index uint64) (any, uint64, error) {
	switch kind {
	case watchNodes:
		return c.fetchNodes(index)
	case watchEvals:
		return c.fetchEvals(index)
	}
	return c.fetchAllocs(index)
}

func (c *cache) fetchNodes(index uint64) (any, uint64, error) {
	q := c.opts("", index)
	q.Params["resources"] = "true"
	c.calls.add(EndpointNodes)
	stubs, meta, err := c.cl.Nodes().List(q)
	if err != nil {
		return nil, 0, err
	}
	nodes := make(nodesData, 0, len(stubs))
	for _, s := range stubs {
		n := Node{
			ID: s.ID, Name: s.Name, Pool: s.NodePool, Datacenter: s.Datacenter, Class: s.NodeClass,
			Status:   s.Status,
			Eligible: s.SchedulingEligibility == api.NodeSchedulingEligible && !s.Drain,
		}
		if s.NodeResources != nil {
			for _, d := range s.NodeResources.Devices {
				g := DeviceGroup{DeviceSpec: DeviceSpec{Vendor: d.Vendor, Type: d.Type, Name: d.Name}}
				for _, in := range d.Instances {
					g.Instances = append(g.Instances, DeviceInstance{ID: in.ID, Healthy: in.Healthy})
				}
				n.Devices = append(n.Devices, g)
			}
		}
		nodes = append(nodes, n)
	}
	return nodes, meta.LastIndex, nil
}

// allocFilter keeps the allocations that hold devices on a node.
const allocFilter = `ClientStatus == "pending" or ClientStatus == "running"`

func (c *cache) fetchAllocs(index uint64) (any, uint64, error) {
	q := c.opts(c.cfg.Namespace, index)
	q.Params["resources"] = "true"
	q.Filter = allocFilter
	c.calls.add(EndpointAllocs)
	stubs, meta, err := c.cl.Allocations().List(q)
	if err != nil {
		return nil, 0, err
	}
	d := allocsData{used: map[string][]UsedDevices{}}
	for _, s := range stubs {
		var devs []UsedDevices
		if s.AllocatedResources != nil {
			for _, t := range sortedTasks(s.AllocatedResources.Tasks) {
				for _, dv := range t.Devices {
					if dv == nil || len(dv.DeviceIDs) == 0 {
						continue
					}
					devs = append(devs, UsedDevices{DeviceSpec: DeviceSpec{Vendor: dv.Vendor, Type: dv.Type, Name: dv.Name}, IDs: dv.DeviceIDs})
				}
			}
		}
		if len(devs) == 0 {
			continue
		}
		d.used[s.NodeID] = append(d.used[s.NodeID], devs...)
		if s.ClientStatus == api.AllocClientStatusPending {
			d.pending = append(d.pending, pendingAlloc{
				ns: s.Namespace, job: s.JobID, group: s.TaskGroup, node: s.NodeID,
				created: time.Unix(0, s.CreateTime), devices: devs,
			})
		}
	}
	return d, meta.LastIndex, nil
}

func sortedTasks(m map[string]*api.AllocatedTaskResources) []*api.AllocatedTaskResources {
	names := make([]string, 0, len(m))
	for k, v := range m {
		if v != nil {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	out := make([]*api.AllocatedTaskResources, len(names))
	for i, n := range names {
		out[i] = m[n]
	}
	return out
}

// fetchEvals lists blocked evaluations, then reads each blocked job's spec
// once per job modify index and its summary once per blocked-eval modify
// index (a blocked eval is updated whenever the scheduler places some of
// its allocations or re-blocks it).
func (c *cache) fetchEvals(index uint64) (any, uint64, error) {
	q := c.opts(c.cfg.Namespace, index)
	q.Params["status"] = "blocked"
	c.calls.add(EndpointEvals)
	evals, meta, err := c.cl.Evaluations().List(q)
	if err != nil {
		return nil, 0, err
	}
	var blocked []*api.Evaluation
	for _, e := range evals {
		if e.Status == api.EvalStatusBlocked && len(e.FailedTGAllocs) > 0 {
			blocked = append(blocked, e)
		}
	}

	// What must be read: jobs whose spec is older than the eval's, and
	// summaries of evals changed since read.
	liveJobs := map[jobKey]bool{}
	liveEvals := map[string]bool{}
	var needJob []jobKey
	var needSummary []*api.Evaluation
	for _, e := range blocked {
		k := jobKey{e.Namespace, e.JobID}
		if !liveJobs[k] {
			liveJobs[k] = true
			if j, ok := c.jobs[k]; !ok || j.modifyIndex < e.JobModifyIndex {
				needJob = append(needJob, k)
			}
		}
		liveEvals[e.ID] = true
		s, ok := c.summaries[e.ID]
		if !ok || s.evalModifyIndex != e.ModifyIndex || time.Since(s.firstSeen) < summarySettle && !s.settled(e) {
			needSummary = append(needSummary, e)
		}
	}
	for k := range c.jobs {
		if !liveJobs[k] {
			delete(c.jobs, k)
		}
	}
	for id := range c.summaries {
		if !liveEvals[id] {
			delete(c.summaries, id)
		}
	}

	var mu sync.Mutex
	err = parallel(c.ctx, 8, len(needJob), func(i int) error {
		k := needJob[i]
		ctx, cancel := context.WithTimeout(c.ctx, callTimeout)
		defer cancel()
		c.calls.add(EndpointJob)
		job, _, err := c.cl.Jobs().Info(k.id, (&api.QueryOptions{Namespace: k.ns}).WithContext(ctx))
		if isNotFound(err) {
			mu.Lock()
			c.jobs[k] = &jobInfo{stopped: true, modifyIndex: ^uint64(0)}
			mu.Unlock()
			return nil
		}
		if err != nil {
			return fmt.Errorf("job %q (namespace %q): %w", k.id, k.ns, err)
		}
		info := jobInfoOf(job)
		mu.Lock()
		c.jobs[k] = info
		mu.Unlock()
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	err = parallel(c.ctx, 8, len(needSummary), func(i int) error {
		e := needSummary[i]
		ctx, cancel := context.WithTimeout(c.ctx, callTimeout)
		defer cancel()
		c.calls.add(EndpointJobSummary)
		s, _, err := c.cl.Jobs().Summary(e.JobID, (&api.QueryOptions{Namespace: e.Namespace}).WithContext(ctx))
		mu.Lock()
		entry := summaryEntry{evalModifyIndex: e.ModifyIndex, firstSeen: time.Now()}
		if prev, ok := c.summaries[e.ID]; ok && prev.evalModifyIndex == e.ModifyIndex {
			entry.firstSeen = prev.firstSeen
		}
		mu.Unlock()
		switch {
		case isNotFound(err):
		case err != nil:
			return fmt.Errorf("job %q (namespace %q) summary: %w", e.JobID, e.Namespace, err)
		default:
			entry.queued = map[string]int{}
			for tg, ts := range s.Summary {
				entry.queued[tg] = ts.Queued
			}
		}
		mu.Lock()
		c.summaries[e.ID] = entry
		mu.Unlock()
		return nil
	})
	if err != nil {
		return nil, 0, err
	}

	var work evalsData
	for _, e := range blocked {
		j := c.jobs[jobKey{e.Namespace, e.JobID}]
		if j == nil || j.stopped {
			continue
		}
		sum := c.summaries[e.ID]
		for _, tg := range sortedKeys(e.FailedTGAllocs) {
			g, ok := j.groups[tg]
			if !ok || len(g.asks) == 0 {
				continue
			}
			n, ok := sum.queued[tg]
			if !ok {
				// No summary: the failed placements the eval recorded.
				if m := e.FailedTGAllocs[tg]; m != nil {
					n = m.CoalescedFailures + 1
				}
			}
			if n <= 0 {
				continue
			}
			work = append(work, Work{
				Source: FromBlockedEval, Namespace: e.Namespace, JobID: e.JobID, Group: tg,
				Allocs: n, Asks: g.asks, Since: time.Unix(0, e.CreateTime),
				Pool: j.pool, Datacenters: j.dcs, ClassRules: g.classRules,
				CapacityBlocked: e.QuotaLimitReached == "",
			})
		}
	}
	return work, meta.LastIndex, nil
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func isNotFound(err error) bool {
	if err == nil {
		return false
	}
	var ue api.UnexpectedResponseError
	if errors.As(err, &ue) {
		return ue.StatusCode() == http.StatusNotFound
	}
	var uep *api.UnexpectedResponseError
	if errors.As(err, &uep) {
		return uep.StatusCode() == http.StatusNotFound
	}
	return strings.Contains(err.Error(), "404")
}

// parallel runs f(0..n-1) on up to limit goroutines; the first error wins.
func parallel(ctx context.Context, limit, n int, f func(int) error) error {
	if n == 0 {
		return nil
	}
	var (
		wg   sync.WaitGroup
		once sync.Once
		ferr error
		next atomic.Int64
	)
	for range min(limit, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := f(i); err != nil {
					once.Do(func() { ferr = err })
					return
				}
			}
		}()
	}
	wg.Wait()
	if ferr == nil {
		ferr = ctx.Err()
	}
	return ferr
}

const nodeClassTarget = "${node.class}"

// jobInfoOf reduces a job to what the metrics read: pool, datacenters,
// and per group the devices one allocation asks for and the constraints
// on the node class.
func jobInfoOf(j *api.Job) *jobInfo {
	info := &jobInfo{pool: "default", groups: map[string]groupInfo{}}
	if j.JobModifyIndex != nil {
		info.modifyIndex = *j.JobModifyIndex
	}
	if j.NodePool != nil && *j.NodePool != "" {
		info.pool = *j.NodePool
	}
	info.dcs = j.Datacenters
	if len(info.dcs) == 0 {
		info.dcs = []string{"*"}
	}
	info.stopped = j.Stop != nil && *j.Stop
	jobRules := classRules(j.Constraints)
	for _, tg := range j.TaskGroups {
		if tg == nil || tg.Name == nil {
			continue
		}
		g := groupInfo{classRules: append(append([]ClassRule(nil), jobRules...), classRules(tg.Constraints)...)}
		byName := map[string]int{}
		var order []string
		for _, t := range tg.Tasks {
			if t == nil {
				continue
			}
			g.classRules = append(g.classRules, classRules(t.Constraints)...)
			if t.Resources == nil {
				continue
			}
			for _, d := range t.Resources.Devices {
				if d == nil || d.Name == "" {
					continue
				}
				n := 1
				if d.Count != nil {
					n = int(*d.Count)
				}
				if _, ok := byName[d.Name]; !ok {
					order = append(order, d.Name)
				}
				byName[d.Name] += n
			}
		}
		for _, name := range order {
			if byName[name] > 0 {
				g.asks = append(g.asks, DeviceAsk{Device: requestSpec(name), Count: byName[name]})
			}
		}
		info.groups[*tg.Name] = g
	}
	return info
}

func classRules(cs []*api.Constraint) []ClassRule {
	var out []ClassRule
	for _, c := range cs {
		if c == nil || strings.TrimSpace(c.LTarget) != nodeClassTarget {
			continue
		}
		op := c.Operand
		if op == "" {
			op = "="
		}
		out = append(out, ClassRule{Operand: op, Value: c.RTarget})
	}
	return out
}

// snapshot returns the state the watches hold, rebuilt only when one of
// them changed since the last call. Callers must not modify it.
func (c *cache) snapshot() *Snapshot {
	var data [numWatches]any
	var vers [numWatches]uint64
	for k, w := range c.watches {
		data[k], vers[k], _, _ = w.state()
	}
	c.snapMu.Lock()
	defer c.snapMu.Unlock()
	if c.snap != nil && vers == c.snapVers {
		return c.snap
	}
	s := &Snapshot{DefaultGPUsPerNode: c.cfg.DefaultGPUsPerNode}
	nodes, _ := data[watchNodes].(nodesData)
	allocs, _ := data[watchAllocs].(allocsData)
	blocked, _ := data[watchEvals].(evalsData)
	byID := make(map[string]*Node, len(nodes))
	s.Nodes = make([]Node, len(nodes))
	for i, n := range nodes {
		n.Used = allocs.used[n.ID]
		s.Nodes[i] = n
		byID[n.ID] = &s.Nodes[i]
	}
	s.Work = append(s.Work, blocked...)
	for _, p := range allocs.pending {
		n := byID[p.node]
		if n == nil {
			continue
		}
		w := Work{
			Source: FromPendingAlloc, Namespace: p.ns, JobID: p.job, Group: p.group,
			Allocs: 1, Since: p.created,
			Pool: n.Pool, Datacenters: []string{n.Datacenter},
			ClassRules: []ClassRule{{Operand: "=", Value: n.Class}},
		}
		for _, d := range p.devices {
			w.Asks = append(w.Asks, DeviceAsk{Device: d.DeviceSpec, Count: len(d.IDs)})
		}
		s.Work = append(s.Work, w)
	}
	c.snap, c.snapVers = s, vers
	return s
}

// utilization returns per-instance GPU utilisation of the ready nodes
// matching q that have matching devices, fetching node stats older than
// stats_ttl (one client stats call per node, 8 at a time).
func (c *cache) utilization(q Query, s *Snapshot) (map[string][]InstanceUtil, error) {
	c.statsMu.Lock()
	defer c.statsMu.Unlock()
	now := time.Now()
	var want, stale []string
	for i := range s.Nodes {
		n := &s.Nodes[i]
		if n.Status != "ready" || !n.matches(q.Filter) {
			continue
		}
		if total, _, _ := n.inventory(q.Filter.Device); total == 0 {
			continue
		}
		want = append(want, n.ID)
		if e, ok := c.stats[n.ID]; !ok || now.Sub(e.at) >= c.cfg.StatsTTL {
			stale = append(stale, n.ID)
		}
	}
	var mu sync.Mutex
	var failed []string
	var lastErr error
	_ = parallel(c.ctx, 8, len(stale), func(i int) error {
		id := stale[i]
		ctx, cancel := context.WithTimeout(c.ctx, statsTimeout)
		defer cancel()
		c.calls.add(EndpointClientStats)
		hs, err := c.cl.Nodes().Stats(id, (&api.QueryOptions{}).WithContext(ctx))
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			failed = append(failed, id)
			lastErr = err
			c.log.Debug("node stats failed", "node_id", id, "error", err)
			return nil
		}
		c.stats[id] = statsEntry{at: now, util: utilOf(hs, c.cfg.UtilStat)}
		return nil
	})
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
		for _, id := range sortedKeys(g.InstanceStats) {
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
