package devicefp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/contract/gpulayout"
	"github.com/nomad-gpu/nomad-gpu/gpu"
	"github.com/nomad-gpu/nomad-gpu/wire/base"
	"github.com/nomad-gpu/nomad-gpu/wire/device"
)

// checkWire sends groups through the wire conversion the agent gets them
// by, which drops what Nomad would refuse: nothing may be dropped (one
// invalid attribute makes Nomad drop all of the plugin's devices).
func checkWire(t *testing.T, groups []*device.Group) {
	t.Helper()
	for _, g := range groups {
		for k, a := range g.Attributes {
			if err := a.Validate(); err != nil {
				t.Errorf("%s/%s attribute %s: %v", g.Type, g.Name, k, err)
			}
			if a.String != nil && *a.String == "" {
				t.Errorf("%s/%s attribute %s has no value", g.Type, g.Name, k)
			}
		}
	}
	pb := device.FingerprintToProto(&device.Fingerprint{Groups: groups}, hclog.NewNullLogger())
	if len(pb.DeviceGroup) != len(groups) {
		t.Fatalf("%d groups on the wire, %d built", len(pb.DeviceGroup), len(groups))
	}
	for i, g := range groups {
		if n := len(pb.DeviceGroup[i].Attributes); n != len(g.Attributes) {
			t.Errorf("%s/%s: %d attributes on the wire, %d built", g.Type, g.Name, n, len(g.Attributes))
		}
	}
}

// h100Profiles are an H100's GPU instance profiles.
var h100Profiles = []gpu.MIGProfile{
	{Name: "1g.10gb", Slices: 1, MemoryMiB: 9856, Max: 7}, {Name: "2g.20gb", Slices: 2, MemoryMiB: 19968, Max: 3},
	{Name: "3g.40gb", Slices: 3, MemoryMiB: 40192, Max: 2}, {Name: "7g.80gb", Slices: 7, MemoryMiB: 80384, Max: 1},
}

// layoutFixture is fixture with the profiles NVML lists for MIG GPUs.
func layoutFixture(n int, migGPUs ...int) *gpu.Snapshot {
	s := fixture(n, migGPUs...)
	for i := range s.GPUs {
		if s.GPUs[i].MIGEnabled {
			s.GPUs[i].MIGProfiles = h100Profiles
		}
	}
	return s
}

func TestLayoutGroups(t *testing.T) {
	cfg := defaults(t)
	cfg.MPS = []MPSConfig{{GPUs: []string{"0"}, Shares: 4}}
	lay := &layoutInputs{
		status: map[string]gpuStatus{
			"GPU-b": {state: contract.LayoutError, desired: "mps:99", err: `"mps:99": the share count must be 2 to 48`},
			"GPU-c": {state: contract.LayoutDraining, desired: "mig:7g.80gb", drain: "relayout mig:1g.10gb,3g.40gb → mig:7g.80gb pending"},
		},
		sharesInUse: map[string]int{"GPU-a": 3},
		publish:     true,
	}
	// GPU-a has failed; GPU-c's instances are unhealthy for its drain,
	// which is no fault.
	xid := "XID 79 (GPU has fallen off the bus) at 2026-12-06T10:00:00Z"
	m := buildModel(layoutFixture(3, 2), cfg, map[string]string{"GPU-a": xid}, lay)
	checkWire(t, m.groups)
	want := map[string]map[string]string{
		"GPU-a": {"index": "0", "pci_bus_id": "0000:01:00.0", "product": "NVIDIA H100 80GB HBM3", "mig_mode": "false", "mig_profiles": "none",
			"layout": "mps:4", "desired": "none", "pinned": "false", "state": "ready", "error": "none", "fault": xid, "stray_pins": "none"},
		"GPU-b": {"index": "1", "mig_mode": "false", "layout": "whole", "desired": "mps:99", "state": "error", "error": `"mps:99": the share count must be 2 to 48`, "fault": "none"},
		"GPU-c": {"index": "2", "mig_mode": "true", "mig_profiles": "1g.10gb:1x7,2g.20gb:2x3,3g.40gb:3x2,7g.80gb:7x1",
			"layout": "mig:1g.10gb,3g.40gb", "desired": "mig:7g.80gb", "state": "draining", "error": "none", "fault": "none"},
	}
	seen := 0
	for _, g := range m.groups {
		switch g.Type {
		case contract.SliceLayout:
			seen++
			if len(g.Devices) != 0 || g.Vendor != contract.Vendor {
				t.Errorf("layout group %s: vendor %q, %d devices", g.Name, g.Vendor, len(g.Devices))
			}
			if len(g.Attributes) != 12 {
				t.Errorf("layout group %s has %d attributes, want 12", g.Name, len(g.Attributes))
			}
			for k, v := range want[g.Name] {
				if got := g.Attributes[k].Text(); got != v {
					t.Errorf("%s %s = %q, want %q", g.Name, k, got, v)
				}
			}
		case contract.SliceMPS:
			if a := g.Attributes[contract.AttrSharesInUse]; a.Int == nil || *a.Int != 3 || a.Unit != "" {
				t.Errorf("%s = %+v, want 3 without unit", contract.AttrSharesInUse, a)
			}
		case contract.SliceMIG:
			for _, d := range g.Devices {
				if d.Healthy || !strings.Contains(d.HealthDescription, "relayout mig:1g.10gb,3g.40gb → mig:7g.80gb pending") {
					t.Errorf("draining GPU's %s: healthy=%v %q", d.ID, d.Healthy, d.HealthDescription)
				}
			}
		}
	}
	if seen != 3 {
		t.Errorf("%d layout groups, want 3", seen)
	}
}

