package schema

import (
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	hclspecpb "github.com/nomad-gpu/nomad-gpu/wire/proto/nomad/hclspec"
)

type inner struct {
	GPUs     []int    `hcl:"gpus"`
	Profiles []string `hcl:"profiles"`
}

type nested struct {
	System string  `hcl:"system" default:"dgxh100"`
	MIG    []inner `hcl:"mig,blocks"`
}

type sample struct {
	Backend string            `hcl:"backend" default:"nvml"`
	Period  time.Duration     `hcl:"period" default:"5s"`
	Shares  int               `hcl:"shares" default:"2"`
	Ratio   float64           `hcl:"ratio"`
	Enabled bool              `hcl:"enabled" default:"true"`
	XIDs    []uint64          `hcl:"xids" default:"[13, 31]"`
	Labels  map[string]string `hcl:"labels"`
	Name    string            `hcl:"name,required"`
	Sim     nested            `hcl:"sim,block"`
	Ignored string
}

func TestSpecShape(t *testing.T) {
	spec, err := Spec(&sample{})
	if err != nil {
		t.Fatal(err)
	}
	attrs := spec.GetObject().GetAttributes()
	cases := []struct {
		key, typ, def string
		required      bool
	}{
		{"backend", "string", `"nvml"`, false},
		{"period", "string", `"5s"`, false},
		{"shares", "number", "2", false},
		{"ratio", "number", "", false},
		{"enabled", "bool", "true", false},
		{"xids", "list(number)", "[13, 31]", false},
		{"labels", "map(string)", "", false},
		{"name", "string", "", true},
	}
	for _, c := range cases {
		s, ok := attrs[c.key]
		if !ok {
			t.Errorf("%s: missing from spec", c.key)
			continue
		}
		attr := s.GetAttr()
		if c.def != "" {
			d := s.GetDefault()
			if d == nil {
				t.Errorf("%s: want a Default spec, got %v", c.key, s)
				continue
			}
			attr = d.GetPrimary().GetAttr()
			if got := d.GetDefault().GetLiteral().GetValue(); got != c.def {
				t.Errorf("%s: default literal %q, want %q", c.key, got, c.def)
			}
		}
		if attr == nil {
			t.Errorf("%s: no Attr", c.key)
			continue
		}
		// The agent needs the name set explicitly inside a Default.
		if attr.Name != c.key || attr.Type != c.typ || attr.Required != c.required {
			t.Errorf("%s: got name=%q type=%q required=%v, want %q %q %v", c.key, attr.Name, attr.Type, attr.Required, c.key, c.typ, c.required)
		}
	}
	if _, ok := attrs["Ignored"]; ok || len(attrs) != 9 {
		t.Errorf("spec has %d attributes, want 9 (untagged fields left out)", len(attrs))
	}
	sim := attrs["sim"].GetBlockValue()
	if sim == nil || sim.Name != "sim" {
		t.Fatalf("sim: want a Block, got %v", attrs["sim"])
	}
	mig := sim.GetNested().GetObject().GetAttributes()["mig"].GetBlockList()
	if mig == nil || mig.Name != "mig" || mig.GetNested().GetObject().GetAttributes()["gpus"].GetAttr().GetType() != "list(number)" {
		t.Fatalf("sim.mig: want a BlockList of objects, got %v", mig)
	}
}

func TestHCLQuoteEscapesTemplates(t *testing.T) {
	spec, err := Spec(&struct {
		P string `hcl:"p" default:"${HOME}/x\"y"`
	}{})
	if err != nil {
		t.Fatal(err)
	}
	got := spec.GetObject().GetAttributes()["p"].GetDefault().GetDefault().GetLiteral().GetValue()
	if want := `"$${HOME}/x\"y"`; got != want {
		t.Fatalf("literal %s, want %s", got, want)
	}
	var _ *hclspecpb.Spec = spec
}

