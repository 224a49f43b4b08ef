package driver

import (
	"sort"
	"strings"
	"testing"

	hclspecpb "github.com/nomad-gpu/nomad-gpu/wire/proto/nomad/hclspec"
	"github.com/nomad-gpu/nomad-gpu/wire/schema"
	"github.com/nomad-gpu/nomad-gpu/wire/wiretest"
)

// keyCase is one bad value of one config key, written as the operator
// writes the block. key is the key's path as specKeyPaths names it (blocks
// joined by ".", repeatable blocks marked "[]"); want is a substring of the
// error, which must name the key's path (with list indexes where there are
// any) and what is allowed.
type keyCase struct {
	key  string
	name string
	cfg  map[string]any
	want string
}

// specKeyPaths lists every attribute of the hclspec that the agent validates
// v's block against, nested blocks included, sorted.
func specKeyPaths(t *testing.T, v any) []string {
	t.Helper()
	spec, err := schema.Spec(v)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	var walk func(prefix string, obj *hclspecpb.Object)
	walk = func(prefix string, obj *hclspecpb.Object) {
		for name, s := range obj.GetAttributes() {
			switch b := s.GetBlock().(type) {
			case *hclspecpb.Spec_BlockValue:
				walk(prefix+name+".", b.BlockValue.GetNested().GetObject())
			case *hclspecpb.Spec_BlockList:
				walk(prefix+name+"[].", b.BlockList.GetNested().GetObject())
			case *hclspecpb.Spec_Attr, *hclspecpb.Spec_Default:
				out = append(out, prefix+name)
			default:
				t.Fatalf("%s%s: spec kind %T not known to this test", prefix, name, s.GetBlock())
			}
		}
	}
	walk("", spec.GetObject())
	if len(out) == 0 {
		t.Fatalf("no keys in the spec of %T", v)
	}
	sort.Strings(out)
	return out
}

// checkKeysCovered fails for every key of the spec that has neither a case
// nor an exemption, and for cases and exemptions naming keys the spec no
// longer has.
func checkKeysCovered(t *testing.T, v any, cases []keyCase, exempt map[string]string) {
	t.Helper()
	keys := specKeyPaths(t, v)
	inSpec := map[string]bool{}
	for _, k := range keys {
		inSpec[k] = true
	}
	covered := map[string]bool{}
	for _, c := range cases {
		if !inSpec[c.key] {
			t.Errorf("case %q is for key %q, which the %T spec does not have (keys: %s)", c.name, c.key, v, strings.Join(keys, ", "))
		}
		if c.want == "" {
			t.Errorf("case %q for %s has no wanted error", c.name, c.key)
		}
		covered[c.key] = true
	}
	for k, why := range exempt {
		if !inSpec[k] {
			t.Errorf("exempt key %q is not in the %T spec", k, v)
		}
		if covered[k] {
			t.Errorf("key %q is exempt (%s) but has validation cases; drop the exemption", k, why)
		}
		if why == "" {
			t.Errorf("exempt key %q says not why", k)
		}
	}
	for _, k := range keys {
		if !covered[k] && exempt[k] == "" {
			t.Errorf("config key %q has no validation case: add one that sets a bad value and asserts the error names %q and what is allowed, or exempt it with the reason it has no rule beyond its type", k, k)
		}
	}
}

// setPluginConfig sends block to a fresh driver the way the agent does:
// encoded against the driver's hclspec as msgpack, decoded by the schema
// and given to SetConfig (as a validation launch, without agent config).
func setPluginConfig(t *testing.T, block map[string]any) error {
	t.Helper()
	d := New(nil)
	defer d.Shutdown()
	spec, err := schema.Spec(d.NewConfig())
	if err != nil {
		t.Fatal(err)
	}
	payload, err := wiretest.EncodeConfig(spec, block)
	if err != nil {
		t.Fatalf("encoding %v as the agent would: %v", block, err)
	}
	cfg := d.NewConfig()
	if err := schema.Decode(payload, cfg); err != nil {
		return err
	}
	return d.SetConfig(cfg, nil)
}

