package controller

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/contract"
)

// refused is a failed allocation whose task events say msg.
func refused(id, job, msg string) *api.AllocationListStub {
	a := alloc(id, job, 1, api.AllocClientStatusFailed)
	a.TaskStates = map[string]*api.TaskState{"t": {State: "dead", Failed: true, Events: []*api.TaskEvent{
		{Type: "Received"}, {Type: "Setup Failure", DisplayMessage: msg}}}}
	return a
}

const (
	drainingMsg = "failed to reserve device GPU-0-mps-0: device GPU-0-mps-0: GPU GPU-0 " + contract.ReserveRefusedRelayout + " whole → mps:4; Nomad will place the allocation again"
	goneMsg     = "failed to reserve device GPU-0: device GPU-0 " + contract.ReserveRefusedGone + ": no GPU, MIG instance or MPS share has this ID now"
	nomadMsg    = `failed to setup alloc: operation on unknown device(s) "nvidia/gpu/H200" ([GPU-0]): failed to reserve devices`
)

func TestRefusedToReplace(t *testing.T) {
	replaced := func(a *api.AllocationListStub) *api.AllocationListStub { a.NextAllocation = "next"; return a }
	stopping := func(a *api.AllocationListStub) *api.AllocationListStub {
		a.DesiredStatus = api.AllocDesiredStatusStop
		return a
	}
	cases := []struct {
		name   string
		c      cluster
		asked  map[string]bool
		wantID []string
	}{
		{"the plugin's refusal while draining", cluster{jobs: map[string]int{"a": 50}, allocs: []*api.AllocationListStub{refused("x", "a", drainingMsg)}}, nil, []string{"x"}},
		{"an instance gone", cluster{jobs: map[string]int{"a": 50}, allocs: []*api.AllocationListStub{refused("x", "a", goneMsg)}}, nil, []string{"x"}},
		{"Nomad's unknown device", cluster{jobs: map[string]int{"a": 50}, allocs: []*api.AllocationListStub{refused("x", "a", nomadMsg)}}, nil, []string{"x"}},
		{"a failure of the job's own", cluster{jobs: map[string]int{"a": 50}, allocs: []*api.AllocationListStub{refused("x", "a", "exit code 1")}}, nil, nil},
		{"placed again by Nomad", cluster{jobs: map[string]int{"a": 50}, allocs: []*api.AllocationListStub{replaced(refused("x", "a", drainingMsg))}}, nil, nil},
		{"asked already", cluster{jobs: map[string]int{"a": 50}, allocs: []*api.AllocationListStub{refused("x", "a", drainingMsg)}}, map[string]bool{"x": true}, nil},
		{"the job stopped", cluster{jobs: map[string]int{"a": 50}, stop: map[string]bool{"a": true}, allocs: []*api.AllocationListStub{refused("x", "a", drainingMsg)}}, nil, nil},
		{"the job gone", cluster{allocs: []*api.AllocationListStub{refused("x", "a", drainingMsg)}}, nil, nil},
		{"meant to stop", cluster{jobs: map[string]int{"a": 50}, allocs: []*api.AllocationListStub{stopping(refused("x", "a", drainingMsg))}}, nil, nil},
		{"its name runs again", cluster{jobs: map[string]int{"a": 50}, allocs: []*api.AllocationListStub{refused("x", "a", drainingMsg), alloc("y", "a", 2, api.AllocClientStatusPending)}}, nil, nil},
		{"two jobs", cluster{jobs: map[string]int{"a": 50, "b": 50}, allocs: []*api.AllocationListStub{
			refused("x1", "a", drainingMsg), refused("x2", "a", goneMsg), refused("z", "b", drainingMsg)}}, nil, []string{"x1", "x2", "z"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for k, allocs := range refusedToReplace(time.Now(), tc.c.view().Snap, tc.asked) {
				for _, a := range allocs {
					if a.JobID != k.ID || a.Namespace != k.Namespace {
						t.Errorf("alloc %s of job %s/%s listed under %v", a.ID, a.Namespace, a.JobID, k)
					}
					got = append(got, a.ID)
				}
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.wantID) {
				t.Errorf("placed again %v, want %v", got, tc.wantID)
			}
		})
	}
}

