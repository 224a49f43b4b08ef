package driver

import (
	"strings"
	"testing"
)

// A task's config as a parsed jobspec holds it (blocks as lists of maps,
// numbers as JSON's) is checked against the schema and the driver's rules;
// each error names the key path and what is allowed.
func TestValidateTaskConfig(t *testing.T) {
	ckpt := func(kv ...any) map[string]any {
		m := map[string]any{"command": "/bin/sh"}
		c := map[string]any{}
		for i := 0; i+1 < len(kv); i += 2 {
			c[kv[i].(string)] = kv[i+1]
		}
		m["checkpoint"] = []any{c}
		return m
	}
	cases := []struct {
		name string
		raw  map[string]any
		want string // "" passes
	}{
		{"minimal", map[string]any{"command": "/bin/true"}, ""},
		{"the training job's", ckpt("signal", "SIGUSR1", "commit_timeout", "45s", "interval", "15m", "keep", float64(2)), ""},
		{"no command", map[string]any{"args": []any{"x"}}, "config.command: required, but not set"},
		{"typo at the top", map[string]any{"comand": "/bin/true"}, "config.comand: no such key; allowed in config: command, args, work_dir, pids_limit, oom_score_adj, pid_mode, unveil, checkpoint"},
		{"typo in checkpoint", ckpt("comit_timeout", "30s"), "config.checkpoint[0].comit_timeout: no such key; allowed in config.checkpoint[0]: signal, commit_timeout, interval, keep"},
		{"not a duration", ckpt("interval", "soon"), `config.checkpoint[0].interval: "soon" is not a duration`},
		{"keep out of range", ckpt("keep", float64(0)), "config.checkpoint.keep: 0 is out of range; allowed: 1 to 100"},
		{"pid mode", map[string]any{"command": "x", "pid_mode": "shared"}, `config.pid_mode: "shared" is not a mode; allowed: "private", "host"`},
		{"relative work dir", map[string]any{"command": "x", "work_dir": "tmp"}, `config.work_dir: "tmp" must be an absolute path`},
		{"two checkpoint blocks", map[string]any{"command": "x", "checkpoint": []any{map[string]any{}, map[string]any{}}}, "config.checkpoint: 2 blocks; a task has at most one"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := ValidateTaskConfig(c.raw)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("got %v, want none", err)
			case c.want != "" && (err == nil || !strings.HasPrefix(err.Error(), c.want)):
				t.Fatalf("got %v, want %q", err, c.want)
			}
		})
	}
}
