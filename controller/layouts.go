package controller

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/contract/gpulayout"
	"github.com/nomad-gpu/nomad-gpu/controller/layoutplan"
	"github.com/nomad-gpu/nomad-gpu/internal/fgd"
	"github.com/nomad-gpu/nomad-gpu/nomadview"
)

// A GPU's layout fixed in its device plugin's config strands capacity
// whenever the queue's mix differs from the one it was made for. The
// layout module asks free GPUs for the layouts the queue needs
// (layoutplan.Plan) by writing node metadata (contract.MetaLayoutPrefix);
// each node's device plugin applies them once no allocation holds the
// GPU and publishes how far along it is in the GPU's layout group, which
// the node list the watch already reads carries back. So the module
// costs no read, and one write per node and round that changes
// something.

// LayoutChange is the last layout the leader asked a GPU for: when, from
// what, to what and why. It keeps a GPU from flipping back and forth
// (layoutplan.Bounds.MinInterval) and tells people why it is what it is.
type LayoutChange struct {
	Node     string    `json:"node"`
	NodeName string    `json:"node_name"`
	At       time.Time `json:"at"`
	From     string    `json:"from"`
	To       string    `json:"to"`
	Reason   string    `json:"reason"`
}

// askTrust is how long a layout the leader wrote counts as the GPU's
// desired one before its plugin echoes it: a node's update reaches the
// servers 5–10 s after its plugin changed (Nomad batches them), and the
// plugin reads its metadata every few seconds.
const askTrust = time.Minute

// asked is a layout the leader wrote and the plugin has not yet applied.
type asked struct {
	layout string
	at     time.Time
	// timed: its time to applied is measured (a cancel's is not: the GPU
	// already offers it).
	timed bool
}

// Layouts is the layout module. Its maps are the leader's own and used
// by its loop only: no lock.
type Layouts struct {
	Bounds layoutplan.Bounds
	// changes and asked are by LayoutKey; changes are loaded when a
	// replica starts to lead.
	changes map[string]LayoutChange
	asked   map[string]asked
	log     hclog.Logger
	metrics *Metrics
}

// NewLayouts is the module with its history.
func NewLayouts(b layoutplan.Bounds, history map[string]LayoutChange, log hclog.Logger, m *Metrics) *Layouts {
	if history == nil {
		history = map[string]LayoutChange{}
	}
	return &Layouts{Bounds: b, changes: history, asked: map[string]asked{}, log: log, metrics: m}
}

// Step plans one round on a snapshot and returns the GPUs to relay; the
// caller writes them and Records each write that succeeded. The GPUs of
// node reserved (the move module freed it for a queued multi-GPU
// allocation, Mover.Reserved; "" for none) are left as they are: relaid
// for the fractional queue, a freed whole GPU would undo the move.
func (l *Layouts) Step(now time.Time, snap *nomadview.Snapshot, reserved string) []layoutplan.Decision {
	in := layoutplan.Input{Bounds: l.Bounds, Now: now}
	var cancels []layoutplan.Decision
	for _, g := range snap.GPULayouts() {
		pg, ok := l.plannerGPU(now, g)
		if !ok {
			continue
		}
		if reserved != "" && pg.Node == reserved {
			pg.Pinned = true
		}
		if d, stuck := cancelStuck(pg, g); stuck {
			cancels = append(cancels, d)
			pg.Desired = pg.Current
		}
		in.GPUs = append(in.GPUs, pg)
	}
	if len(in.GPUs) == 0 {
		return nil
	}
	in.Queue = layoutQueue(snap)
	in.Mix = layoutMix(snap, in.Queue)
	return append(cancels, layoutplan.Plan(in)...)
}

// Relaying is the nodes with a GPU whose layout is changing: asked by
// this leader and not yet applied, or published as desired and not
// current (a GPU in error, which keeps its layout, is not changing).
// Their free whole GPUs are in flux, so the move module frees none of
// them. Nil on a nil Layouts (layouts off).
func (l *Layouts) Relaying(snap *nomadview.Snapshot) map[string]bool {
	if l == nil {
		return nil
	}
	out := map[string]bool{}
	for _, g := range snap.GPULayouts() {
		a, asked := l.asked[LayoutKey(g.Node.ID, g.UUID)]
		pending := g.Desired != "" && g.Desired != g.Current && g.State != contract.LayoutError
		if asked && a.layout != g.Current || pending || g.State == contract.LayoutDraining {
			out[g.Node.ID] = true
		}
	}
	return out
}