// A refused allocation waits while the servers still offer its devices
// (they have not yet seen the drain), for refusedWait at most.
func TestRefusedWaitsForTheServers(t *testing.T) {
	failedAt := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	node := func(healthy bool) *api.NodeListStub {
		return &api.NodeListStub{ID: "n1", NodeResources: &api.NodeResources{Devices: []*api.NodeDeviceResource{{
			Vendor: "nvidia", Type: "gpu", Name: "H100",
			Instances: []*api.NodeDevice{{ID: "GPU-0", Healthy: healthy}, {ID: "GPU-1", Healthy: true}}}}}}
	}
	cases := []struct {
		name    string
		healthy bool
		devices []string
		after   time.Duration
		want    bool
	}{
		{"still offered", true, []string{"GPU-0"}, 5 * time.Second, false},
		{"drained", false, []string{"GPU-0"}, 5 * time.Second, true},
		{"still offered after the wait", true, []string{"GPU-0"}, refusedWait, true},
		// A 2-GPU allocation refused for GPU-0: GPU-1 stays offered, yet
		// the servers have seen the drain.
		{"two GPUs, one drained", false, []string{"GPU-0", "GPU-1"}, 5 * time.Second, true},
		{"two GPUs, both still offered", true, []string{"GPU-0", "GPU-1"}, 5 * time.Second, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := refused("x", "a", drainingMsg)
			a.NodeID = "n1"
			a.TaskStates["t"].FinishedAt = failedAt
			a.AllocatedResources = &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{"t": {
				Devices: []*api.AllocatedDeviceResource{{Vendor: "nvidia", Type: "gpu", Name: "H100", DeviceIDs: tc.devices}}}}}
			snap := cluster{jobs: map[string]int{"a": 50}, allocs: []*api.AllocationListStub{a}}.view().Snap
			snap.Nodes = []*api.NodeListStub{node(tc.healthy)}
			got := len(refusedToReplace(failedAt.Add(tc.after), snap, nil)) == 1
			if got != tc.want {
				t.Errorf("asked %v, want %v", got, tc.want)
			}
		})
	}
}

