package apm

import (
	"cmp"
	"slices"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/contract/gpulayout"
	"github.com/nomad-gpu/nomad-gpu/internal/fgd"

	"github.com/nomad-gpu/nomad-gpu/nomadview"
)

// The GPU-equivalent figures: capacity, allocation and FGD fragmentation
// (package fgd, the trace replay's definition) per pool and datacenter.
// Instance counts (the device figures) weigh an MPS share like a whole
// GPU; these weigh each instance by the part of a GPU it is.

// PoolKey labels the GPU-equivalent figures: a node's pool and datacenter.
// There is no device label: fragmentation weighs every device kind of a
// node against the pool's whole mix of requests.
type PoolKey struct{ Pool, Datacenter string }

// GPUFigure is the GPU capacity of one PoolKey in GPU-equivalents (GPUWeight)
// over the healthy whole GPUs, MIG instances and MPS shares of schedulable
// nodes.
type GPUFigure struct {
	// Capacity is the healthy instances; Allocated those held by a pending
	// or running allocation; Free the others.
	Capacity, Allocated, Free float64
	// Fragmentation is FGD: Σ over the nodes of the free capacity that a
	// request drawn from the pool's mix (RequestMixes) cannot use, its
	// expectation over the mix (fgd.Node.FGD).
	Fragmentation float64
}

// FragmentationRatio is Fragmentation / Free, 0 with nothing free.
func (g *GPUFigure) FragmentationRatio() float64 {
	if g.Free <= 0 {
		return 0
	}
	return min(1, g.Fragmentation/g.Free)
}

// RequestShape is one request shape of a pool's mix: Count instances of
// Device, and its share of the pool's requests.
type RequestShape struct {
	Device DeviceSpec
	Count  int
	Weight float64
}

// RequestMixes is each pool's mix of request shapes, the workload FGD
// weighs free capacity against. The requests are
//
//   - held: each device block of a task of a pending or running allocation
//     on a node of the pool, as the instances it holds: Count is how many,
//     Device their group's vendor/type, and for MIG the profile (the GPU
//     of an MPS share, or the model of a whole GPU, is where the request
//     landed, not what it asked for);
//   - queued: each device an unplaced allocation of a blocked evaluation
//     asks for (its tasks' counts summed, as the queue figures count
//     them), as the job names it, for a job of the pool (of the built-in
//     pool "all": every pool with nodes);
//
// weighted by their number: a shape's Weight is its requests over the
// pool's. Only requests for GPUs, MIG instances and MPS shares count; a
// request naming no vendor is nvidia's. A pool with no request has no mix
// (and no fragmentation). Shapes are sorted by device, then count.
func RequestMixes(s *Snapshot) map[string][]RequestShape {
	type shapeKey struct {
		dev   DeviceSpec
		count int
	}
	counts := map[string]map[shapeKey]int{}
	add := func(pool string, d DeviceSpec, count, n int) {
		m := counts[pool]
		if m == nil {
			m = map[shapeKey]int{}
			counts[pool] = m
		}
		m[shapeKey{d, count}] += n
	}
	pools := map[string]bool{}
	for i := range s.Nodes {
		n := &s.Nodes[i]
		pools[n.Pool] = true
		for _, u := range n.Used {
			if len(u.IDs) > 0 && nomadview.IsGPUAsk(u.DeviceSpec) {
				add(n.Pool, heldSpec(u.DeviceSpec), len(u.IDs), 1)
			}
		}
	}
	for i := range s.Work {
		w := &s.Work[i]
		if w.Source != FromBlockedEval || w.Allocs <= 0 {
			continue
		}
		for _, a := range w.Asks {
			if a.Count <= 0 || !nomadview.IsGPUAsk(a.Device) {
				continue
			}
			d := askedSpec(a.Device)
			if w.Pool != "all" {
				add(w.Pool, d, a.Count, w.Allocs)
				continue
			}
			for p := range pools {
				add(p, d, a.Count, w.Allocs)
			}
		}
	}
	out := make(map[string][]RequestShape, len(counts))
	for pool, m := range counts {
		total := 0
		for _, n := range m {
			total += n
		}
		mix := make([]RequestShape, 0, len(m))
		for k, n := range m {
			mix = append(mix, RequestShape{Device: k.dev, Count: k.count, Weight: float64(n) / float64(total)})
		}
		slices.SortFunc(mix, func(a, b RequestShape) int {
			if c := cmp.Compare(a.Device.String(), b.Device.String()); c != 0 {
				return c
			}
			return cmp.Compare(a.Count, b.Count)
		})
		out[pool] = mix
	}
	return out
}