// cancelStuck asks a GPU back to its current layout when allocations took
// it after it was asked for another (Nomad placed them before the device
// plugin drained it): the relayout would wait for them to end, and the
// queue it was for with it. The planner then serves that queue with
// another GPU, this round.
func cancelStuck(pg layoutplan.GPU, g nomadview.GPULayout) (layoutplan.Decision, bool) {
	if pg.Pinned || pg.Desired.IsZero() || pg.Desired.Equal(pg.Current) || len(g.Held) == 0 || g.State != contract.LayoutHeld {
		return layoutplan.Decision{}, false
	}
	return layoutplan.Decision{
		Node: pg.Node, NodeName: pg.NodeName, UUID: pg.UUID, Index: pg.Index, From: pg.Desired, To: pg.Current,
		Reason: fmt.Sprintf("allocations took the GPU (%s) before it was relaid; asked back to its layout", strings.Join(g.Held, ", ")),
		Cancel: true,
	}, true
}

// Record notes a decision written to its node's metadata: the GPU's
// desired layout until its plugin echoes it, and its last change.
func (l *Layouts) Record(now time.Time, d layoutplan.Decision) {
	l.asked[LayoutKey(d.Node, d.UUID)] = asked{layout: d.To.String(), at: now, timed: !d.Cancel}
	l.changes[LayoutKey(d.Node, d.UUID)] = LayoutChange{Node: d.Node, NodeName: d.NodeName, At: now, From: d.From.String(), To: d.To.String(), Reason: d.Reason}
	kind := string(d.To.Kind)
	if d.Cancel {
		kind = "cancel"
	}
	l.metrics.layoutChange(kind)
}

// NodeHistory is the last change of each GPU of a node, by UUID.
func (l *Layouts) NodeHistory(node string) map[string]LayoutChange {
	out := map[string]LayoutChange{}
	for key, c := range l.changes {
		if n, uuid, _ := strings.Cut(key, "/"); n == node {
			out[uuid] = c
		}
	}
	return out
}

// LayoutKey names a GPU of a node in the module's maps and in
// Status.Layouts: by node too, since nothing but the hardware makes GPU
// UUIDs unique (simulated nodes of one seed share them).
func LayoutKey(node, uuid string) string { return node + "/" + uuid }

// plannerGPU is a published GPU as the planner sees it: a layout the
// leader asked for counts as desired until the plugin echoes it, and the
// time it took to be applied is measured. A GPU of a node that takes no
// new work, or whose layout does not read, is left out (kept as it is).
func (l *Layouts) plannerGPU(now time.Time, g nomadview.GPULayout) (layoutplan.GPU, bool) {
	if !nomadview.Schedulable(g.Node) {
		return layoutplan.GPU{}, false
	}
	current, err := gpulayout.Parse(g.Current)
	if err != nil {
		l.log.Debug("GPU layout does not read; GPU left as it is", "node", g.Node.Name, "gpu", g.UUID, "error", err)
		return layoutplan.GPU{}, false
	}
	desiredText := l.desired(now, g)
	var desired gpulayout.Layout
	if desiredText != "" {
		if desired, err = gpulayout.Parse(desiredText); err != nil {
			// An operator's pin that does not read: the plugin says so in
			// its error attribute; the GPU stays as it is.
			desired = current
		}
	}
	if g.State == contract.LayoutError && !g.Pinned {
		// The plugin cannot make what was asked: leave the GPU alone
		// rather than ask again each round (top shows the error).
		desired = current
		g.Pinned = true
	}
	pg := layoutplan.GPU{
		Node: g.Node.ID, NodeName: g.Node.Name, Pool: g.Node.NodePool, UUID: g.UUID, Index: g.Index,
		MIGMode: g.MIGMode, Current: current, Desired: desired, Pinned: g.Pinned, Held: g.Held,
		Unhealthy: g.Unhealthy, Fault: g.Fault,
	}
	for _, p := range g.Profiles {
		pg.Profiles = append(pg.Profiles, layoutplan.Profile{Name: p.Name, Slices: p.Slices, Max: p.Max})
	}
	if c, ok := l.changes[LayoutKey(g.Node.ID, g.UUID)]; ok {
		pg.Changed = c.At
	}
	return pg, true
}

