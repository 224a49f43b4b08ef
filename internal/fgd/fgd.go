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
	free := n.Free()
	for _, p := range n {
		if p.Kind == s.Kind {
			if u := p.usable(s.Count); u > 0 {
				return free - u
			}
			break
		}
	}
	return free
}

// FGD is the node's expected unusable free capacity over the mix.
func (n Node) FGD(mix []Shape) float64 {
	var sum float64
	for _, s := range mix {
		sum += s.Weight * n.Frag(s)
	}
	return sum
}
