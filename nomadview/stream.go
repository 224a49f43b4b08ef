package nomadview

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/nomad/api"
)

// The allocations are the one list that changes all the time: listed
// with their resources and task states at every change, 10,000 of them
// cost Nomad's servers a gigabyte a minute. So the Allocs watch lists
// them once and then follows Nomad's event stream (topics Allocation and
// Job), which carries each changed allocation whole but for its job, and
// each purged job (whose allocations go with no event of theirs), applying
// each to its own copy of the list (the stream is opened first, so no
// change falls between the two); the Finished watch lists again only
// when the stream saw a terminal allocation change. Where the stream is
// refused (the event broker off, a token that may not read every
// namespace the watcher reads) both go back to blocking lists for a
// while.

const (
	// streamIdle is how long a stream may stay silent: Nomad sends a
	// heartbeat every 30s.
	streamIdle = 75 * time.Second
	// streamFirst is how long Nomad may take to send its first frame, a
	// heartbeat it sends as soon as it subscribed; the list waits for it.
	streamFirst = 15 * time.Second
	// streamRetry is how long the watches list instead once Nomad
	// refused the stream.
	streamRetry = 5 * time.Minute
	// streamStable is how long a stream must have lasted for the next
	// one to start without backing off.
	streamStable = time.Minute
)

// errStreamRefused is a stream that ended before its first frame.
var errStreamRefused = errors.New("event stream refused")

// allocFeed is what the Allocs watch tells the Finished watch: whether it
// follows the stream, and a count that moves whenever the stream saw a
// terminal allocation change or began or stopped being followed.
//
// Locks: mu guards all of it.
type allocFeed struct {
	mu        sync.Mutex
	following bool
	seq       uint64
	wake      chan struct{} // closed and replaced when seq moves
}

func newAllocFeed() *allocFeed { return &allocFeed{wake: make(chan struct{})} }

// moved sets following and moves the count.
func (f *allocFeed) moved(following bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.following = following
	f.seq++
	close(f.wake)
	f.wake = make(chan struct{})
}

func (f *allocFeed) state() (following bool, seq uint64, wake <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.following, f.seq, f.wake
}

// runAllocs keeps the Allocs watch fresh by the event stream
// (streamAllocs) until it ends or Resync passes, then again; a refused
// stream makes it list by blocking queries for streamRetry.
func (w *Watcher) runAllocs(l *lister) {
	var listUntil time.Time
	backoff := time.Second
	for {
		if time.Now().Before(listUntil) {
			if _, alive := l.once(); !alive {
				return
			}
			continue
		}
		start := time.Now()
		err := w.streamAllocs(l)
		switch {
		case w.ctx.Err() != nil:
			return
		case errors.Is(err, errStreamRefused):
			w.cfg.Log.Warn("nomad event stream refused; listing allocations instead", "error", err, "retry_in", streamRetry)
			listUntil = time.Now().Add(streamRetry)
		case err != nil:
			if time.Since(start) > streamStable {
				backoff = time.Second
			}
			w.cfg.Log.Warn("nomad event stream ended; listing allocations again", "error", err, "retry_in", backoff)
			if !sleepCtx(w.ctx, backoff) {
				return
			}
			backoff = min(2*backoff, 30*time.Second)
		}
	}
}

// streamAllocs opens the event stream at the allocations' index before
// it lists them, so that no change falls between the list and the
// stream, then follows the stream from the list's index.
func (w *Watcher) streamAllocs(l *lister) error {
	ctx, cancel := context.WithCancel(w.ctx)
	defer cancel()
	from, err := w.allocIndex(ctx)
	if err != nil {
		l.fail(err)
		return err
	}
	frames, done, err := w.subscribe(ctx, from)
	defer func() { cancel(); <-done }()
	if err != nil {
		if !errors.Is(err, errStreamRefused) {
			l.fail(err) // Nomad unreachable
		}
		return err
	}
	select { // Nomad's first frame, a heartbeat, says it subscribed
	case f := <-frames:
		if f.err != nil {
			return fmt.Errorf("%w: %v", errStreamRefused, f.err)
		}
	case <-time.After(streamFirst):
		return fmt.Errorf("%w: no first frame in %s", errStreamRefused, streamFirst)
	case <-ctx.Done():
		return ctx.Err()
	}
	l.index = 0
	listed, alive := l.once()
	switch {
	case !alive:
		return ctx.Err()
	case !listed:
		return fmt.Errorf("list %s failed", Allocs)
	}
	data, _, _, _ := l.wt.state()
	stubs, _ := data.([]*api.AllocationListStub)
	return w.follow(ctx, l, frames, newAllocState(stubs), l.index)
}

