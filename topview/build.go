package topview

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/controller"
	"github.com/nomad-gpu/nomad-gpu/nomadview"
)

// Input is what a View is built from: a snapshot of the cluster (a
// nomadview.Watcher's, or one a test writes) and the shown nodes' host
// stats.
type Input struct {
	// Snapshot is the cluster; its rules (queued groups, held slices)
	// are the ones the APM answers by.
	*nomadview.Snapshot
	// Now is the instant waits are measured to.
	Now time.Time
	// HistoryError says why the finished allocations could not be read;
	// forecasts are then shown as unknown.
	HistoryError string
	// Stats are the nodes' host stats by node ID; a node missing here
	// shows "stats unavailable".
	Stats  map[string]NodeStats
	Filter Filter
	// Controller is the controller's status, nil when not read, and
	// ControllerError why it could not be.
	Controller      *controller.Status
	ControllerError string
}

// JobKey names a job in a namespace.
type JobKey = nomadview.JobKey

// NodeStats is one node's host stats, or why they could not be read.
type NodeStats = nomadview.NodeStats

// Filter selects nodes and queued work. Its zero value selects all.
type Filter struct {
	// Pool keeps nodes of this node pool and work whose job targets it
	// (or the built-in pool "all").
	Pool string
	// Nodes keeps nodes named exactly so, or whose ID starts so; it
	// also drops pending work placed on other nodes. Nodes named here
	// are shown even without GPUs.
	Nodes []string
}

// matchNode reports whether the filter keeps node n.
func (f Filter) matchNode(n *api.NodeListStub) bool {
	if !f.matchPool(n.NodePool) {
		return false
	}
	if len(f.Nodes) == 0 {
		return true
	}
	for _, s := range f.Nodes {
		if nodeMatches(n, s) {
			return true
		}
	}
	return false
}

func nodeMatches(n *api.NodeListStub, s string) bool {
	return s != "" && (n.Name == s || strings.HasPrefix(n.ID, s))
}

// matchPool reports whether a node of pool, or work targeting pool, passes
// the filter. The built-in pool "all" holds every node.
func (f Filter) matchPool(pool string) bool {
	return f.Pool == "" || f.Pool == api.NodePoolAll || pool == f.Pool || pool == api.NodePoolAll
}

// UnknownPoolError says the filter's node pool does not exist.
type UnknownPoolError struct {
	Pool  string
	Pools []string // the pools that exist, sorted
}

func (e *UnknownPoolError) Error() string {
	return fmt.Sprintf("node pool %q does not exist (node pools: %s)", e.Pool, strings.Join(e.Pools, ", "))
}

// UnknownNodesError says filter entries match no node.
type UnknownNodesError struct {
	Nodes []string
}

func (e *UnknownNodesError) Error() string {
	return fmt.Sprintf("%s match no node's name or ID prefix", quoteAll(e.Nodes))
}

func quoteAll(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = strconv.Quote(s)
	}
	return strings.Join(q, ", ")
}

// CheckFilter fails when f names what the cluster does not have: a node
// pool that no node is in and listPools does not return, or node entries
// that match none of nodes. A pool some node is in exists, so listPools is
// called only when no node is in f's.
func CheckFilter(f Filter, nodes []*api.NodeListStub, listPools func() ([]string, error)) error {
	if f.Pool != "" && !slices.ContainsFunc(nodes, func(n *api.NodeListStub) bool { return n != nil && n.NodePool == f.Pool }) {
		pools, err := listPools()
		if err != nil {
			return err
		}
		if !slices.Contains(pools, f.Pool) {
			return &UnknownPoolError{Pool: f.Pool, Pools: slices.Sorted(slices.Values(pools))}
		}
	}
	var unknown []string
	for _, s := range f.Nodes {
		if !slices.ContainsFunc(nodes, func(n *api.NodeListStub) bool { return n != nil && nodeMatches(n, s) }) {
			unknown = append(unknown, s)
		}
	}
	if len(unknown) > 0 {
		return &UnknownNodesError{Nodes: unknown}
	}
	return nil
}