// fakeInv is an inventory of a fixed snapshot that tests change.
type fakeInv struct {
	mu   sync.Mutex // guards snap
	snap *gpu.Snapshot
}

func (f *fakeInv) Snapshot() (*gpu.Snapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	cp := *f.snap
	cp.GPUs = append([]gpu.GPU(nil), f.snap.GPUs...)
	for i := range cp.GPUs {
		cp.GPUs[i].MIG = append([]gpu.MIGDevice(nil), cp.GPUs[i].MIG...)
	}
	return &cp, nil
}
func (f *fakeInv) Telemetry(string) (gpu.Telemetry, error) {
	return gpu.Telemetry{}, errors.New("none")
}
func (f *fakeInv) Events(context.Context) (<-chan gpu.Event, error) {
	return nil, errors.New("no events")
}
func (f *fakeInv) Close() error { return nil }

// fakeMIGInv also makes MIG geometries.
type fakeMIGInv struct {
	fakeInv
	calls []string // "GPU-…=profiles", guarded by mu
}

func (f *fakeMIGInv) SetMIGGeometry(uuid string, profiles []string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, uuid+"="+strings.Join(profiles, ","))
	for i := range f.snap.GPUs {
		g := &f.snap.GPUs[i]
		if g.UUID != uuid {
			continue
		}
		g.MIG = nil
		for j, p := range profiles {
			g.MIG = append(g.MIG, gpu.MIGDevice{UUID: fmt.Sprintf("MIG-%s-new%d", uuid, j), ParentUUID: uuid, ParentIndex: g.Index,
				Index: j, Profile: p, MemoryMiB: 9856, GPUInstanceID: j + 1})
		}
		return nil
	}
	return fmt.Errorf("no GPU %s", uuid)
}

// fakeAgent is the local Nomad agent: its node's metadata and allocations.
type fakeAgent struct {
	*httptest.Server
	mu     sync.Mutex // guards meta, allocs, index
	meta   map[string]string
	allocs []map[string]any
	index  int
}

func newFakeAgent(t *testing.T) *fakeAgent {
	a := &fakeAgent{meta: map[string]string{}, index: 1}
	a.Server = httptest.NewServer(http.HandlerFunc(a.serve))
	t.Cleanup(a.Close)
	return a
}

