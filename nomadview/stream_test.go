package nomadview

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

func streamed(id, job, status string, create, modify uint64) *api.Allocation {
	return &api.Allocation{ID: id, Namespace: "default", JobID: job, ClientStatus: status, CreateIndex: create, ModifyIndex: modify,
		AllocatedResources: &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{"t": {
			Devices: []*api.AllocatedDeviceResource{{Vendor: "nvidia", Type: "gpu", Name: "H100", DeviceIDs: []string{"GPU-" + id}}}}}},
		TaskStates: map[string]*api.TaskState{"t": {State: "running"}}}
}

func TestAllocStateApply(t *testing.T) {
	listed := func() []*api.AllocationListStub {
		return []*api.AllocationListStub{
			{ID: "a", Namespace: "default", JobID: "train", JobType: "batch", ClientStatus: "running", CreateIndex: 5, ModifyIndex: 8},
			{ID: "b", Namespace: "default", JobID: "train", JobType: "batch", ClientStatus: "pending", CreateIndex: 6, ModifyIndex: 6},
		}
	}
	cases := []struct {
		name               string
		event              *api.Allocation
		changed, finished  bool
		want               []string // IDs listed, in order
		wantType, wantNode string   // of the event's allocation, when listed
	}{
		{"an update replaces the stub", streamed("b", "train", "running", 6, 9), true, false, []string{"a", "b"}, "batch", ""},
		{"an older update is ignored", streamed("a", "train", "pending", 5, 7), false, false, []string{"a", "b"}, "", ""},
		{"a new allocation of a known job takes its type", streamed("c", "train", "pending", 4, 9), true, false, []string{"c", "a", "b"}, "batch", ""},
		{"a finished allocation leaves", streamed("a", "train", "complete", 5, 9), true, true, []string{"b"}, "", ""},
		{"a lost allocation leaves", streamed("a", "train", "lost", 5, 9), true, true, []string{"b"}, "", ""},
		{"an unknown allocation leaves, not finished", streamed("a", "train", "unknown", 5, 9), true, false, []string{"b"}, "", ""},
		{"a finished allocation never listed changes nothing", streamed("z", "train", "failed", 2, 9), false, true, []string{"a", "b"}, "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st := newAllocState(listed())
			changed, finished := st.apply(c.event)
			if changed != c.changed || finished != c.finished {
				t.Errorf("changed %v finished %v, want %v %v", changed, finished, c.changed, c.finished)
			}
			var ids []string
			for _, a := range st.list() {
				ids = append(ids, a.ID)
			}
			if fmt.Sprint(ids) != fmt.Sprint(c.want) {
				t.Errorf("listed %v, want %v", ids, c.want)
			}
			if a := st.allocs[c.event.ID]; c.wantType != "" && (a == nil || a.JobType != c.wantType || len(allocDevices(a)) != 1) {
				t.Errorf("stub %+v, want job type %q and its GPU", a, c.wantType)
			}
		})
	}
}

// streamNomad is a Nomad serving the allocation list and the event stream
// of allocations: the test sends frames with push; a stream it is told to
// refuse answers 200 and ends at once, as Nomad's does for a token that
// may not read a namespace.
type streamNomad struct {
	mu       sync.Mutex
	index    uint64
	live     []*api.AllocationListStub
	finished []*api.AllocationListStub
	byID     map[string]*api.Allocation
	frames   []string
	wake     chan struct{}
	refuse   bool
	calls    map[string]int
	onList   func() // called, once, before the first full list of the live allocations
}

func newStreamNomad() *streamNomad {
	return &streamNomad{index: 10, byID: map[string]*api.Allocation{}, wake: make(chan struct{}), calls: map[string]int{}}
}

type fakeEvent struct {
	Topic   string
	Index   uint64
	Payload struct {
		Allocation *api.Allocation `json:",omitempty"`
		Job        *api.Job        `json:",omitempty"`
		Deleted    bool            `json:",omitempty"`
	}
}

// push adds a frame of allocation events at the next index.
func (f *streamNomad) push(allocs ...*api.Allocation) {
	var events []fakeEvent
	for _, a := range allocs {
		e := fakeEvent{Topic: "Allocation"}
		e.Payload.Allocation = a
		events = append(events, e)
	}
	f.pushEvents(events...)
}

// purge deletes a job and its allocations, as Nomad does: the job's
// event says so, its allocations have none.
func (f *streamNomad) purge(job string) {
	e := fakeEvent{Topic: "Job"}
	e.Payload.Job, e.Payload.Deleted = &api.Job{ID: &job, Namespace: new("default"), Type: new("batch")}, true
	f.pushEvents(e)
}

