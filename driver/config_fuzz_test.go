package driver

import (
	"testing"

	"github.com/nomad-gpu/nomad-gpu/wire/schema"
	"github.com/nomad-gpu/nomad-gpu/wire/wiretest"
)

// fuzzPluginSeeds are plugin blocks an operator writes
// (jobs/agent/client-gpu.hcl), valid and not.
var fuzzPluginSeeds = []map[string]any{
	{},
	{"state_dir": "/var/lib/nomad-gpu/driver", "default_user": "nobody", "denied_host_uids": "0", "cgroup_root": "nomad-gpu",
		"gpu_memory_watchdog": "kill", "watchdog_interval": "5s",
		"mps": map[string]any{"control_binary": "nvidia-cuda-mps-control", "pipe_root": "/run/nomad-gpu/mps", "log_root": "/var/log/nomad-gpu/mps"},
		"gpu": map[string]any{"backend": "nvml"}},
	{"state_dir": "/tmp/state", "gpu_memory_watchdog": "warn", "denied_host_uids": "",
		"mps": map[string]any{"pipe_root": "/tmp/mps", "log_root": "/tmp/log", "control_binary": "/usr/bin/nvidia-cuda-mps-control"},
		"gpu": map[string]any{"backend": "sim", "sim": map[string]any{"system": "dgxh100", "seed": "wire",
			"mig": []map[string]any{{"gpus": []int{6, 7}, "profiles": []string{"3g.40gb", "1g.10gb"}}}}}},
	{"gpu_memory_watchdog": "explode"},
	{"state_dir": "relative"},
	{"watchdog_interval": "1ms"},
	{"cgroup_root": "/abs"},
	{"gpu": map[string]any{"backend": "sim", "sim": map[string]any{"system": "dgx0"}}},
}

// fuzzTaskSeeds are jobspec `config { }` blocks (README, jobs/examples).
var fuzzTaskSeeds = []map[string]any{
	{"command": "python3", "args": []string{"train.py"}, "work_dir": "/srv/train", "pids_limit": 4096, "oom_score_adj": 0},
	{"command": "/bin/sleep", "args": []string{"300"}},
	{"command": "/bin/sh", "args": []string{"-c", "exit 3"}, "oom_score_adj": 1000},
	{"command": ""},
	{"command": "x", "work_dir": "relative"},
	{"command": "x", "pids_limit": -1},
	{"command": "x", "oom_score_adj": -17},
}

// FuzzConfig decodes arbitrary bytes as the plugin config (first byte even)
// or a task config (odd) and validates them as SetConfig and StartTask do.
// No input may panic; an accepted config, encoded again as the agent would,
// decodes to the same value and is accepted again.
func FuzzConfig(f *testing.F) {
	wiretest.AddSeeds(f, &Config{}, []byte{0}, fuzzPluginSeeds)
	wiretest.AddSeeds(f, &TaskConfig{}, []byte{1}, fuzzTaskSeeds)
	validatePlugin := func(c any) error { return c.(*Config).Validate() }
	validateTask := func(c any) error { return c.(*TaskConfig).validate() }
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		cfg, validate := any(&Config{}), validatePlugin
		if data[0]%2 == 1 {
			cfg, validate = &TaskConfig{}, validateTask
		}
		if schema.Decode(data[1:], cfg) != nil || validate(cfg) != nil {
			return
		}
		wiretest.RoundTrip(t, cfg, validate)
	})
}
