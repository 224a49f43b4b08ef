package nomadview

import (
	"fmt"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/contract"
)

// NeverFits says why a queued group can be placed on none of the nodes
// its pool has, however free they become: one allocation asks for more
// whole GPUs than any such node has ("" when some node could take it, or
// when the pool has no GPU node to judge by, as a pool scaled to zero).
// Nomad says only that the nodes were ineligible or exhausted, and the
// group waits for ever.
//
// A node's whole GPUs are its layout groups where its device plugin
// publishes them (one per GPU: the controller can make any of them
// whole), else the instances of its whole-GPU device groups. A request
// naming a model counts only GPUs of that model. The nodes are those of
// the group's pool (every node for pool "all") in one of its
// datacenters, of any status: a node down now may return. MIG and MPS
// asks are not judged.
func (s *Snapshot) NeverFits(q QueuedGroup) string {
	var want int
	var named string
	for _, a := range q.Asks {
		if IsGPUAsk(a.Device) && a.Device.Type == contract.SliceGPU {
			want += a.Count
			if a.Device.Name != "" {
				named = a.Device.Name
			}
		}
	}
	if want == 0 {
		return ""
	}
	most, judged := 0, false
	for _, n := range s.Nodes {
		if n == nil || n.NodeResources == nil || !placeable(n, q.Pool, q.Datacenters) {
			continue
		}
		gpus, has := wholeGPUs(n, named)
		judged = judged || has
		most = max(most, gpus)
	}
	if !judged || want <= most {
		return ""
	}
	what := fmt.Sprintf("%d GPUs", want)
	if named != "" {
		what = fmt.Sprintf("%d %s GPUs", want, named)
	}
	where := fmt.Sprintf("pool %q nodes", q.Pool)
	if q.Pool == api.NodePoolAll {
		where = "the cluster's nodes"
	}
	// Short: top shows it on one line of 80 columns.
	return fmt.Sprintf("never fits: asks %s on one node, %s have at most %d", what, where, most)
}

// GroupNeverFits is NeverFits for one allocation of group g of job, queued
// or not: a gang's member before the controller admits it.
func (s *Snapshot) GroupNeverFits(job *api.Job, g *api.TaskGroup) string {
	asks, gpuTask := groupAsks(g)
	if gpuTask == "" {
		return ""
	}
	q := QueuedGroup{Asks: asks, Pool: jobPool(job, nil), Datacenters: job.Datacenters}
	if len(q.Datacenters) == 0 {
		q.Datacenters = []string{"*"}
	}
	return s.NeverFits(q)
}

// JobNodes are the nodes job's allocations could be placed on, of any
// status: those of its pool (every node for pool "all") in one of its
// datacenters.
func (s *Snapshot) JobNodes(job *api.Job) []*api.NodeListStub {
	pool, dcs := jobPool(job, nil), job.Datacenters
	if len(dcs) == 0 {
		dcs = []string{"*"}
	}
	var out []*api.NodeListStub
	for _, n := range s.Nodes {
		if n != nil && placeable(n, pool, dcs) {
			out = append(out, n)
		}
	}
	return out
}

// placeable says whether node n is of pool and in one of dcs.
func placeable(n *api.NodeListStub, pool string, dcs []string) bool {
	return (pool == api.NodePoolAll || n.NodePool == pool) && inDatacenters(n.Datacenter, dcs)
}

// wholeGPUs is how many whole GPUs (of model named, when not "") node n
// could offer, and whether it has GPUs of ours at all.
func wholeGPUs(n *api.NodeListStub, named string) (int, bool) {
	layouts, whole, has := 0, 0, false
	for _, d := range n.NodeResources.Devices {
		if d == nil || d.Vendor != contract.Vendor {
			continue
		}
		switch d.Type {
		case contract.SliceLayout:
			has = true
			if named == "" || AttrString(d.Attributes, contract.AttrLayoutProduct) == named {
				layouts++
			}
		case contract.SliceGPU:
			has = true
			if named == "" || d.Name == named {
				whole += len(d.Instances)
			}
		case contract.SliceMIG, contract.SliceMPS:
			has = true
		}
	}
	if layouts > 0 {
		return layouts, has
	}
	return whole, has
}

// inDatacenters says whether dc is one of the job's datacenters, which
// may hold * wildcards ("*" is every one).
func inDatacenters(dc string, dcs []string) bool {
	if len(dcs) == 0 {
		return true
	}
	for _, p := range dcs {
		if DatacenterMatch(p, dc) {
			return true
		}
	}
	return false
}