func (a *fakeAgent) serve(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch r.URL.Path {
	case "/v1/agent/self":
		io.WriteString(w, `{"stats": {"client": {"node_id": "node-1"}}}`)
	case "/v1/client/metadata":
		json.NewEncoder(w).Encode(map[string]any{"Meta": a.meta, "Dynamic": map[string]any{}, "Static": map[string]any{}})
	case "/v1/node/node-1/allocations":
		if idx, _ := strconv.Atoi(r.URL.Query().Get("index")); idx >= a.index {
			a.mu.Unlock() // nothing changed: block briefly, as Nomad would
			select {
			case <-r.Context().Done():
			case <-time.After(50 * time.Millisecond):
			}
			a.mu.Lock()
		}
		w.Header().Set("X-Nomad-Index", strconv.Itoa(a.index))
		json.NewEncoder(w).Encode(a.allocs)
	default:
		http.NotFound(w, r)
	}
}

func (a *fakeAgent) setMeta(kv ...string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i := 0; i+1 < len(kv); i += 2 {
		a.meta[kv[i]] = kv[i+1]
	}
}

func (a *fakeAgent) setAllocs(allocs ...map[string]any) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.allocs = allocs
	a.index++
}

// layoutNode is a plugin following layouts on a fake inventory and agent,
// with every fingerprint it sent.
type layoutNode struct {
	t     *testing.T
	p     *Plugin
	inv   Inventory
	agent *fakeAgent
	cfg   *Config
	mu    sync.Mutex // guards fps
	fps   []*device.Fingerprint
}

func layoutConfig(t *testing.T, agent *fakeAgent, stateFile string) *Config {
	cfg := defaults(t)
	cfg.Health.Enabled = false
	cfg.Nomad.Address = agent.URL
	cfg.Layout = LayoutConfig{Enabled: true, Poll: 100 * time.Millisecond, DrainGrace: 300 * time.Millisecond, StateFile: stateFile}
	return cfg
}

func startLayoutNode(t *testing.T, inv Inventory, agent *fakeAgent, cfg *Config) *layoutNode {
	t.Helper()
	n := &layoutNode{t: t, p: NewWithOpener(nil, func(gpu.Config, hclog.Logger) (Inventory, error) { return inv, nil }), inv: inv, agent: agent, cfg: cfg}
	if err := n.p.SetConfig(cfg, &base.AgentConfig{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); n.p.Close() })
	ch, err := n.p.Fingerprint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for fp := range ch {
			checkWire(t, fp.Groups)
			n.mu.Lock()
			n.fps = append(n.fps, fp)
			n.mu.Unlock()
		}
	}()
	return n
}

func newLayoutNode(t *testing.T, inv Inventory, edit func(*Config)) *layoutNode {
	t.Helper()
	agent := newFakeAgent(t)
	cfg := layoutConfig(t, agent, filepath.Join(t.TempDir(), "layouts.json"))
	if edit != nil {
		edit(cfg)
	}
	return startLayoutNode(t, inv, agent, cfg)
}

func (n *layoutNode) last() *device.Fingerprint {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.fps) == 0 {
		return &device.Fingerprint{}
	}
	return n.fps[len(n.fps)-1]
}

func group(fp *device.Fingerprint, typ, name string) *device.Group {
	for _, g := range fp.Groups {
		if g.Type == typ && g.Name == name {
			return g
		}
	}
	return nil
}

// attr is a layout group attribute in the last fingerprint.
func (n *layoutNode) attr(uuid, key string) string {
	g := group(n.last(), contract.SliceLayout, uuid)
	if g == nil {
		return ""
	}
	return g.Attributes[key].Text()
}

func (n *layoutNode) waitAttrs(t *testing.T, uuid string, kv ...string) {
	t.Helper()
	eventuallyTrue(t, fmt.Sprintf("%s %v", uuid, kv), func() bool {
		for i := 0; i+1 < len(kv); i += 2 {
			if n.attr(uuid, kv[i]) != kv[i+1] {
				return false
			}
		}
		return true
	})
}

func (n *layoutNode) state(uuid string) contract.LayoutState {
	n.p.layout.mu.Lock()
	defer n.p.layout.mu.Unlock()
	if st := n.p.layout.gpus[uuid]; st != nil {
		return st.state
	}
	return ""
}

