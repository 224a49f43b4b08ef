package controller

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/controller/layoutplan"
	"github.com/nomad-gpu/nomad-gpu/nomadview"
)

// layoutNode is a ready node whose plugin publishes n GPUs with layout
// groups, each with the given current layout, desired none, ready; the
// GPUs' instances follow their layouts.
func layoutNode(id string, layouts ...string) *api.NodeListStub {
	n := &api.NodeListStub{ID: id, Name: id, NodePool: "default", Status: api.NodeStatusReady,
		SchedulingEligibility: api.NodeSchedulingEligible, NodeResources: &api.NodeResources{}}
	whole := &api.NodeDeviceResource{Vendor: contract.Vendor, Type: contract.SliceGPU, Name: "H100"}
	for i, l := range layouts {
		uuid := fmt.Sprintf("GPU-%s-%d", id, i)
		str := func(s string) *api.Attribute { return &api.Attribute{StringVal: &s} }
		idx, f := int64(i), false
		n.NodeResources.Devices = append(n.NodeResources.Devices, &api.NodeDeviceResource{
			Vendor: contract.Vendor, Type: contract.SliceLayout, Name: uuid,
			Attributes: map[string]*api.Attribute{
				contract.AttrLayoutIndex: {IntVal: &idx}, contract.AttrLayoutMIGMode: {BoolVal: &f},
				contract.AttrLayoutMIGProfiles: str("none"), contract.AttrLayoutCurrent: str(l),
				contract.AttrLayoutDesired: str("none"), contract.AttrLayoutPinned: {BoolVal: &f},
				contract.AttrLayoutState: str("ready"), contract.AttrLayoutError: str("none"),
			}})
		if l == "whole" {
			whole.Instances = append(whole.Instances, &api.NodeDevice{ID: uuid, Healthy: true})
			continue
		}
		mps := &api.NodeDeviceResource{Vendor: contract.Vendor, Type: contract.SliceMPS, Name: uuid}
		shares := 0
		fmt.Sscanf(l, "mps:%d", &shares)
		for k := range shares {
			mps.Instances = append(mps.Instances, &api.NodeDevice{ID: contract.ShareID(uuid, k), Healthy: true})
		}
		n.NodeResources.Devices = append(n.NodeResources.Devices, mps)
	}
	n.NodeResources.Devices = append(n.NodeResources.Devices, whole)
	return n
}

// failedGPU marks a GPU of n failed, as its plugin and the servers show
// it after an XID: the layout group's fault, its instances unhealthy.
func failedGPU(n *api.NodeListStub, uuid string) *api.NodeListStub {
	xid := "XID 79 (GPU has fallen off the bus)"
	for _, d := range n.NodeResources.Devices {
		if d.Type == contract.SliceLayout && d.Name == uuid {
			d.Attributes[contract.AttrLayoutFault] = &api.Attribute{StringVal: &xid}
		}
		for _, in := range d.Instances {
			if in.ID == uuid || strings.HasPrefix(in.ID, uuid+"-") {
				in.Healthy = false
			}
		}
	}
	return n
}

// queuedJob is a blocked job of n allocations asking for one device each.
func queuedJob(s *nomadview.Snapshot, id, device string, n int) {
	one := uint64(1)
	task := &api.Task{Name: "t", Resources: &api.Resources{Devices: []*api.RequestedDevice{{Name: device, Count: &one}}}}
	job := &api.Job{ID: &id, TaskGroups: []*api.TaskGroup{{Name: ptrTo("g"), Tasks: []*api.Task{task}}}}
	s.Specs[JobKey{Namespace: "default", ID: id}] = job
	s.Jobs[JobKey{Namespace: "default", ID: id}] = &api.JobListStub{ID: id, Namespace: "default",
		JobSummary: &api.JobSummary{ModifyIndex: 10, Summary: map[string]api.TaskGroupSummary{"g": {Queued: n}}}}
	s.Blocked = append(s.Blocked, &api.Evaluation{ID: "eval-" + id, Namespace: "default", JobID: id, Status: api.EvalStatusBlocked,
		ModifyIndex: 10, CreateTime: time.Unix(100, 0).UnixNano(), Priority: 50,
		FailedTGAllocs: map[string]*api.AllocationMetric{"g": {}}})
}

func emptySnapshot(nodes ...*api.NodeListStub) *nomadview.Snapshot {
	return &nomadview.Snapshot{Nodes: nodes, Jobs: map[JobKey]*api.JobListStub{}, Specs: map[JobKey]*api.Job{}}
}

