package topview

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/nomadview"
)

// fakeNomad serves the endpoints a Source's watcher and stats reads call,
// from fixtures. Every list answers index 1 at once, so a watch re-lists
// once per MinRefresh.
type fakeNomad struct {
	mu         sync.Mutex
	nodes      []*api.NodeListStub
	allocs     []*api.AllocationListStub
	evals      []*api.Evaluation
	specs      map[string]*api.Job
	jobs       []*api.JobListStub
	stats      map[string]func(ctx context.Context) (*api.HostStats, int) // by node ID
	failAllocs bool
	// finished answer the terminal allocations' list; failHistory fails it.
	finished    []*api.AllocationListStub
	failHistory bool
	// pools are the node pools; failPools fails their list.
	pools     []string
	failPools bool

	calls       map[string]int
	params      map[string]string // path → raw query of the last call
	inFlight    atomic.Int64
	maxInFlight atomic.Int64
}

func newFakeNomad() *fakeNomad {
	in := fixtureInput()
	f := &fakeNomad{
		nodes:  in.Nodes,
		allocs: in.Allocs,
		evals:  in.Blocked,
		specs:  map[string]*api.Job{},
		stats: map[string]func(context.Context) (*api.HostStats, int){
			node1ID: func(context.Context) (*api.HostStats, int) { return fixtureStats(), 200 },
			node2ID: func(context.Context) (*api.HostStats, int) { return nil, 500 },
		},
		pools: []string{"all", "default", "gpu", "batch", "empty"},
		calls: map[string]int{}, params: map[string]string{},
	}
	for k, j := range in.Specs {
		f.specs[k.ID] = j
	}
	for _, j := range in.Jobs {
		f.jobs = append(f.jobs, j)
	}
	return f
}

func (f *fakeNomad) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	history := r.URL.Path == "/v1/allocations" && strings.Contains(r.URL.Query().Get("filter"), "complete")
	key := r.URL.Path
	if history {
		key = "history"
	}
	f.calls[key]++
	f.params[key] = r.URL.RawQuery
	reply := func(v any) {
		w.Header().Set("X-Nomad-Index", "1")
		_ = json.NewEncoder(w).Encode(v)
	}
	fail := func(failing bool, code int, msg string) bool {
		if failing {
			http.Error(w, msg, code)
		}
		return failing
	}
	switch p := r.URL.Path; {
	case p == "/v1/nodes":
		reply(f.nodes)
	case history:
		if !fail(f.failHistory, 500, "boom") {
			reply(f.finished)
		}
	case p == "/v1/allocations":
		if !fail(f.failAllocs, 500, "boom") {
			reply(f.allocs)
		}
	case p == "/v1/evaluations":
		reply(f.evals)
	case p == "/v1/jobs":
		reply(f.jobs)
	case p == "/v1/node/pools":
		if !fail(f.failPools, http.StatusForbidden, "Permission denied") {
			reply(f.poolList())
		}
	case strings.HasPrefix(p, "/v1/job/"):
		if j := f.specs[strings.TrimPrefix(p, "/v1/job/")]; !fail(j == nil, 404, "job not found") {
			reply(j)
		}
	case p == "/v1/client/stats":
		f.serveStats(w, r, reply)
	default:
		http.NotFound(w, r)
	}
}

func (f *fakeNomad) poolList() []*api.NodePool {
	var pools []*api.NodePool
	for _, name := range f.pools {
		pools = append(pools, &api.NodePool{Name: name})
	}
	return pools
}

// serveStats (f.mu held) answers a node's stats, counting the calls in
// flight; the node's stats function runs without the lock.
func (f *fakeNomad) serveStats(w http.ResponseWriter, r *http.Request, reply func(any)) {
	fn := f.stats[r.URL.Query().Get("node_id")]
	if fn == nil {
		http.Error(w, "Unknown node", 404)
		return
	}
	n := f.inFlight.Add(1)
	for m := f.maxInFlight.Load(); n > m && !f.maxInFlight.CompareAndSwap(m, n); m = f.maxInFlight.Load() {
	}
	f.mu.Unlock()
	hs, code := fn(r.Context())
	f.mu.Lock()
	f.inFlight.Add(-1)
	if code != 200 {
		http.Error(w, "rpc error: no path to node", code)
		return
	}
	reply(hs)
}

func (f *fakeNomad) count(key string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[key]
}

