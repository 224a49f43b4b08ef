package layoutplan

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nomad-gpu/nomad-gpu/contract/gpulayout"
	"github.com/nomad-gpu/nomad-gpu/internal/fgd"
)

var t0 = time.Date(2026, 12, 5, 8, 0, 0, 0, time.UTC)

// node is n GPUs of one node, laid out as layout, in pool "gpu".
func node(name string, n int, layout gpulayout.Layout) []GPU {
	out := make([]GPU, n)
	for i := range out {
		out[i] = GPU{Node: "id-" + name, NodeName: name, Pool: "gpu", UUID: fmt.Sprintf("GPU-%s-%d", name, i), Index: i, Current: layout}
	}
	return out
}

// held marks every instance of the GPUs held.
func held(gs []GPU) []GPU {
	for i := range gs {
		gs[i].Held = gs[i].Current.Instances()
	}
	return gs
}

// failed marks the GPUs at indexes failed. Their instances are left
// healthy, as the servers may still show them: the fault alone rules
// the GPU out.
func failed(gs []GPU, indexes ...int) []GPU {
	for _, i := range indexes {
		gs[i].Fault = "XID 79 (GPU has fallen off the bus)"
	}
	return gs
}

func join(parts ...[]GPU) []GPU {
	var out []GPU
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

var a100 = []Profile{{Name: "1g.10gb", Slices: 1, Max: 7}, {Name: "2g.20gb", Slices: 2, Max: 3}, {Name: "3g.40gb", Slices: 3, Max: 2}, {Name: "7g.80gb", Slices: 7, Max: 1}}

func migGPU(name string, index int, layout gpulayout.Layout) GPU {
	return GPU{Node: "id-" + name, NodeName: name, Pool: "gpu", UUID: fmt.Sprintf("GPU-%s-%d", name, index), Index: index,
		MIGMode: true, Profiles: a100, Current: layout}
}

func mpsAsks(n int) []Ask {
	return []Ask{{Kind: "mps", Count: 1, Allocs: n, Priority: 50, Job: "infer"}}
}

func wholeAsks(n int) []Ask {
	return []Ask{{Kind: "gpu", Count: 1, Allocs: n, Priority: 50, Job: "train"}}
}

// roomNodes are two nodes of 4 GPUs with 2 held whole GPUs each: n1's
// others free and whole, n2's one free whole GPU and one idle shared GPU
// (edit, when not nil, edits it). No node fits a 4-GPU ask, even relaid;
// moving n1's 2 allocations would free it, were n2's shared GPU whole.
func roomNodes(edit func(*GPU)) []GPU {
	n1, n2 := node("n1", 4, gpulayout.WholeGPU), node("n2", 4, gpulayout.WholeGPU)
	held(n1[:2])
	held(n2[:2])
	n2[3].Current = gpulayout.Shared(8)
	if edit != nil {
		edit(&n2[3])
	}
	return join(n1, n2)
}

// The planner's decisions over hand-made snapshots: the layout chosen for
// a known queue, the hysteresis, the bounds, a pinned GPU.
func TestPlan(t *testing.T) {
	recently, long := t0.Add(-time.Minute), t0.Add(-time.Hour)
	tests := []struct {
		name  string
		gpus  []GPU
		queue []Ask
		mix   []fgd.Shape
		b     Bounds
		want  []string // "node GPU: from → to"
	}{
		{name: "nothing waits: nothing changes", gpus: node("n1", 8, gpulayout.WholeGPU)},
		{name: "6 MPS asks, 8 whole GPUs free: one GPU becomes 8 shares",
			gpus: node("n1", 8, gpulayout.WholeGPU), queue: mpsAsks(6),
			want: []string{"n1 0: whole → mps:8"}},
		{name: "10 MPS asks: two GPUs",
			gpus: node("n1", 8, gpulayout.WholeGPU), queue: mpsAsks(10),
			want: []string{"n1 0: whole → mps:8", "n1 1: whole → mps:8"}},
		{name: "MPS asks fit free shares: nothing changes",
			gpus: join(node("n1", 1, gpulayout.Shared(8)), node("n2", 2, gpulayout.WholeGPU)), queue: mpsAsks(8)},
		{name: "whole asks wait, an idle shared GPU goes back to whole",
			gpus:  join(held(node("n1", 3, gpulayout.WholeGPU)), node("n2", 1, gpulayout.Shared(8))),
			queue: wholeAsks(1), want: []string{"n2 0: mps:8 → whole"}},
		{name: "a shared GPU with a share held stays",
			gpus: func() []GPU {
				g := join(held(node("n1", 3, gpulayout.WholeGPU)), node("n2", 1, gpulayout.Shared(8)))
				g[3].Held = []string{"mps"}
				return g
			}(), queue: wholeAsks(1)},
		{name: "a 2-GPU ask relays two GPUs of one node",
			gpus: join(node("n1", 2, gpulayout.Shared(4)), node("n2", 1, gpulayout.Shared(4))), queue: []Ask{{Kind: "gpu", Count: 2, Allocs: 1, Job: "big"}},
			want: []string{"n1 0: mps:4 → whole", "n1 1: mps:4 → whole"}},
		{name: "a share count from the bounds",
			gpus: node("n1", 2, gpulayout.WholeGPU), queue: mpsAsks(1), b: Bounds{Default: PoolBounds{Shares: 4}},
			want: []string{"n1 0: whole → mps:4"}},
		{name: "an ask of more shares than a GPU has waits",
			gpus: node("n1", 2, gpulayout.WholeGPU), queue: []Ask{{Kind: "mps", Count: 9, Allocs: 1}}},
		{name: "MPS not allowed in the pool",
			gpus: node("n1", 8, gpulayout.WholeGPU), queue: mpsAsks(6), b: Bounds{Pools: map[string]PoolBounds{"gpu": {Allowed: []gpulayout.Kind{gpulayout.Whole, gpulayout.MIG}}}}},
		{name: "MPS allowed in another pool only",
			gpus: node("n1", 8, gpulayout.WholeGPU), queue: mpsAsks(6), b: Bounds{Default: PoolBounds{Allowed: []gpulayout.Kind{gpulayout.Whole}}, Pools: map[string]PoolBounds{"gpu": {}}},
			want: []string{"n1 0: whole → mps:8"}},
		{name: "a minimum of whole GPUs per node",
			gpus: join(node("n1", 2, gpulayout.WholeGPU), node("n2", 3, gpulayout.WholeGPU)), queue: mpsAsks(1), b: Bounds{Default: PoolBounds{MinWhole: 2}},
			want: []string{"n2 0: whole → mps:8"}},
		{name: "GPUs never relaid",
			gpus: node("n1", 2, gpulayout.WholeGPU), queue: mpsAsks(1), b: Bounds{Default: PoolBounds{Never: []string{"GPU-n1-0"}}},
			want: []string{"n1 1: whole → mps:8"}},
		{name: "a pinned GPU is left alone",
			gpus: func() []GPU {
				g := node("n1", 2, gpulayout.WholeGPU)
				g[0].Desired, g[0].Pinned = gpulayout.WholeGPU, true
				g[1].Desired, g[1].Pinned = gpulayout.WholeGPU, true
				return g
			}(), queue: mpsAsks(1)},
		{name: "a failed GPU is never relaid: another serves the shares",
			gpus:  failed(node("n1", 2, gpulayout.WholeGPU), 0),
			queue: mpsAsks(1), want: []string{"n1 1: whole → mps:8"}},
		{name: "a failed GPU's shares are no room: another GPU is relaid",
			gpus:  join(failed(node("n1", 1, gpulayout.Shared(8)), 0), node("n2", 1, gpulayout.WholeGPU)),
			queue: mpsAsks(1), want: []string{"n2 0: whole → mps:8"}},
		{name: "a failed whole GPU does not count toward a 2-GPU ask: an idle shared GPU beside it is whole again",
			gpus: func() []GPU {
				g := join(failed(node("n1", 2, gpulayout.WholeGPU), 0), node("n1", 2, gpulayout.Shared(8)))
				for i := range g {
					g[i].Index, g[i].UUID = i, fmt.Sprintf("GPU-n1-%d", i)
				}
				return g
			}(), queue: []Ask{{Kind: "gpu", Count: 2, Allocs: 1, Job: "big"}},
			want: []string{"n1 2: mps:8 → whole"}},
		{name: "a GPU held by the controller (its shares unhealthy) is no room and keeps its layout",
			gpus: func() []GPU {
				g := node("n1", 1, gpulayout.Shared(8))
				g[0].Held = []string{"mps"}
				g[0].Unhealthy = slices.Repeat([]string{"mps"}, 7)
				return join(g, node("n2", 1, gpulayout.WholeGPU))
			}(), queue: mpsAsks(1), want: []string{"n2 0: whole → mps:8"}},
		{name: "a MIG GPU with a failed instance keeps its geometry",
			gpus: func() []GPU {
				g := migGPU("m1", 0, gpulayout.Geometry("1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb"))
				g.Unhealthy = []string{"mig/1g.10gb"}
				return []GPU{g}
			}(), queue: []Ask{{Kind: "mig/3g.40gb", Count: 1, Allocs: 1}}},
		{name: "hysteresis: a GPU changed a minute ago is not used while another serves",
			gpus: func() []GPU {
				g := node("n1", 2, gpulayout.WholeGPU)
				g[0].Changed, g[1].Changed = recently, long
				return g
			}(), queue: mpsAsks(1), b: Bounds{MinInterval: 10 * time.Minute},
			want: []string{"n1 1: whole → mps:8"}},
		{name: "hysteresis: unless no other GPU can serve the queue",
			gpus: func() []GPU {
				g := join(held(node("n1", 1, gpulayout.WholeGPU)), node("n2", 1, gpulayout.WholeGPU))
				g[1].Changed = recently
				return g
			}(), queue: mpsAsks(1), b: Bounds{MinInterval: 10 * time.Minute},
			want: []string{"n2 0: whole → mps:8"}},
		{name: "a layout on its way counts: no second change for the same queue",
			gpus: func() []GPU {
				g := node("n1", 2, gpulayout.WholeGPU)
				g[0].Desired = gpulayout.Shared(8)
				return g
			}(), queue: mpsAsks(6)},
		{name: "whole asks fill the whole GPUs, then an idle shared GPU on the same node is whole again",
			gpus: func() []GPU {
				g := join(node("n1", 1, gpulayout.Shared(8)), node("n1", 3, gpulayout.WholeGPU))
				for i := range g {
					g[i].Index, g[i].UUID = i, fmt.Sprintf("GPU-n1-%d", i)
				}
				return g
			}(), queue: wholeAsks(4), want: []string{"n1 0: mps:8 → whole"}},
		{name: "a 4-GPU ask no node fits even relaid: the idle shared GPU of a node that could hold it is whole again, room to move work",
			gpus: roomNodes(nil), queue: []Ask{{Kind: "gpu", Count: 4, Allocs: 1, Job: "hpc"}},
			want: []string{"n2 3: mps:8 → whole"}},
		{name: "room: of two nodes with an idle shared GPU, the one with more whole GPUs free after",
			gpus: func() []GPU {
				g := roomNodes(nil)
				g[3].Current = gpulayout.Shared(8) // n1: 2 held, 1 free, 1 idle shared
				g[5].Held = nil                    // n2: 1 held, 2 free, 1 idle shared
				return g
			}(), queue: []Ask{{Kind: "gpu", Count: 4, Allocs: 1, Job: "hpc"}},
			want: []string{"n2 3: mps:8 → whole"}},
		{name: "room: not on a node that could not hold the ask",
			gpus: roomNodes(nil), queue: []Ask{{Kind: "gpu", Count: 5, Allocs: 1, Job: "hpc"}}},
		{name: "room: a shared GPU with a share held stays",
			gpus: roomNodes(func(g *GPU) { g.Held = []string{"mps"} }), queue: []Ask{{Kind: "gpu", Count: 4, Allocs: 1, Job: "hpc"}}},
		{name: "room: a shared GPU changed a minute ago stays (hysteresis)",
			gpus: roomNodes(func(g *GPU) { g.Changed = recently }), queue: []Ask{{Kind: "gpu", Count: 4, Allocs: 1, Job: "hpc"}},
			b: Bounds{MinInterval: 10 * time.Minute}},
		{name: "room: a shared GPU an MPS ask takes this round stays",
			gpus: roomNodes(nil), queue: []Ask{{Kind: "gpu", Count: 4, Allocs: 1, Priority: 30, Job: "hpc"}, {Kind: "mps", Count: 1, Allocs: 1, Priority: 80, Job: "infer"}}},
		{name: "room: not where whole GPUs are not allowed",
			gpus: roomNodes(nil), queue: []Ask{{Kind: "gpu", Count: 4, Allocs: 1, Job: "hpc"}},
			b: Bounds{Default: PoolBounds{Allowed: []gpulayout.Kind{gpulayout.MPS}}}},
		{name: "higher priority first: the whole ask gets the only free GPU",
			gpus:  join(node("n1", 1, gpulayout.Shared(8))),
			queue: []Ask{{Kind: "mps", Count: 1, Allocs: 1, Priority: 30}, {Kind: "gpu", Count: 1, Allocs: 1, Priority: 80, Job: "urgent"}},
			want:  []string{"n1 0: mps:8 → whole"}},
		{name: "a MIG GPU takes a geometry of the profile that waits",
			gpus:  []GPU{migGPU("m1", 0, gpulayout.Geometry("1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb"))},
			queue: []Ask{{Kind: "mig/3g.40gb", Count: 1, Allocs: 2}},
			want:  []string{"m1 0: mig:1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb → mig:3g.40gb,3g.40gb"}},
		{name: "a MIG GPU with no instances gets some",
			gpus:  []GPU{migGPU("m1", 0, gpulayout.Geometry())},
			queue: []Ask{{Kind: "mig/2g.20gb", Count: 1, Allocs: 1}},
			want:  []string{"m1 0: mig: → mig:2g.20gb,2g.20gb,2g.20gb"}},
		{name: "a MIG GPU never becomes shares or whole",
			gpus:  []GPU{migGPU("m1", 0, gpulayout.Geometry("3g.40gb", "3g.40gb"))},
			queue: append(mpsAsks(1), wholeAsks(1)...)},
		{name: "a profile the GPU cannot make waits",
			gpus:  []GPU{migGPU("m1", 0, gpulayout.Geometry("3g.40gb", "3g.40gb"))},
			queue: []Ask{{Kind: "mig/4g.40gb", Count: 1, Allocs: 1}}},
		{name: "the least fragmentation: shares where whole GPUs are stranded anyway",
			// n1 has two free GPUs; n2 one beside a held one. The mix is
			// half 2-GPU asks: relaying on n2 strands nothing a 2-GPU ask
			// could use (n2 cannot serve one anyway): its FGD goes 1 → 0.5,
			// n1's would go 1 → 1.5.
			gpus:  join(node("n1", 2, gpulayout.WholeGPU), held(node("n2", 1, gpulayout.WholeGPU)), node("n2", 2, gpulayout.WholeGPU)[1:]),
			queue: mpsAsks(1),
			mix:   []fgd.Shape{{Kind: "gpu", Count: 2, Weight: 0.5}, {Kind: "mps", Count: 1, Weight: 0.5}},
			want:  []string{"n2 1: whole → mps:8"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Plan(Input{GPUs: tt.gpus, Queue: tt.queue, Mix: tt.mix, Bounds: tt.b, Now: t0})
			var lines []string
			for _, d := range got {
				lines = append(lines, fmt.Sprintf("%s %d: %s → %s", d.NodeName, d.Index, d.From, d.To))
			}
			if strings.Join(lines, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("decisions:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

// A decision says why, with the fragmentation before and after: 8 whole
// GPUs free against a mix of MPS asks are all stranded (8 GPU); with one
// GPU as 8 shares, only the other 7 are (7 GPU).
func TestDecisionReason(t *testing.T) {
	got := Plan(Input{GPUs: node("gpu-3", 8, gpulayout.WholeGPU), Queue: mpsAsks(6), Mix: []fgd.Shape{{Kind: "mps", Count: 1, Weight: 1}}, Now: t0})
	if len(got) != 1 {
		t.Fatalf("%d decisions, want 1", len(got))
	}
	want := `node gpu-3 GPU 0: whole → mps:8: 6 allocations wait for mps (job "infer" first), and no free one fits; fragmentation 8.00 → 7.00 GPU`
	if s := got[0].String(); s != want {
		t.Errorf("decision:\n%s\nwant:\n%s", s, want)
	}
}

func TestParse(t *testing.T) {
	tests := []struct {
		in, want, err string
	}{
		{in: "whole", want: "whole"},
		{in: "mps:8", want: "mps:8"},
		{in: "mig:3g.40gb,1g.10gb, 1g.10gb+me", want: "mig:1g.10gb,1g.10gb+me,3g.40gb"},
		{in: "mig:1c.3g.40gb", want: "mig:1c.3g.40gb"},
		{in: "mps:1", err: "the share count must be 2 to 48"},
		{in: "mps", err: "the share count must be 2 to 48"},
		{in: "whole:2", err: "whole takes nothing after it"},
		{in: "mig:3g", err: `"3g" is not a MIG profile`},
		{in: "mig:", want: "mig:"},
		{in: "mig:1g.10gb,", err: `"" is not a MIG profile`},
		{in: "mig:1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb", err: "8 instances; a GPU has at most 7"},
		{in: "half", err: "unknown layout; allowed: whole, mps:<shares>"},
	}
	for _, tt := range tests {
		l, err := gpulayout.Parse(tt.in)
		switch {
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("Parse(%q) error %v, want %q", tt.in, err, tt.err)
		case tt.err == "" && err != nil:
			t.Errorf("Parse(%q): %v", tt.in, err)
		case tt.err == "" && l.String() != tt.want:
			t.Errorf("Parse(%q) = %s, want %s", tt.in, l, tt.want)
		}
	}
}

// Instances the round has just given to a higher-priority allocation are
// spoken for: a lower-priority ask that fits nowhere must not have their
// GPU relaid from under it, or the higher-priority allocation would be
// planned onto instances that are gone.
func TestPlanNeverRelaysInstancesGivenThisRound(t *testing.T) {
	tests := []struct {
		name  string
		gpus  []GPU
		queue []Ask
		want  []string // "node GPU: from → to"
	}{
		{name: "the only whole GPU went to an urgent whole ask: the MPS ask waits",
			gpus:  node("n1", 1, gpulayout.WholeGPU),
			queue: []Ask{{Kind: "mps", Count: 1, Allocs: 1, Priority: 30, Job: "infer"}, {Kind: "gpu", Count: 1, Allocs: 1, Priority: 80, Job: "urgent"}}},
		{name: "one share of a shared GPU went to an urgent MPS ask: the whole ask waits",
			gpus:  node("n1", 1, gpulayout.Shared(8)),
			queue: []Ask{{Kind: "gpu", Count: 1, Allocs: 1, Priority: 30, Job: "train"}, {Kind: "mps", Count: 1, Allocs: 1, Priority: 80, Job: "urgent"}}},
		{name: "the whole ask has the shared GPU nothing took relaid",
			gpus:  node("n1", 2, gpulayout.Shared(8)),
			queue: []Ask{{Kind: "gpu", Count: 1, Allocs: 1, Priority: 30, Job: "train"}, {Kind: "mps", Count: 1, Allocs: 1, Priority: 80, Job: "urgent"}},
			want:  []string{"n1 1: mps:8 → whole"}},
		{name: "one MIG instance went to an urgent ask: another profile waits",
			gpus: []GPU{migGPU("m1", 0, gpulayout.Geometry("3g.40gb", "3g.40gb"))},
			queue: []Ask{{Kind: "mig/1g.10gb", Count: 1, Allocs: 1, Priority: 30, Job: "small"},
				{Kind: "mig/3g.40gb", Count: 1, Allocs: 1, Priority: 80, Job: "urgent"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var lines []string
			for _, d := range Plan(Input{GPUs: tt.gpus, Queue: tt.queue, Now: t0}) {
				lines = append(lines, fmt.Sprintf("%s %d: %s → %s", d.NodeName, d.Index, d.From, d.To))
			}
			if strings.Join(lines, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("decisions:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}
