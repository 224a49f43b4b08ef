package devicefp

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/wire/device"
)

// A health verdict on an MPS-shared GPU covers all of its shares, with the
// verdict as their health description, as it covers a MIG GPU's instances;
// another GPU's shares stay healthy.
func TestUnhealthyGPUMarksItsMPSShares(t *testing.T) {
	cfg := defaults(t)
	cfg.MPS = []MPSConfig{{GPUs: []string{"0", "1"}, Shares: 3}}
	m := buildModel(fixture(3, 2), cfg, map[string]string{"GPU-b": "XID 79 (GPU has fallen off the bus)"}, nil)
	seen := 0
	for _, g := range m.groups {
		for _, d := range g.Devices {
			seen++
			switch {
			case strings.HasPrefix(d.ID, "GPU-b-mps-"):
				if g.Type != contract.SliceMPS || d.Healthy || d.HealthDescription != "XID 79 (GPU has fallen off the bus)" {
					t.Errorf("%s/%s %s: healthy=%v %q, want unhealthy with the GPU's reason", g.Type, g.Name, d.ID, d.Healthy, d.HealthDescription)
				}
			default: // GPU-a's shares, GPU-c's MIG instances
				if !d.Healthy || d.HealthDescription != "" {
					t.Errorf("%s/%s %s: healthy=%v %q, want healthy", g.Type, g.Name, d.ID, d.Healthy, d.HealthDescription)
				}
			}
		}
	}
	if seen != 3+3+2 {
		t.Errorf("%d devices, want 8", seen)
	}
}

// End to end on a sim node: a counted XID on an MPS-shared GPU makes the
// fingerprint Nomad gets list that GPU's shares unhealthy, saying which XID;
// the shares of another GPU, the MIG instances and a GPU with an ignored XID
// stay healthy.
func TestXIDMarksMPSSharesUnhealthy(t *testing.T) {
	n := newSimNode(t, func(c *Config) {
		c.MPS = []MPSConfig{{GPUs: []string{"0", "2"}, Shares: 2}}
		c.FingerprintPeriod = time.Hour // only XIDs send a new fingerprint
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := n.p.Fingerprint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fps := make(chan *device.Fingerprint, 16)
	go func() {
		for fp := range ch {
			select {
			case fps <- fp:
			case <-ctx.Done():
			}
		}
		close(fps)
	}()
	health := func(fp *device.Fingerprint) map[string]*device.Device {
		out := map[string]*device.Device{}
		for _, g := range fp.Groups {
			for _, d := range g.Devices {
				out[d.ID] = d
			}
		}
		return out
	}
	sick := contract.ShareID(n.gpuUUID(0), 0)
	all := []string{
		contract.ShareID(n.gpuUUID(0), 0), contract.ShareID(n.gpuUUID(0), 1),
		n.migUUID(0), n.migUUID(1),
		contract.ShareID(n.gpuUUID(2), 0), contract.ShareID(n.gpuUUID(2), 1),
	}

	var first map[string]*device.Device
	select {
	case fp := <-fps:
		first = health(fp)
	case <-time.After(10 * time.Second):
		t.Fatal("no first fingerprint within 10s")
	}
	for _, id := range all {
		if d := first[id]; d == nil || !d.Healthy {
			t.Fatalf("before any XID: %s = %+v, want healthy", id, d)
		}
	}

	if err := n.ctl.InjectXID(n.gpuUUID(2), 13); err != nil { // application fault: ignored by default
		t.Fatal(err)
	}
	if err := n.ctl.InjectXID(n.gpuUUID(0), 79); err != nil {
		t.Fatal(err)
	}
	// The XID's fingerprint is the one that lists the share unhealthy; give
	// up 10s after the XIDs, saying what Nomad was last told.
	got := first
	deadline := time.After(10 * time.Second)
	for d := got[sick]; d == nil || d.Healthy; d = got[sick] {
		select {
		case fp, ok := <-fps:
			if !ok {
				t.Fatal("fingerprint channel closed")
			}
			got = health(fp)
		case <-deadline:
			t.Fatalf("no fingerprint lists %s unhealthy within 10s of XID 79 on its GPU; last sent: %+v", sick, got[sick])
		}
	}
	for _, id := range all {
		d := got[id]
		if d == nil {
			t.Errorf("%s missing from the fingerprint", id)
			continue
		}
		if strings.HasPrefix(id, n.gpuUUID(0)+"-mps-") {
			if d.Healthy || !strings.Contains(d.HealthDescription, "XID 79") {
				t.Errorf("%s: healthy=%v %q, want unhealthy for XID 79", id, d.Healthy, d.HealthDescription)
			}
		} else if !d.Healthy || d.HealthDescription != "" {
			t.Errorf("%s: healthy=%v %q, want healthy", id, d.Healthy, d.HealthDescription)
		}
	}
	if len(got) != len(all) {
		t.Errorf("fingerprint lists %d devices, want %d: %v", len(got), len(all), got)
	}
}
