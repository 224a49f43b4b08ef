package figures

import (
	"cmp"
	"maps"
	"slices"
	"time"

	"github.com/nomad-gpu/nomad-gpu/bench/tracereplay"
	"github.com/nomad-gpu/nomad-gpu/internal/fgd"
)

// Shape is one request shape of a sample's mix and its share of the
// sample's jobs.
type Shape struct {
	tracereplay.Slice
	Weight float64
}

// MixOf is the sample's request shapes as configuration f maps them
// (Cluster.Slice), weighted by how many jobs ask for each.
func MixOf(jobs []tracereplay.Job, c tracereplay.Cluster, f tracereplay.Features) []Shape {
	if len(jobs) == 0 {
		return nil
	}
	count := map[tracereplay.Slice]int{}
	for _, j := range jobs {
		count[c.Slice(j, f)]++
	}
	out := make([]Shape, 0, len(count))
	for s, n := range count {
		out = append(out, Shape{Slice: s, Weight: float64(n) / float64(len(jobs))})
	}
	slices.SortFunc(out, func(a, b Shape) int {
		if a.Kind != b.Kind {
			return cmp.Compare(a.Kind, b.Kind)
		}
		if a.Profile != b.Profile {
			return cmp.Compare(a.Profile, b.Profile)
		}
		return a.Count - b.Count
	})
	return out
}

// Layout is one node's devices under a configuration: whole GPUs, MPS
// GPUs of Shares shares each, and MIG GPUs each holding one instance of
// every profile of MIGProfiles. With Features.Layouts a node's GPUs
// change over time: its layout at an instant is At's.
type Layout struct {
	Whole, MPSGPUs, Shares, MIGGPUs int
	MIGProfiles                     []string
	migSevenths                     []int
	// dynamic: layouts follow the queue; named are then the node's MPS
	// GPUs at an instant, their shares by GPU name.
	dynamic bool
	named   map[string]int
	// asLaid: with dynamic, a GPU no run holds is of its kind at the
	// instant (an idle MPS GPU's shares, a free whole GPU), not free for
	// every kind the planner may make of it.
	asLaid bool
}

// LayoutOf is a node's layout in configuration f; with Layouts, the
// layout of a node whose GPUs are all whole.
func LayoutOf(c tracereplay.Cluster, f tracereplay.Features) Layout {
	l := Layout{Whole: c.WholeGPUs(f), Shares: 1}
	if f.Layouts {
		l.dynamic, l.Shares = true, c.Shares()
	}
	if f.Slices {
		l.MPSGPUs, l.MIGGPUs, l.MIGProfiles = c.MPSGPUs, c.MIGGPUs, c.MIGProfiles
		if c.MPSGPUs > 0 {
			l.Shares = c.MPSShares
		}
		for _, p := range c.MIGProfiles {
			g, _ := tracereplay.MIGSevenths(p) // Cluster.Validate checked it
			l.migSevenths = append(l.migSevenths, g)
		}
	}
	return l
}

// At is the node's layout at an instant, for a layout that follows the
// queue: the MPS GPUs a timeline sample listed for it last (mps), and any
// GPU a run holds shares of (u) though the sample did not list it yet
// (samples are periodic, changes are not), are MPS GPUs; the rest whole.
// A static layout is itself.
func (l Layout) At(mps []tracereplay.MPSGPU, u NodeUse) Layout {
	if !l.dynamic {
		return l
	}
	out := l
	out.named = map[string]int{}
	for _, g := range mps {
		out.named[g.GPU] = max(1, g.Shares)
	}
	for gpu := range u.MPS {
		if _, ok := out.named[gpu]; !ok {
			out.named[gpu] = l.Shares
		}
	}
	out.Whole = max(0, l.GPUs()-len(out.named))
	return out
}

// GPUs is the node's physical GPU count.
func (l Layout) GPUs() int { return l.Whole + l.MPSGPUs + l.MIGGPUs + len(l.named) }

// NodeUse is what is held of one node's devices.
type NodeUse struct {
	Whole int
	// MPS is the shares held per MPS GPU, by GPU name; MIG the instances
	// held per profile.
	MPS map[string]int
	MIG map[string]int
}

func (u *NodeUse) add(h tracereplay.Hold, sign int) {
	switch h.Kind {
	case "mps":
		if u.MPS == nil {
			u.MPS = map[string]int{}
		}
		u.MPS[h.GPU] += sign * h.Units
		if u.MPS[h.GPU] == 0 {
			delete(u.MPS, h.GPU)
		}
	case "mig":
		if u.MIG == nil {
			u.MIG = map[string]int{}
		}
		u.MIG[h.Profile] += sign * h.Units
	default:
		u.Whole += sign * h.Units
	}
}

func (u NodeUse) empty() bool {
	if u.Whole != 0 || len(u.MPS) > 0 {
		return false
	}
	for _, n := range u.MIG {
		if n != 0 {
			return false
		}
	}
	return true
}

