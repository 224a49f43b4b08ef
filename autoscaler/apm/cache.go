package apm

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/sizing"

	"github.com/nomad-gpu/nomad-gpu/nomadview"
)

// Endpoints the plugin calls, as Stats names them.
const (
	EndpointNodes  = "nodes"       // GET /v1/nodes?resources=true (blocking)
	EndpointEvals  = "evaluations" // GET /v1/evaluations?status=blocked (blocking)
	EndpointAllocs = "allocations" // GET /v1/allocations?resources=true&filter=... (blocking)
	// EndpointFinished lists terminal allocations, newest first, at most
	// finished_max_allocs (blocking; only with metrics_address).
	EndpointFinished    = "finished_allocations" // GET /v1/allocations?resources=true&reverse=true&per_page=N&filter=...
	EndpointJob         = "job"                  // GET /v1/job/:id, once per job modify index
	EndpointJobSummary  = "job_summary"          // GET /v1/job/:id/summary, once per blocked eval modify index
	EndpointClientStats = "client_stats"         // GET /v1/client/stats?node_id=, once per node per stats_ttl
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
	watchFinished // terminal allocations: the cluster figures only
	numWatches
)

var watchNames = [numWatches]string{"nodes", "blocked evaluations", "allocations", "finished allocations"}

// watchLabels name the lists in the exporter's list label.
var watchLabels = [numWatches]string{"nodes", "blocked_evaluations", "allocations", "finished_allocations"}

// figureWatches are the lists the cluster figures read.
var figureWatches = []int{watchNodes, watchEvals, watchAllocs, watchFinished}

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

func (w *watch) state() (data any, version uint64, failingSince time.Time, lastErr error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.data, w.version, w.failingSince, w.lastErr
}

// cache is the cluster state, kept by watches (nodes, blocked evaluations
// with their jobs, non-terminal allocations, and for the cluster figures
// terminal allocations), each started on the first query or scrape that
// needs it, plus device stats fetched on demand (and, for the cluster
// figures, refreshed in the background).
type cache struct {
	cl    *api.Client
	cfg   *Config
	log   hclog.Logger
	calls *counter

	ctx          context.Context
	cancel       context.CancelFunc
	wg           sync.WaitGroup
	startMu      sync.Mutex // orders watch starts before close's Wait
	closed       bool
	statsStarted bool // the background stats refresh runs

	// metrics is whether the cluster figures are on (metrics_address):
	// only then are job priorities read for allocations.
	metrics bool

	watches [numWatches]*watch

	// Job specs and summaries of blocked jobs, used by the evals watch only.
	jobs      map[jobKey]*jobInfo
	summaries map[string]summaryEntry // by blocked eval ID

	snapMu   sync.Mutex
	snap     *Snapshot
	snapVers [numWatches]uint64

	statsFetchMu sync.Mutex            // one stats refresh at a time
	statsMu      sync.Mutex            // guards stats
	stats        map[string]statsEntry // by node ID

	// Job priorities of allocations holding devices (cluster figures).
	prioMu sync.Mutex
	prio   map[jobKey]prioEntry
}

type prioEntry struct {
	version  uint64 // the newest job version seen or read
	priority int    // 0: unknown (job purged)
	used     time.Time
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
	task       string // the first task, by name, asking for a GPU slice
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
		runs    []AllocRun // with metrics only: for the task figures
	}
	finishedData []AllocRun
)

type pendingAlloc struct {
	ns, job, group, node string
	created              time.Time
	devices              []UsedDevices
	priority             int
}

