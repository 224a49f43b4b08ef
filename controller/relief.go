package controller

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/controller/consolidate"
	"github.com/nomad-gpu/nomad-gpu/nomadview"
)

// Relief of overloaded MPS GPUs (the platform rule "move work off a GPU
// above 80 % load"). MPS shares divide a GPU's SMs, but clients that all
// turn busy at once still contend for them, while the next GPU's shares
// idle. When an MPS GPU's utilisation (all its clients', as the device
// plugin reports it to Nomad: "Physical GPU utilization") has stayed above
// High for Window, and another MPS GPU of the same node pool is below Low
// with free shares enough, the move module moves the movable client that
// frees the most of the GPU, under the rules and budget of consolidation.
//
// Nomad cannot be told which GPU to place on, and an MPS jobspec's
// affinity prefers the GPU with the most shares in use: the moved client
// would come straight back. So the module holds the GPU, not its node (the
// other GPUs of the node stay placeable): it writes contract.MetaHoldPrefix
// in the node's metadata, the device plugin reports the GPU's instances
// unhealthy, and only once the servers see them so does the module stop
// the client. It ends the hold once the client's job has a new allocation
// (or HoldMax passed). Utilisation is read with Nomad's node stats, every
// Interval, of the nodes whose MPS GPUs have clients only.

// ReliefConfig bounds relief; High 0 turns it off.
type ReliefConfig struct {
	// High and Low are GPU utilisations, percent of its SMs: a GPU above
	// High for Window is overloaded; one below Low may take a client.
	High, Low float64
	Window    time.Duration
	// Interval is how often MPS GPUs' utilisation is read.
	Interval time.Duration
}

// On says relief runs.
func (r ReliefConfig) On() bool { return r.High > 0 }

// gpuLoad is what relief last read of one MPS GPU.
type gpuLoad struct {
	util float64
	// overSince is when it was first read above High, zero when the last
	// reading was not.
	overSince time.Time
}

// mpsClient is one allocation's shares of an MPS GPU.
type mpsClient struct {
	Alloc consolidate.Alloc // GPUs is the shares it holds of this GPU
	// Load is the part of the GPU's SMs its task uses, percent: its
	// utilisation of its shares × their thread percentage.
	Load float64
	stub *api.AllocationListStub
}

// mpsGPU is one MPS GPU as relief sees it.
type mpsGPU struct {
	UUID, Node, NodeName, Pool string
	Util                       float64   // percent of its SMs, all clients
	OverSince                  time.Time // above High since; zero when not
	Shares                     int       // its shares, held or not
	Free                       int       // healthy shares no allocation holds
	// Unplaceable: some share is unhealthy (held, draining, failed): not
	// a GPU to move work to.
	Unplaceable bool
	Clients     []mpsClient
}

// reliefPlan is one client to move off an overloaded GPU, with the GPU
// that shows it can go elsewhere (Nomad picks where).
type reliefPlan struct {
	From, To mpsGPU
	Client   mpsClient
}

func (p reliefPlan) String() string {
	return fmt.Sprintf("GPU %s on %s at %.0f%%: move alloc %s (%s, %.0f%% of the GPU); GPU %s on %s at %.0f%% has %d free shares",
		p.From.UUID, p.From.NodeName, p.From.Util, short(p.Client.Alloc.ID), p.Client.Alloc.Job, p.Client.Load,
		p.To.UUID, p.To.NodeName, p.To.Util, p.To.Free)
}

