package topview

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/controller"
	"github.com/nomad-gpu/nomad-gpu/nomadview"
)

func num[T int | int64 | float64](p *T) string {
	if p == nil {
		return "nil"
	}
	return fmt.Sprint(*p)
}

// describe is a GPU in one line: what the tests compare.
func describe(g GPU) string {
	var allocs []string
	for _, a := range g.Allocations {
		allocs = append(allocs, a.Job+"/"+a.Group+"/"+a.Task+"@"+a.AllocID[:8]+":"+num(a.MemoryUsedMiB))
	}
	var sl []string
	for _, s := range g.Slices {
		holder := "-"
		if s.Alloc != nil {
			holder = s.Alloc.Job + ":" + num(s.Alloc.MemoryUsedMiB)
		}
		sl = append(sl, fmt.Sprintf("%s:%s:%s:%v:%s/%s:%s%%:%s", s.Type, s.ID[len(s.ID)-6:], s.Profile, s.Healthy,
			num(s.MemoryUsedMiB), num(s.MemoryTotalMiB), num(s.UtilizationPct), holder))
	}
	return fmt.Sprintf("%s|%s|idx=%s|%s|%s|healthy=%v %s|mem=%s/%s|util=%s|%sC %sW|allocs=%s|slices=%s",
		g.UUID, g.PCIBusID, num(g.Index), g.Model, g.Mode, g.Healthy, g.HealthDescription,
		num(g.MemoryUsedMiB), num(g.MemoryTotalMiB), num(g.UtilizationPct), num(g.TemperatureC), num(g.PowerW),
		strings.Join(allocs, ","), strings.Join(sl, " "))
}

func TestBuildGroupsDevicesIntoGPUs(t *testing.T) {
	v := Build(fixtureInput())
	if got := nodeNames(v); !slices.Equal(got, []string{"gpu-1", "gpu-2"}) {
		t.Fatalf("nodes %v, want gpu-1 and gpu-2 (cpu-1 has no GPUs)", got)
	}
	n := v.Nodes[0]
	if n.ID != node1ID || n.Pool != "gpu" || n.Class != "h100" || n.Datacenter != "dc1" || n.Status != "ready" ||
		!n.Eligible || n.Drain || n.StatsError != "" {
		t.Errorf("node %+v", n)
	}
	want := []string{
		gpuA + "|0000:18:00.0|idx=0|" + h100 + "|whole|healthy=true |mem=30000/81920|util=40|45C 300W|allocs=train/g/t@a0000001:30000|slices=",
		gpuB + "|0000:2a:00.0|idx=1|" + h100 + "|whole|healthy=false XID 79 (GPU has fallen off the bus)|mem=0/81920|util=0|30C 70W|allocs=|slices=",
		gpuM + "|0000:9a:00.0|idx=4|" + h100 + "|mps|healthy=true |mem=12000/81920|util=55|51C 250.5W|allocs=notebook/g/t@a0000003:1500|slices=" +
			"mps:-mps-0:1/4:true:0/20480:0%:- mps:-mps-1:1/4:true:1000/20480:100%:notebook:1000 mps:-mps-2:1/4:true:500/20480:100%:notebook:500 mps:-mps-3:1/4:true:0/20480:0%:-",
		gpuMIG + "|0000:db:00.0|idx=7|" + h100 + "|mig|healthy=true |mem=3072/81920|util=nil|38C 120W|allocs=infer/g/t@a0000002:2048|slices=" +
			"mig:000000:1g.10gb:true:2048/10240:nil%:infer:2048 mig:000000:1g.10gb:true:1024/10240:nil%:-",
	}
	if len(n.GPUs) != len(want) {
		t.Fatalf("%d GPUs, want %d", len(n.GPUs), len(want))
	}
	for i, g := range n.GPUs {
		if got := describe(g); got != want[i] {
			t.Errorf("GPU %d\n got %s\nwant %s", i, got, want[i])
		}
	}
	if s := n.GPUs[3].Slices; s[0].ID != migA || s[1].ID != migB {
		t.Errorf("MIG slices not ordered by ID: %s, %s", s[0].ID, s[1].ID)
	}

	n2 := v.Nodes[1]
	if !strings.HasPrefix(n2.StatsError, "stats unavailable: Unexpected response code: 500") || n2.Eligible || !n2.Drain {
		t.Errorf("node 2 %+v", n2)
	}
	if len(n2.GPUs) != 1 || n2.GPUs[0].MemoryTotalMiB != nil || n2.GPUs[0].UtilizationPct != nil {
		t.Errorf("node 2 GPUs %+v", n2.GPUs)
	}
}

