package layoutplan

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/contract/gpulayout"
	"github.com/nomad-gpu/nomad-gpu/internal/fgd"
)

// change is one way to serve an ask: these GPUs of one node relaid.
type change struct {
	gpus []*gpuState
	to   []gpulayout.Layout
	// recent counts GPUs changed less than MinInterval ago; frag is the
	// node's fragmentation after the change less before.
	recent int
	frag   float64
}

// better orders changes: fewer recently changed GPUs, then fewer GPUs,
// then less fragmentation; the first found wins a tie (nodes by name).
func (c *change) better(o *change) bool {
	return cmp.Or(cmp.Compare(c.recent, o.recent), cmp.Compare(len(c.gpus), len(o.gpus)), cmp.Compare(c.frag, o.frag)) < 0
}

// relay relays GPUs so that one allocation of a fits; false when no GPU
// that may change can serve it. waiting is how many allocations wait for
// its kind, for the reason.
func (p *planner) relay(a Ask, waiting int) bool {
	var best *change
	for _, node := range p.nodes(a.Pool) {
		if c := p.candidate(node, a); c != nil && (best == nil || c.better(best)) {
			best = c
		}
	}
	if best == nil {
		return false
	}
	for i, g := range best.gpus {
		p.change(g, best.to[i], fmt.Sprintf("%d allocations wait for %s (job %q first), and no free one fits", waiting, a.Kind, a.Job))
	}
	return true
}

// change relays g to to this round, for reason.
func (p *planner) change(g *gpuState, to gpulayout.Layout, reason string) {
	d := Decision{Node: g.Node, NodeName: g.NodeName, UUID: g.UUID, Index: g.Index, From: g.layout, To: to,
		FragBefore: p.frag(), Reason: reason}
	g.layout, g.free, g.fixed = to, instanceCounts(to), true
	p.touch(g)
	d.FragAfter = p.frag()
	p.decisions = append(p.decisions, d)
}

// makeRoom serves an allocation of several whole GPUs that no node fits,
// even relaid, because allocations hold some of each node's GPUs. The
// move module (controller/consolidate) can free a node for it by moving
// such allocations, but it counts whole GPUs only, both the node to free
// and the room for what it moves: a free GPU of another layout that no
// queued allocation took this round strands the ask, for no one relay
// makes it fit and so nothing would ever relay that GPU. So the GPUs of
// one node that are free and not whole are relaid whole: the node whose
// whole GPUs, held or not, and those would hold the ask, with the most
// whole GPUs free after. A GPU changed less than MinInterval ago is left
// as it is: the hysteresis holds it, and the ask waits for it (or for
// work to end).
func (p *planner) makeRoom(a Ask) {
	if kindOf(a.Kind) != gpulayout.Whole || a.Count < 2 {
		return
	}
	var best []*gpuState
	bestFree := -1
	for _, node := range p.nodes(a.Pool) {
		if !p.in.Bounds.of(node[0].Pool).allows(gpulayout.Whole) {
			continue
		}
		var relay []*gpuState
		whole, free := 0, 0
		for _, g := range node {
			switch {
			case g.MIGMode:
			case g.layout.Kind == gpulayout.Whole:
				whole++
				free += max(0, g.free[a.Kind])
			case p.relayable(g) && !p.recent(g):
				relay = append(relay, g)
			}
		}
		if len(relay) > 0 && whole+len(relay) >= a.Count && free+len(relay) > bestFree {
			best, bestFree = relay, free+len(relay)
		}
	}
	for _, g := range best {
		p.change(g, gpulayout.WholeGPU, fmt.Sprintf("an allocation of %d whole GPUs waits (job %q) that no node fits, even relaid: "+
			"free whole GPUs are room to move work for it", a.Count, a.Job))
	}
}

// candidate is the best change of node's GPUs for one allocation of a,
// nil when none serves it.
func (p *planner) candidate(node []*gpuState, a Ask) *change {
	b := p.in.Bounds.of(node[0].Pool)
	kind := kindOf(a.Kind)
	if !b.allows(kind) {
		return nil
	}
	target := func(g *gpuState) (gpulayout.Layout, bool) {
		switch kind {
		case gpulayout.MPS:
			return gpulayout.Shared(b.shares()), !g.MIGMode && a.Count <= b.shares() && p.keepsWhole(node, g, b)
		case gpulayout.Whole:
			return gpulayout.WholeGPU, !g.MIGMode
		}
		t := homogeneous(g.Profiles, strings.TrimPrefix(a.Kind, contract.SliceMIG+"/"))
		return t, g.MIGMode && !t.IsZero()
	}
	need := a.Count
	for _, g := range node {
		need -= g.free[a.Kind]
	}
	var opts []*change
	for _, g := range node {
		to, ok := target(g)
		if !ok || !p.relayable(g) || to.Equal(g.layout) {
			continue
		}
		gain := p.instances(to)[a.Kind] - g.free[a.Kind]
		if gain <= 0 {
			continue
		}
		c := &change{gpus: []*gpuState{g}, to: []gpulayout.Layout{to}, frag: p.nodeFrag(node, map[*gpuState]gpulayout.Layout{g: to}) - p.fragOf(node)}
		if p.recent(g) {
			c.recent = 1
		}
		c.frag = roundFrag(c.frag)
		opts = append(opts, c)
	}
	if kind == gpulayout.MPS {
		// Shares come from one GPU: one relaid GPU serves the ask.
		var best *change
		for _, c := range opts {
			if best == nil || c.better(best) {
				best = c
			}
		}
		return best
	}
	// Whole GPUs and MIG instances come from anywhere on the node: relay
	// the best GPUs until the ask fits.
	slices.SortStableFunc(opts, func(x, y *change) int {
		if x.better(y) {
			return -1
		}
		if y.better(x) {
			return 1
		}
		return 0
	})
	out := &change{}
	for _, c := range opts {
		if need <= 0 {
			break
		}
		out.gpus, out.to = append(out.gpus, c.gpus[0]), append(out.to, c.to[0])
		out.recent += c.recent
		need -= p.instances(c.to[0])[a.Kind] - c.gpus[0].free[a.Kind]
	}
	if need > 0 {
		return nil
	}
	over := map[*gpuState]gpulayout.Layout{}
	for i, g := range out.gpus {
		over[g] = out.to[i]
	}
	out.frag = roundFrag(p.nodeFrag(node, over) - p.fragOf(node))
	return out
}

