package controller

import (
	"math"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/controller/queues"
)

// The queues' accounts on a hand-computed case: two nodes of 4 GPUs,
// queue a (namespace default) holding 3 GPUs and waiting for 2 more,
// queue b (namespace b) holding 1, both of nominal 2 in one cohort; an
// hour on, at a half-life of an hour, a's use is 3·(1/ln 2)·(1/2) GPU-
// hours and b's a third of it: a stands at 0.75/0.5 = 1.5, b at 0.5.
func TestQueueBook(t *testing.T) {
	snap, _ := gangBenchSnapshot(2, 4, 4, 1, 2, 0)
	snap.Allocs[3].Namespace = "b"
	cfg := queues.Config{HalfLife: time.Hour, Cohorts: []string{"lab"}, Queues: []queues.Queue{
		{Name: "a", Namespaces: []string{"default"}, Nominal: 2, BorrowingLimit: queues.Unlimited, LendingLimit: 2, Weight: 1, Cohort: "lab"},
		{Name: "b", Namespaces: []string{"b"}, Nominal: 2, BorrowingLimit: queues.Unlimited, LendingLimit: 2, Weight: 1, Cohort: "lab"},
		{Name: "idle", Namespaces: []string{"idle"}, Nominal: 1, Weight: 1},
	}}
	b := NewQueueBook(cfg, map[string]queues.Usage{"idle": {Hours: 4, At: snap.Taken.Add(-time.Hour)}, "gone": {Hours: 9}})
	b.Step(snap.Taken, snap)
	got := b.Step(snap.Taken.Add(time.Hour), snap)
	want := []QueueStatus{
		{Name: "a", Use: 3, Nominal: 2, Borrowed: 1, Lent: 0, UsageHours: 3 / (2 * math.Ln2), Standing: 1.5, Active: true, Waiting: 2},
		{Name: "b", Use: 1, Nominal: 2, Borrowed: 0, Lent: 1, UsageHours: 1 / (2 * math.Ln2), Standing: 0.5, Active: true},
		{Name: "idle", Use: 0, Nominal: 1, UsageHours: 1, Active: false},
	}
	if len(got) != len(want) {
		t.Fatalf("%d queues, want %d: %+v", len(got), len(want), got)
	}
	near := func(x, y float64) bool { return math.Abs(x-y) < 1e-9 }
	for i, w := range want {
		g := got[i]
		if g.Name != w.Name || !near(g.Use, w.Use) || g.Nominal != w.Nominal || !near(g.Borrowed, w.Borrowed) || !near(g.Lent, w.Lent) ||
			!near(g.UsageHours, w.UsageHours) || !near(g.Standing, w.Standing) || g.Active != w.Active || g.Waiting != w.Waiting {
			t.Errorf("queue %s: %+v\nwant %+v", w.Name, g, w)
		}
	}
	if _, kept := b.Usage()["gone"]; kept {
		t.Error("the use of a queue no longer in the file was kept")
	}
}

// MPS shares weigh 1 over their GPU's shares: two of a GPU laid out as 4
// shares are half a GPU; a whole GPU of the same node 1.
func TestQueueBookShares(t *testing.T) {
	snap := emptySnapshot(layoutNode("n1", "mps:4", "whole"))
	held := func(id, ns string, dev *api.AllocatedDeviceResource) *api.AllocationListStub {
		return &api.AllocationListStub{ID: id, Namespace: ns, JobID: id, NodeID: "n1", ClientStatus: api.AllocClientStatusRunning,
			DesiredStatus: api.AllocDesiredStatusRun, AllocatedResources: &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{
				"t": {Devices: []*api.AllocatedDeviceResource{dev}}}}}
	}
	snap.Allocs = []*api.AllocationListStub{
		held("infer", "b", &api.AllocatedDeviceResource{Vendor: contract.Vendor, Type: contract.SliceMPS, Name: "GPU-n1-0",
			DeviceIDs: []string{contract.ShareID("GPU-n1-0", 0), contract.ShareID("GPU-n1-0", 1)}}),
		held("train", "a", &api.AllocatedDeviceResource{Vendor: contract.Vendor, Type: contract.SliceGPU, Name: "H100", DeviceIDs: []string{"GPU-n1-1"}}),
	}
	snap.Taken = time.Unix(1_000_000, 0)
	cfg := queues.Config{HalfLife: time.Hour, Queues: []queues.Queue{
		{Name: "a", Namespaces: []string{"a"}, Nominal: 1, Weight: 1},
		{Name: "b", Namespaces: []string{"b"}, Nominal: 1, Weight: 1},
	}}
	got := NewQueueBook(cfg, nil).Step(snap.Taken, snap)
	if len(got) != 2 || got[0].Use != 1 || got[1].Use != 0.5 {
		t.Errorf("use %+v; want a 1 (a whole GPU), b 0.5 (2 of 4 shares)", got)
	}
}
