package apm

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/nomadview"
)

// mpsGroup is one GPU's MPS shares (group named by the GPU's UUID), the
// first held of them listed in used.
func mpsGroup(uuid string, shares int) DeviceGroup {
	g := DeviceGroup{DeviceSpec: DeviceSpec{Vendor: "nvidia", Type: "mps", Name: uuid}, Shares: shares}
	for i := range shares {
		g.Instances = append(g.Instances, DeviceInstance{ID: fmt.Sprintf("%s-%d", uuid, i), Healthy: true, GPU: nomadview.PhysicalGPU{UUID: uuid}})
	}
	return g
}

// migGroup is n MIG instances of a profile on the GPU at a PCI bus ID.
func migGroup(profile, bus, prefix string, n int) DeviceGroup {
	g := DeviceGroup{DeviceSpec: DeviceSpec{Vendor: "nvidia", Type: "mig", Name: profile}}
	for i := range n {
		g.Instances = append(g.Instances, DeviceInstance{ID: fmt.Sprintf("%s-%d", prefix, i), Healthy: true, GPU: nomadview.PhysicalGPU{PCIBusID: bus}})
	}
	return g
}

// layoutGroup is a GPU's layout group as a hand-made snapshot might keep
// it among the devices: no instances.
func layoutGroup(uuid string) DeviceGroup {
	return DeviceGroup{DeviceSpec: DeviceSpec{Vendor: "nvidia", Type: contract.SliceLayout, Name: uuid}}
}

func readyLayouts(uuids ...string) []LayoutGPU {
	var out []LayoutGPU
	for _, u := range uuids {
		out = append(out, LayoutGPU{UUID: u, Current: "whole", State: contract.LayoutReady})
	}
	return out
}

// anyFixture is a pool "frac" whose layouts follow the queue:
//
//	nA ready   4 GPUs (layout groups): 2 whole H100 (w-0 held); GPU-m, 8 MPS shares (2 held);
//	           a MIG GPU, 2×3g.40gb (one held); plus a layout group among its devices
//	nB ready   no layout groups: 7×1g.10gb on one GPU (free), 1 whole GPU, unhealthy
//	nC down    4 whole GPUs
//
// queued: W1 4×1 mps (100 s), W2 2×1 mig/3g.40gb (50 s), W3 1×2 gpu (10 s),
// W4 pending 1×1 mps on nA (5 s), W5 3×1 xilinx/fpga (1000 s), W6 a
// quota-blocked 1×1 mps (20 s).
func anyFixture() *Snapshot {
	wholeA := devGroup("nvidia", "gpu", "H100", "w", 2, 0)[0]
	return &Snapshot{
		Now: t0,
		Nodes: []Node{
			{ID: "nA", Pool: "frac", Datacenter: "dc1", Status: "ready", Eligible: true,
				Devices: []DeviceGroup{wholeA, mpsGroup("GPU-m", 8), migGroup("3g.40gb", "0000:03:00.0", "mg", 2), layoutGroup("GPU-w0")},
				Layouts: readyLayouts("GPU-w0", "GPU-w1", "GPU-m", "GPU-g"),
				Used: []UsedDevices{used("nvidia", "gpu", "H100", "w-0"), used("nvidia", "mps", "GPU-m", "GPU-m-0", "GPU-m-1"),
					used("nvidia", "mig", "3g.40gb", "mg-0")}},
			{ID: "nB", Pool: "frac", Datacenter: "dc1", Status: "ready", Eligible: true,
				Devices: []DeviceGroup{migGroup("1g.10gb", "0000:04:00.0", "mb", 7), devGroup("nvidia", "gpu", "H100", "wb", 1, 1)[0]}},
			{ID: "nC", Pool: "frac", Datacenter: "dc1", Status: "down", Eligible: true, Devices: gpus("c", 4, 0)},
		},
		Work: []Work{
			{Source: FromBlockedEval, JobID: "W1", Allocs: 4, Asks: []DeviceAsk{ask("nvidia/mps", 1)}, Since: t0.Add(-100 * time.Second),
				Pool: "frac", CapacityBlocked: true},
			{Source: FromBlockedEval, JobID: "W2", Allocs: 2, Asks: []DeviceAsk{ask("nvidia/mig/3g.40gb", 1)}, Since: t0.Add(-50 * time.Second),
				Pool: "frac", CapacityBlocked: true},
			{Source: FromBlockedEval, JobID: "W3", Allocs: 1, Asks: []DeviceAsk{ask("gpu", 2)}, Since: t0.Add(-10 * time.Second),
				Pool: "frac", CapacityBlocked: true},
			{Source: FromPendingAlloc, JobID: "W4", Allocs: 1, Asks: []DeviceAsk{{Device: DeviceSpec{Vendor: "nvidia", Type: "mps", Name: "GPU-m"}, Count: 1}},
				Since: t0.Add(-5 * time.Second), Pool: "frac", Datacenters: []string{"dc1"}},
			{Source: FromBlockedEval, JobID: "W5", Allocs: 3, Asks: []DeviceAsk{ask("xilinx/fpga", 1)}, Since: t0.Add(-1000 * time.Second),
				Pool: "frac", CapacityBlocked: true},
			{Source: FromBlockedEval, JobID: "W6", Allocs: 1, Asks: []DeviceAsk{ask("nvidia/mps", 1)}, Since: t0.Add(-20 * time.Second),
				Pool: "frac", CapacityBlocked: false},
		},
		Util: map[string][]InstanceUtil{
			"nA": {{DeviceSpec{Vendor: "nvidia", Type: "gpu", Name: "H100"}, "w-0", 90}, {DeviceSpec{Vendor: "nvidia", Type: "mps", Name: "GPU-m"}, "GPU-m-0", 30}},
			"nB": {{DeviceSpec{Vendor: "nvidia", Type: "mig", Name: "1g.10gb"}, "mb-0", 0}},
		},
	}
}

