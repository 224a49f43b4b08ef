package preemption

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// Nomad's own rule for variable paths (nomad/structs/variables.go).
var validVariablePath = regexp.MustCompile(`^[a-zA-Z0-9-_~/]{1,128}$`)

func TestVariablePath(t *testing.T) {
	long := strings.Repeat("j", 120)
	cases := []struct {
		job, want string
	}{
		{"train", VariablePrefix + "train"},
		{"train-2_a~b", VariablePrefix + "train-2_a~b"},
		{"a.b", VariablePrefix + "x612e62"},
		{"x1", VariablePrefix + "x7831"}, // never taken for an encoded ID
		{"../etc", VariablePrefix + "x2e2e2f657463"},
		{"a/b", VariablePrefix + "x612f62"},
	}
	for _, c := range cases {
		if got := VariablePath(c.job); got != c.want {
			t.Errorf("VariablePath(%q) = %q, want %q", c.job, got, c.want)
		}
	}
	seen := map[string]string{}
	for _, job := range []string{"train", "a.b", "x612e62", "x1", "x7831", "../etc", "a/b", long, long + "k", "é"} {
		p := VariablePath(job)
		if other, dup := seen[p]; dup {
			t.Errorf("jobs %q and %q share %s", job, other, p)
		}
		seen[p] = job
		if len(p) <= 128 && !validVariablePath.MatchString(p) {
			t.Errorf("VariablePath(%q) = %q is no valid variable path", job, p)
		}
	}
}

func TestCooldownItemsRoundTrip(t *testing.T) {
	cd := Cooldown{Namespace: "ml", JobID: "a.b", Original: 30, Raised: 80, Until: time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC), PreemptedBy: "1234"}
	got, err := parseCooldown(&api.Variable{Namespace: "ml", Path: VariablePath(cd.JobID), Items: cd.items()})
	if err != nil || got != cd {
		t.Fatalf("round trip: %+v, %v; want %+v", got, err, cd)
	}
	bad := []struct {
		name string
		edit func(api.VariableItems) string
		want string
	}{
		{"priority", func(i api.VariableItems) string { i["original_priority"] = "high"; return VariablePath("a.b") }, "original_priority"},
		{"until", func(i api.VariableItems) string { i["until"] = "soon"; return VariablePath("a.b") }, "until"},
		{"elsewhere", func(i api.VariableItems) string { return VariablePath("other") }, "does not belong"},
	}
	for _, b := range bad {
		items := cd.items()
		path := b.edit(items)
		if _, err := parseCooldown(&api.Variable{Path: path, Items: items}); err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%s: err %v, want one naming %q", b.name, err, b.want)
		}
	}
}

func TestStopReason(t *testing.T) {
	cases := []struct {
		name  string
		alloc api.Allocation
		want  string
	}{
		{"preempted", api.Allocation{PreemptedByAllocation: "9f8e7d6c-1111", DesiredStatus: "evict"}, "preempted by alloc 9f8e7d6c"},
		{"drain", api.Allocation{DesiredStatus: "stop", DesiredTransition: api.DesiredTransition{Migrate: ptr(true)}}, "node drain"},
		{"job stop", api.Allocation{DesiredStatus: "stop", DesiredDescription: "alloc not needed due to job update"}, "stop: alloc not needed due to job update"},
		{"restart", api.Allocation{DesiredStatus: "run"}, "stop"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/v1/allocation/a1" || r.URL.Query().Get("namespace") != "ml" || r.Header.Get("X-Nomad-Token") != "secret" {
					http.Error(w, "unexpected "+r.URL.String(), http.StatusBadRequest)
					return
				}
				json.NewEncoder(w).Encode(c.alloc)
			}))
			defer srv.Close()
			cl, err := New(srv.URL, "secret")
			if err != nil {
				t.Fatal(err)
			}
			r, err := cl.StopReason(context.Background(), "ml", "a1")
			if err != nil || r.Trigger != c.want {
				t.Fatalf("trigger %q, %v; want %q", r.Trigger, err, c.want)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func TestProbe(t *testing.T) {
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()
	cases := []struct {
		name    string
		handler http.HandlerFunc
		want    string // "" for no error
	}{
		{"token accepted", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(`{"AccessorID":"a"}`)) }, ""},
		{"ACLs off", func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "ACL support disabled", http.StatusBadRequest)
		}, ""},
		{"token refused", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "Permission denied", http.StatusForbidden) }, "the agent refuses the token"},
		{"agent down", nil, "cannot be reached"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			addr := gone.URL
			if c.handler != nil {
				srv := httptest.NewServer(c.handler)
				defer srv.Close()
				addr = srv.URL
			}
			cl, err := New(addr, "secret")
			if err != nil {
				t.Fatal(err)
			}
			err = cl.Probe(context.Background())
			if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
				t.Fatalf("Probe: %v, want %q", err, c.want)
			}
		})
	}
}

