package nomadview

import (
	"maps"
	"slices"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/contract"
)

// HeldDevices are the instances of one device group that one task of an
// allocation holds.
type HeldDevices struct {
	Device DeviceSpec
	IDs    []string
	Task   string
}

// allocDevices lists the device instances an allocation was given, by
// task name, then in the order the task lists them.
func allocDevices(a *api.AllocationListStub) []HeldDevices {
	if a.AllocatedResources == nil {
		return nil
	}
	var out []HeldDevices
	for _, task := range slices.Sorted(maps.Keys(a.AllocatedResources.Tasks)) {
		tr := a.AllocatedResources.Tasks[task]
		if tr == nil {
			continue
		}
		for _, d := range tr.Devices {
			if d == nil || len(d.DeviceIDs) == 0 {
				continue
			}
			out = append(out, HeldDevices{Device: DeviceSpec{Vendor: d.Vendor, Type: d.Type, Name: d.Name}, IDs: d.DeviceIDs, Task: task})
		}
	}
	return out
}

// HeldSlice is what one allocation's task holds on a node.
type HeldSlice struct {
	HeldDevices
	Alloc *api.AllocationListStub
}

// HeldSlices maps node ID → the device instances its pending and running
// allocations hold (any device: a held instance is not free, whatever it
// is), in the order the allocations were listed.
func (s *Snapshot) HeldSlices() map[string][]HeldSlice {
	out := map[string][]HeldSlice{}
	for _, a := range s.Allocs {
		if a == nil || !holdsDevices(a) {
			continue
		}
		for _, h := range allocDevices(a) {
			out[a.NodeID] = append(out[a.NodeID], HeldSlice{HeldDevices: h, Alloc: a})
		}
	}
	return out
}

// HeldIDs maps node ID → the device instance IDs its pending and running
// allocations hold. By node: instance IDs are unique on a node only
// (simulated nodes of one seed share GPU UUIDs).
func (s *Snapshot) HeldIDs() map[string]map[string]bool {
	out := map[string]map[string]bool{}
	for node, hs := range s.HeldSlices() {
		m := map[string]bool{}
		for _, h := range hs {
			for _, id := range h.IDs {
				m[id] = true
			}
		}
		out[node] = m
	}
	return out
}

// UnhealthyIDs maps node ID → the device instance IDs the servers see
// unhealthy on it (a failed GPU, a relayout's drain, a hold), by node as
// HeldIDs.
func (s *Snapshot) UnhealthyIDs() map[string]map[string]bool {
	out := map[string]map[string]bool{}
	for _, n := range s.Nodes {
		if n == nil || n.NodeResources == nil {
			continue
		}
		m := map[string]bool{}
		for _, d := range n.NodeResources.Devices {
			for _, in := range d.Instances {
				if in != nil && !in.Healthy {
					m[in.ID] = true
				}
			}
		}
		out[n.ID] = m
	}
	return out
}

// holdsDevices reports whether an allocation holds its devices now.
func holdsDevices(a *api.AllocationListStub) bool {
	return a.ClientStatus == api.AllocClientStatusPending || a.ClientStatus == api.AllocClientStatusRunning
}

// StillOffered says whether a's node, as the servers last listed it,
// offers every device a was given as a healthy instance: the servers have
// not seen the drain (or removal) that refused one of them yet, and an
// allocation that failed for its devices would likely be placed on them
// again. A multi-GPU allocation's other GPUs stay offered throughout, so
// one device not offered is enough to say the servers caught up.
func (s *Snapshot) StillOffered(a *api.AllocationListStub) bool {
	n := s.Node(a.NodeID)
	if n == nil || n.NodeResources == nil {
		return false
	}
	offered := map[string]bool{}
	for _, d := range n.NodeResources.Devices {
		for _, in := range d.Instances {
			if in != nil && in.Healthy {
				offered[in.ID] = true
			}
		}
	}
	given := 0
	for _, h := range allocDevices(a) {
		for _, id := range h.IDs {
			if !offered[id] {
				return false
			}
			given++
		}
	}
	return given > 0
}

// FreeSlices counts the free GPU instances of a node pool: healthy, on a
// schedulable node, held by no pending or running allocation.
type FreeSlices struct {
	// GPUs are whole GPUs (nvidia/gpu).
	GPUs int
	// MIG counts MIG instances by profile (nvidia/mig/<profile>).
	MIG map[string]int
	// MPS counts MPS shares (nvidia/mps), of any GPU.
	MPS int
}

// FreeSlices maps node pool → its free GPU instances (FreeRule, counting
// no relaying GPU). Every pool with a schedulable node with GPU devices is
// there, with zeros when nothing is free.
func (s *Snapshot) FreeSlices() map[string]FreeSlices {
	acc := map[string]*FreeSlices{}
	s.eachFree(func(n *api.NodeListStub, d *api.NodeDeviceResource, free int) {
		f := acc[n.NodePool]
		if f == nil {
			f = &FreeSlices{MIG: map[string]int{}}
			acc[n.NodePool] = f
		}
		for range free {
			f.add(d.Type, d.Name)
		}
	})
	out := make(map[string]FreeSlices, len(acc))
	for pool, f := range acc {
		out[pool] = *f
	}
	return out
}

// FreeGPUs maps each schedulable node with whole GPUs of ours to how
// many of them are free (FreeRule).
func (s *Snapshot) FreeGPUs() map[string]int {
	out := map[string]int{}
	s.eachFree(func(n *api.NodeListStub, d *api.NodeDeviceResource, free int) {
		if d.Type == contract.SliceGPU {
			out[n.ID] += free
		}
	})
	return out
}

// eachFree calls visit with each GPU device group of ours on a
// schedulable node and how many of its instances are free.
func (s *Snapshot) eachFree(visit func(n *api.NodeListStub, d *api.NodeDeviceResource, free int)) {
	held := s.HeldIDs()
	for _, n := range s.Nodes {
		if n == nil || !Schedulable(n) || n.NodeResources == nil {
			continue
		}
		for _, d := range n.NodeResources.Devices {
			if d == nil || d.Vendor != contract.Vendor || !IsGPUAsk(DeviceSpec{Vendor: d.Vendor, Type: d.Type}) {
				continue
			}
			free := 0
			for _, in := range d.Instances {
				if in != nil && (FreeRule{}).Free(in.Healthy, held[n.ID][in.ID]) {
					free++
				}
			}
			visit(n, d, free)
		}
	}
}

// add counts one free instance of a device group of type typ, name name.
func (f *FreeSlices) add(typ, name string) {
	switch typ {
	case contract.SliceGPU:
		f.GPUs++
	case contract.SliceMPS:
		f.MPS++
	case contract.SliceMIG:
		f.MIG[name]++
	}
}

// Profiles are the MIG profiles with free instances, sorted.
func (f FreeSlices) Profiles() []string {
	out := make([]string, 0, len(f.MIG))
	for p, n := range f.MIG {
		if n > 0 {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}
