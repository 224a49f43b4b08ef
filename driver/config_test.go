package driver

import (
	"strings"
	"testing"
	"time"
)

func TestPluginConfigErrorsNameTheKey(t *testing.T) {
	cases := []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"checkpoint root", func(c *Config) { c.Checkpoint.Root = "checkpoints" }, `checkpoint.root: "checkpoints" must be an absolute path`},
		{"cooldown too short", func(c *Config) { c.Preemption.Cooldown = time.Second }, "preemption.cooldown: 1s is out of range; allowed: 0 (off) or at least 10s"},
		{"cooldown negative", func(c *Config) { c.Preemption.Cooldown = -time.Minute }, "preemption.cooldown"},
		{"nomad address", func(c *Config) { c.Nomad.Address = "127.0.0.1:4646" }, `nomad.address: "127.0.0.1:4646" is not an http://, https:// or unix:// address`},
		{"nomad address scheme", func(c *Config) { c.Nomad.Address = "ftp://x" }, "nomad.address"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := &Config{}
			if err := decodeDefaults(cfg); err != nil {
				t.Fatal(err)
			}
			if err := cfg.Validate(); err != nil {
				t.Fatalf("defaults: %v", err)
			}
			c.edit(cfg)
			if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want %q", err, c.want)
			}
		})
	}
}