func TestEvaluateAnyDevice(t *testing.T) {
	// nA: capacity 2 + 1 + 6/7, held 1 + 2/8 + 3/7; nB: 7/7, none held.
	capacity, held := 3+6/7.0+1, 1+2/8.0+3/7.0
	cases := []struct {
		query string
		want  float64
	}{
		// W1 4/8, W2 2·3/7, W3 2, W4 1/8, W6 1/8; not W5 (no GPU).
		{"gpus_queued{pool=frac,device=any}", 0.5 + 6/7.0 + 2 + 0.125 + 0.125},
		{"gpus_queued{pool=frac,device=any,state=blocked}", 0.5 + 6/7.0 + 2 + 0.125},
		{"gpus_queued{pool=frac,device=any,state=pending}", 0.125},
		{"gpus_queued{pool=frac}", 2},                           // the default stays nvidia/gpu
		{"gpus_queued{pool=frac,device=nvidia/mps}", 4 + 1 + 1}, // instances, not GPU-equivalents
		{"allocs_queued{pool=frac,device=any}", 4 + 2 + 1 + 1 + 1},
		{"allocs_queued{pool=frac}", 1},
		{"wait_max_seconds{pool=frac,device=any}", 100},
		{"wait_mean_seconds{pool=frac,device=any}", (4*100 + 2*50 + 10 + 5 + 20) / 9.0},
		{"gpu_alloc_pct{pool=frac,device=any}", 100 * held / capacity},
		{"gpu_alloc_pct{pool=frac}", 50}, // nA's whole GPUs; nB's is unhealthy
		{"gpu_util_pct{pool=frac,device=any}", 40},
		{"nodes_ready{pool=frac,device=any}", 2},
		{"nodes_ready{pool=frac}", 1}, // nB has no healthy whole GPU
		{"nodes_ready{pool=frac,device=nvidia/layout}", 0},
		// Free: nA 3+6/7 − (1+2/8+3/7) ≈ 2.18, nB 1. W3's 2 on nA (0.18
		// left), W2's 2×3/7 on nB (1/7 left), W1's 4×1/8: one in each
		// leftover, two on a new node. W6 is quota-blocked.
		{"nodes_needed{pool=frac,device=any}", 1},
		// W3's 2 whole GPUs fit no node's free whole GPUs (nA has 1):
		// device=any is optimistic, the controller relays nA's free GPUs.
		{"nodes_needed{pool=frac}", 1},
	}
	for _, c := range cases {
		t.Run(c.query, func(t *testing.T) {
			if got := eval(t, c.query, anyFixture()); math.Abs(got-c.want) > 1e-9 {
				t.Fatalf("got %v, want %v", got, c.want)
			}
		})
	}
}

