package nomadview

import (
	"testing"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/contract"
)

func TestPhysicalGPUOf(t *testing.T) {
	at := func(bus string) *api.NodeDeviceLocality { return &api.NodeDeviceLocality{PciBusID: bus} }
	for _, c := range []struct {
		name    string
		typ     string
		in      *api.NodeDevice
		want    PhysicalGPU
		wantKey string
	}{
		{"a whole GPU is its UUID", contract.SliceGPU, &api.NodeDevice{ID: "GPU-a", Locality: at("0000:1B:00.0")}, PhysicalGPU{"GPU-a", "0000:1B:00.0"}, "pci:0000:1b:00.0"},
		{"a whole GPU with no locality", contract.SliceGPU, &api.NodeDevice{ID: "GPU-a"}, PhysicalGPU{UUID: "GPU-a"}, "uuid:GPU-a"},
		{"a share names its GPU", contract.SliceMPS, &api.NodeDevice{ID: "GPU-a-mps-3", Locality: at("0000:1b:00.0")}, PhysicalGPU{"GPU-a", "0000:1b:00.0"}, "pci:0000:1b:00.0"},
		{"a share's ID that names no GPU", contract.SliceMPS, &api.NodeDevice{ID: "share"}, PhysicalGPU{}, ""},
		{"a MIG instance is at its GPU's bus", contract.SliceMIG, &api.NodeDevice{ID: "MIG-1", Locality: at("0000:01:00.0")}, PhysicalGPU{PCIBusID: "0000:01:00.0"}, "pci:0000:01:00.0"},
		{"a MIG instance with no locality", contract.SliceMIG, &api.NodeDevice{ID: "MIG-1", Locality: &api.NodeDeviceLocality{}}, PhysicalGPU{}, ""},
		{"no instance", contract.SliceGPU, nil, PhysicalGPU{}, ""},
	} {
		got := PhysicalGPUOf(c.typ, c.in)
		if got != c.want || got.Key() != c.wantKey {
			t.Errorf("%s: %+v key %q, want %+v key %q", c.name, got, got.Key(), c.want, c.wantKey)
		}
	}
	if got := ShareGPU("GPU-b-mps-0"); got != "GPU-b" {
		t.Errorf("ShareGPU: %q, want GPU-b", got)
	}
}
