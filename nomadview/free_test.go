package nomadview

import (
	"testing"

	"github.com/nomad-gpu/nomad-gpu/contract"
)

func TestFreeRule(t *testing.T) {
	for _, tc := range []struct {
		healthy, held, want bool
	}{
		{true, false, true},
		{true, true, false},
		{false, false, false},
		{false, true, false},
	} {
		if got := (FreeRule{}).Free(tc.healthy, tc.held); got != tc.want {
			t.Errorf("Free(healthy %v, held %v) = %v, want %v", tc.healthy, tc.held, got, tc.want)
		}
	}
	if got := (FreeRule{}).Relaying(3); got != 0 {
		t.Errorf("the offered-only rule adds %d GPUs for 3 relaying, want 0", got)
	}
	if got := (FreeRule{CountRelaying: true}).Relaying(3); got != 3 {
		t.Errorf("CountRelaying adds %d GPUs for 3 relaying, want 3", got)
	}
}

func TestRelaying(t *testing.T) {
	for _, tc := range []struct {
		name           string
		state          contract.LayoutState
		current, fault string
		want           bool
	}{
		{"draining for another layout", contract.LayoutDraining, "whole", "", true},
		{"MIG mode with no instance", contract.LayoutReady, "mig:", "", true},
		{"ready and offering", contract.LayoutReady, "mps:8", "", false},
		{"held by allocations", contract.LayoutHeld, "whole", "", false},
		{"a relayout that failed", contract.LayoutError, "mig:", "", false},
		{"a failed GPU draining", contract.LayoutDraining, "whole", "XID 79", false},
	} {
		if got := Relaying(tc.state, tc.current, tc.fault); got != tc.want {
			t.Errorf("%s: Relaying = %v, want %v", tc.name, got, tc.want)
		}
	}
}
