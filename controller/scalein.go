package controller

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/controller/consolidate"
	"github.com/nomad-gpu/nomad-gpu/nomadview"
)

// Scale-in by consolidation. With binpacking, a burst node with one small
// task left is never empty, so an autoscaler that removes only empty
// nodes keeps it, at on-demand prices, for as long as work trickles in.
// Work that checkpoints costs its commit to move, not its progress: when
// no queued allocation could use a node of a scale-in pool for Quiet, the
// move module moves the movable work off the least loaded one onto the
// others' free GPUs (consolidate.Empty; every allocation on it must be
// movable, so non-movable work is waited out, never stopped), holds it
// ineligible meanwhile, and once it runs nothing marks it with a drain
// whose meta carries contract.DrainMetaScaleIn. The APM counts such nodes
// (nodes_removable), gpu-queue's removable check scales the pool in by
// them at once, and the target's empty-node selection removes exactly
// them: the only empty nodes of a pool the module consolidates. A node
// the queue comes to want again, or that the autoscaler has not removed
// within Wait (a pool at its minimum), takes work again.

// ScaleInConfig bounds scale-in by consolidation; no Groups: off.
type ScaleInConfig struct {
	// Groups are the nodes whose surplus is emptied: each the node group
	// one scaling policy's target removes from.
	Groups []NodeGroup
	// Quiet is how long no queued allocation could use a node before it
	// may be emptied (and again after it took work back).
	Quiet time.Duration
	// MinNodes is the schedulable GPU nodes a group keeps: set it to the
	// scaling policy's min, so no node is emptied that the autoscaler
	// would not remove.
	MinNodes int
	// Wait is the longest an emptied node waits for the autoscaler to
	// remove it before it takes work again.
	Wait time.Duration
}

// NodeGroup is the nodes of a node pool, and of a node class where Class
// is set: what one scaling policy's target adds and removes.
type NodeGroup struct{ Pool, Class string }

// Has says whether n is of the group.
func (g NodeGroup) Has(n *api.NodeListStub) bool {
	return n.NodePool == g.Pool && (g.Class == "" || n.NodeClass == g.Class)
}

func (g NodeGroup) String() string {
	if g.Class == "" {
		return g.Pool
	}
	return g.Pool + "/" + g.Class
}

// scaleInNode says whether n is of a group whose nodes the module empties.
func (m *Mover) scaleInNode(n *api.NodeListStub) bool {
	return slices.ContainsFunc(m.cfg.ScaleIn.Groups, func(g NodeGroup) bool { return g.Has(n) })
}

// noteWanted keeps, for each GPU node of a scale-in group, the last time
// a queued allocation could use it (first seen: the time it was first
// seen, so a new leader waits Quiet too).
func (m *Mover) noteWanted(now time.Time, snap *nomadview.Snapshot) {
	if len(m.cfg.ScaleIn.Groups) == 0 {
		return
	}
	if m.wanted == nil {
		m.wanted = map[string]time.Time{}
	}
	queued := snap.QueuedGroups()
	seen := map[string]bool{}
	for _, n := range snap.Nodes {
		if n == nil || !m.scaleInNode(n) || len(nodeGPUs(n)) == 0 {
			continue
		}
		seen[n.ID] = true
		if _, ok := m.wanted[n.ID]; !ok || anyCouldUse(queued, n) {
			m.wanted[n.ID] = now
		}
	}
	for id := range m.wanted {
		if !seen[id] {
			delete(m.wanted, id)
		}
	}
}

// anyCouldUse says whether one of the queued groups could use node n.
func anyCouldUse(queued []nomadview.QueuedGroup, n *api.NodeListStub) bool {
	return slices.ContainsFunc(queued, func(q nomadview.QueuedGroup) bool { return couldUse(q, n) })
}

// couldUse says whether a queued group could be placed on node n were n
// free: its pool and a datacenter pattern match, and it asks for a GPU
// device the node has, or for MPS shares or MIG instances, which the
// layouts can make of any of its GPUs.
func couldUse(q nomadview.QueuedGroup, n *api.NodeListStub) bool {
	if q.Pool != "all" && q.Pool != n.NodePool ||
		!slices.ContainsFunc(q.Datacenters, func(p string) bool { return nomadview.DatacenterMatch(p, n.Datacenter) }) {
		return false
	}
	for _, a := range q.Asks {
		if !nomadview.IsGPUAsk(a.Device) {
			continue
		}
		if a.Device.Type != contract.SliceGPU {
			return true
		}
		if slices.ContainsFunc(nodeGPUs(n), func(d nomadview.DeviceSpec) bool { return a.Device.Compatible(d) }) {
			return true
		}
	}
	return false
}

