package sizing

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/sizing/history"
)

// fakeCluster is the part of Nomad's HTTP API a Sizer uses: one node with
// 8 MPS shares of one GPU, jobs each with one running allocation holding
// the shares its current version asks for, used at util %, and the job
// registrations it receives (each replaces the job's allocation).
type fakeCluster struct {
	t          *testing.T
	mu         sync.Mutex
	jobs       map[string]*api.Job
	util       map[string]float64 // job → MPS utilisation of its shares
	registered []api.JobRegisterRequest
	conflict   bool            // registrations fail as if the job changed meanwhile
	pending    map[string]bool // jobs queued, without an allocation
}

func (f *fakeCluster) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	// Each job version runs as one allocation holding the shares it asks for.
	shares := func(job string) []string {
		var ids []string
		for i := range *f.jobs[job].TaskGroups[0].Tasks[0].Resources.Devices[0].Count {
			ids = append(ids, fmt.Sprintf("%s-s%d", job, i))
		}
		return ids
	}
	switch {
	case r.URL.Path == "/v1/allocations":
		var out []*api.AllocationListStub
		for id, j := range f.jobs {
			if f.pending[id] {
				continue
			}
			out = append(out, &api.AllocationListStub{ID: fmt.Sprintf("%s-v%d", id, *j.JobModifyIndex), Namespace: "default", JobID: id, TaskGroup: "g", NodeID: "n1",
				ClientStatus: "running", CreateTime: time.Unix(1000, 0).UnixNano(),
				AllocatedResources: &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{
					"t": {Devices: []*api.AllocatedDeviceResource{{Vendor: "nvidia", Type: "mps", Name: "GPU-a", DeviceIDs: shares(id)}}}}}})
		}
		_ = json.NewEncoder(w).Encode(out)
	case r.URL.Path == "/v1/nodes":
		shares := make([]*api.NodeDevice, 8)
		for i := range shares {
			shares[i] = &api.NodeDevice{ID: "share", Healthy: true}
		}
		_ = json.NewEncoder(w).Encode([]*api.NodeListStub{{ID: "n1", NodePool: "default", NodeResources: &api.NodeResources{
			Devices: []*api.NodeDeviceResource{{Vendor: "nvidia", Type: "mps", Name: "GPU-a", Instances: shares}}}}})
	case r.URL.Path == "/v1/client/stats":
		inst := map[string]*api.DeviceStats{}
		for id, u := range f.util {
			used, limit := int64(1024), int64(10240)
			for _, s := range shares(id) {
				inst[s] = &api.DeviceStats{Stats: &api.StatObject{Attributes: map[string]*api.StatValue{
					statShareUtil: {FloatNumeratorVal: &u}, statShareUsed: {IntNumeratorVal: &used, IntDenominatorVal: &limit}}}}
			}
		}
		_ = json.NewEncoder(w).Encode(api.HostStats{DeviceStats: []*api.DeviceGroupStats{{Vendor: "nvidia", Type: "mps", Name: "GPU-a", InstanceStats: inst}}})
	case r.URL.Path == "/v1/jobs" && r.Method == http.MethodGet:
		var out []*api.JobListStub
		for id, j := range f.jobs {
			stub := &api.JobListStub{ID: id, Namespace: "default", Priority: *j.Priority, JobModifyIndex: *j.JobModifyIndex, Status: "running",
				JobSummary: &api.JobSummary{Summary: map[string]api.TaskGroupSummary{"g": {Running: 1}}}}
			if f.pending[id] {
				stub.Status, stub.JobSummary.Summary["g"] = "pending", api.TaskGroupSummary{Queued: 1}
			}
			if r.URL.Query().Get("meta") == "true" {
				stub.Meta = j.Meta
			}
			out = append(out, stub)
		}
		_ = json.NewEncoder(w).Encode(out)
	case r.URL.Path == "/v1/jobs":
		var req api.JobRegisterRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			f.t.Errorf("register body: %v", err)
		}
		cur := f.jobs[*req.Job.ID]
		if f.conflict || !req.EnforceIndex || req.JobModifyIndex != *cur.JobModifyIndex {
			http.Error(w, "Enforcing job modify index 1: job exists with conflicting job modify index: 2", http.StatusInternalServerError)
			return
		}
		f.registered = append(f.registered, req)
		next := *req.Job
		idx := *cur.JobModifyIndex + 1
		next.JobModifyIndex = &idx
		f.jobs[*req.Job.ID] = &next
		_ = json.NewEncoder(w).Encode(api.JobRegisterResponse{})
	case strings.HasPrefix(r.URL.Path, "/v1/job/"):
		j := f.jobs[strings.TrimPrefix(r.URL.Path, "/v1/job/")]
		if j == nil {
			http.NotFound(w, r)
			return
		}
		_ = json.NewEncoder(w).Encode(j)
	default:
		http.NotFound(w, r)
	}
}