func TestRestoreJob(t *testing.T) {
	cd := Cooldown{Namespace: "ml", JobID: "train", Original: 30, Raised: 80}
	cases := []struct {
		name       string
		job        api.Job
		want       string
		registered bool
	}{
		{"running", api.Job{Priority: ptr(80), Status: ptr("running")}, "priority 30 restored (raised to 80)", true},
		{"finished", api.Job{Priority: ptr(80), Status: ptr("dead")}, "left at priority 80: the job has finished", false},
		{"stopped", api.Job{Priority: ptr(80), Status: ptr("dead"), Stop: ptr(true)}, "the job is stopped", false},
		{"changed", api.Job{Priority: ptr(60), Status: ptr("running")}, "left at priority 60: changed since", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			registered := false
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				switch {
				case r.Method == http.MethodGet && r.URL.Path == "/v1/job/train":
					job := c.job
					job.ID, job.Namespace, job.JobModifyIndex = ptr("train"), ptr("ml"), ptr(uint64(7))
					json.NewEncoder(w).Encode(job)
				case r.Method == http.MethodPut && r.URL.Path == "/v1/jobs":
					registered = true
					w.Write([]byte(`{"EvalID":"e"}`))
				default:
					http.Error(w, "unexpected "+r.Method+" "+r.URL.String(), http.StatusBadRequest)
				}
			}))
			defer srv.Close()
			cl, err := New(srv.URL, "")
			if err != nil {
				t.Fatal(err)
			}
			note, err := cl.restoreJob(context.Background(), cd)
			if err != nil || !strings.HasPrefix(note, c.want) || registered != c.registered {
				t.Fatalf("restoreJob: %q, %v, registered %v; want %q, registered %v", note, err, registered, c.want, c.registered)
			}
		})
	}
}

// fakeCooldownAPI is the Nomad API as Restore uses it, holding one
// cooldown (in namespace ml) and its job, which runs at priority.
type fakeCooldownAPI struct {
	cd       Cooldown
	priority int

	mu         sync.Mutex
	jobRead    bool
	registered []int // priorities the job was registered with
	deleted    bool  // the cooldown's variable
}

func (f *fakeCooldownAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	path := VariablePath(f.cd.JobID)
	q := r.URL.Query()
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/v1/vars" && q.Get("prefix") == VariablePrefix && q.Get("namespace") == api.AllNamespacesNamespace:
		var list []api.VariableMetadata
		if !f.deleted {
			list = append(list, api.VariableMetadata{Namespace: "ml", Path: path, ModifyIndex: 5})
		}
		json.NewEncoder(w).Encode(list)
	case r.Method == http.MethodGet && r.URL.Path == "/v1/var/"+path && q.Get("namespace") == "ml" && !f.deleted:
		json.NewEncoder(w).Encode(api.Variable{Namespace: "ml", Path: path, Items: f.cd.items(), ModifyIndex: 5})
	case r.Method == http.MethodGet && r.URL.Path == "/v1/job/"+f.cd.JobID && q.Get("namespace") == "ml":
		f.jobRead = true
		json.NewEncoder(w).Encode(api.Job{ID: ptr(f.cd.JobID), Namespace: ptr("ml"), Priority: ptr(f.priority),
			Status: ptr("running"), JobModifyIndex: ptr(uint64(7))})
	case r.Method == http.MethodPut && r.URL.Path == "/v1/jobs":
		var req api.JobRegisterRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Job == nil || req.Job.Priority == nil ||
			!req.EnforceIndex || req.JobModifyIndex != 7 {
			http.Error(w, fmt.Sprintf("bad register %+v: %v", req, err), http.StatusBadRequest)
			return
		}
		f.registered = append(f.registered, *req.Job.Priority)
		f.priority = *req.Job.Priority
		w.Write([]byte(`{"EvalID":"e"}`))
	case r.Method == http.MethodDelete && r.URL.Path == "/v1/var/"+path && q.Get("cas") == "5" && q.Get("namespace") == "ml":
		f.deleted = true
	default:
		http.Error(w, "unexpected "+r.Method+" "+r.URL.String(), http.StatusBadRequest)
	}
}

// Restore ends a cooldown only once its end has come, and then restores
// the job's original priority unless someone changed it meanwhile: a job
// raised further since (or lowered) is left as it is, and the cooldown is
// removed all the same.
func TestRestore(t *testing.T) {
	until := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	cd := Cooldown{Namespace: "ml", JobID: "train", Original: 30, Raised: 80, Until: until, PreemptedBy: "1234"}
	cases := []struct {
		name       string
		now        time.Time
		priority   int    // the job's when Restore runs
		want       string // the note, "" for no cooldown ended
		registered []int
	}{
		{"a second before the end", until.Add(-time.Second), 80, "", nil},
		{"at the end", until, 80, "priority 30 restored (raised to 80)", []int{30}},
		{"after the end", until.Add(time.Hour), 80, "priority 30 restored (raised to 80)", []int{30}},
		{"raised meanwhile", until.Add(time.Second), 95, "left at priority 95: changed since it was raised to 80", nil},
		{"lowered meanwhile", until.Add(time.Second), 60, "left at priority 60: changed since it was raised to 80", nil},
		{"raised meanwhile, before the end", until.Add(-time.Second), 95, "", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := &fakeCooldownAPI{cd: cd, priority: c.priority}
			srv := httptest.NewServer(f)
			defer srv.Close()
			cl, err := New(srv.URL, "")
			if err != nil {
				t.Fatal(err)
			}
			cl.now = func() time.Time { return c.now }
			done, err := cl.Restore(context.Background())
			if err != nil {
				t.Fatalf("Restore: %v", err)
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			if c.want == "" {
				if len(done) != 0 || f.jobRead || f.deleted || len(f.registered) != 0 {
					t.Fatalf("before the end: ended %+v, job read %v, variable deleted %v, registered %v; want nothing touched",
						done, f.jobRead, f.deleted, f.registered)
				}
				return
			}
			if len(done) != 1 || done[0].Cooldown != cd || done[0].Note != c.want {
				t.Fatalf("ended %+v; want the cooldown with note %q", done, c.want)
			}
			if !slices.Equal(f.registered, c.registered) || !f.deleted {
				t.Fatalf("registered %v, variable deleted %v; want registered %v and the variable deleted", f.registered, f.deleted, c.registered)
			}
		})
	}
}