// planRelief picks the move: the overloaded GPUs (above High for Window),
// busiest first; of each, its movable client of the highest load that
// fits on another GPU of its pool below Low (free shares enough, nothing
// unplaceable), the least loaded such GPU shown. False when none can move.
func planRelief(gpus []mpsGPU, cfg ReliefConfig, now time.Time) (reliefPlan, bool) {
	over := slices.Clone(gpus)
	over = slices.DeleteFunc(over, func(g mpsGPU) bool { return !cfg.overloaded(g, now) })
	slices.SortStableFunc(over, func(a, b mpsGPU) int { return cmp.Or(cmp.Compare(b.Util, a.Util), cmp.Compare(a.UUID, b.UUID)) })
	for _, from := range over {
		clients := slices.Clone(from.Clients)
		slices.SortStableFunc(clients, func(a, b mpsClient) int {
			return cmp.Or(cmp.Compare(b.Load, a.Load), cmp.Compare(a.Alloc.ID, b.Alloc.ID))
		})
		for _, c := range clients {
			if !c.Alloc.Movable {
				continue
			}
			var to *mpsGPU
			for i := range gpus {
				g := &gpus[i]
				if g.UUID == from.UUID || g.Pool != from.Pool || g.Unplaceable || g.Util >= cfg.Low || g.Free < c.Alloc.GPUs {
					continue
				}
				if to == nil || g.Util < to.Util || g.Util == to.Util && g.UUID < to.UUID {
					to = g
				}
			}
			if to != nil {
				return reliefPlan{From: from, To: *to, Client: c}, true
			}
		}
	}
	return reliefPlan{}, false
}

// mpsGPUs are the MPS GPUs of the view's schedulable nodes, with the
// utilisations last read and, on the overloaded ones, each client judged
// movable (movableWhy).
func (m *Mover) mpsGPUs(ctx context.Context, now time.Time, v View, l *Ledger, specs JobSpecs) []mpsGPU {
	gpus, healthy := mpsInventory(v.Snap)
	for i := range gpus {
		if ld := m.loads[gpus[i].UUID]; ld != nil {
			gpus[i].Util, gpus[i].OverSince = ld.util, ld.overSince
		}
	}
	addMPSClients(gpus, healthy, v.Snap, m.shareLoad)
	budget := m.cfg.PerHour - m.consolidations(now.Add(-time.Hour))
	for i := range gpus {
		if !m.cfg.Relief.overloaded(gpus[i], now) {
			continue // the only clients a plan may move are judged (a spec read each) here alone
		}
		for k := range gpus[i].Clients {
			c := &gpus[i].Clients[k]
			c.Alloc.Why = m.movableWhy(ctx, now, v, l, specs, c.stub, budget)
			c.Alloc.Movable = c.Alloc.Why == ""
		}
	}
	return gpus
}

// mpsInventory is the MPS GPUs of the snapshot's schedulable nodes, in
// the nodes' order, with their shares and healthy ones; healthy says, by
// share ID, which shares are.
func mpsInventory(snap *nomadview.Snapshot) ([]mpsGPU, map[string]bool) {
	var gpus []mpsGPU
	index, healthy := map[string]int{}, map[string]bool{}
	for _, n := range snap.Nodes {
		if n == nil || !nomadview.Schedulable(n) || n.NodeResources == nil {
			continue
		}
		for _, d := range n.NodeResources.Devices {
			if d == nil || d.Vendor != contract.Vendor || d.Type != contract.SliceMPS {
				continue
			}
			for _, in := range d.Instances {
				uuid := nomadview.ShareGPU(in.ID)
				if uuid == "" {
					continue
				}
				i, seen := index[uuid]
				if !seen {
					i = len(gpus)
					index[uuid] = i
					gpus = append(gpus, mpsGPU{UUID: uuid, Node: n.ID, NodeName: n.Name, Pool: n.NodePool})
				}
				g := &gpus[i]
				g.Shares++
				healthy[in.ID] = in.Healthy
				if in.Healthy {
					g.Free++
				} else {
					g.Unplaceable = true
				}
			}
		}
	}
	return gpus, healthy
}

