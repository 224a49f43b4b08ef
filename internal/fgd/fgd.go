// Package fgd is GPU fragmentation as FGD defines it (Weng et al., "Beware
// of Fragmentation: Scheduling GPU-Sharing Workloads with Fragmentation
// Gradient Descent", USENIX ATC 2023): the expected free GPU capacity, in
// GPU-equivalents, that a request drawn from the workload's mix of request
// shapes cannot use. A share of free instances (what an instance count
// says) is not fragmentation: an MPS share is a quarter of a GPU, not a
// GPU, and a free share on a partly used GPU is no waste while the next
// fractional job fits it.
//
// The trace replay's figures and the APM's cluster figures both compute
// it here, so the dashboard and the benchmark mean the same thing.
//
// A node is a set of device pools, one per device kind a request can name
// (whole GPUs, MPS shares, a MIG profile). For each shape of the mix:
//
//   - where the shape does not fit the node at all, all the node's free
//     capacity counts;
//   - where it fits, the node's free capacity that the shape cannot use
//     counts: the free capacity of other pools and, in a pool whose
//     request must come from one group (MPS shares from one GPU), the
//     groups with fewer free instances than it asks for.
//
// A pool may say what its free instances can be made into (Pool.Becomes):
// with GPU layouts that follow the queue, a GPU no allocation holds is
// free for every kind the planner may make of it, as in FGD's own model,
// where any free GPU takes any request. A request of such a kind can use
// it too, each instance as one group of the instances it becomes. What an
// allocation holds part of cannot be relaid, so a partly used MPS GPU
// stays fragmentation for a whole-GPU request.
//
// FGD is the sum over shapes, weighted by their share of the mix.
package fgd

// Group is the instances of one physical device in a pool (the shares of
// one MPS GPU), or of a whole pool where requests may span devices.
type Group struct {
	// Free are the free instances.
	Free int
	// Weight is one instance's GPU-equivalents (1 for a whole GPU,
	// 1/shares for an MPS share, sevenths/7 for a MIG instance).
	Weight float64
}

// Pool is a node's instances of one device kind.
type Pool struct {
	// Kind is what a request names to get them ("gpu", "mps",
	// "mig/3g.40gb", or a Nomad device name).
	Kind string
	// OneGroup says a request's instances must all come from one group.
	OneGroup bool
	Groups   []Group
	// Becomes are the kinds each free instance can be made into.
	Becomes []Conversion
}

// Conversion is a kind a free instance of a pool can be made into: Per
// instances of Kind (a GPU made 8 MPS shares: Per 8), all of one group
// where OneGroup.
type Conversion struct {
	Kind     string
	Per      int
	OneGroup bool
}

// Node is a node's pools.
type Node []Pool

// Shape is one request shape: Count instances of Kind, and its share of
// the mix.
type Shape struct {
	Kind   string
	Count  int
	Weight float64
}

// Free is the node's free capacity in GPU-equivalents.
func (n Node) Free() float64 {
	var f float64
	for _, p := range n {
		f += p.free()
	}
	return f
}

func (p Pool) free() float64 {
	var f float64
	for _, g := range p.Groups {
		f += float64(g.Free) * g.Weight
	}
	return f
}

// usable is the free capacity of p a request for count instances can
// take from; 0 when it does not fit.
func (p Pool) usable(count int) float64 {
	if p.OneGroup {
		var u float64
		for _, g := range p.Groups {
			if g.Free >= count {
				u += float64(g.Free) * g.Weight
			}
		}
		return u
	}
	n := 0
	for _, g := range p.Groups {
		n += g.Free
	}
	if n < count {
		return 0
	}
	return p.free()
}

// Frag is the free capacity of n that a request of shape s cannot use.
func (n Node) Frag(s Shape) float64 {
	return n.Free() - n.poolFor(s.Kind).usable(s.Count)
}

// poolFor is the pool a request of kind takes from: the node's pool of that
// kind with, as groups of their own, the free instances of other pools
// that can become it.
func (n Node) poolFor(kind string) Pool {
	out := Pool{Kind: kind}
	for _, p := range n {
		if p.Kind == kind {
			out.OneGroup = p.OneGroup
			out.Groups = append(out.Groups, p.Groups...)
		}
	}
	for _, p := range n {
		for _, c := range p.Becomes {
			if c.Kind != kind || c.Per < 1 {
				continue
			}
			out.OneGroup = out.OneGroup || c.OneGroup
			for _, g := range p.Groups {
				for range g.Free {
					out.Groups = append(out.Groups, Group{Free: c.Per, Weight: g.Weight / float64(c.Per)})
				}
			}
		}
	}
	return out
}

// FGD is the node's expected unusable free capacity over the mix.
func (n Node) FGD(mix []Shape) float64 {
	var sum float64
	free := n.Free() // Frag's, the same for every shape
	for _, s := range mix {
		sum += s.Weight * (free - n.usableBy(s.Kind, s.Count))
	}
	return sum
}

// usableBy is poolFor(kind).usable(count), summed in the same order over
// the pools of kind without building their pool where no pool becomes
// another kind.
func (n Node) usableBy(kind string, count int) float64 {
	one := false
	for _, p := range n {
		if len(p.Becomes) > 0 {
			return n.poolFor(kind).usable(count)
		}
		if p.Kind == kind {
			one = p.OneGroup
		}
	}
	var u float64
	total := 0
	for _, p := range n {
		if p.Kind != kind {
			continue
		}
		for _, g := range p.Groups {
			if !one {
				total += g.Free
			} else if g.Free >= count {
				u += float64(g.Free) * g.Weight
			}
		}
	}
	if one {
		return u
	}
	if total < count {
		return 0
	}
	for _, p := range n {
		if p.Kind != kind {
			continue
		}
		for _, g := range p.Groups {
			u += float64(g.Free) * g.Weight // one running sum, as free's
		}
	}
	return u
}