// allocIndex is the allocations table's index, read by a list of one.
func (w *Watcher) allocIndex(ctx context.Context) (uint64, error) {
	q := (&api.QueryOptions{Namespace: w.cfg.Namespace, PerPage: 1, Filter: allocFilter,
		Params: map[string]string{"task_states": "false"}}).WithContext(ctx)
	w.cfg.OnCall(EndpointAllocs)
	_, meta, err := w.cl.Allocations().List(q)
	if err != nil {
		return 0, fmt.Errorf("allocations index: %w", err)
	}
	return lastIndex(meta), nil
}

// runFinished keeps the Finished watch fresh: while the allocations
// follow the stream it lists when the stream saw a terminal allocation
// change, else by blocking queries.
func (w *Watcher) runFinished(l *lister) {
	var seen uint64
	for {
		following, seq, wake := w.feed.state()
		switch {
		case !following:
		case seq == seen && !l.first:
			select {
			case <-wake:
				continue
			case <-w.ctx.Done():
				return
			}
		default:
			l.index = 0
		}
		listed, alive := l.once()
		if !alive {
			return
		}
		if listed && following {
			seen = seq
		}
	}
}

// streamFrame is one line of the event stream: a heartbeat ({}) or the
// events of one raft index, of the topics Allocation and Job. A job's
// events are read for one thing: a purge, which deletes the job's
// allocations with no event of theirs.
type streamFrame struct {
	Index  uint64
	Events []struct {
		Topic   string
		Payload struct {
			Allocation *api.Allocation
			Job        *struct{ ID, Namespace string }
			Deleted    bool
		}
	}
	err error
}

// streamTopics are the stream's topics, as query parameters.
const streamTopics = "topic=Allocation:*&topic=Job:*"

