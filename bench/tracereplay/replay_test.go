package tracereplay

import (
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestClusterSlice(t *testing.T) {
	mps := Cluster{GPUsPerNode: 8, MPSGPUs: 2, MPSShares: 4}
	mig := Cluster{GPUsPerNode: 8, MIGGPUs: 1, MIGProfiles: []string{"3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"}}
	slices := Features{Slices: true}
	layouts := Features{Layouts: true}
	tests := []struct {
		name string
		c    Cluster
		j    Job
		f    Features
		want Slice
	}{
		{"whole", mps, Job{GPUs: 2, Fraction: 1}, slices, Slice{Kind: "gpu", Count: 2, GPUs: 2}},
		{"a fraction without slices takes a GPU", mps, Job{GPUs: 1, Fraction: 0.25}, Features{}, Slice{Kind: "gpu", Count: 1, GPUs: 1}},
		{"a quarter is one share", mps, Job{GPUs: 1, Fraction: 0.25}, slices, Slice{Kind: "mps", Count: 1, GPUs: 0.25}},
		{"a bit more than a quarter is two", mps, Job{GPUs: 1, Fraction: 0.3}, slices, Slice{Kind: "mps", Count: 2, GPUs: 0.5}},
		{"every share is a whole GPU", mps, Job{GPUs: 1, Fraction: 0.9}, slices, Slice{Kind: "gpu", Count: 1, GPUs: 1}},
		{"MIG: the smallest profile that covers", mig, Job{GPUs: 1, Fraction: 0.25}, slices, Slice{Kind: "mig", Count: 1, Profile: "2g.20gb", GPUs: 2.0 / 7}},
		{"MIG: a seventh", mig, Job{GPUs: 1, Fraction: 0.1}, slices, Slice{Kind: "mig", Count: 1, Profile: "1g.10gb", GPUs: 1.0 / 7}},
		{"MIG: none covers", mig, Job{GPUs: 1, Fraction: 0.6}, slices, Slice{Kind: "gpu", Count: 1, GPUs: 1}},
		// Bigger than a node's whole GPUs with slices: members of them,
		// the same in every configuration.
		{"members of a node's whole GPUs with slices", mps, Job{GPUs: 16, Fraction: 1}, Features{}, Slice{Kind: "gpu", Count: 6, Members: 3, GPUs: 18}},
		{"members with slices too", mps, Job{GPUs: 16, Fraction: 1}, slices, Slice{Kind: "gpu", Count: 6, Members: 3, GPUs: 18}},
		// Layouts: shares of a relaid GPU (8 by default), every GPU whole
		// for whole asks; the static MPS GPUs play no part.
		{"layouts: a quarter is two of 8 shares", mps, Job{GPUs: 1, Fraction: 0.25}, layouts, Slice{Kind: "mps", Count: 2, GPUs: 0.25}},
		{"layouts: a bit more than a quarter is three", mps, Job{GPUs: 1, Fraction: 0.3}, layouts, Slice{Kind: "mps", Count: 3, GPUs: 0.375}},
		{"layouts: a tiny fraction is one share", mps, Job{GPUs: 1, Fraction: 0.01}, layouts, Slice{Kind: "mps", Count: 1, GPUs: 0.125}},
		{"layouts: every share is a whole GPU", mps, Job{GPUs: 1, Fraction: 0.95}, layouts, Slice{Kind: "gpu", Count: 1, GPUs: 1}},
		{"layouts: LayoutShares", Cluster{GPUsPerNode: 8, LayoutShares: 4}, Job{GPUs: 1, Fraction: 0.3}, layouts, Slice{Kind: "mps", Count: 2, GPUs: 0.5}},
		{"layouts: members as without", mps, Job{GPUs: 16, Fraction: 1}, layouts, Slice{Kind: "gpu", Count: 6, Members: 3, GPUs: 18}},
		{"without slices' GPUs a node's 8 whole", Cluster{GPUsPerNode: 8}, Job{GPUs: 8, Fraction: 1}, slices, Slice{Kind: "gpu", Count: 8, GPUs: 8}},
		{"layouts: on MIG-only clusters too", mig, Job{GPUs: 1, Fraction: 0.5}, layouts, Slice{Kind: "mps", Count: 4, GPUs: 0.5}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.c.Slice(tt.j, tt.f); got != tt.want {
				t.Errorf("Slice = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestClusterValidate(t *testing.T) {
	ok := Cluster{Nodes: 4, MinNodes: 2, MaxNodes: 6, GPUsPerNode: 8, MPSGPUs: 2, MPSShares: 4}
	tests := []struct {
		name string
		edit func(*Cluster)
		want string
	}{
		{"valid", func(*Cluster) {}, ""},
		{"no GPUs", func(c *Cluster) { c.GPUsPerNode = 0 }, "gpus_per_node: 0; allowed: 1 or more"},
		{"min above max", func(c *Cluster) { c.MinNodes = 7 }, "min_nodes, max_nodes: 7, 6"},
		{"too many slice GPUs", func(c *Cluster) { c.MPSGPUs = 9 }, "mps_gpus, mig_gpus: 9, 0"},
		{"shares", func(c *Cluster) { c.MPSShares = 1 }, "mps_shares: 1; allowed: 2 to 48"},
		{"MIG without profiles", func(c *Cluster) { c.MIGGPUs = 1 }, "mig_profiles: empty"},
		{"bad profile", func(c *Cluster) { c.MIGGPUs, c.MIGProfiles = 1, []string{"big"} }, `mig_profiles[0]: "big" is not a MIG profile`},
		{"profiles over a GPU", func(c *Cluster) { c.MIGGPUs, c.MIGProfiles = 1, []string{"4g.40gb", "4g.40gb"} }, "take 8 sevenths"},
		{"layout shares default", func(c *Cluster) { c.LayoutShares = 0 }, ""},
		{"layout shares 2", func(c *Cluster) { c.LayoutShares = 2 }, ""},
		{"layout shares 48", func(c *Cluster) { c.LayoutShares = 48 }, ""},
		{"layout shares 1", func(c *Cluster) { c.LayoutShares = 1 }, "layout_shares: 1; allowed: 2 to 48"},
		{"layout shares 49", func(c *Cluster) { c.LayoutShares = 49 }, "layout_shares: 49; allowed: 2 to 48"},
		{"layout shares negative", func(c *Cluster) { c.LayoutShares = -8 }, "layout_shares: -8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := ok
			tt.edit(&c)
			err := c.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Validate: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("Validate = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestParseConfigs(t *testing.T) {
	got, err := ParseConfigs(DefaultConfigs, AutoscaleGPUQueue)
	if err != nil {
		t.Fatal(err)
	}
	want := []Config{
		{Name: "baseline"},
		{Name: "+slices", Features: Features{Slices: true}},
		{Name: "+layouts", Features: Features{Layouts: true}},
		{Name: "+preemption", Features: Features{Preemption: true, Checkpoints: true}},
		{Name: "+autoscale", Features: Features{Autoscale: AutoscaleGPUQueue}},
		{Name: "nomad-gpu", Features: Features{Layouts: true, Preemption: true, Checkpoints: true, Moves: true, ScaleIn: true, Gangs: true, Autoscale: AutoscaleGPUQueue}},
		{Name: "nomad-gpu-fixed", Features: Features{Layouts: true, Preemption: true, Checkpoints: true, Moves: true, Gangs: true}},
		{Name: "stock-preemption", Features: Features{Preemption: true}, Reference: true},
		{Name: "target-value", Features: Features{Autoscale: AutoscaleTargetValue}, Reference: true},
		{Name: "fixed-like-autoscale", Reference: true, NodesLike: "+autoscale"},
	}
	if len(got) != len(want) {
		t.Fatalf("ParseConfigs = %+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("config %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	tv, err := ParseConfigs("baseline, nomad-gpu", AutoscaleTargetValue)
	if err != nil || tv[1].Name != "nomad-gpu (target-value)" || tv[1].Autoscale != AutoscaleTargetValue || tv[0].Autoscale != "" || tv[1].ScaleIn {
		t.Errorf("with target-value: %+v, %v", tv, err)
	}
	// fixed-like-autoscale matches +autoscale by the name target-value gives it.
	if fl, err := ParseConfigs("+autoscale,fixed-like-autoscale", AutoscaleTargetValue); err != nil || fl[1].NodesLike != fl[0].Name {
		t.Errorf("fixed-like-autoscale with target-value: %+v, %v", fl, err)
	}
	// nomad-gpu without scale-in by consolidation, what it adds.
	if no, err := ParseConfigs("nomad-gpu-no-scale-in", AutoscaleGPUQueue); err != nil || no[0].ScaleIn || !no[0].Moves || no[0].Autoscale != AutoscaleGPUQueue {
		t.Errorf("nomad-gpu-no-scale-in: %+v, %v", no, err)
	}
	for list, msg := range map[string]string{
		"baseline,fast":                     `configs: "fast" is not a configuration; allowed: baseline, +slices`,
		"baseline,baseline":                 `configs: "baseline" is listed twice`,
		"baseline,nomad-gpu-fixed@0":        `configs: "nomad-gpu-fixed@0": node count "0"; allowed: a configuration, or a fixed one with @N`,
		"baseline,baseline@x":               `configs: "baseline@x": node count "x"`,
		"nomad-gpu@3":                       `configs: "nomad-gpu@3": a node count for nomad-gpu; allowed: @N on a fixed configuration`,
		"+autoscale,fixed-like-autoscale@2": `configs: "fixed-like-autoscale@2": a node count for fixed-like-autoscale`,
		"fast@3":                            `configs: "fast@3" is not a configuration`,
	} {
		if _, err := ParseConfigs(list, AutoscaleGPUQueue); err == nil || !strings.HasPrefix(err.Error(), msg) {
			t.Errorf("ParseConfigs(%q) = %v, want %q", list, err, msg)
		}
	}
	// A fixed configuration on its own node count, beside the others'.
	if sz, err := ParseConfigs("baseline,nomad-gpu-fixed@3", AutoscaleGPUQueue); err != nil || sz[1].Name != "nomad-gpu-fixed@3" || sz[1].Nodes != 3 || !sz[1].Layouts || sz[0].Nodes != 0 ||
		sz[1].StartNodes(Cluster{Nodes: 4}) != 3 || sz[1].ReservedNodes(Cluster{Nodes: 4}) != 3 {
		t.Errorf("nomad-gpu-fixed@3: %+v, %v", sz, err)
	}
	// nomad-gpu whose burst nodes are spot nodes; gpu-queue only.
	if sp, err := ParseConfigs("nomad-gpu-spot", AutoscaleGPUQueue); err != nil || !sp[0].Spot || !sp[0].ScaleIn || !sp[0].Gangs || sp[0].Autoscale != AutoscaleGPUQueue {
		t.Errorf("nomad-gpu-spot: %+v, %v", sp, err)
	}
	if _, err := ParseConfigs("nomad-gpu-spot", AutoscaleTargetValue); err == nil || !strings.Contains(err.Error(), "strategy: spot: on without checkpoints or gpu-queue") {
		t.Errorf("nomad-gpu-spot with target-value: %v", err)
	}
	if _, err := ParseConfigs("+autoscale", "hpa"); err == nil || !strings.Contains(err.Error(), `strategy: autoscale: "hpa" is not a strategy`) {
		t.Errorf("a bad strategy: %v", err)
	}
}

func TestFeaturesValidate(t *testing.T) {
	tests := []struct {
		name string
		f    Features
		want string
	}{
		{"baseline", Features{}, ""},
		{"slices", Features{Slices: true}, ""},
		{"layouts", Features{Layouts: true}, ""},
		{"layouts with everything else", Features{Layouts: true, Preemption: true, Checkpoints: true, Autoscale: AutoscaleGPUQueue}, ""},
		{"slices and layouts", Features{Slices: true, Layouts: true}, "slices, layouts: both on"},
		{"checkpoints alone", Features{Checkpoints: true}, "checkpoints: on without preemption"},
		{"moves without checkpoints", Features{Preemption: true, Moves: true}, "moves: on without checkpoints"},
		{"reservations without gangs", Features{Preemption: true, Reservations: true}, "reservations: on without gangs or preemption"},
		{"reservations without preemption", Features{Gangs: true, Reservations: true}, "Nomad's batch preemption must be on"},
		{"scale-in with moves and gpu-queue", Features{Preemption: true, Checkpoints: true, Moves: true, ScaleIn: true, Autoscale: AutoscaleGPUQueue}, ""},
		{"scale-in without moves", Features{Preemption: true, Checkpoints: true, ScaleIn: true, Autoscale: AutoscaleGPUQueue}, "scale_in: on without moves or gpu-queue"},
		{"scale-in on a fixed cluster", Features{Preemption: true, Checkpoints: true, Moves: true, ScaleIn: true}, "scale_in: on without moves or gpu-queue"},
		{"scale-in with target-value", Features{Preemption: true, Checkpoints: true, Moves: true, ScaleIn: true, Autoscale: AutoscaleTargetValue}, "scale_in: on without moves or gpu-queue"},
		{"spot", Features{Preemption: true, Checkpoints: true, Gangs: true, Autoscale: AutoscaleGPUQueue, Spot: true}, ""},
		{"spot without checkpoints", Features{Preemption: true, Gangs: true, Autoscale: AutoscaleGPUQueue, Spot: true}, "spot: on without checkpoints or gpu-queue"},
		{"spot on a fixed cluster", Features{Preemption: true, Checkpoints: true, Spot: true}, "spot: on without checkpoints or gpu-queue"},
		{"spot with target-value", Features{Preemption: true, Checkpoints: true, Autoscale: AutoscaleTargetValue, Spot: true}, "spot: on without checkpoints or gpu-queue"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.f.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Validate: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("Validate = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// -beyond is gpu-queue's: the configurations it autoscales are named
// with it, and the fixed cluster matching one's node-hours follows the
// name; target-value and fixed configurations are as they were.
func TestParamsBeyond(t *testing.T) {
	p := Params{Jobs: 10, Compression: 25, Nodes: 4, MinNodes: 2, MaxNodes: 6, GPUsPerNode: 8, Strategy: AutoscaleGPUQueue,
		Configs: "baseline,+autoscale,nomad-gpu,target-value,fixed-like-autoscale", Beyond: 8 * time.Second}
	s, err := p.Load()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range s.Configs {
		names = append(names, c.Name)
	}
	want := []string{"baseline", "+autoscale (beyond 8s)", "nomad-gpu (beyond 8s)", "target-value", "fixed-like-autoscale"}
	if !slices.Equal(names, want) || s.Configs[4].NodesLike != want[1] || s.Policy.Beyond != 8*time.Second {
		t.Errorf("configs %q, fixed like %q, beyond %s; want %q, %q, 8s", names, s.Configs[4].NodesLike, s.Policy.Beyond, want, want[1])
	}
	p.Beyond = 0
	if s, err := p.Load(); err != nil || s.Configs[1].Name != "+autoscale" || s.Policy.Beyond != 0 {
		t.Errorf("without beyond: %v, %v", s.Configs, err)
	}
}

func TestLayoutCounts(t *testing.T) {
	cs := []LayoutChange{{To: "mps:8"}, {To: "whole"}, {To: "mps:4"}, {To: "mig:1g.10gb"}}
	if m, w := LayoutCounts(cs); m != 2 || w != 1 {
		t.Errorf("LayoutCounts = %d to mps, %d to whole; want 2, 1", m, w)
	}
}

func TestParamsLoadErrors(t *testing.T) {
	base := Params{Jobs: 10, Compression: 360, Nodes: 4, MinNodes: 2, MaxNodes: 6, GPUsPerNode: 8, Configs: "baseline", Strategy: AutoscaleGPUQueue}
	tests := []struct {
		name string
		edit func(*Params)
		want string
	}{
		{"compression", func(p *Params) { p.Compression = 0 }, "compression: 0; allowed: a number above 0"},
		{"jobs", func(p *Params) { p.Jobs = -1 }, "jobs: -1; allowed: 0 (by -load) or more"},
		{"missing philly", func(p *Params) { p.Philly = "/nonexistent.csv" }, "philly: open /nonexistent.csv"},
		{"missing trace", func(p *Params) { p.CSV = "/nonexistent.csv" }, "trace: open /nonexistent.csv"},
		{"cluster", func(p *Params) { p.GPUsPerNode = 0 }, "gpus_per_node: 0"},
		{"preemption cooldown", func(p *Params) { p.PreemptionCooldown = -time.Second }, "preemption-cooldown: -1s; allowed: 0 (off) or more"},
		{"layout shares", func(p *Params) { p.LayoutShares = 64 }, "layout_shares: 64; allowed: 2 to 48"},
		{"layout min interval", func(p *Params) { p.LayoutMinInterval = -time.Second }, "layout-min-interval: -1s; allowed: 0 or more"},
		{"price spot", func(p *Params) { p.PriceSpot = -1 }, "price-spot: -1; allowed: 0 or more"},
		{"spot reclaim rate", func(p *Params) { p.SpotReclaimRate = -0.5 }, "spot-reclaim-rate: -0.5; allowed: 0 (never) or more reclaims per spot node-hour"},
		{"spot reclaim rate NaN", func(p *Params) { p.SpotReclaimRate = math.NaN() }, "spot-reclaim-rate: NaN; allowed"},
		{"spot with target-value", func(p *Params) { p.Configs, p.Strategy = "baseline,nomad-gpu-spot", AutoscaleTargetValue }, "strategy: spot: on without checkpoints or gpu-queue"},
		{"beyond", func(p *Params) { p.Beyond = 500 * time.Millisecond }, "beyond: 500ms; allowed: 0 (off) or 1s or more"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := base
			tt.edit(&p)
			if _, err := p.Load(); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Load = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// The reclaim rate is the cluster's only where a configuration has spot
// nodes: the other configurations' records stay as they were. The real
// engine refuses a spot configuration, naming it.
func TestSpotParams(t *testing.T) {
	base := Params{Jobs: 10, Compression: 25, Nodes: 4, MinNodes: 2, MaxNodes: 6, GPUsPerNode: 8, Strategy: AutoscaleGPUQueue,
		OfferedLoad: 0.85, Window: 2 * time.Hour, SpotReclaimRate: 0.05, PriceSpot: 30, Seed: 1}
	for configs, rate := range map[string]float64{"baseline,nomad-gpu": 0, "baseline,nomad-gpu-spot": 0.05} {
		p := base
		p.Configs = configs
		s, err := p.Load()
		if err != nil {
			t.Fatal(err)
		}
		if s.Cluster.SpotReclaimRate != rate || s.PriceSpot != 30 {
			t.Errorf("%s: reclaim rate %v, spot price %v; want %v, 30", configs, s.Cluster.SpotReclaimRate, s.PriceSpot, rate)
		}
		for _, c := range s.Configs {
			err := c.RealEngine()
			switch {
			case c.Spot && (err == nil || !strings.Contains(err.Error(), `config "nomad-gpu-spot": not run on real Nomad yet`)):
				t.Errorf("%s: real engine: %v; want it refused, named", c.Name, err)
			case !c.Spot && err != nil:
				t.Errorf("%s: real engine: %v", c.Name, err)
			}
		}
	}
}

// Jobs bigger than a node's whole GPUs with slices are kept whole as
// members (or clipped, with MultiNodeClip), the same in every
// configuration; one whose members the fixed cluster could never hold at
// once is left out; fractions and asks that fit are kept.
func TestFitJobs(t *testing.T) {
	c := Cluster{Nodes: 4, GPUsPerNode: 8, MPSGPUs: 2, MPSShares: 4}
	jobs := []Job{
		{ID: "big", GPUs: 8, Fraction: 1}, {ID: "fits", GPUs: 6, Fraction: 1}, {ID: "frac", GPUs: 1, Fraction: 0.25},
		{ID: "16", GPUs: 16, Fraction: 1}, {ID: "32", GPUs: 32, Fraction: 1},
	}
	for _, tc := range []struct {
		mode      string
		ids, gpus string
		notes     []string
	}{
		{MultiNodeGang, "big fits frac 16", "8 6 1 16", []string{"2 jobs ask for more than the 6 whole GPUs", "1 jobs bigger than a node need more members than the 4 nodes"}},
		{"", "big fits frac 16", "8 6 1 16", []string{"2 jobs ask", "1 jobs bigger"}},
		{MultiNodeClip, "big fits frac 16 32", "6 6 1 6 6", []string{"3 jobs asked for more than the 6 whole GPUs a node offers with slices; they ask for 6"}},
	} {
		got, notes, err := c.FitJobs(jobs, tc.mode)
		if err != nil {
			t.Fatalf("%q: %v", tc.mode, err)
		}
		var ids, gpus []string
		for _, j := range got {
			ids, gpus = append(ids, j.ID), append(gpus, strconv.Itoa(j.GPUs))
		}
		if strings.Join(ids, " ") != tc.ids || strings.Join(gpus, " ") != tc.gpus {
			t.Errorf("%q: jobs %v asking %v; want %s asking %s", tc.mode, ids, gpus, tc.ids, tc.gpus)
		}
		if len(notes) != len(tc.notes) {
			t.Fatalf("%q: notes %q; want %d", tc.mode, notes, len(tc.notes))
		}
		for i, n := range tc.notes {
			if !strings.Contains(notes[i], n) {
				t.Errorf("%q: note %q; want it to say %q", tc.mode, notes[i], n)
			}
		}
	}
	if jobs[0].GPUs != 8 {
		t.Errorf("the input changed: %+v", jobs[0])
	}
	if _, _, err := c.FitJobs(jobs, "split"); err == nil || !strings.Contains(err.Error(), `multi-node: "split"; allowed: "gang" or "clip"`) {
		t.Errorf("FitJobs(split) = %v; want an error naming multi-node and what is allowed", err)
	}
}

// A job bigger than a node is members of at most a node's whole GPUs
// with slices, split evenly, in every configuration.
func TestMembers(t *testing.T) {
	c := Cluster{Nodes: 4, GPUsPerNode: 8, MPSGPUs: 2, MPSShares: 4}
	for _, tc := range []struct{ gpus, m, per int }{
		{1, 1, 1}, {6, 1, 6}, {7, 2, 4}, {8, 2, 4}, {12, 2, 6}, {16, 3, 6}, {24, 4, 6}, {32, 6, 6},
	} {
		j := Job{GPUs: tc.gpus, Fraction: 1}
		if m, per := c.Members(j); m != tc.m || per != tc.per {
			t.Errorf("Members(%d GPUs) = %d × %d; want %d × %d", tc.gpus, m, per, tc.m, tc.per)
		}
		for _, f := range []Features{{}, {Slices: true}, {Layouts: true}} {
			sl := c.Slice(j, f)
			if tc.m > 1 && (sl.Members != tc.m || sl.Count != tc.per || sl.GPUs != float64(tc.m*tc.per)) {
				t.Errorf("Slice(%d GPUs, %+v) = %+v; want %d members of %d", tc.gpus, f, sl, tc.m, tc.per)
			}
			if tc.m == 1 && (sl.Members != 0 || sl.Count != tc.gpus) {
				t.Errorf("Slice(%d GPUs, %+v) = %+v; want one allocation of %d", tc.gpus, f, sl, tc.gpus)
			}
		}
	}
}