func sizedJob(id, mode string, checkpoint bool) *api.Job {
	two, prio, idx := uint64(2), 50, uint64(1)
	cfg := map[string]any{"command": "train"}
	if checkpoint {
		cfg["checkpoint"] = []any{map[string]any{}}
	}
	return &api.Job{ID: &id, Name: &id, Namespace: ptr("default"), NodePool: ptr("default"), Priority: &prio, JobModifyIndex: &idx,
		Meta: map[string]string{MetaMode: mode, MetaInterval: "10m"},
		TaskGroups: []*api.TaskGroup{{Name: ptr("g"), Tasks: []*api.Task{{Name: "t", Driver: "gpu", Config: cfg,
			Resources: &api.Resources{Devices: []*api.RequestedDevice{{Name: "nvidia/mps", Count: &two}}}}}}}}
}

func TestSizerStep(t *testing.T) {
	cases := []struct {
		name     string
		job      *api.Job
		util     float64
		conflict bool
		want     []uint64 // the counts registered, in order
	}{
		// 2 → 4 once 5 minutes of samples say so, 4 → 8 not before the
		// job's 10 minute interval has passed, then 8 is the node's most.
		{"auto and starved grows, once per interval", sizedJob("starved", "auto", true), 99, false, []uint64{4, 8}},
		{"auto and idle shrinks to its floor", sizedJob("idle", "auto", true), 5, false, []uint64{1}},
		{"auto and busy keeps", sizedJob("fits", "auto", true), 70, false, nil},
		{"recommend is never touched", sizedJob("watched", "recommend", true), 99, false, nil},
		{"no checkpoint is never restarted", sizedJob("nockpt", "auto", false), 99, false, nil},
		{"a job changed meanwhile is not overwritten", sizedJob("raced", "auto", true), 99, true, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := &fakeCluster{t: t, jobs: map[string]*api.Job{*c.job.ID: c.job}, util: map[string]float64{*c.job.ID: c.util}, conflict: c.conflict}
			srv := httptest.NewServer(f)
			defer srv.Close()
			cl, err := api.NewClient(&api.Config{Address: srv.URL})
			if err != nil {
				t.Fatal(err)
			}
			st, err := history.Open(filepath.Join(t.TempDir(), "h.db"), history.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			th := DefaultThresholds
			th.MinSpan = 5 * time.Minute
			s := &Sizer{Nomad: cl, Store: st, Window: time.Hour, Thresholds: th, Logger: hclog.NewNullLogger()}
			start := time.Now()
			var resizedAt []time.Duration
			// 60 rounds 30 s apart: half an hour, three times the interval.
			for i := range 60 {
				at := time.Duration(i) * 30 * time.Second
				rep, err := s.Step(context.Background(), start.Add(at))
				if err != nil {
					t.Fatalf("round %d: %v", i, err)
				}
				if rep.Samples != 1 || rep.Runs != 1 {
					t.Fatalf("round %d: %d samples, %d runs; want 1 and 1", i, rep.Samples, rep.Runs)
				}
				for _, r := range rep.Resized {
					if !strings.Contains(r.Reason, "→") {
						t.Errorf("reason %q says no change", r.Reason)
					}
					resizedAt = append(resizedAt, at)
				}
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			var got []uint64
			for _, req := range f.registered {
				task := req.Job.TaskGroups[0].Tasks[0]
				got = append(got, *task.Resources.Devices[0].Count)
				if task.Meta[MetaLastResize] == "" {
					t.Errorf("a resized task has no %s meta: %v", MetaLastResize, task.Meta)
				}
			}
			if !slices.Equal(got, c.want) || len(resizedAt) != len(c.want) {
				t.Fatalf("registered counts %v (resized at %v), want %v", got, resizedAt, c.want)
			}
			for i := 1; i < len(resizedAt); i++ {
				if gap := resizedAt[i] - resizedAt[i-1]; gap < 10*time.Minute {
					t.Errorf("resized again %v after the last resize, within the 10m interval", gap)
				}
			}
		})
	}
}

// A queued job that would miss its deadline is raised one tier per
// RaiseEvery up to the highest tier, and given its priority back once it
// runs; one whose deadline is far is left alone.
func TestSizerDeadlines(t *testing.T) {
	start := time.Now().Truncate(time.Second)
	late, far := sizedJob("late", "off", true), sizedJob("far", "off", true)
	prio := 30
	late.Priority, far.Priority = &prio, ptr(30)
	late.Meta[MetaDeadline] = start.Add(5 * time.Minute).UTC().Format(time.RFC3339)
	far.Meta[MetaDeadline] = start.Add(3 * time.Hour).UTC().Format(time.RFC3339)
	f := &fakeCluster{t: t, jobs: map[string]*api.Job{"late": late, "far": far}, util: map[string]float64{},
		pending: map[string]bool{"late": true, "far": true}}
	srv := httptest.NewServer(f)
	defer srv.Close()
	cl, err := api.NewClient(&api.Config{Address: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	st, err := history.Open(filepath.Join(t.TempDir(), "h.db"), history.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	s := &Sizer{Nomad: cl, Store: st, Window: time.Hour, Thresholds: DefaultThresholds, Logger: hclog.NewNullLogger(),
		Deadlines: &DeadlineConfig{Tiers: []int{70, 40}, MaxPriority: 90, Lead: 10 * time.Minute, RaiseEvery: time.Minute}}
	priority := func(id string) int {
		f.mu.Lock()
		defer f.mu.Unlock()
		return *f.jobs[id].Priority
	}
	var got []int
	for i := range 8 { // 4 minutes, 30 s apart
		rep, err := s.Step(context.Background(), start.Add(time.Duration(i)*30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range rep.Deadlines {
			if c.Job != "late" || c.Restore || !strings.Contains(c.Reason, "wait unknown") {
				t.Errorf("round %d: change %+v", i, c)
			}
			got = append(got, c.To)
		}
	}
	if !slices.Equal(got, []int{40, 70}) || priority("late") != 70 || priority("far") != 30 {
		t.Fatalf("raises %v, late at %d, far at %d; want 40 then 70 a minute later, far untouched", got, priority("late"), priority("far"))
	}
	if r, ok, err := st.Raise(context.Background(), "default", "late"); !ok || err != nil || r.Original != 30 || r.Raised != 70 {
		t.Fatalf("raise record %+v %v %v", r, ok, err)
	}

	f.mu.Lock()
	f.pending["late"] = false
	f.mu.Unlock()
	rep, err := s.Step(context.Background(), start.Add(5*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Deadlines) != 1 || !rep.Deadlines[0].Restore || rep.Deadlines[0].To != 30 || priority("late") != 30 {
		t.Fatalf("after it started: %+v, priority %d; want restored to 30", rep.Deadlines, priority("late"))
	}
	if _, ok, _ := st.Raise(context.Background(), "default", "late"); ok {
		t.Fatal("the raise record outlived the restore")
	}
}