// decodeTaskConfig decodes a jobspec config block as the agent sends it and
// validates it as StartTask does.
func decodeTaskConfig(t *testing.T, block map[string]any) error {
	t.Helper()
	spec, err := schema.Spec(&TaskConfig{})
	if err != nil {
		t.Fatal(err)
	}
	payload, err := wiretest.EncodeConfig(spec, block)
	if err != nil {
		t.Fatalf("encoding %v as the agent would: %v", block, err)
	}
	tc := &TaskConfig{}
	if err := schema.DecodeAt(payload, tc, "config"); err != nil {
		return err
	}
	return tc.validate()
}

func simGPU(extra map[string]any) map[string]any {
	s := map[string]any{"system": "dgxh100", "seed": "keys"}
	for k, v := range extra {
		s[k] = v
	}
	return map[string]any{"backend": "sim", "sim": s}
}

// pluginKeyCases are bad values of every plugin config key with a rule.
var pluginKeyCases = []keyCase{
	{"state_dir", "relative", map[string]any{"state_dir": "var/lib/driver"}, `state_dir: "var/lib/driver" must be an absolute path`},
	{"state_dir", "empty", map[string]any{"state_dir": ""}, `state_dir: "" must be an absolute path`},

	{"default_user", "empty", map[string]any{"default_user": ""}, `default_user: must name a user (e.g. "nobody")`},
	{"default_user", "denied", map[string]any{"default_user": "root"}, `default_user: "root" would fail every task without a user: user: "root" (uid 0) is denied by the plugin config (denied_host_uids = "0")`},

	{"denied_host_uids", "not an id", map[string]any{"denied_host_uids": "root"}, `denied_host_uids: "root": "root" is not an ID; want IDs and ranges such as "0,10-20"`},
	{"denied_host_uids", "backwards range", map[string]any{"denied_host_uids": "0,20-10"}, `denied_host_uids: "20-10": the range ends before it starts`},
	{"denied_host_uids", "over 32 bits", map[string]any{"denied_host_uids": "4294967296"}, `denied_host_uids: "4294967296": "4294967296" is not an ID; want IDs and ranges`},
	{"denied_host_gids", "negative", map[string]any{"denied_host_gids": "-1"}, `denied_host_gids: "-1": "" is not an ID; want IDs and ranges such as "0,10-20"`},
	{"denied_host_gids", "range end", map[string]any{"denied_host_gids": "10-x"}, `denied_host_gids: "10-x": "x" is not an ID; want IDs and ranges such as "0,10-20"`},

	{"supervisor_binary", "relative", map[string]any{"supervisor_binary": "bin/nomad-driver-gpu-supervisor"},
		`supervisor_binary: "bin/nomad-driver-gpu-supervisor" must be an absolute path to the nomad-driver-gpu-supervisor executable`},
	{"supervisor_binary", "missing", map[string]any{"supervisor_binary": "/nonexistent/nomad-driver-gpu-supervisor"},
		"supervisor_binary: stat /nonexistent/nomad-driver-gpu-supervisor: no such file or directory; allowed: the path of an installed nomad-driver-gpu-supervisor"},

	{"cgroup_root", "nested", map[string]any{"cgroup_root": "a/b"}, `cgroup_root: "a/b" is not a cgroup name (one name without "/" is allowed); allowed: one directory name such as "nomad-gpu"`},
	{"cgroup_root", "empty", map[string]any{"cgroup_root": ""}, `cgroup_root: "" is not a cgroup name (empty); allowed: one directory name`},

	{"gpu_memory_watchdog", "unknown", map[string]any{"gpu_memory_watchdog": "explode"}, `gpu_memory_watchdog: "explode" is not a mode; allowed: "kill", "warn", "off"`},
	{"gpu_memory_watchdog", "case", map[string]any{"gpu_memory_watchdog": "Kill"}, `gpu_memory_watchdog: "Kill" is not a mode; allowed: "kill", "warn", "off"`},

	{"watchdog_interval", "too short", map[string]any{"watchdog_interval": "99ms"}, "watchdog_interval: 99ms is too short; use at least 100ms"},
	{"watchdog_interval", "zero", map[string]any{"watchdog_interval": "0s"}, "watchdog_interval: 0s is too short; use at least 100ms"},
	{"watchdog_interval", "not a duration", map[string]any{"watchdog_interval": "5"}, `watchdog_interval: "5" is not a duration; use a number with a unit such as "500ms", "30s" or "5m"`},

	{"gang.wait", "too short", map[string]any{"gang": map[string]any{"wait": "500ms"}}, "gang.wait: 500ms; allowed: 1s to 720h"},
	{"gang.wait", "too long", map[string]any{"gang": map[string]any{"wait": "1000h"}}, "gang.wait: 1000h0m0s; allowed: 1s to 720h"},

	{"mps.control_binary", "empty", map[string]any{"mps": map[string]any{"control_binary": ""}}, `mps.control_binary: "" must be a command name found in PATH or an absolute path`},
	{"mps.control_binary", "relative path", map[string]any{"mps": map[string]any{"control_binary": "bin/nvidia-cuda-mps-control"}},
		`mps.control_binary: "bin/nvidia-cuda-mps-control" must be a command name found in PATH or an absolute path`},
	{"mps.pipe_root", "relative", map[string]any{"mps": map[string]any{"pipe_root": "run/mps"}}, `mps.pipe_root: "run/mps" must be an absolute path`},
	{"mps.log_root", "relative", map[string]any{"mps": map[string]any{"log_root": "log"}}, `mps.log_root: "log" must be an absolute path`},

	{"gpu.backend", "unknown", map[string]any{"gpu": map[string]any{"backend": "cuda"}}, `gpu.backend: "cuda" is not a backend; allowed: "nvml", "sim"`},
	{"gpu.backend", "empty", map[string]any{"gpu": map[string]any{"backend": ""}}, `gpu.backend: "" is not a backend; allowed: "nvml", "sim"`},
	{"gpu.sim.seed", "without the sim backend", map[string]any{"gpu": map[string]any{"backend": "nvml", "sim": map[string]any{"seed": "node-1"}}},
		`gpu.sim: only used with backend = "sim" (backend is "nvml")`},
	{"gpu.sim.control_file", "relative", map[string]any{"gpu": simGPU(map[string]any{"control_file": "sim.json"})}, `gpu.sim.control_file: "sim.json" must be an absolute path`},
	{"gpu.sim.control_file", "without the sim backend", map[string]any{"gpu": map[string]any{"backend": "nvml", "sim": map[string]any{"control_file": "/run/sim"}}},
		`gpu.sim: only used with backend = "sim" (backend is "nvml")`},
	{"gpu.sim.system", "unknown", map[string]any{"gpu": simGPU(map[string]any{"system": "dgx0"})}, `gpu.sim.system: "dgx0" is not a simulated system; allowed: dgxa100, `},
	{"gpu.sim.system", "empty", map[string]any{"gpu": simGPU(map[string]any{"system": ""})}, "gpu.sim.system: required; allowed: dgxa100, "},
	{"gpu.sim.mig[].gpus", "no such GPU", map[string]any{"gpu": simGPU(map[string]any{"mig": []map[string]any{{"gpus": []int{6, 8}, "profiles": []string{"7g.80gb"}}}})},
		"gpu.sim.mig[0].gpus[1]: GPU 8 does not exist (dgxh100 has GPUs 0-7)"},
	{"gpu.sim.mig[].gpus", "empty", map[string]any{"gpu": simGPU(map[string]any{"mig": []map[string]any{{"gpus": []int{}, "profiles": []string{"7g.80gb"}}}})},
		"gpu.sim.mig[0].gpus: empty; list the indexes of the GPUs this layout applies to"},
	{"gpu.sim.mig[].gpus", "twice in one layout", map[string]any{"gpu": simGPU(map[string]any{"mig": []map[string]any{{"gpus": []int{6, 6}, "profiles": []string{"7g.80gb"}}}})},
		"gpu.sim.mig[0].gpus[1]: GPU 6 is listed twice"},
	{"gpu.sim.mig[].gpus", "in two layouts", map[string]any{"gpu": simGPU(map[string]any{"mig": []map[string]any{
		{"gpus": []int{6}, "profiles": []string{"7g.80gb"}}, {"gpus": []int{7, 6}, "profiles": []string{"1g.10gb"}}}})},
		"gpu.sim.mig[1].gpus[1]: GPU 6 is already in mig[0]; a GPU has one layout"},
	{"gpu.sim.mig[].profiles", "unknown", map[string]any{"gpu": simGPU(map[string]any{"mig": []map[string]any{{"gpus": []int{6}, "profiles": []string{"3g.40gb", "9g.99gb"}}}})},
		`gpu.sim.mig[0].profiles[1]: "9g.99gb" is not a MIG profile of `},
	{"gpu.sim.mig[].profiles", "too many", map[string]any{"gpu": simGPU(map[string]any{"mig": []map[string]any{{"gpus": []int{6}, "profiles": []string{"7g.80gb", "7g.80gb"}}}})},
		`gpu.sim.mig[0].profiles[1]: "7g.80gb": at most 1 instance(s) of this profile fit on `},

	{"isolation.pid_mode", "unknown", map[string]any{"isolation": map[string]any{"pid_mode": "shared"}}, `isolation.pid_mode: "shared" is not a mode; allowed: "private", "host"`},
	{"isolation.pid_mode", "empty", map[string]any{"isolation": map[string]any{"pid_mode": ""}}, `isolation.pid_mode: "" is not a mode; allowed: "private", "host"`},
	{"isolation.landlock", "unknown", map[string]any{"isolation": map[string]any{"landlock": "on"}}, `isolation.landlock: "on" is not a setting; allowed: "required", "best_effort", "off"`},
	{"isolation.unveil_paths", "relative", map[string]any{"isolation": map[string]any{"unveil_paths": []string{"r:/data", "r:data"}}},
		`isolation.unveil_paths[1]: "r:data": want "<modes>:<absolute path>", e.g. "r:/data/models"`},
	{"isolation.unveil_paths", "unknown mode", map[string]any{"isolation": map[string]any{"unveil_paths": []string{"q:/data"}}},
		`isolation.unveil_paths[0]: "q:/data": unknown mode 'q', want a subset of "rwx"`},
	{"isolation.unveil_paths", "no modes", map[string]any{"isolation": map[string]any{"unveil_paths": []string{":/data"}}},
		`isolation.unveil_paths[0]: ":/data": no modes before ":", want a non-empty subset of "rwx"`},
	{"isolation.unveil_paths", "not clean", map[string]any{"isolation": map[string]any{"unveil_paths": []string{"rw:/data/../etc"}}},
		`isolation.unveil_paths[0]: "rw:/data/../etc": path "/data/../etc" is not clean, want "/etc"`},

	{"checkpoint.root", "relative", map[string]any{"checkpoint": map[string]any{"root": "checkpoints"}}, `checkpoint.root: "checkpoints" must be an absolute path`},

	{"nomad.address", "no scheme", map[string]any{"nomad": map[string]any{"address": "127.0.0.1:4646"}}, `nomad.address: "127.0.0.1:4646" is not an http://, https:// or unix:// address`},
	{"nomad.address", "other scheme", map[string]any{"nomad": map[string]any{"address": "ftp://nomad:4646"}}, `nomad.address: "ftp://nomad:4646" is not an http://, https:// or unix:// address`},
	{"nomad.address", "no host", map[string]any{"nomad": map[string]any{"address": "http://"}}, `nomad.address: "http://" is not an http://, https:// or unix:// address`},
	{"nomad.address", "unix without a path", map[string]any{"nomad": map[string]any{"address": "unix://"}},
		`nomad.address: "unix://" is not a unix:// address with the socket's absolute path (e.g. "unix:///var/run/nomad.sock")`},

	{"preemption.cooldown", "moved to the controller", map[string]any{"preemption": map[string]any{"cooldown": "10s"}}, "preemption.cooldown: 10s; the preemption cooldown moved to the controller"},
	{"preemption.cooldown", "not a duration", map[string]any{"preemption": map[string]any{"cooldown": "soon"}}, `preemption.cooldown: "soon" is not a duration`},

	{"metrics.address", "no port", map[string]any{"metrics": map[string]any{"address": "127.0.0.1"}},
		`metrics.address: "127.0.0.1" is not a host:port address (e.g. "127.0.0.1:9400", ":9400" for every interface)`},
	{"metrics.address", "port out of range", map[string]any{"metrics": map[string]any{"address": ":65536"}}, `metrics.address: ":65536" has port "65536"; allowed: 0 to 65535`},
	{"metrics.address", "url", map[string]any{"metrics": map[string]any{"address": "http://x:9400"}}, `metrics.address: "http://x:9400" is not a host:port address`},
	{"metrics.node_name", "blanks", map[string]any{"metrics": map[string]any{"node_name": " gpu-1"}}, `metrics.node_name: " gpu-1" must be a node name without control characters or surrounding blanks`},
	{"metrics.node_name", "control", map[string]any{"metrics": map[string]any{"node_name": "gpu\n1"}}, `metrics.node_name: "gpu\n1" must be a node name without control characters`},
	{"metrics.task_retention", "negative", map[string]any{"metrics": map[string]any{"task_retention": "-1s"}}, "metrics.task_retention: -1s is out of range; allowed: 0 (at once) to 24h"},
	{"metrics.task_retention", "too long", map[string]any{"metrics": map[string]any{"task_retention": "25h"}}, "metrics.task_retention: 25h0m0s is out of range; allowed: 0 (at once) to 24h"},
}

