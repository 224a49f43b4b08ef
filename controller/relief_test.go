package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/controller/consolidate"
	"github.com/nomad-gpu/nomad-gpu/nomadview"
)

var reliefCfg = ReliefConfig{High: 80, Low: 40, Window: time.Minute, Interval: 10 * time.Second}

func TestPlanRelief(t *testing.T) {
	now := time.Unix(10_000, 0)
	long := now.Add(-2 * time.Minute)
	client := func(id string, shares int, load float64, movable bool) mpsClient {
		return mpsClient{Alloc: consolidate.Alloc{ID: id, Job: "job-" + id, GPUs: shares, Movable: movable}, Load: load}
	}
	busy := func(clients ...mpsClient) mpsGPU {
		return mpsGPU{UUID: "GPU-busy", NodeName: "n1", Pool: "default", Util: 95, OverSince: long, Shares: 8, Free: 2, Clients: clients}
	}
	idle := func(uuid string, util float64, free int) mpsGPU {
		return mpsGPU{UUID: uuid, NodeName: "n2", Pool: "default", Util: util, Shares: 8, Free: free}
	}
	tests := []struct {
		name     string
		gpus     []mpsGPU
		cfg      ReliefConfig
		move, to string // "" for no plan
	}{
		{"the busiest movable client to the idlest GPU", []mpsGPU{busy(client("a", 2, 30, true), client("b", 2, 50, true)), idle("GPU-x", 30, 8), idle("GPU-y", 10, 8)},
			reliefCfg, "b", "GPU-y"},
		{"not above High for Window yet", []mpsGPU{func() mpsGPU { g := busy(client("a", 2, 50, true)); g.OverSince = now.Add(-30 * time.Second); return g }(), idle("GPU-y", 10, 8)},
			reliefCfg, "", ""},
		{"at High is not above it", []mpsGPU{func() mpsGPU { g := busy(client("a", 2, 50, true)); g.Util = 80; return g }(), idle("GPU-y", 10, 8)},
			reliefCfg, "", ""},
		{"no GPU below Low", []mpsGPU{busy(client("a", 2, 50, true)), idle("GPU-x", 40, 8)}, reliefCfg, "", ""},
		{"a client that does not fit gives way to one that does", []mpsGPU{busy(client("a", 1, 30, true), client("b", 4, 50, true)), idle("GPU-y", 10, 2)},
			reliefCfg, "a", "GPU-y"},
		{"nothing fits", []mpsGPU{busy(client("b", 4, 50, true)), idle("GPU-y", 10, 2)}, reliefCfg, "", ""},
		{"not movable", []mpsGPU{busy(client("a", 2, 50, false)), idle("GPU-y", 10, 8)}, reliefCfg, "", ""},
		{"another pool", []mpsGPU{busy(client("a", 2, 50, true)), func() mpsGPU { g := idle("GPU-y", 10, 8); g.Pool = "batch"; return g }()},
			reliefCfg, "", ""},
		{"a held or draining GPU takes nothing", []mpsGPU{busy(client("a", 2, 50, true)), func() mpsGPU { g := idle("GPU-y", 10, 8); g.Unplaceable = true; return g }()},
			reliefCfg, "", ""},
		{"the busier of two overloaded GPUs first", []mpsGPU{busy(client("a", 2, 50, true)),
			{UUID: "GPU-busier", NodeName: "n3", Pool: "default", Util: 99, OverSince: long, Free: 0, Clients: []mpsClient{client("c", 1, 20, true)}},
			idle("GPU-y", 10, 8)}, reliefCfg, "c", "GPU-y"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, ok := planRelief(tt.gpus, tt.cfg, now)
			if tt.move == "" {
				if ok {
					t.Fatalf("planned %s, want none", p)
				}
				return
			}
			if !ok || p.Client.Alloc.ID != tt.move || p.To.UUID != tt.to {
				t.Fatalf("plan %v (%v), want alloc %s shown room on %s", p, ok, tt.move, tt.to)
			}
		})
	}
}