func encode(t *testing.T, v any) []byte {
	t.Helper()
	b, err := msgpack.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// agentMap builds a payload the way the agent does: every key present, nil
// for absent attributes, [] for absent block lists.
func agentMap(over map[string]any) map[string]any {
	m := map[string]any{
		"backend": nil, "period": nil, "shares": nil, "ratio": nil, "enabled": nil,
		"xids": nil, "labels": nil, "name": "n",
		"sim": map[string]any{"system": nil, "mig": []any{}},
	}
	for k, v := range over {
		m[k] = v
	}
	return m
}

func TestDecode(t *testing.T) {
	cases := []struct {
		name    string
		payload []byte
		check   func(t *testing.T, s *sample)
		err     string
	}{
		{
			name:    "all absent takes defaults",
			payload: encode(t, agentMap(nil)),
			check: func(t *testing.T, s *sample) {
				if s.Backend != "nvml" || s.Period != 5*time.Second || s.Shares != 2 || !s.Enabled ||
					len(s.XIDs) != 2 || s.XIDs[1] != 31 || s.Sim.System != "dgxh100" || s.Name != "n" {
					t.Errorf("defaults not applied: %+v", s)
				}
			},
		},
		{
			name:    "unsigned int code into int, decimal string into float",
			payload: encode(t, agentMap(map[string]any{"shares": uint16(8080), "ratio": "0.1"})),
			check: func(t *testing.T, s *sample) {
				if s.Shares != 8080 || s.Ratio != 0.1 {
					t.Errorf("got shares=%d ratio=%v", s.Shares, s.Ratio)
				}
			},
		},
		{
			name:    "exact float and huge digit string",
			payload: encode(t, agentMap(map[string]any{"ratio": 1.5, "xids": []any{int8(13), "1e3"}})),
			check: func(t *testing.T, s *sample) {
				if s.Ratio != 1.5 || s.XIDs[1] != 1000 {
					t.Errorf("got ratio=%v xids=%v", s.Ratio, s.XIDs)
				}
			},
		},
		{
			name: "block as HCL1 one-element list, nested block list",
			payload: encode(t, agentMap(map[string]any{"sim": []any{map[string]any{
				"system": "dgxa100",
				"mig":    []any{map[string]any{"gpus": []any{uint8(6), int64(7)}, "profiles": []any{"1g.10gb"}}},
			}}})),
			check: func(t *testing.T, s *sample) {
				if s.Sim.System != "dgxa100" || len(s.Sim.MIG) != 1 || s.Sim.MIG[0].GPUs[1] != 7 || s.Sim.MIG[0].Profiles[0] != "1g.10gb" {
					t.Errorf("got %+v", s.Sim)
				}
			},
		},
		{
			name:    "map attribute",
			payload: encode(t, agentMap(map[string]any{"labels": map[string]any{"a": "b"}})),
			check: func(t *testing.T, s *sample) {
				if s.Labels["a"] != "b" {
					t.Errorf("got %v", s.Labels)
				}
			},
		},
		{name: "bad duration names the key", payload: encode(t, agentMap(map[string]any{"period": "5x"})), err: `period: "5x" is not a duration`},
		{name: "fraction into int", payload: encode(t, agentMap(map[string]any{"shares": 2.5})), err: "shares: expected a whole number, got 2.5"},
		{name: "negative into uint names the index", payload: encode(t, agentMap(map[string]any{"xids": []any{int8(-1)}})), err: "xids[0]: must not be negative"},
		{name: "required missing", payload: encode(t, agentMap(map[string]any{"name": nil})), err: "name: required, but not set"},
		{name: "nested path", payload: encode(t, agentMap(map[string]any{"sim": map[string]any{"mig": []any{map[string]any{"gpus": []any{"x"}}}}})), err: "sim.mig[0].gpus[0]: expected a whole number"},
		{name: "not msgpack", payload: []byte{0xc1}, err: "not valid msgpack"},
		{name: "root not a map", payload: encode(t, "x"), err: "config: expected a block"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var s sample
			err := Decode(c.payload, &s)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want one containing %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			c.check(t, &s)
		})
	}
}

// DecodeAt names every key from where the config sits in what the user
// wrote (a task driver's config is the jobspec's config block).
func TestDecodeAtNamesKeysFromItsPath(t *testing.T) {
	for _, c := range []struct {
		payload []byte
		want    string
	}{
		{encode(t, agentMap(map[string]any{"sim": map[string]any{"mig": []any{map[string]any{"gpus": []any{"x"}}}}})), "config.sim.mig[0].gpus[0]: expected a whole number"},
		{encode(t, agentMap(map[string]any{"period": "5x"})), `config.period: "5x" is not a duration`},
		{encode(t, "x"), "config: expected a block"},
		{[]byte{0xc1}, "config is not valid msgpack"},
	} {
		var s sample
		if err := DecodeAt(c.payload, &s, "config"); err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("error %v, want one starting %q", err, c.want)
		}
	}
}

func TestEmptyPayloadIsAllDefaults(t *testing.T) {
	var s struct {
		Backend string `hcl:"backend" default:"nvml"`
		Sim     nested `hcl:"sim,block"`
	}
	if err := Decode(nil, &s); err != nil {
		t.Fatal(err)
	}
	if s.Backend != "nvml" || s.Sim.System != "dgxh100" {
		t.Fatalf("got %+v", s)
	}
}

func TestBadDeclarations(t *testing.T) {
	cases := []struct {
		name string
		v    any
		err  string
	}{
		{"bad default", &struct {
			N int `hcl:"n" default:"x"`
		}{}, "bad default"},
		{"unknown option", &struct {
			N int `hcl:"n,optional"`
		}{}, "unknown tag option"},
		{"unsupported type", &struct {
			C chan int `hcl:"c"`
		}{}, "unsupported type"},
		{"block not struct", &struct {
			B int `hcl:"b,block"`
		}{}, "must be a struct"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if _, err := Spec(c.v); err == nil || !strings.Contains(err.Error(), c.err) {
				t.Fatalf("error %v, want %q", err, c.err)
			}
		})
	}
}