// pluginKeysWithoutRule are plugin keys whose only rule is their type.
var pluginKeysWithoutRule = map[string]string{
	// Booleans: both values are valid.
	"isolation.allow_host_pid": "bool; either value is a valid policy",
	"isolation.unveil_by_task": "bool; either value is a valid policy",
	// An ACL token is opaque to the driver; the agent's API judges it.
	"nomad.token": "opaque ACL token, checked by the Nomad API on use",
}

// Every plugin config key with a value rule refuses a bad value at
// SetConfig, given as the agent sends it, with an error that names the key's
// exact path and what is allowed.
func TestConfigKeyValidation(t *testing.T) {
	if err := setPluginConfig(t, map[string]any{}); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	for _, c := range pluginKeyCases {
		t.Run(c.key+"/"+c.name, func(t *testing.T) {
			err := setPluginConfig(t, c.cfg)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("config %v: error %v, want %q", c.cfg, err, c.want)
			}
			if !strings.HasPrefix(err.Error(), strings.SplitN(c.want, ":", 2)[0]+":") {
				t.Fatalf("config %v: error %q does not start with the key path of %q", c.cfg, err, c.want)
			}
		})
	}
}

// Boundary values each rule must still accept.
func TestConfigKeyValidationAccepts(t *testing.T) {
	for _, cfg := range []map[string]any{
		{"state_dir": "/tmp/state", "default_user": "root", "denied_host_uids": "", "denied_host_gids": " 1 , 10-20 ,4294967295"},
		{"cgroup_root": "nomad-gpu.slice", "gpu_memory_watchdog": "off", "watchdog_interval": "100ms"},
		{"gpu_memory_watchdog": "warn"},
		{"mps": map[string]any{"control_binary": "/usr/bin/nvidia-cuda-mps-control", "pipe_root": "/tmp/mps", "log_root": "/tmp/log"}},
		{"gpu": simGPU(map[string]any{"mig": []map[string]any{{"gpus": []int{6, 7}, "profiles": []string{"3g.40gb", "1g.10gb"}}}})},
		{"isolation": map[string]any{"pid_mode": "host", "landlock": "best_effort", "unveil_paths": []string{"r:/data/models", "rwx:/scratch"}}},
		{"isolation": map[string]any{"landlock": "off"}},
		{"nomad": map[string]any{"address": "unix:///run/nomad.sock"}},
		{"nomad": map[string]any{"address": "https://nomad.example:4646"}},
		{"preemption": map[string]any{"cooldown": "0s"}},
		{"metrics": map[string]any{"address": ":9400", "node_name": "gpu-1", "task_retention": "24h"}},
		{"metrics": map[string]any{"task_retention": "0s"}},
	} {
		if err := setPluginConfig(t, cfg); err != nil {
			t.Errorf("config %v: %v", cfg, err)
		}
	}
}

