package apm

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/contract/gpulayout"
	"github.com/nomad-gpu/nomad-gpu/controller/sizing/history"
	"github.com/nomad-gpu/nomad-gpu/controller/sizing/predict"
	"github.com/nomad-gpu/nomad-gpu/nomadview"
)

// Snapshot is the cluster state the metrics are computed from. The cache
// builds one from Nomad; tests build them by hand. Every metric is a pure
// function of a Query and a Snapshot (Evaluate).
type Snapshot struct {
	// Now is the instant wait times are measured to.
	Now time.Time
	// Nodes are all nodes the plugin sees, of any status.
	Nodes []Node
	// Work is the queued GPU work: unplaced allocations of blocked
	// evaluations and placed allocations still pending.
	Work []Work
	// Util holds per-instance GPU utilisation by node ID. Only
	// gpu_util_pct reads it; nodes missing here report nothing.
	Util map[string][]InstanceUtil
	// DefaultGPUsPerNode is the node shape nodes_needed uses when neither
	// the query nor any matching node gives one (0: none).
	DefaultGPUsPerNode int
	// Runs are the GPU allocations the task figures read: those pending
	// or running, and those that finished recently (the cache keeps the
	// finished_window). Only the cluster figures read them.
	Runs []AllocRun
	// Free are the free slices per node pool and unit, as the read model
	// counts them (nomadview.Snapshot.FreeSlices): what the predictions
	// place queued work on.
	Free map[string]predict.Capacity
}

// Node is one Nomad node and its devices.
type Node struct {
	ID, Name   string
	Pool       string
	Datacenter string
	Class      string
	// Status is the node status (ready, down, initializing, disconnected).
	Status string
	// Eligible is scheduling eligibility, false while draining too.
	Eligible bool
	Devices  []DeviceGroup
	// Layouts are the node's GPU layout groups (contract.SliceLayout),
	// one per GPU, where its device plugin publishes them. They are no
	// capacity, so they are not in Devices; they tell nodes_needed the
	// node's GPUs.
	Layouts []LayoutGPU
	// Used lists the device instances held by the node's non-terminal
	// (pending or running) allocations.
	Used []UsedDevices
	// Removable: the controller emptied the node for removal
	// (nomadview.EmptiedForRemoval) and it runs nothing but system jobs.
	Removable bool
}

// Schedulable is a node new work can be placed on: ready, eligible and not
// draining.
func (n *Node) Schedulable() bool { return n.Status == "ready" && n.Eligible }

// markHeld sets held[id] for every device instance an allocation on the
// node holds; held is cleared first (callers reuse one map over nodes).
func (n *Node) markHeld(held map[string]bool) {
	clear(held)
	for _, u := range n.Used {
		for _, id := range u.IDs {
			held[id] = true
		}
	}
}

// LayoutGPU is one GPU as its layout group tells it.
type LayoutGPU struct {
	// UUID is the group's name, the GPU's UUID.
	UUID string
	// Current is the layout offered now ("whole", "mps:8", "mig:..."),
	// State where the GPU is in applying its desired one.
	Current string
	State   contract.LayoutState
	// Pinned: an operator set the layout; the controller leaves it.
	Pinned bool
	// Fault is why the GPU itself has failed, "" while healthy: a failed
	// GPU is no capacity of any kind.
	Fault string
}

// Relayable reports whether the controller may give the GPU another
// layout once nothing holds it: it has not failed, its layout follows
// the queue (not pinned, ready) and it is whole or MPS shares (a GPU in
// MIG mode only ever changes geometry).
func (l LayoutGPU) Relayable() bool {
	return l.Fault == "" && !l.Pinned && l.State == contract.LayoutReady && (l.Current == "whole" || strings.HasPrefix(l.Current, "mps:"))
}