func newCache(cl *api.Client, cfg *Config, log hclog.Logger, calls *counter) *cache {
	ctx, cancel := context.WithCancel(context.Background())
	c := &cache{
		cl: cl, cfg: cfg, log: log, calls: calls,
		ctx: ctx, cancel: cancel,
		jobs:      map[jobKey]*jobInfo{},
		summaries: map[string]summaryEntry{},
		stats:     map[string]statsEntry{},
		prio:      map[jobKey]prioEntry{},
		metrics:   cfg.MetricsAddress != "",
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
	case MetricUtilPct, MetricNodesReady:
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
	if !c.start(kinds, false) {
		return errors.New("plugin reconfigured or closed")
	}
	deadline := time.NewTimer(c.cfg.SyncTimeout)
	defer deadline.Stop()
	for _, k := range kinds {
		w := c.watches[k]
		select {
		case <-w.ready:
		case <-deadline.C:
			_, _, _, err := w.state()
			if err == nil {
				err = errors.New("no answer yet")
			}
			return fmt.Errorf("no %s list from Nomad within sync_timeout %v: %v", watchNames[k], c.cfg.SyncTimeout, err)
		case <-c.ctx.Done():
			return errors.New("plugin reconfigured or closed")
		}
		if _, _, since, err := w.state(); err != nil && time.Since(since) > c.cfg.MaxStaleness {
			return fmt.Errorf("nomad %s list failing since %s (over max_staleness %v): %v",
				watchNames[k], since.Format(time.RFC3339), c.cfg.MaxStaleness, err)
		}
	}
	return nil
}

// start starts the watches of kinds that are not running yet, and with
// stats the background stats refresh; it reports false once closed.
func (c *cache) start(kinds []int, stats bool) bool {
	c.startMu.Lock()
	defer c.startMu.Unlock()
	if c.closed {
		return false
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
	if stats && !c.statsStarted {
		c.statsStarted = true
		c.wg.Add(1)
		go c.runStats()
	}
	return true
}

// listState is one watch's health as the exporter reports it.
type listState struct {
	label string
	up    bool
}

// listStates reports, for each watch of kinds, whether it has listed once
// and has not been failing for over max_staleness.
func (c *cache) listStates(kinds []int) []listState {
	out := make([]listState, 0, len(kinds))
	for _, k := range kinds {
		w := c.watches[k]
		up := false
		select {
		case <-w.ready:
			_, _, since, err := w.state()
			up = err == nil || time.Since(since) <= c.cfg.MaxStaleness
		default:
		}
		out = append(out, listState{watchLabels[k], up})
	}
	return out
}

// run keeps one watch fresh: a blocking list on the last index, at most
// one list per min_refresh_interval, backing off on errors.
func (c *cache) run(w *watch) {
	defer c.wg.Done()
	var index uint64
	first := true
	backoff := time.Second
	minRefresh := c.cfg.MinRefresh
	if w.kind == watchFinished {
		minRefresh = max(minRefresh, c.cfg.FinishedRefresh)
	}
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
		if !sleepCtx(c.ctx, minRefresh-time.Since(start)) {
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
	case watchFinished:
		return c.fetchFinished(index)
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
				if d == nil {
					continue
				}
				g := DeviceGroup{
					DeviceSpec:  DeviceSpec{Vendor: d.Vendor, Type: d.Type, Name: d.Name},
					MemoryBytes: memoryBytes(d.Attributes[contract.AttrMemory]),
				}
				for _, in := range d.Instances {
					if in == nil {
						continue
					}
					g.Instances = append(g.Instances, DeviceInstance{ID: in.ID, Healthy: in.Healthy, GPU: physicalGPU(in)})
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
	want := map[jobKey]uint64{}
	for _, s := range stubs {
		devs := devicesOf(s)
		if len(devs) == 0 {
			continue
		}
		d.used[s.NodeID] = append(d.used[s.NodeID], devs...)
		if c.metrics {
			k := jobKey{s.Namespace, s.JobID}
			want[k] = max(want[k], s.JobVersion)
			r := runOf(s)
			r.Tasks = sizing.RunsOf([]*api.AllocationListStub{s}, nil, nil)
			d.runs = append(d.runs, r)
		}
		if s.ClientStatus == api.AllocClientStatusPending {
			d.pending = append(d.pending, pendingAlloc{
				ns: s.Namespace, job: s.JobID, group: s.TaskGroup, node: s.NodeID,
				created: time.Unix(0, s.CreateTime), devices: devs,
			})
		}
	}
	if c.metrics {
		prio := c.priorities(want)
		for i := range d.runs {
			d.runs[i].setPriority(prio[jobKey{d.runs[i].Namespace, d.runs[i].JobID}])
		}
		for i := range d.pending {
			d.pending[i].priority = prio[jobKey{d.pending[i].ns, d.pending[i].job}]
		}
	}
	return d, meta.LastIndex, nil
}

// devicesOf lists the device instances an allocation holds, by task name.
func devicesOf(s *api.AllocationListStub) []UsedDevices {
	if s.AllocatedResources == nil {
		return nil
	}
	var devs []UsedDevices
	for _, t := range sortedTasks(s.AllocatedResources.Tasks) {
		for _, dv := range t.Devices {
			if dv == nil || len(dv.DeviceIDs) == 0 {
				continue
			}
			devs = append(devs, UsedDevices{DeviceSpec: DeviceSpec{Vendor: dv.Vendor, Type: dv.Type, Name: dv.Name}, IDs: dv.DeviceIDs})
		}
	}
	return devs
}

// holdsDevices reports whether an allocation was given any device instance.
func holdsDevices(s *api.AllocationListStub) bool {
	if s.AllocatedResources == nil {
		return false
	}
	for _, t := range s.AllocatedResources.Tasks {
		if t == nil {
			continue
		}
		for _, dv := range t.Devices {
			if dv != nil && len(dv.DeviceIDs) > 0 {
				return true
			}
		}
	}
	return false
}

// finishedFilter keeps the terminal allocations.
const finishedFilter = `ClientStatus == "complete" or ClientStatus == "failed" or ClientStatus == "lost"`

// fetchFinished lists the finished_max_allocs most recently created
// terminal allocations (one page, newest first) and keeps those holding
// devices that finished within finished_window, with their job's priority.
func (c *cache) fetchFinished(index uint64) (any, uint64, error) {
	q := c.opts(c.cfg.Namespace, index)
	q.Params["resources"] = "true"
	q.Filter = finishedFilter
	q.Reverse = true
	q.PerPage = int32(min(c.cfg.FinishedMax, math.MaxInt32))
	c.calls.add(EndpointFinished)
	stubs, meta, err := c.cl.Allocations().List(q)
	if err != nil {
		return nil, 0, err
	}
	cut := time.Now().Add(-c.cfg.FinishedWindow)
	var runs finishedData
	want := map[jobKey]uint64{}
	for _, s := range stubs {
		if !holdsDevices(s) {
			continue
		}
		r := runOf(s)
		if !r.Terminal() || r.Finished.Before(cut) {
			continue
		}
		k := jobKey{s.Namespace, s.JobID}
		want[k] = max(want[k], s.JobVersion)
		r.Tasks = sizing.RunsOf([]*api.AllocationListStub{s}, nil, nil)
		runs = append(runs, r)
	}
	prio := c.priorities(want)
	for i := range runs {
		runs[i].setPriority(prio[jobKey{runs[i].Namespace, runs[i].JobID}])
	}
	return runs, meta.LastIndex, nil
}

// runOf reads an allocation's times. A task's first start is the earlier of
// its StartedAt (which a restart moves) and its oldest "Started" event
// still kept; the allocation's start is its tasks' earliest, its finish
// (terminal only) their latest FinishedAt, else its modify time.
func runOf(s *api.AllocationListStub) AllocRun {
	r := AllocRun{ID: s.ID, Namespace: s.Namespace, JobID: s.JobID, NodeID: s.NodeID, Status: s.ClientStatus}
	if s.CreateTime > 0 {
		r.Created = time.Unix(0, s.CreateTime)
	}
	var finished time.Time
	for _, ts := range s.TaskStates {
		if ts == nil {
			continue
		}
		start := ts.StartedAt
		for _, e := range ts.Events {
			if e == nil || e.Type != api.TaskStarted || e.Time <= 0 {
				continue
			}
			if t := time.Unix(0, e.Time); start.IsZero() || t.Before(start) {
				start = t
			}
		}
		if !start.IsZero() && (r.Started.IsZero() || start.Before(r.Started)) {
			r.Started = start
		}
		if ts.FinishedAt.After(finished) {
			finished = ts.FinishedAt
		}
	}
	if r.Terminal() {
		r.Finished = finished
		if r.Finished.IsZero() && s.ModifyTime > 0 {
			r.Finished = time.Unix(0, s.ModifyTime)
		}
	}
	return r
}

// setPriority sets the allocation's and its task runs' job priority.
func (r *AllocRun) setPriority(p int) {
	r.Priority = p
	for i := range r.Tasks {
		r.Tasks[i].Priority = p
	}
}

// priorities returns the priority of each job of want (job → the newest
// version its allocations show), reading the job's spec when the cache
// holds no read of that version or newer: once per job and new version.
// A purged job is priority 0 until a newer version shows; a failed read
// is 0 this time and read again on the next list. Entries unused for over
// finished_window+10m are dropped.
func (c *cache) priorities(want map[jobKey]uint64) map[jobKey]int {
	now := time.Now()
	out := make(map[jobKey]int, len(want))
	var need []jobKey
	c.prioMu.Lock()
	for k, v := range want {
		if e, ok := c.prio[k]; ok && e.version >= v {
			e.used = now
			c.prio[k] = e
			out[k] = e.priority
			continue
		}
		need = append(need, k)
	}
	for k, e := range c.prio {
		if now.Sub(e.used) > c.cfg.FinishedWindow+10*time.Minute {
			delete(c.prio, k)
		}
	}
	c.prioMu.Unlock()
	var mu sync.Mutex
	_ = parallel(c.ctx, 8, len(need), func(i int) error {
		k := need[i]
		ctx, cancel := context.WithTimeout(c.ctx, callTimeout)
		defer cancel()
		c.calls.add(EndpointJob)
		job, _, err := c.cl.Jobs().Info(k.id, (&api.QueryOptions{Namespace: k.ns}).WithContext(ctx))
		e := prioEntry{version: want[k], used: now}
		switch {
		case nomadview.IsNotFound(err):
		case err != nil:
			c.log.Debug("job read for its priority failed", "job", k.id, "namespace", k.ns, "error", err)
			return nil
		default:
			if job.Priority != nil {
				e.priority = *job.Priority
			}
			if job.Version != nil {
				e.version = max(e.version, *job.Version)
			}
		}
		mu.Lock()
		out[k] = e.priority
		mu.Unlock()
		c.prioMu.Lock()
		c.prio[k] = e
		c.prioMu.Unlock()
		return nil
	})
	return out
}

// memoryBytes reads a device memory attribute (MiB by convention; other
// byte units as given). A value without a known unit is 0.
func memoryBytes(a *api.Attribute) int64 {
	if a == nil {
		return 0
	}
	var v float64
	switch {
	case a.IntVal != nil:
		v = float64(*a.IntVal)
	case a.FloatVal != nil:
		v = *a.FloatVal
	default:
		return 0
	}
	var mult float64
	switch strings.ToLower(a.Unit) {
	case "b", "byte", "bytes":
		mult = 1
	case "kib":
		mult = 1 << 10
	case "mib":
		mult = 1 << 20
	case "gib":
		mult = 1 << 30
	case "tib":
		mult = 1 << 40
	case "kb":
		mult = 1e3
	case "mb":
		mult = 1e6
	case "gb":
		mult = 1e9
	case "tb":
		mult = 1e12
	default:
		return 0
	}
	if v <= 0 {
		return 0
	}
	return int64(v * mult)
}

// physicalGPU names the GPU a device instance is or is a slice of: its PCI
// bus ID (the device plugin gives MIG instances and MPS shares their
// GPU's), else the GPU UUID of an MPS share ID, else "" (a GPU of its own).
func physicalGPU(in *api.NodeDevice) string {
	if in.Locality != nil && in.Locality.PciBusID != "" {
		return in.Locality.PciBusID
	}
	if uuid, _, ok := contract.ParseShareID(in.ID); ok {
		return uuid
	}
	return ""
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
		if nomadview.IsNotFound(err) {
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
		case nomadview.IsNotFound(err):
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
				Priority:        e.Priority,
				Task:            g.task,
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
				if n > 0 && nomadview.IsGPUAsk(nomadview.ParseRequest(d.Name)) && (g.task == "" || t.Name < g.task) {
					g.task = t.Name
				}
			}
		}
		for _, name := range order {
			if byName[name] > 0 {
				g.asks = append(g.asks, DeviceAsk{Device: nomadview.ParseRequest(name), Count: byName[name]})
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
	finished, _ := data[watchFinished].(finishedData)
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
			Priority:   p.priority,
		}
		for _, d := range p.devices {
			w.Asks = append(w.Asks, DeviceAsk{Device: d.DeviceSpec, Count: len(d.IDs)})
		}
		s.Work = append(s.Work, w)
	}
	// Runs: finished first; an allocation both lists show (it finished
	// between them) counts as finished. Allocations of nodes no longer
	// listed are left out.
	if n := len(finished) + len(allocs.runs); n > 0 {
		s.Runs = make([]AllocRun, 0, n)
		seen := make(map[string]bool, len(finished))
		add := func(r AllocRun) {
			if n := byID[r.NodeID]; n != nil {
				r.Pool, r.Datacenter = n.Pool, n.Datacenter
				s.Runs = append(s.Runs, r)
			}
		}
		for _, r := range finished {
			seen[r.ID] = true
			add(r)
		}
		for _, r := range allocs.runs {
			if !seen[r.ID] {
				add(r)
			}
		}
	}
	c.snap, c.snapVers = s, vers
	return s
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
		if total, _, _ := n.inventory(q.Filter.Device); total == 0 {
			continue
		}
		want = append(want, n.ID)
		if e, ok := c.stats[n.ID]; !ok || now.Sub(e.at) >= c.cfg.StatsTTL {
			stale = append(stale, n.ID)
		}
	}
	c.statsMu.Unlock()
	var mu sync.Mutex
	var failed []string
	var lastErr error
	_ = parallel(c.ctx, 8, len(stale), func(i int) error {
		id := stale[i]
		ctx, cancel := context.WithTimeout(c.ctx, statsTimeout)
		defer cancel()
		c.calls.add(EndpointClientStats)
		hs, err := c.cl.Nodes().Stats(id, (&api.QueryOptions{}).WithContext(ctx))
		if err != nil {
			mu.Lock()
			failed = append(failed, id)
			lastErr = err
			mu.Unlock()
			c.log.Debug("node stats failed", "node_id", id, "error", err)
			return nil
		}
		e := statsEntry{at: now, util: utilOf(hs, c.cfg.UtilStat)}
		c.statsMu.Lock()
		c.stats[id] = e
		c.statsMu.Unlock()
		return nil
	})
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
	case <-c.watches[watchNodes].ready:
	case <-c.ctx.Done():
		return
	}
	all := Query{}
	for {
		_, _ = c.utilization(all, c.snapshot())
		if !sleepCtx(c.ctx, c.cfg.StatsTTL) {
			return
		}
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
