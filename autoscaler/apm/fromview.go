package apm

import (
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/controller/sizing"
	"github.com/nomad-gpu/nomad-gpu/nomadview"
)

// SnapshotOf is the figures' input made from a nomadview snapshot: its
// nodes with the instances their allocations hold (HeldSlices), its queue
// (QueuedGroups and PendingAllocs: the rules `nomad-gpu top` shows too)
// and, with runs, the GPU allocations the task figures and forecasts read
// (only the cluster figures need them). Now, Util and DefaultGPUsPerNode
// are left for the caller. v is not modified.
func SnapshotOf(v *nomadview.Snapshot, runs bool) *Snapshot {
	s := &Snapshot{}
	held := v.HeldSlices()
	s.Nodes = make([]Node, 0, len(v.Nodes))
	for _, n := range v.Nodes {
		if n != nil {
			node := nodeOf(n, held[n.ID])
			node.Removable = nomadview.EmptiedForRemoval(n) && len(v.WorkOn(n.ID)) == 0
			s.Nodes = append(s.Nodes, node)
		}
	}
	byID := make(map[string]*Node, len(s.Nodes))
	for i := range s.Nodes {
		byID[s.Nodes[i].ID] = &s.Nodes[i]
	}
	for _, g := range v.QueuedGroups() {
		w := blockedWork(g)
		w.NeverFits = v.NeverFits(g)
		s.Work = append(s.Work, w)
	}
	for _, p := range v.PendingAllocs() {
		if n := byID[p.Alloc.NodeID]; n != nil {
			s.Work = append(s.Work, pendingWork(p, n, jobPriority(v, p.Alloc)))
		}
	}
	if runs {
		s.Runs = allocRuns(v, held, byID)
	}
	s.Free = sizing.FreeCapacity(v.FreeSlices())
	return s
}

// nodeOf is a listed node with its device groups and the instances its
// pending and running allocations hold.
func nodeOf(n *api.NodeListStub, held []nomadview.HeldSlice) Node {
	out := Node{
		ID: n.ID, Name: n.Name, Pool: n.NodePool, Datacenter: n.Datacenter, Class: n.NodeClass,
		Status: n.Status, Eligible: n.SchedulingEligibility == api.NodeSchedulingEligible && !n.Drain,
	}
	if n.NodeResources != nil {
		for _, d := range n.NodeResources.Devices {
			switch {
			case d == nil:
			case d.Type == contract.SliceLayout:
				// One per GPU, with no instances: no capacity; read below.
			default:
				out.Devices = append(out.Devices, deviceGroupOf(d))
			}
		}
	}
	for _, g := range nomadview.NodeLayouts(n) {
		out.Layouts = append(out.Layouts, LayoutGPU{UUID: g.UUID, Current: g.Current, State: g.State, Pinned: g.Pinned, Fault: g.Fault})
	}
	for _, h := range held {
		out.Used = append(out.Used, UsedDevices{DeviceSpec: h.Device, IDs: h.IDs})
	}
	return out
}

func deviceGroupOf(d *api.NodeDeviceResource) DeviceGroup {
	g := DeviceGroup{
		DeviceSpec:  DeviceSpec{Vendor: d.Vendor, Type: d.Type, Name: d.Name},
		MemoryBytes: memoryBytes(d.Attributes[contract.AttrMemory]),
	}
	if d.Type == contract.SliceMPS {
		if k, ok := nomadview.AttrInt(d.Attributes, contract.AttrMPSShares); ok && k > 0 {
			g.Shares = k
		}
	}
	for _, in := range d.Instances {
		if in != nil {
			g.Instances = append(g.Instances, DeviceInstance{ID: in.ID, Healthy: in.Healthy, GPU: nomadview.PhysicalGPUOf(d.Type, in)})
		}
	}
	return g
}

// blockedWork is a queued group as the queue figures count it.
func blockedWork(g nomadview.QueuedGroup) Work {
	return Work{
		Source: FromBlockedEval, Namespace: g.Namespace, JobID: g.JobID, Group: g.Group,
		Allocs: g.Count, Asks: g.Asks, Since: g.Since,
		Pool: g.Pool, Datacenters: g.Datacenters, ClassRules: groupClassRules(g.Job, g.TaskGroup),
		CapacityBlocked: g.QuotaLimitReached == "",
		Priority:        g.Priority,
		Task:            g.GPUTask,
	}
}

// pendingWork is a pending allocation on node n: it may go only where it
// is, its node's pool, datacenter and class.
func pendingWork(p nomadview.PendingAlloc, n *Node, priority int) Work {
	a := p.Alloc
	return Work{
		Source: FromPendingAlloc, Namespace: a.Namespace, JobID: a.JobID, Group: a.TaskGroup,
		Allocs: 1, Asks: p.Held, Since: time.Unix(0, a.CreateTime),
		Pool: n.Pool, Datacenters: []string{n.Datacenter},
		ClassRules: []ClassRule{{Operand: "=", Value: n.Class}},
		Priority:   priority,
	}
}