func (f *streamNomad) pushEvents(events ...fakeEvent) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.index++
	fr := struct {
		Index  uint64
		Events []fakeEvent
	}{Index: f.index}
	for _, e := range events {
		e.Index = f.index
		fr.Events = append(fr.Events, e)
	}
	b, _ := json.Marshal(fr)
	f.frames = append(f.frames, fmt.Sprintf("%d %s", f.index, b))
	close(f.wake)
	f.wake = make(chan struct{})
}

func (f *streamNomad) count(path string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[path]
}

func (f *streamNomad) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if on := f.onList; on != nil && q.Get("filter") == allocFilter && q.Get("per_page") == "" {
		f.onList = nil
		on()
	}
	f.mu.Lock()
	key := r.URL.Path
	if key == "/v1/allocations" {
		key += "?" + q.Get("filter")
		if pp := q.Get("per_page"); pp != "" && q.Get("filter") == allocFilter {
			key += "&per_page=" + pp
		}
	}
	f.calls[key]++
	var v any
	switch {
	case r.URL.Path == "/v1/event/stream":
		f.mu.Unlock()
		f.stream(w, r)
		return
	case strings.HasPrefix(r.URL.Path, "/v1/allocation/"):
		v = f.byID[strings.TrimPrefix(r.URL.Path, "/v1/allocation/")]
	case q.Get("filter") == allocFilter:
		v = f.live
	default:
		v = f.finished
	}
	w.Header().Set("X-Nomad-Index", strconv.FormatUint(f.index, 10))
	f.mu.Unlock()
	_ = json.NewEncoder(w).Encode(v)
}

func (f *streamNomad) stream(w http.ResponseWriter, r *http.Request) {
	if t := r.URL.Query()["topic"]; fmt.Sprint(t) != "[Allocation:* Job:*]" {
		http.Error(w, fmt.Sprintf("bad topics %q", t), http.StatusBadRequest)
		return
	}
	from, _ := strconv.ParseUint(r.URL.Query().Get("index"), 10, 64)
	f.mu.Lock()
	refuse := f.refuse
	f.mu.Unlock()
	w.WriteHeader(http.StatusOK)
	if refuse {
		return
	}
	_, _ = fmt.Fprintln(w, "{}")
	w.(http.Flusher).Flush()
	for sent := 0; ; {
		f.mu.Lock()
		frames, wake := f.frames[sent:], f.wake
		sent = len(f.frames)
		f.mu.Unlock()
		for _, fr := range frames {
			idx, line, _ := strings.Cut(fr, " ")
			if i, _ := strconv.ParseUint(idx, 10, 64); i >= from {
				_, _ = fmt.Fprintln(w, line)
			}
		}
		w.(http.Flusher).Flush()
		select {
		case <-wake:
		case <-r.Context().Done():
			return
		}
	}
}