// replaceRefused forces one reschedule per job with refused allocations,
// in the job's namespace, and asks again after a failed call, not after a
// refusal for good; an allocation out of the read model's window is
// forgotten.
func TestReplaceRefusedAsksOnce(t *testing.T) {
	var mu sync.Mutex
	var evals []string
	fail := true
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if (r.Method != http.MethodPut && r.Method != http.MethodPost) || !strings.HasSuffix(r.URL.Path, "/evaluate") {
			http.Error(w, "unexpected "+r.Method+" "+r.URL.Path, http.StatusNotFound)
			return
		}
		if fail {
			fail = false
			http.Error(w, "rpc error: no leader", http.StatusInternalServerError)
			return
		}
		if strings.Contains(r.URL.Path, "/job/secret/") {
			evals = append(evals, "denied")
			http.Error(w, "Permission denied", http.StatusForbidden)
			return
		}
		var req api.JobEvaluateRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || !req.EvalOptions.ForceReschedule {
			http.Error(w, "not a forced reschedule", http.StatusBadRequest)
			return
		}
		evals = append(evals, r.URL.Query().Get("namespace")+"/"+req.JobID)
		_, _ = w.Write([]byte(`{"EvalID":"e1"}`))
	}))
	defer srv.Close()
	cl, err := api.NewClient(&api.Config{Address: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	c := newController(cl, Config{}, hclog.NewNullLogger(), NewMetrics(), true)
	view := cluster{jobs: map[string]int{"a": 50}, allocs: []*api.AllocationListStub{refused("x", "a", drainingMsg), refused("x2", "a", goneMsg)}}.view()

	for range 3 {
		c.replaceRefused(context.Background(), time.Now(), view.Snap)
	}
	if want := []string{"default/a"}; !slices.Equal(evals, want) {
		t.Fatalf("evaluations %v, want %v (one failed call, then one for both allocations)", evals, want)
	}
	// A refusal for good (403) is asked once, not every tick.
	denied := cluster{jobs: map[string]int{"a": 50, "secret": 50}, allocs: []*api.AllocationListStub{refused("x", "a", drainingMsg), refused("s", "secret", drainingMsg)}}.view()
	for range 3 {
		c.replaceRefused(context.Background(), time.Now(), denied.Snap)
	}
	if want := []string{"default/a", "denied"}; !slices.Equal(evals, want) {
		t.Fatalf("evaluations %v, want %v (a forbidden one asked once)", evals, want)
	}
	c.replaceRefused(context.Background(), time.Now(), cluster{jobs: map[string]int{"a": 50}}.view().Snap)
	if len(c.replaced) != 0 {
		t.Errorf("an allocation no longer listed is still remembered: %v", c.replaced)
	}
}

// A forced reschedule that never reached Nomad (the connection closed
// under it, the server unreachable) is no answer from Nomad: it is asked
// again on the next tick, not given up like a refusal for good.
func TestReplaceRefusedAsksAgainAfterANetworkFailure(t *testing.T) {
	cases := []struct {
		name string
		// client is a client of srv whose first evaluate call fails on
		// the network.
		client func(t *testing.T, srv *httptest.Server, first *atomic.Bool) *api.Client
		// drop: the server drops the connection of its first request.
		drop bool
	}{
		{name: "the connection closed without an answer", drop: true,
			client: func(t *testing.T, srv *httptest.Server, _ *atomic.Bool) *api.Client {
				cl, err := api.NewClient(&api.Config{Address: srv.URL, HttpClient: srv.Client()})
				if err != nil {
					t.Fatal(err)
				}
				return cl
			}},
		{name: "the server unreachable",
			client: func(t *testing.T, srv *httptest.Server, first *atomic.Bool) *api.Client {
				// A socket nobody listens on: the dial fails for real,
				// on no port another process could hold.
				nowhere := filepath.Join(t.TempDir(), "nowhere.sock")
				tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
					var d net.Dialer
					if first.Swap(false) {
						return d.DialContext(ctx, "unix", nowhere)
					}
					return d.DialContext(ctx, network, srv.Listener.Addr().String())
				}}
				t.Cleanup(tr.CloseIdleConnections)
				cl, err := api.NewClient(&api.Config{Address: srv.URL, HttpClient: &http.Client{Transport: tr}})
				if err != nil {
					t.Fatal(err)
				}
				return cl
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var evals []string
			var first atomic.Bool
			first.Store(true)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				defer mu.Unlock()
				if tc.drop && first.Swap(false) {
					conn, _, err := http.NewResponseController(w).Hijack()
					if err != nil {
						t.Error(err)
						return
					}
					_ = conn.Close()
					return
				}
				var req api.JobEvaluateRequest
				if err := json.NewDecoder(r.Body).Decode(&req); err != nil || !req.EvalOptions.ForceReschedule {
					http.Error(w, "not a forced reschedule", http.StatusBadRequest)
					return
				}
				evals = append(evals, r.URL.Query().Get("namespace")+"/"+req.JobID)
				_, _ = w.Write([]byte(`{"EvalID":"e1"}`))
			}))
			defer srv.Close()
			c := newController(tc.client(t, srv, &first), Config{}, hclog.NewNullLogger(), NewMetrics(), true)
			view := cluster{jobs: map[string]int{"a": 50}, allocs: []*api.AllocationListStub{refused("x", "a", drainingMsg)}}.view()

			c.replaceRefused(context.Background(), time.Now(), view.Snap)
			mu.Lock()
			failed := !first.Load() && len(evals) == 0
			mu.Unlock()
			if !failed {
				t.Fatalf("the first call did not fail on the network (evaluations %v)", evals)
			}
			if c.replaced["x"] {
				t.Fatal("an allocation whose forced reschedule never reached Nomad is marked asked")
			}
			for range 2 {
				c.replaceRefused(context.Background(), time.Now(), view.Snap)
			}
			mu.Lock()
			defer mu.Unlock()
			if want := []string{"default/a"}; !slices.Equal(evals, want) {
				t.Errorf("evaluations %v, want %v (asked again on the next tick, then once only)", evals, want)
			}
		})
	}
}
