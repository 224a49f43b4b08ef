package nomadview

import (
	"strings"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/contract"
)

// PhysicalGPU is the GPU a device instance is, or is a slice of: the one
// rule every projection of the read model uses to group instances by GPU.
// The device plugin names a whole GPU by its UUID and an MPS share by an
// ID that carries its GPU's (contract.ParseShareID); MIG instances have
// UUIDs of their own, so they, like shares, carry their GPU's PCI bus ID
// as their locality.
type PhysicalGPU struct {
	UUID     string // "" for a MIG instance
	PCIBusID string // as the plugin gave it; "" when it gave none
}

// PhysicalGPUOf is the GPU that in, an instance of a device group of
// deviceType, is or is part of.
func PhysicalGPUOf(deviceType string, in *api.NodeDevice) PhysicalGPU {
	var p PhysicalGPU
	if in == nil {
		return p
	}
	if in.Locality != nil {
		p.PCIBusID = in.Locality.PciBusID
	}
	switch deviceType {
	case contract.SliceGPU:
		p.UUID = in.ID
	case contract.SliceMPS:
		p.UUID, _, _ = contract.ParseShareID(in.ID)
	}
	return p
}

// Key names the GPU within its node: its PCI bus ID (lower-case, as NVML
// and the kernel spell it differently), else its UUID; "" when neither is
// known.
func (p PhysicalGPU) Key() string {
	if p.PCIBusID != "" {
		return "pci:" + strings.ToLower(p.PCIBusID)
	}
	if p.UUID != "" {
		return "uuid:" + p.UUID
	}
	return ""
}

// ShareGPU is the UUID of the GPU the MPS share of this ID is part of, ""
// when the ID names none: PhysicalGPUOf for a share known by its ID alone
// (an allocation's device IDs, a stats key).
func ShareGPU(id string) string {
	return PhysicalGPUOf(contract.SliceMPS, &api.NodeDevice{ID: id}).UUID
}