// desired is the GPU's desired layout: what the leader asked, until the
// plugin's echo shows it or askTrust passes; then the echo. An ask the
// plugin shows applied is timed.
func (l *Layouts) desired(now time.Time, g nomadview.GPULayout) string {
	key := LayoutKey(g.Node.ID, g.UUID)
	a, ok := l.asked[key]
	switch {
	case !ok:
		return g.Desired
	case g.Current == a.layout && g.State == contract.LayoutReady:
		if a.timed {
			l.metrics.layoutApplied(now.Sub(a.at))
		}
		delete(l.asked, key)
		return g.Desired
	case g.Desired == a.layout || now.Sub(a.at) > askTrust:
		if g.Desired != a.layout {
			l.log.Warn("a GPU layout asked is not followed: is its device plugin's layout block on?", "node", g.Node.Name, "gpu", g.UUID, "asked", a.layout, "published", g.Desired)
			delete(l.asked, key)
		}
		return g.Desired
	}
	return a.layout
}

// layoutQueue is the GPU queue as the planner reads it: one ask per GPU
// device request of each queued group, oldest group first.
func layoutQueue(snap *nomadview.Snapshot) []layoutplan.Ask {
	groups := snap.QueuedGroups()
	slices.SortStableFunc(groups, func(a, b nomadview.QueuedGroup) int { return a.Since.Compare(b.Since) })
	var out []layoutplan.Ask
	for _, q := range groups {
		for _, a := range q.Asks {
			if !nomadview.IsGPUAsk(a.Device) || a.Count <= 0 {
				continue
			}
			out = append(out, layoutplan.Ask{
				Kind: nomadview.SliceKind(a.Device), Count: a.Count, Allocs: q.Count, Priority: q.Priority,
				Pool: q.Pool, Job: q.Namespace + "/" + q.JobID + "/" + q.Group,
			})
		}
	}
	return out
}

// layoutMix is the workload's mix of request shapes, what fragmentation
// is measured against: what running allocations hold and what the queue
// asks, each allocation's request counted once.
func layoutMix(snap *nomadview.Snapshot, queue []layoutplan.Ask) []fgd.Shape {
	type shape struct {
		kind  string
		count int
	}
	n := map[shape]int{}
	total := 0
	for _, hs := range snap.HeldSlices() {
		for _, h := range hs {
			if nomadview.IsGPUAsk(h.Device) {
				n[shape{nomadview.SliceKind(h.Device), len(h.IDs)}]++
				total++
			}
		}
	}
	for _, a := range queue {
		n[shape{a.Kind, a.Count}] += a.Allocs
		total += a.Allocs
	}
	out := make([]fgd.Shape, 0, len(n))
	for s, c := range n {
		out = append(out, fgd.Shape{Kind: s.kind, Count: s.count, Weight: float64(c) / float64(total)})
	}
	slices.SortFunc(out, func(a, b fgd.Shape) int { return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Count, b.Count)) })
	return out
}

// relayout runs the layout module and writes its decisions: one
// metadata write per node (each write costs the node a register and its
// jobs an evaluation), then the node's history.
func (c *Controller) relayout(ctx context.Context, now time.Time, snap *nomadview.Snapshot) {
	if c.layouts == nil {
		return
	}
	byNode := map[string][]layoutplan.Decision{}
	for _, d := range c.layouts.Step(now, snap, c.mover.Reserved()) {
		byNode[d.Node] = append(byNode[d.Node], d)
	}
	for _, node := range slices.Sorted(maps.Keys(byNode)) {
		ds := byNode[node]
		meta := map[string]*string{}
		for _, d := range ds {
			to := d.To.String()
			meta[contract.MetaLayoutPrefix+d.UUID] = &to
		}
		_, err := c.api.Nodes().Meta().Apply(&api.NodeMetaApplyRequest{NodeID: node, Meta: meta}, (&api.QueryOptions{}).WithContext(ctx))
		if err != nil {
			if ctx.Err() == nil {
				c.log.Warn("GPU layouts not written; the next round decides again", "node", ds[0].NodeName, "error", err)
			}
			continue
		}
		for _, d := range ds {
			c.layouts.Record(now, d)
			c.log.Info("decision", "kind", "relayout", "node", d.NodeName, "gpu", d.UUID, "reason", d.String())
		}
		if err := putLayoutHistory(ctx, c.api, c.cfg.Namespace, node, c.layouts.NodeHistory(node)); err != nil && ctx.Err() == nil {
			c.log.Warn("layout history not written", "node", ds[0].NodeName, "error", err)
		}
	}
}