// Relaying reports whether the GPU is free but offers no instance: its
// plugin is switching it to another layout (draining: no allocation
// holds it, its instances are unhealthy), or it is in MIG mode with no
// instance ("mig:"). The controller lays it out for the queue, unless it
// has failed.
func (l LayoutGPU) Relaying() bool { return nomadview.Relaying(l.State, l.Current, l.Fault) }

// DeviceGroup is one vendor/type/name group of a node's devices.
type DeviceGroup struct {
	DeviceSpec
	Instances []DeviceInstance
	// MemoryBytes is one instance's device memory (the group's "memory"
	// attribute; for MPS, one share's), 0 when not reported.
	MemoryBytes int64
	// Shares is, for an MPS group (one GPU's shares), the GPU's share
	// count (contract.AttrMPSShares), 0 when not reported.
	Shares int
}

// DeviceInstance is one device of a group.
type DeviceInstance struct {
	ID      string
	Healthy bool
	// GPU names the physical GPU the instance is (a whole GPU) or is a
	// slice of (a MIG instance, an MPS share), by the read model's rule;
	// its Key "" (nothing known) means the instance is a GPU of its own.
	GPU nomadview.PhysicalGPU
}

// UsedDevices are the instances of one group an allocation holds.
type UsedDevices struct {
	DeviceSpec
	IDs []string
}

// WorkSource is where a queued piece of work was found.
type WorkSource int

const (
	// FromBlockedEval is unplaced allocations of a blocked evaluation.
	FromBlockedEval WorkSource = iota + 1
	// FromPendingAlloc is one placed allocation whose client status is pending.
	FromPendingAlloc
)

// Work is a set of identical queued allocations: a task group's unplaced
// allocations, or one pending allocation.
type Work struct {
	Source    WorkSource
	Namespace string
	JobID     string
	Group     string
	// Allocs is how many allocations this is (1 for a pending alloc).
	Allocs int
	// Asks are one allocation's device requests (for a pending alloc: the
	// devices it was given).
	Asks []DeviceAsk
	// Since is when the work started waiting: the blocked evaluation's or
	// the allocation's create time.
	Since time.Time
	// Placement says where the work may go. For a pending alloc it is its
	// node's pool, datacenter and class exactly.
	Pool        string   // node pool
	Datacenters []string // patterns with * wildcards
	ClassRules  []ClassRule
	// CapacityBlocked is false when more nodes cannot help (quota limit).
	CapacityBlocked bool
	// Priority is the job's priority (the blocked evaluation's; for a
	// pending alloc, its job's when the cluster figures are on), 0 when
	// unknown.
	Priority int
	// Task is, for a blocked group, its first task (by name) asking for
	// a GPU, MIG instance or MPS share: whose history predicts the
	// group's run time (the forecasts). "" when none does.
	Task string
	// NeverFits is, for a blocked group, why no node of its pool could
	// ever take one allocation (nomadview's NeverFits rule, as `nomad-gpu
	// top` says it), "" when some node could.
	NeverFits string
}

// AllocRun is one allocation holding devices, as the task figures read it.
type AllocRun struct {
	ID, Namespace, JobID string
	NodeID               string
	// Pool and Datacenter are the allocation's node's.
	Pool, Datacenter string
	// Priority is the job's priority (its newest version seen), 0 when
	// unknown (the job was purged before it was read).
	Priority int
	// Status is the client status: pending, running, complete, failed
	// or lost.
	Status string
	// Created is the allocation's create time; Started the first start of
	// its first task (zero if none started); Finished, for a finished
	// allocation only, the last task's finish (its last modify time when
	// no task ran).
	Created, Started, Finished time.Time
	// Tasks are the run records of its GPU tasks (sizing.RunsOf), which
	// the forecasts read: their Pool is left empty (TaskRuns sets it from
	// the allocation's), their Priority is the allocation's.
	Tasks []history.Run
}

