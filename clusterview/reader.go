package clusterview

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/contract"
)

// Defaults of a Reader's knobs.
const (
	DefaultWorkers      = 8
	DefaultStatsTimeout = 5 * time.Second
	DefaultCallTimeout  = 30 * time.Second
)

// Reader reads what a View is built from, one Read per frame: the node list
// with resources, the pending and running allocations, the blocked
// evaluations with their jobs' specs and summaries, and each shown ready
// node's host stats (Workers at a time, each bounded by StatsTimeout; a
// node whose stats fail is shown without them). Job specs are kept between
// reads and re-read only when a blocked evaluation names a newer version.
//
// The token needs node:read and read-job in the namespaces read, and
// node pool read to filter by a pool that no node is in.
type Reader struct {
	Client *api.Client
	// Namespace limits allocations and queued work to one namespace;
	// "" or "*" reads all.
	Namespace    string
	Workers      int
	StatsTimeout time.Duration
	// CallTimeout bounds each list and job read.
	CallTimeout time.Duration
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	// HistoryWindow is how far back finished allocations are read as the
	// run history forecasts learn from (HistoryMaxAllocs of the newest
	// terminal ones at most); 0 reads none. A failed read of them only
	// makes the forecasts unknown.
	HistoryWindow time.Duration
	// SkipStats reads no host stats: for a forecast (Forecast), which
	// needs none, without a call to every node.
	SkipStats bool

	mu   sync.Mutex
	jobs map[JobKey]*api.Job
}

// allocFilter keeps the allocations that hold devices on a node.
const allocFilter = `ClientStatus == "pending" or ClientStatus == "running"`

// finishedFilter keeps the terminal allocations.
const finishedFilter = `ClientStatus == "complete" or ClientStatus == "failed" or ClientStatus == "lost"`

// HistoryMaxAllocs bounds the terminal allocations one Read lists (one
// page, newest first), as the APM's finished_max_allocs does.
const HistoryMaxAllocs = 2000

// View reads the cluster and builds its view.
func (r *Reader) View(ctx context.Context, f Filter) (*View, error) {
	in, err := r.Read(ctx, f)
	if err != nil {
		return nil, err
	}
	return Build(in), nil
}

// Read fetches one frame's input. It fails when a list fails, or when f
// names a node pool or nodes that do not exist (CheckFilter); a node's
// stats failing only marks that node.
func (r *Reader) Read(ctx context.Context, f Filter) (*Input, error) {
	now := time.Now
	if r.Now != nil {
		now = r.Now
	}
	in := &Input{Filter: f, Stats: map[string]NodeStats{}, Jobs: map[JobKey]*api.Job{}, Summaries: map[JobKey]*api.JobSummary{}}

	nq, cancel := r.query(ctx, "")
	nq.Params["resources"] = "true"
	nodes, _, err := r.Client.Nodes().List(nq)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	if err := CheckFilter(f, nodes, func() ([]string, error) { return r.listPools(ctx) }); err != nil {
		return nil, err
	}
	in.Nodes = nodes

	var wg sync.WaitGroup
	var allocErr, evalErr error
	wg.Go(func() {
		q, cancel := r.query(ctx, r.namespace())
		defer cancel()
		q.Params["resources"] = "true"
		q.Filter = allocFilter
		in.Allocs, _, allocErr = r.Client.Allocations().List(q)
		if allocErr != nil {
			allocErr = fmt.Errorf("list allocations: %w", allocErr)
		}
	})
	wg.Go(func() { evalErr = r.readQueue(ctx, in) })
	if !r.SkipStats {
		wg.Go(func() { r.readStats(ctx, in) })
	}
	if r.HistoryWindow > 0 {
		wg.Go(func() { r.readHistory(ctx, in, now()) })
	}
	wg.Wait()
	if err := errors.Join(allocErr, evalErr); err != nil {
		return nil, err
	}
	in.Now = now()
	return in, nil
}

