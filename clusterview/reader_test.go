package clusterview

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
)

// fakeNomad serves the endpoints Reader reads from fixtures.
type fakeNomad struct {
	mu         sync.Mutex
	nodes      []*api.NodeListStub
	allocs     []*api.AllocationListStub
	evals      []*api.Evaluation
	jobs       map[string]*api.Job
	summaries  map[string]*api.JobSummary
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
	f := &fakeNomad{
		nodes:     append([]*api.NodeListStub{gpuNode()}, otherNodes()...),
		allocs:    fixtureAllocs(),
		evals:     []*api.Evaluation{blockedEval("e1", "big", t0.Add(-95*time.Second), missingDevices())},
		jobs:      map[string]*api.Job{"big": fixtureInput().Jobs[JobKey{"default", "big"}]},
		summaries: map[string]*api.JobSummary{"big": fixtureInput().Summaries[JobKey{"default", "big"}]},
		stats: map[string]func(context.Context) (*api.HostStats, int){
			node1ID: func(context.Context) (*api.HostStats, int) { return fixtureStats(), 200 },
			node2ID: func(context.Context) (*api.HostStats, int) { return nil, 500 },
		},
		pools: []string{"all", "default", "gpu", "batch", "empty"},
		calls: map[string]int{}, params: map[string]string{},
	}
	return f
}