func TestBuildHealthAndFallbacks(t *testing.T) {
	tests := []struct {
		name   string
		edit   func(n *api.NodeListStub, in *Input)
		gpu    int // index in the node's GPUs
		health string
		check  func(t *testing.T, g GPU)
	}{
		{
			name: "a GPU XID marks every MPS share: the GPU is unhealthy once",
			edit: func(n *api.NodeListStub, _ *Input) {
				for _, i := range n.NodeResources.Devices[2].Instances {
					i.Healthy, i.HealthDescription = false, "XID 79"
				}
			},
			gpu: 2, health: "false XID 79",
		},
		{
			name: "one unhealthy MIG instance makes its GPU unhealthy",
			edit: func(n *api.NodeListStub, _ *Input) {
				n.NodeResources.Devices[1].Instances[0].Healthy = false
			},
			gpu: 3, health: "false unhealthy",
		},
		{
			name: "MIG memory used needs every instance's figure",
			edit: func(_ *api.NodeListStub, in *Input) {
				delete(in.Stats[node1ID].Host.DeviceStats[1].InstanceStats, migB)
			},
			gpu: 3, health: "true ",
			check: func(t *testing.T, g GPU) {
				if g.MemoryUsedMiB != nil || g.Slices[1].MemoryUsedMiB != nil || *g.Slices[0].MemoryUsedMiB != 2048 {
					t.Errorf("%s", describe(g))
				}
			},
		},
		{
			name: "MIG instances without a PCI bus are grouped by parent product",
			edit: func(n *api.NodeListStub, _ *Input) {
				for _, i := range n.NodeResources.Devices[1].Instances {
					i.Locality = nil
				}
			},
			gpu: 0, health: "true ",
			check: func(t *testing.T, g GPU) {
				if g.Mode != ModeMIG || g.PCIBusID != "" || len(g.Slices) != 2 {
					t.Errorf("%s", describe(g))
				}
			},
		},
		{
			name: "memory total from the stats when the attribute is missing",
			edit: func(n *api.NodeListStub, _ *Input) {
				n.NodeResources.Devices[0].Attributes = nil
			},
			gpu: 0, health: "true ",
			check: func(t *testing.T, g GPU) {
				if num(g.MemoryTotalMiB) != "81920" {
					t.Errorf("%s", describe(g))
				}
			},
		},
		{
			name: "a task's memory on a sliced GPU needs every slice's figure",
			edit: func(_ *api.NodeListStub, in *Input) {
				delete(in.Stats[node1ID].Host.DeviceStats[2].InstanceStats, shareID(gpuM, 2))
			},
			gpu: 2, health: "true ",
			check: func(t *testing.T, g GPU) {
				if g.Allocations[0].MemoryUsedMiB != nil || num(g.Slices[1].Alloc.MemoryUsedMiB) != "1000" || g.Slices[2].Alloc.MemoryUsedMiB != nil {
					t.Errorf("%s", describe(g))
				}
			},
		},
		{
			name: "GPU figures from any share with stats",
			edit: func(_ *api.NodeListStub, in *Input) {
				delete(in.Stats[node1ID].Host.DeviceStats[2].InstanceStats, shareID(gpuM, 0))
			},
			gpu: 2, health: "true ",
			check: func(t *testing.T, g GPU) {
				if num(g.TemperatureC) != "51" || num(g.PowerW) != "250.5" || g.UUID != gpuM {
					t.Errorf("%s", describe(g))
				}
			},
		},
		{
			name: "an MPS GPU's figures are its shares' Physical GPU ones, a share's its task's",
			edit: func(_ *api.NodeListStub, in *Input) {
				// What the shares' own figures are must not reach the GPU.
				for _, ds := range in.Stats[node1ID].Host.DeviceStats[2].InstanceStats {
					ds.Stats.Attributes["GPU utilization"] = fstat(7, "%")
					ds.Stats.Attributes["Memory used"] = istat(3, 20480, "MiB")
				}
			},
			gpu: 2, health: "true ",
			check: func(t *testing.T, g GPU) {
				if num(g.UtilizationPct) != "55" || num(g.MemoryUsedMiB) != "12000" || num(g.MemoryTotalMiB) != "81920" ||
					num(g.Slices[0].UtilizationPct) != "0" || num(g.Slices[1].UtilizationPct) != "100" || num(g.Slices[1].MemoryUsedMiB) != "1000" {
					t.Errorf("%s", describe(g))
				}
			},
		},
		{
			name: "a device plugin of before the Physical GPU stats: the GPU's figures under a share's plain names",
			edit: func(_ *api.NodeListStub, in *Input) {
				for _, ds := range in.Stats[node1ID].Host.DeviceStats[2].InstanceStats {
					a := ds.Stats.Attributes
					a["GPU utilization"], a["Memory used"] = a["Physical GPU utilization"], a["Physical GPU memory used"]
					delete(a, "Physical GPU utilization")
					delete(a, "Physical GPU memory used")
				}
			},
			gpu: 2, health: "true ",
			check: func(t *testing.T, g GPU) {
				if num(g.UtilizationPct) != "55" || num(g.MemoryUsedMiB) != "12000" ||
					num(g.Slices[0].UtilizationPct) != "0" || num(g.Slices[1].UtilizationPct) != "100" {
					t.Errorf("%s", describe(g))
				}
			},
		},
		{
			name: "a share whose task is not measured has no utilisation",
			edit: func(_ *api.NodeListStub, in *Input) {
				a := in.Stats[node1ID].Host.DeviceStats[2].InstanceStats[shareID(gpuM, 1)].Stats.Attributes
				delete(a, "GPU utilization")
				delete(a, "MPS utilization")
			},
			gpu: 2, health: "true ",
			check: func(t *testing.T, g GPU) {
				if g.Slices[1].UtilizationPct != nil || num(g.Slices[2].UtilizationPct) != "100" || num(g.UtilizationPct) != "55" {
					t.Errorf("%s", describe(g))
				}
			},
		},
		{
			name: "no stats entry: stats unavailable, figures null",
			edit: func(_ *api.NodeListStub, in *Input) { delete(in.Stats, node1ID) },
			gpu:  0, health: "true ",
			check: func(t *testing.T, g GPU) {
				if g.MemoryUsedMiB != nil || g.UtilizationPct != nil || num(g.MemoryTotalMiB) != "81920" {
					t.Errorf("%s", describe(g))
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := fixtureInput()
			tc.edit(in.Nodes[0], in)
			v := Build(in)
			g := v.Nodes[0].GPUs[tc.gpu]
			if got := fmt.Sprintf("%v %s", g.Healthy, g.HealthDescription); got != tc.health {
				t.Errorf("health %q, want %q (%s)", got, tc.health, describe(g))
			}
			if tc.check != nil {
				tc.check(t, g)
			}
		})
	}
}

// Every GPU row has its index and UUID: from the device stats, which name
// each device's physical GPU; without stats an MPS GPU's index from its
// parent_index attribute and a whole GPU's UUID from its device ID.
func TestBuildGPUIdentity(t *testing.T) {
	tests := []struct {
		name string
		edit func(in *Input)
		want []string // index uuid, per GPU of node 1
	}{
		{"stats", func(*Input) {}, []string{"0 " + gpuA, "1 " + gpuB, "4 " + gpuM, "7 " + gpuMIG}},
		{"no stats", func(in *Input) { delete(in.Stats, node1ID) }, []string{"nil " + gpuA, "nil " + gpuB, "4 " + gpuM, "nil "}},
		{"one MIG instance without stats", func(in *Input) {
			delete(in.Stats[node1ID].Host.DeviceStats[1].InstanceStats, migA)
		}, []string{"0 " + gpuA, "1 " + gpuB, "4 " + gpuM, "7 " + gpuMIG}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := fixtureInput()
			tc.edit(in)
			var got []string
			for _, g := range Build(in).Nodes[0].GPUs {
				got = append(got, num(g.Index)+" "+g.UUID)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func nodeNames(v *View) []string {
	var out []string
	for _, n := range v.Nodes {
		out = append(out, n.Name)
	}
	return out
}

func TestBuildFilters(t *testing.T) {
	tests := []struct {
		name   string
		filter Filter
		nodes  []string
		queue  []string // job/state
	}{
		{"none", Filter{}, []string{"gpu-1", "gpu-2"}, []string{"big/blocked", "notebook/pending"}},
		{"pool gpu", Filter{Pool: "gpu"}, []string{"gpu-1"}, []string{"big/blocked", "notebook/pending"}},
		{"pool batch", Filter{Pool: "batch"}, []string{"gpu-2"}, nil},
		{"pool missing", Filter{Pool: "nope"}, nil, nil},
		{"pool all", Filter{Pool: "all"}, []string{"gpu-1", "gpu-2"}, []string{"big/blocked", "notebook/pending"}},
		{"node by name", Filter{Nodes: []string{"gpu-2"}}, []string{"gpu-2"}, []string{"big/blocked"}},
		{"node by ID prefix", Filter{Nodes: []string{"1111"}}, []string{"gpu-1"}, []string{"big/blocked", "notebook/pending"}},
		{"a node named is shown without GPUs", Filter{Nodes: []string{"cpu-1", "gpu-1"}}, []string{"cpu-1", "gpu-1"}, []string{"big/blocked", "notebook/pending"}},
		{"name prefix is no match", Filter{Nodes: []string{"gpu"}}, nil, []string{"big/blocked"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := fixtureInput()
			in.Filter = tc.filter
			v := Build(in)
			if got := nodeNames(v); !slices.Equal(got, tc.nodes) {
				t.Errorf("nodes %v, want %v", got, tc.nodes)
			}
			var q []string
			for _, e := range v.Queue {
				q = append(q, e.Job+"/"+e.State)
			}
			if !slices.Equal(q, tc.queue) {
				t.Errorf("queue %v, want %v", q, tc.queue)
			}
		})
	}
}

// TestJSONShape pins the field names of -json: changing one breaks the
// scripts that read them.
func TestJSONShape(t *testing.T) {
	b, err := json.Marshal(Build(fixtureInput()))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	keys := func(v any) []string { return slices.Sorted(maps.Keys(v.(map[string]any))) }
	first := func(v any) any { return v.([]any)[0] }
	nodes := doc["nodes"].([]any)
	gpus := nodes[0].(map[string]any)["gpus"].([]any)
	whole, mps := gpus[0], gpus[2]
	slice := first(mps.(map[string]any)["slices"])
	held := mps.(map[string]any)["slices"].([]any)[1].(map[string]any)["alloc"]
	queue := first(doc["queue"])

	tests := []struct {
		name string
		v    any
		want string
	}{
		{"top", doc, "generated_at nodes queue"},
		{"node", nodes[0], "class datacenter drain eligible gpus id name pool status"},
		{"node without stats", nodes[1], "class datacenter drain eligible gpus id name pool stats_error status"},
		{"whole gpu", whole, "allocations healthy index memory_total_mib memory_used_mib mode model pci_bus_id power_w slices temperature_c utilization_pct uuid"},
		{"mps gpu", mps, "allocations healthy index memory_total_mib memory_used_mib mode model pci_bus_id power_w slices temperature_c utilization_pct uuid"},
		{"unhealthy gpu", gpus[1], "allocations health_description healthy index memory_total_mib memory_used_mib mode model pci_bus_id power_w slices temperature_c utilization_pct uuid"},
		{"gpu without stats", nodes[1].(map[string]any)["gpus"].([]any)[0], "allocations healthy memory_total_mib memory_used_mib mode model pci_bus_id power_w slices temperature_c utilization_pct uuid"},
		{"slice", slice, "alloc healthy id memory_total_mib memory_used_mib profile type utilization_pct"},
		{"alloc", held, "alloc_id group job memory_used_mib namespace prediction task"},
		{"prediction", held.(map[string]any)["prediction"], "basis remaining_seconds runtime_seconds"},
		{"queue entry", queue, "count devices group job namespace never_fits pool prediction_basis reason since state waiting_seconds"},
		{"device ask", first(queue.(map[string]any)["devices"]), "count name"},
	}
	for _, tc := range tests {
		if got := strings.Join(keys(tc.v), " "); got != tc.want {
			t.Errorf("%s keys\n got %s\nwant %s", tc.name, got, tc.want)
		}
	}
	// Lists are never null, unknown numbers are.
	if s := whole.(map[string]any)["slices"]; s == nil {
		t.Error("slices of a whole GPU is null, want []")
	}
	if u := gpus[3].(map[string]any)["utilization_pct"]; u != nil {
		t.Errorf("MIG GPU utilization_pct = %v, want null", u)
	}
	empty, _ := json.Marshal(Build(&Input{Now: t0, Snapshot: &nomadview.Snapshot{}}))
	if string(empty) != `{"generated_at":"2026-12-03T10:00:00Z","nodes":[],"queue":[]}` {
		t.Errorf("empty view: %s", empty)
	}
}

func TestToMiB(t *testing.T) {
	tests := []struct {
		f    float64
		unit string
		want string
	}{
		{81920, "MiB", "81920"}, {80, "GiB", "81920"}, {1 << 30, "B", "1024"}, {2048, "KiB", "2"}, {5, "", "5"},
		{1000, "MB", "954"}, {3, "%", "nil"},
	}
	for _, tc := range tests {
		if got := num(toMiB(tc.f, tc.unit)); got != tc.want {
			t.Errorf("toMiB(%v, %q) = %s, want %s", tc.f, tc.unit, got, tc.want)
		}
	}
}

func TestBuildWhichNodesAreGPUNodes(t *testing.T) {
	tests := []struct {
		name    string
		drivers map[string]*api.DriverInfo
		devices []*api.NodeDeviceResource
		shown   bool
	}{
		{"no devices, no gpu driver", nil, nil, false},
		{"other vendors' devices only", nil, []*api.NodeDeviceResource{{Vendor: "xilinx", Type: "fpga", Name: "u250", Instances: []*api.NodeDevice{{ID: "f0"}}}}, false},
		{"gpu driver detected, device plugin silent", map[string]*api.DriverInfo{"gpu": {Detected: true}}, nil, true},
		{"gpu driver not detected", map[string]*api.DriverInfo{"gpu": {Detected: false}}, nil, false},
		{"nvidia devices", nil, []*api.NodeDeviceResource{{Vendor: "nvidia", Type: "gpu", Name: h100, Instances: []*api.NodeDevice{{ID: gpuA, Healthy: true}}}}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := &api.NodeListStub{ID: node3ID, Name: "n", Status: "ready", Drivers: tc.drivers, NodeResources: &api.NodeResources{Devices: tc.devices}}
			v := Build(&Input{Now: t0, Snapshot: &nomadview.Snapshot{Nodes: []*api.NodeListStub{n}}})
			if got := len(v.Nodes) == 1; got != tc.shown {
				t.Errorf("shown %v, want %v", got, tc.shown)
			}
		})
	}
}

// A node's layout groups attach to the GPUs their instances make (by
// UUID, or by PCI bus in MIG mode); a GPU in MIG mode with no instance
// is still shown; the controller's last change gives the reason.
func TestBuildLayouts(t *testing.T) {
	layout := func(uuid, bus string, idx int64, mig bool, current, desired, state string) *api.NodeDeviceResource {
		return &api.NodeDeviceResource{Vendor: "nvidia", Type: "layout", Name: uuid, Attributes: map[string]*api.Attribute{
			"index": intAttr(idx, ""), "pci_bus_id": strAttr(bus), "product": strAttr(h100), "mig_mode": {BoolVal: ptr(mig)},
			"layout": strAttr(current), "desired": strAttr(desired), "state": strAttr(state), "error": strAttr("none"), "pinned": {BoolVal: ptr(false)},
		}}
	}
	const gpuEmpty = "GPU-ffffffff-0000-0000-0000-000000000000"
	in := fixtureInput()
	n := in.Nodes[0]
	n.NodeResources.Devices = append(n.NodeResources.Devices,
		layout(gpuA, "0000:18:00.0", 0, false, "whole", "mps:8", "draining"),
		layout(gpuM, "0000:9a:00.0", 4, false, "mps:4", "none", "ready"),
		layout(gpuMIG, "0000:db:00.0", 7, true, "mig:1g.10gb,1g.10gb", "none", "ready"),
		layout(gpuEmpty, "0000:dc:00.0", 6, true, "mig:", "none", "ready"))
	in.Controller = &controller.Status{Layouts: map[string]controller.LayoutChange{
		controller.LayoutKey(node1ID, gpuA): {At: t0, From: "whole", To: "mps:8", Reason: "6 allocations wait for mps"},
	}}
	v := Build(in)
	got := map[string]string{}
	for _, g := range v.Nodes[0].GPUs {
		got[g.UUID] = modeText(g)
	}
	want := map[string]string{gpuA: "whole → mps:8 draining", gpuB: "whole", gpuM: "mps:4", gpuMIG: "mig:1g.10gb,1g.10gb", gpuEmpty: "mig:"}
	if !maps.Equal(got, want) {
		t.Errorf("modes %v\nwant %v", got, want)
	}
	var b strings.Builder
	writeLayoutNotes(&b, v.Nodes[0].GPUs, 200)
	if !strings.Contains(b.String(), "GPU 0 relaid 10:00:00: whole → mps:8: 6 allocations wait for mps") {
		t.Errorf("layout notes %q", b.String())
	}
}

// A pin naming no GPU of the node, as its device plugin publishes it on
// its layout groups, is the node's, shown under its GPUs and in -json.
func TestBuildStrayPins(t *testing.T) {
	stray := "nomad_gpu.pin.GPU-bogus=mps:4 names no GPU of this node, so it is ignored (its GPUs: " + gpuA + ")"
	layout := func(uuid, pins string) *api.NodeDeviceResource {
		return &api.NodeDeviceResource{Vendor: "nvidia", Type: "layout", Name: uuid, Attributes: map[string]*api.Attribute{
			"index": intAttr(0, ""), "layout": strAttr("whole"), "desired": strAttr("none"), "state": strAttr("ready"),
			"error": strAttr("none"), "pinned": {BoolVal: ptr(false)}, "stray_pins": strAttr(pins),
		}}
	}
	for _, c := range []struct {
		name, pins string
		want       []string
	}{
		{"none", "none", nil},
		{"one", stray, []string{stray}},
		{"two", stray + "; " + stray, []string{stray, stray}},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := fixtureInput()
			in.Nodes[0].NodeResources.Devices = append(in.Nodes[0].NodeResources.Devices, layout(gpuA, c.pins))
			v := Build(in)
			if got := v.Nodes[0].StrayPins; fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Fatalf("stray pins %q, want %q", got, c.want)
			}
			var b strings.Builder
			if err := WriteTable(&b, v, TableOptions{Width: 200}); err != nil {
				t.Fatal(err)
			}
			if has := strings.Contains(b.String(), "  ignored pin: "+stray+"\n"); has != (c.want != nil) {
				t.Errorf("table shows the pin: %v, want %v:\n%s", has, c.want != nil, &b)
			}
		})
	}
}
