package devicefp

import (
	"path/filepath"
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
// error, which must start with the key's path as the error names it (with
// list indexes where there are any) and say what is allowed; "<*>" in want
// stands for any text (a UUID).
type keyCase struct {
	key  string
	name string
	cfg  map[string]any
	want string
}

// specKeyPaths lists every attribute of the hclspec that the agent validates
// the plugin block against, nested blocks included, sorted.
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

// setPluginConfig sends block to a fresh plugin the way the agent does:
// encoded against the plugin's hclspec as msgpack, decoded by the schema and
// given to SetConfig (as a validation launch, without agent config).
func setPluginConfig(t *testing.T, block map[string]any) error {
	t.Helper()
	p := New(nil)
	defer p.Close()
	spec, err := schema.Spec(p.NewConfig())
	if err != nil {
		t.Fatal(err)
	}
	payload, err := wiretest.EncodeConfig(spec, block)
	if err != nil {
		t.Fatalf("encoding %v as the agent would: %v", block, err)
	}
	cfg := p.NewConfig()
	if err := schema.Decode(payload, cfg); err != nil {
		return err
	}
	return p.SetConfig(cfg, nil)
}

// migNode is a simulated DGX H100 with GPUs 6 and 7 in MIG mode, merged
// into block; its control file lies in a temporary directory.
func migNode(t *testing.T, block map[string]any) map[string]any {
	out := map[string]any{
		"backend": "sim",
		"sim": map[string]any{"system": "dgxh100", "seed": "config-keys", "control_file": filepath.Join(t.TempDir(), "sim.json"),
			"mig": []map[string]any{{"gpus": []int{6, 7}, "profiles": []string{"3g.40gb", "1g.10gb"}}}},
	}
	for k, v := range block {
		out[k] = v
	}
	return out
}

func simSystem(system string, mig ...map[string]any) map[string]any {
	return map[string]any{"backend": "sim", "sim": map[string]any{"system": system, "seed": "config-keys", "mig": mig}}
}

func mps(blocks ...map[string]any) map[string]any {
	return map[string]any{"mps": blocks}
}

// keyCases are bad values of every config key with a rule. A case whose cfg
// is nil runs on migNode, sharing GPUs 5 and 7 (in MIG mode) with MPS.
var keyCases = []keyCase{
	{"backend", "unknown", map[string]any{"backend": "cuda"}, `backend: "cuda" is not a backend; allowed: "nvml", "sim"`},
	{"backend", "empty", map[string]any{"backend": ""}, `backend: "" is not a backend; allowed: "nvml", "sim"`},

	{"fingerprint_period", "too short", map[string]any{"fingerprint_period": "999ms"}, "fingerprint_period: 999ms is too short; use at least 1s"},
	{"fingerprint_period", "negative", map[string]any{"fingerprint_period": "-1m"}, "fingerprint_period: -1m0s is too short; use at least 1s"},
	{"fingerprint_period", "not a duration", map[string]any{"fingerprint_period": "60"}, `fingerprint_period: "60" is not a duration; use a number with a unit such as "500ms", "30s" or "5m"`},

	{"ignored_gpu_ids", "not a GPU", map[string]any{"ignored_gpu_ids": []string{"0", "gpu0"}},
		`ignored_gpu_ids[1]: "gpu0" is not a GPU; use an index (0, 1, …), a GPU- or MIG- UUID, or "all"`},
	{"ignored_gpu_ids", "negative", map[string]any{"ignored_gpu_ids": []string{"-1"}}, `ignored_gpu_ids[0]: "-1" is not a GPU; use an index`},
	{"ignored_gpu_ids", "empty", map[string]any{"ignored_gpu_ids": []string{""}}, `ignored_gpu_ids[0]: "" is not a GPU; use an index`},
	{"ignored_gpu_ids", "twice", map[string]any{"ignored_gpu_ids": []string{"1", "GPU-1a2b", " 1 "}}, `ignored_gpu_ids[2]: " 1 " is already listed as ignored_gpu_ids[0]`},

	{"mps_pipe_root", "relative", map[string]any{"mps_pipe_root": "run/mps"}, `mps_pipe_root: "run/mps" must be an absolute path`},
	{"mps_pipe_root", "empty", map[string]any{"mps_pipe_root": ""}, `mps_pipe_root: "" must be an absolute path`},

	{"mps[].gpus", "empty", mps(map[string]any{"gpus": []string{}}), `mps[0].gpus: list the GPUs to share (indexes, GPU- UUIDs or "all")`},
	{"mps[].gpus", "unset", mps(map[string]any{"gpus": []string{"0"}}, map[string]any{"shares": 4}), `mps[1].gpus: list the GPUs to share (indexes, GPU- UUIDs or "all")`},
	{"mps[].gpus", "not a GPU", mps(map[string]any{"gpus": []string{"0", "one"}}), `mps[0].gpus[1]: "one" is not a GPU; use an index (0, 1, …), a GPU- or MIG- UUID, or "all"`},
	{"mps[].gpus", "MIG instance", mps(map[string]any{"gpus": []string{"MIG-0f8a"}}), `mps[0].gpus[0]: "MIG-0f8a" is a MIG instance; MPS shares whole GPUs`},
	{"mps[].gpus", "twice in a block", mps(map[string]any{"gpus": []string{"3", "3"}}), `mps[0].gpus[1]: GPU "3" is already shared by mps[0]`},
	{"mps[].gpus", "in two blocks", mps(map[string]any{"gpus": []string{"3"}}, map[string]any{"gpus": []string{"4", " 3"}}), `mps[1].gpus[1]: GPU " 3" is already shared by mps[0]`},
	{"mps[].gpus", "all with others", mps(map[string]any{"gpus": []string{"all"}}, map[string]any{"gpus": []string{"2"}}), `mps: "all" cannot be combined with other GPUs in mps blocks`},
	{"mps[].gpus", "GPU in MIG mode", nil, "mps[0].gpus[1]: GPU 7 (<*>) is in MIG mode; MPS shares are offered only on GPUs with MIG disabled"},

	{"mps[].shares", "one", mps(map[string]any{"gpus": []string{"0"}, "shares": 1}), "mps[0].shares: 1 is out of range; allowed: 2 to 48"},
	{"mps[].shares", "too many", mps(map[string]any{"gpus": []string{"0"}}, map[string]any{"gpus": []string{"1"}, "shares": 49}), "mps[1].shares: 49 is out of range; allowed: 2 to 48"},
	{"mps[].shares", "fraction", mps(map[string]any{"gpus": []string{"0"}, "shares": 2.5}), "mps[0].shares: expected a whole number, got 2.5"},

	{"health.critical_xids", "zero", map[string]any{"health": map[string]any{"critical_xids": []int{48, 0}}}, "health.critical_xids[1]: XID 0 does not exist"},
	{"health.critical_xids", "negative", map[string]any{"health": map[string]any{"critical_xids": []int{-1}}}, "health.critical_xids[0]: must not be negative, got -1"},

	{"sim.system", "unknown", simSystem("dgx0"), `sim.system: "dgx0" is not a simulated system; allowed: dgxa100, `},
	{"sim.system", "empty", simSystem(""), "sim.system: required; allowed: dgxa100, "},
	{"sim.mig[].gpus", "no such GPU", simSystem("dgxh100", map[string]any{"gpus": []int{6, 8}, "profiles": []string{"7g.80gb"}}),
		"sim.mig[0].gpus[1]: GPU 8 does not exist (dgxh100 has GPUs 0-7)"},
	{"sim.mig[].gpus", "empty", simSystem("dgxh100", map[string]any{"gpus": []int{}, "profiles": []string{"7g.80gb"}}),
		"sim.mig[0].gpus: empty; list the indexes of the GPUs this layout applies to"},
	{"sim.mig[].gpus", "in two layouts", simSystem("dgxh100", map[string]any{"gpus": []int{6}, "profiles": []string{"7g.80gb"}}, map[string]any{"gpus": []int{6}, "profiles": []string{"7g.80gb"}}),
		"sim.mig[1].gpus[0]: GPU 6 is already in mig[0]; a GPU has one layout"},
	{"sim.mig[].profiles", "unknown", simSystem("dgxa100", map[string]any{"gpus": []int{0}, "profiles": []string{"3g.40gb"}}),
		`sim.mig[0].profiles[0]: "3g.40gb" is not a MIG profile of `},
	{"sim.mig[].profiles", "do not fit", simSystem("dgxh100", map[string]any{"gpus": []int{0}, "profiles": []string{"4g.40gb", "4g.40gb"}}),
		`sim.mig[0].profiles[1]: "4g.40gb": at most 1 instance(s) of this profile fit on `},
	{"sim.control_file", "relative", map[string]any{"backend": "sim", "sim": map[string]any{"system": "dgxh100", "control_file": "sim.json"}},
		`sim.control_file: "sim.json" must be an absolute path`},
	// The sim block's keys only count with backend = "sim".
	{"sim.seed", "without sim backend", map[string]any{"sim": map[string]any{"seed": "x"}}, `sim: only used with backend = "sim" (backend is "nvml")`},
	{"sim.control_file", "without sim backend", map[string]any{"sim": map[string]any{"control_file": "/tmp/sim.json"}}, `sim: only used with backend = "sim" (backend is "nvml")`},
	{"sim.mig[].profiles", "without sim backend", map[string]any{"sim": map[string]any{"mig": []map[string]any{{"gpus": []int{0}, "profiles": []string{"7g.80gb"}}}}},
		`sim: only used with backend = "sim" (backend is "nvml")`},

	{"metrics.address", "no port", map[string]any{"metrics": map[string]any{"address": "0.0.0.0"}},
		`metrics.address: "0.0.0.0" is not a host:port address (e.g. "127.0.0.1:9400", ":9400" for every interface)`},
	{"metrics.address", "bad port", map[string]any{"metrics": map[string]any{"address": "localhost:http9"}}, `metrics.address: "localhost:http9" has port "http9"; allowed: 0 to 65535`},
	{"metrics.address", "host with slash", map[string]any{"metrics": map[string]any{"address": "a/b:9400"}}, `metrics.address: "a/b:9400" has host "a/b", which is neither an IP address nor a host name`},
	{"metrics.node_name", "blanks", map[string]any{"metrics": map[string]any{"node_name": "gpu-1 "}}, `metrics.node_name: "gpu-1 " must be a node name without control characters or surrounding blanks`},

	{"nomad.address", "no scheme", map[string]any{"nomad": map[string]any{"address": "localhost:4646"}}, `nomad.address: "localhost:4646" is not an http://, https:// or unix:// address`},
	{"nomad.address", "no host", map[string]any{"nomad": map[string]any{"address": "https:///v1"}}, `nomad.address: "https:///v1" is not an http://, https:// or unix:// address`},
	{"nomad.address", "unix without a path", map[string]any{"nomad": map[string]any{"address": "unix://"}},
		`nomad.address: "unix://" is not a unix:// address with the socket's absolute path (e.g. "unix:///var/run/nomad.sock")`},

	{"layout.poll", "too short", map[string]any{"layout": map[string]any{"poll": "10ms"}}, "layout.poll: 10ms is out of range; allowed: 100ms to 1m"},
	{"layout.poll", "too long", map[string]any{"layout": map[string]any{"poll": "2m"}}, "layout.poll: 2m0s is out of range; allowed: 100ms to 1m"},
	{"layout.poll", "not a duration", map[string]any{"layout": map[string]any{"poll": "2"}}, `layout.poll: "2" is not a duration`},
	{"layout.drain_grace", "negative", map[string]any{"layout": map[string]any{"drain_grace": "-1s"}}, "layout.drain_grace: -1s is out of range; allowed: 0s to 5m"},
	{"layout.drain_grace", "too long", map[string]any{"layout": map[string]any{"drain_grace": "1h"}}, "layout.drain_grace: 1h0m0s is out of range; allowed: 0s to 5m"},
	{"layout.state_file", "relative", map[string]any{"layout": map[string]any{"state_file": "layouts.json"}}, `layout.state_file: "layouts.json" must be an absolute path to a file`},
	{"layout.state_file", "a directory", map[string]any{"layout": map[string]any{"state_file": "/var/lib/nomad-gpu/"}}, `layout.state_file: "/var/lib/nomad-gpu/" must be an absolute path to a file`},
}

// keysWithoutRule are keys whose only rule is their type.
var keysWithoutRule = map[string]string{
	"health.enabled": "bool; either value is valid",
	"layout.enabled": "bool; either value is valid",
	// Any XID may be ignored; XIDs no GPU sends are simply never seen.
	"health.ignored_xids": "any list of XIDs (uint64) is valid",
	// An ACL token is opaque to the plugin; the agent's API judges it.
	"nomad.token": "opaque ACL token, checked by the Nomad API on use",
}

// Every config key with a value rule refuses a bad value at SetConfig, given
// as the agent sends it, with an error that names the key's exact path and
// what is allowed; a refused config is not kept.
func TestConfigKeyValidation(t *testing.T) {
	if err := setPluginConfig(t, map[string]any{}); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	for _, c := range keyCases {
		t.Run(c.key+"/"+c.name, func(t *testing.T) {
			cfg := c.cfg
			if cfg == nil {
				cfg = migNode(t, mps(map[string]any{"gpus": []string{"5", "7"}}))
			}
			err := setPluginConfig(t, cfg)
			if err == nil || !containsInOrder(err.Error(), strings.Split(c.want, "<*>")) {
				t.Fatalf("config %v: error %v, want %q", cfg, err, c.want)
			}
			if !strings.HasPrefix(err.Error(), strings.SplitN(c.want, ":", 2)[0]+":") {
				t.Fatalf("config %v: error %q does not start with the key path of %q", cfg, err, c.want)
			}
		})
	}
}

func containsInOrder(s string, parts []string) bool {
	for _, p := range parts {
		i := strings.Index(s, p)
		if i < 0 {
			return false
		}
		s = s[i+len(p):]
	}
	return true
}

// Boundary values each rule must still accept.
func TestConfigKeyValidationAccepts(t *testing.T) {
	for _, cfg := range []map[string]any{
		{"backend": "nvml", "fingerprint_period": "1s", "ignored_gpu_ids": []string{"0", " 1 ", "GPU-1a2b", "MIG-3c4d"}, "mps_pipe_root": "/tmp/mps"},
		{"health": map[string]any{"enabled": false, "ignored_xids": []int{}, "critical_xids": []int{48, 79}}},
		{"metrics": map[string]any{"address": "127.0.0.1:0", "node_name": "gpu-1"}},
		{"nomad": map[string]any{"address": "unix:///run/nomad.sock", "token": "x"}},
		mps(map[string]any{"gpus": []string{"all"}, "shares": 48}),
		{"layout": map[string]any{"enabled": true, "poll": "100ms", "drain_grace": "0s", "state_file": filepath.Join(t.TempDir(), "none-yet.json")}},
		{"layout": map[string]any{"poll": "1m", "drain_grace": "5m"}},
		simSystem("dgxa100", map[string]any{"gpus": []int{0, 7}, "profiles": []string{"3g.20gb", "3g.20gb"}}),
	} {
		if err := setPluginConfig(t, cfg); err != nil {
			t.Errorf("config %v: %v", cfg, err)
		}
	}
	if err := setPluginConfig(t, migNode(t, mps(map[string]any{"gpus": []string{"4"}}, map[string]any{"gpus": []string{"5"}, "shares": 48}))); err != nil {
		t.Errorf("MPS on GPUs without MIG: %v", err)
	}
}

// A new config key fails the suite until it has a validation case in
// keyCases or, having no rule beyond its type, an exemption.
func TestConfigKeysAllValidated(t *testing.T) {
	keys := specKeyPaths(t, &Config{})
	inSpec := map[string]bool{}
	for _, k := range keys {
		inSpec[k] = true
	}
	covered := map[string]bool{}
	for _, c := range keyCases {
		if !inSpec[c.key] {
			t.Errorf("case %q is for key %q, which the spec does not have (keys: %s)", c.name, c.key, strings.Join(keys, ", "))
		}
		if c.want == "" {
			t.Errorf("case %q for %s has no wanted error", c.name, c.key)
		}
		covered[c.key] = true
	}
	for k, why := range keysWithoutRule {
		if !inSpec[k] {
			t.Errorf("exempt key %q is not in the spec", k)
		}
		if covered[k] {
			t.Errorf("key %q is exempt (%s) but has validation cases; drop the exemption", k, why)
		}
	}
	for _, k := range keys {
		if !covered[k] && keysWithoutRule[k] == "" {
			t.Errorf("config key %q has no validation case: add one that sets a bad value and asserts the error names %q and what is allowed, or exempt it with the reason it has no rule beyond its type", k, k)
		}
	}
}