func TestLayoutWholeToMPS(t *testing.T) {
	n := newLayoutNode(t, &fakeInv{snap: layoutFixture(2)}, func(c *Config) { c.Layout.DrainGrace = 500 * time.Millisecond })
	n.waitAttrs(t, "GPU-a", "layout", "whole", "desired", "whole", "state", "ready")
	n.agent.setMeta(contract.MetaLayoutPrefix+"GPU-a", "mps:8")

	eventuallyTrue(t, "draining", func() bool { return n.state("GPU-a") == contract.LayoutDraining })
	_, err := n.p.Reserve([]string{"GPU-a"})
	if want := "device GPU-a: GPU GPU-a is being relaid out whole → mps:8; Nomad will place the allocation again"; err == nil || err.Error() != want {
		t.Fatalf("Reserve while draining: %v, want %q", err, want)
	}
	if _, err := n.p.Reserve([]string{"GPU-b"}); err != nil {
		t.Fatalf("another GPU's Reserve: %v", err)
	}
	n.waitAttrs(t, "GPU-a", "state", "draining", "desired", "mps:8", "layout", "whole")
	d := group(n.last(), contract.SliceGPU, "NVIDIA H100 80GB HBM3").Devices[0]
	if d.ID != "GPU-a" || d.Healthy || d.HealthDescription != "relayout whole → mps:8 pending" {
		t.Fatalf("draining device %+v", d)
	}

	n.waitAttrs(t, "GPU-a", "state", "ready", "layout", "mps:8", "desired", "mps:8")
	g := group(n.last(), contract.SliceMPS, "GPU-a")
	if g == nil || len(g.Devices) != 8 {
		t.Fatalf("mps group %+v", g)
	}
	for _, d := range g.Devices {
		if !d.Healthy {
			t.Errorf("%s unhealthy: %s", d.ID, d.HealthDescription)
		}
	}
	if _, err := n.p.Reserve([]string{"GPU-a"}); err == nil || !strings.Contains(err.Error(), "device GPU-a no longer exists on this node") {
		t.Fatalf("Reserve of the whole GPU after the switch: %v", err)
	}
	if _, err := n.p.Reserve([]string{"GPU-a-mps-7"}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(n.cfg.Layout.StateFile)
	if err != nil || !strings.Contains(string(b), `"GPU-a": "mps:8"`) || strings.Contains(string(b), "GPU-b") {
		t.Fatalf("state file %s: %v", b, err)
	}
}

func TestLayoutHeldUntilTheHolderEnds(t *testing.T) {
	n := newLayoutNode(t, &fakeInv{snap: layoutFixture(2)}, func(c *Config) { c.MPS = []MPSConfig{{GPUs: []string{"0"}, Shares: 2}} })
	n.agent.setAllocs(allocJSON("a1", "running", "train", "t", "GPU-a-mps-1"))
	n.waitAttrs(t, "GPU-a", "layout", "mps:2", "state", "ready")
	eventuallyTrue(t, "shares_in_use 1", func() bool {
		return group(n.last(), contract.SliceMPS, "GPU-a").Attributes[contract.AttrSharesInUse].Text() == "1"
	})
	n.agent.setMeta(contract.MetaLayoutPrefix+"GPU-a", "whole")
	n.waitAttrs(t, "GPU-a", "state", "held", "desired", "whole", "layout", "mps:2")
	time.Sleep(3 * n.cfg.Layout.DrainGrace) // several polls: still held
	if s := n.state("GPU-a"); s != contract.LayoutHeld {
		t.Fatalf("state %s while an allocation holds a share", s)
	}
	if g := group(n.last(), contract.SliceMPS, "GPU-a"); g == nil || !g.Devices[0].Healthy {
		t.Fatalf("held GPU's shares: %+v", g)
	}
	n.agent.setAllocs(allocJSON("a1", "complete", "train", "t", "GPU-a-mps-1"))
	n.waitAttrs(t, "GPU-a", "state", "ready", "layout", "whole")
	if group(n.last(), contract.SliceMPS, "GPU-a") != nil {
		t.Fatal("shares still offered")
	}
	// Whole differs from the mps block: the state file keeps it.
	b, err := os.ReadFile(n.cfg.Layout.StateFile)
	if err != nil || !strings.Contains(string(b), `"GPU-a": "whole"`) {
		t.Fatalf("state file %s: %v", b, err)
	}
}

// A Reserve that succeeded counts as a holder until the allocations show
// it, and in shares_in_use.
func TestLayoutReserveHolds(t *testing.T) {
	n := newLayoutNode(t, &fakeInv{snap: layoutFixture(1)}, func(c *Config) { c.MPS = []MPSConfig{{GPUs: []string{"0"}, Shares: 4}} })
	n.waitAttrs(t, "GPU-a", "layout", "mps:4", "state", "ready")
	eventuallyTrue(t, "allocations known", func() bool { return n.p.metrics.watcher().current().known })
	if _, err := n.p.Reserve([]string{"GPU-a-mps-0", "GPU-a-mps-2"}); err != nil {
		t.Fatal(err)
	}
	eventuallyTrue(t, "shares_in_use 2", func() bool {
		return group(n.last(), contract.SliceMPS, "GPU-a").Attributes[contract.AttrSharesInUse].Text() == "2"
	})
	// The agent never lists the allocation (it failed at once): the
	// reservation stops counting at the next view.
	n.agent.setMeta(contract.MetaLayoutPrefix+"GPU-a", "mps:2")
	n.waitAttrs(t, "GPU-a", "state", "ready", "layout", "mps:2")
}

func TestLayoutPinBeatsLayout(t *testing.T) {
	n := newLayoutNode(t, &fakeInv{snap: layoutFixture(1)}, nil)
	n.agent.setMeta(contract.MetaLayoutPrefix+"GPU-a", "mps:4", contract.MetaPinPrefix+"GPU-a", "mps:2")
	n.waitAttrs(t, "GPU-a", "state", "ready", "layout", "mps:2", "desired", "mps:2")
	if g := group(n.last(), contract.SliceMPS, "GPU-a"); g == nil || len(g.Devices) != 2 {
		t.Fatalf("mps group %+v", g)
	}
}

// A failed GPU keeps its layout whatever is asked, the controller's or an
// operator's pin, until it recovers (here: the verdict is cleared, as a
// plugin restart on a repaired node does); the other GPUs follow theirs.
func TestLayoutFailedGPUKeepsItsLayout(t *testing.T) {
	n := newLayoutNode(t, &fakeInv{snap: layoutFixture(2)}, nil)
	n.waitAttrs(t, "GPU-a", "layout", "whole", "state", "ready", "fault", "none")
	xid := "XID 79 (GPU has fallen off the bus) at 2026-12-06T10:00:00Z"
	n.p.mu.Lock()
	n.p.unhealthy["GPU-a"] = xid
	n.p.mu.Unlock()
	n.p.wakeFingerprint()
	n.waitAttrs(t, "GPU-a", "fault", xid, "state", "ready")

	for _, key := range []string{contract.MetaLayoutPrefix, contract.MetaPinPrefix} {
		n.agent.setMeta(key+"GPU-a", "mps:8", key+"GPU-b", "mps:4")
		n.waitAttrs(t, "GPU-b", "layout", "mps:4", "state", "ready")
		n.waitAttrs(t, "GPU-a", "layout", "whole", "state", "error", "fault", xid)
		if want := "GPU 0 has failed (" + xid + "); it keeps its layout whole until it recovers"; n.attr("GPU-a", "error") != want {
			t.Fatalf("%s: error %q, want %q", key, n.attr("GPU-a", "error"), want)
		}
		n.agent.setMeta(key+"GPU-b", "whole")
		n.waitAttrs(t, "GPU-b", "layout", "whole", "state", "ready")
	}

	n.p.mu.Lock()
	delete(n.p.unhealthy, "GPU-a")
	n.p.mu.Unlock()
	n.waitAttrs(t, "GPU-a", "layout", "mps:8", "state", "ready", "fault", "none")
}

func TestLayoutInvalidDesired(t *testing.T) {
	cases := []struct {
		name, uuid, value, wantErr, layout string
	}{
		{"does not parse", "GPU-a", "mps:99", `"mps:99": the share count must be 2 to 48`, "whole"},
		{"unknown kind", "GPU-a", "half", `"half": unknown layout`, "whole"},
		{"MIG on a GPU not in MIG mode", "GPU-a", "mig:1g.10gb", "mig:1g.10gb: GPU 0 is not in MIG mode", "whole"},
		{"MPS on a GPU in MIG mode", "GPU-b", "mps:4", "mps:4: GPU 1 is in MIG mode", "mig:1g.10gb,3g.40gb"},
		{"profile the GPU does not make", "GPU-b", "mig:4g.40gb", "mig:4g.40gb: GPU 1 (NVIDIA H100 80GB HBM3) makes no 4g.40gb instances; it makes 1g.10gb, 2g.20gb, 3g.40gb, 7g.80gb", "mig:1g.10gb,3g.40gb"},
		{"too many of a profile", "GPU-b", "mig:3g.40gb,3g.40gb,3g.40gb", "holds at most 2 3g.40gb instance(s)", "mig:1g.10gb,3g.40gb"},
		{"too many slices", "GPU-b", "mig:7g.80gb,1g.10gb", "8 compute slices; GPU 1 (NVIDIA H100 80GB HBM3) has 7", "mig:1g.10gb,3g.40gb"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			inv := &fakeMIGInv{fakeInv: fakeInv{snap: layoutFixture(2, 1)}}
			n := newLayoutNode(t, inv, nil)
			n.agent.setMeta(contract.MetaLayoutPrefix+c.uuid, c.value)
			n.waitAttrs(t, c.uuid, "state", "error", "layout", c.layout)
			if got := n.attr(c.uuid, "error"); !strings.Contains(got, c.wantErr) {
				t.Errorf("error %q, want %q", got, c.wantErr)
			}
			if d := n.attr(c.uuid, "desired"); d != c.value && !strings.HasPrefix(c.value, "mig:") {
				t.Errorf("desired %q, want %q", d, c.value)
			}
			if len(inv.calls) != 0 {
				t.Errorf("MIG geometry set: %v", inv.calls)
			}
			// A valid value afterwards is applied.
			fix := map[string]string{"GPU-a": "mps:2", "GPU-b": "mig:7g.80gb"}[c.uuid]
			n.agent.setMeta(contract.MetaLayoutPrefix+c.uuid, fix)
			n.waitAttrs(t, c.uuid, "state", "ready", "layout", fix, "error", "none")
		})
	}
}

