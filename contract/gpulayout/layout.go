// Package gpulayout is what one GPU is offered as — whole, N MPS shares,
// or a MIG geometry — and the planner that chooses it from the queue
// (Plan). A layout fixed in the device plugin's config strands capacity
// whenever the workload's mix differs from the one it was made for; the
// planner makes slices when fractional work waits and makes GPUs whole
// again when whole-GPU work waits, on GPUs that no allocation holds.
//
// A layout is written as text in Nomad's dynamic node metadata, where
// people read and set it (Layout.String, Parse): "whole", "mps:8",
// "mig:3g.40gb,2g.20gb,2g.20gb", "mig:" (MIG mode, no instances).
package gpulayout

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/nomad-gpu/nomad-gpu/contract"
)

// Kind is how a GPU is offered.
type Kind string

const (
	Whole Kind = "whole"
	MPS   Kind = "mps"
	MIG   Kind = "mig"
)

// DefaultShares is the share count of a GPU the controller's planner splits, where
// the bounds name none: 8, a 0.125-GPU granularity.
const DefaultShares = 8

// MaxShares is the most MPS shares a GPU is split into: MPS serves at
// most 48 clients per GPU on Volta and later.
const MaxShares = 48

// Layout is one GPU's: its kind, its shares (MPS) or its instances'
// profiles, sorted (MIG).
type Layout struct {
	Kind   Kind
	Shares int
	MIG    []string
}

// WholeGPU is a GPU offered whole.
var WholeGPU = Layout{Kind: Whole}

// Shared is a GPU offered as n MPS shares.
func Shared(n int) Layout { return Layout{Kind: MPS, Shares: n} }

// Geometry is a MIG-mode GPU's instances of these profiles.
func Geometry(profiles ...string) Layout {
	p := slices.Clone(profiles)
	slices.Sort(p)
	return Layout{Kind: MIG, MIG: p}
}

// IsZero reports a layout not set.
func (l Layout) IsZero() bool { return l.Kind == "" }

// Equal reports the same layout.
func (l Layout) Equal(o Layout) bool {
	return l.Kind == o.Kind && l.Shares == o.Shares && slices.Equal(l.MIG, o.MIG)
}

// String is the layout as node metadata carries it.
func (l Layout) String() string {
	switch l.Kind {
	case MPS:
		return "mps:" + strconv.Itoa(l.Shares)
	case MIG:
		return "mig:" + strings.Join(l.MIG, ",")
	}
	return string(l.Kind)
}

// Instances are the device kinds the layout offers, one per instance, as
// a request names them: "gpu", "mps", "mig/<profile>".
func (l Layout) Instances() []string {
	switch l.Kind {
	case Whole:
		return []string{contract.SliceGPU}
	case MPS:
		out := make([]string, l.Shares)
		for i := range out {
			out[i] = contract.SliceMPS
		}
		return out
	case MIG:
		out := make([]string, len(l.MIG))
		for i, p := range l.MIG {
			out[i] = contract.SliceMIG + "/" + p
		}
		return out
	}
	return nil
}

// Parse reads a layout as String writes it. The error says what is
// allowed.
func Parse(s string) (Layout, error) {
	kind, rest, _ := strings.Cut(strings.TrimSpace(s), ":")
	switch Kind(kind) {
	case Whole:
		if rest != "" {
			return Layout{}, fmt.Errorf("%q: whole takes nothing after it; allowed: whole, mps:<shares>, mig:<profile>,…", s)
		}
		return WholeGPU, nil
	case MPS:
		n, err := strconv.Atoi(rest)
		if err != nil || n < 2 || n > MaxShares {
			return Layout{}, fmt.Errorf("%q: the share count must be 2 to %d, as in mps:8", s, MaxShares)
		}
		return Shared(n), nil
	case MIG:
		var profiles []string
		if strings.TrimSpace(rest) == "" {
			// A GPU in MIG mode with no instances.
			return Geometry(), nil
		}
		for _, p := range strings.Split(rest, ",") {
			p = strings.TrimSpace(p)
			if !validProfile(p) {
				return Layout{}, fmt.Errorf("%q: %q is not a MIG profile such as 3g.40gb; allowed: mig:<profile>,<profile>,…", s, p)
			}
			profiles = append(profiles, p)
		}
		if len(profiles) > 7 {
			return Layout{}, fmt.Errorf("%q: %d instances; a GPU has at most 7", s, len(profiles))
		}
		return Geometry(profiles...), nil
	}
	return Layout{}, fmt.Errorf("%q: unknown layout; allowed: whole, mps:<shares> (2 to %d), mig:<profile>,<profile>,…", s, MaxShares)
}

// validProfile reports a MIG profile name as NVIDIA's tools write it:
// "<n>g.<m>gb", with an optional "<n>c." before and "+attr" or "-attr"
// after.
func validProfile(p string) bool {
	base, _, _ := strings.Cut(p, "+")
	base, _, _ = strings.Cut(base, "-")
	parts := strings.Split(base, ".")
	if len(parts) == 3 {
		if !countUnit(parts[0], "c") {
			return false
		}
		parts = parts[1:]
	}
	return len(parts) == 2 && countUnit(parts[0], "g") && countUnit(parts[1], "gb")
}

func countUnit(s, unit string) bool {
	n, err := strconv.Atoi(strings.TrimSuffix(s, unit))
	return strings.HasSuffix(s, unit) && err == nil && n > 0
}
