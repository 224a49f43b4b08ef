package apm

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/nomadview"
)

var t0 = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

func gpus(prefix string, n, unhealthy int) []DeviceGroup {
	return devGroup("nvidia", "gpu", "H100", prefix, n, unhealthy)
}

func devGroup(vendor, typ, name, prefix string, n, unhealthy int) []DeviceGroup {
	g := DeviceGroup{DeviceSpec: DeviceSpec{Vendor: vendor, Type: typ, Name: name}}
	for i := range n {
		g.Instances = append(g.Instances, DeviceInstance{ID: fmt.Sprintf("%s-%d", prefix, i), Healthy: i < n-unhealthy})
	}
	return []DeviceGroup{g}
}

func used(vendor, typ, name string, ids ...string) UsedDevices {
	return UsedDevices{DeviceSpec: DeviceSpec{Vendor: vendor, Type: typ, Name: name}, IDs: ids}
}

func ask(name string, n int) DeviceAsk {
	return DeviceAsk{Device: nomadview.ParseRequest(name), Count: n}
}

// fixture is a small cluster:
//
//	n1 gpu/dc1/a100 ready       8 H100 (1 unhealthy: g1-7), g1-0,g1-1 held by a pending alloc, g1-7 by a running one
//	n2 gpu/dc1/a100 ready       8 H100, all held
//	n3 gpu/dc2/h100 ineligible  4 H100
//	n4 batch/dc1/mig ready      7 MIG 1g.10gb, 2 held
//	n5 gpu/dc1/a100 down        8 H100
//
// queued: A gpu dc* 10×2 gpu (100 s), B gpu dc1 class!=a100 3×(1 gpu + 1 mig) (50 s),
// C pool all 1×4 nvidia/gpu (300 s), D batch 5×1 mig (30 s), E gpu no devices,
// F gpu quota-blocked 2×1 (10 s), pending alloc on n1 2 gpus (20 s).
func fixture() *Snapshot {
	return &Snapshot{
		Now: t0,
		Nodes: []Node{
			{ID: "n1", Pool: "gpu", Datacenter: "dc1", Class: "a100", Status: "ready", Eligible: true, Devices: gpus("g1", 8, 1),
				Used: []UsedDevices{used("nvidia", "gpu", "H100", "g1-0", "g1-1"), used("nvidia", "gpu", "H100", "g1-7")}},
			{ID: "n2", Pool: "gpu", Datacenter: "dc1", Class: "a100", Status: "ready", Eligible: true, Devices: gpus("g2", 8, 0),
				Used: []UsedDevices{used("nvidia", "gpu", "H100", "g2-0", "g2-1", "g2-2", "g2-3", "g2-4", "g2-5", "g2-6", "g2-7")}},
			{ID: "n3", Pool: "gpu", Datacenter: "dc2", Class: "h100", Status: "ready", Eligible: false, Devices: gpus("g3", 4, 0)},
			{ID: "n4", Pool: "batch", Datacenter: "dc1", Class: "mig", Status: "ready", Eligible: true,
				Devices: devGroup("nvidia", "mig", "1g.10gb", "m4", 7, 0),
				Used:    []UsedDevices{used("nvidia", "mig", "1g.10gb", "m4-0", "m4-1")}},
			{ID: "n5", Pool: "gpu", Datacenter: "dc1", Class: "a100", Status: "down", Eligible: true, Devices: gpus("g5", 8, 0)},
		},
		Work: []Work{
			{Source: FromBlockedEval, JobID: "A", Allocs: 10, Asks: []DeviceAsk{ask("nvidia/gpu", 2)}, Since: t0.Add(-100 * time.Second),
				Pool: "gpu", Datacenters: []string{"dc*"}, CapacityBlocked: true},
			{Source: FromBlockedEval, JobID: "B", Allocs: 3, Asks: []DeviceAsk{ask("gpu", 1), ask("nvidia/mig/1g.10gb", 1)}, Since: t0.Add(-50 * time.Second),
				Pool: "gpu", Datacenters: []string{"dc1"}, ClassRules: []ClassRule{{"!=", "a100"}}, CapacityBlocked: true},
			{Source: FromBlockedEval, JobID: "C", Allocs: 1, Asks: []DeviceAsk{ask("nvidia/gpu", 4)}, Since: t0.Add(-300 * time.Second),
				Pool: "all", Datacenters: []string{"*"}, CapacityBlocked: true},
			{Source: FromBlockedEval, JobID: "D", Allocs: 5, Asks: []DeviceAsk{ask("nvidia/mig/1g.10gb", 1)}, Since: t0.Add(-30 * time.Second),
				Pool: "batch", Datacenters: []string{"dc1"}, CapacityBlocked: true},
			{Source: FromBlockedEval, JobID: "E", Allocs: 7, Since: t0.Add(-1000 * time.Second),
				Pool: "gpu", Datacenters: []string{"dc1"}, CapacityBlocked: true},
			{Source: FromBlockedEval, JobID: "F", Allocs: 2, Asks: []DeviceAsk{ask("nvidia/gpu", 1)}, Since: t0.Add(-10 * time.Second),
				Pool: "gpu", Datacenters: []string{"dc1"}, CapacityBlocked: false},
			{Source: FromPendingAlloc, JobID: "P", Allocs: 1, Asks: []DeviceAsk{{Device: DeviceSpec{Vendor: "nvidia", Type: "gpu", Name: "H100"}, Count: 2}}, Since: t0.Add(-20 * time.Second),
				Pool: "gpu", Datacenters: []string{"dc1"}, ClassRules: []ClassRule{{"=", "a100"}}},
		},
		Util: map[string][]InstanceUtil{
			"n1": {{DeviceSpec{Vendor: "nvidia", Type: "gpu", Name: "H100"}, "g1-0", 50}, {DeviceSpec{Vendor: "nvidia", Type: "gpu", Name: "H100"}, "g1-1", 70}},
			"n2": {{DeviceSpec{Vendor: "nvidia", Type: "gpu", Name: "H100"}, "g2-0", 100}},
			"n3": {{DeviceSpec{Vendor: "nvidia", Type: "gpu", Name: "H100"}, "g3-0", 0}},
			"n4": {{DeviceSpec{Vendor: "nvidia", Type: "mig", Name: "1g.10gb"}, "m4-0", 10}},
			"n5": {{DeviceSpec{Vendor: "nvidia", Type: "gpu", Name: "H100"}, "g5-0", 90}},
		},
	}
}