// Build makes the view of in. It is pure: the same input gives the same
// view, with nodes, GPUs, slices and allocations in a fixed order.
func Build(in *Input) *View {
	v := &View{GeneratedAt: in.Now.UTC(), Nodes: []Node{}, Queue: []QueueEntry{}, HistoryError: in.HistoryError,
		Controller: in.Controller, ControllerError: in.ControllerError}
	held := heldDevices(in)
	for _, n := range in.Nodes {
		if n == nil || !in.Filter.matchNode(n) {
			continue
		}
		node := buildNode(n, held[n.ID], in.Stats)
		if len(node.GPUs) == 0 && len(in.Filter.Nodes) == 0 && !hasGPUDriver(n) {
			continue // not a GPU node
		}
		v.Nodes = append(v.Nodes, node)
	}
	slices.SortFunc(v.Nodes, func(a, b Node) int {
		return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.ID, b.ID))
	})
	v.Queue = buildQueue(in)
	addForecasts(v, in, held)
	addLayoutReasons(v, in.Controller)
	return v
}

// hasGPUDriver reports whether the node runs our task driver: a GPU node
// even when its device plugin reports nothing.
func hasGPUDriver(n *api.NodeListStub) bool {
	d := n.Drivers["gpu"]
	return d != nil && d.Detected
}

// heldDevices maps node ID → device ID → the tasks holding that device,
// from the pending and running allocations (the snapshot's HeldSlices).
func heldDevices(in *Input) map[string]map[string][]AllocRef {
	out := map[string]map[string][]AllocRef{}
	for node, held := range in.HeldSlices() {
		m := map[string][]AllocRef{}
		for _, h := range held {
			if !nomadview.IsGPUAsk(h.Device) {
				continue
			}
			a := h.Alloc
			ref := AllocRef{AllocID: a.ID, Job: a.JobID, Group: a.TaskGroup, Task: h.Task, Namespace: a.Namespace}
			for _, id := range h.IDs {
				m[id] = append(m[id], ref)
			}
		}
		out[node] = m
	}
	return out
}

// gpuBuilder accumulates one GPU while the node's devices are read.
type gpuBuilder struct {
	GPU
	allocSeen map[AllocRef]bool
}

func (g *gpuBuilder) addAllocs(refs ...AllocRef) {
	for _, r := range refs {
		if !g.allocSeen[r] {
			g.allocSeen[r] = true
			g.Allocations = append(g.Allocations, r)
		}
	}
}

// takeGPUStats fills in what every device on the GPU reports alike (its
// index and UUID, temperature and power) from the first device that
// reports them.
func (g *gpuBuilder) takeGPUStats(ds *api.DeviceStats) {
	if g.Index == nil {
		g.Index = intStat(ds, contract.StatGPUIndex)
	}
	if g.UUID == "" {
		g.UUID = stringStat(ds, contract.StatGPUUUID)
	}
	if g.TemperatureC == nil {
		g.TemperatureC = numStat(ds, contract.StatTemperature)
	}
	if g.PowerW == nil {
		g.PowerW = numStat(ds, contract.StatPower)
	}
}

// nodeBuilder groups one node's devices into GPUs.
type nodeBuilder struct {
	held  map[string][]AllocRef       // device ID → holders
	inst  map[string]*api.DeviceStats // device ID → stats
	byKey map[string]*gpuBuilder
	order []*gpuBuilder
}

// get is the GPU under key, made by init when first seen.
func (b *nodeBuilder) get(key string, init func() GPU) *gpuBuilder {
	g, ok := b.byKey[key]
	if !ok {
		g = &gpuBuilder{GPU: init(), allocSeen: map[AllocRef]bool{}}
		g.Healthy = true
		g.Slices, g.Allocations = []Slice{}, []AllocRef{}
		b.byKey[key] = g
		b.order = append(b.order, g)
	}
	return g
}