// addMPSClients adds the allocations holding shares of each GPU, with
// their load (shareLoad, by share ID), and takes their healthy shares off
// the GPU's free ones.
func addMPSClients(gpus []mpsGPU, healthy map[string]bool, snap *nomadview.Snapshot, shareLoad map[string]float64) {
	index := map[string]int{}
	for i, g := range gpus {
		index[g.UUID] = i
	}
	for node, hs := range snap.HeldSlices() {
		for _, h := range hs {
			if h.Device.Type != contract.SliceMPS {
				continue
			}
			for _, id := range h.IDs {
				i, ok := index[nomadview.ShareGPU(id)]
				if !ok || gpus[i].Node != node {
					continue
				}
				g := &gpus[i]
				if healthy[id] {
					g.Free--
				}
				k := slices.IndexFunc(g.Clients, func(c mpsClient) bool { return c.Alloc.ID == h.Alloc.ID })
				if k < 0 {
					ca := consolidate.Alloc{ID: h.Alloc.ID, Namespace: h.Alloc.Namespace, Job: h.Alloc.JobID, Node: node}
					g.Clients = append(g.Clients, mpsClient{Alloc: ca, stub: h.Alloc})
					k = len(g.Clients) - 1
				}
				g.Clients[k].Alloc.GPUs++
				g.Clients[k].Load += shareLoad[id]
			}
		}
	}
}

// overloaded: the GPU has been above High for Window.
func (r ReliefConfig) overloaded(g mpsGPU, now time.Time) bool {
	return g.Util > r.High && !g.OverSince.IsZero() && now.Sub(g.OverSince) >= r.Window
}

// Relieve plans one relief on a view, when relief is on, no move is under
// way and the utilisations read are fresh; false when nothing moves.
func (m *Mover) Relieve(ctx context.Context, now time.Time, v View, l *Ledger, specs JobSpecs) (reliefPlan, bool) {
	if !m.cfg.Relief.On() || m.hold != nil || m.pending != nil || m.sampled.IsZero() {
		return reliefPlan{}, false
	}
	p, ok := planRelief(m.mpsGPUs(ctx, now, v, l, specs), m.cfg.Relief, now)
	if !ok {
		return p, false
	}
	delete(m.loads, p.From.UUID) // its window starts again after the move
	return p, true
}

// sampleDue says whether the MPS GPUs' utilisation is to be read now.
func (m *Mover) sampleDue(now time.Time) bool {
	return m.cfg.Relief.On() && now.Sub(m.sampled) >= m.cfg.Relief.Interval
}

// observe takes one reading of the MPS GPUs' utilisations (by GPU UUID)
// and of each share's load (by share ID), at now. A GPU not read (no
// client: its node was not asked) reads 0; a GPU held is not read (its
// window starts again once the hold ends).
func (m *Mover) observe(now time.Time, util map[string]float64, shareLoad map[string]float64) {
	if m.loads == nil {
		m.loads = map[string]*gpuLoad{}
	}
	for uuid := range m.loads {
		if _, ok := util[uuid]; !ok {
			delete(m.loads, uuid)
		}
	}
	for uuid, u := range util {
		if m.hold != nil && m.hold.GPU == uuid {
			continue // held: it counts from the readings after the move
		}
		ld := m.loads[uuid]
		if ld == nil {
			ld = &gpuLoad{}
			m.loads[uuid] = ld
		}
		ld.util = u
		switch {
		case u <= m.cfg.Relief.High:
			ld.overSince = time.Time{}
		case ld.overSince.IsZero():
			ld.overSince = now
		}
	}
	m.shareLoad = shareLoad
	m.sampled = now
}

// sampleMPS reads the utilisation of the MPS GPUs that have clients,
// with Nomad's stats of their nodes (one call per node), into the mover.
func (c *Controller) sampleMPS(ctx context.Context, now time.Time, snap *nomadview.Snapshot) {
	nodes := map[string]bool{}
	for node, hs := range snap.HeldSlices() {
		if slices.ContainsFunc(hs, func(h nomadview.HeldSlice) bool { return h.Device.Type == contract.SliceMPS }) {
			nodes[node] = true
		}
	}
	util, shareLoad := map[string]float64{}, map[string]float64{}
	ids := slices.Sorted(maps.Keys(nodes))
	for i, st := range nomadview.ReadNodeStats(ctx, c.api, ids, 1, 0, nil) {
		if st.Err != nil {
			if ctx.Err() == nil {
				c.log.Debug("MPS GPU utilisation not read; relief skips the node this round", "node", ids[i], "error", st.Err)
			}
			continue
		}
		readMPSStats(st.Host, util, shareLoad)
	}
	c.mover.observe(now, util, shareLoad)
}