// startSource serves f and returns a Source over it, its watcher closed
// when the test ends. Its lists are read once (MinRefresh a minute), so
// the calls counted are the frame's.
func startSource(t *testing.T, f *fakeNomad, cfg nomadview.Config) *Source {
	t.Helper()
	cfg.MinRefresh = time.Minute
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	cl, err := api.NewClient(&api.Config{Address: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	w := nomadview.NewWatcher(cl, cfg)
	t.Cleanup(w.Close)
	return &Source{Client: cl, Watcher: w}
}

func TestSourceStatsFailuresNeverAbort(t *testing.T) {
	f := newFakeNomad()
	hang := &api.NodeListStub{
		ID: "44444444-hang", Name: "gpu-hang", NodePool: "gpu", Status: "ready",
		NodeResources: &api.NodeResources{Devices: gpuNode().NodeResources.Devices[:1]},
	}
	down := &api.NodeListStub{
		ID: "55555555-down", Name: "gpu-down", NodePool: "gpu", Status: "down",
		NodeResources: &api.NodeResources{Devices: gpuNode().NodeResources.Devices[:1]},
	}
	f.nodes = append(f.nodes, hang, down)
	f.stats[hang.ID] = func(ctx context.Context) (*api.HostStats, int) {
		select {
		case <-ctx.Done():
		case <-time.After(5 * time.Second):
		}
		return nil, 500
	}
	r := startSource(t, f, nomadview.Config{})
	r.StatsTimeout, r.Now = 200*time.Millisecond, func() time.Time { return t0 }
	start := time.Now()
	v, err := r.View(context.Background(), Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("a hanging node held the view for %v", d)
	}
	want := map[string]string{
		"gpu-1":    "",
		"gpu-2":    "stats unavailable: HTTP 500: rpc error: no path to node",
		"gpu-hang": "stats unavailable: no answer within 200ms",
		"gpu-down": "stats unavailable: node is down",
	}
	if got := nodeNames(v); len(got) != len(want) {
		t.Fatalf("nodes %v", got)
	}
	for _, n := range v.Nodes {
		if got := n.StatsError; got != want[n.Name] {
			t.Errorf("%s: stats_error %q, want %q", n.Name, got, want[n.Name])
		}
	}
	if n := f.count("/v1/client/stats"); n != 3 {
		t.Errorf("%d stats calls, want 3 (not the down node, not the node without GPUs)", n)
	}
	if u := v.Nodes[0].GPUs[0].UtilizationPct; u == nil || *u != 40 {
		t.Errorf("gpu-1 stats not read: %+v", v.Nodes[0].GPUs[0])
	}
	if len(v.Queue) != 2 || v.Queue[0].Job != "big" || v.Queue[0].Count != 2 || v.Queue[0].WaitingSeconds != 95 {
		t.Errorf("queue %+v", v.Queue)
	}
}

func TestSourceBoundsStatsWorkers(t *testing.T) {
	f := newFakeNomad()
	f.nodes = nil
	for i := range 12 {
		n := gpuNode()
		n.ID, n.Name = fmt.Sprintf("node-%02d", i), fmt.Sprintf("gpu-%02d", i)
		f.nodes = append(f.nodes, n)
		f.stats[n.ID] = func(context.Context) (*api.HostStats, int) {
			time.Sleep(20 * time.Millisecond)
			return fixtureStats(), 200
		}
	}
	r := startSource(t, f, nomadview.Config{})
	r.Workers = 3
	v, err := r.View(context.Background(), Filter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range v.Nodes {
		if n.StatsError != "" {
			t.Errorf("%s: %s", n.Name, n.StatsError)
		}
	}
	if m := f.maxInFlight.Load(); m > 3 || m < 2 {
		t.Errorf("%d stats calls at once, want 2..3", m)
	}
}

func TestSourceFiltersStatsCalls(t *testing.T) {
	tests := []struct {
		name       string
		filter     Filter
		nodes      []string
		statsCalls int
		skipStats  bool
	}{
		{"every GPU node", Filter{}, []string{"gpu-1", "gpu-2"}, 2, false},
		{"only the shown pool's", Filter{Pool: "batch"}, []string{"gpu-2"}, 1, false},
		{"only the shown node's", Filter{Nodes: []string{"gpu-1"}}, []string{"gpu-1"}, 1, false},
		{"none when skipped", Filter{}, []string{"gpu-1", "gpu-2"}, 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeNomad()
			r := startSource(t, f, nomadview.Config{})
			r.SkipStats = tc.skipStats
			v, err := r.View(context.Background(), tc.filter)
			if err != nil {
				t.Fatal(err)
			}
			if got := nodeNames(v); !slices.Equal(got, tc.nodes) {
				t.Errorf("nodes %v, want %v", got, tc.nodes)
			}
			if n := f.count("/v1/client/stats"); n != tc.statsCalls {
				t.Errorf("%d stats calls, want %d", n, tc.statsCalls)
			}
		})
	}
}

// A filter naming a pool or node that does not exist is an error, not an
// empty view; a pool that exists without nodes is an empty view.
func TestSourceChecksFilter(t *testing.T) {
	tests := []struct {
		name      string
		filter    Filter
		failPools bool
		nodes     []string // shown, when no error
		poolCalls int
		wantErr   string
	}{
		{name: "a pool with nodes", filter: Filter{Pool: "batch"}, nodes: []string{"gpu-2"}},
		{name: "a pool without nodes", filter: Filter{Pool: "empty"}, poolCalls: 1},
		{name: "the pool all holds every node", filter: Filter{Pool: "all"}, nodes: []string{"gpu-1", "gpu-2"}, poolCalls: 1},
		{name: "no such pool", filter: Filter{Pool: "nosuchpool"}, poolCalls: 1,
			wantErr: `node pool "nosuchpool" does not exist (node pools: all, batch, default, empty, gpu)`},
		{name: "pools unreadable", filter: Filter{Pool: "nosuchpool"}, failPools: true, poolCalls: 1,
			wantErr: "list node pools: Unexpected response code: 403 (Permission denied)"},
		{name: "nodes that exist", filter: Filter{Nodes: []string{"gpu-2", "1111"}}, nodes: []string{"gpu-1", "gpu-2"}},
		{name: "a node that does not", filter: Filter{Nodes: []string{"gpu-2", "gpu-9", "9999"}},
			wantErr: `"gpu-9", "9999" match no node's name or ID prefix`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeNomad()
			f.failPools = tc.failPools
			r := startSource(t, f, nomadview.Config{})
			v, err := r.View(context.Background(), tc.filter)
			if n := f.count("/v1/node/pools"); n != tc.poolCalls {
				t.Errorf("%d node pool lists, want %d", n, tc.poolCalls)
			}
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := nodeNames(v); !slices.Equal(got, tc.nodes) {
				t.Errorf("nodes %v, want %v", got, tc.nodes)
			}
		})
	}
}

func TestSourceErrors(t *testing.T) {
	t.Run("a list failing fails the frame", func(t *testing.T) {
		f := newFakeNomad()
		f.failAllocs = true
		r := startSource(t, f, nomadview.Config{})
		if _, err := r.View(context.Background(), Filter{}); err == nil || !strings.HasPrefix(err.Error(), "list allocations: ") {
			t.Errorf("err %v", err)
		}
	})
	t.Run("a job gone since its evaluation is left out", func(t *testing.T) {
		f := newFakeNomad()
		f.specs, f.jobs = map[string]*api.Job{}, nil
		r := startSource(t, f, nomadview.Config{})
		v, err := r.View(context.Background(), Filter{})
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range v.Queue {
			if q.Job == "big" {
				t.Errorf("gone job queued: %+v", q)
			}
		}
	})
	t.Run("nomad unreachable", func(t *testing.T) {
		cl, err := api.NewClient(&api.Config{Address: "http://127.0.0.1:1"})
		if err != nil {
			t.Fatal(err)
		}
		w := nomadview.NewWatcher(cl, nomadview.Config{})
		defer w.Close()
		r := &Source{Client: cl, Watcher: w}
		if _, err := r.View(context.Background(), Filter{}); err == nil || !strings.HasPrefix(err.Error(), "list nodes: ") {
			t.Errorf("err %v", err)
		}
	})
}

func TestSourceHistory(t *testing.T) {
	now := time.Now().UTC().Truncate(time.Second)
	recent := finishedRun("f1", "train", now.Add(-time.Hour), 10*time.Minute)
	old := finishedRun("f2", "train", now.Add(-48*time.Hour), 10*time.Minute)
	byModify := finishedRun("f3", "train", now, time.Minute)
	byModify.TaskStates, byModify.ModifyTime = nil, now.Add(-2*time.Hour).UnixNano()
	tests := []struct {
		name        string
		window      time.Duration
		failHistory bool
		calls       int
		finished    []string
		histErr     string
	}{
		{"off", 0, false, 0, nil, ""},
		{"within the window, by finish or modify time", 24 * time.Hour, false, 1, []string{"f1", "f3"}, ""},
		{"a short window", 90 * time.Minute, false, 1, []string{"f1"}, ""},
		{"a failed list does not fail the frame", 24 * time.Hour, true, 1, nil, "HTTP 500: boom"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeNomad()
			// A running allocation the server answers is not history.
			f.finished = []*api.AllocationListStub{recent, old, byModify, fixtureAllocs()[0]}
			f.failHistory = tc.failHistory
			r := startSource(t, f, nomadview.Config{FinishedWindow: tc.window})
			r.History, r.Now = tc.window > 0, func() time.Time { return now }
			in, err := r.Read(context.Background(), Filter{})
			if err != nil {
				t.Fatalf("frame failed: %v", err)
			}
			var ids []string
			for _, a := range in.Finished {
				ids = append(ids, a.ID)
			}
			if !slices.Equal(ids, tc.finished) || in.HistoryError != tc.histErr {
				t.Errorf("finished %v, error %q; want %v, %q", ids, in.HistoryError, tc.finished, tc.histErr)
			}
			if n := f.count("history"); n != tc.calls {
				t.Fatalf("%d history lists, want %d", n, tc.calls)
			}
			if tc.calls > 0 {
				q := func() string { f.mu.Lock(); defer f.mu.Unlock(); return f.params["history"] }()
				for _, w := range []string{"resources=true", "reverse=true", "per_page=2000", "namespace=%2A"} {
					if !strings.Contains(q, w) {
						t.Errorf("history list ?%s lacks %s", q, w)
					}
				}
			}
			if v := Build(in); v.HistoryError != tc.histErr {
				t.Errorf("view history_error %q", v.HistoryError)
			}
		})
	}
}
