package devicefp

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"
)

// Nomad's device plugin API has no call for a device's release: a plugin
// learns of a reservation (Reserve) but never of its end. Which devices are
// allocated, and to whom, is read from the local agent's API instead, with a
// blocking query on the node's allocations, so a change shows at once and a
// quiet node costs one request a minute.

// allocUse is one task of an allocation that holds a device.
type allocUse struct {
	namespace, job, group, allocID, task string
}

// allocView is what the plugin knows of the node's device allocations.
type allocView struct {
	known    bool
	byDevice map[string][]allocUse // device ID → the tasks holding it
	// fetched is when the request that read this view began (or a later
	// one's, for a view at least as new): every allocation the servers
	// held then is in it. The layout manager switches a GPU only on a view
	// fetched after it began to drain the GPU.
	fetched time.Time
}

// Timings of the allocation watch; variables for tests.
var (
	allocWaitTime = time.Minute // a blocking query's longest wait
	allocPace     = time.Second // at least this between two queries
	allocRetryMin = 5 * time.Second
	allocRetryMax = time.Minute
)

type allocWatcher struct {
	api  *api.Client
	node string // the node's name, to find it by when the agent does not say
	log  hclog.Logger
	// onChange, if set, is called (without mu held) when the devices held
	// change.
	onChange func()

	// mu guards view, lastErr, nodeID and index: the blocking watch
	// (run) and the layout manager's reads (fetchNow) both set them.
	mu      sync.Mutex
	view    allocView
	lastErr string
	nodeID  string // "" until found
	index   uint64 // the Raft index of view
}

func newAllocWatcher(cfg NomadAPIConfig, node string, logger hclog.Logger) (*allocWatcher, error) {
	c, err := api.NewClient(&api.Config{
		Address:  cfg.Address,
		SecretID: cfg.Token,
		// Past a blocking query's wait and Nomad's jitter on it (1/16).
		HttpClient: &http.Client{Timeout: allocWaitTime + 30*time.Second},
	})
	if err != nil {
		return nil, fmt.Errorf("nomad.address %q: %w", cfg.Address, err)
	}
	return &allocWatcher{api: c, node: node, log: logger}, nil
}

func (w *allocWatcher) current() allocView {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.view
}

func (w *allocWatcher) fail(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.view, w.index = allocView{}, 0
	if msg := err.Error(); msg != w.lastErr {
		w.log.Warn("device allocations unknown: cannot read this node's allocations from Nomad", "error", err)
		w.lastErr = msg
	}
}

// set takes the allocations read at index by a request begun at start.
// A view at least as new as the one held keeps the later of the two start
// times; an older index (the cluster's state started over, or a reply that
// crossed a newer one) replaces it with its own.
func (w *allocWatcher) set(allocs []*api.Allocation, index uint64, start time.Time) allocView {
	byDevice := devicesHeld(allocs)
	w.mu.Lock()
	if w.lastErr != "" {
		w.log.Info("device allocations known again")
		w.lastErr = ""
	}
	prev := w.view
	fetched := start
	if prev.known && index >= w.index && prev.fetched.After(start) {
		fetched = prev.fetched
	}
	w.view = allocView{known: true, byDevice: byDevice, fetched: fetched}
	w.index = index
	v := w.view
	w.mu.Unlock()
	changed := !prev.known || !maps.EqualFunc(prev.byDevice, byDevice, slices.Equal)
	if changed && w.onChange != nil {
		w.onChange()
	}
	return v
}

// run follows the node's allocations until ctx ends.
func (w *allocWatcher) run(ctx context.Context) {
	var index uint64
	backoff := allocRetryMin
	for ctx.Err() == nil {
		nodeID, err := w.nodeIDOf(ctx)
		if err == nil {
			start := time.Now()
			q := (&api.QueryOptions{WaitIndex: index, WaitTime: allocWaitTime}).WithContext(ctx)
			var allocs []*api.Allocation
			var meta *api.QueryMeta
			allocs, meta, err = w.api.Nodes().Allocations(nodeID, q)
			if err == nil {
				if meta.LastIndex >= index {
					index = meta.LastIndex
				} else {
					index = 0 // the index went back (a new cluster state): start over
				}
				w.set(allocs, meta.LastIndex, start)
				backoff = allocRetryMin
				sleep(ctx, allocPace)
				continue
			}
			if ctx.Err() != nil {
				return
			}
			w.forgetNodeOn404(err)
			index = 0
		}
		w.fail(err)
		sleep(ctx, backoff)
		backoff = min(backoff*2, allocRetryMax)
	}
}