func TestLayoutMIGGeometry(t *testing.T) {
	inv := &fakeMIGInv{fakeInv: fakeInv{snap: layoutFixture(2, 1)}}
	n := newLayoutNode(t, inv, nil)
	n.agent.setMeta(contract.MetaLayoutPrefix+"GPU-b", "mig:1g.10gb,1g.10gb,2g.20gb")
	n.waitAttrs(t, "GPU-b", "state", "ready", "layout", "mig:1g.10gb,1g.10gb,2g.20gb")
	inv.mu.Lock()
	calls := strings.Join(inv.calls, ";")
	inv.mu.Unlock()
	if calls != "GPU-b=1g.10gb,1g.10gb,2g.20gb" {
		t.Fatalf("SetMIGGeometry calls %q", calls)
	}
	if g := group(n.last(), contract.SliceMIG, "1g.10gb"); g == nil || len(g.Devices) != 2 || !strings.HasPrefix(g.Devices[0].ID, "MIG-GPU-b-new") {
		t.Fatalf("1g.10gb group %+v", g)
	}
	if _, err := n.p.Reserve([]string{"MIG-b0"}); err == nil || !strings.Contains(err.Error(), "device MIG-b0 no longer exists on this node") {
		t.Fatalf("Reserve of a destroyed MIG instance: %v", err)
	}
}