// roundFrag drops what floating point adds to a fragmentation
// difference, so that equal changes tie.
func roundFrag(f float64) float64 {
	const unit = 1e-9
	return float64(int64(f/unit)) * unit
}

// relayable: the GPU may change, and nothing this round took its
// instances.
func (p *planner) relayable(g *gpuState) bool {
	return !g.fixed && maps.Equal(g.free, p.instances(g.layout))
}

// recent: the planner changed the GPU less than MinInterval ago.
func (p *planner) recent(g *gpuState) bool {
	return !g.Changed.IsZero() && p.in.Now.Sub(g.Changed) < p.in.Bounds.MinInterval
}

// keepsWhole: relaying g leaves its node the whole GPUs the bounds ask.
func (p *planner) keepsWhole(node []*gpuState, g *gpuState, b PoolBounds) bool {
	if g.layout.Kind != gpulayout.Whole {
		return true
	}
	whole := 0
	for _, o := range node {
		if o.layout.Kind == gpulayout.Whole {
			whole++
		}
	}
	return whole-1 >= b.MinWhole
}

// homogeneous is the geometry of as many instances of profile as the GPU
// makes; zero when it cannot make the profile.
func homogeneous(profiles []Profile, profile string) gpulayout.Layout {
	for _, pr := range profiles {
		if pr.Name != profile || pr.Slices < 1 || pr.Slices > 7 {
			continue
		}
		n := 7 / pr.Slices
		if pr.Max > 0 {
			n = min(n, pr.Max)
		}
		out := make([]string, n)
		for i := range out {
			out[i] = profile
		}
		return gpulayout.Geometry(out...)
	}
	return gpulayout.Layout{}
}

// frag is the cluster's FGD fragmentation over the mix, as planned so
// far.
func (p *planner) frag() float64 {
	var sum float64
	for _, node := range p.nodes("") {
		sum += p.fragOf(node)
	}
	return sum
}

// fragOf is nodeFrag(node, nil), kept until a GPU of node changes.
func (p *planner) fragOf(node []*gpuState) float64 {
	i := node[0].node
	if len(node) != len(p.nodes("")[i]) {
		return p.nodeFrag(node, nil) // part of a node: a pool's GPUs of it
	}
	if !p.fragOK[i] {
		p.frags[i], p.fragOK[i] = p.nodeFrag(node, nil), true
	}
	return p.frags[i]
}

// nodeFrag is one node's FGD fragmentation over the mix (package fgd):
// a pool per kind, an MPS GPU's shares a group of their own (a request's
// shares come from one GPU).
func (p *planner) nodeFrag(node []*gpuState, over map[*gpuState]gpulayout.Layout) float64 {
	n := make(fgd.Node, 0, 2) // a node's GPUs are of a kind or two
	for _, g := range node {
		layout, free := g.layout, g.free
		if to, ok := over[g]; ok {
			layout, free = to, p.instances(to)
		}
		// Any order of kinds: each pool's groups are in GPU order, and
		// the pools are sorted below.
		for kind, f := range free {
			i := slices.IndexFunc(n, func(pool fgd.Pool) bool { return pool.Kind == kind })
			if i < 0 {
				i = len(n)
				n = append(n, fgd.Pool{Kind: kind, OneGroup: kindOf(kind) == gpulayout.MPS, Groups: make([]fgd.Group, 0, len(node))})
			}
			n[i].Groups = append(n[i].Groups, fgd.Group{Free: max(0, f), Weight: weight(kind, layout)})
		}
	}
	slices.SortFunc(n, func(a, b fgd.Pool) int { return strings.Compare(a.Kind, b.Kind) })
	return n.FGD(p.in.Mix)
}

// weight is one instance of kind in GPU-equivalents, on a GPU laid out
// as layout.
func weight(kind string, layout gpulayout.Layout) float64 {
	switch kindOf(kind) {
	case gpulayout.MPS:
		return 1 / float64(max(1, layout.Shares))
	case gpulayout.MIG:
		return contract.MIGWeight(strings.TrimPrefix(kind, contract.SliceMIG+"/"))
	}
	return 1
}