// readMPSStats adds a node's MPS shares' figures: each GPU's utilisation
// (StatPhysGPUUtil, which every share of the GPU carries) and each
// share's load on its GPU (its task's utilisation of the share ×
// the share's thread percentage / 100).
func readMPSStats(hs *api.HostStats, util, shareLoad map[string]float64) {
	if hs == nil {
		return
	}
	for _, g := range hs.DeviceStats {
		if g == nil || g.Vendor != contract.Vendor || g.Type != contract.SliceMPS {
			continue
		}
		for id, ds := range g.InstanceStats {
			uuid := nomadview.ShareGPU(id)
			if uuid == "" || ds == nil || ds.Stats == nil {
				continue
			}
			attrs := ds.Stats.Attributes
			if v := attrs[contract.StatPhysGPUUtil]; v != nil && v.FloatNumeratorVal != nil {
				util[uuid] = *v.FloatNumeratorVal
			}
			own, threads := attrs[contract.StatShareUtil], attrs[contract.StatShareThreads]
			if own != nil && own.FloatNumeratorVal != nil && threads != nil && threads.IntNumeratorVal != nil {
				shareLoad[id] = *own.FloatNumeratorVal * float64(*threads.IntNumeratorVal) / 100
			}
		}
	}
}

// reliefReason is the log line of a relief move: "moved alloc 1a2b3c4d
// (infer-2, 1 share) off GPU-… on gpu-1 at 92% (above 80% for 5m0s); GPU-…
// on gpu-1 at 10% has room".
func reliefReason(p reliefPlan, cfg ReliefConfig) string {
	unit := "shares"
	if p.Client.Alloc.GPUs == 1 {
		unit = "share"
	}
	return fmt.Sprintf("moved alloc %s (%s, %d %s, %.0f%% of the GPU) off %s on %s %s; %s on %s at %.0f%% has room",
		short(p.Client.Alloc.ID), p.Client.Alloc.Job, p.Client.Alloc.GPUs, unit, p.Client.Load,
		p.From.UUID, p.From.NodeName, reliefPurpose(p, cfg), p.To.UUID, p.To.NodeName, p.To.Util)
}

// reliefPurpose is what a relief is for: "at 92% (above 80% for 5m0s)".
func reliefPurpose(p reliefPlan, cfg ReliefConfig) string {
	return fmt.Sprintf("at %.0f%% (above %.0f%% for %s)", p.From.Util, cfg.High, cfg.Window)
}

// holdGPU holds the plan's overloaded GPU (node metadata) and records the
// move to make once the servers see it held; on an error nothing is held
// and nothing moves.
func (c *Controller) holdGPU(ctx context.Context, now time.Time, p reliefPlan) {
	cfg := c.cfg.Moves
	rec := MoveRecord{Namespace: p.Client.Alloc.Namespace, Job: p.Client.Alloc.Job, Alloc: p.Client.Alloc.ID,
		From: p.From.NodeName, Shares: p.Client.Alloc.GPUs, SharesPerGPU: p.From.Shares, Reason: reliefReason(p, cfg.Relief),
		For: "to relieve " + p.From.UUID + " on " + p.From.NodeName + " " + reliefPurpose(p, cfg.Relief)}
	h := c.mover.holdingGPU(now, p, rec)
	c.log.Info("decision", "kind", "relieve", "reason", p.String())
	if err := putMoves(ctx, c.api, c.cfg.Namespace, c.mover.History(), &h); err != nil {
		c.log.Warn("move history not written; nothing moved", "error", err)
		c.mover.Released()
		return
	}
	// Until two holds' time: the plugin ends it on its own should this
	// controller die before it does (the next leader ends it at once).
	until := now.Add(2 * cfg.HoldMax).UTC().Format(time.RFC3339)
	meta := map[string]*string{contract.MetaHoldPrefix + p.From.UUID: &until}
	if _, err := c.api.Nodes().Meta().Apply(&api.NodeMetaApplyRequest{NodeID: p.From.Node, Meta: meta}, (&api.QueryOptions{}).WithContext(ctx)); err != nil {
		if ctx.Err() == nil {
			c.log.Warn("GPU not held; nothing moved", "node", p.From.NodeName, "gpu", p.From.UUID, "error", err)
		}
		c.mover.Released()
	}
}