// fetchNow reads the node's allocations at once, without blocking, and
// keeps them as the view (the blocking watch may sit on its query for a
// minute).
func (w *allocWatcher) fetchNow(ctx context.Context) (allocView, error) {
	nodeID, err := w.nodeIDOf(ctx)
	if err != nil {
		return allocView{}, err
	}
	start := time.Now()
	allocs, meta, err := w.api.Nodes().Allocations(nodeID, (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		w.forgetNodeOn404(err)
		return allocView{}, err
	}
	return w.set(allocs, meta.LastIndex, start), nil
}

// nodeIDOf is this node's ID, found once.
func (w *allocWatcher) nodeIDOf(ctx context.Context) (string, error) {
	w.mu.Lock()
	id := w.nodeID
	w.mu.Unlock()
	if id != "" {
		return id, nil
	}
	id, err := w.findNode(ctx)
	if err != nil {
		return "", err
	}
	w.mu.Lock()
	w.nodeID = id
	w.mu.Unlock()
	return id, nil
}

// forgetNodeOn404 drops the node's ID when Nomad does not know it: the
// node registered again under a new ID.
func (w *allocWatcher) forgetNodeOn404(err error) {
	var re api.UnexpectedResponseError
	if errors.As(err, &re) && re.StatusCode() == http.StatusNotFound {
		w.mu.Lock()
		w.nodeID = ""
		w.mu.Unlock()
	}
}

// readMeta is the node's metadata (static and dynamic, merged) as the local
// agent holds it: dynamic metadata reaches the agent at once, the servers
// up to 10s later.
func (w *allocWatcher) readMeta(ctx context.Context) (map[string]string, error) {
	resp, err := w.api.Nodes().Meta().Read("", (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return nil, err
	}
	return resp.Meta, nil
}

// findNode is this node's ID: the agent's own, else the node of this name.
func (w *allocWatcher) findNode(ctx context.Context) (string, error) {
	if self, err := w.api.Agent().Self(); err == nil {
		if id := self.Stats["client"]["node_id"]; id != "" {
			return id, nil
		}
	}
	q := (&api.QueryOptions{Filter: fmt.Sprintf("Name == %q", w.node)}).WithContext(ctx)
	nodes, _, err := w.api.Nodes().List(q)
	if err != nil {
		return "", fmt.Errorf("finding node %q: %w", w.node, err)
	}
	var ids []string
	for _, n := range nodes {
		if n.Name == w.node && n.Status != api.NodeStatusDown {
			ids = append(ids, n.ID)
		}
	}
	switch len(ids) {
	case 0:
		return "", fmt.Errorf("no live node is named %q (set metrics.node_name to the Nomad node's name)", w.node)
	case 1:
		return ids[0], nil
	}
	return "", fmt.Errorf("%d live nodes are named %q: %s", len(ids), w.node, strings.Join(ids, ", "))
}

// devicesHeld maps each device ID that a running or pending allocation
// holds to its tasks, in a fixed order.
func devicesHeld(allocs []*api.Allocation) map[string][]allocUse {
	out := map[string][]allocUse{}
	for _, a := range allocs {
		if a == nil || a.ClientTerminalStatus() || a.AllocatedResources == nil {
			continue
		}
		job := a.JobID
		if a.Job != nil && a.Job.Name != nil && *a.Job.Name != "" {
			job = *a.Job.Name
		}
		ns := a.Namespace
		if ns == "" {
			ns = "default"
		}
		for task, tr := range a.AllocatedResources.Tasks {
			if tr == nil {
				continue
			}
			for _, dev := range tr.Devices {
				if dev == nil {
					continue
				}
				for _, id := range dev.DeviceIDs {
					u := allocUse{namespace: ns, job: job, group: a.TaskGroup, allocID: a.ID, task: task}
					if !slices.Contains(out[id], u) {
						out[id] = append(out[id], u)
					}
				}
			}
		}
	}
	for _, us := range out {
		slices.SortFunc(us, func(a, b allocUse) int {
			return strings.Compare(a.allocID+"\x00"+a.task, b.allocID+"\x00"+b.task)
		})
	}
	return out
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