func TestNodesNeededAnyDevice(t *testing.T) {
	mpsWork := func(allocs int) Work {
		return Work{Source: FromBlockedEval, JobID: "mps", Allocs: allocs, Asks: []DeviceAsk{ask("nvidia/mps", 1)},
			Since: t0.Add(-time.Minute), Pool: "frac", CapacityBlocked: true}
	}
	// full is one node of two GPUs: one whole, held; one in 8 MPS
	// shares, heldShares of them held.
	full := func(heldShares int) Node {
		n := Node{ID: "n", Pool: "frac", Datacenter: "dc1", Status: "ready", Eligible: true,
			Devices: []DeviceGroup{gpus("w", 1, 0)[0], mpsGroup("GPU-m", 8), layoutGroup("GPU-w")},
			Layouts: readyLayouts("GPU-w", "GPU-m"),
			Used:    []UsedDevices{used("nvidia", "gpu", "H100", "w-0")}}
		var ids []string
		for i := range heldShares {
			ids = append(ids, fmt.Sprintf("GPU-m-%d", i))
		}
		if len(ids) > 0 {
			n.Used = append(n.Used, used("nvidia", "mps", "GPU-m", ids...))
		}
		return n
	}
	cases := []struct {
		name  string
		query string
		s     *Snapshot
		want  NodesNeededResult
	}{
		{"MPS work, pool full", "nodes_needed{pool=frac,device=any}",
			&Snapshot{Nodes: []Node{full(8)}, Work: []Work{mpsWork(3)}},
			NodesNeededResult{Nodes: 1, Shape: 2, ShapeFrom: "nodes", QueuedAllocs: 3}},
		{"MPS work, pool full, default device sees none", "nodes_needed{pool=frac}",
			&Snapshot{Nodes: []Node{full(8)}, Work: []Work{mpsWork(3)}},
			NodesNeededResult{Nodes: 0, Shape: 1, ShapeFrom: "nodes"}},
		{"MPS work fits free shares", "nodes_needed{pool=frac,device=any}",
			&Snapshot{Nodes: []Node{full(5)}, Work: []Work{mpsWork(3)}},
			NodesNeededResult{Nodes: 0, Shape: 2, ShapeFrom: "nodes", QueuedAllocs: 3, PlacedOnFree: 3}},
		{"MPS work, one share too many", "nodes_needed{pool=frac,device=any}",
			&Snapshot{Nodes: []Node{full(5)}, Work: []Work{mpsWork(4)}},
			NodesNeededResult{Nodes: 1, Shape: 2, ShapeFrom: "nodes", QueuedAllocs: 4, PlacedOnFree: 3}},
		{"a GPU being laid out anew is free", "nodes_needed{pool=frac,device=any}",
			func() *Snapshot {
				n := full(0)
				n.Devices[1] = mpsGroup("GPU-m", 8)
				for i := range n.Devices[1].Instances {
					n.Devices[1].Instances[i].Healthy = false
				}
				n.Layouts[1].State = contract.LayoutDraining
				return &Snapshot{Nodes: []Node{n}, Work: []Work{mpsWork(8)}}
			}(),
			NodesNeededResult{Nodes: 0, Shape: 2, ShapeFrom: "nodes", QueuedAllocs: 8, PlacedOnFree: 8}},
		{"a MIG GPU with no instance is free", "nodes_needed{pool=frac,device=any}",
			func() *Snapshot {
				n := full(8)
				n.Layouts = append(n.Layouts, LayoutGPU{UUID: "GPU-x", Current: "mig:", State: contract.LayoutReady})
				return &Snapshot{Nodes: []Node{n}, Work: []Work{{Source: FromBlockedEval, Allocs: 2, Asks: []DeviceAsk{ask("nvidia/mig/3g.40gb", 1)},
					Pool: "frac", CapacityBlocked: true}}}
			}(),
			NodesNeededResult{Nodes: 0, Shape: 3, ShapeFrom: "nodes", QueuedAllocs: 2, PlacedOnFree: 2}},
		{"empty pool, config shape", "nodes_needed{pool=frac,device=any}",
			&Snapshot{DefaultGPUsPerNode: 2, Work: []Work{mpsWork(20)}}, // 20/8 GPUs
			NodesNeededResult{Nodes: 2, Shape: 2, ShapeFrom: "config", QueuedAllocs: 20}},
		{"empty pool, no shape", "nodes_needed{pool=frac,device=any}",
			&Snapshot{Work: []Work{mpsWork(1)}},
			NodesNeededResult{Nodes: 1, Shape: 0, ShapeFrom: "none", QueuedAllocs: 1}},
		{"query shape, mixed asks", "nodes_needed{pool=frac,device=any,gpus_per_node=1}",
			&Snapshot{Work: []Work{mpsWork(4), // 4/8
				{Source: FromBlockedEval, Allocs: 1, Asks: []DeviceAsk{ask("nvidia/mig/3g.40gb", 1)}, Pool: "frac", CapacityBlocked: true}, // 3/7
				{Source: FromBlockedEval, Allocs: 1, Asks: []DeviceAsk{ask("nvidia/gpu", 2)}, Pool: "frac", CapacityBlocked: true}}},       // > 1 GPU
			NodesNeededResult{Nodes: 1, Shape: 1, ShapeFrom: "query", QueuedAllocs: 6, Unfittable: 1}},
		{"shape from instances without layout groups", "nodes_needed{pool=frac,device=any}",
			&Snapshot{Nodes: []Node{{ID: "n", Pool: "frac", Status: "ready", Eligible: true,
				Devices: []DeviceGroup{migGroup("1g.10gb", "bus0", "a", 7), migGroup("3g.40gb", "bus1", "b", 2), mpsGroup("GPU-m", 4)},
				Used: []UsedDevices{used("nvidia", "mig", "1g.10gb", "a-0", "a-1", "a-2", "a-3", "a-4", "a-5", "a-6"),
					used("nvidia", "mig", "3g.40gb", "b-0", "b-1"), used("nvidia", "mps", "GPU-m", "GPU-m-0", "GPU-m-1", "GPU-m-2", "GPU-m-3")}}},
				Work: []Work{mpsWork(1)}},
			NodesNeededResult{Nodes: 1, Shape: 3, ShapeFrom: "nodes", QueuedAllocs: 1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			q, err := ParseQuery(c.query)
			if err != nil {
				t.Fatal(err)
			}
			if got := NodesNeeded(q, c.s); got != c.want {
				t.Fatalf("got %+v, want %+v", got, c.want)
			}
		})
	}
}