// TaskRuns are the run records of the GPU tasks of s.Runs, each with its
// allocation's pool: the forecasts' input. A new slice; s is not modified.
func (s *Snapshot) TaskRuns() []history.Run {
	n := 0
	for i := range s.Runs {
		n += len(s.Runs[i].Tasks)
	}
	out := make([]history.Run, 0, n)
	for i := range s.Runs {
		for _, t := range s.Runs[i].Tasks {
			t.Pool = s.Runs[i].Pool
			out = append(out, t)
		}
	}
	return out
}

// Terminal reports whether the allocation has finished.
func (r *AllocRun) Terminal() bool {
	switch r.Status {
	case "complete", "failed", "lost":
		return true
	}
	return false
}

// DeviceAsk is one device request of an allocation (nomadview's).
type DeviceAsk = nomadview.DeviceAsk

// ClassRule is a job constraint on ${node.class}.
type ClassRule struct {
	Operand string // "=", "!=", "regexp", "set_contains_any", "set_contains", "is_set", "is_not_set"
	Value   string
}

// Satisfied reports whether a node of class c satisfies the rule. Rules the
// plugin does not understand are satisfied (they cannot exclude a class).
func (r ClassRule) Satisfied(c string) bool {
	switch r.Operand {
	case "=", "==", "is":
		return c == r.Value
	case "!=", "not":
		return c != r.Value
	case "regexp":
		re, err := regexp.Compile(r.Value)
		return err != nil || re.MatchString(c)
	case "set_contains_any":
		for _, v := range strings.Split(r.Value, ",") {
			if strings.TrimSpace(v) == c {
				return true
			}
		}
		return false
	case "set_contains", "set_contains_all":
		for _, v := range strings.Split(r.Value, ",") {
			if strings.TrimSpace(v) != c {
				return false
			}
		}
		return true
	case "is_set":
		return c != ""
	case "is_not_set":
		return c == ""
	}
	return true
}

// perAlloc is how many devices matching f one allocation of w asks for
// and, for device=any, what they weigh in GPU-equivalents
// (DeviceAsk.GPUEquivalents, an MPS share weighing 1/shares).
func (w *Work) perAlloc(f Filter, shares int) (n int, gpus float64) {
	for _, a := range w.Asks {
		if a.Count > 0 && f.matchDevice(a.Device) {
			n += a.Count
			if f.Any() {
				gpus += a.GPUEquivalents(shares)
			}
		}
	}
	return n, gpus
}