func (f *fakeNomad) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.calls[r.URL.Path]++
	f.params[r.URL.Path] = r.URL.RawQuery
	history := r.URL.Path == "/v1/allocations" && strings.Contains(r.URL.Query().Get("filter"), "complete")
	if history {
		f.calls["history"]++
		f.params["history"] = r.URL.RawQuery
	}
	f.mu.Unlock()
	reply := func(v any) {
		w.Header().Set("X-Nomad-Index", "1")
		_ = json.NewEncoder(w).Encode(v)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	switch p := r.URL.Path; {
	case p == "/v1/nodes":
		reply(f.nodes)
	case p == "/v1/allocations" && history:
		if f.failHistory {
			http.Error(w, "boom", 500)
			return
		}
		reply(f.finished)
	case p == "/v1/allocations":
		if f.failAllocs {
			http.Error(w, "boom", 500)
			return
		}
		reply(f.allocs)
	case p == "/v1/evaluations":
		reply(f.evals)
	case p == "/v1/node/pools":
		if f.failPools {
			http.Error(w, "Permission denied", http.StatusForbidden)
			return
		}
		var pools []*api.NodePool
		for _, name := range f.pools {
			pools = append(pools, &api.NodePool{Name: name})
		}
		reply(pools)
	case strings.HasPrefix(p, "/v1/job/") && strings.HasSuffix(p, "/summary"):
		s := f.summaries[strings.TrimSuffix(strings.TrimPrefix(p, "/v1/job/"), "/summary")]
		if s == nil {
			http.NotFound(w, r)
			return
		}
		reply(s)
	case strings.HasPrefix(p, "/v1/job/"):
		j := f.jobs[strings.TrimPrefix(p, "/v1/job/")]
		if j == nil {
			http.Error(w, "job not found", 404)
			return
		}
		reply(j)
	case p == "/v1/client/stats":
		fn := f.stats[r.URL.Query().Get("node_id")]
		if fn == nil {
			http.Error(w, "Unknown node", 404)
			return
		}
		n := f.inFlight.Add(1)
		for {
			m := f.maxInFlight.Load()
			if n <= m || f.maxInFlight.CompareAndSwap(m, n) {
				break
			}
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
	default:
		http.NotFound(w, r)
	}
}

func (f *fakeNomad) count(path string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[path]
}

func startFake(t *testing.T, f *fakeNomad) *api.Client {
	t.Helper()
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	cl, err := api.NewClient(&api.Config{Address: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

func TestReaderStatsFailuresNeverAbort(t *testing.T) {
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
	r := &Reader{Client: startFake(t, f), StatsTimeout: 200 * time.Millisecond, Now: func() time.Time { return t0 }}
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
	if len(v.Nodes) != len(want) {
		t.Fatalf("nodes %v", nodeNames(v))
	}
	for _, n := range v.Nodes {
		if got := n.StatsError; got != want[n.Name] {
			t.Errorf("%s: stats_error %q, want %q", n.Name, got, want[n.Name])
		}
	}
	if f.count("/v1/client/stats") != 3 {
		t.Errorf("%d stats calls, want 3 (not the down node, not the node without GPUs)", f.count("/v1/client/stats"))
	}
	if u := v.Nodes[0].GPUs[0].UtilizationPct; u == nil || *u != 40 {
		t.Errorf("gpu-1 stats not read: %+v", v.Nodes[0].GPUs[0])
	}
	if len(v.Queue) != 2 || v.Queue[0].Job != "big" || v.Queue[0].Count != 2 || v.Queue[0].WaitingSeconds != 95 {
		t.Errorf("queue %+v", v.Queue)
	}
}

func TestReaderBoundsStatsWorkers(t *testing.T) {
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
	r := &Reader{Client: startFake(t, f), Workers: 3}
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

func TestReaderFiltersStatsCalls(t *testing.T) {
	f := newFakeNomad()
	r := &Reader{Client: startFake(t, f)}
	v, err := r.View(context.Background(), Filter{Pool: "batch"})
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Nodes) != 1 || v.Nodes[0].Name != "gpu-2" {
		t.Errorf("nodes %v", nodeNames(v))
	}
	if n := f.count("/v1/client/stats"); n != 1 {
		t.Errorf("%d stats calls, want 1 (only the shown node)", n)
	}
}

// A filter naming a pool or node that does not exist is an error, not an
// empty view; a pool that exists without nodes is an empty view.
func TestReaderChecksFilter(t *testing.T) {
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
			r := &Reader{Client: startFake(t, f)}
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

func TestReaderQueries(t *testing.T) {
	tests := []struct {
		name, ns, wantNS string
	}{
		{"all namespaces by default", "", "namespace=%2A"},
		{"one namespace", "ml", "namespace=ml"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeNomad()
			r := &Reader{Client: startFake(t, f), Namespace: tc.ns}
			if _, err := r.Read(context.Background(), Filter{}); err != nil {
				t.Fatal(err)
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			for path, want := range map[string][]string{
				"/v1/nodes":       {"resources=true"},
				"/v1/allocations": {tc.wantNS, "resources=true", "filter=ClientStatus"},
				"/v1/evaluations": {tc.wantNS, "status=blocked"},
			} {
				for _, w := range want {
					if !strings.Contains(f.params[path], w) {
						t.Errorf("%s?%s lacks %s", path, f.params[path], w)
					}
				}
			}
		})
	}
}

func TestReaderCachesJobSpecs(t *testing.T) {
	f := newFakeNomad()
	r := &Reader{Client: startFake(t, f)}
	ctx := context.Background()
	for range 3 {
		if _, err := r.View(ctx, Filter{}); err != nil {
			t.Fatal(err)
		}
	}
	if j, s := f.count("/v1/job/big"), f.count("/v1/job/big/summary"); j != 1 || s != 3 {
		t.Errorf("job read %d times (want 1), summary %d (want 3)", j, s)
	}
	// A new job version is read again.
	f.mu.Lock()
	f.evals[0].JobModifyIndex = 11
	f.jobs["big"].JobModifyIndex = ptr(uint64(11))
	f.mu.Unlock()
	if _, err := r.View(ctx, Filter{}); err != nil {
		t.Fatal(err)
	}
	if j := f.count("/v1/job/big"); j != 2 {
		t.Errorf("job read %d times after a new version, want 2", j)
	}
}

func TestReaderErrors(t *testing.T) {
	t.Run("a list failing fails the view", func(t *testing.T) {
		f := newFakeNomad()
		f.failAllocs = true
		r := &Reader{Client: startFake(t, f)}
		if _, err := r.View(context.Background(), Filter{}); err == nil || !strings.Contains(err.Error(), "list allocations") {
			t.Errorf("err %v", err)
		}
	})
	t.Run("a job gone since its evaluation is left out", func(t *testing.T) {
		f := newFakeNomad()
		delete(f.jobs, "big")
		delete(f.summaries, "big")
		r := &Reader{Client: startFake(t, f)}
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
		cl, _ := api.NewClient(&api.Config{Address: "http://127.0.0.1:1"})
		r := &Reader{Client: cl}
		if _, err := r.View(context.Background(), Filter{}); err == nil || !strings.Contains(err.Error(), "list nodes") {
			t.Errorf("err %v", err)
		}
	})
}

func TestReaderHistory(t *testing.T) {
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
		{"a failed list does not fail the frame", 24 * time.Hour, true, 1, nil, "list finished allocations: HTTP 500: boom"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeNomad()
			// A running allocation the server answers is not history.
			f.finished = []*api.AllocationListStub{recent, old, byModify, fixtureAllocs()[0]}
			f.failHistory = tc.failHistory
			r := &Reader{Client: startFake(t, f), HistoryWindow: tc.window, Now: func() time.Time { return now }}
			in, err := r.Read(context.Background(), Filter{})
			if err != nil {
				t.Fatalf("frame failed: %v", err)
			}
			var ids []string
			for _, a := range in.Finished {
				ids = append(ids, a.ID)
			}
			if strings.Join(ids, ",") != strings.Join(tc.finished, ",") || in.HistoryError != tc.histErr {
				t.Errorf("finished %v, error %q; want %v, %q", ids, in.HistoryError, tc.finished, tc.histErr)
			}
			if n := f.count("history"); n != tc.calls {
				t.Fatalf("%d history lists, want %d", n, tc.calls)
			}
			if tc.calls > 0 {
				f.mu.Lock()
				q := f.params["history"]
				f.mu.Unlock()
				for _, w := range []string{"resources=true", "reverse=true", "per_page=2000", "namespace=%2A"} {
					if !strings.Contains(q, w) {
						t.Errorf("history list ?%s lacks %s", q, w)
					}
				}
			}
			v := Build(in)
			if v.HistoryError != tc.histErr {
				t.Errorf("view history_error %q", v.HistoryError)
			}
			if tc.failHistory {
				for _, q := range v.Queue {
					if q.State == StateBlocked && (q.PredictionBasis != "none" || q.PredictedWaitSeconds != nil) {
						t.Errorf("forecast despite the failed history: %+v", q)
					}
				}
			}
		})
	}
}
