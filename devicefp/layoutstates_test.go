package devicefp

import (
	"strings"
	"testing"
	"time"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/wire/device"
)

// findDevice is the device with this ID in fp, nil if none.
func findDevice(fp *device.Fingerprint, id string) *device.Device {
	for _, g := range fp.Groups {
		for _, d := range g.Devices {
			if d.ID == id {
				return d
			}
		}
	}
	return nil
}

// Only a draining GPU stops taking placements. A GPU held by allocations
// (another layout asked) or in error (the asked layout cannot be made)
// keeps its layout, so its free instances stay healthy and Reserve hands
// them out; a draining GPU's instances are about to go, so they are
// unhealthy and Reserve refuses them.
func TestLayoutStatesTakingPlacements(t *testing.T) {
	cases := []struct {
		state contract.LayoutState
		edit  func(*Config)
		setup func(n *layoutNode)
		free  string // an instance of GPU-a nobody holds
	}{
		{contract.LayoutReady, nil, func(*layoutNode) {}, "GPU-a"},
		{contract.LayoutHeld,
			func(c *Config) { c.MPS = []MPSConfig{{GPUs: []string{"0"}, Shares: 2}} },
			func(n *layoutNode) {
				n.agent.setAllocs(allocJSON("a1", "running", "train", "t", "GPU-a-mps-1"))
				n.waitAttrs(n.t, "GPU-a", "layout", "mps:2")
				eventuallyTrue(n.t, "allocations known", func() bool { return n.p.metrics.watcher().current().known })
				n.agent.setMeta(contract.MetaLayoutPrefix+"GPU-a", "whole")
			}, "GPU-a-mps-0"},
		{contract.LayoutError, nil,
			func(n *layoutNode) { n.agent.setMeta(contract.MetaLayoutPrefix+"GPU-a", "mps:99") }, "GPU-a"},
		{contract.LayoutDraining,
			// It drains for the longest grace: long past the test's end.
			func(c *Config) { c.Layout.DrainGrace = 5 * time.Minute },
			func(n *layoutNode) { n.agent.setMeta(contract.MetaLayoutPrefix+"GPU-a", "mps:8") }, "GPU-a"},
	}
	for _, tc := range cases {
		t.Run(string(tc.state), func(t *testing.T) {
			n := newLayoutNode(t, &fakeInv{snap: layoutFixture(2)}, tc.edit)
			n.waitAttrs(t, "GPU-a", "state", "ready")
			tc.setup(n)
			n.waitAttrs(t, "GPU-a", "state", string(tc.state))

			draining := tc.state == contract.LayoutDraining
			d := findDevice(n.last(), tc.free)
			if d == nil {
				t.Fatalf("%s not offered in state %s", tc.free, tc.state)
			}
			if d.Healthy == draining {
				t.Errorf("%s in state %s: healthy %v (%q), want %v", tc.free, tc.state, d.Healthy, d.HealthDescription, !draining)
			}
			_, err := n.p.Reserve([]string{tc.free})
			switch {
			case draining && (err == nil || !strings.Contains(err.Error(), contract.ReserveRefusedRelayout)):
				t.Errorf("Reserve of %s while draining: %v, want refused (%s)", tc.free, err, contract.ReserveRefusedRelayout)
			case !draining && err != nil:
				t.Errorf("Reserve of %s in state %s: %v, want it placed", tc.free, tc.state, err)
			}
			// No entry is ready.
			if s := n.state("GPU-a"); s != tc.state && (s != "" || tc.state != contract.LayoutReady) {
				t.Errorf("state %s after Reserve, want still %s", s, tc.state)
			}
		})
	}
}
