package nomadview

import (
	"reflect"
	"testing"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/contract"
)

func layoutGroup(uuid string, index int64, bus, current string, mig bool) *api.NodeDeviceResource {
	s := func(v string) *api.Attribute { return &api.Attribute{StringVal: &v} }
	profiles := "none"
	if mig {
		profiles = "1g.10gb:1x7,3g.40gb:3x2"
	}
	return &api.NodeDeviceResource{Vendor: contract.Vendor, Type: contract.SliceLayout, Name: uuid, Attributes: map[string]*api.Attribute{
		contract.AttrLayoutIndex: {IntVal: &index}, contract.AttrLayoutPCIBusID: s(bus), contract.AttrLayoutMIGMode: {BoolVal: &mig},
		contract.AttrLayoutMIGProfiles: s(profiles), contract.AttrLayoutCurrent: s(current), contract.AttrLayoutDesired: s("none"),
		contract.AttrLayoutState: s("ready"), contract.AttrLayoutError: s("none"),
	}}
}

// Every held instance is counted on the GPU it is part of: a whole GPU by
// its UUID, a share by the GPU it names, a MIG instance by its PCI bus ID;
// so is every unhealthy one no allocation holds. A GPU's fault is read
// from its layout group.
func TestGPULayouts(t *testing.T) {
	dev := func(id, bus string) *api.NodeDevice {
		return &api.NodeDevice{ID: id, Healthy: true, Locality: &api.NodeDeviceLocality{PciBusID: bus}}
	}
	sick := func(d *api.NodeDevice) *api.NodeDevice { d.Healthy = false; return d }
	failed := layoutGroup("GPU-a", 0, "0000:01:00.0", "whole", false)
	xid := "XID 79 (GPU has fallen off the bus)"
	failed.Attributes[contract.AttrLayoutFault] = &api.Attribute{StringVal: &xid}
	node := &api.NodeListStub{ID: "n1", Name: "gpu-1", NodeResources: &api.NodeResources{Devices: []*api.NodeDeviceResource{
		layoutGroup("GPU-b", 1, "0000:02:00.0", "mps:4", false),
		failed,
		layoutGroup("GPU-c", 2, "0000:03:00.0", "mig:3g.40gb,3g.40gb", true),
		{Vendor: contract.Vendor, Type: contract.SliceLayout, Name: "GPU-bad", Attributes: map[string]*api.Attribute{}},
		{Vendor: contract.Vendor, Type: contract.SliceGPU, Name: "H100", Instances: []*api.NodeDevice{sick(dev("GPU-a", "0000:01:00.0"))}},
		{Vendor: contract.Vendor, Type: contract.SliceMPS, Name: "GPU-b", Instances: []*api.NodeDevice{dev("GPU-b-mps-0", "0000:02:00.0"), dev("GPU-b-mps-1", "0000:02:00.0"),
			sick(dev("GPU-b-mps-2", "0000:02:00.0")), sick(dev("GPU-b-mps-3", "0000:02:00.0"))}},
		{Vendor: contract.Vendor, Type: contract.SliceMIG, Name: "3g.40gb", Instances: []*api.NodeDevice{sick(dev("MIG-x", "0000:03:00.0")), sick(dev("MIG-y", "0000:03:00.0"))}},
	}}}
	holding := func(typ, name string, ids ...string) *api.AllocationListStub {
		return &api.AllocationListStub{NodeID: "n1", ClientStatus: api.AllocClientStatusRunning, AllocatedResources: &api.AllocatedResources{
			Tasks: map[string]*api.AllocatedTaskResources{"t": {Devices: []*api.AllocatedDeviceResource{{Vendor: contract.Vendor, Type: typ, Name: name, DeviceIDs: ids}}}}}}
	}
	s := &Snapshot{Nodes: []*api.NodeListStub{node}, Allocs: []*api.AllocationListStub{
		holding(contract.SliceMPS, "GPU-b", "GPU-b-mps-0", "GPU-b-mps-1"), holding(contract.SliceMIG, "3g.40gb", "MIG-y"),
	}}
	got := s.GPULayouts()
	type brief struct {
		UUID, Current string
		Index         int
		MIG           bool
		Profiles      int
		Held          []string
		Unhealthy     []string
		Fault         string
	}
	var briefs []brief
	for _, g := range got {
		briefs = append(briefs, brief{g.UUID, g.Current, g.Index, g.MIGMode, len(g.Profiles), g.Held, g.Unhealthy, g.Fault})
	}
	want := []brief{
		{"GPU-a", "whole", 0, false, 0, nil, []string{"gpu"}, xid},
		{"GPU-b", "mps:4", 1, false, 0, []string{"mps", "mps"}, []string{"mps", "mps"}, ""},
		{"GPU-c", "mig:3g.40gb,3g.40gb", 2, true, 2, []string{"mig/3g.40gb"}, []string{"mig/3g.40gb"}, ""},
	}
	if !reflect.DeepEqual(briefs, want) {
		t.Errorf("GPULayouts:\n got %+v\nwant %+v", briefs, want)
	}
	if got[0].State != contract.LayoutReady || got[0].Desired != "" || got[0].Error != "" {
		t.Errorf("GPU-a: state %q desired %q error %q", got[0].State, got[0].Desired, got[0].Error)
	}
}
