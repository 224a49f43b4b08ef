package devicefp

import (
	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/contract/gpulayout"
	"github.com/nomad-gpu/nomad-gpu/gpu"
	"github.com/nomad-gpu/nomad-gpu/wire/device"
	"github.com/nomad-gpu/nomad-gpu/wire/structs"
)

// What a fingerprint says of each GPU's layout: a device group of type
// contract.SliceLayout named by the GPU's UUID, with no devices (nothing
// can be placed on it), whose attributes are the GPU's layout, the one
// asked for and where the plugin is in applying it. The controller reads
// them from the node list it already watches; people from `nomad node
// status -verbose`.

// layoutInputs is what a model takes from the layout manager.
type layoutInputs struct {
	// applied are the whole and MPS layouts the plugin applied that differ
	// from its mps blocks, by GPU UUID.
	applied map[string]gpulayout.Layout
	// status is each GPU's place in applying its desired layout, by UUID;
	// a GPU not in it is ready with nothing asked.
	status map[string]gpuStatus
	// sharesInUse counts, by GPU UUID, the MPS shares allocations hold.
	sharesInUse map[string]int
	// holds are the GPUs the controller holds, by UUID: their instances'
	// health description.
	holds map[string]string
	// strayPins are the node's pins that name no GPU of it ("" when
	// none), published on every layout group.
	strayPins string
	// publish: the plugin follows layouts (layout.enabled), so it
	// publishes each GPU's layout group. A plugin that does not takes no
	// part in the protocol, and the controller leaves its GPUs alone.
	publish bool
}

// gpuStatus is one GPU's layout group attributes that the manager sets.
type gpuStatus struct {
	state   contract.LayoutState
	desired string // the effective desired layout as read, "" for none
	pinned  bool   // desired is an operator's pin (contract.MetaPinPrefix)
	err     string // why state is error
	// drain is the health description of the GPU's instances while it
	// drains ("relayout mps:8 → whole pending"), "" otherwise.
	drain string
}

// offeredLayout is the layout a GPU is offered as now: its MIG geometry in
// MIG mode, else the layout the plugin applied, else its mps block's.
func offeredLayout(cfg *Config, g *gpu.GPU, applied map[string]gpulayout.Layout) gpulayout.Layout {
	if l, ok := applied[g.UUID]; ok && !g.MIGEnabled && l.Kind != gpulayout.MIG {
		return l
	}
	return staticLayout(cfg, g)
}

// staticLayout is the layout the config gives a GPU: its MIG geometry as
// enumerated (the sim's mig blocks, or what an operator made) in MIG mode,
// else its mps block's shares, else whole.
func staticLayout(cfg *Config, g *gpu.GPU) gpulayout.Layout {
	if g.MIGEnabled {
		return migGeometry(g)
	}
	if n := mpsShares(cfg, g); n > 0 {
		return gpulayout.Shared(n)
	}
	return gpulayout.WholeGPU
}

// migGeometry is the profiles of a MIG-mode GPU's instances, ignored ones
// included: the GPU's geometry, not what Nomad is offered of it.
func migGeometry(g *gpu.GPU) gpulayout.Layout {
	profiles := make([]string, 0, len(g.MIG))
	for _, mi := range g.MIG {
		if mi.UUID != "" {
			profiles = append(profiles, mi.Profile)
		}
	}
	return gpulayout.Geometry(profiles...)
}

// addLayoutGroup publishes g's layout group. Every attribute has a value
// and no unit: one invalid attribute makes Nomad drop all of the plugin's
// devices.
func (b *modelBuilder) addLayoutGroup(g *gpu.GPU, cur gpulayout.Layout) {
	st := b.lay.status[g.UUID]
	if st.state == "" {
		st.state = contract.LayoutReady
	}
	specs := make([]contract.MIGProfileSpec, len(g.MIGProfiles))
	for i, p := range g.MIGProfiles {
		specs[i] = contract.MIGProfileSpec{Name: p.Name, Slices: p.Slices, Max: p.Max}
	}
	b.groups[contract.SliceLayout+"/"+g.UUID] = &device.Group{
		Vendor: contract.Vendor, Type: contract.SliceLayout, Name: g.UUID,
		Attributes: map[string]structs.Attribute{
			contract.AttrLayoutIndex:       structs.NewInt(int64(g.Index), ""),
			contract.AttrLayoutPCIBusID:    structs.NewString(orNone(g.PCIBusID)),
			contract.AttrLayoutProduct:     structs.NewString(orNone(g.Name)),
			contract.AttrLayoutMIGMode:     structs.NewBool(g.MIGEnabled),
			contract.AttrLayoutMIGProfiles: structs.NewString(contract.FormatMIGProfiles(specs)),
			contract.AttrLayoutCurrent:     structs.NewString(cur.String()),
			contract.AttrLayoutDesired:     structs.NewString(orNone(st.desired)),
			contract.AttrLayoutPinned:      structs.NewBool(st.pinned),
			contract.AttrLayoutState:       structs.NewString(string(st.state)),
			contract.AttrLayoutError:       structs.NewString(orNone(st.err)),
			contract.AttrLayoutFault:       structs.NewString(orNone(gpuFault(b.unhealthy, g))),
			contract.AttrLayoutStrayPins:   structs.NewString(orNone(b.lay.strayPins)),
		},
	}
}

// orNone is s, or contract.LayoutNone when s is empty: an attribute must
// have a value.
func orNone(s string) string {
	if s == "" {
		return contract.LayoutNone
	}
	return s
}