// listPools lists the names of the node pools.
func (r *Reader) listPools(ctx context.Context) ([]string, error) {
	q, cancel := r.query(ctx, "")
	defer cancel()
	pools, _, err := r.Client.NodePools().List(q)
	if err != nil {
		return nil, fmt.Errorf("list node pools: %w", err)
	}
	names := make([]string, 0, len(pools))
	for _, p := range pools {
		if p != nil {
			names = append(names, p.Name)
		}
	}
	return names, nil
}

// readHistory lists the terminal allocations holding GPU devices that
// finished within HistoryWindow of now into in.Finished; a failure is
// recorded in in.HistoryError.
func (r *Reader) readHistory(ctx context.Context, in *Input, now time.Time) {
	q, cancel := r.query(ctx, r.namespace())
	defer cancel()
	q.Params["resources"] = "true"
	q.Filter = finishedFilter
	q.Reverse = true
	q.PerPage = HistoryMaxAllocs
	stubs, _, err := r.Client.Allocations().List(q)
	if err != nil {
		in.HistoryError = "list finished allocations: " + errorText(err)
		return
	}
	cut := now.Add(-r.HistoryWindow)
	for _, a := range stubs {
		if a == nil || !isTerminal(a) || a.AllocatedResources == nil || len(heldAsks(a)) == 0 {
			continue
		}
		if f := finishedAt(a); f.IsZero() || f.Before(cut) {
			continue
		}
		in.Finished = append(in.Finished, a)
	}
}

func isTerminal(a *api.AllocationListStub) bool {
	switch a.ClientStatus {
	case api.AllocClientStatusComplete, api.AllocClientStatusFailed, api.AllocClientStatusLost:
		return true
	}
	return false
}

