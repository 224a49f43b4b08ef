package nomadview

import (
	"cmp"
	"slices"
	"strconv"
	"strings"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/contract"
)

// GPULayout is one GPU as its node's device plugin publishes it in its
// layout group (contract.SliceLayout): what it offers now, what it is
// asked to offer, and how far along that is. It comes from the node list
// the watch already reads, so a planning round costs no request.
type GPULayout struct {
	Node     *api.NodeListStub
	UUID     string
	Index    int
	PCIBusID string
	Product  string
	MIGMode  bool
	// Profiles are the MIG profiles the GPU can make (MIG mode only).
	Profiles []contract.MIGProfileSpec
	// Current and Desired are layouts as text (gpulayout.Parse reads
	// them); Desired is "" when none is asked.
	Current, Desired string
	// Pinned: Desired is an operator's pin.
	Pinned bool
	State  contract.LayoutState
	Error  string
	// Fault is why the GPU itself has failed (contract.AttrLayoutFault),
	// "" while it is healthy: a failed GPU is no capacity.
	Fault string
	// Held are the GPU's instances that pending or running allocations
	// hold, by kind: "gpu", "mps", "mig/<profile>".
	Held []string
	// Unhealthy are the GPU's instances no allocation holds that the
	// servers see unhealthy (a fault, a relayout's drain, the
	// controller's hold), by kind as Held: none can be placed on.
	Unhealthy []string
}

// GPULayouts lists every GPU of every node that publishes layout groups,
// by node name, node ID, then GPU index. A group whose attributes do not
// read (a plugin of another version) is left out.
func (s *Snapshot) GPULayouts() []GPULayout {
	held := s.HeldSlices()
	var out []GPULayout
	for _, n := range s.Nodes {
		if n == nil || n.NodeResources == nil {
			continue
		}
		gpus := NodeLayouts(n)
		if len(gpus) == 0 {
			continue
		}
		owner := instanceOwners(n, gpus)
		isHeld := map[string]bool{}
		for _, h := range held[n.ID] {
			for _, id := range h.IDs {
				isHeld[id] = true
				if i, ok := owner[id]; ok {
					gpus[i].Held = append(gpus[i].Held, SliceKind(h.Device))
				}
			}
		}
		for _, d := range n.NodeResources.Devices {
			if d == nil || d.Vendor != contract.Vendor {
				continue
			}
			for _, in := range d.Instances {
				if i, ok := owner[instanceID(in)]; ok && !in.Healthy && !isHeld[in.ID] {
					gpus[i].Unhealthy = append(gpus[i].Unhealthy, SliceKind(DeviceSpec{Vendor: d.Vendor, Type: d.Type, Name: d.Name}))
				}
			}
		}
		out = append(out, gpus...)
	}
	slices.SortFunc(out, func(a, b GPULayout) int {
		return cmp.Or(cmp.Compare(a.Node.Name, b.Node.Name), cmp.Compare(a.Node.ID, b.Node.ID), cmp.Compare(a.Index, b.Index))
	})
	return out
}

// NodeLayouts reads a node's layout groups, in the node's order, leaving
// out a group whose attributes do not read (a plugin of another version).
// It is the one reading of them: the APM projects its layouts from it.
func NodeLayouts(n *api.NodeListStub) []GPULayout {
	var out []GPULayout
	if n == nil || n.NodeResources == nil {
		return nil
	}
	for _, d := range n.NodeResources.Devices {
		if d == nil || d.Vendor != contract.Vendor || d.Type != contract.SliceLayout || !strings.HasPrefix(d.Name, "GPU-") {
			continue
		}
		g, ok := readLayout(n, d)
		if ok {
			out = append(out, g)
		}
	}
	return out
}