// node is a node in use u as package fgd sees it: a pool of whole GPUs,
// a pool of MPS shares whose requests take one GPU's, and a pool per MIG
// profile.
func (l Layout) node(u NodeUse) fgd.Node {
	if l.dynamic && !l.asLaid {
		return l.relayable(u)
	}
	n := fgd.Node{{Kind: "gpu", Groups: []fgd.Group{{Free: max(0, l.Whole-u.Whole), Weight: 1}}}}
	if len(l.named) > 0 {
		p := fgd.Pool{Kind: "mps", OneGroup: true}
		for _, gpu := range slices.Sorted(maps.Keys(l.named)) {
			shares := l.named[gpu]
			p.Groups = append(p.Groups, fgd.Group{Free: max(0, shares-u.MPS[gpu]), Weight: 1 / float64(shares)})
		}
		n = append(n, p)
	} else if l.MPSGPUs > 0 {
		p := fgd.Pool{Kind: "mps", OneGroup: true}
		for _, held := range u.MPS {
			p.Groups = append(p.Groups, fgd.Group{Free: l.Shares - held, Weight: 1 / float64(l.Shares)})
		}
		for range l.MPSGPUs - len(u.MPS) {
			p.Groups = append(p.Groups, fgd.Group{Free: l.Shares, Weight: 1 / float64(l.Shares)})
		}
		n = append(n, p)
	}
	for i, prof := range l.MIGProfiles {
		n = append(n, fgd.Pool{Kind: "mig/" + prof, Groups: []fgd.Group{{Free: l.MIGGPUs - u.MIG[prof], Weight: float64(l.migSevenths[i]) / 7}}})
	}
	return n
}

// relayable is a node whose layouts follow the queue: its GPUs no run
// holds (whole, or MPS with no share held) are free GPUs the planner can
// make shares of (fgd.Pool.Becomes), its partly held MPS GPUs shares.
func (l Layout) relayable(u NodeUse) fgd.Node {
	free := max(0, l.Whole-u.Whole)
	mps := fgd.Pool{Kind: "mps", OneGroup: true}
	for _, gpu := range slices.Sorted(maps.Keys(l.named)) {
		shares, held := l.named[gpu], u.MPS[gpu]
		if held == 0 {
			free++
			continue
		}
		mps.Groups = append(mps.Groups, fgd.Group{Free: max(0, shares-held), Weight: 1 / float64(shares)})
	}
	n := fgd.Node{{Kind: "gpu", Groups: []fgd.Group{{Free: free, Weight: 1}},
		Becomes: []fgd.Conversion{{Kind: "mps", Per: l.Shares, OneGroup: true}}}}
	if len(mps.Groups) > 0 {
		n = append(n, mps)
	}
	return n
}

// Free is the node's free capacity, in GPU-equivalents.
func (l Layout) Free(u NodeUse) float64 { return l.node(u).Free() }

// FGD is the expected unusable free capacity of a node over the mix.
func (l Layout) FGD(u NodeUse, mix []Shape) float64 {
	shapes := make([]fgd.Shape, len(mix))
	for i, s := range mix {
		kind := s.Kind
		if kind == "mig" {
			kind = "mig/" + s.Profile
		}
		shapes[i] = fgd.Shape{Kind: kind, Count: s.Count, Weight: s.Weight}
	}
	return l.node(u).FGD(shapes)
}

// FGDPoint is the cluster's fragmentation from At until the next point.
type FGDPoint struct {
	At time.Duration
	// FGD and Free are in GPU-equivalents; Capacity is the ready GPUs.
	FGD, Free, Capacity float64
}

// FGDIntegral is ∫FGD dt and ∫free dt over [0, Horizon], in
// GPU-equivalent seconds (FGDSeries).
func FGDIntegral(r tracereplay.Result, mix []Shape) (frag, free float64) {
	return integral(r, FGDSeries(r, mix))
}

// FGDIntegralAsLaid is ∫FGD dt with layouts that follow the queue taken
// as they stood at each instant (an idle MPS GPU unusable by a whole-GPU
// request, a free whole GPU by a share request): what fragmentation
// would be if the planner never relaid another GPU. Without layouts it is
// FGDIntegral's.
func FGDIntegralAsLaid(r tracereplay.Result, mix []Shape) float64 {
	l := LayoutOf(r.Cluster, r.Config.Features)
	l.asLaid = true
	frag, _ := integral(r, fgdSeries(r, l, mix))
	return frag
}

func integral(r tracereplay.Result, ps []FGDPoint) (frag, free float64) {
	for i, p := range ps {
		to := r.Horizon
		if i+1 < len(ps) {
			to = ps[i+1].At
		}
		d := (to - p.At).Seconds()
		frag += d * p.FGD
		free += d * p.Free
	}
	return frag, free
}