// buildNode groups a node's devices into GPUs and fills in holders and
// stats.
func buildNode(n *api.NodeListStub, held map[string][]AllocRef, stats map[string]NodeStats) Node {
	node := Node{
		Name: n.Name, ID: n.ID, Datacenter: n.Datacenter, Pool: n.NodePool, Class: n.NodeClass,
		Status: n.Status, Eligible: n.SchedulingEligibility == api.NodeSchedulingEligible, Drain: n.Drain,
		GPUs: []GPU{},
	}
	b := &nodeBuilder{held: held, byKey: map[string]*gpuBuilder{}}
	st, ok := stats[n.ID]
	switch {
	case !ok:
		node.StatsError = "stats unavailable"
	case st.Err != nil:
		node.StatsError = "stats unavailable: " + errorText(st.Err)
	default:
		b.inst = instanceStats(st.Host)
	}
	var devices []*api.NodeDeviceResource
	if n.NodeResources != nil {
		devices = n.NodeResources.Devices
	}
	for _, d := range devices {
		if d == nil || d.Vendor != contract.Vendor {
			continue
		}
		for _, in := range d.Instances {
			if in == nil {
				continue
			}
			switch d.Type {
			case contract.SliceGPU:
				b.addWhole(d, in)
			case contract.SliceMIG:
				b.addMIG(d, in)
			case contract.SliceMPS:
				b.addMPS(d, in)
			}
		}
	}
	b.addLayouts(devices)
	node.StrayPins = strayPins(devices)
	for _, g := range b.order {
		g.finish()
		g.allocMemory()
		node.GPUs = append(node.GPUs, g.GPU)
	}
	slices.SortFunc(node.GPUs, func(a, b GPU) int {
		return cmp.Or(cmp.Compare(a.PCIBusID, b.PCIBusID), cmp.Compare(a.UUID, b.UUID), cmp.Compare(a.Model, b.Model))
	})
	return node
}

// strayPins are the node's pins that name no GPU of it, as its device
// plugin publishes them on each layout group (contract.AttrLayoutStrayPins).
func strayPins(devices []*api.NodeDeviceResource) []string {
	for _, d := range devices {
		if d == nil || d.Vendor != contract.Vendor || d.Type != contract.SliceLayout {
			continue
		}
		v := nomadview.AttrString(d.Attributes, contract.AttrLayoutStrayPins)
		if v == "" || v == contract.LayoutNone {
			return nil
		}
		return strings.Split(v, "; ")
	}
	return nil
}

// addLayouts attaches each GPU's layout group to the GPU its instances
// made (by UUID, or by PCI bus for a GPU in MIG mode), or adds the GPU
// when it has no instance to show (MIG mode with none).
func (b *nodeBuilder) addLayouts(devices []*api.NodeDeviceResource) {
	for _, d := range devices {
		if d == nil || d.Vendor != contract.Vendor || d.Type != contract.SliceLayout {
			continue
		}
		a := d.Attributes
		bus := nomadview.AttrString(a, contract.AttrLayoutPCIBusID)
		g, ok := b.byKey["uuid:"+d.Name]
		if !ok {
			g, ok = b.byKey["pci:"+bus]
		}
		if !ok {
			mode := ModeWhole
			if nomadview.AttrBool(a, contract.AttrLayoutMIGMode) {
				mode = ModeMIG
			}
			g = b.get("uuid:"+d.Name, func() GPU {
				return GPU{UUID: d.Name, Model: nomadview.AttrString(a, contract.AttrLayoutProduct), PCIBusID: bus, Mode: mode}
			})
		}
		if g.UUID == "" {
			g.UUID = d.Name
		}
		if g.Index == nil {
			g.Index = attrInt(a, contract.AttrLayoutIndex)
		}
		l := &GPULayout{Current: nomadview.AttrString(a, contract.AttrLayoutCurrent), Pinned: nomadview.AttrBool(a, contract.AttrLayoutPinned),
			State: nomadview.AttrString(a, contract.AttrLayoutState)}
		if v := nomadview.AttrString(a, contract.AttrLayoutDesired); v != contract.LayoutNone {
			l.Desired = v
		}
		if v := nomadview.AttrString(a, contract.AttrLayoutError); v != contract.LayoutNone {
			l.Error = v
		}
		g.Layout = l
	}
}