// The node's stats as the device plugin reports them: every share
// carries its GPU's utilisation, and its own task's of the share.
func TestReadMPSStats(t *testing.T) {
	share := func(phys, own float64, threads int64) *api.DeviceStats {
		return &api.DeviceStats{Stats: &api.StatObject{Attributes: map[string]*api.StatValue{
			contract.StatPhysGPUUtil:  {FloatNumeratorVal: &phys, Unit: "%"},
			contract.StatShareUtil:    {FloatNumeratorVal: &own, Unit: "%"},
			contract.StatShareThreads: {IntNumeratorVal: &threads, Unit: "%"},
		}}}
	}
	hs := &api.HostStats{DeviceStats: []*api.DeviceGroupStats{
		{Vendor: contract.Vendor, Type: contract.SliceMPS, Name: "GPU-a", InstanceStats: map[string]*api.DeviceStats{
			contract.ShareID("GPU-a", 0): share(75, 100, 25), contract.ShareID("GPU-a", 1): share(75, 100, 50), contract.ShareID("GPU-a", 2): share(75, 0, 25),
		}},
		{Vendor: contract.Vendor, Type: contract.SliceGPU, Name: "H100", InstanceStats: map[string]*api.DeviceStats{"GPU-w": share(99, 99, 100)}},
	}}
	util, load := map[string]float64{}, map[string]float64{}
	readMPSStats(hs, util, load)
	if len(util) != 1 || util["GPU-a"] != 75 {
		t.Errorf("utilisations %v, want GPU-a 75 alone", util)
	}
	want := map[string]float64{contract.ShareID("GPU-a", 0): 25, contract.ShareID("GPU-a", 1): 50, contract.ShareID("GPU-a", 2): 0}
	if fmt.Sprint(load) != fmt.Sprint(want) {
		t.Errorf("share loads %v, want %v", load, want)
	}
}

// mpsCluster is node n1 with two GPUs of 4 MPS shares, GPU-n1-0 holding
// three 1-share clients relief-0…2 (batch, checkpointing, movable) and
// GPU-n1-1 none.
func mpsCluster() (*nomadview.Snapshot, map[JobKey]*api.Job) {
	s := emptySnapshot(layoutNode("n1", "mps:4", "mps:4"))
	specs := map[JobKey]*api.Job{}
	for i := range 3 {
		id := fmt.Sprintf("relief-%d", i)
		k := JobKey{Namespace: "default", ID: id}
		s.Jobs[k] = &api.JobListStub{ID: id, Namespace: "default", Type: api.JobTypeBatch, Priority: 50, Meta: map[string]string{MetaMovable: "true"}, JobModifyIndex: 7}
		specs[k] = &api.Job{ID: &id, JobModifyIndex: ptrTo(uint64(7)), TaskGroups: []*api.TaskGroup{{Name: ptrTo("g"), Tasks: []*api.Task{{
			Name: "t", Driver: contract.DriverName, Config: map[string]any{contract.DriverCheckpointBlock: []map[string]any{{}}},
			Resources: &api.Resources{Devices: []*api.RequestedDevice{{Name: "nvidia/mps", Count: ptrTo(uint64(1))}}},
		}}}}}
		s.Allocs = append(s.Allocs, &api.AllocationListStub{ID: "alloc-" + id, Namespace: "default", JobID: id, TaskGroup: "g", NodeID: "n1",
			ClientStatus: api.AllocClientStatusRunning, DesiredStatus: api.AllocDesiredStatusRun, CreateTime: time.Unix(50, 0).UnixNano(),
			AllocatedResources: &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{"t": {Devices: []*api.AllocatedDeviceResource{
				{Vendor: contract.Vendor, Type: contract.SliceMPS, Name: "GPU-n1-0", DeviceIDs: []string{contract.ShareID("GPU-n1-0", i)}}}}}}})
	}
	return s, specs
}