// askedSpec is the device a queued request asks for: as named, nvidia's
// when it names no vendor.
func askedSpec(d DeviceSpec) DeviceSpec {
	if d.Vendor == "" {
		d.Vendor = contract.Vendor
	}
	return d
}

// heldSpec is the device a request asked for, as far as the instances it
// holds tell: their group's vendor and type, and a MIG group's profile.
func heldSpec(d DeviceSpec) DeviceSpec {
	d = askedSpec(d)
	if d.Type != contract.SliceMIG {
		d.Name = ""
	}
	return d
}

// GPUWeight is one instance of device group g in GPU-equivalents
// (nomadview's rule).
func GPUWeight(g DeviceSpec) float64 { return nomadview.GPUWeight(g) }

// gpuGroup is a group of a node's instances as package fgd sees it: a
// whole-GPU or MIG device group, or one GPU's shares of an MPS group.
type gpuGroup struct {
	spec DeviceSpec
	// kind is its pool: nvidia/gpu, nvidia/mps or nvidia/mig/<profile>.
	kind string
	fgd.Group
	// relayable are the free whole GPUs of a whole-GPU group that the
	// controller may split into shares (LayoutGPU.Relayable); idle says
	// an MPS GPU's group has no share held and may be made whole again.
	relayable int
	idle      bool
}

// mpsGPU names the GPU an MPS share is of by its UUID, as layouts name
// GPUs: the read model's (nomadview.PhysicalGPUOf, from the share's ID),
// else the GPU's key.
func mpsGPU(in *DeviceInstance) string {
	if in.GPU.UUID != "" {
		return in.GPU.UUID
	}
	return in.GPU.Key()
}

// nodeGPUs returns a schedulable node's GPU, MIG and MPS groups with their
// free instances (healthy, in held by none), and the GPU-equivalents of
// its healthy instances and of those held. An MPS group is split by GPU
// (mpsGPU), each share weighing 1 over its GPU's shares, healthy or not.
// With layouts that follow the queue, the free whole GPUs and the MPS
// GPUs with no share held that the controller may relay are marked
// (gpuGroup.relayable, idle).
func nodeGPUs(n *Node, held map[string]bool) (groups []gpuGroup, capacity, allocated float64) {
	relay := map[string]bool{}
	for _, l := range n.Layouts {
		relay[l.UUID] = l.Relayable()
	}
	for gi := range n.Devices {
		g := &n.Devices[gi]
		if !nomadview.IsGPUAsk(g.DeviceSpec) {
			continue
		}
		kind := heldSpec(g.DeviceSpec).String()
		if g.Type != contract.SliceMPS {
			w := GPUWeight(g.DeviceSpec)
			grp := gpuGroup{spec: g.DeviceSpec, kind: kind, Group: fgd.Group{Weight: w}}
			for ii := range g.Instances {
				in := &g.Instances[ii]
				if !in.Healthy {
					continue
				}
				capacity += w
				if !freeRule.Free(in.Healthy, held[in.ID]) {
					allocated += w
				} else {
					grp.Free++
					if g.Type == contract.SliceGPU && relay[in.ID] {
						grp.relayable++
					}
				}
			}
			groups = append(groups, grp)
			continue
		}
		type share struct{ all, healthy, held int }
		var order []string
		perGPU := map[string]*share{}
		for ii := range g.Instances {
			in := &g.Instances[ii]
			k := mpsGPU(in)
			c := perGPU[k]
			if c == nil {
				c = &share{}
				perGPU[k] = c
				order = append(order, k)
			}
			c.all++
			if in.Healthy {
				c.healthy++
				if !freeRule.Free(in.Healthy, held[in.ID]) {
					c.held++
				}
			}
		}
		for _, k := range order {
			c := perGPU[k]
			w := 1 / float64(c.all)
			capacity += float64(c.healthy) * w
			allocated += float64(c.held) * w
			groups = append(groups, gpuGroup{spec: g.DeviceSpec, kind: kind, Group: fgd.Group{Free: c.healthy - c.held, Weight: w},
				idle: c.held == 0 && c.healthy == c.all && relay[k]})
		}
	}
	return groups, capacity, allocated
}

