package nomadview

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"
)

// List is one Nomad list a Watcher keeps fresh.
type List int

// The lists, each kept by blocking queries in its own goroutine.
const (
	Nodes    List = iota // GET /v1/nodes?resources=true
	Allocs               // GET /v1/allocations?resources=true, pending and running, then /v1/event/stream
	Blocked              // GET /v1/evaluations?status=blocked, with the jobs' specs
	Jobs                 // GET /v1/jobs?meta=true, with summaries
	Pools                // GET /v1/node/pools
	Finished             // GET /v1/allocations, terminal ones, newest first
	numLists
)

// AllLists are every list but Finished, which is read only when asked
// for (it can be long).
var AllLists = []List{Nodes, Allocs, Blocked, Jobs, Pools}

var listNames = [numLists]string{"nodes", "allocations", "blocked evaluations", "jobs", "node pools", "finished allocations"}

// String is the list's name for messages.
func (l List) String() string { return listNames[l] }

// Config are a Watcher's settings; zero values take the defaults.
type Config struct {
	// Namespace is what allocations, evaluations and jobs are read in:
	// "" or "*" is all.
	Namespace string
	// BlockWait is how long one blocking query may wait (default 5m).
	BlockWait time.Duration
	// MinRefresh is the least time between two lists of one kind
	// (default 1s), and FinishedRefresh that of Finished (default
	// MinRefresh).
	MinRefresh, FinishedRefresh time.Duration
	// FinishedMax bounds the terminal allocations listed (one page,
	// newest first; default 2000), FinishedWindow how long ago they may
	// have finished (default 1h).
	FinishedMax    int
	FinishedWindow time.Duration
	// CallTimeout bounds a job or allocation read (default 30s).
	CallTimeout time.Duration
	// NoEventStream keeps the allocations by blocking lists, as for a
	// Nomad whose event broker is off; by default they follow the event
	// stream between lists.
	NoEventStream bool
	// Resync is how long the allocations follow the event stream before
	// they are listed again (default 10m): it bounds what a missed event
	// or a namespace made since costs.
	Resync time.Duration
	// Log logs failing lists (default: none).
	Log hclog.Logger
	// OnCall, when set, is called with the endpoint of each Nomad call,
	// to count them.
	OnCall func(endpoint string)
}

func (c Config) withDefaults() Config {
	if c.Namespace == "" {
		c.Namespace = "*"
	}
	if c.BlockWait <= 0 {
		c.BlockWait = 5 * time.Minute
	}
	if c.MinRefresh <= 0 {
		c.MinRefresh = time.Second
	}
	c.FinishedRefresh = max(c.FinishedRefresh, c.MinRefresh)
	if c.FinishedMax <= 0 {
		c.FinishedMax = 2000
	}
	if c.FinishedWindow <= 0 {
		c.FinishedWindow = time.Hour
	}
	if c.CallTimeout <= 0 {
		c.CallTimeout = 30 * time.Second
	}
	if c.Resync <= 0 {
		c.Resync = 10 * time.Minute
	}
	if c.Log == nil {
		c.Log = hclog.NewNullLogger()
	}
	if c.OnCall == nil {
		c.OnCall = func(string) {}
	}
	return c
}

// Watcher keeps the cluster's lists fresh and makes snapshots of them. A
// list is watched from the first Start that names it until Close. Its
// methods are safe for concurrent use.
//
// Locks: startMu orders starts before Close's wait; each watch's mu guards
// its own state; snapMu guards the last snapshot and the subscribers;
// specs (the blocked jobs' specs) belong to the Blocked watch's goroutine,
// gangSpecs (the gang jobs') to the Jobs watch's; feed has its own lock.
type Watcher struct {
	cl  *api.Client
	cfg Config

	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	startMu sync.Mutex
	closed  bool

	watches   [numLists]*watch
	specs     map[JobKey]*api.Job
	gangSpecs map[JobKey]*api.Job
	feed      *allocFeed

	snapMu   sync.Mutex
	snap     *Snapshot
	snapVers [numLists]uint64
	subs     map[chan *Snapshot]struct{}
}

// NewWatcher makes a Watcher over cl; it lists nothing until Start.
func NewWatcher(cl *api.Client, cfg Config) *Watcher {
	ctx, cancel := context.WithCancel(context.Background())
	w := &Watcher{cl: cl, cfg: cfg.withDefaults(), ctx: ctx, cancel: cancel,
		specs: map[JobKey]*api.Job{}, gangSpecs: map[JobKey]*api.Job{}, subs: map[chan *Snapshot]struct{}{}, feed: newAllocFeed()}
	for k := range w.watches {
		w.watches[k] = &watch{list: List(k), ready: make(chan struct{}), answered: make(chan struct{})}
	}
	return w
}

// Config is the watcher's configuration, defaults filled in.
func (w *Watcher) Config() Config { return w.cfg }

// Close stops every watch and waits for them; subscriptions end.
func (w *Watcher) Close() {
	w.startMu.Lock()
	w.closed = true
	w.startMu.Unlock()
	w.cancel()
	w.wg.Wait()
}