// addLayoutReasons gives each GPU the controller's last change of its
// layout.
func addLayoutReasons(v *View, st *controller.Status) {
	if st == nil {
		return
	}
	for i := range v.Nodes {
		for j := range v.Nodes[i].GPUs {
			g := &v.Nodes[i].GPUs[j]
			c, ok := st.Layouts[controller.LayoutKey(v.Nodes[i].ID, g.UUID)]
			if g.Layout == nil || !ok {
				continue
			}
			at := c.At.UTC()
			g.Layout.Changed, g.Layout.Reason = &at, c.From+" → "+c.To+": "+c.Reason
		}
	}
}

// addWhole adds a whole GPU: its own device.
func (b *nodeBuilder) addWhole(d *api.NodeDeviceResource, in *api.NodeDevice) {
	ds := b.inst[in.ID]
	p := nomadview.PhysicalGPUOf(d.Type, in)
	g := b.get(p.Key(), func() GPU {
		return GPU{UUID: in.ID, Model: d.Name, PCIBusID: p.PCIBusID, Mode: ModeWhole, MemoryTotalMiB: attrMiB(d.Attributes, contract.AttrMemory)}
	})
	g.Healthy, g.HealthDescription = in.Healthy, healthText(in)
	used, total := memStat(ds, contract.StatMemUsed)
	g.MemoryUsedMiB = used
	if g.MemoryTotalMiB == nil {
		g.MemoryTotalMiB = total
	}
	g.UtilizationPct = numStat(ds, contract.StatGPUUtil)
	g.takeGPUStats(ds)
	g.addAllocs(b.held[in.ID]...)
}

// addMIG adds a MIG instance to its GPU (nomadview.PhysicalGPUOf: the
// PCI bus ID it carries), else to one GPU per parent product.
func (b *nodeBuilder) addMIG(d *api.NodeDeviceResource, in *api.NodeDevice) {
	ds := b.inst[in.ID]
	p := nomadview.PhysicalGPUOf(d.Type, in)
	parent, bus, key := nomadview.AttrString(d.Attributes, contract.AttrParentProduct), p.PCIBusID, p.Key()
	if key == "" {
		key = "mig:" + parent
	}
	g := b.get(key, func() GPU {
		return GPU{Model: parent, PCIBusID: bus, Mode: ModeMIG, MemoryTotalMiB: attrMiB(d.Attributes, contract.AttrParentMemory)}
	})
	profile := nomadview.AttrString(d.Attributes, contract.AttrMIGProfile)
	if profile == "" {
		profile = d.Name
	}
	s := newSlice(contract.SliceMIG, in, profile, b.held[in.ID])
	s.MemoryTotalMiB = attrMiB(d.Attributes, contract.AttrMemory)
	s.MemoryUsedMiB, _ = memStat(ds, contract.StatMemUsed)
	s.UtilizationPct = numStat(ds, contract.StatGPUUtil)
	g.takeGPUStats(ds)
	g.Slices = append(g.Slices, s)
	g.addAllocs(b.held[in.ID]...)
}

// addMPS adds an MPS share to its GPU (nomadview.PhysicalGPUOf).
func (b *nodeBuilder) addMPS(d *api.NodeDeviceResource, in *api.NodeDevice) {
	ds := b.inst[in.ID]
	p := nomadview.PhysicalGPUOf(d.Type, in)
	if p.UUID == "" {
		p.UUID = d.Name // a share ID that names no GPU: its group's
	}
	uuid := p.UUID
	g := b.get(p.Key(), func() GPU {
		return GPU{UUID: uuid, Model: nomadview.AttrString(d.Attributes, contract.AttrParentProduct), PCIBusID: p.PCIBusID,
			Mode: ModeMPS, Index: attrInt(d.Attributes, contract.AttrParentIndex), MemoryTotalMiB: attrMiB(d.Attributes, contract.AttrParentMemory)}
	})
	profile := ""
	if shares := attrInt(d.Attributes, contract.AttrMPSShares); shares != nil {
		profile = "1/" + strconv.Itoa(*shares)
	}
	s := newSlice(contract.SliceMPS, in, profile, b.held[in.ID])
	s.MemoryTotalMiB = memValue(statValue(ds, contract.StatShareMemory), false)
	if s.MemoryTotalMiB == nil {
		s.MemoryTotalMiB = attrMiB(d.Attributes, contract.AttrMPSMemoryLimit)
	}
	s.MemoryUsedMiB = memValue(statValue(ds, contract.StatShareUsed), false)
	// Its own: its task's utilisation of the share, never the GPU's.
	s.UtilizationPct = numStat(ds, contract.StatShareUtil)
	// Every share carries its GPU's figures: the GPU's. A share's stats
	// have "Physical GPU memory used" (its GPU's memory) from a device
	// plugin that publishes it; without it, the plain names are the GPU's.
	gpuUtil, gpuMem := contract.StatPhysGPUUtil, contract.StatPhysMemUsed
	if ds != nil && statValue(ds, contract.StatPhysMemUsed) == nil {
		gpuUtil, gpuMem = contract.StatGPUUtil, contract.StatMemUsed
	}
	if used, total := memStat(ds, gpuMem); used != nil && g.MemoryUsedMiB == nil {
		g.MemoryUsedMiB = used
		if g.MemoryTotalMiB == nil {
			g.MemoryTotalMiB = total
		}
	}
	if u := numStat(ds, gpuUtil); u != nil && g.UtilizationPct == nil {
		g.UtilizationPct = u
	}
	g.takeGPUStats(ds)
	g.Slices = append(g.Slices, s)
	g.addAllocs(b.held[in.ID]...)
}

