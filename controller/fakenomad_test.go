package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/nomad/api"
)

// fakeNomad is a Nomad HTTP API as the controller uses it: the allocation
// and job lists it watches (blocking queries on their table's index, as
// Nomad's), job reads and registrations, and variables (the leader lock
// and the priority ledger), the event stream of allocations and reads of
// one allocation. It counts every request and the bytes of every
// response, by endpoint.
type fakeNomad struct {
	mu       sync.Mutex
	wake     chan struct{} // closed and replaced when an index moves
	raft     uint64        // the last raft index, which the allocations' and jobs' are drawn from
	allocIdx uint64        // the allocations table's index
	jobIdx   uint64        // the jobs table's
	varIdx   uint64        // the variables table's, counted apart (they are not streamed)

	live     []*api.AllocationListStub // pending and running
	finished []*api.AllocationListStub // newest last
	jobs     map[string]*api.JobListStub
	vars     map[string]*api.Variable
	bodies   map[string]cachedBody // list → its body at an index
	starting []*api.AllocationListStub
	frames   []eventFrame // the event stream's buffer, oldest first

	changes int
	calls   map[string]int
	bytes   int64
	bytesBy map[string]int64 // by endpoint
	first   map[string]int64 // the bytes of each endpoint's first answer

	// registerFault fails the job registrations, to play a leader that
	// dies while it makes one.
	registerFault registerFault
}

// registerFault is how the fake fails a job registration.
type registerFault int

const (
	registerOK registerFault = iota
	// registerLost: the registration never lands (the leader died
	// before it was made).
	registerLost
	// registerUnanswered: it lands, but no answer comes back (the
	// leader died before it heard).
	registerUnanswered
)

// cachedBody is a list's JSON at the index it was made at: lists are
// encoded once per change, as the fake's cost is not what is measured.
type cachedBody struct {
	index uint64
	body  []byte
}

func newFakeNomad() *fakeNomad {
	return &fakeNomad{wake: make(chan struct{}), raft: 1, allocIdx: 1, jobIdx: 1, varIdx: 1,
		jobs: map[string]*api.JobListStub{}, vars: map[string]*api.Variable{},
		bodies: map[string]cachedBody{}, calls: map[string]int{}, bytesBy: map[string]int64{}, first: map[string]int64{}}
}

// next is the next raft index; the caller holds mu.
func (f *fakeNomad) next() uint64 {
	f.raft++
	return f.raft
}

// moved wakes the blocking queries; the caller holds mu.
func (f *fakeNomad) moved() {
	close(f.wake)
	f.wake = make(chan struct{})
}

func (f *fakeNomad) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	cw := &countingWriter{ResponseWriter: w}
	p := r.URL.Path
	switch {
	case p == "/v1/allocations" && r.Method == http.MethodGet:
		f.serveAllocs(cw, r)
	case isEventStream(r):
		f.serveEvents(cw, r)
	case strings.HasPrefix(p, "/v1/allocation/") && r.Method == http.MethodGet:
		f.readAlloc(cw, strings.TrimPrefix(p, "/v1/allocation/"))
	case p == "/v1/jobs" && r.Method == http.MethodGet:
		f.serveList(cw, r, "jobs", &f.jobIdx, f.jobStubs)
	case p == "/v1/jobs":
		f.registerJob(cw, r)
	case strings.HasPrefix(p, "/v1/job/") && r.Method == http.MethodGet:
		f.readJob(cw, strings.TrimPrefix(p, "/v1/job/"))
	case p == "/v1/vars":
		f.listVars(cw, r)
	case strings.HasPrefix(p, "/v1/var/"):
		f.serveVar(cw, r, strings.TrimPrefix(p, "/v1/var/"))
	default:
		http.Error(cw, "the fake does not serve "+r.Method+" "+p, http.StatusNotFound)
	}
	f.mu.Lock()
	e := endpointOf(r)
	if f.calls[e] == 0 {
		f.first[e] = cw.n
	}
	f.calls[e]++
	f.bytes += cw.n
	f.bytesBy[e] += cw.n
	f.mu.Unlock()
}

// endpointOf names a request for the counts.
func endpointOf(r *http.Request) string {
	p, q := r.URL.Path, r.URL.Query()
	switch {
	case p == "/v1/allocations" && q.Get("reverse") == "true":
		return "GET /v1/allocations (finished)"
	case p == "/v1/allocations" && q.Has("per_page"):
		return "GET /v1/allocations (live page)"
	case p == "/v1/allocations":
		return "GET /v1/allocations (live)"
	case strings.HasPrefix(p, "/v1/job/"):
		return r.Method + " /v1/job/:id"
	case strings.HasPrefix(p, "/v1/allocation/"):
		return r.Method + " /v1/allocation/:id"
	case strings.HasPrefix(p, "/v1/var/"+LedgerPrefix):
		return r.Method + " /v1/var/ (ledger)"
	case strings.HasPrefix(p, "/v1/var/"):
		for _, op := range []string{"lock-acquire", "lock-renew", "lock-release"} {
			if q.Has(op) {
				return r.Method + " /v1/var/ (" + op + ")"
			}
		}
	}
	return r.Method + " " + p
}