// FGDSeries is the cluster's fragmentation over [0, Horizon], a step
// function: the nodes' use replayed from the jobs' runs, the ready nodes
// from the timeline (every ready node without a run is empty), and with
// Features.Layouts each node's MPS GPUs from the timeline too (Layout.At;
// every node a sample does not list is all whole), a GPU no run holds
// free for any kind (Layout.relayable).
func FGDSeries(r tracereplay.Result, mix []Shape) []FGDPoint {
	return fgdSeries(r, LayoutOf(r.Cluster, r.Config.Features), mix)
}

func fgdSeries(r tracereplay.Result, l Layout, mix []Shape) []FGDPoint {
	gpus := l.GPUs()
	if gpus == 0 || r.Horizon <= 0 {
		return nil
	}
	cs := fgdChanges(r, gpus)
	st := fgdState{l: l, mix: mix, use: map[string]*NodeUse{}, mps: map[string][]tracereplay.MPSGPU{},
		nodeFGD: map[string]float64{}, nodeFree: map[string]float64{}}
	emptyFGD := l.FGD(NodeUse{}, mix)
	ready := 0
	var out []FGDPoint
	for i, c := range cs {
		if c.isReady {
			ready = c.ready
			st.setLayouts(c.layouts)
		} else {
			u := st.use[c.node]
			if u == nil {
				u = &NodeUse{}
				st.use[c.node] = u
			}
			u.add(c.hold, c.sign)
			if u.empty() {
				delete(st.use, c.node)
			}
			st.update(c.node)
		}
		if i+1 < len(cs) && cs[i+1].at == c.at || c.at >= r.Horizon {
			continue // the state at this instant is the one after all its changes
		}
		empty := float64(max(0, ready-len(st.nodeFGD)))
		p := FGDPoint{At: c.at, FGD: st.fgd + empty*emptyFGD, Free: st.free + empty*float64(gpus), Capacity: float64(ready * gpus)}
		if n := len(out); n > 0 && out[n-1].At == p.At {
			out[n-1] = p
		} else {
			out = append(out, p)
		}
	}
	return out
}

// fgdChange is one step of FGDSeries: a run taking or releasing a hold,
// or a timeline sample (isReady: its ready nodes and layouts).
type fgdChange struct {
	at      time.Duration
	node    string
	hold    tracereplay.Hold
	sign    int
	ready   int
	isReady bool
	layouts []tracereplay.NodeLayout
}

// fgdChanges are r's samples and holds in time order, releases before
// takes at one instant: a node handed over at once is never counted
// twice.
func fgdChanges(r tracereplay.Result, gpus int) []fgdChange {
	var cs []fgdChange
	for i, s := range r.Timeline {
		at := s.At
		if i == 0 {
			at = 0
		}
		if at < r.Horizon {
			cs = append(cs, fgdChange{at: at, ready: int(s.GPUs+0.5) / gpus, isReady: true, layouts: s.Layouts})
		}
	}
	for _, j := range r.Jobs {
		runs, _ := j.Holding()
		for _, run := range runs {
			if overlap(run.Start, run.End, r.Horizon) <= 0 {
				continue
			}
			for _, h := range run.Held {
				cs = append(cs, fgdChange{at: max(run.Start, 0), node: run.Node, hold: h, sign: 1},
					fgdChange{at: min(run.End, r.Horizon), node: run.Node, hold: h, sign: -1})
			}
		}
	}
	slices.SortStableFunc(cs, func(a, b fgdChange) int {
		if a.at != b.at {
			return cmp.Compare(a.at, b.at)
		}
		return a.sign - b.sign
	})
	return cs
}

// fgdState is FGDSeries' nodes that are not empty and whole: those in use
// and those with MPS GPUs, each with its FGD and free capacity, and their
// sums.
type fgdState struct {
	l                 Layout
	mix               []Shape
	use               map[string]*NodeUse
	mps               map[string][]tracereplay.MPSGPU
	nodeFGD, nodeFree map[string]float64
	fgd, free         float64
}

// setLayouts takes a sample's MPS GPUs; nodes it drops or adds change.
func (st *fgdState) setLayouts(ls []tracereplay.NodeLayout) {
	if !st.l.dynamic {
		return
	}
	old := st.mps
	st.mps = make(map[string][]tracereplay.MPSGPU, len(ls))
	for _, nl := range ls {
		st.mps[nl.Node] = nl.MPS
	}
	for node := range old {
		st.update(node)
	}
	for node := range st.mps {
		if _, done := old[node]; !done {
			st.update(node)
		}
	}
}

// update recomputes one node's figures.
func (st *fgdState) update(node string) {
	st.fgd -= st.nodeFGD[node]
	st.free -= st.nodeFree[node]
	u, used := st.use[node]
	if !used && len(st.mps[node]) == 0 {
		delete(st.nodeFGD, node)
		delete(st.nodeFree, node)
		return
	}
	var nu NodeUse
	if used {
		nu = *u
	}
	l := st.l.At(st.mps[node], nu)
	st.nodeFGD[node], st.nodeFree[node] = l.FGD(nu, st.mix), l.Free(nu)
	st.fgd += st.nodeFGD[node]
	st.free += st.nodeFree[node]
}
