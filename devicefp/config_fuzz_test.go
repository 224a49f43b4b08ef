package devicefp

import (
	"testing"

	"github.com/nomad-gpu/nomad-gpu/wire/schema"
	"github.com/nomad-gpu/nomad-gpu/wire/wiretest"
)

// configSeeds are plugin blocks an operator writes (jobs/agent/client-gpu.hcl
// and the README), some valid and some not.
var configSeeds = []map[string]any{
	{},
	{"backend": "nvml", "fingerprint_period": "1m", "ignored_gpu_ids": []string{}, "mps_pipe_root": "/run/nomad-gpu/mps",
		"health": map[string]any{"enabled": true, "ignored_xids": []int{13, 31, 43, 45, 68, 109}}},
	{"backend": "sim", "fingerprint_period": "1s", "ignored_gpu_ids": []string{"3", "MIG-0f8a"},
		"sim": map[string]any{"system": "dgxh100", "seed": "wire-test", "control_file": "/tmp/sim-control.json",
			"mig": []map[string]any{{"gpus": []int{6, 7}, "profiles": []string{"3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"}}}},
		"mps":    []map[string]any{{"gpus": []string{"4", "5"}, "shares": 4}},
		"health": map[string]any{"critical_xids": []int{48, 79}}},
	{"mps": []map[string]any{{"gpus": []string{"all"}, "shares": 48}}, "health": map[string]any{"enabled": false}},
	{"backend": "cuda"},
	{"fingerprint_period": "10ms"},
	{"mps": []map[string]any{{"gpus": []string{"0"}, "shares": 1}}},
	{"mps": []map[string]any{{"gpus": []string{"0"}, "shares": 2.5}}},
	{"sim": map[string]any{"seed": "x"}},
}

// FuzzConfig decodes arbitrary bytes as the plugin's config block and
// validates it the way SetConfig does: no input may panic, and an accepted
// config, encoded again as the agent would, decodes to the same config and is
// accepted again.
func FuzzConfig(f *testing.F) {
	p := New(nil)
	wiretest.AddSeeds(f, p.NewConfig(), nil, configSeeds)
	validate := func(c any) error { return p.SetConfig(c, nil) }
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg := p.NewConfig()
		if err := schema.Decode(data, cfg); err != nil {
			return
		}
		if validate(cfg) != nil {
			return
		}
		wiretest.RoundTrip(t, cfg, validate)
	})
}
