package schema_test

import (
	"testing"
	"time"

	"github.com/nomad-gpu/nomad-gpu/wire/schema"
	"github.com/nomad-gpu/nomad-gpu/wire/wiretest"
)

// fuzzConfig has every kind of field a plugin config uses: attributes of
// each type with and without defaults, a required one, lists, maps, a block
// and a repeatable block nested in it.
type fuzzConfig struct {
	Name    string            `hcl:"name,required"`
	Mode    string            `hcl:"mode" default:"kill"`
	Period  time.Duration     `hcl:"period" default:"1m"`
	Timeout time.Duration     `hcl:"timeout"`
	Count   int               `hcl:"count" default:"2"`
	Small   int8              `hcl:"small"`
	Limit   int64             `hcl:"limit"`
	Big     uint64            `hcl:"big"`
	Ratio   float64           `hcl:"ratio" default:"0.5"`
	Enabled bool              `hcl:"enabled" default:"true"`
	IDs     []string          `hcl:"ids"`
	XIDs    []uint64          `hcl:"xids" default:"[13, 31, 43]"`
	Labels  map[string]string `hcl:"labels"`
	Weights map[string]int    `hcl:"weights"`
	Sim     fuzzSim           `hcl:"sim,block"`
	Shares  []fuzzShare       `hcl:"share,blocks"`
}

type fuzzSim struct {
	System string       `hcl:"system" default:"dgxh100"`
	Seed   string       `hcl:"seed"`
	MIG    []fuzzLayout `hcl:"mig,blocks"`
}

type fuzzLayout struct {
	GPUs     []int    `hcl:"gpus"`
	Profiles []string `hcl:"profiles"`
}

type fuzzShare struct {
	GPUs   []string `hcl:"gpus"`
	Shares int      `hcl:"shares" default:"2"`
}

// fuzzSeeds are operator configs as the agent would encode them.
var fuzzSeeds = []map[string]any{
	{"name": "n"},
	{"name": "full", "mode": "warn", "period": "30s", "timeout": "1h2m3.5s", "count": 7, "small": -8,
		"limit": -1 << 40, "big": "18446744073709551615", "ratio": "0.1", "enabled": false,
		"ids": []string{"0", "GPU-8b48"}, "xids": []int{79}, "labels": map[string]any{"a": "b", "": "empty"},
		"weights": map[string]any{"x": 1, "y": -2},
		"sim": map[string]any{"system": "dgxa100", "seed": "s", "mig": []map[string]any{
			{"gpus": []int{6, 7}, "profiles": []string{"3g.40gb", "1g.10gb"}}, {"gpus": []int{0}}}},
		"share": []map[string]any{{"gpus": []string{"all"}, "shares": 4}, {"gpus": []string{"1"}}}},
	{"name": "edge", "count": 1.0, "ratio": 1e300, "big": 0, "period": "-5m", "ids": []string{}, "xids": []int{}},
	{"name": "bad", "count": 2.5, "period": "5x", "small": 300},
}

func FuzzDecode(f *testing.F) {
	wiretest.AddSeeds(f, &fuzzConfig{}, nil, fuzzSeeds)
	f.Add([]byte{})
	f.Add([]byte{0xdd, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		var cfg fuzzConfig
		if err := schema.Decode(data, &cfg); err != nil {
			return
		}
		// What was accepted survives a round trip through the agent's
		// encoding unchanged.
		wiretest.RoundTrip(t, &cfg, nil)
	})
}

// TestFuzzSeedsDecode keeps the seeds meaningful: all but "bad" decode.
func TestFuzzSeedsDecode(t *testing.T) {
	spec, err := schema.Spec(&fuzzConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range fuzzSeeds {
		b, err := wiretest.EncodeConfig(spec, s)
		if err != nil {
			t.Fatal(err)
		}
		var cfg fuzzConfig
		if err := schema.Decode(b, &cfg); (err == nil) != (s["name"] != "bad") {
			t.Errorf("seed %v: decode error %v", s["name"], err)
		}
	}
}
