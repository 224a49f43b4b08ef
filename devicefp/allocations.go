package devicefp

import (
	"context"
	"errors"
	"fmt"
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

	mu      sync.Mutex
	view    allocView
	lastErr string
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

func (w *allocWatcher) set(byDevice map[string][]allocUse, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		w.view = allocView{}
		if msg := err.Error(); msg != w.lastErr {
			w.log.Warn("device allocations unknown: cannot read this node's allocations from Nomad", "error", err)
			w.lastErr = msg
		}
		return
	}
	if w.lastErr != "" {
		w.log.Info("device allocations known again")
		w.lastErr = ""
	}
	w.view = allocView{known: true, byDevice: byDevice}
}

// run follows the node's allocations until ctx ends.
func (w *allocWatcher) run(ctx context.Context) {
	var nodeID string
	var index uint64
	backoff := allocRetryMin
	for ctx.Err() == nil {
		var err error
		if nodeID == "" {
			nodeID, err = w.findNode(ctx)
		}
		if err == nil {
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
				w.set(devicesHeld(allocs), nil)
				backoff = allocRetryMin
				sleep(ctx, allocPace)
				continue
			}
			if ctx.Err() != nil {
				return
			}
			var re api.UnexpectedResponseError
			if errors.As(err, &re) && re.StatusCode() == http.StatusNotFound {
				nodeID, index = "", 0 // the node registered again under a new ID
			}
		}
		w.set(nil, err)
		sleep(ctx, backoff)
		backoff = min(backoff*2, allocRetryMax)
	}
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