func eval(t *testing.T, query string, s *Snapshot) float64 {
	t.Helper()
	q, err := ParseQuery(query)
	if err != nil {
		t.Fatal(err)
	}
	v, err := Evaluate(q, s)
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return v
}

func TestEvaluateFixture(t *testing.T) {
	cases := []struct {
		query string
		want  float64
	}{
		{"gpus_queued{pool=gpu}", 20 + 3 + 2 + 2},
		{"gpus_queued{pool=gpu,state=blocked}", 25},
		{"gpus_queued{pool=gpu,state=pending}", 2},
		{"gpus_queued{pool=gpu,class=a100}", 24},
		{"gpus_queued{pool=gpu,class=h100}", 25},
		{"gpus_queued{pool=gpu,datacenter=dc2}", 20},
		{"gpus_queued{pool=all}", 4},
		{"gpus_queued{device=nvidia/mig/1g.10gb}", 8},
		{"gpus_queued{pool=batch,device=nvidia/mig/1g.10gb}", 5},
		{"gpus_queued{pool=batch}", 0}, // C (pool all) counts only without a pool
		{"gpus_queued", 31},
		{"gpus_queued{device=amd/gpu}", 3}, // B asks for "gpu", any vendor
		{"allocs_queued{pool=gpu}", 16},
		{"allocs_queued{pool=gpu,state=blocked}", 15},
		{"allocs_queued{pool=gpu,state=pending}", 1},
		{"wait_max_seconds{pool=gpu}", 100},
		{"wait_max_seconds", 300},
		{"wait_max_seconds{pool=gpu,state=pending}", 20},
		{"wait_max_seconds{pool=batch,device=nvidia/mig/1g.10gb}", 30},
		{"wait_mean_seconds{pool=gpu}", (10*100 + 3*50 + 2*10 + 20) / 16.0},
		{"gpu_alloc_pct{pool=gpu}", 100 * 10 / 15.0},
		{"gpu_alloc_pct{pool=gpu,datacenter=dc2}", 0}, // n3 is ineligible
		{"gpu_alloc_pct{pool=batch,device=nvidia/mig}", 100 * 2 / 7.0},
		{"gpu_alloc_pct{pool=batch}", 0},
		{"gpu_util_pct{pool=gpu}", 55},
		{"gpu_util_pct{pool=gpu,class=a100}", 220 / 3.0},
		{"gpu_util_pct{pool=batch,device=nvidia/mig/1g.10gb}", 10},
		{"nodes_needed{pool=gpu}", 3},
		{"nodes_needed{pool=gpu,gpus_per_node=4}", 5},
		{"nodes_needed", 3},
		{"nodes_needed{pool=gpu,gpus_per_node=1}", 2},
		{"nodes_needed{pool=batch,device=nvidia/mig/1g.10gb}", 0}, // 5 on n4's 5 free
		{"nodes_ready{pool=gpu}", 2},                              // n1, n2 (full, but joined); n3 ineligible, n5 down
		{"nodes_ready{pool=gpu,datacenter=dc2}", 0},               // n3 is ineligible
		{"nodes_ready{pool=batch}", 0},                            // n4 has no whole GPU
		{"nodes_ready{pool=batch,device=nvidia/mig}", 1},
		{"nodes_ready", 2},
	}
	for _, c := range cases {
		t.Run(c.query, func(t *testing.T) {
			if got := eval(t, c.query, fixture()); math.Abs(got-c.want) > 1e-9 {
				t.Fatalf("got %v, want %v", got, c.want)
			}
		})
	}
}