func TestMPSSharesOfPool(t *testing.T) {
	four := Node{ID: "n4", Pool: "four", Status: "ready", Eligible: true, Devices: []DeviceGroup{mpsGroup("GPU-a", 4), mpsGroup("GPU-b", 4)}}
	attr := mpsGroup("GPU-c", 2)
	attr.Shares = 16 // the attribute wins over the instances listed
	sixteen := Node{ID: "n16", Pool: "sixteen", Status: "ready", Eligible: true, Devices: []DeviceGroup{attr}}
	work := func(pool string) Work {
		return Work{Source: FromBlockedEval, Allocs: 2, Asks: []DeviceAsk{ask("nvidia/mps", 1)}, Pool: pool, CapacityBlocked: true}
	}
	s := &Snapshot{Nodes: []Node{four, sixteen}, Work: []Work{work("four"), work("sixteen"), work("none")}}
	for query, want := range map[string]float64{
		"gpus_queued{pool=four,device=any}":    2 / 4.0,
		"gpus_queued{pool=sixteen,device=any}": 2 / 16.0,
		"gpus_queued{pool=none,device=any}":    2 / 8.0, // gpulayout.DefaultShares
	} {
		if got := eval(t, query, s); math.Abs(got-want) > 1e-9 {
			t.Errorf("%s: got %v, want %v", query, got, want)
		}
	}
}

