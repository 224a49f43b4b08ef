package layoutplan

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/contract/gpulayout"
	"github.com/nomad-gpu/nomad-gpu/internal/fgd"
)

// Profile is a MIG profile a GPU in MIG mode can make: its compute
// slices (of 7) and the most instances of it the GPU holds (0: as many
// as its slices allow). It is what the node's inventory (gpu.MIGProfile)
// says once it has crossed Nomad to the controller, which does not link
// NVML; the planner needs no memory size.
type Profile struct {
	Name   string
	Slices int
	Max    int
}

// GPU is one GPU as the planner sees it.
type GPU struct {
	Node, NodeName, Pool string
	UUID                 string
	Index                int
	// MIGMode is the GPU's MIG mode, which the planner never changes: a
	// GPU in MIG mode only ever gets MIG geometries of Profiles, any
	// other only whole or MPS shares.
	MIGMode  bool
	Profiles []Profile
	// Current is what its instances show now; Desired what is published
	// for it (zero: nothing), which the device plugin applies once no
	// allocation holds an instance of the GPU.
	Current, Desired gpulayout.Layout
	// Pinned: Desired was set by hand; the planner leaves the GPU alone.
	Pinned bool
	// Held are the instances allocations hold, by kind ("gpu", "mps",
	// "mig/<profile>").
	Held []string
	// Unhealthy are the instances that take no placement (a relayout's
	// drain, a hold), by kind as Held: not free, and the GPU keeps its
	// layout while they last.
	Unhealthy []string
	// Fault is why the GPU itself has failed, "" while healthy. A failed
	// GPU is no capacity: the planner neither places on it nor relays it.
	Fault string
	// Changed is when the planner last changed its desired layout; zero:
	// never.
	Changed time.Time
}

// Ask is what queued allocations of one task group ask for: Count
// instances of Kind ("gpu", "mps", "mig/<profile>") each.
type Ask struct {
	Kind     string
	Count    int
	Allocs   int
	Priority int
	// Pool is the job's node pool; "" or "all": any.
	Pool string
	Job  string
}

// PoolBounds are an operator's bounds on the planner in one node pool.
type PoolBounds struct {
	// Allowed are the kinds the planner may make; empty: all.
	Allowed []gpulayout.Kind
	// MinWhole is the fewest GPUs per node the planner leaves whole.
	MinWhole int
	// Shares is the share count of a GPU it splits; 0: DefaultShares.
	Shares int
	// Never are GPUs (UUIDs) it never relays.
	Never []string
}

// Bounds are the planner's bounds: by node pool, else Default.
type Bounds struct {
	Default PoolBounds
	Pools   map[string]PoolBounds
	// MinInterval is the least time between two changes of one GPU,
	// unless a queue that no other GPU can serve waits.
	MinInterval time.Duration
}

func (b *Bounds) of(pool string) PoolBounds {
	if p, ok := b.Pools[pool]; ok {
		return p
	}
	return b.Default
}

func (p PoolBounds) shares() int {
	if p.Shares > 0 {
		return p.Shares
	}
	return gpulayout.DefaultShares
}

func (p PoolBounds) allows(k gpulayout.Kind) bool {
	return len(p.Allowed) == 0 || slices.Contains(p.Allowed, k)
}

// Input is one planning round's.
type Input struct {
	GPUs []GPU
	// Queue is the waiting asks, oldest first.
	Queue []Ask
	// Mix is the workload's request shapes, what fragmentation is
	// measured against (package fgd), with kinds as Ask's.
	Mix    []fgd.Shape
	Bounds Bounds
	Now    time.Time
}

// Decision is one GPU's new desired layout.
type Decision struct {
	Node, NodeName, UUID string
	Index                int
	From, To             gpulayout.Layout
	// FragBefore and FragAfter are the cluster's FGD fragmentation, in
	// GPU-equivalents, before and after the change, once the queue the
	// round could serve runs.
	FragBefore, FragAfter float64
	Reason                string
	// Cancel: the GPU is asked back to the layout it offers, a relayout
	// abandoned (the controller's, never the planner's).
	Cancel bool
}

