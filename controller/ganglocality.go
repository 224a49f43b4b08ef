package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/controller/gang"
	"github.com/nomad-gpu/nomad-gpu/nomadview"
)

// Locality (docs/design/gangs.md): Nomad has no constraint "every
// allocation on one value of an attribute", so the leader chooses the
// value. It plans the gang pinned to one domain (a datacenter, a value
// of the job's nomad_gpu_gang_locality) a tick, tightest fit first, and
// admits it by registering the pinned copy; the pins are taken off again
// before the next admission.

// nodeReadsPerTick bounds the node reads a tick makes for ${meta.*} and
// ${attr.*} localities, which the node list does not carry: a first
// admission on a large cluster waits a few ticks instead of one tick
// making a read per node.
const nodeReadsPerTick = 64

// nodeDetail is a node's meta and attributes as read at its modify index.
type nodeDetail struct {
	index       uint64
	meta, attrs map[string]string
}

// domains are the domains the gang may be admitted in (gang.Domains) and
// whether every node of its pool was judged: a node whose attributes are
// not read yet is left out.
func (g *Gangs) domains(ctx context.Context, snap *nomadview.Snapshot, job *api.Job, spec gang.Spec, n gangNomad) ([]gang.Domain, bool) {
	locality := spec.Locality
	if locality == "${node.region}" {
		locality = "" // a cluster's nodes share its region
	}
	nodes := snap.JobNodes(job)
	if locality == "" && !slices.ContainsFunc(nodes, func(n *api.NodeListStub) bool { return n.Datacenter != nodes[0].Datacenter }) {
		return []gang.Domain{{}}, true // no pin: the free GPUs order nothing
	}
	free := snap.FreeGPUs()
	var places []gang.Place
	complete := true
	for _, node := range nodes {
		p := gang.Place{ID: node.ID, Datacenter: node.Datacenter, FreeGPUs: free[node.ID]}
		if locality != "" {
			var read bool
			p.Value, p.Known, read = g.nodeValue(ctx, node, locality, n)
			if !read {
				complete = false
				continue
			}
		}
		places = append(places, p)
	}
	return gang.Domains(places, locality, gangGPUs(job, spec)), complete
}

// nodeValue is node's value of attr and whether it has one; read is
// false when it needs the node's details and this tick's reads are
// spent or the read failed.
func (g *Gangs) nodeValue(ctx context.Context, node *api.NodeListStub, attr string, n gangNomad) (value string, known, read bool) {
	inner := strings.TrimSuffix(strings.TrimPrefix(attr, "${"), "}")
	switch inner {
	case "node.datacenter":
		return node.Datacenter, true, true
	case "node.class":
		return node.NodeClass, node.NodeClass != "", true
	case "node.pool":
		return node.NodePool, true, true
	case "node.unique.name":
		return node.Name, true, true
	case "node.unique.id":
		return node.ID, true, true
	}
	d, ok := g.nodes[node.ID]
	if !ok || d.index != node.ModifyIndex {
		if g.nodeReads >= nodeReadsPerTick {
			return "", false, false
		}
		g.nodeReads++
		full, err := n.node(ctx, node.ID)
		if err != nil {
			g.log.Debug("gang: reading a node's attributes failed; tried on the next tick", "node", node.Name, "error", err)
			return "", false, false
		}
		d = nodeDetail{index: node.ModifyIndex, meta: full.Meta, attrs: full.Attributes}
		g.nodes[node.ID] = d
		g.nodeVersion++
	}
	kind, key, _ := strings.Cut(inner, ".")
	m := d.attrs
	if kind == "meta" {
		m = d.meta
	}
	value, known = m[key]
	return value, known, true
}

// noLocality says why a gang whose locality no node of its pool has can
// never be admitted; "" when some node has it, or not every node is read
// yet.
func (g *Gangs) noLocality(ctx context.Context, snap *nomadview.Snapshot, job *api.Job, spec gang.Spec, n gangNomad) string {
	if spec.Locality == "" {
		return ""
	}
	doms, complete := g.domains(ctx, snap, job, spec, n)
	if len(doms) > 0 || !complete || len(snap.JobNodes(job)) == 0 {
		return ""
	}
	return fmt.Sprintf("meta.%s: no node of the job's pool and datacenters has %s; allowed: an attribute its nodes have", contract.MetaGangLocality, spec.Locality)
}

// gangGPUs is how many whole GPUs the gang's members ask for in all.
func gangGPUs(job *api.Job, spec gang.Spec) int {
	total := 0
	for _, sg := range spec.Groups {
		if tg := groupNamed(job, sg.Name); tg != nil {
			_, n := wholeGPUAsk(tg)
			total += sg.Members * n
		}
	}
	return total
}