// Start starts the watches of lists not running yet; it reports false
// once the Watcher is closed.
func (w *Watcher) Start(lists ...List) bool {
	w.startMu.Lock()
	defer w.startMu.Unlock()
	if w.closed {
		return false
	}
	for _, l := range lists {
		wt := w.watches[l]
		wt.mu.Lock()
		if !wt.started {
			wt.started = true
			w.wg.Add(1)
			go w.run(wt)
		}
		wt.mu.Unlock()
	}
	return true
}

// Ready is closed once list l has been listed once.
func (w *Watcher) Ready(l List) <-chan struct{} { return w.watches[l].ready }

// Health says since when list l has been failing and why; a zero time
// and nil error when its last list succeeded.
func (w *Watcher) Health(l List) (failingSince time.Time, lastErr error) {
	_, _, failingSince, lastErr = w.watches[l].state()
	return failingSince, lastErr
}

// Sync starts lists and waits until each has been listed once, ctx ends
// (its error, with the last failure of a list not yet listed) or the
// Watcher closes.
func (w *Watcher) Sync(ctx context.Context, lists ...List) error {
	if !w.Start(lists...) {
		return fmt.Errorf("nomadview: watcher closed")
	}
	for _, l := range lists {
		select {
		case <-w.watches[l].ready:
		case <-ctx.Done():
			if _, err := w.Health(l); err != nil {
				return fmt.Errorf("list %s: %w", l, err)
			}
			return fmt.Errorf("list %s: %w", l, ctx.Err())
		case <-w.ctx.Done():
			return fmt.Errorf("nomadview: watcher closed")
		}
	}
	return nil
}

// Answer starts lists and waits until each has answered once: it fails
// with the error of a list whose last call failed (its last good list is
// still in Latest), for a caller that reports failures rather than
// waiting them out (top), or when ctx ends first.
func (w *Watcher) Answer(ctx context.Context, lists ...List) error {
	if !w.Start(lists...) {
		return fmt.Errorf("nomadview: watcher closed")
	}
	for _, l := range lists {
		select {
		case <-w.watches[l].answered:
		case <-ctx.Done():
			return fmt.Errorf("list %s: %w", l, ctx.Err())
		}
		if _, err := w.Health(l); err != nil {
			return fmt.Errorf("list %s: %w", l, err)
		}
	}
	return nil
}

// Latest is the snapshot of what the watches hold now, made anew only
// when a list changed since the last call. Lists not started are empty.
func (w *Watcher) Latest() *Snapshot {
	var data [numLists]any
	var vers [numLists]uint64
	for k, wt := range w.watches {
		data[k], vers[k], _, _ = wt.state()
	}
	w.snapMu.Lock()
	defer w.snapMu.Unlock()
	if w.snap != nil && vers == w.snapVers {
		return w.snap
	}
	w.snap, w.snapVers = assemble(data), vers
	return w.snap
}

// Watch subscribes to snapshots: the channel gets the latest snapshot now
// and after every change of a started list, dropping snapshots a slow
// reader has not taken (it always gets the newest). It is closed when ctx
// ends or the Watcher closes.
func (w *Watcher) Watch(ctx context.Context) <-chan *Snapshot {
	ch := make(chan *Snapshot, 1)
	w.startMu.Lock()
	defer w.startMu.Unlock()
	if w.closed {
		close(ch)
		return ch
	}
	w.snapMu.Lock()
	w.subs[ch] = struct{}{}
	w.snapMu.Unlock()
	offer(ch, w.Latest())
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		select {
		case <-ctx.Done():
		case <-w.ctx.Done():
		}
		w.snapMu.Lock()
		delete(w.subs, ch)
		close(ch)
		w.snapMu.Unlock()
	}()
	return ch
}

// notify hands every subscriber the latest snapshot after a change.
func (w *Watcher) notify() {
	s := w.Latest()
	w.snapMu.Lock()
	defer w.snapMu.Unlock()
	for ch := range w.subs {
		offer(ch, s)
	}
}

// offer puts s in ch, replacing a snapshot not taken yet.
func offer(ch chan *Snapshot, s *Snapshot) {
	for {
		select {
		case ch <- s:
			return
		default:
		}
		select {
		case <-ch:
		default:
		}
	}
}

// assemble makes a snapshot of the watches' data.
func assemble(data [numLists]any) *Snapshot {
	s := &Snapshot{Taken: time.Now()}
	s.Nodes, _ = data[Nodes].([]*api.NodeListStub)
	s.Allocs, _ = data[Allocs].([]*api.AllocationListStub)
	s.Pools, _ = data[Pools].([]*api.NodePool)
	s.Finished, _ = data[Finished].([]*api.AllocationListStub)
	if b, ok := data[Blocked].(blockedData); ok {
		s.Blocked, s.Specs = b.evals, b.specs
	}
	if j, ok := data[Jobs].(jobsData); ok {
		s.Jobs, s.Gangs = j.jobs, j.gangs
	}
	return s
}
