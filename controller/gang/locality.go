package gang

import (
	"cmp"
	"encoding/json"
	"maps"
	"slices"
	"strings"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/contract"
)

// DatacenterAttr is the node attribute a gang whose datacenters match
// more than one of its nodes' is pinned on: members in one datacenter.
const DatacenterAttr = "${node.datacenter}"

// Place is one node as locality sees it: its datacenter, its value of
// the gang's locality attribute (Known false when it has none) and its
// free whole GPUs.
type Place struct {
	ID         string
	Datacenter string
	Value      string
	Known      bool
	FreeGPUs   int
}

// Domain is one set of nodes a gang's members may share: the value of
// each pinned attribute (none when the gang needs no pin), their free
// whole GPUs and their IDs.
type Domain struct {
	Pins     map[string]string
	FreeGPUs int
	// Nodes are its places' IDs, in the order given (none for a domain
	// without pins: every place).
	Nodes []string
}

// Domains are the places a gang may be admitted in, in the order to plan
// them: those whose free GPUs cover need, fewest first (the gang takes
// the tightest, leaving the roomier for bigger ones), then the others,
// most first (a plan may still place the gang there by preemption).
// Members share one datacenter when places span several, and one value
// of locality when it is set; nodes without a value are no domain's. One
// domain without pins when neither applies (no places too); none when
// locality is set and no place has it.
func Domains(places []Place, locality string, need int) []Domain {
	dcs := map[string]bool{}
	for _, p := range places {
		dcs[p.Datacenter] = true
	}
	pinDC := len(dcs) > 1 && locality != DatacenterAttr
	if !pinDC && locality == "" {
		all := Domain{}
		for _, p := range places {
			all.FreeGPUs += p.FreeGPUs
		}
		return []Domain{all}
	}
	byKey := map[string]*Domain{}
	for _, p := range places {
		pins := map[string]string{}
		if pinDC {
			pins[DatacenterAttr] = p.Datacenter
		}
		if locality != "" {
			if !p.Known {
				continue
			}
			pins[locality] = p.Value
		}
		key, _ := json.Marshal(pins) // sorted keys
		d := byKey[string(key)]
		if d == nil {
			d = &Domain{Pins: pins}
			byKey[string(key)] = d
		}
		d.FreeGPUs += p.FreeGPUs
		d.Nodes = append(d.Nodes, p.ID)
	}
	out := make([]Domain, 0, len(byKey))
	for _, d := range byKey {
		out = append(out, *d)
	}
	slices.SortFunc(out, func(a, b Domain) int {
		fa, fb := a.FreeGPUs >= need, b.FreeGPUs >= need
		switch {
		case fa != fb:
			if fa {
				return -1
			}
			return 1
		case fa && a.FreeGPUs != b.FreeGPUs:
			return cmp.Compare(a.FreeGPUs, b.FreeGPUs)
		case a.FreeGPUs != b.FreeGPUs:
			return cmp.Compare(b.FreeGPUs, a.FreeGPUs)
		}
		return strings.Compare(a.String(), b.String())
	})
	return out
}

// String names the domain's pins, "attr=value, …", sorted; "" for none.
func (d Domain) String() string {
	parts := make([]string, 0, len(d.Pins))
	for _, a := range slices.Sorted(maps.Keys(d.Pins)) {
		parts = append(parts, a+"="+d.Pins[a])
	}
	return strings.Join(parts, ", ")
}

// Pin is a copy of job confined to d's pins, each a constraint
// "attr = value" recorded in meta nomad_gpu_gang_pinned so that Unpin
// takes it off again; the pins of an earlier admission are taken off
// first. job is not modified.
func Pin(job *api.Job, d Domain) *api.Job {
	unpinned := Unpin(job)
	if len(d.Pins) == 0 {
		return unpinned
	}
	cp := new(*unpinned)
	b, _ := json.Marshal(d.Pins)
	cp.Meta = maps.Clone(cp.Meta)
	if cp.Meta == nil {
		cp.Meta = map[string]string{}
	}
	cp.Meta[contract.MetaGangPinned] = string(b)
	cp.Constraints = slices.Clone(cp.Constraints)
	for _, a := range slices.Sorted(maps.Keys(d.Pins)) {
		cp.Constraints = append(cp.Constraints, pinConstraint(a, d.Pins[a]))
	}
	return cp
}

// Unpin is a copy of job without the constraints Pin added (job itself
// when it has none); a constraint the user wrote alike is kept when the
// record does not name it.
func Unpin(job *api.Job) *api.Job {
	v, ok := job.Meta[contract.MetaGangPinned]
	if !ok {
		return job
	}
	var pins map[string]string
	_ = json.Unmarshal([]byte(v), &pins) // unreadable: no pin to take off, only the record
	cp := *job
	cp.Meta = maps.Clone(job.Meta)
	delete(cp.Meta, contract.MetaGangPinned)
	cp.Constraints = nil
	// From the end, where Pin appends: one each.
	for _, c := range slices.Backward(job.Constraints) {
		if c != nil {
			if val, ok := pins[c.LTarget]; ok && *c == *pinConstraint(c.LTarget, val) {
				delete(pins, c.LTarget)
				continue
			}
		}
		cp.Constraints = append(cp.Constraints, c)
	}
	slices.Reverse(cp.Constraints)
	return &cp
}

func pinConstraint(attr, value string) *api.Constraint {
	return &api.Constraint{LTarget: attr, Operand: "=", RTarget: value}
}