func (d Decision) String() string {
	return fmt.Sprintf("node %s GPU %d: %s → %s: %s; fragmentation %.2f → %.2f GPU",
		d.NodeName, d.Index, d.From, d.To, d.Reason, d.FragBefore, d.FragAfter)
}

// Plan chooses new layouts for GPUs that no allocation holds so that the
// queue can run: in priority order (then oldest first), each waiting
// allocation takes free instances it fits, the fullest first, as Nomad's
// binpacking would; one that fits none has a free GPU relaid for it, the
// one that leaves the least fragmentation for the mix. A multi-GPU
// allocation of whole GPUs that no relay makes fit has a node's free
// GPUs made whole (makeRoom), room to move work for it. A GPU held,
// pinned, never to be relaid, with an unhealthy instance, or whose last
// layout is not yet applied, keeps its layout; one changed less than
// MinInterval ago only serves an ask that no other GPU can; a failed one
// is left out.
func Plan(in Input) []Decision {
	p := newPlanner(in)
	asks := slices.Clone(in.Queue)
	slices.SortStableFunc(asks, func(a, b Ask) int { return cmp.Compare(b.Priority, a.Priority) })
	for _, a := range asks {
		if a.Count <= 0 || kindOf(a.Kind) == "" {
			continue
		}
		for n := 0; n < a.Allocs; n++ {
			if p.place(a) {
				continue
			}
			if !p.relay(a, p.waiting(a.Kind)) {
				p.makeRoom(a)
				break
			}
			if !p.place(a) {
				break
			}
		}
	}
	return p.decisions
}

// planner is one round's state: each GPU's planned layout and free
// instances as the queue takes them.
type planner struct {
	in        Input
	gpus      []*gpuState // by node name, then index
	decisions []Decision
	// byPool are nodes' results, by pool; frags each node's nodeFrag
	// (by gpuState.node) where fragOK: a round looks at every node's
	// many times and changes few.
	byPool map[string][][]*gpuState
	frags  []float64
	fragOK []bool
	// counts are instanceCounts of whole and MPS layouts, by share
	// count (0: whole), shared: read, never written.
	counts map[int]map[string]int
}

type gpuState struct {
	GPU
	layout gpulayout.Layout
	free   map[string]int
	// fixed: held, pinned, never relaid or not yet applied. (A GPU with
	// an unhealthy instance is never relayable either: the instance is
	// not free.)
	fixed bool
	// node is its node's index in nodes("").
	node int
}

func newPlanner(in Input) *planner {
	p := &planner{in: in}
	for i := range in.GPUs {
		if in.GPUs[i].Fault != "" {
			continue
		}
		g := &gpuState{GPU: in.GPUs[i], layout: in.GPUs[i].Current}
		moving := !g.Desired.IsZero() && !g.Desired.Equal(g.Current)
		if !g.Desired.IsZero() {
			g.layout = g.Desired
		}
		g.free = instanceCounts(g.layout)
		if !moving {
			for _, h := range g.Held {
				g.free[h]--
			}
			for _, h := range g.Unhealthy {
				g.free[h]--
			}
		}
		g.fixed = moving || g.Pinned || len(g.Held) > 0 || slices.Contains(in.Bounds.of(g.Pool).Never, g.UUID)
		p.gpus = append(p.gpus, g)
	}
	slices.SortFunc(p.gpus, func(a, b *gpuState) int {
		return cmp.Or(cmp.Compare(a.NodeName, b.NodeName), cmp.Compare(a.Node, b.Node), cmp.Compare(a.Index, b.Index))
	})
	p.byPool = map[string][][]*gpuState{}
	all := p.nodes("")
	for i, node := range all {
		for _, g := range node {
			g.node = i
		}
	}
	p.frags, p.fragOK = make([]float64, len(all)), make([]bool, len(all))
	return p
}

