package driver

import (
	"os"
	"path/filepath"
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
		{"checkpoint root inside state_dir", func(c *Config) { c.Checkpoint.Root = filepath.Join(c.StateDir, "checkpoints") },
			`checkpoint.root: "/var/lib/nomad-gpu/driver/checkpoints" and state_dir "/var/lib/nomad-gpu/driver" must not contain one another`},
		{"state_dir inside checkpoint root", func(c *Config) { c.StateDir = filepath.Join(c.Checkpoint.Root, "driver") },
			`checkpoint.root: "/var/lib/nomad-gpu/checkpoints" and state_dir "/var/lib/nomad-gpu/checkpoints/driver" must not contain one another`},
		{"cooldown moved", func(c *Config) { c.Preemption.Cooldown = 5 * time.Minute }, "preemption.cooldown: 5m0s; the preemption cooldown moved to the controller: run `nomad-gpu controller -preemption-cooldown 5m0s`"},
		{"nomad address", func(c *Config) { c.Nomad.Address = "127.0.0.1:4646" }, `nomad.address: "127.0.0.1:4646" is not an http://, https:// or unix:// address`},
		{"nomad address scheme", func(c *Config) { c.Nomad.Address = "ftp://x" }, "nomad.address"},
		{"supervisor relative", func(c *Config) { c.SupervisorBinary = "libexec/nomad-driver-gpu-supervisor" },
			`supervisor_binary: "libexec/nomad-driver-gpu-supervisor" must be an absolute path`},
		{"cgroup root nested", func(c *Config) { c.CgroupRoot = "a/b" },
			`cgroup_root: "a/b" is not a cgroup name (one name without "/" is allowed); allowed: one directory name such as "nomad-gpu"`},
		{"cgroup root absolute", func(c *Config) { c.CgroupRoot = "/nomad-gpu" }, `cgroup_root: "/nomad-gpu" is not a cgroup name`},
		{"cgroup root dot-dot", func(c *Config) { c.CgroupRoot = ".." }, `cgroup_root: ".." is not a cgroup name ("." and ".." are not group names)`},
		{"cgroup root empty", func(c *Config) { c.CgroupRoot = "" }, `cgroup_root: "" is not a cgroup name (empty)`},
		{"cgroup root newline", func(c *Config) { c.CgroupRoot = "a\nb" }, `cgroup_root: "a\nb" is not a cgroup name (contains a NUL or newline)`},
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

// supervisor_binary must name an executable file when the agent loads the
// plugin, not when the first task starts; a good one supervises the tasks.
func TestSetConfigSupervisorBinary(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "nomad-driver-gpu-supervisor")
	plain := filepath.Join(dir, "not-executable")
	for path, mode := range map[string]os.FileMode{exe: 0o755, plain: 0o644} {
		if err := os.WriteFile(path, []byte("#!/bin/sh\n"), mode); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		path, want string
	}{
		{filepath.Join(dir, "missing"), "supervisor_binary: stat " + filepath.Join(dir, "missing") + ": no such file or directory"},
		{plain, "supervisor_binary: " + plain + " is not executable"},
		{dir, "supervisor_binary: " + dir + " is not a regular file"},
		{exe, ""},
	}
	for _, c := range cases {
		t.Run(filepath.Base(c.path), func(t *testing.T) {
			cfg := &Config{}
			if err := decodeDefaults(cfg); err != nil {
				t.Fatal(err)
			}
			cfg.SupervisorBinary = c.path
			d := New(nil)
			defer d.Shutdown()
			before := d.supervisor()
			err := d.SetConfig(cfg, nil)
			if c.want == "" {
				if err != nil || d.supervisor() != exe {
					t.Fatalf("SetConfig: %v; supervisor %q, want %q", err, d.supervisor(), exe)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want %q", err, c.want)
			}
			if d.supervisor() != before {
				t.Fatalf("a refused config changed the supervisor to %q", d.supervisor())
			}
		})
	}
}