// nodeGPUs are the node's whole-GPU device groups of ours.
func nodeGPUs(n *api.NodeListStub) []nomadview.DeviceSpec {
	if n.NodeResources == nil {
		return nil
	}
	var out []nomadview.DeviceSpec
	for _, d := range n.NodeResources.Devices {
		if d != nil && d.Vendor == contract.Vendor && d.Type == contract.SliceGPU {
			out = append(out, nomadview.DeviceSpec{Vendor: d.Vendor, Type: d.Type, Name: d.Name})
		}
	}
	return out
}

// ScaleIn plans the emptying of one node of a scale-in group: a group of
// more schedulable GPU nodes than MinNodes, whose candidates no queued
// allocation could use for Quiet and that run nothing but whole-GPU
// allocations; the plan moves every allocation of one of them onto the
// others (consolidate.Empty). False while a consolidation or a hold is
// under way, or when no node can be emptied. Nodes in relaying are
// neither emptied nor given moved work.
func (m *Mover) ScaleIn(ctx context.Context, now time.Time, v View, l *Ledger, specs JobSpecs, relaying map[string]bool) (consolidate.Plan, bool) {
	if len(m.cfg.ScaleIn.Groups) == 0 || m.hold != nil || m.pending != nil {
		return consolidate.Plan{}, false
	}
	var allocs []consolidate.Alloc
	for _, g := range m.cfg.ScaleIn.Groups {
		nodes := groupWholeGPUs(v.Snap, g, relaying)
		if len(nodes) <= m.cfg.ScaleIn.MinNodes {
			continue
		}
		if allocs == nil {
			allocs = m.movable(ctx, now, v, l, specs)
		}
		p, ok := consolidate.Empty(nodes, allocs, m.quietNodes(now, v.Snap, nodes, allocs))
		if !ok {
			continue
		}
		if why := m.overBudget(now, p); why != "" {
			m.log.Debug("no node emptied for scale-in", "group", g.String(), "plan", p.String(), "why", why)
			continue
		}
		return p, true
	}
	return consolidate.Plan{}, false
}

// quietNodes are the IDs of the nodes no queued allocation could use for
// Quiet whose work is whole-GPU allocations only (a share, a MIG
// instance or a task without a GPU is not moved, so it pins its node).
func (m *Mover) quietNodes(now time.Time, snap *nomadview.Snapshot, nodes []consolidate.Node, allocs []consolidate.Alloc) []string {
	whole := map[string]bool{}
	for _, a := range allocs {
		whole[a.ID] = true
	}
	pinned := map[string]bool{} // by node: work other than whole-GPU allocations
	for _, a := range snap.Allocs {
		if a != nil && !whole[a.ID] && nomadview.IsWork(a) {
			pinned[a.NodeID] = true
		}
	}
	var out []string
	for _, n := range nodes {
		if w, ok := m.wanted[n.ID]; ok && now.Sub(w) >= m.cfg.ScaleIn.Quiet && !pinned[n.ID] {
			out = append(out, n.ID)
		}
	}
	return out
}

// groupWholeGPUs are the schedulable GPU nodes of a group, but those in
// skip, with their free whole GPUs.
func groupWholeGPUs(snap *nomadview.Snapshot, g NodeGroup, skip map[string]bool) []consolidate.Node {
	held := snap.HeldIDs()
	var out []consolidate.Node
	for _, n := range snap.Nodes {
		if n == nil || skip[n.ID] || !g.Has(n) || !nomadview.Schedulable(n) || len(nodeGPUs(n)) == 0 {
			continue
		}
		out = append(out, wholeGPUNode(n, held[n.ID]))
	}
	return out
}

// wholeGPUNode is a node and its free whole GPUs: healthy, held by no
// pending or running allocation.
func wholeGPUNode(n *api.NodeListStub, held map[string]bool) consolidate.Node {
	node := consolidate.Node{ID: n.ID, Name: n.Name}
	for _, d := range n.NodeResources.Devices {
		if d == nil || d.Vendor != contract.Vendor || d.Type != contract.SliceGPU {
			continue
		}
		for _, in := range d.Instances {
			if in != nil && (nomadview.FreeRule{}).Free(in.Healthy, held[in.ID]) {
				node.Free++
			}
		}
	}
	return node
}

// removalStep is what a hold for removal does on a tick.
type removalStep int

const (
	removalWait   removalStep = iota // nothing yet
	removalGone                      // the node is gone or down: forget the hold
	removalMark                      // it runs nothing: mark it for removal
	removalGiveUp                    // it takes work again (why says why)
)