func TestLayoutsStep(t *testing.T) {
	wholes := []string{"whole", "whole", "whole", "whole"}
	tests := []struct {
		name  string
		snap  func() *nomadview.Snapshot
		want  []string // "GPU → layout"
		layer func(l *Layouts, now time.Time)
		// reserved is the node the move module freed (Mover.Reserved).
		reserved string
	}{
		{"MPS asks and no shared GPU: one GPU becomes shares", func() *nomadview.Snapshot {
			s := emptySnapshot(layoutNode("n1", wholes...))
			queuedJob(s, "infer", "nvidia/mps", 6)
			return s
		}, []string{"GPU-n1-0 → mps:8"}, nil, ""},
		{"whole asks while a shared GPU idles: it is whole again", func() *nomadview.Snapshot {
			s := emptySnapshot(layoutNode("n1", "mps:8", "whole", "whole", "whole"))
			queuedJob(s, "train", "nvidia/gpu", 4)
			return s
		}, []string{"GPU-n1-0 → whole"}, nil, ""},
		{"a failed GPU is never relaid: another becomes shares", func() *nomadview.Snapshot {
			s := emptySnapshot(failedGPU(layoutNode("n1", "whole", "whole"), "GPU-n1-0"))
			queuedJob(s, "infer", "nvidia/mps", 6)
			return s
		}, []string{"GPU-n1-1 → mps:8"}, nil, ""},
		{"a failed whole GPU is no room for a 2-GPU ask: an idle shared GPU is whole again", func() *nomadview.Snapshot {
			s := emptySnapshot(failedGPU(layoutNode("n1", "whole", "whole", "mps:8"), "GPU-n1-0"))
			queuedJob(s, "train", "nvidia/gpu", 1)
			s.Specs[JobKey{Namespace: "default", ID: "train"}].TaskGroups[0].Tasks[0].Resources.Devices[0].Count = ptrTo(uint64(2))
			return s
		}, []string{"GPU-n1-2 → whole"}, nil, ""},
		{"nothing queued: nothing changes", func() *nomadview.Snapshot {
			return emptySnapshot(layoutNode("n1", "mps:8", "whole"))
		}, nil, nil, ""},
		{"a node that takes no work is left alone", func() *nomadview.Snapshot {
			n := layoutNode("n1", wholes...)
			n.SchedulingEligibility = api.NodeSchedulingIneligible
			s := emptySnapshot(n)
			queuedJob(s, "infer", "nvidia/mps", 6)
			return s
		}, nil, nil, ""},
		{"a layout asked and not yet echoed counts as desired", func() *nomadview.Snapshot {
			s := emptySnapshot(layoutNode("n1", wholes...))
			queuedJob(s, "infer", "nvidia/mps", 6)
			return s
		}, nil, func(l *Layouts, now time.Time) {
			l.asked[LayoutKey("n1", "GPU-n1-1")] = asked{layout: "mps:8", at: now.Add(-10 * time.Second)}
		}, ""},
		{"a GPU taken before it was relaid is asked back, and another serves the queue", func() *nomadview.Snapshot {
			n := layoutNode("n1", wholes...)
			attrs := n.NodeResources.Devices[0].Attributes
			attrs[contract.AttrLayoutDesired].StringVal = ptrTo("mps:8")
			attrs[contract.AttrLayoutState].StringVal = ptrTo(string(contract.LayoutHeld))
			s := emptySnapshot(n)
			s.Allocs = []*api.AllocationListStub{{ID: "a1", NodeID: "n1", ClientStatus: api.AllocClientStatusRunning,
				AllocatedResources: &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{"t": {Devices: []*api.AllocatedDeviceResource{
					{Vendor: contract.Vendor, Type: contract.SliceGPU, Name: "H100", DeviceIDs: []string{"GPU-n1-0"}}}}}}}}
			queuedJob(s, "infer", "nvidia/mps", 6)
			return s
		}, []string{"GPU-n1-0 → whole", "GPU-n1-1 → mps:8"}, nil, ""},
		{"an ask not echoed after askTrust no longer counts", func() *nomadview.Snapshot {
			s := emptySnapshot(layoutNode("n1", wholes...))
			queuedJob(s, "infer", "nvidia/mps", 6)
			return s
		}, []string{"GPU-n1-0 → mps:8"}, func(l *Layouts, now time.Time) {
			l.asked[LayoutKey("n1", "GPU-n1-1")] = asked{layout: "mps:8", at: now.Add(-2 * askTrust)}
		}, ""},
		{"a node freed for a queued multi-GPU job is left alone", func() *nomadview.Snapshot {
			s := emptySnapshot(layoutNode("n1", wholes...), layoutNode("n2", wholes...))
			queuedJob(s, "infer", "nvidia/mps", 6)
			return s
		}, []string{"GPU-n2-0 → mps:8"}, nil, "n1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := time.Unix(1000, 0)
			l := NewLayouts(layoutplan.Bounds{MinInterval: time.Minute}, nil, hclog.NewNullLogger(), NewMetrics())
			if tt.layer != nil {
				tt.layer(l, now)
			}
			var got []string
			for _, d := range l.Step(now, tt.snap(), tt.reserved) {
				got = append(got, d.UUID+" → "+d.To.String())
			}
			if strings.Join(got, "; ") != strings.Join(tt.want, "; ") {
				t.Errorf("decisions %q, want %q", got, tt.want)
			}
		})
	}
}