// holdingGPU notes the GPU held for a relief and the move to make.
func (m *Mover) holdingGPU(now time.Time, p reliefPlan, rec MoveRecord) Hold {
	h := Hold{Node: p.From.Node, NodeName: p.From.NodeName, Since: now, GPU: p.From.UUID,
		Moved: []string{rec.Namespace + "/" + rec.Job}, Stop: &rec}
	m.hold = &h
	return h
}

// gpuHeldSeen: the servers show every instance of the held GPU on its
// node unhealthy (the plugin follows the hold), so a stopped client's
// replacement cannot be placed back on it.
func gpuHeldSeen(snap *nomadview.Snapshot, h Hold) bool {
	n := snap.Node(h.Node)
	if n == nil || n.NodeResources == nil {
		return false
	}
	seen := false
	for _, d := range n.NodeResources.Devices {
		if d == nil || d.Vendor != contract.Vendor {
			continue
		}
		for _, in := range d.Instances {
			if uuid := nomadview.ShareGPU(in.ID); uuid == "" || uuid != h.GPU {
				continue
			}
			if in.Healthy {
				return false
			}
			seen = true
		}
	}
	return seen
}

// stopHeld makes the relief move of a GPU held: it stops the client and
// records the move; the hold then lasts until the client's job is placed
// again. A client that cannot be stopped (gone) ends the hold.
func (c *Controller) stopHeld(ctx context.Context, now time.Time, h *Hold) {
	rec := *h.Stop
	h.Stop, h.Since, h.Stopped = nil, now, rec.Alloc
	q := (&api.QueryOptions{Namespace: rec.Namespace}).WithContext(ctx)
	if _, err := c.api.Allocations().Stop(&api.Allocation{ID: rec.Alloc, Namespace: rec.Namespace}, q); err != nil {
		if ctx.Err() == nil {
			c.log.Warn("allocation not stopped; the relief ends", "alloc", rec.Alloc, "error", err)
		}
		h.Moved = nil // nothing to wait for: Release ends the hold
		return
	}
	rec.At = now
	c.mover.Record(rec)
	c.metrics.moved("relief")
	c.decided(Decision{"moved", JobKey{Namespace: rec.Namespace, ID: rec.Job}, rec.Reason})
}

// endGPUHold removes a GPU's hold from its node's metadata; false when
// it could not.
func (c *Controller) endGPUHold(ctx context.Context, h Hold) bool {
	meta := map[string]*string{contract.MetaHoldPrefix + h.GPU: nil}
	if _, err := c.api.Nodes().Meta().Apply(&api.NodeMetaApplyRequest{NodeID: h.Node, Meta: meta}, (&api.QueryOptions{}).WithContext(ctx)); err != nil && !nomadview.IsNotFound(err) {
		if ctx.Err() == nil {
			c.log.Warn("GPU hold not removed; trying on the next tick", "node", h.NodeName, "gpu", h.GPU, "error", err)
		}
		return false
	}
	c.log.Info("decision", "kind", "hold-over", "reason", fmt.Sprintf("GPU %s on %s takes work again", h.GPU, h.NodeName))
	return true
}
