package contract

import (
	"fmt"
	"strconv"
	"strings"
)

// GPU layouts (docs/design/gpu-layouts.md): the controller publishes the
// layout it wants for each GPU in the node's dynamic metadata; the device
// plugin applies it once no allocation holds the GPU and reports each
// GPU's state in a device group of its own. Layouts are written as
// gpulayout.Layout.String writes them: "whole", "mps:8",
// "mig:3g.40gb,2g.20gb" or "mig:" (MIG mode, no instances).
const (
	// MetaLayoutPrefix + <GPU-UUID> is the node metadata key of the
	// layout the controller wants for that GPU; only the controller
	// writes it.
	MetaLayoutPrefix = "nomad_gpu.layout."
	// MetaPinPrefix + <GPU-UUID> is an operator's layout for that GPU
	// (`nomad node meta apply nomad_gpu.pin.GPU-…=mps:4`); it wins over
	// the controller's, which then leaves the GPU alone. Only people
	// write it.
	MetaPinPrefix = "nomad_gpu.pin."
	// MetaHoldPrefix + <GPU-UUID> holds that GPU until the time it holds,
	// RFC 3339 ("2026-12-05T10:00:00Z"): the device plugin offers none of
	// its instances meanwhile (unhealthy, "held … until …"), so that an
	// allocation the controller moves off it is placed on another GPU.
	// Allocations running on it are not touched. The controller writes
	// and removes it (relief of an overloaded MPS GPU); a plugin follows
	// it with layout.enabled.
	MetaHoldPrefix = "nomad_gpu.hold."
	// DrainMetaScaleIn is the drain meta key (`nomad node drain -meta`,
	// kept in the node's last drain) by which the controller marks a node
	// it emptied for removal (scale-in by consolidation): the node is
	// ineligible and runs nothing, and the APM counts it in
	// nodes_removable until the autoscaler removes it or the controller
	// makes it eligible again. Its value says why.
	DrainMetaScaleIn = "nomad_gpu_scale_in"
	// DrainMetaReclaim is the drain meta key by which `nomad-gpu
	// reclaim-watch` says its spot node is drained for its cloud's reclaim
	// notice; its value is the notice.
	DrainMetaReclaim = "nomad_gpu_reclaim"
)

// SliceLayout is the type of the device group, one per GPU and named by
// its GPU- UUID, that the device plugin publishes with no devices in it:
// the GPU's layout and its state, read by the controller from the node
// list it already watches and by people in `nomad node status -verbose`.
// Nothing can be placed on it: a group with no instances is never
// feasible.
const SliceLayout = "layout"

// Attributes of a layout group. None has a unit; every one always has a
// value (an attribute with none makes Nomad drop all of the plugin's
// devices).
const (
	AttrLayoutIndex       = "index"        // int: the GPU's NVML index
	AttrLayoutPCIBusID    = "pci_bus_id"   // string
	AttrLayoutProduct     = "product"      // string
	AttrLayoutMIGMode     = "mig_mode"     // bool: never changed by nomad-gpu
	AttrLayoutMIGProfiles = "mig_profiles" // string: FormatMIGProfiles; "none" when not in MIG mode
	AttrLayoutCurrent     = "layout"       // string: the layout offered now
	AttrLayoutDesired     = "desired"      // string: the layout to apply; LayoutNone when none is asked
	AttrLayoutPinned      = "pinned"       // bool: desired is an operator's pin (MetaPinPrefix)
	AttrLayoutState       = "state"        // one of the LayoutState values
	AttrLayoutError       = "error"        // string: why state is error; LayoutNone otherwise
	// AttrLayoutFault says why the GPU itself has failed (an XID the
	// plugin's health policy counts, or NVML unable to read it);
	// LayoutNone while it is healthy. A failed GPU is no capacity: the
	// controller never relays it nor counts it free, and its plugin
	// keeps its layout until it recovers. A relayout's drain or the
	// controller's hold also make a GPU's instances unhealthy, but are
	// no fault.
	AttrLayoutFault = "fault"
	// AttrLayoutStrayPins says which of the node's pins (MetaPinPrefix)
	// name no GPU the plugin manages, and which GPUs it does ("; "
	// between pins); LayoutNone when none. It is the node's, the same on
	// every layout group of it: a pin for a GPU the node lacks has no
	// group of its own to say it.
	AttrLayoutStrayPins = "stray_pins"
)