// errorText is an error on one line; a Nomad API error as its status code
// and body.
func errorText(err error) string {
	var ue api.UnexpectedResponseError
	if errors.As(err, &ue) && ue.HasStatusCode() {
		return fmt.Sprintf("HTTP %d: %s", ue.StatusCode(), oneLine(ue.Body()))
	}
	return oneLine(err.Error())
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func newSlice(typ string, in *api.NodeDevice, profile string, held []AllocRef) Slice {
	s := Slice{Type: typ, ID: in.ID, Profile: profile, Healthy: in.Healthy, HealthDescription: healthText(in)}
	if len(held) > 0 {
		r := held[0]
		s.Alloc = &r
	}
	return s
}

func healthText(in *api.NodeDevice) string {
	if in.Healthy {
		return ""
	}
	if in.HealthDescription == "" {
		return "unhealthy"
	}
	return in.HealthDescription
}

// finish orders a sliced GPU's slices and derives its health (healthy only
// if every slice is) and, for MIG, its memory used (the sum over its
// instances, when every one reports it).
func (g *gpuBuilder) finish() {
	if len(g.Slices) == 0 {
		return
	}
	slices.SortFunc(g.Slices, func(a, b Slice) int {
		if a.Type == contract.SliceMPS && b.Type == contract.SliceMPS {
			_, na, _ := contract.ParseShareID(a.ID)
			_, nb, _ := contract.ParseShareID(b.ID)
			return cmp.Or(cmp.Compare(na, nb), cmp.Compare(a.ID, b.ID))
		}
		return cmp.Or(cmp.Compare(a.Type, b.Type), cmp.Compare(a.Profile, b.Profile), cmp.Compare(a.ID, b.ID))
	})
	var reasons []string
	var sum int64
	all := true
	for _, s := range g.Slices {
		if !s.Healthy {
			g.Healthy = false
			if !slices.Contains(reasons, s.HealthDescription) {
				reasons = append(reasons, s.HealthDescription)
			}
		}
		if s.MemoryUsedMiB == nil {
			all = false
		} else {
			sum += *s.MemoryUsedMiB
		}
	}
	g.HealthDescription = strings.Join(reasons, "; ")
	if g.Mode == ModeMIG && all {
		g.MemoryUsedMiB = &sum
	}
}

// allocMemory sets what each holder uses: of a slice, the slice's memory
// used; of a GPU, the whole GPU's, or the sum over the slices it holds
// there (unknown when one of them is).
func (g *gpuBuilder) allocMemory() {
	for i := range g.Slices {
		s := &g.Slices[i]
		if s.Alloc != nil {
			s.Alloc.MemoryUsedMiB = s.MemoryUsedMiB
		}
	}
	for i := range g.Allocations {
		a := &g.Allocations[i]
		if len(g.Slices) == 0 {
			a.MemoryUsedMiB = g.MemoryUsedMiB
			continue
		}
		var sum int64
		known := true
		for _, s := range g.Slices {
			if s.Alloc == nil || s.Alloc.AllocID != a.AllocID || s.Alloc.Task != a.Task {
				continue
			}
			if s.MemoryUsedMiB == nil {
				known = false
				break
			}
			sum += *s.MemoryUsedMiB
		}
		if known {
			a.MemoryUsedMiB = &sum
		}
	}
}

// instanceStats indexes a node's nvidia device stats by device ID.
func instanceStats(hs *api.HostStats) map[string]*api.DeviceStats {
	out := map[string]*api.DeviceStats{}
	if hs == nil {
		return out
	}
	for _, g := range hs.DeviceStats {
		if g == nil || g.Vendor != contract.Vendor {
			continue
		}
		for id, s := range g.InstanceStats {
			if s != nil {
				out[id] = s
			}
		}
	}
	return out
}

func statValue(ds *api.DeviceStats, name string) *api.StatValue {
	if ds == nil || ds.Stats == nil {
		return nil
	}
	return ds.Stats.Attributes[name]
}

// numStat is a stat's numerator as a number, nil if absent.
func numStat(ds *api.DeviceStats, name string) *float64 {
	v := statValue(ds, name)
	if v == nil {
		return nil
	}
	switch {
	case v.FloatNumeratorVal != nil:
		f := *v.FloatNumeratorVal
		return &f
	case v.IntNumeratorVal != nil:
		f := float64(*v.IntNumeratorVal)
		return &f
	}
	return nil
}

// intStat is a stat's numerator as a whole number, nil if absent.
func intStat(ds *api.DeviceStats, name string) *int {
	f := numStat(ds, name)
	if f == nil {
		return nil
	}
	n := int(*f)
	return &n
}

// stringStat is a stat's text, "" if absent.
func stringStat(ds *api.DeviceStats, name string) string {
	if v := statValue(ds, name); v != nil && v.StringVal != nil {
		return *v.StringVal
	}
	return ""
}

// memStat reads a memory stat "used / total" in MiB.
func memStat(ds *api.DeviceStats, name string) (used, total *int64) {
	v := statValue(ds, name)
	return memValue(v, false), memValue(v, true)
}

// memValue is a memory stat's numerator (or denominator) in MiB.
func memValue(v *api.StatValue, denominator bool) *int64 {
	if v == nil {
		return nil
	}
	var f float64
	switch {
	case denominator && v.IntDenominatorVal != nil:
		f = float64(*v.IntDenominatorVal)
	case denominator && v.FloatDenominatorVal != nil:
		f = *v.FloatDenominatorVal
	case !denominator && v.IntNumeratorVal != nil:
		f = float64(*v.IntNumeratorVal)
	case !denominator && v.FloatNumeratorVal != nil:
		f = *v.FloatNumeratorVal
	default:
		return nil
	}
	return toMiB(f, v.Unit)
}

// toMiB converts an amount in unit to whole MiB; nil for a unit that is no
// size. An empty unit is taken as MiB.
func toMiB(f float64, unit string) *int64 {
	mul, ok := map[string]float64{
		"": 1, "MiB": 1, "GiB": 1024, "TiB": 1024 * 1024, "KiB": 1.0 / 1024, "B": 1.0 / (1 << 20),
		"MB": 1e6 / (1 << 20), "GB": 1e9 / (1 << 20), "kB": 1e3 / (1 << 20), "KB": 1e3 / (1 << 20),
	}[unit]
	if !ok {
		return nil
	}
	n := int64(f*mul + 0.5)
	return &n
}

// attrInt is nomadview.AttrInt as a pointer: nil when absent.
func attrInt(a map[string]*api.Attribute, name string) *int {
	if n, ok := nomadview.AttrInt(a, name); ok {
		return &n
	}
	return nil
}

func attrMiB(a map[string]*api.Attribute, name string) *int64 {
	v := a[name]
	if v == nil {
		return nil
	}
	switch {
	case v.IntVal != nil:
		return toMiB(float64(*v.IntVal), v.Unit)
	case v.FloatVal != nil:
		return toMiB(*v.FloatVal, v.Unit)
	}
	return nil
}