// nextRemovalStep decides a hold for removal's tick: forgotten once its
// node is gone (or down: its instance is being terminated); left alone
// while the autoscaler drains it; given up when a queued allocation
// could use the node now or wait has passed; marked once the moved jobs
// run elsewhere and it runs nothing.
func nextRemovalStep(now time.Time, h Hold, snap *nomadview.Snapshot, wait time.Duration) (removalStep, string) {
	n := snap.Node(h.Node)
	switch {
	case n == nil || n.Status == api.NodeStatusDown:
		return removalGone, ""
	case n.Drain && !nomadview.EmptiedForRemoval(n):
		return removalWait, "" // the autoscaler drains it for removal
	case anyCouldUse(snap.QueuedGroups(), n):
		return removalGiveUp, "a queued allocation could use it"
	case now.Sub(h.Since) >= wait:
		return removalGiveUp, fmt.Sprintf("the autoscaler did not remove it within %s", wait)
	case !h.Marked && movedPlaced(h, snap) && len(snap.WorkOn(h.Node)) == 0:
		return removalMark, ""
	}
	return removalWait, ""
}

// scaleInHold follows a node held for removal (nextRemovalStep); true
// when the hold changed.
func (c *Controller) scaleInHold(ctx context.Context, now time.Time, snap *nomadview.Snapshot) bool {
	h := c.mover.Held()
	if h == nil || !h.Remove {
		return false
	}
	step, why := nextRemovalStep(now, *h, snap, c.cfg.Moves.ScaleIn.Wait)
	switch step {
	case removalGone:
		c.log.Info("decision", "kind", "scale-in-removed", "reason", fmt.Sprintf("node %s, emptied for removal, is gone", h.NodeName))
		c.mover.Released()
		return true
	case removalGiveUp:
		return c.endScaleIn(ctx, now, *h, snap.Node(h.Node).Drain, why)
	case removalMark:
		return c.markRemovable(ctx, h)
	}
	return false
}

// markRemovable marks an emptied node with a drain carrying
// contract.DrainMetaScaleIn. The drain has no deadline (the node runs
// nothing, and a deadline would stop what might still be there) and
// leaves system jobs, as the autoscaler's drain does.
func (c *Controller) markRemovable(ctx context.Context, h *Hold) bool {
	why := fmt.Sprintf("emptied by nomad-gpu controller for scale-in at %s", h.Since.UTC().Format(time.RFC3339))
	opts := &api.DrainOptions{DrainSpec: &api.DrainSpec{Deadline: 0, IgnoreSystemJobs: true}, Meta: map[string]string{contract.DrainMetaScaleIn: why}}
	if _, err := c.api.Nodes().UpdateDrainOpts(h.Node, opts, (&api.WriteOptions{}).WithContext(ctx)); err != nil {
		if ctx.Err() == nil {
			c.log.Warn("emptied node not marked for removal; trying on the next tick", "node", h.NodeName, "error", err)
		}
		return false
	}
	h.Marked = true
	c.log.Info("decision", "kind", "scale-in-marked", "reason", fmt.Sprintf("node %s runs nothing: marked for removal (%s)", h.NodeName, contract.DrainMetaScaleIn))
	return true
}

// endScaleIn makes a node held for removal eligible again (ending the
// mark's drain where it still runs: Nomad keeps a draining node
// ineligible); it waits Quiet before it may be emptied again.
func (c *Controller) endScaleIn(ctx context.Context, now time.Time, h Hold, draining bool, why string) bool {
	wo := (&api.WriteOptions{}).WithContext(ctx)
	var err error
	if draining {
		_, err = c.api.Nodes().UpdateDrainOpts(h.Node, &api.DrainOptions{MarkEligible: true}, wo)
	} else {
		_, err = c.api.Nodes().ToggleEligibility(h.Node, true, wo)
	}
	if err != nil && !nomadview.IsNotFound(err) {
		if ctx.Err() == nil {
			c.log.Warn("node held for removal not made eligible again; trying on the next tick", "node", h.NodeName, "error", err)
		}
		return false
	}
	c.log.Info("decision", "kind", "scale-in-over", "reason", fmt.Sprintf("node %s takes work again: %s", h.NodeName, why))
	c.mover.wanted[h.Node] = now
	c.mover.Released()
	return true
}

// movedPlaced says whether every job moved off a held node has an
// allocation created after the hold, pending or running, on another node
// (for a GPU hold, anywhere: the held GPU takes none).
func movedPlaced(h Hold, snap *nomadview.Snapshot) bool {
	placed := map[string]bool{}
	for _, a := range snap.Allocs {
		if (a.NodeID != h.Node || h.GPU != "") && time.Unix(0, a.CreateTime).After(h.Since) &&
			(a.ClientStatus == api.AllocClientStatusPending || a.ClientStatus == api.AllocClientStatusRunning) {
			placed[a.Namespace+"/"+a.JobID] = true
		}
	}
	for _, j := range h.Moved {
		if !placed[j] {
			return false
		}
	}
	return true
}
