package controller

import (
	"maps"
	"slices"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/controller/queues"
	"github.com/nomad-gpu/nomad-gpu/nomadview"
)

// QueueBook keeps the teams' accounts (docs/design/queues.md): each tick,
// what every queue of the queue file holds (the GPU-equivalents its
// namespaces' pending and running allocations hold, in its node pool),
// what it waits for, its decayed use, the quota figures of its cohort and
// its fair-share standing. It decides nothing: the gate (queuegate.go)
// orders and admits by its last step, and operators see their teams in it.
// The leader's alone; its use is kept across leaders (queueusage.go).
type QueueBook struct {
	cfg queues.Config
	// usage is each queue's decayed use; rate what it held at the last
	// step, held since (the use between two steps is taken as constant).
	usage map[string]queues.Usage
	rate  map[string]float64
	// held and charged are what each queue held and the use the order
	// charged it (queues.Charged) at the last step, active whether it
	// held or waited for anything then; shares how many MPS shares a GPU
	// of the cluster offers most often (a waiting MPS ask's weight).
	held, charged map[string]float64
	active        map[string]bool
	shares        int
}

// QueueStatus is one queue's account at a step.
type QueueStatus struct {
	Name string `json:"name"`
	// Use is the GPU-equivalents it holds; Nominal its quota; Borrowed
	// what it uses beyond it; Lent what of its nominal it lends and does
	// not use.
	Use      float64 `json:"used"`
	Nominal  float64 `json:"nominal"`
	Borrowed float64 `json:"borrowed"`
	Lent     float64 `json:"lent"`
	// UsageHours is its decayed use; Standing its fair-share standing
	// (queues.Standings), for an active queue (holding or waiting).
	UsageHours float64 `json:"usage_gpu_hours"`
	Standing   float64 `json:"fair_share"`
	Active     bool    `json:"active"`
	// Waiting are its queued task groups' allocations.
	Waiting int `json:"waiting"`
}

// NewQueueBook keeps the accounts of cfg's queues from usage, the decayed
// use a leader before kept (nil: none).
func NewQueueBook(cfg queues.Config, usage map[string]queues.Usage) *QueueBook {
	b := &QueueBook{cfg: cfg, usage: map[string]queues.Usage{}, rate: map[string]float64{}}
	for _, q := range cfg.Queues {
		if u, ok := usage[q.Name]; ok {
			b.usage[q.Name] = u
		}
	}
	return b
}

// Usage is every queue's decayed use as of the last step.
func (b *QueueBook) Usage() map[string]queues.Usage {
	return maps.Clone(b.usage)
}

// Step brings the accounts to now from snap, the queues in the file's
// order.
func (b *QueueBook) Step(now time.Time, snap *nomadview.Snapshot) []QueueStatus {
	use := b.useOf(snap)
	waiting := map[string]int{}
	for _, g := range snap.QueuedGroups() {
		if q := b.queueOf(g.Namespace, g.Pool); q != "" {
			waiting[q] += g.Count
		}
	}
	hours, charged, active := map[string]float64{}, map[string]float64{}, map[string]bool{}
	for _, q := range b.cfg.Queues {
		u := b.usage[q.Name].Advance(now, b.rate[q.Name], b.cfg.HalfLife)
		b.usage[q.Name], b.rate[q.Name] = u, use[q.Name]
		hours[q.Name], active[q.Name] = u.Hours, use[q.Name] > 0 || waiting[q.Name] > 0
		charged[q.Name] = queues.Charged(u.Hours, use[q.Name], b.cfg.HalfLife)
	}
	standing := queues.Standings(b.cfg, charged, active)
	b.held, b.charged, b.active = use, charged, active
	quota := queues.NewQuota(b.cfg, use)
	out := make([]QueueStatus, 0, len(b.cfg.Queues))
	for _, q := range b.cfg.Queues {
		out = append(out, QueueStatus{Name: q.Name, Use: use[q.Name], Nominal: q.Nominal, Borrowed: quota.Borrowed(q.Name), Lent: quota.Lent(q.Name),
			UsageHours: hours[q.Name], Standing: standing[q.Name], Active: active[q.Name], Waiting: waiting[q.Name]})
	}
	return out
}

// queueOf is the queue of work in namespace ns placed (or to be placed)
// in pool; "" for none.
func (b *QueueBook) queueOf(ns, pool string) string {
	for _, q := range b.cfg.Queues {
		if slices.Contains(q.Namespaces, ns) && (q.NodePool == "" || q.NodePool == pool) {
			return q.Name
		}
	}
	return ""
}

// useOf is the GPU-equivalents each queue's pending and running
// allocations hold, as nomadview.DeviceAsk.GPUEquivalents weighs them: a
// whole GPU 1, a MIG instance its profile's weight, an MPS share 1 over
// its GPU's shares on its node.
func (b *QueueBook) useOf(snap *nomadview.Snapshot) map[string]float64 {
	use := map[string]float64{}
	b.shares = commonShares(snap)
	for nodeID, held := range snap.HeldSlices() {
		n := snap.Node(nodeID)
		if n == nil {
			continue
		}
		shares := sharesPerGPU(n)
		for _, h := range held {
			q := b.queueOf(h.Alloc.Namespace, n.NodePool)
			if q == "" {
				continue
			}
			for _, id := range h.IDs {
				use[q] += nomadview.DeviceAsk{Device: h.Device, Count: 1}.GPUEquivalents(shares[nomadview.ShareGPU(id)])
			}
		}
	}
	return use
}

// sharesPerGPU is how many MPS shares each GPU of node n offers, by the
// GPU's UUID.
func sharesPerGPU(n *api.NodeListStub) map[string]int {
	out := map[string]int{}
	if n.NodeResources == nil {
		return out
	}
	for _, d := range n.NodeResources.Devices {
		if d == nil || d.Vendor != contract.Vendor || d.Type != contract.SliceMPS {
			continue
		}
		for _, in := range d.Instances {
			if in != nil {
				out[nomadview.ShareGPU(in.ID)]++
			}
		}
	}
	return out
}

// commonShares is how many MPS shares a GPU of the cluster offers most
// often (the fewest of the most frequent; 1 where no GPU offers shares):
// what a waiting job's MPS share weighs before a node is chosen.
func commonShares(snap *nomadview.Snapshot) int {
	seen := map[int]int{}
	for _, n := range snap.Nodes {
		for _, s := range sharesPerGPU(n) {
			seen[s]++
		}
	}
	best, most := 1, 0
	for s, c := range seen {
		if c > most || c == most && s < best {
			best, most = s, c
		}
	}
	return best
}