// fgdNode is a node's groups as package fgd sees them for requests of
// device r: first a pool of kind r.String() holding the groups r is
// compatible with (DeviceSpec.Compatible, the queries' matching of
// requests to device groups), one request taking from one of them (Nomad
// fills a request from one device group; an MPS request takes one GPU's
// shares); then the other groups, in pools by kind. For r a kind itself
// (nvidia/gpu, nvidia/mps, nvidia/mig/<profile>) these are the node's
// pools by kind: its whole GPUs; its MPS shares, a group per GPU; one
// pool per MIG profile.
//
// GPUs the controller may relay serve r too, as FGD's own model has any
// free GPU take any request: for an MPS request, each relayable free
// whole GPU is a GPU of shares (DefaultShares of them); for a request of
// any whole GPU, each idle MPS GPU is one more whole GPU of the node's
// first whole-GPU group.
func fgdNode(groups []gpuGroup, r DeviceSpec) fgd.Node {
	use := fgd.Pool{Kind: r.String(), OneGroup: true}
	var rest fgd.Node
	whole := 0
	for _, g := range groups {
		switch {
		case r.Type == contract.SliceMPS && g.relayable > 0:
			shares := gpulayout.DefaultShares
			for range g.relayable {
				use.Groups = append(use.Groups, fgd.Group{Free: shares, Weight: 1 / float64(shares)})
			}
			g.Free -= g.relayable
		case r.Type == contract.SliceGPU && r.Name == "" && g.idle:
			whole++
			continue
		}
		if r.Compatible(g.spec) {
			use.Groups = append(use.Groups, g.Group)
			continue
		}
		i := slices.IndexFunc(rest, func(p fgd.Pool) bool { return p.Kind == g.kind })
		if i < 0 {
			rest = append(rest, fgd.Pool{Kind: g.kind, OneGroup: true})
			i = len(rest) - 1
		}
		rest[i].Groups = append(rest[i].Groups, g.Group)
	}
	if whole > 0 {
		if len(use.Groups) == 0 {
			use.Groups = append(use.Groups, fgd.Group{Weight: 1})
		}
		use.Groups[0].Free += whole
	}
	return append(fgd.Node{use}, rest...)
}

// deviceMix is the shapes of a mix that ask for one device, as package
// fgd takes them.
type deviceMix struct {
	dev    DeviceSpec
	shapes []fgd.Shape
}

func byDevice(mix []RequestShape) []deviceMix {
	var out []deviceMix
	for _, s := range mix {
		if n := len(out); n == 0 || out[n-1].dev != s.Device {
			out = append(out, deviceMix{dev: s.Device})
		}
		d := &out[len(out)-1]
		d.shapes = append(d.shapes, fgd.Shape{Kind: s.Device.String(), Count: s.Count, Weight: s.Weight})
	}
	return out
}

// GPUFigures computes the GPU-equivalent figures by PoolKey, over the
// ready nodes with GPUs, MIG instances or MPS shares (a pool whose nodes
// are all unschedulable has zeros):
//
//   - Capacity, Allocated, Free: the GPU-equivalents of the healthy
//     instances of schedulable nodes, of those held by a pending or
//     running allocation, and of the others.
//   - Fragmentation: Σ over schedulable nodes n of Σ over the shapes s of
//     the pool's mix of weight(s) · frag(n, s), frag being fgd.Node.Frag
//     of n's pools for s's device (fgdNode): all of n's free capacity
//     where s fits none of its compatible groups, else the free capacity
//     of the other groups and of the compatible ones with fewer free
//     instances than s asks for.
func GPUFigures(s *Snapshot) map[PoolKey]*GPUFigure {
	out := map[PoolKey]*GPUFigure{}
	mixes := map[string][]deviceMix{}
	for pool, mix := range RequestMixes(s) {
		mixes[pool] = byDevice(mix)
	}
	held := map[string]bool{}
	for i := range s.Nodes {
		n := &s.Nodes[i]
		if n.Status != "ready" || !slices.ContainsFunc(n.Devices, func(g DeviceGroup) bool { return nomadview.IsGPUAsk(g.DeviceSpec) }) {
			continue
		}
		k := PoolKey{n.Pool, n.Datacenter}
		f := out[k]
		if f == nil {
			f = &GPUFigure{}
			out[k] = f
		}
		if !n.Schedulable() {
			continue
		}
		n.markHeld(held)
		groups, capacity, allocated := nodeGPUs(n, held)
		var free float64
		for _, g := range groups {
			free += float64(g.Free) * g.Weight
		}
		f.Capacity += capacity
		f.Allocated += allocated
		f.Free += free
		if free == 0 {
			continue
		}
		for _, m := range mixes[n.Pool] {
			f.Fragmentation += fgdNode(groups, m.dev).FGD(m.shapes)
		}
	}
	return out
}