func TestLayoutGroupsAreNoCapacity(t *testing.T) {
	s := anyFixture()
	for k := range CapacityFigures(s) {
		if k.Device == "nvidia/layout/GPU-w0" {
			t.Errorf("capacity series for a layout group: %+v", k)
		}
	}
	only := &Snapshot{Nodes: []Node{{ID: "x", Pool: "p", Status: "ready", Eligible: true,
		Devices: []DeviceGroup{layoutGroup("GPU-1"), layoutGroup("GPU-2")}}}}
	for _, q := range []string{"nodes_ready{device=any}", "nodes_ready{device=nvidia/layout}", "gpu_alloc_pct{device=any}"} {
		if got := eval(t, q, only); got != 0 {
			t.Errorf("%s on a node with only layout groups: %v", q, got)
		}
	}
	if f := CapacityFigures(only); len(f) != 0 {
		t.Errorf("capacity figures of layout groups: %v", f)
	}
}

// TestSnapshotOfLayouts: layout groups become Node.Layouts, not devices;
// an MPS group's mps_shares attribute is its Shares.
func TestSnapshotOfLayouts(t *testing.T) {
	str := func(s string) *api.Attribute { return &api.Attribute{StringVal: &s} }
	// As the device plugin publishes them (nomadview.NodeLayouts reads
	// them): a group whose attributes do not read is left out.
	index := int64(0)
	layout := func(uuid, current, state string) *api.NodeDeviceResource {
		index++
		return &api.NodeDeviceResource{Vendor: "nvidia", Type: contract.SliceLayout, Name: uuid,
			Attributes: map[string]*api.Attribute{contract.AttrLayoutCurrent: str(current), contract.AttrLayoutState: str(state),
				contract.AttrLayoutIndex: {IntVal: ptrTo(index - 1)}}}
	}
	node := &api.NodeListStub{ID: "n1", NodePool: "frac", Status: api.NodeStatusReady, SchedulingEligibility: api.NodeSchedulingEligible,
		NodeResources: &api.NodeResources{Devices: []*api.NodeDeviceResource{
			layout("GPU-a", "mps:4", "ready"),
			{Vendor: "nvidia", Type: "mps", Name: "GPU-a",
				Attributes: map[string]*api.Attribute{contract.AttrMPSShares: {IntVal: ptrTo(int64(4))}},
				Instances:  []*api.NodeDevice{{ID: "GPU-a-mps-0", Healthy: true}}},
			layout("GPU-b", "mig:", "draining"),
			layout("GPU-c", "mig:", "ready"),
		}}}
	node.NodeResources.Devices[0].Attributes[contract.AttrLayoutFault] = str("none")
	node.NodeResources.Devices[3].Attributes[contract.AttrLayoutFault] = str("XID 79 (GPU has fallen off the bus)")
	s := SnapshotOf(&nomadview.Snapshot{Nodes: []*api.NodeListStub{node}}, false)
	n := s.Nodes[0]
	if len(n.Devices) != 1 || n.Devices[0].Type != "mps" || n.Devices[0].Shares != 4 {
		t.Errorf("devices %+v, want the MPS group alone with 4 shares", n.Devices)
	}
	want := []LayoutGPU{{UUID: "GPU-a", Current: "mps:4", State: contract.LayoutReady}, {UUID: "GPU-b", Current: "mig:", State: contract.LayoutDraining},
		{UUID: "GPU-c", Current: "mig:", State: contract.LayoutReady, Fault: "XID 79 (GPU has fallen off the bus)"}}
	if fmt.Sprint(n.Layouts) != fmt.Sprint(want) {
		t.Errorf("layouts %+v, want %+v", n.Layouts, want)
	}
	// A failed GPU in MIG mode with no instance is not being laid out:
	// it is no capacity.
	if !n.Layouts[1].Relaying() || n.Layouts[0].Relaying() || n.Layouts[2].Relaying() {
		t.Errorf("relaying: %v %v %v", n.Layouts[0].Relaying(), n.Layouts[1].Relaying(), n.Layouts[2].Relaying())
	}
}