func streamWatcher(t *testing.T, f *streamNomad) *Watcher {
	t.Helper()
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	cl, err := api.NewClient(&api.Config{Address: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	w := NewWatcher(cl, Config{MinRefresh: 5 * time.Millisecond, Namespace: "default"})
	t.Cleanup(w.Close)
	return w
}

// waitFor waits for a snapshot that ok accepts.
func waitFor(t *testing.T, ctx context.Context, w *Watcher, what string, ok func(*Snapshot) bool) *Snapshot {
	t.Helper()
	for s := range w.Watch(ctx) {
		if ok(s) {
			return s
		}
	}
	t.Fatalf("no snapshot with %s", what)
	return nil
}

// TestAllocationsFollowTheEventStream: listed once, the allocations then
// change by the stream's events; a new job's allocation is read by ID for
// its job's type, a finished one lists the finished allocations again,
// and a purged job's go.
func TestAllocationsFollowTheEventStream(t *testing.T) {
	f := newStreamNomad()
	f.live = []*api.AllocationListStub{{ID: "a", Namespace: "default", JobID: "train", JobType: "batch", ClientStatus: "running", CreateIndex: 5, ModifyIndex: 5}}
	w := streamWatcher(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := w.Sync(ctx, Allocs, Finished); err != nil {
		t.Fatal(err)
	}
	newJob := streamed("c", "serve", "pending", 12, 12)
	f.mu.Lock()
	f.byID["c"] = &api.Allocation{ID: "c", Namespace: "default", JobID: "serve", ClientStatus: "pending", CreateIndex: 12, ModifyIndex: 12,
		Job: &api.Job{Type: new(api.JobTypeService), Version: new(uint64(3))}}
	f.mu.Unlock()
	f.push(streamed("b", "train", "pending", 11, 11))
	f.push(newJob)
	s := waitFor(t, ctx, w, "allocations a, b and c", func(s *Snapshot) bool { return len(s.Allocs) == 3 })
	for i, want := range []string{"a/batch", "b/batch", "c/service"} {
		if got := s.Allocs[i].ID + "/" + s.Allocs[i].JobType; got != want || s.Allocs[i].JobVersion != 0 {
			t.Errorf("allocation %d: %s (job version %d), want %s and no job version", i, got, s.Allocs[i].JobVersion, want)
		}
	}
	if n := f.count("/v1/allocation/c"); n != 1 {
		t.Errorf("allocation c read %d times, want once (its job was new)", n)
	}
	if n := f.count("/v1/allocation/b"); n != 0 {
		t.Errorf("allocation b read %d times, want none (its job's type was known)", n)
	}

	done := streamed("a", "train", "complete", 5, 14)
	done.TaskStates["t"].FinishedAt = time.Now()
	f.mu.Lock()
	f.finished = []*api.AllocationListStub{{ID: "a", Namespace: "default", JobID: "train", ClientStatus: "complete",
		AllocatedResources: done.AllocatedResources, TaskStates: done.TaskStates}}
	f.mu.Unlock()
	f.push(done)
	waitFor(t, ctx, w, "a finished, listed again", func(s *Snapshot) bool { return len(s.Allocs) == 2 && len(s.Finished) == 1 })

	f.mu.Lock()
	f.finished = nil
	f.mu.Unlock()
	f.purge("train")
	s = waitFor(t, ctx, w, "train purged", func(s *Snapshot) bool { return len(s.Allocs) == 1 && len(s.Finished) == 0 })
	if s.Allocs[0].ID != "c" {
		t.Errorf("allocation %s left, want serve's c", s.Allocs[0].ID)
	}
	if n := f.count("/v1/allocations?" + allocFilter); n != 1 {
		t.Errorf("allocations listed %d times, want once", n)
	}
	if n := f.count("/v1/allocations?" + allocFilter + "&per_page=1"); n != 1 {
		t.Errorf("allocations' index read %d times, want once, before the stream", n)
	}
}

// TestRefusedStreamListsInstead: a stream that ends before its first
// frame leaves the allocations to blocking lists.
func TestRefusedStreamListsInstead(t *testing.T) {
	f := newStreamNomad()
	f.refuse = true
	w := streamWatcher(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := w.Sync(ctx, Allocs); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.live = []*api.AllocationListStub{{ID: "a", JobID: "train", ClientStatus: "running"}}
	f.index++
	f.mu.Unlock()
	waitFor(t, ctx, w, "the listed allocation", func(s *Snapshot) bool { return len(s.Allocs) == 1 })
	if n := f.count("/v1/event/stream"); n != 1 {
		t.Errorf("stream asked %d times, want once (then lists for a while)", n)
	}
}

// TestNoChangeFallsBetweenTheListAndTheStream: the stream is open before
// the list, so a change made while the list is read comes by the stream;
// one the list already holds is not applied again.
func TestNoChangeFallsBetweenTheListAndTheStream(t *testing.T) {
	f := newStreamNomad()
	a := &api.AllocationListStub{ID: "a", Namespace: "default", JobID: "train", JobType: "batch", ClientStatus: "running", CreateIndex: 5, ModifyIndex: 5}
	f.live = []*api.AllocationListStub{a}
	f.onList = func() {
		f.push(streamed("b", "train", "pending", 11, 11)) // then b went, by no event of ours
		f.mu.Lock()
		f.index++
		f.mu.Unlock()
		go func() {
			for f.count("/v1/allocations?"+allocFilter) == 0 {
				time.Sleep(time.Millisecond)
			}
			f.push(streamed("c", "train", "pending", 13, 13)) // made while listing
		}()
	}
	w := streamWatcher(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := w.Sync(ctx, Allocs); err != nil {
		t.Fatal(err)
	}
	s := waitFor(t, ctx, w, "allocation c", func(s *Snapshot) bool { return len(s.Allocs) > 1 })
	var ids []string
	for _, x := range s.Allocs {
		ids = append(ids, x.ID)
	}
	if fmt.Sprint(ids) != "[a c]" {
		t.Errorf("allocations %v, want [a c]: b's event is older than the list", ids)
	}
}

// TestAnswerReportsAFailingAllocationsIndex: before the stream opens, a
// Nomad that fails is the allocations list's failure, which Answer
// reports (top does not wait it out).
func TestAnswerReportsAFailingAllocationsIndex(t *testing.T) {
	f := &fakeNomad{calls: map[string]int{}, fail: true}
	w := startWatcher(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := w.Answer(ctx, Allocs)
	if err == nil || !strings.Contains(err.Error(), "list allocations") || !strings.Contains(err.Error(), "500") {
		t.Errorf("error %v, want the allocations' failure", err)
	}
}
