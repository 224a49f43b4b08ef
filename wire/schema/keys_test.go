package schema

import (
	"strings"
	"testing"
)

// A key the struct does not declare is named with its path and the keys
// allowed beside it, in blocks and lists of blocks alike (as a parsed
// jobspec has them: a block is a list of one map); declared keys pass,
// whatever their values (FromValue judges those).
func TestCheckKeys(t *testing.T) {
	cases := []struct {
		name string
		raw  any
		want string // "" passes
	}{
		{"declared keys", map[string]any{"backend": "sim", "name": "x", "sim": []any{map[string]any{"system": "dgxa100", "mig": []any{map[string]any{"gpus": []any{1}}}}}}, ""},
		{"nothing", nil, ""},
		{"a value of the wrong type is not its business", map[string]any{"shares": "many"}, ""},
		{"unknown top key", map[string]any{"backnd": "sim"}, `config.backnd: no such key; allowed in config: backend, period, shares, ratio, enabled, xids, labels, name, sim`},
		{"unknown key in a block", map[string]any{"sim": []any{map[string]any{"sytem": "dgxa100"}}}, `config.sim.sytem: no such key; allowed in config.sim: system, mig`},
		{"unknown key in a list of blocks", map[string]any{"sim": map[string]any{"mig": []any{map[string]any{"gpus": []any{0}}, map[string]any{"profile": "1g.10gb"}}}}, `config.sim.mig[1].profile: no such key; allowed in config.sim.mig[1]: gpus, profiles`},
		{"a field without a tag is no key", map[string]any{"Ignored": "x"}, `config.Ignored: no such key`},
		{"first in sorted order", map[string]any{"zz": 1, "aa": 2}, `config.aa: no such key`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := CheckKeys(c.raw, &sample{}, "config")
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("got %v, want none", err)
			case c.want != "" && (err == nil || !strings.HasPrefix(err.Error(), c.want)):
				t.Fatalf("got %v, want %q", err, c.want)
			}
		})
	}
	if err := CheckKeys(nil, sample{}, ""); err == nil {
		t.Error("a struct, not a pointer to one: no error")
	}
}