func TestEmptyOrMissingPoolIsZero(t *testing.T) {
	for _, s := range []*Snapshot{{Now: t0}, fixture()} {
		for _, m := range metricNames {
			for _, f := range []string{"{pool=nosuch}", "{pool=nosuch,datacenter=x,class=y,device=nvidia/mps}"} {
				if s.Nodes == nil && f == "{pool=nosuch}" {
					f = ""
				}
				if got := eval(t, m+f, s); got != 0 {
					t.Errorf("%s%s on %d nodes = %v, want 0", m, f, len(s.Nodes), got)
				}
			}
		}
	}
}

func TestNodesNeededDetails(t *testing.T) {
	q, _ := ParseQuery("nodes_needed{pool=gpu}")
	r := NodesNeeded(q, fixture())
	want := NodesNeededResult{Nodes: 3, Shape: 8, ShapeFrom: "nodes", QueuedAllocs: 13, PlacedOnFree: 3}
	if r != want {
		t.Fatalf("got %+v, want %+v", r, want)
	}
	q, _ = ParseQuery("nodes_needed{pool=gpu,gpus_per_node=1}")
	if r := NodesNeeded(q, fixture()); r.Unfittable != 8 || r.Nodes != 2 || r.ShapeFrom != "query" {
		t.Fatalf("got %+v", r)
	}
}

// TestNodesNeededFromZero: a pool with no nodes learns nothing from its
// nodes; a hint gives the shape, and without one 1 node is asked for.
func TestNodesNeededFromZero(t *testing.T) {
	s := &Snapshot{Now: t0, Work: []Work{{Source: FromBlockedEval, Allocs: 5, Asks: []DeviceAsk{ask("nvidia/gpu", 2)},
		Pool: "fresh", Datacenters: []string{"*"}, CapacityBlocked: true, Since: t0}}}
	cases := []struct {
		query    string
		def      int
		want     int
		wantFrom string
	}{
		{"nodes_needed{pool=fresh}", 0, 1, "none"},
		{"nodes_needed{pool=fresh}", 8, 2, "config"},
		{"nodes_needed{pool=fresh,gpus_per_node=4}", 8, 3, "query"},
		{"nodes_needed{pool=fresh,gpus_per_node=1}", 8, 0, "query"}, // unfittable
		{"nodes_needed{pool=other}", 0, 0, "none"},
	}
	for _, c := range cases {
		s.DefaultGPUsPerNode = c.def
		q, err := ParseQuery(c.query)
		if err != nil {
			t.Fatal(err)
		}
		r := NodesNeeded(q, s)
		if r.Nodes != c.want || r.ShapeFrom != c.wantFrom {
			t.Errorf("%s default %d: got %+v, want %d from %s", c.query, c.def, r, c.want, c.wantFrom)
		}
	}
}