// LayoutNone is the value of a layout group's string attribute that has
// nothing to say (an attribute must have a value).
const LayoutNone = "none"

// LayoutState is where a GPU is in applying its desired layout.
type LayoutState string

const (
	// LayoutReady: the GPU offers its desired layout (or has none asked).
	LayoutReady LayoutState = "ready"
	// LayoutHeld: another layout is asked, but allocations hold the GPU;
	// the plugin waits for them to end and stops nothing.
	LayoutHeld LayoutState = "held"
	// LayoutDraining: no allocation holds the GPU; its instances are
	// unhealthy and refused to Reserve until the plugin has confirmed no
	// placement raced in, then it switches.
	LayoutDraining LayoutState = "draining"
	// LayoutError: the asked layout cannot be made on this GPU; the
	// error attribute says why. The GPU keeps its layout.
	LayoutError LayoutState = "error"
)

// ParseLayoutState is LayoutState's inverse; ok is false for other text.
func ParseLayoutState(s string) (LayoutState, bool) {
	switch st := LayoutState(s); st {
	case LayoutReady, LayoutHeld, LayoutDraining, LayoutError:
		return st, true
	}
	return "", false
}

// What the device plugin's Reserve errors say when a placement lands on
// an instance a relayout took away: the GPU is draining for a relayout
// (the servers placed on it before they saw it unhealthy), or the
// instance is gone since. Nomad fails the allocation with the error in
// its task events; the controller reads them there and places the
// allocation again (docs/controller.md, GPU layouts that follow the queue).
const (
	ReserveRefusedRelayout = "is being relaid out"
	ReserveRefusedGone     = "no longer exists on this node"
)

// AttrSharesInUse is the attribute of an MPS group (one GPU's shares)
// counting the shares that allocations hold: a jobspec's device affinity
// on it fills one GPU's shares before opening the next. Its "unique."
// prefix keeps it out of Nomad's computed node class, so a change does not
// wake every blocked evaluation.
const AttrSharesInUse = "unique.shares_in_use"

// MIGProfileSpec is a MIG profile a GPU in MIG mode can make, as a layout
// group's mig_profiles attribute lists it.
type MIGProfileSpec struct {
	Name   string
	Slices int // compute slices, of 7
	Max    int // the most instances of it the GPU holds
}

// FormatMIGProfiles writes profiles as "<name>:<slices>x<max>",
// comma-separated, in the order given: "1g.10gb:1x7,3g.40gb:3x2". None is
// LayoutNone.
func FormatMIGProfiles(ps []MIGProfileSpec) string {
	if len(ps) == 0 {
		return LayoutNone
	}
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.Name + ":" + strconv.Itoa(p.Slices) + "x" + strconv.Itoa(p.Max)
	}
	return strings.Join(out, ",")
}

// ParseMIGProfiles is FormatMIGProfiles' inverse.
func ParseMIGProfiles(s string) ([]MIGProfileSpec, error) {
	if s == LayoutNone || s == "" {
		return nil, nil
	}
	var out []MIGProfileSpec
	for _, item := range strings.Split(s, ",") {
		name, counts, ok := strings.Cut(item, ":")
		sl, most, ok2 := strings.Cut(counts, "x")
		ns, err1 := strconv.Atoi(sl)
		nm, err2 := strconv.Atoi(most)
		if !ok || !ok2 || name == "" || err1 != nil || err2 != nil || ns < 1 || ns > 7 || nm < 1 {
			return nil, fmt.Errorf("mig_profiles: %q is not <profile>:<slices>x<max> such as 3g.40gb:3x2", item)
		}
		out = append(out, MIGProfileSpec{Name: name, Slices: ns, Max: nm})
	}
	return out, nil
}
