package nomadview

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/contract"
)

// Endpoints as Config.OnCall names them.
const (
	EndpointNodes    = "nodes"                // GET /v1/nodes?resources=true (blocking)
	EndpointAllocs   = "allocations"          // GET /v1/allocations?resources=true&filter=... (blocking)
	EndpointEvals    = "evaluations"          // GET /v1/evaluations?status=blocked (blocking)
	EndpointJobs     = "jobs"                 // GET /v1/jobs?meta=true (blocking)
	EndpointPools    = "node_pools"           // GET /v1/node/pools (blocking)
	EndpointFinished = "finished_allocations" // GET /v1/allocations?reverse=true&per_page=N&filter=... (blocking)
	EndpointJob      = "job"                  // GET /v1/job/:id, once per job modify index of a blocked job
	EndpointEvents   = "event_stream"         // GET /v1/event/stream?topic=Allocation:*&topic=Job:*&index=N (streaming)
	EndpointAlloc    = "allocation"           // GET /v1/allocation/:id, a new allocation of a job the watch has none of
)

// watch is one list kept fresh by blocking queries in its own goroutine.
type watch struct {
	list     List
	ready    chan struct{} // closed after the first successful list
	answered chan struct{} // closed after the first list, good or failed
	answer   sync.Once

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

// run keeps one watch fresh: the allocations by the event stream where
// Nomad serves it (follow), the finished allocations when the stream saw
// one finish (runFinished), the others by blocking lists (lister.once).
func (w *Watcher) run(wt *watch) {
	defer w.wg.Done()
	l := w.newLister(wt)
	switch {
	case wt.list == Allocs && !w.cfg.NoEventStream:
		w.runAllocs(l)
	case wt.list == Finished && !w.cfg.NoEventStream:
		w.runFinished(l)
	default:
		for {
			if _, alive := l.once(); !alive {
				return
			}
		}
	}
}

// lister lists one watch's list; it belongs to the watch's goroutine.
type lister struct {
	w          *Watcher
	wt         *watch
	index      uint64 // the index a blocking list waits past; 0 lists at once
	first      bool
	backoff    time.Duration
	minRefresh time.Duration
}

func (w *Watcher) newLister(wt *watch) *lister {
	l := &lister{w: w, wt: wt, first: true, backoff: time.Second, minRefresh: w.cfg.MinRefresh}
	if wt.list == Finished {
		l.minRefresh = w.cfg.FinishedRefresh
	}
	return l
}

// once lists once, a blocking list on the last index, and publishes the
// list when its index moved; after an error it backs off (1s doubling to
// 30s), keeping the last good list. It then waits out MinRefresh. It
// reports whether the list succeeded, and alive false once the Watcher
// closes.
func (l *lister) once() (listed, alive bool) {
	w, wt := l.w, l.wt
	start := time.Now()
	data, idx, err := w.fetch(wt.list, l.index)
	if w.ctx.Err() != nil {
		return false, false
	}
	if err != nil {
		l.fail(err)
		w.cfg.Log.Warn("nomad list failed; retrying", "list", wt.list.String(), "error", err, "retry_in", l.backoff)
		alive = sleepCtx(w.ctx, l.backoff)
		l.backoff = min(2*l.backoff, 30*time.Second)
		return false, alive
	}
	l.backoff = time.Second
	if idx < l.index {
		l.index = 0 // the index went backwards (snapshot restore): start over
	}
	l.publish(data, l.first || idx != l.index)
	l.index = max(idx, 1) // an index of 0 would not block
	return true, sleepCtx(w.ctx, l.minRefresh-time.Since(start))
}

// fail records a failed list: Health reports it, Answer returns it.
func (l *lister) fail(err error) {
	l.wt.fail(err)
	l.wt.answer.Do(func() { close(l.wt.answered) })
}

// publish records a good list (or the stream's state of it), and when it
// changed makes it the watch's data and tells the subscribers.
func (l *lister) publish(data any, changed bool) {
	wt := l.wt
	wt.succeed(data, changed)
	if l.first {
		wt.answer.Do(func() { close(wt.answered) })
		close(wt.ready)
		l.first = false
	}
	if changed {
		l.w.notify()
	}
}

func (wt *watch) fail(err error) {
	wt.mu.Lock()
	defer wt.mu.Unlock()
	if wt.lastErr == nil {
		wt.failingSince = time.Now()
	}
	wt.lastErr = err
}

func (wt *watch) succeed(data any, changed bool) {
	wt.mu.Lock()
	defer wt.mu.Unlock()
	wt.lastErr, wt.failingSince = nil, time.Time{}
	if changed {
		wt.data = data
		wt.version++
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

func (w *Watcher) opts(ns string, index uint64) *api.QueryOptions {
	q := &api.QueryOptions{Namespace: ns, WaitIndex: index, WaitTime: w.cfg.BlockWait, Params: map[string]string{}}
	return q.WithContext(w.ctx)
}

func (w *Watcher) fetch(l List, index uint64) (any, uint64, error) {
	switch l {
	case Nodes:
		q := w.opts("", index)
		q.Params["resources"] = "true"
		w.cfg.OnCall(EndpointNodes)
		nodes, meta, err := w.cl.Nodes().List(q)
		return nodes, lastIndex(meta), err
	case Allocs:
		return w.fetchAllocs(index, allocFilter, EndpointAllocs)
	case Finished:
		return w.fetchFinished(index)
	case Jobs:
		return w.fetchJobs(index)
	case Pools:
		w.cfg.OnCall(EndpointPools)
		pools, meta, err := w.cl.NodePools().List(w.opts("", index))
		return pools, lastIndex(meta), err
	}
	return w.fetchBlocked(index)
}

func lastIndex(m *api.QueryMeta) uint64 {
	if m == nil {
		return 0
	}
	return m.LastIndex
}

// allocFilter keeps the allocations that hold devices on a node.
const allocFilter = `ClientStatus == "pending" or ClientStatus == "running"`

// finishedFilter keeps the terminal allocations.
const finishedFilter = `ClientStatus == "complete" or ClientStatus == "failed" or ClientStatus == "lost"`

func (w *Watcher) fetchAllocs(index uint64, filter, endpoint string) ([]*api.AllocationListStub, uint64, error) {
	q := w.opts(w.cfg.Namespace, index)
	q.Params["resources"] = "true"
	q.Filter = filter
	if endpoint == EndpointFinished {
		q.Reverse = true
		q.PerPage = int32(min(w.cfg.FinishedMax, math.MaxInt32))
	}
	w.cfg.OnCall(endpoint)
	allocs, meta, err := w.cl.Allocations().List(q)
	if endpoint == EndpointAllocs {
		for _, a := range allocs {
			if a != nil {
				a.JobVersion = 0 // the event stream does not carry it
			}
		}
	}
	return allocs, lastIndex(meta), err
}

// fetchFinished lists the FinishedMax most recently created terminal
// allocations and keeps those holding devices that finished within
// FinishedWindow.
func (w *Watcher) fetchFinished(index uint64) (any, uint64, error) {
	stubs, idx, err := w.fetchAllocs(index, finishedFilter, EndpointFinished)
	if err != nil {
		return nil, 0, err
	}
	cut := time.Now().Add(-w.cfg.FinishedWindow)
	var out []*api.AllocationListStub
	for _, a := range stubs {
		if a == nil || holdsDevices(a) || len(allocDevices(a)) == 0 {
			continue // not terminal, or held nothing
		}
		if f := FinishedAt(a); f.IsZero() || f.Before(cut) {
			continue
		}
		out = append(out, a)
	}
	return out, idx, nil
}

// FinishedAt is when a terminal allocation ended: its tasks' latest
// finish, else its modify time; zero when neither is known.
func FinishedAt(a *api.AllocationListStub) time.Time {
	var f time.Time
	for _, ts := range a.TaskStates {
		if ts != nil && ts.FinishedAt.After(f) {
			f = ts.FinishedAt
		}
	}
	if f.IsZero() && a.ModifyTime > 0 {
		f = time.Unix(0, a.ModifyTime)
	}
	return f
}

// jobsData is what the Jobs watch publishes: every job, and the specs of
// the gang jobs (a map of its own per list).
type jobsData struct {
	jobs  map[JobKey]*api.JobListStub
	gangs map[JobKey]*api.Job
}

// fetchJobs lists every job with its meta and summary, then reads each
// live gang job's spec once per job modify index (w.gangSpecs keeps them
// between lists): a gang waits at count 0 with no blocked evaluation, so
// only its spec says what it asks for.
func (w *Watcher) fetchJobs(index uint64) (any, uint64, error) {
	w.cfg.OnCall(EndpointJobs)
	stubs, meta, err := w.cl.Jobs().ListOptions(&api.JobListOptions{Fields: &api.JobListFields{Meta: true}}, w.opts(w.cfg.Namespace, index))
	if err != nil {
		return nil, 0, err
	}
	jobs := make(map[JobKey]*api.JobListStub, len(stubs))
	live := map[JobKey]uint64{}
	for _, j := range stubs {
		if j == nil {
			continue
		}
		k := JobKey{Namespace: j.Namespace, ID: j.ID}
		jobs[k] = j
		if IsGang(j) {
			live[k] = j.JobModifyIndex
		}
	}
	gangs, err := w.readSpecsOf(w.gangSpecs, live)
	if err != nil {
		return nil, 0, err
	}
	return jobsData{jobs: jobs, gangs: gangs}, lastIndex(meta), nil
}

// IsGang says whether listed job j is a live gang: a batch job, not
// stopped, whose meta nomad_gpu_gang is "true" (docs/design/gangs.md).
func IsGang(j *api.JobListStub) bool {
	return j != nil && j.Type == api.JobTypeBatch && !j.Stop && j.Meta[contract.MetaGang] == "true"
}

// readSpecsOf brings cache to the specs of live (job → its modify index
// now): a spec older than its index is read again, one no longer live
// dropped. It returns a map of its own of the specs read.
func (w *Watcher) readSpecsOf(cache map[JobKey]*api.Job, live map[JobKey]uint64) (map[JobKey]*api.Job, error) {
	var stale []JobKey
	for k, index := range live {
		if j := cache[k]; j == nil || j.JobModifyIndex == nil || *j.JobModifyIndex < index {
			stale = append(stale, k)
		}
	}
	for k := range cache {
		if _, ok := live[k]; !ok {
			delete(cache, k)
		}
	}
	if err := w.readSpecs(cache, stale); err != nil {
		return nil, err
	}
	out := make(map[JobKey]*api.Job, len(live))
	for k := range live {
		if j := cache[k]; j != nil {
			out[k] = j
		}
	}
	return out, nil
}

// blockedData is what the Blocked watch publishes: the blocked
// evaluations and their jobs' specs (a map of its own per list).
type blockedData struct {
	evals []*api.Evaluation
	specs map[JobKey]*api.Job
}

// fetchBlocked lists blocked evaluations, then reads each blocked job's
// spec once per job modify index (w.specs keeps them between lists).
func (w *Watcher) fetchBlocked(index uint64) (any, uint64, error) {
	q := w.opts(w.cfg.Namespace, index)
	q.Params["status"] = api.EvalStatusBlocked
	w.cfg.OnCall(EndpointEvals)
	evals, meta, err := w.cl.Evaluations().List(q)
	if err != nil {
		return nil, 0, err
	}
	var blocked []*api.Evaluation
	live := map[JobKey]uint64{}
	for _, e := range evals {
		if e == nil || e.Status != api.EvalStatusBlocked || len(e.FailedTGAllocs) == 0 {
			continue
		}
		blocked = append(blocked, e)
		k := JobKey{Namespace: e.Namespace, ID: e.JobID}
		live[k] = max(live[k], e.JobModifyIndex)
	}
	specs, err := w.readSpecsOf(w.specs, live)
	if err != nil {
		return nil, 0, err
	}
	return blockedData{evals: blocked, specs: specs}, lastIndex(meta), nil
}

// readSpecs reads the specs of keys into cache, 8 at a time; a job gone
// (404) is dropped.
func (w *Watcher) readSpecs(cache map[JobKey]*api.Job, keys []JobKey) error {
	jobs := make([]*api.Job, len(keys))
	err := Parallel(w.ctx, 8, len(keys), func(i int) error {
		k := keys[i]
		ctx, cancel := context.WithTimeout(w.ctx, w.cfg.CallTimeout)
		defer cancel()
		w.cfg.OnCall(EndpointJob)
		j, _, err := w.cl.Jobs().Info(k.ID, (&api.QueryOptions{Namespace: k.Namespace}).WithContext(ctx))
		switch {
		case IsNotFound(err):
		case err != nil:
			return fmt.Errorf("job %q (namespace %q): %w", k.ID, k.Namespace, err)
		}
		jobs[i] = j
		return nil
	})
	if err != nil {
		return err
	}
	for i, k := range keys {
		if jobs[i] != nil {
			cache[k] = jobs[i]
		} else {
			delete(cache, k)
		}
	}
	return nil
}

// Parallel runs f(0..n-1) on up to limit goroutines, handing out no more
// once ctx ends; the first error wins (else ctx's).
func Parallel(ctx context.Context, limit, n int, f func(int) error) error {
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
		wg.Go(func() {
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
		})
	}
	wg.Wait()
	if ferr == nil {
		ferr = ctx.Err()
	}
	return ferr
}
