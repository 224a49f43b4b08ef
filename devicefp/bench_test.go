package devicefp

import (
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nomad-gpu/nomad-gpu/gpu"
)

// The targets: one fingerprint and one stats cycle under 1 ms of CPU
// each on a dgxh100 with 56 MIG instances, and with 8 GPUs × 8 MPS shares.
// Figures are reported, never asserted.
func benchPlugin(b *testing.B, edit func(*Config)) *Plugin {
	b.Helper()
	cfg := defaults(b)
	cfg.Backend = "sim"
	cfg.Sim.System = "dgxh100"
	cfg.Sim.Seed = "bench"
	edit(cfg)
	p := New(hclog.NewNullLogger())
	if err := p.SetConfig(cfg, nil); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { p.Close() })
	if _, err := p.CurrentFingerprint(); err != nil {
		b.Fatal(err)
	}
	return p
}

var benchLayouts = []struct {
	name string
	edit func(*Config)
}{
	{"MIG56", func(c *Config) {
		c.Sim.MIG = []gpu.MIGLayout{{GPUs: []int{0, 1, 2, 3, 4, 5, 6, 7}, Profiles: []string{"1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb"}}}
	}},
	{"MPS8x8", func(c *Config) { c.MPS = []MPSConfig{{GPUs: []string{"all"}, Shares: 8}} }},
}

func BenchmarkFingerprintCycle(b *testing.B) {
	for _, l := range benchLayouts {
		b.Run(l.name, func(b *testing.B) {
			p := benchPlugin(b, l.edit)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if m := p.refresh(true); len(m.byID) != 56 && len(m.byID) != 64 {
					b.Fatalf("%d devices", len(m.byID))
				}
			}
		})
	}
}

func BenchmarkStatsCycle(b *testing.B) {
	for _, l := range benchLayouts {
		b.Run(l.name, func(b *testing.B) {
			p := benchPlugin(b, l.edit)
			now := time.Now()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if st := p.collectStats(now); len(st.Groups) == 0 {
					b.Fatal("no stats")
				}
			}
		})
	}
}