// matchesPlacement reports whether the work could be placed on nodes the
// filter selects (ignoring the device).
func (w *Work) matchesPlacement(f Filter) bool {
	// A job in the built-in pool "all" could go to any pool; counting it
	// in every pool would scale them all for it, so only a query without
	// node_pool (or with node_pool=all) counts it.
	if f.NodePool != "" && w.Pool != f.NodePool {
		return false
	}
	if f.Datacenter != "" {
		ok := false
		for _, p := range w.Datacenters {
			if nomadview.DatacenterMatch(p, f.Datacenter) {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	if f.NodeClass != "" {
		for _, r := range w.ClassRules {
			if !r.Satisfied(f.NodeClass) {
				return false
			}
		}
	}
	return true
}

func (n *Node) matches(f Filter) bool {
	return (f.NodePool == "" || n.Pool == f.NodePool) &&
		(f.Datacenter == "" || n.Datacenter == f.Datacenter) &&
		(f.NodeClass == "" || n.Class == f.NodeClass)
}

// inventory counts a node's instances of devices matching f: all of them,
// the healthy ones, and the healthy ones held by allocations.
func (n *Node) inventory(f Filter) (total, healthy, used int) {
	healthyIDs := map[string]bool{}
	for _, g := range n.Devices {
		if !f.matchDevice(g.DeviceSpec) {
			continue
		}
		for _, in := range g.Instances {
			total++
			if in.Healthy {
				healthy++
				healthyIDs[in.ID] = true
			}
		}
	}
	for _, u := range n.Used {
		if !f.matchDevice(u.DeviceSpec) {
			continue
		}
		for _, id := range u.IDs {
			if healthyIDs[id] {
				used++
				delete(healthyIDs, id) // an instance counts once
			}
		}
	}
	return total, healthy, used
}

// freeGPUs is, for device=any, a schedulable node's free capacity in
// GPU-equivalents by freeRule (gpuUse). held is scratch space.
func (n *Node) freeGPUs(held map[string]bool) float64 {
	_, free := n.gpuUse(held)
	return free
}

// gpuUse is a node's GPU capacity in GPU-equivalents, held and free by
// freeRule: allocated, its healthy GPU, MIG and MPS instances held by an
// allocation (nodeGPUs); free, the other healthy ones and its relaying
// GPUs (LayoutGPU.Relaying). held is scratch space.
func (n *Node) gpuUse(held map[string]bool) (allocated, free float64) {
	n.markHeld(held)
	_, capacity, allocated := nodeGPUs(n, held)
	relaying := 0
	for _, l := range n.Layouts {
		if l.Relaying() {
			relaying++
		}
	}
	return allocated, capacity - allocated + float64(freeRule.Relaying(relaying))
}

// freeRule is the free-capacity rule of the autoscaler's figures: a GPU
// the controller is laying out for the queue counts as free, since a node
// added for that work would come too late to serve it.
var freeRule = nomadview.FreeRule{CountRelaying: true}

// gpuCount is, for device=any, how many GPUs a node has: one per layout
// group where it publishes them; else its whole GPUs, plus the GPUs its
// MIG instances and MPS shares are of (the physical GPU each names: PCI
// bus ID, share ID's UUID, MPS group name), plus, for slices that name no
// GPU, their GPU-equivalents rounded up. Healthy or not.
func (n *Node) gpuCount() int {
	if len(n.Layouts) > 0 {
		return len(n.Layouts)
	}
	whole := 0
	var rest float64
	gpus := map[string]bool{}
	for gi := range n.Devices {
		g := &n.Devices[gi]
		if !nomadview.IsGPUAsk(g.DeviceSpec) {
			continue
		}
		for ii := range g.Instances {
			in := &g.Instances[ii]
			switch g.Type {
			case contract.SliceGPU:
				whole++
				continue
			case contract.SliceMPS:
				gpus[mpsGPU(in)] = true
				continue
			}
			if k := in.GPU.Key(); k != "" {
				gpus[k] = true
			} else {
				rest += GPUWeight(g.DeviceSpec)
			}
		}
	}
	return whole + len(gpus) + int(math.Ceil(rest-binEps))
}

// mpsShares is, for device=any, the share count an MPS share is 1 over:
// the most common one (ties to the larger) of the MPS groups of the nodes
// f selects, each group's contract.AttrMPSShares, else its instance count;
// else gpulayout.DefaultShares.
func (s *Snapshot) mpsShares(f Filter) int {
	freq := map[int]int{}
	for i := range s.Nodes {
		n := &s.Nodes[i]
		if !n.matches(f) {
			continue
		}
		for gi := range n.Devices {
			g := &n.Devices[gi]
			if g.Type != contract.SliceMPS || !nomadview.IsGPUAsk(g.DeviceSpec) {
				continue
			}
			k := g.Shares
			if k <= 0 {
				k = len(g.Instances)
			}
			if k > 0 {
				freq[k]++
			}
		}
	}
	if best := mostCommon(freq); best > 0 {
		return best
	}
	return gpulayout.DefaultShares
}

// queued is one kind of queued allocation after filtering: perAlloc
// matching devices per allocation, weighing gpus GPU-equivalents
// (device=any only).
type queued struct {
	w        *Work
	perAlloc int
	gpus     float64
}

func (s *Snapshot) queue(q Query) []queued {
	shares := 0
	if q.Filter.Any() {
		shares = s.mpsShares(q.Filter)
	}
	var out []queued
	for i := range s.Work {
		w := &s.Work[i]
		switch {
		case q.State == StateBlocked && w.Source != FromBlockedEval,
			q.State == StatePending && w.Source != FromPendingAlloc,
			w.Allocs <= 0:
			continue
		}
		if !w.matchesPlacement(q.Filter) {
			continue
		}
		if n, gpus := w.perAlloc(q.Filter, shares); n > 0 {
			out = append(out, queued{w, n, gpus})
		}
	}
	return out
}

// Evaluate computes the query's metric over the snapshot. An empty or
// missing pool is 0, never an error.
func Evaluate(q Query, s *Snapshot) (float64, error) {
	switch q.Metric {
	case MetricGPUsQueued:
		if q.Filter.Any() {
			var total float64
			for _, x := range s.queue(q) {
				total += x.gpus * float64(x.w.Allocs)
			}
			return total, nil
		}
		total := 0
		for _, x := range s.queue(q) {
			total += x.perAlloc * x.w.Allocs
		}
		return float64(total), nil
	case MetricAllocsQueued:
		total := 0
		for _, x := range s.queue(q) {
			total += x.w.Allocs
		}
		return float64(total), nil
	case MetricWaitMax, MetricWaitMean:
		var maxWait, sum float64
		n := 0
		for _, x := range s.queue(q) {
			wait := s.Now.Sub(x.w.Since).Seconds()
			if wait < 0 || x.w.Since.IsZero() {
				wait = 0
			}
			maxWait = max(maxWait, wait)
			sum += wait * float64(x.w.Allocs)
			n += x.w.Allocs
		}
		if q.Metric == MetricWaitMax {
			return maxWait, nil
		}
		if n == 0 {
			return 0, nil
		}
		return sum / float64(n), nil
	case MetricAllocPct:
		if q.Filter.Any() {
			// GPU-equivalents: a GPU is 1 however it is laid out.
			var capacity, allocated float64
			held := map[string]bool{}
			for i := range s.Nodes {
				n := &s.Nodes[i]
				if !n.Schedulable() || !n.matches(q.Filter) {
					continue
				}
				n.markHeld(held)
				_, c, a := nodeGPUs(n, held)
				capacity += c
				allocated += a
			}
			if capacity <= 0 {
				return 0, nil
			}
			return 100 * allocated / capacity, nil
		}
		var healthy, used int
		for i := range s.Nodes {
			n := &s.Nodes[i]
			if !n.Schedulable() || !n.matches(q.Filter) {
				continue
			}
			_, h, u := n.inventory(q.Filter)
			healthy += h
			used += u
		}
		if healthy == 0 {
			return 0, nil
		}
		return 100 * float64(used) / float64(healthy), nil
	case MetricUtilPct:
		var sum float64
		n := 0
		for i := range s.Nodes {
			node := &s.Nodes[i]
			if node.Status != "ready" || !node.matches(q.Filter) {
				continue
			}
			for _, u := range s.Util[node.ID] {
				if q.Filter.matchDevice(u.DeviceSpec) {
					sum += u.Pct
					n++
				}
			}
		}
		if n == 0 {
			return 0, nil
		}
		return sum / float64(n), nil
	case MetricNodesNeeded:
		r := NodesNeeded(q, s)
		return float64(r.Nodes), nil
	case MetricNodesRemovable:
		n := 0
		for i := range s.Nodes {
			if node := &s.Nodes[i]; node.Status == "ready" && node.Removable && node.matches(q.Filter) {
				n++
			}
		}
		return float64(n), nil
	case MetricNodesReady:
		// The nodes nodes_needed places on: a node that joined but has
		// not fingerprinted its devices yet cannot take the queue.
		ready := 0
		for i := range s.Nodes {
			n := &s.Nodes[i]
			if !n.Schedulable() || !n.matches(q.Filter) {
				continue
			}
			if _, healthy, _ := n.inventory(q.Filter); healthy > 0 {
				ready++
			}
		}
		return float64(ready), nil
	}
	return 0, fmt.Errorf("unknown metric %q", q.Metric)
}

// InstanceUtil is one device instance's GPU utilisation in percent.
type InstanceUtil struct {
	DeviceSpec
	ID  string
	Pct float64
}

// NodesNeededResult explains a nodes_needed figure.
type NodesNeededResult struct {
	// Nodes is how many more nodes are needed.
	Nodes int
	// Shape is the devices per node packed into (device=any: GPUs per
	// node), and ShapeFrom where it came from: "query", "nodes",
	// "config" or "none".
	Shape     int
	ShapeFrom string
	// QueuedAllocs are the allocations considered; PlacedOnFree those
	// that fit the free devices of existing nodes; Unfittable those that
	// ask for more devices than one node of the shape has. ServedInTime
	// are those left out (with Beyond) as predicted to be placed on the
	// pool's capacity within Beyond.
	QueuedAllocs, PlacedOnFree, Unfittable, ServedInTime int
}

// NodeShape is the per-node device count nodes_needed packs into: the
// query's gpus_per_node; else the most common count over matching nodes
// that have any (ties going to the larger) of their instances (healthy or
// not) of matching devices, or for device=any of their GPUs
// (Node.gpuCount: layout groups, else instances as GPUs); else the
// plugin's default_gpus_per_node; else 0.
func NodeShape(q Query, s *Snapshot) (int, string) {
	if q.GPUsPerNode > 0 {
		return q.GPUsPerNode, "query"
	}
	freq := map[int]int{}
	for i := range s.Nodes {
		n := &s.Nodes[i]
		if !n.matches(q.Filter) {
			continue
		}
		var total int
		if q.Filter.Any() {
			total = n.gpuCount()
		} else {
			total, _, _ = n.inventory(q.Filter)
		}
		if total > 0 {
			freq[total]++
		}
	}
	if best := mostCommon(freq); best > 0 {
		return best, "nodes"
	}
	if s.DefaultGPUsPerNode > 0 {
		return s.DefaultGPUsPerNode, "config"
	}
	return 0, "none"
}

// binEps absorbs the rounding of sums of GPU-equivalents (sevenths,
// eighths) when bins are filled.
const binEps = 1e-9

// bin is a free capacity and how many bins have it.
type bin struct {
	free float64
	n    int
}

// bins are free capacities, in ascending order, each once.
type bins []bin

// add adds k bins of free capacity c; an empty bin is dropped.
func (b *bins) add(c float64, k int) {
	if c <= binEps || k <= 0 {
		return
	}
	i := sort.Search(len(*b), func(i int) bool { return (*b)[i].free >= c-binEps })
	if i < len(*b) && math.Abs((*b)[i].free-c) <= binEps {
		(*b)[i].n += k
		return
	}
	*b = slices.Insert(*b, i, bin{c, k})
}

// bestFit places k allocations of size a into the bins, smallest
// sufficient bin first, and returns how many did not fit. One bin of c
// free takes up to ⌊c/a⌋ of them.
func (b *bins) bestFit(a float64, k int) int {
	for k > 0 {
		i := sort.Search(len(*b), func(i int) bool { return (*b)[i].free >= a-binEps })
		if i == len(*b) {
			return k
		}
		c := (*b)[i].free
		take := min(k, max(1, int((c+binEps)/a)))
		if (*b)[i].n--; (*b)[i].n == 0 {
			*b = slices.Delete(*b, i, i+1)
		}
		b.add(c-float64(take)*a, 1)
		k -= take
	}
	return 0
}

// NodesNeeded packs the unplaced allocations (blocked evaluations only;
// pending allocations already hold their devices) that match the query,
// largest ask first, best fit, into the free healthy matching devices of
// schedulable matching nodes, then into new nodes of NodeShape devices,
// and counts the new nodes. An allocation that asks for more than one
// node of the shape holds is left out (more nodes of that shape cannot
// place it). With no shape known at all, 1 node is needed when anything
// is queued (enough to learn the shape), else 0. Work held back by a quota
// is left out.
//
// For device=any, asks and capacity are GPU-equivalents: an allocation's
// GPU asks weighed (queue), a node's free capacity Node.freeGPUs, a new
// node NodeShape GPUs. An ask fits a node with at least that much free:
// optimistic, as a whole GPU ask may find only MPS shares free, but the
// controller lays free GPUs out anew for the queue.
func NodesNeeded(q Query, s *Snapshot) NodesNeededResult {
	q.State = StateBlocked
	shape, from := NodeShape(q, s)
	r := NodesNeededResult{Shape: shape, ShapeFrom: from}
	anyGPU := q.Filter.Any()

	// sizes: ask → allocations, asks sorted largest first.
	sizes := map[float64]int{}
	inTime := servedWithin(q.Beyond, s)
	for _, x := range s.queue(q) {
		if !x.w.CapacityBlocked {
			continue
		}
		if inTime[groupKey{x.w.Namespace, x.w.JobID, x.w.Group}] {
			r.ServedInTime += x.w.Allocs
			continue
		}
		a := float64(x.perAlloc)
		if anyGPU {
			a = x.gpus
		}
		if a <= 0 {
			continue
		}
		sizes[a] += x.w.Allocs
		r.QueuedAllocs += x.w.Allocs
	}
	if r.QueuedAllocs == 0 {
		return r
	}
	asks := make([]float64, 0, len(sizes))
	for a := range sizes {
		asks = append(asks, a)
	}
	sort.Sort(sort.Reverse(sort.Float64Slice(asks)))

	var free bins
	held := map[string]bool{}
	for i := range s.Nodes {
		n := &s.Nodes[i]
		if !n.Schedulable() || !n.matches(q.Filter) {
			continue
		}
		if anyGPU {
			free.add(n.freeGPUs(held), 1)
			continue
		}
		_, h, u := n.inventory(q.Filter)
		free.add(float64(h-u), 1)
	}
	left := make([]int, len(asks)) // per ask size, allocations not placed on free devices
	for i, a := range asks {
		k := sizes[a]
		left[i] = free.bestFit(a, k)
		r.PlacedOnFree += k - left[i]
	}
	if shape == 0 {
		for _, k := range left {
			if k > 0 {
				r.Nodes = 1
			}
		}
		return r
	}
	// New nodes: the bins are theirs only.
	free = free[:0]
	size := float64(shape)
	for i, a := range asks {
		k := left[i]
		if a > size+binEps {
			r.Unfittable += k
			continue
		}
		k = free.bestFit(a, k)
		if k == 0 {
			continue
		}
		// Fresh nodes, each taking per allocations.
		per := max(1, int((size+binEps)/a))
		full := k / per
		r.Nodes += full
		free.add(size-float64(per)*a, full)
		if rem := k % per; rem > 0 {
			r.Nodes++
			free.add(size-float64(rem)*a, 1)
		}
	}
	return r
}

// groupKey names a task group.
type groupKey struct{ namespace, job, group string }

// servedWithin are the queued groups whose every allocation the runtime
// forecast places on the pool's capacity (free now, or freed by the work
// running) within beyond: new nodes, which take a boot to come, would
// serve them no sooner than that. A group whose wait is not known (no
// history, a pool it does not name, an ask no node holds) is not among
// them. Nil when beyond is 0.
func servedWithin(beyond time.Duration, s *Snapshot) map[groupKey]bool {
	if beyond <= 0 {
		return nil
	}
	out := map[groupKey]bool{}
	for _, w := range ForecastOf(s).Queued {
		if w.Wait.Known && w.Wait.Duration() <= beyond {
			out[groupKey{w.Namespace, w.Job, w.Group}] = true
		}
	}
	return out
}

// mostCommon is the count seen most often in freq (count → times seen),
// the larger on a tie; 0 when freq is empty.
func mostCommon(freq map[int]int) int {
	best, bestN := 0, 0
	for k, n := range freq {
		if n > bestN || n == bestN && k > best {
			best, bestN = k, n
		}
	}
	return best
}
