package topview

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/controller"
	"github.com/nomad-gpu/nomad-gpu/nomadview"
)

// Defaults of a Source's knobs.
const (
	DefaultWorkers      = 8
	DefaultStatsTimeout = 5 * time.Second
)

// Source gives `top` its frames: the latest snapshot of a
// nomadview.Watcher (the same read model the APM answers from) and, per
// frame, each shown ready node's host stats (Workers at a time, each
// bounded by StatsTimeout; a node whose stats fail is shown without them).
//
// The token needs node:read and read-job in the namespaces read, and node
// pool read to filter by a pool that no node is in.
type Source struct {
	Client  *api.Client
	Watcher *nomadview.Watcher
	Workers int
	// StatsTimeout bounds one node's stats read.
	StatsTimeout time.Duration
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	// History reads the finished allocations (the watcher's Finished
	// list) the forecasts learn from; a failed read of them only makes
	// the forecasts unknown.
	History bool
	// SkipStats reads no host stats: for a forecast (Forecast), which
	// needs none, without a call to every node.
	SkipStats bool
	// ControllerNamespace, when set, is where the controller's leader
	// lock is: each frame reads the controller's status (its leader, the
	// priority ledger's raises). A failed read only says so.
	ControllerNamespace string
}

// lists are what every frame needs listed.
var lists = []nomadview.List{nomadview.Nodes, nomadview.Allocs, nomadview.Blocked, nomadview.Jobs}

// View reads the cluster and builds its view.
func (r *Source) View(ctx context.Context, f Filter) (*View, error) {
	in, err := r.Read(ctx, f)
	if err != nil {
		return nil, err
	}
	return Build(in), nil
}

// Read makes one frame's input. It fails when a list has never answered
// well, or when f names a node pool or nodes that do not exist
// (CheckFilter); a node's stats failing only marks that node.
func (r *Source) Read(ctx context.Context, f Filter) (*Input, error) {
	if err := r.Watcher.Answer(ctx, lists...); err != nil {
		return nil, err
	}
	historyErr := ""
	if r.History {
		if err := r.Watcher.Answer(ctx, nomadview.Finished); err != nil {
			historyErr = errorText(err)
		}
	}
	s := r.Watcher.Latest()
	if err := CheckFilter(f, s.Nodes, func() ([]string, error) { return r.pools(ctx) }); err != nil {
		return nil, err
	}
	in := &Input{Snapshot: s, Filter: f, Stats: map[string]NodeStats{}, HistoryError: historyErr}
	if !r.SkipStats {
		r.readStats(ctx, in)
	}
	if r.ControllerNamespace != "" {
		st, err := controller.ReadStatus(ctx, r.Client, r.ControllerNamespace, time.Now())
		if err != nil {
			in.ControllerError = errorText(err)
		} else {
			in.Controller = &st
		}
	}
	in.Now = time.Now()
	if r.Now != nil {
		in.Now = r.Now()
	}
	return in, nil
}

// pools are the node pools' names.
func (r *Source) pools(ctx context.Context) ([]string, error) {
	if err := r.Watcher.Answer(ctx, nomadview.Pools); err != nil {
		return nil, err
	}
	var names []string
	for _, p := range r.Watcher.Latest().Pools {
		if p != nil {
			names = append(names, p.Name)
		}
	}
	return names, nil
}

// readStats reads the host stats of every shown, ready node with nvidia
// devices; other shown nodes get the reason they have none.
func (r *Source) readStats(ctx context.Context, in *Input) {
	timeout := r.StatsTimeout
	if timeout <= 0 {
		timeout = DefaultStatsTimeout
	}
	var ids []string
	for _, n := range in.Nodes {
		if n == nil || !in.Filter.matchNode(n) {
			continue
		}
		switch {
		case n.Status != api.NodeStatusReady:
			in.Stats[n.ID] = NodeStats{Err: fmt.Errorf("node is %s", n.Status)}
		case !hasNvidiaDevices(n):
			in.Stats[n.ID] = NodeStats{Err: errors.New("no GPU devices")}
		default:
			ids = append(ids, n.ID)
		}
	}
	workers := r.Workers
	if workers <= 0 {
		workers = DefaultWorkers
	}
	for i, st := range nomadview.ReadNodeStats(ctx, r.Client, ids, workers, timeout, nil) {
		in.Stats[ids[i]] = st
	}
}

func hasNvidiaDevices(n *api.NodeListStub) bool {
	if n.NodeResources == nil {
		return false
	}
	for _, d := range n.NodeResources.Devices {
		if d != nil && d.Vendor == contract.Vendor && len(d.Instances) > 0 {
			return true
		}
	}
	return false
}