// The mover reads the GPUs' loads, plans once the busy GPU has been over
// High for Window, holds the GPU and plans nothing more while it is held;
// the hold ends once the moved job is placed again, anywhere.
func TestMoverRelieve(t *testing.T) {
	now := time.Unix(10_000, 0)
	s, specs := mpsCluster()
	cfg := moveBudget
	cfg.Relief = reliefCfg
	m := NewMover(cfg, nil, hclog.NewNullLogger())
	ctx, l := context.Background(), NewLedger(nil)
	if _, ok := m.Relieve(ctx, now, ViewOf(s), l, specsOf(specs)); ok {
		t.Fatal("a plan before any reading")
	}
	loads := map[string]float64{contract.ShareID("GPU-n1-0", 0): 25, contract.ShareID("GPU-n1-0", 1): 40, contract.ShareID("GPU-n1-0", 2): 25}
	m.observe(now, map[string]float64{"GPU-n1-0": 90, "GPU-n1-1": 0}, loads)
	if _, ok := m.Relieve(ctx, now.Add(30*time.Second), ViewOf(s), l, specsOf(specs)); ok {
		t.Fatal("a plan before the GPU was over High for Window")
	}
	later := now.Add(time.Minute)
	m.observe(later, map[string]float64{"GPU-n1-0": 90, "GPU-n1-1": 0}, loads)
	p, ok := m.Relieve(ctx, later, ViewOf(s), l, specsOf(specs))
	if !ok || p.Client.Alloc.ID != "alloc-relief-1" || p.To.UUID != "GPU-n1-1" || p.From.Shares != 4 || p.From.Free != 1 || p.To.Free != 4 {
		t.Fatalf("plan %v (%v), want alloc-relief-1 (the busiest) off GPU-n1-0 (1 share free of 4), room on GPU-n1-1 (4 free)", p, ok)
	}
	if r := reliefReason(p, cfg.Relief); !strings.Contains(r, "moved alloc alloc-re") || !strings.Contains(r, "at 90% (above 80% for 1m0s)") {
		t.Errorf("reason %q", r)
	}
	rec := MoveRecord{Namespace: "default", Job: "relief-1", Alloc: p.Client.Alloc.ID, Shares: 1, SharesPerGPU: 4}
	h := m.holdingGPU(later, p, rec)
	if h.GPU != "GPU-n1-0" || h.Stop == nil || len(h.Moved) != 1 {
		t.Fatalf("hold %+v", h)
	}
	if _, ok := m.Relieve(ctx, later, ViewOf(s), l, specsOf(specs)); ok {
		t.Error("a plan while a GPU is held")
	}
	if m.Release(later.Add(time.Second), s) {
		t.Error("released before the client was stopped")
	}
	if gpuHeldSeen(s, h) {
		t.Error("the servers show the GPU held before its shares are unhealthy")
	}
	for _, d := range s.Nodes[0].NodeResources.Devices {
		if d.Type == contract.SliceMPS && d.Name == "GPU-n1-0" {
			for _, in := range d.Instances {
				in.Healthy = false
			}
		}
	}
	if !gpuHeldSeen(s, h) {
		t.Fatal("the GPU's shares are all unhealthy, but not seen held")
	}
	m.Held().Stop, m.Held().Since, m.Held().Stopped = nil, later.Add(2*time.Second), "alloc-relief-1" // as stopHeld does
	m.observe(later.Add(2*time.Second), map[string]float64{"GPU-n1-0": 90, "GPU-n1-1": 0}, loads)
	if m.loads["GPU-n1-0"] != nil {
		t.Error("a held GPU read: its window would run on during the move")
	}
	s.Allocs = append(s.Allocs, &api.AllocationListStub{ID: "new", Namespace: "default", JobID: "relief-1", NodeID: "n1",
		ClientStatus: api.AllocClientStatusPending, CreateTime: later.Add(3 * time.Second).UnixNano()})
	if m.Release(later.Add(4*time.Second), s) {
		t.Error("released while the stopped client still runs")
	}
	s.Allocs = slices.DeleteFunc(s.Allocs, func(a *api.AllocationListStub) bool { return a.ID == "alloc-relief-1" })
	if !m.Release(later.Add(4*time.Second), s) {
		t.Error("not released once the client stopped and its job was placed again on the node (another GPU)")
	}
	m.Released()
	if m.Held() != nil || m.loads["GPU-n1-0"] != nil {
		t.Error("after the hold: still held, or the GPU's old window kept")
	}
	if got := (MoveRecord{Shares: 1, SharesPerGPU: 4}).gpuEquivalents(); got != 0.25 {
		t.Errorf("a share of 4 is %v GPU-equivalents, want 0.25", got)
	}
}

// Free shares on a node that takes no new work are no room: Nomad would
// not place the moved client there, so relief would stop it for nothing
// (or put it straight back on the busy GPU).
func TestReliefNeverCountsUnschedulableNodesAsRoom(t *testing.T) {
	tests := []struct {
		name string
		node func(n *api.NodeListStub)
		to   string // "" for no plan
	}{
		{"ready and eligible: room", func(*api.NodeListStub) {}, "GPU-n2-0"},
		{"draining", func(n *api.NodeListStub) { n.Drain = true }, ""},
		{"ineligible", func(n *api.NodeListStub) { n.SchedulingEligibility = api.NodeSchedulingIneligible }, ""},
		{"down", func(n *api.NodeListStub) { n.Status = api.NodeStatusDown }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := time.Unix(10_000, 0)
			s, specs := mpsCluster()
			// n1's busy GPU alone; the only idle MPS GPU is n2's.
			s.Nodes[0] = layoutNode("n1", "mps:4")
			n2 := layoutNode("n2", "mps:4")
			tt.node(n2)
			s.Nodes = append(s.Nodes, n2)
			cfg := moveBudget
			cfg.Relief = reliefCfg
			m := NewMover(cfg, nil, hclog.NewNullLogger())
			loads := map[string]float64{contract.ShareID("GPU-n1-0", 0): 25, contract.ShareID("GPU-n1-0", 1): 40, contract.ShareID("GPU-n1-0", 2): 25}
			util := map[string]float64{"GPU-n1-0": 90, "GPU-n2-0": 0}
			m.observe(now, util, loads)
			later := now.Add(reliefCfg.Window)
			m.observe(later, util, loads)
			p, ok := m.Relieve(context.Background(), later, ViewOf(s), NewLedger(nil), specsOf(specs))
			switch {
			case tt.to == "" && ok:
				t.Fatalf("planned %s: room on a node that takes no work", p)
			case tt.to != "" && (!ok || p.To.UUID != tt.to):
				t.Fatalf("plan %v (%v), want room shown on %s", p, ok, tt.to)
			}
		})
	}
}