type countingWriter struct {
	http.ResponseWriter
	n int64
}

func (w *countingWriter) Write(b []byte) (int, error) {
	n, err := w.ResponseWriter.Write(b)
	w.n += int64(n)
	return n, err
}

// Unwrap lets http.ResponseController flush the stream.
func (w *countingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// The watcher's filters, the only ones the fake answers.
const (
	liveFilter     = `ClientStatus == "pending" or ClientStatus == "running"`
	finishedFilter = `ClientStatus == "complete" or ClientStatus == "failed" or ClientStatus == "lost"`
)

func (f *fakeNomad) serveAllocs(w http.ResponseWriter, r *http.Request) {
	switch q := r.URL.Query(); q.Get("filter") {
	case liveFilter:
		if q.Get("per_page") == "" {
			f.serveList(w, r, "live", &f.allocIdx, func() any { return f.live })
			return
		}
		n, _ := strconv.Atoi(q.Get("per_page"))
		f.serveList(w, r, "live page", &f.allocIdx, func() any { return page(f.live, n, q) })
	case finishedFilter:
		n, _ := strconv.Atoi(q.Get("per_page"))
		f.serveList(w, r, "finished", &f.allocIdx, func() any { return newestFirst(f.finished, n) })
	default:
		http.Error(w, fmt.Sprintf("the fake does not filter by %q", q.Get("filter")), http.StatusBadRequest)
	}
}

// page is the first n allocations as Nomad lists them, with their
// resources only when asked for and their task states unless asked not
// to. (The fake lists in its own order, not Nomad's create index's.)
func page(as []*api.AllocationListStub, n int, q url.Values) []*api.AllocationListStub {
	out := make([]*api.AllocationListStub, 0, min(n, len(as)))
	for _, a := range as[:min(n, len(as))] {
		c := *a
		if q.Get("resources") != "true" {
			c.AllocatedResources = nil
		}
		if q.Get("task_states") == "false" {
			c.TaskStates = nil
		}
		out = append(out, &c)
	}
	return out
}

func newestFirst(as []*api.AllocationListStub, n int) []*api.AllocationListStub {
	out := make([]*api.AllocationListStub, 0, len(as))
	for i := len(as) - 1; i >= 0 && (n <= 0 || len(out) < n); i-- {
		out = append(out, as[i])
	}
	return out
}

// serveList answers a list as a blocking query on *index: with ?index=
// at or past it, it waits for it to move, or for ?wait=.
func (f *fakeNomad) serveList(w http.ResponseWriter, r *http.Request, name string, index *uint64, list func() any) {
	q := r.URL.Query()
	after, _ := strconv.ParseUint(q.Get("index"), 10, 64)
	wait, err := time.ParseDuration(q.Get("wait"))
	if err != nil {
		wait = 5 * time.Minute
	}
	if !f.waitPast(r.Context(), index, after, wait) {
		f.mu.Unlock()
		return
	}
	at := *index
	c, ok := f.bodies[name]
	if !ok || c.index != at {
		b, _ := json.Marshal(list())
		c = cachedBody{index: at, body: b}
		f.bodies[name] = c
	}
	f.mu.Unlock()
	w.Header().Set("X-Nomad-Index", strconv.FormatUint(at, 10))
	_, _ = w.Write(c.body)
}

// waitPast waits until *index is past after, wait passes, or ctx ends
// (false). It returns holding mu.
func (f *fakeNomad) waitPast(ctx context.Context, index *uint64, after uint64, wait time.Duration) bool {
	timeout := time.NewTimer(wait)
	defer timeout.Stop()
	f.mu.Lock()
	for after > 0 && *index <= after {
		wake := f.wake
		f.mu.Unlock()
		select {
		case <-wake:
		case <-timeout.C:
			f.mu.Lock()
			return true
		case <-ctx.Done():
			f.mu.Lock()
			return false
		}
		f.mu.Lock()
	}
	return true
}

func (f *fakeNomad) jobStubs() any {
	out := make([]*api.JobListStub, 0, len(f.jobs))
	for _, j := range f.jobs {
		out = append(out, j)
	}
	return out
}

func writeJSON(w http.ResponseWriter, index uint64, v any) {
	w.Header().Set("X-Nomad-Index", strconv.FormatUint(index, 10))
	_ = json.NewEncoder(w).Encode(v)
}

func (f *fakeNomad) readJob(w http.ResponseWriter, id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	j := f.jobs[id]
	if j == nil {
		http.Error(w, "job not found", http.StatusNotFound)
		return
	}
	writeJSON(w, f.jobIdx, fullJob(j))
}

// fullJob is the job a stub lists, as the fake holds it.
func fullJob(j *api.JobListStub) *api.Job {
	var version uint64
	return &api.Job{ID: &j.ID, Name: &j.Name, Namespace: &j.Namespace, Type: &j.Type,
		Priority: &j.Priority, Version: &version, JobModifyIndex: &j.JobModifyIndex}
}

// registerJob takes a registration that changes a job's priority only, as
// the controller's are, with Nomad's check of the job modify index.
func (f *fakeNomad) registerJob(w http.ResponseWriter, r *http.Request) {
	var req api.JobRegisterRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Job == nil || req.Job.ID == nil || req.Job.Priority == nil {
		http.Error(w, fmt.Sprintf("bad registration: %v", err), http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	j := f.jobs[*req.Job.ID]
	switch {
	case j == nil:
		http.Error(w, "the fake registers no new jobs", http.StatusBadRequest)
		return
	case req.EnforceIndex && req.JobModifyIndex != j.JobModifyIndex:
		http.Error(w, "Enforcing job modify index: conflicting index", http.StatusBadRequest)
		return
	case f.registerFault == registerLost:
		http.Error(w, "the registration was lost", http.StatusInternalServerError)
		return
	}
	f.jobIdx = f.next()
	j.Priority, j.JobModifyIndex, j.ModifyIndex = *req.Job.Priority, f.jobIdx, f.jobIdx
	f.publishedJob(j)
	f.moved()
	if f.registerFault == registerUnanswered {
		http.Error(w, "the answer was lost", http.StatusInternalServerError)
		return
	}
	writeJSON(w, f.jobIdx, &api.JobRegisterResponse{EvalID: fmt.Sprintf("eval-%d", f.jobIdx), JobModifyIndex: f.jobIdx})
}

func (f *fakeNomad) listVars(w http.ResponseWriter, r *http.Request) {
	prefix := r.URL.Query().Get("prefix")
	f.mu.Lock()
	defer f.mu.Unlock()
	out := []*api.VariableMetadata{}
	for path, v := range f.vars {
		if strings.HasPrefix(path, prefix) {
			out = append(out, &api.VariableMetadata{Namespace: v.Namespace, Path: v.Path, ModifyIndex: v.ModifyIndex})
		}
	}
	writeJSON(w, f.varIdx, out)
}

// serveVar reads, writes (check-and-set) and deletes a variable, and
// takes, renews and releases its lock. One holder only: the benchmark
// runs one replica.
func (f *fakeNomad) serveVar(w http.ResponseWriter, r *http.Request, path string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	q := r.URL.Query()
	cur := f.vars[path]
	switch {
	case r.Method == http.MethodGet && cur == nil:
		http.Error(w, "variable not found", http.StatusNotFound)
	case r.Method == http.MethodGet:
		writeJSON(w, f.varIdx, cur)
	case q.Has("lock-acquire"):
		f.writeVar(w, r, path, func(v *api.Variable) { v.Lock.ID = "lock-1" })
	case q.Has("lock-renew") || q.Has("lock-release"):
		if cur == nil {
			http.Error(w, "variable not found", http.StatusNotFound)
			return
		}
		writeJSON(w, f.varIdx, cur)
	case !q.Has("cas"):
		http.Error(w, "the controller writes variables with cas only", http.StatusBadRequest)
	default:
		cas, _ := strconv.ParseUint(q.Get("cas"), 10, 64)
		if cur == nil && cas != 0 || cur != nil && cur.ModifyIndex != cas {
			w.WriteHeader(http.StatusConflict)
			writeJSON(w, f.varIdx, cur)
			return
		}
		if r.Method == http.MethodDelete {
			f.varIdx++
			delete(f.vars, path)
			w.WriteHeader(http.StatusNoContent)
			return
		}
		f.writeVar(w, r, path, func(*api.Variable) {})
	}
}

// writeVar stores the request's variable at a new index; the caller
// holds mu.
func (f *fakeNomad) writeVar(w http.ResponseWriter, r *http.Request, path string, edit func(*api.Variable)) {
	var v api.Variable
	if err := json.NewDecoder(r.Body).Decode(&v); err != nil || (v.Lock == nil && r.URL.Query().Has("lock-acquire")) {
		http.Error(w, fmt.Sprintf("bad variable: %v", err), http.StatusBadRequest)
		return
	}
	edit(&v)
	f.varIdx++
	v.ModifyIndex = f.varIdx
	f.vars[path] = &v
	writeJSON(w, f.varIdx, &v)
}