func TestNodesNeededPacking(t *testing.T) {
	// Mixed sizes into 8-GPU nodes: 3×5 + 3×3 = 24 GPUs fits 3 nodes (5+3 each).
	s := &Snapshot{Now: t0, DefaultGPUsPerNode: 8, Work: []Work{
		{Source: FromBlockedEval, Allocs: 3, Asks: []DeviceAsk{ask("gpu", 5)}, CapacityBlocked: true},
		{Source: FromBlockedEval, Allocs: 3, Asks: []DeviceAsk{ask("gpu", 3)}, CapacityBlocked: true},
	}}
	q, _ := ParseQuery("nodes_needed")
	if r := NodesNeeded(q, s); r.Nodes != 3 {
		t.Fatalf("got %+v, want 3 nodes", r)
	}
	// Free capacity: two nodes with 3 free each take two 3s; 3×5 + 1×3 need 3 new nodes... (5+3, 5, 5).
	s.Nodes = []Node{
		{ID: "a", Status: "ready", Eligible: true, Devices: gpus("a", 8, 0), Used: []UsedDevices{used("nvidia", "gpu", "H100", "a-0", "a-1", "a-2", "a-3", "a-4")}},
		{ID: "b", Status: "ready", Eligible: true, Devices: gpus("b", 8, 0), Used: []UsedDevices{used("nvidia", "gpu", "H100", "b-0", "b-1", "b-2", "b-3", "b-4")}},
	}
	if r := NodesNeeded(q, s); r.Nodes != 3 || r.PlacedOnFree != 2 {
		t.Fatalf("got %+v, want 3 nodes, 2 placed on free", r)
	}
	// Many equal allocations: 10,000 × 1 GPU into 8-GPU nodes is 1,250.
	s = &Snapshot{Now: t0, DefaultGPUsPerNode: 8, Work: []Work{{Source: FromBlockedEval, Allocs: 10000, Asks: []DeviceAsk{ask("gpu", 1)}, CapacityBlocked: true}}}
	if r := NodesNeeded(q, s); r.Nodes != 1250 {
		t.Fatalf("got %+v, want 1250", r)
	}
}

func TestNodeShape(t *testing.T) {
	s := &Snapshot{Nodes: []Node{
		{ID: "a", Devices: gpus("a", 4, 0)},
		{ID: "b", Devices: gpus("b", 8, 2)}, // unhealthy instances still count for the shape
		{ID: "c", Devices: gpus("c", 4, 0)},
		{ID: "d", Devices: gpus("d", 8, 0)},
		{ID: "e"},
	}}
	q, _ := ParseQuery("nodes_needed")
	if n, from := NodeShape(q, s); n != 8 || from != "nodes" {
		t.Fatalf("tie: got %d from %s, want 8 (larger) from nodes", n, from)
	}
	s.Nodes = s.Nodes[:3]
	if n, _ := NodeShape(q, s); n != 4 {
		t.Fatalf("got %d, want 4 (most common)", n)
	}
}

func TestClassRule(t *testing.T) {
	cases := []struct {
		r    ClassRule
		c    string
		want bool
	}{
		{ClassRule{"=", "a100"}, "a100", true},
		{ClassRule{"==", "a100"}, "h100", false},
		{ClassRule{"is", "a100"}, "a100", true},
		{ClassRule{"!=", "a100"}, "a100", false},
		{ClassRule{"not", "a100"}, "h100", true},
		{ClassRule{"regexp", "^(a|h)100$"}, "h100", true},
		{ClassRule{"regexp", "^a"}, "h100", false},
		{ClassRule{"regexp", "("}, "h100", true}, // broken pattern cannot exclude
		{ClassRule{"set_contains_any", "a100, h100"}, "h100", true},
		{ClassRule{"set_contains_any", "a100,h100"}, "l4", false},
		{ClassRule{"set_contains", "a100"}, "a100", true},
		{ClassRule{"set_contains", "a100,h100"}, "a100", false},
		{ClassRule{"is_set", ""}, "", false},
		{ClassRule{"is_not_set", ""}, "", true},
		{ClassRule{"version", ">= 1"}, "a100", true}, // not understood: no exclusion
	}
	for _, c := range cases {
		if got := c.r.Satisfied(c.c); got != c.want {
			t.Errorf("%+v on %q: got %v", c.r, c.c, got)
		}
	}
}

func TestUtilOf(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	i := func(v int64) *int64 { return &v }
	hs := &api.HostStats{DeviceStats: []*api.DeviceGroupStats{
		{Vendor: "nvidia", Type: "gpu", Name: "H100", InstanceStats: map[string]*api.DeviceStats{
			"g0": {Stats: &api.StatObject{Attributes: map[string]*api.StatValue{"GPU utilization": {FloatNumeratorVal: f(40)}}}},
			"g1": {Stats: &api.StatObject{Attributes: map[string]*api.StatValue{"GPU utilization": {IntNumeratorVal: i(60)}}}},
			"g2": {Stats: &api.StatObject{Attributes: map[string]*api.StatValue{"Memory used": {IntNumeratorVal: i(1)}}}},
			"g3": {},
		}},
		nil,
	}}
	got := utilOf(hs, DefaultUtilStat)
	want := []InstanceUtil{{DeviceSpec{Vendor: "nvidia", Type: "gpu", Name: "H100"}, "g0", 40}, {DeviceSpec{Vendor: "nvidia", Type: "gpu", Name: "H100"}, "g1", 60}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}