func readLayout(n *api.NodeListStub, d *api.NodeDeviceResource) (GPULayout, bool) {
	a := d.Attributes
	index, okIndex := AttrInt(a, contract.AttrLayoutIndex)
	state, okState := contract.ParseLayoutState(AttrString(a, contract.AttrLayoutState))
	profiles, err := contract.ParseMIGProfiles(AttrString(a, contract.AttrLayoutMIGProfiles))
	current := AttrString(a, contract.AttrLayoutCurrent)
	if !okIndex || !okState || err != nil || current == "" {
		return GPULayout{}, false
	}
	g := GPULayout{
		Node: n, UUID: d.Name, Index: index, PCIBusID: AttrString(a, contract.AttrLayoutPCIBusID),
		Product: AttrString(a, contract.AttrLayoutProduct), MIGMode: AttrBool(a, contract.AttrLayoutMIGMode),
		Profiles: profiles, Current: current, Desired: noneIsEmpty(AttrString(a, contract.AttrLayoutDesired)),
		Pinned: AttrBool(a, contract.AttrLayoutPinned), State: state,
		Error: noneIsEmpty(AttrString(a, contract.AttrLayoutError)),
		Fault: noneIsEmpty(AttrString(a, contract.AttrLayoutFault)),
	}
	return g, true
}

// SliceKind is a device request or group as the layout planner names
// kinds: "gpu", "mps", "mig/<profile>".
func SliceKind(d DeviceSpec) string {
	if d.Type == contract.SliceMIG {
		return d.Type + "/" + d.Name
	}
	return d.Type
}

// instanceID is in's ID, "" for none.
func instanceID(in *api.NodeDevice) string {
	if in == nil {
		return ""
	}
	return in.ID
}

func noneIsEmpty(s string) string {
	if s == contract.LayoutNone {
		return ""
	}
	return s
}

// instanceOwners maps each GPU instance ID of a node to the index in gpus
// of the GPU it is part of (PhysicalGPUOf): by UUID where the instance
// names its GPU's, else by PCI bus ID.
func instanceOwners(n *api.NodeListStub, gpus []GPULayout) map[string]int {
	byUUID, byBus := map[string]int{}, map[string]int{}
	for i, g := range gpus {
		byUUID[g.UUID] = i
		if g.PCIBusID != "" {
			byBus[strings.ToLower(g.PCIBusID)] = i
		}
	}
	out := map[string]int{}
	for _, d := range n.NodeResources.Devices {
		if d == nil || d.Vendor != contract.Vendor {
			continue
		}
		for _, in := range d.Instances {
			if in == nil {
				continue
			}
			p := PhysicalGPUOf(d.Type, in)
			if i, ok := byUUID[p.UUID]; ok && p.UUID != "" {
				out[in.ID] = i
			} else if i, ok := byBus[strings.ToLower(p.PCIBusID)]; ok && p.PCIBusID != "" {
				out[in.ID] = i
			}
		}
	}
	return out
}

// AttrString is a device attribute as text: a string as it is, another
// value as Nomad prints it; "" when absent.
func AttrString(a map[string]*api.Attribute, name string) string {
	v := a[name]
	if v == nil {
		return ""
	}
	if v.StringVal != nil {
		return *v.StringVal
	}
	return v.String()
}

// AttrInt is a device attribute as an int: an int value, or a string
// holding one; false when absent or neither.
func AttrInt(a map[string]*api.Attribute, name string) (int, bool) {
	v := a[name]
	switch {
	case v == nil:
		return 0, false
	case v.IntVal != nil:
		return int(*v.IntVal), true
	case v.StringVal != nil:
		n, err := strconv.Atoi(strings.TrimSpace(*v.StringVal))
		return n, err == nil
	}
	return 0, false
}

// AttrBool is a device attribute as a bool: a bool value, or a string
// "true"; false otherwise.
func AttrBool(a map[string]*api.Attribute, name string) bool {
	v := a[name]
	switch {
	case v == nil:
		return false
	case v.BoolVal != nil:
		return *v.BoolVal
	case v.StringVal != nil:
		b, _ := strconv.ParseBool(*v.StringVal)
		return b
	}
	return false
}