// touch says that g's layout or free instances changed.
func (p *planner) touch(g *gpuState) { p.fragOK[g.node] = false }

// instances is instanceCounts(l), shared: the caller only reads it.
func (p *planner) instances(l gpulayout.Layout) map[string]int {
	key := -1
	switch {
	case l.Kind == gpulayout.Whole:
		key = 0
	case l.Kind == gpulayout.MPS && l.Shares > 0:
		key = l.Shares
	}
	if key < 0 {
		return instanceCounts(l)
	}
	m, ok := p.counts[key]
	if !ok {
		if p.counts == nil {
			p.counts = map[int]map[string]int{}
		}
		m = instanceCounts(l)
		p.counts[key] = m
	}
	return m
}

// instanceCounts is count(l.Instances()), without the list for whole
// GPUs and MPS shares.
func instanceCounts(l gpulayout.Layout) map[string]int {
	switch l.Kind {
	case gpulayout.Whole:
		return map[string]int{contract.SliceGPU: 1}
	case gpulayout.MPS:
		if l.Shares > 0 {
			return map[string]int{contract.SliceMPS: l.Shares}
		}
	}
	return count(l.Instances())
}

func count(kinds []string) map[string]int {
	m := map[string]int{}
	for _, k := range kinds {
		m[k]++
	}
	return m
}

// kindOf is an ask's kind of GPU; "" for no kind of ours.
func kindOf(ask string) gpulayout.Kind {
	switch t, _, _ := strings.Cut(ask, "/"); t {
	case contract.SliceGPU:
		return gpulayout.Whole
	case contract.SliceMPS:
		return gpulayout.MPS
	case contract.SliceMIG:
		return gpulayout.MIG
	}
	return ""
}

func inPool(g *gpuState, pool string) bool { return pool == "" || pool == "all" || g.Pool == pool }

// waiting is how many allocations of the queue wait for kind.
func (p *planner) waiting(kind string) int {
	n := 0
	for _, a := range p.in.Queue {
		if a.Kind == kind {
			n += a.Allocs
		}
	}
	return n
}

// place takes free instances for one allocation of a: MPS shares from
// one GPU, the fullest that fits; other kinds from one node, the fullest
// that fits. False when none fits.
func (p *planner) place(a Ask) bool {
	if kindOf(a.Kind) == gpulayout.MPS {
		var best *gpuState
		for _, g := range p.gpus {
			if inPool(g, a.Pool) && g.free[a.Kind] >= a.Count && (best == nil || g.free[a.Kind] < best.free[a.Kind]) {
				best = g
			}
		}
		if best == nil {
			return false
		}
		best.free[a.Kind] -= a.Count
		p.touch(best)
		return true
	}
	var best []*gpuState
	bestFree := 0
	for _, node := range p.nodes(a.Pool) {
		free := 0
		for _, g := range node {
			free += g.free[a.Kind]
		}
		if free >= a.Count && (best == nil || free < bestFree) {
			best, bestFree = node, free
		}
	}
	if best == nil {
		return false
	}
	left := a.Count
	for _, g := range best {
		// A GPU with none of the kind is not written to: an entry of 0
		// would make a relayable GPU look used.
		if take := min(left, g.free[a.Kind]); take > 0 {
			g.free[a.Kind] -= take
			left -= take
			p.touch(g)
		}
	}
	return true
}

// nodes are the GPUs of pool, by node; the caller keeps them as they are.
func (p *planner) nodes(pool string) [][]*gpuState {
	if out, ok := p.byPool[pool]; ok {
		return out
	}
	out := p.group(pool)
	p.byPool[pool] = out
	return out
}

// group are the GPUs of pool, by node.
func (p *planner) group(pool string) [][]*gpuState {
	var out [][]*gpuState
	for _, g := range p.gpus {
		if !inPool(g, pool) {
			continue
		}
		if n := len(out); n > 0 && out[n-1][0].Node == g.Node {
			out[n-1] = append(out[n-1], g)
			continue
		}
		out = append(out, []*gpuState{g})
	}
	return out
}