func TestLayoutMIGWithoutSetter(t *testing.T) {
	n := newLayoutNode(t, &fakeInv{snap: layoutFixture(2, 1)}, nil)
	n.agent.setMeta(contract.MetaLayoutPrefix+"GPU-b", "mig:7g.80gb")
	n.waitAttrs(t, "GPU-b", "state", "error", "layout", "mig:1g.10gb,3g.40gb")
	if e := n.attr("GPU-b", "error"); !strings.Contains(e, "this inventory cannot change MIG geometries") {
		t.Fatalf("error %q", e)
	}
	for _, g := range n.last().Groups {
		for _, d := range g.Devices {
			if !d.Healthy {
				t.Errorf("%s unhealthy after a failed switch: %s", d.ID, d.HealthDescription)
			}
		}
	}
}

// A restart keeps the layouts the plugin applied: the first fingerprint
// offers them.
func TestLayoutStateFileAcrossRestarts(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "layouts.json")
	if err := saveLayoutState(path, map[string]gpulayout.Layout{"GPU-a": gpulayout.Shared(8)}); err != nil {
		t.Fatal(err)
	}
	agent := newFakeAgent(t)
	agent.setMeta(contract.MetaLayoutPrefix+"GPU-a", "mps:8")
	cfg := layoutConfig(t, agent, path)
	p := NewWithOpener(nil, func(gpu.Config, hclog.Logger) (Inventory, error) { return &fakeInv{snap: layoutFixture(2)}, nil })
	t.Cleanup(func() { p.Close() })
	if err := p.SetConfig(cfg, nil); err != nil {
		t.Fatal(err)
	}
	fp, err := p.CurrentFingerprint()
	if err != nil {
		t.Fatal(err)
	}
	if g := group(fp, contract.SliceMPS, "GPU-a"); g == nil || len(g.Devices) != 8 {
		t.Fatalf("first fingerprint after a restart: %+v", fp.Groups)
	}
	if g := group(fp, contract.SliceLayout, "GPU-a"); g.Attributes["layout"].Text() != "mps:8" {
		t.Fatalf("layout %s", g.Attributes["layout"].Text())
	}
	// Without layout.enabled the mps blocks rule.
	cfg.Layout.Enabled = false
	if err := p.SetConfig(cfg, nil); err != nil {
		t.Fatal(err)
	}
	if fp, _ := p.CurrentFingerprint(); group(fp, contract.SliceMPS, "GPU-a") != nil {
		t.Fatal("layouts followed with layout.enabled = false")
	}
}