// A new plugin config key fails the suite until it has a validation case
// in pluginKeyCases or, having no rule beyond its type, an exemption.
func TestConfigKeysAllValidated(t *testing.T) {
	checkKeysCovered(t, &Config{}, pluginKeyCases, pluginKeysWithoutRule)
}

// taskKeyCases are bad values of every jobspec config key with a rule; the
// errors name the key under "config.".
var taskKeyCases = []keyCase{
	{"command", "empty", map[string]any{"command": ""}, "config.command: must not be empty"},
	{"work_dir", "relative", map[string]any{"command": "x", "work_dir": "srv"}, `config.work_dir: "srv" must be an absolute path`},
	{"pids_limit", "negative", map[string]any{"command": "x", "pids_limit": -1}, "config.pids_limit: -1 must not be negative"},
	{"pids_limit", "fraction", map[string]any{"command": "x", "pids_limit": 1.5}, "config.pids_limit: expected a whole number, got 1.5"},
	{"oom_score_adj", "negative", map[string]any{"command": "x", "oom_score_adj": -17}, "config.oom_score_adj: -17 is out of range; allowed: 0 to 1000"},
	{"oom_score_adj", "too high", map[string]any{"command": "x", "oom_score_adj": 1001}, "config.oom_score_adj: 1001 is out of range; allowed: 0 to 1000"},
	{"pid_mode", "unknown", map[string]any{"command": "x", "pid_mode": "shared"}, `config.pid_mode: "shared" is not a mode; allowed: "private", "host"`},
	{"unveil", "relative", map[string]any{"command": "x", "unveil": []string{"rw:/scratch", "rw:scratch"}}, `config.unveil[1]: "rw:scratch": want "<modes>:<absolute path>"`},
	{"unveil", "mode twice", map[string]any{"command": "x", "unveil": []string{"rr:/scratch"}}, `config.unveil[0]: "rr:/scratch": mode 'r' given twice`},
	{"checkpoint[].signal", "unknown", map[string]any{"command": "x", "checkpoint": []map[string]any{{"signal": "SIGNOPE"}}},
		`config.checkpoint.signal: unknown signal "SIGNOPE"; use a name such as SIGTERM, SIGINT or SIGUSR1`},
	{"checkpoint[].signal", "empty", map[string]any{"command": "x", "checkpoint": []map[string]any{{"signal": ""}}}, `config.checkpoint.signal: unknown signal ""; use a name such as`},
	{"checkpoint[].commit_timeout", "zero", map[string]any{"command": "x", "checkpoint": []map[string]any{{"commit_timeout": "0s"}}}, "config.checkpoint.commit_timeout: 0s must be positive"},
	{"checkpoint[].commit_timeout", "not a duration", map[string]any{"command": "x", "checkpoint": []map[string]any{{"commit_timeout": "30"}}}, `config.checkpoint[0].commit_timeout: "30" is not a duration`},
	{"checkpoint[].interval", "too short", map[string]any{"command": "x", "checkpoint": []map[string]any{{"interval": "999ms"}}},
		"config.checkpoint.interval: 999ms is too short; use at least 1s (or leave it unset for checkpoints on stop only)"},
	{"checkpoint[].keep", "zero", map[string]any{"command": "x", "checkpoint": []map[string]any{{"keep": 0}}}, "config.checkpoint.keep: 0 is out of range; allowed: 1 to 100"},
	{"checkpoint[].keep", "too many", map[string]any{"command": "x", "checkpoint": []map[string]any{{"keep": 101}}}, "config.checkpoint.keep: 101 is out of range; allowed: 1 to 100"},
}

// taskKeysWithoutRule are jobspec keys whose only rule is their type.
var taskKeysWithoutRule = map[string]string{
	"args": "any list of strings is a valid argv tail",
}

func TestTaskConfigKeyValidation(t *testing.T) {
	if err := decodeTaskConfig(t, map[string]any{"command": "x", "checkpoint": []map[string]any{{}}}); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	for _, c := range taskKeyCases {
		t.Run(c.key+"/"+c.name, func(t *testing.T) {
			err := decodeTaskConfig(t, c.cfg)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("config %v: error %v, want %q", c.cfg, err, c.want)
			}
		})
	}
	// Two checkpoint blocks: the block itself is named.
	err := decodeTaskConfig(t, map[string]any{"command": "x", "checkpoint": []map[string]any{{}, {}}})
	if want := "config.checkpoint: 2 blocks; a task has at most one"; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("two checkpoint blocks: error %v, want %q", err, want)
	}
}

// A new jobspec config key fails the suite until it has a validation case
// in taskKeyCases or an exemption.
func TestTaskConfigKeysAllValidated(t *testing.T) {
	checkKeysCovered(t, &TaskConfig{}, taskKeyCases, taskKeysWithoutRule)
}