// jobPriority is the listed priority of a's job, 0 when the job is not
// listed (purged).
func jobPriority(v *nomadview.Snapshot, a *api.AllocationListStub) int {
	if j := v.Job(nomadview.JobKey{Namespace: a.Namespace, ID: a.JobID}); j != nil {
		return j.Priority
	}
	return 0
}

// allocRuns are the allocations holding devices, finished ones first (an
// allocation both lists show, having finished between them, counts as
// finished), each with its node's pool and datacenter and its job's
// priority. Allocations of nodes not listed are left out.
func allocRuns(v *nomadview.Snapshot, held map[string][]nomadview.HeldSlice, byID map[string]*Node) []AllocRun {
	holding := map[string]bool{}
	for _, hs := range held {
		for _, h := range hs {
			holding[h.Alloc.ID] = true
		}
	}
	var out []AllocRun
	seen := make(map[string]bool, len(v.Finished))
	add := func(a *api.AllocationListStub) {
		n := byID[a.NodeID]
		if n == nil {
			return
		}
		r := runOf(a)
		r.Pool, r.Datacenter = n.Pool, n.Datacenter
		r.Tasks = sizing.RunsOf([]*api.AllocationListStub{a}, nil, nil)
		r.setPriority(jobPriority(v, a))
		out = append(out, r)
	}
	for _, a := range v.Finished {
		if a != nil {
			seen[a.ID] = true
			add(a)
		}
	}
	for _, a := range v.Allocs {
		if a != nil && holding[a.ID] && !seen[a.ID] {
			add(a)
		}
	}
	return out
}

// runOf reads an allocation's times. A task's first start is the earlier of
// its StartedAt (which a restart moves) and its oldest "Started" event
// still kept; the allocation's start is its tasks' earliest, its finish
// (terminal only) nomadview.FinishedAt.
func runOf(s *api.AllocationListStub) AllocRun {
	r := AllocRun{ID: s.ID, Namespace: s.Namespace, JobID: s.JobID, NodeID: s.NodeID, Status: s.ClientStatus}
	if s.CreateTime > 0 {
		r.Created = time.Unix(0, s.CreateTime)
	}
	for _, ts := range s.TaskStates {
		if ts == nil {
			continue
		}
		start := ts.StartedAt
		for _, e := range ts.Events {
			if e == nil || e.Type != api.TaskStarted || e.Time <= 0 {
				continue
			}
			if t := time.Unix(0, e.Time); start.IsZero() || t.Before(start) {
				start = t
			}
		}
		if !start.IsZero() && (r.Started.IsZero() || start.Before(r.Started)) {
			r.Started = start
		}
	}
	if r.Terminal() {
		r.Finished = nomadview.FinishedAt(s)
	}
	return r
}

// setPriority sets the allocation's and its task runs' job priority.
func (r *AllocRun) setPriority(p int) {
	r.Priority = p
	for i := range r.Tasks {
		r.Tasks[i].Priority = p
	}
}

const nodeClassTarget = "${node.class}"

// groupClassRules are the constraints on the node class of a group: the
// job's, the group's and its tasks'.
func groupClassRules(job *api.Job, tg *api.TaskGroup) []ClassRule {
	var out []ClassRule
	if job != nil {
		out = classRules(job.Constraints)
	}
	if tg == nil {
		return out
	}
	out = append(out, classRules(tg.Constraints)...)
	for _, t := range tg.Tasks {
		if t != nil {
			out = append(out, classRules(t.Constraints)...)
		}
	}
	return out
}

func classRules(cs []*api.Constraint) []ClassRule {
	var out []ClassRule
	for _, c := range cs {
		if c == nil || strings.TrimSpace(c.LTarget) != nodeClassTarget {
			continue
		}
		op := c.Operand
		if op == "" {
			op = "="
		}
		out = append(out, ClassRule{Operand: op, Value: c.RTarget})
	}
	return out
}

// memoryBytes reads a device memory attribute (MiB by convention; other
// byte units as given). A value without a known unit is 0.
func memoryBytes(a *api.Attribute) int64 {
	if a == nil {
		return 0
	}
	var v float64
	switch {
	case a.IntVal != nil:
		v = float64(*a.IntVal)
	case a.FloatVal != nil:
		v = *a.FloatVal
	default:
		return 0
	}
	mult, ok := byteUnits[strings.ToLower(a.Unit)]
	if !ok || v <= 0 {
		return 0
	}
	return int64(v * mult)
}

// byteUnits are the bytes of one memory attribute unit, by lower-case name.
var byteUnits = map[string]float64{
	"b": 1, "byte": 1, "bytes": 1,
	"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
	"kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
}
