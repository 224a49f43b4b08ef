package nomadview

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// fakeNomad answers the lists a Watcher reads, without blocking; index
// moves on every change.
type fakeNomad struct {
	mu    sync.Mutex
	index int
	nodes []*api.NodeListStub
	evals []*api.Evaluation
	jobs  map[string]*api.Job
	stubs []*api.JobListStub // listed besides job j
	fail  bool
	calls map[string]int
}

func (f *fakeNomad) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls[r.URL.Path]++
	if f.fail {
		http.Error(w, "boom", http.StatusInternalServerError)
		return
	}
	var v any
	switch p := r.URL.Path; p {
	case "/v1/nodes":
		v = f.nodes
	case "/v1/allocations":
		v = []*api.AllocationListStub{}
	case "/v1/evaluations":
		v = f.evals
	case "/v1/jobs":
		v = append([]*api.JobListStub{listed("j", 20, map[string]int{"g": 2})}, f.stubs...)
	case "/v1/node/pools":
		v = []*api.NodePool{{Name: "gpu"}}
	default:
		j := f.jobs[p[len("/v1/job/"):]]
		if j == nil {
			http.Error(w, "job not found", http.StatusNotFound)
			return
		}
		v = j
	}
	w.Header().Set("X-Nomad-Index", strconv.Itoa(f.index))
	_ = json.NewEncoder(w).Encode(v)
}

func (f *fakeNomad) set(fn func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn()
	f.index++
}

func startWatcher(t *testing.T, f *fakeNomad) *Watcher {
	t.Helper()
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	cl, err := api.NewClient(&api.Config{Address: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	w := NewWatcher(cl, Config{MinRefresh: 5 * time.Millisecond})
	t.Cleanup(w.Close)
	return w
}

// TestSnapshotsNeverChange: a snapshot taken stays as it was while the
// cluster changes, and a subscriber gets the new one.
func TestSnapshotsNeverChange(t *testing.T) {
	f := &fakeNomad{index: 1, calls: map[string]int{}, nodes: []*api.NodeListStub{{ID: "n1"}},
		evals: []*api.Evaluation{blocked("e", "j", 10, 0), blocked("e2", "gone", 10, 0)},
		jobs:  map[string]*api.Job{"j": gpuJob("j", "gpu", "nvidia/gpu"), "train": waitingGang("train", 2)},
		stubs: []*api.JobListStub{gangStub("train", 1)}}
	w := startWatcher(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := w.Sync(ctx, AllLists...); err != nil {
		t.Fatal(err)
	}
	first := w.Latest()
	if len(first.Nodes) != 1 || len(first.Pools) != 1 || len(first.Specs) != 1 || first.Jobs[JobKey{Namespace: "default", ID: "j"}] == nil {
		t.Fatalf("first snapshot %+v", first)
	}
	if q := first.QueuedGroups(); len(q) != 2 || q[0].Count != 2 || q[1].JobID != "train" || q[1].Count != 2 {
		t.Fatalf("queue %+v, want job j's 2 from its summary and the waiting gang's 2 members", q)
	}
	updates := w.Watch(ctx)
	f.set(func() { f.nodes = append(f.nodes, &api.NodeListStub{ID: "n2"}) })
	for s := range updates {
		if len(s.Nodes) == 2 {
			break
		}
	}
	if ctx.Err() != nil {
		t.Fatal("no snapshot with the new node")
	}
	if len(first.Nodes) != 1 {
		t.Errorf("the first snapshot changed: %d nodes", len(first.Nodes))
	}
	f.mu.Lock()
	jobReads, gangReads := f.calls["/v1/job/j"], f.calls["/v1/job/train"]
	f.mu.Unlock()
	if jobReads != 1 || gangReads != 1 {
		t.Errorf("job j read %d times, the gang %d; want once per job modify index", jobReads, gangReads)
	}
}

// TestFailingListKeepsTheLastGoodOne: a list that fails keeps its data and
// says since when it fails.
func TestFailingListKeepsTheLastGoodOne(t *testing.T) {
	f := &fakeNomad{index: 1, calls: map[string]int{}, nodes: []*api.NodeListStub{{ID: "n1"}}}
	w := startWatcher(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := w.Sync(ctx, Nodes); err != nil {
		t.Fatal(err)
	}
	f.set(func() { f.fail = true })
	for {
		if since, err := w.Health(Nodes); err != nil && !since.IsZero() {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the failure was never reported")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got := w.Latest(); len(got.Nodes) != 1 {
		t.Errorf("nodes %d, want the last good list's 1", len(got.Nodes))
	}
}

func TestSyncFailsWithTheListsError(t *testing.T) {
	f := &fakeNomad{calls: map[string]int{}, fail: true}
	w := startWatcher(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err := w.Sync(ctx, Nodes)
	if err == nil || !strings.Contains(err.Error(), "list nodes") || !strings.Contains(err.Error(), "500") {
		t.Errorf("error %v, want the nodes list's failure", err)
	}
}