func TestLayoutStateFileErrors(t *testing.T) {
	dir := t.TempDir()
	cases := []struct{ name, content, want string }{
		{"not JSON", "{", "layout.state_file: " + filepath.Join(dir, "not JSON") + " does not parse"},
		{"newer", `{"version": 2, "gpus": {}}`, "has version 2; this plugin reads version 1"},
		{"no version", `{"gpus": {}}`, "has no version"},
		{"bad layout", `{"version": 1, "gpus": {"GPU-a": "mps:1"}}`, "GPU GPU-a: \"mps:1\": the share count must be 2 to 48"},
		{"MIG", `{"version": 1, "gpus": {"GPU-a": "mig:7g.80gb"}}`, "MIG geometries are not kept here"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(dir, c.name)
			if err := os.WriteFile(path, []byte(c.content), 0o644); err != nil {
				t.Fatal(err)
			}
			cfg := layoutConfig(t, newFakeAgent(t), path)
			p := NewWithOpener(nil, func(gpu.Config, hclog.Logger) (Inventory, error) { return &fakeInv{snap: layoutFixture(1)}, nil })
			defer p.Close()
			err := p.SetConfig(cfg, nil)
			if err == nil || !strings.HasPrefix(err.Error(), "layout.state_file: ") || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want %q", err, c.want)
			}
		})
	}
	// A missing file is empty.
	if got, err := loadLayoutState(filepath.Join(dir, "missing", "layouts.json")); err != nil || len(got) != 0 {
		t.Fatalf("missing file: %v, %v", got, err)
	}
}