// A recorded change keeps the GPU from flipping back within MinInterval
// while another GPU can serve the queue, and an applied ask is timed
// and forgotten.
func TestLayoutsRecord(t *testing.T) {
	now := time.Unix(1000, 0)
	l := NewLayouts(layoutplan.Bounds{MinInterval: time.Hour}, nil, hclog.NewNullLogger(), NewMetrics())
	s := emptySnapshot(layoutNode("n1", "whole", "whole"))
	queuedJob(s, "infer", "nvidia/mps", 2)
	ds := l.Step(now, s, "")
	if len(ds) != 1 {
		t.Fatalf("decisions %v", ds)
	}
	l.Record(now, ds[0])
	if c, ok := l.NodeHistory(ds[0].Node)[ds[0].UUID]; !ok || c.To != "mps:8" || !c.At.Equal(now) || c.Reason == "" {
		t.Errorf("change %+v", c)
	}
	applied := emptySnapshot(layoutNode("n1", "mps:8", "whole"))
	applied.Nodes[0].NodeResources.Devices[0].Attributes[contract.AttrLayoutDesired].StringVal = ptrTo("mps:8")
	if got := l.Step(now.Add(20*time.Second), applied, ""); len(got) != 0 {
		t.Errorf("decisions on an idle cluster: %v", got)
	}
	if _, still := l.asked[LayoutKey(ds[0].Node, ds[0].UUID)]; still {
		t.Error("the ask is still pending once applied")
	}
}

// Simulated nodes of one seed share GPU UUIDs: what the leader asked of
// one node's GPU says nothing of the other's. Here n1's GPU was just asked
// back to whole; n2's, of the same UUID, was taken by an allocation while
// asked for shares, and is asked back too.
func TestLayoutsKeyGPUsByNode(t *testing.T) {
	rename := func(n *api.NodeListStub) *api.NodeListStub {
		for _, d := range n.NodeResources.Devices {
			d.Name = strings.Replace(d.Name, "GPU-"+n.ID+"-", "GPU-same-", 1)
			for _, in := range d.Instances {
				in.ID = strings.Replace(in.ID, "GPU-"+n.ID+"-", "GPU-same-", 1)
			}
		}
		return n
	}
	now := time.Unix(1000, 0)
	l := NewLayouts(layoutplan.Bounds{}, nil, hclog.NewNullLogger(), NewMetrics())
	l.asked[LayoutKey("n1", "GPU-same-0")] = asked{layout: "whole", at: now}
	n2 := rename(layoutNode("n2", "whole"))
	attrs := n2.NodeResources.Devices[0].Attributes
	attrs[contract.AttrLayoutDesired].StringVal = ptrTo("mps:8")
	attrs[contract.AttrLayoutState].StringVal = ptrTo(string(contract.LayoutHeld))
	s := emptySnapshot(rename(layoutNode("n1", "whole")), n2)
	s.Allocs = []*api.AllocationListStub{{ID: "a1", NodeID: "n2", ClientStatus: api.AllocClientStatusRunning,
		AllocatedResources: &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{"t": {Devices: []*api.AllocatedDeviceResource{
			{Vendor: contract.Vendor, Type: contract.SliceGPU, Name: "H100", DeviceIDs: []string{"GPU-same-0"}}}}}}}}
	var got []string
	for _, d := range l.Step(now, s, "") {
		got = append(got, d.Node+" "+d.UUID+" → "+d.To.String())
	}
	if want := []string{"n2 GPU-same-0 → whole"}; strings.Join(got, "; ") != strings.Join(want, "; ") {
		t.Errorf("decisions %q, want %q", got, want)
	}
}