// finishedAt is when a terminal allocation ended: its tasks' latest
// finish, else its modify time; zero when neither is known.
func finishedAt(a *api.AllocationListStub) time.Time {
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

func (r *Reader) namespace() string {
	if r.Namespace == "" {
		return "*"
	}
	return r.Namespace
}

func (r *Reader) query(ctx context.Context, ns string) (*api.QueryOptions, context.CancelFunc) {
	d := r.CallTimeout
	if d <= 0 {
		d = DefaultCallTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, d)
	return (&api.QueryOptions{Namespace: ns, Params: map[string]string{}}).WithContext(ctx), cancel
}

func (r *Reader) workers() int {
	if r.Workers > 0 {
		return r.Workers
	}
	return DefaultWorkers
}

// readStats reads the host stats of every shown, ready node with nvidia
// devices; other shown nodes get the reason they have none.
func (r *Reader) readStats(ctx context.Context, in *Input) {
	timeout := r.StatsTimeout
	if timeout <= 0 {
		timeout = DefaultStatsTimeout
	}
	var ids []string
	for _, n := range in.Nodes {
		if n == nil || !in.Filter.matchNode(n) {
			continue
		}
		switch {
		case n.Status != api.NodeStatusReady:
			in.Stats[n.ID] = NodeStats{Err: fmt.Errorf("node is %s", n.Status)}
		case !hasNvidiaDevices(n):
			in.Stats[n.ID] = NodeStats{Err: errors.New("no GPU devices")}
		default:
			ids = append(ids, n.ID)
		}
	}
	results := make([]NodeStats, len(ids))
	parallel(ctx, r.workers(), len(ids), func(i int) {
		sctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		hs, err := r.Client.Nodes().Stats(ids[i], (&api.QueryOptions{}).WithContext(sctx))
		if err != nil && sctx.Err() != nil {
			err = fmt.Errorf("no answer within %v", timeout)
		}
		results[i] = NodeStats{Host: hs, Err: err}
	})
	for i, id := range ids {
		if results[i].Host == nil && results[i].Err == nil {
			results[i].Err = errors.New("not read")
			if ctx.Err() != nil {
				results[i].Err = ctx.Err()
			}
		}
		in.Stats[id] = results[i]
	}
}

func hasNvidiaDevices(n *api.NodeListStub) bool {
	if n.NodeResources == nil {
		return false
	}
	for _, d := range n.NodeResources.Devices {
		if d != nil && d.Vendor == contract.Vendor && len(d.Instances) > 0 {
			return true
		}
	}
	return false
}

// readQueue lists blocked evaluations and reads their jobs (cached by job
// modify index) and summaries.
func (r *Reader) readQueue(ctx context.Context, in *Input) error {
	q, cancel := r.query(ctx, r.namespace())
	q.Params["status"] = api.EvalStatusBlocked
	evals, _, err := r.Client.Evaluations().List(q)
	cancel()
	if err != nil {
		return fmt.Errorf("list blocked evaluations: %w", err)
	}
	r.mu.Lock()
	if r.jobs == nil {
		r.jobs = map[JobKey]*api.Job{}
	}
	live := map[JobKey]bool{}
	var keys, stale []JobKey
	for _, e := range evals {
		if e == nil || e.Status != api.EvalStatusBlocked || len(e.FailedTGAllocs) == 0 {
			continue
		}
		in.Blocked = append(in.Blocked, e)
		k := JobKey{e.Namespace, e.JobID}
		if live[k] {
			continue
		}
		live[k] = true
		keys = append(keys, k)
		if j := r.jobs[k]; j == nil || j.JobModifyIndex == nil || *j.JobModifyIndex < e.JobModifyIndex {
			stale = append(stale, k)
		}
	}
	for k := range r.jobs {
		if !live[k] {
			delete(r.jobs, k)
		}
	}
	r.mu.Unlock()

	jobs := make([]*api.Job, len(stale))
	jobErrs := make([]error, len(stale))
	summaries := make([]*api.JobSummary, len(keys))
	parallel(ctx, r.workers(), len(stale)+len(keys), func(i int) {
		if i < len(stale) {
			k := stale[i]
			q, cancel := r.query(ctx, k.Namespace)
			defer cancel()
			j, _, err := r.Client.Jobs().Info(k.ID, q)
			if err != nil && !IsNotFound(err) {
				jobErrs[i] = fmt.Errorf("read job %q (namespace %q): %w", k.ID, k.Namespace, err)
			}
			jobs[i] = j
			return
		}
		k := keys[i-len(stale)]
		q, cancel := r.query(ctx, k.Namespace)
		defer cancel()
		// A summary that fails leaves the count to the evaluation.
		summaries[i-len(stale)], _, _ = r.Client.Jobs().Summary(k.ID, q)
	})
	if err := errors.Join(jobErrs...); err != nil {
		return err
	}
	r.mu.Lock()
	for i, k := range stale {
		if jobs[i] != nil {
			r.jobs[k] = jobs[i]
		} else {
			delete(r.jobs, k) // gone
		}
	}
	for i, k := range keys {
		if j := r.jobs[k]; j != nil {
			in.Jobs[k] = j
		}
		if summaries[i] != nil {
			in.Summaries[k] = summaries[i]
		}
	}
	r.mu.Unlock()
	return nil
}

// IsNotFound says whether err is the Nomad API's answer that what was asked
// for does not exist (HTTP 404), from its typed error, not its text.
func IsNotFound(err error) bool {
	var ue api.UnexpectedResponseError
	if errors.As(err, &ue) {
		return ue.StatusCode() == http.StatusNotFound
	}
	var uep *api.UnexpectedResponseError
	if errors.As(err, &uep) {
		return uep.StatusCode() == http.StatusNotFound
	}
	return false
}

// parallel runs f(0..n-1) on up to limit goroutines; it stops handing out
// work once ctx is done.
func parallel(ctx context.Context, limit, n int, f func(int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(limit, n) {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				f(i)
			}
		})
	}
	wg.Wait()
}