func TestGPUHolds(t *testing.T) {
	now := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	meta := map[string]string{
		contract.MetaHoldPrefix + "GPU-a":   "2026-12-05T10:00:30Z", // runs
		contract.MetaHoldPrefix + "GPU-b":   "2026-12-05T09:59:59Z", // over
		contract.MetaHoldPrefix + "GPU-c":   "soon",                 // not a time: holds nothing
		contract.MetaLayoutPrefix + "GPU-c": "whole",
	}
	holds := heldGPUs(meta, now, hclog.NewNullLogger())
	if len(holds) != 1 || !strings.Contains(holds["GPU-a"], "held until 2026-12-05T10:00:30Z") {
		t.Fatalf("holds = %v, want GPU-a's alone", holds)
	}

	cfg := defaults(t)
	cfg.MPS = []MPSConfig{{GPUs: []string{"0", "1"}, Shares: 4}}
	m := buildModel(layoutFixture(2), cfg, nil, &layoutInputs{holds: holds, publish: true})
	healthy := map[string]int{}
	for _, g := range m.groups {
		for _, d := range g.Devices {
			uuid, _, ok := contract.ParseShareID(d.ID)
			if !ok {
				t.Fatalf("device %s is not an MPS share", d.ID)
			}
			if d.Healthy {
				healthy[uuid]++
			} else if uuid != "GPU-a" || d.HealthDescription != holds["GPU-a"] {
				t.Errorf("%s unhealthy: %q", d.ID, d.HealthDescription)
			}
		}
	}
	if healthy["GPU-a"] != 0 || healthy["GPU-b"] != 4 {
		t.Errorf("healthy shares by GPU: %v, want GPU-a none (held), GPU-b 4", healthy)
	}
}

// A pin naming a GPU the node lacks is no layout of any GPU: it is
// published on every layout group (stray_pins, naming the key and the
// node's GPUs) until it is removed, and the other GPUs follow theirs.
func TestLayoutStrayPin(t *testing.T) {
	n := newLayoutNode(t, &fakeInv{snap: layoutFixture(2)}, nil)
	n.waitAttrs(t, "GPU-a", "stray_pins", "none")
	n.agent.setMeta(contract.MetaPinPrefix+"GPU-bogus", "mps:4", contract.MetaPinPrefix+"GPU-b", "mps:2")
	want := "nomad_gpu.pin.GPU-bogus=mps:4 names no GPU of this node, so it is ignored (its GPUs: GPU-a, GPU-b)"
	for _, g := range []string{"GPU-a", "GPU-b"} {
		n.waitAttrs(t, g, "stray_pins", want)
	}
	n.waitAttrs(t, "GPU-b", "layout", "mps:2", "state", "ready")
	n.agent.mu.Lock()
	delete(n.agent.meta, contract.MetaPinPrefix+"GPU-bogus") // nomad node meta apply -unset
	n.agent.mu.Unlock()
	n.waitAttrs(t, "GPU-a", "stray_pins", "none")
}

// Stray pins are the pin keys naming no GPU the plugin manages (an
// ignored GPU included), sorted; each new one is logged once as a
// warning naming its key.
func TestStrayPins(t *testing.T) {
	snap := layoutFixture(3)
	cfg := &Config{}
	cfg.IgnoredGPUIDs = []string{"GPU-c"}
	meta := map[string]string{
		contract.MetaPinPrefix + "GPU-z":    "mps:4",
		contract.MetaPinPrefix + "GPU-a":    "whole",
		contract.MetaPinPrefix + "GPU-c":    "mps:2",
		contract.MetaLayoutPrefix + "GPU-y": "mps:8", // the controller's: not an operator's pin
		"other":                             "x",
	}
	got := strayPins(meta, snap, cfg)
	want := []string{
		"nomad_gpu.pin.GPU-c=mps:2 names no GPU of this node, so it is ignored (its GPUs: GPU-a, GPU-b)",
		"nomad_gpu.pin.GPU-z=mps:4 names no GPU of this node, so it is ignored (its GPUs: GPU-a, GPU-b)",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	var logs strings.Builder
	lm := &layoutManager{log: hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Warn})}
	if !lm.setStrayPins(got) || lm.setStrayPins(got) {
		t.Error("setStrayPins: changed, then unchanged")
	}
	if n := strings.Count(logs.String(), "[WARN]"); n != 2 || !strings.Contains(logs.String(), "key=nomad_gpu.pin.GPU-z") {
		t.Errorf("logged:\n%s", &logs)
	}
	if !lm.setStrayPins(nil) || lm.strayPins != "" {
		t.Error("cleared pins not taken")
	}
}