// follow applies the stream's frames after index (the list's) to st,
// publishing the result at most once per MinRefresh, until the stream
// fails, Resync passes (nil) or ctx ends.
func (w *Watcher) follow(ctx context.Context, l *lister, frames <-chan streamFrame, st *allocState, index uint64) error {
	w.feed.moved(true)
	defer w.feed.moved(false)
	idle, resync, pub := time.NewTimer(streamIdle), time.NewTimer(w.cfg.Resync), time.NewTimer(time.Hour)
	defer idle.Stop()
	defer resync.Stop()
	pub.Stop()
	var lastPub time.Time
	pending := false
	for {
		select {
		case f := <-frames:
			if f.err != nil {
				return f.err
			}
			idle.Reset(streamIdle)
			if f.Index <= index {
				continue // in the list already
			}
			changed, finished, err := w.applyFrame(ctx, st, f)
			if err != nil {
				return err
			}
			if finished {
				w.feed.moved(true)
			}
			if changed && !pending {
				pending = true
				pub.Reset(w.cfg.MinRefresh - time.Since(lastPub))
			}
		case <-pub.C:
			pending, lastPub = false, time.Now()
			l.publish(st.list(), true)
		case <-idle.C:
			return fmt.Errorf("no event stream frame for %s", streamIdle)
		case <-resync.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// subscribe opens the event stream of allocations from index (Nomad
// starts at the first frame at or after it that it still holds) and
// decodes its frames into the channel until ctx ends or the stream fails
// (a frame with err, the last); done closes when the decoding stops.
func (w *Watcher) subscribe(ctx context.Context, index uint64) (<-chan streamFrame, <-chan struct{}, error) {
	done := make(chan struct{})
	q := &api.QueryOptions{Namespace: w.cfg.Namespace, Params: map[string]string{"index": strconv.FormatUint(index, 10)}}
	w.cfg.OnCall(EndpointEvents)
	body, err := w.cl.Raw().Response("/v1/event/stream?"+streamTopics, q.WithContext(ctx))
	if err != nil {
		close(done)
		if StatusCode(err) != 0 { // Nomad answered, with no stream
			err = fmt.Errorf("%w: %v", errStreamRefused, err)
		}
		return nil, done, err
	}
	// Frames wait here while the allocations are listed.
	frames := make(chan streamFrame, 4096)
	go func() {
		defer close(done)
		defer body.Close()
		dec := json.NewDecoder(body)
		for {
			var f streamFrame
			if err := dec.Decode(&f); err != nil {
				if err == io.EOF {
					err = io.ErrUnexpectedEOF // the stream never ends by itself
				}
				f = streamFrame{err: err}
			}
			select {
			case frames <- f:
			case <-ctx.Done():
				return
			}
			if f.err != nil {
				return
			}
		}
	}()
	return frames, done, nil
}

// applyFrame applies a frame's allocations to st. It reads by ID an
// allocation new to st whose job's type st does not know (the stream
// leaves the job out).
func (w *Watcher) applyFrame(ctx context.Context, st *allocState, f streamFrame) (changed, finished bool, err error) {
	for _, e := range f.Events {
		if j := e.Payload.Job; e.Topic == string(api.TopicJob) && j != nil && e.Payload.Deleted {
			if st.dropJob(JobKey{Namespace: j.Namespace, ID: j.ID}) {
				changed = true
			}
			finished = true // its finished allocations went too
			continue
		}
		a := e.Payload.Allocation
		if e.Topic != string(api.TopicAllocation) || a == nil {
			continue
		}
		if live(a.ClientStatus) && st.allocs[a.ID] == nil && st.jobTypes[jobOf(a)] == "" {
			if a, err = w.readAlloc(ctx, a.ID); err != nil {
				return changed, finished, err
			}
			if a == nil {
				continue // gone already
			}
		}
		c, fin := st.apply(a)
		changed, finished = changed || c, finished || fin
	}
	return changed, finished, nil
}

// readAlloc reads an allocation with its job; nil when it is gone.
func (w *Watcher) readAlloc(ctx context.Context, id string) (*api.Allocation, error) {
	ctx, cancel := context.WithTimeout(ctx, w.cfg.CallTimeout)
	defer cancel()
	w.cfg.OnCall(EndpointAlloc)
	a, _, err := w.cl.Allocations().Info(id, (&api.QueryOptions{Namespace: w.cfg.Namespace}).WithContext(ctx))
	switch {
	case IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("allocation %s: %w", id, err)
	}
	return a, nil
}

func live(clientStatus string) bool {
	return clientStatus == api.AllocClientStatusPending || clientStatus == api.AllocClientStatusRunning
}

func terminal(clientStatus string) bool {
	switch clientStatus {
	case api.AllocClientStatusComplete, api.AllocClientStatusFailed, api.AllocClientStatusLost:
		return true
	}
	return false
}

func jobOf(a *api.Allocation) JobKey { return JobKey{Namespace: a.Namespace, ID: a.JobID} }

// allocState is the Allocs watch's copy of the pending and running
// allocations while it follows the stream; it belongs to that goroutine.
// Its stubs are never changed once in it: an event replaces them.
type allocState struct {
	allocs   map[string]*api.AllocationListStub
	jobTypes map[JobKey]string // the type of each job with allocations in allocs
	jobRefs  map[JobKey]int    // how many
}

func newAllocState(listed []*api.AllocationListStub) *allocState {
	st := &allocState{allocs: make(map[string]*api.AllocationListStub, len(listed)),
		jobTypes: map[JobKey]string{}, jobRefs: map[JobKey]int{}}
	for _, a := range listed {
		if a != nil {
			st.put(a)
		}
	}
	return st
}

func (st *allocState) put(a *api.AllocationListStub) {
	k := JobKey{Namespace: a.Namespace, ID: a.JobID}
	if old := st.allocs[a.ID]; old != nil {
		st.drop(old)
	}
	st.allocs[a.ID] = a
	st.jobRefs[k]++
	if a.JobType != "" {
		st.jobTypes[k] = a.JobType
	}
}

func (st *allocState) drop(a *api.AllocationListStub) {
	k := JobKey{Namespace: a.Namespace, ID: a.JobID}
	delete(st.allocs, a.ID)
	if st.jobRefs[k]--; st.jobRefs[k] <= 0 {
		delete(st.jobRefs, k)
		delete(st.jobTypes, k)
	}
}

// dropJob removes the allocations of a purged job; it says whether it
// held any.
func (st *allocState) dropJob(k JobKey) bool {
	if st.jobRefs[k] == 0 {
		return false
	}
	for _, a := range st.allocs {
		if a.Namespace == k.Namespace && a.JobID == k.ID {
			st.drop(a)
		}
	}
	return true
}

// apply takes one allocation as the stream (or a read) carries it: a
// pending or running one replaces its stub, any other leaves the list.
// It ignores an allocation older than the stub it holds. finished says
// it was terminal.
func (st *allocState) apply(a *api.Allocation) (changed, finished bool) {
	old := st.allocs[a.ID]
	if old != nil && a.ModifyIndex < old.ModifyIndex {
		return false, false
	}
	finished = terminal(a.ClientStatus)
	if !live(a.ClientStatus) {
		if old != nil {
			st.drop(old)
		}
		return old != nil, finished
	}
	s := a.Stub()
	s.AllocatedResources, s.JobVersion = a.AllocatedResources, 0
	if s.JobType == "" {
		s.JobType = st.jobTypes[jobOf(a)]
	}
	st.put(s)
	return true, finished
}

// list is the allocations as Nomad lists them: by create index, then ID.
func (st *allocState) list() []*api.AllocationListStub {
	out := make([]*api.AllocationListStub, 0, len(st.allocs))
	for _, a := range st.allocs {
		out = append(out, a)
	}
	slices.SortFunc(out, func(a, b *api.AllocationListStub) int {
		return cmp.Or(cmp.Compare(a.CreateIndex, b.CreateIndex), cmp.Compare(a.ID, b.ID))
	})
	return out
}
