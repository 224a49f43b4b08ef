package wiretest

import (
	"reflect"
	"testing"

	"github.com/nomad-gpu/nomad-gpu/wire/schema"
)

// AddSeeds adds each operator config, encoded against cfg's schema as the
// agent would (EncodeConfig) and put after prefix, to f's seed corpus. cfg is
// a pointer to the config struct the fuzz target decodes into.
func AddSeeds(f *testing.F, cfg any, prefix []byte, seeds []map[string]any) {
	f.Helper()
	spec, err := schema.Spec(cfg)
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range seeds {
		b, err := EncodeConfig(spec, s)
		if err != nil {
			f.Fatalf("seed %v: %v", s, err)
		}
		f.Add(append(append([]byte{}, prefix...), b...))
	}
}

// RoundTrip fails the test unless cfg, a pointer to a config that was decoded
// and accepted, survives being encoded again as the agent would: it decodes
// to an equal value, which validate (nil: none) accepts again.
func RoundTrip(t testing.TB, cfg any, validate func(any) error) {
	t.Helper()
	spec, err := schema.Spec(cfg)
	if err != nil {
		t.Fatal(err)
	}
	again, err := EncodeConfig(spec, ConfigValues(cfg))
	if err != nil {
		t.Fatalf("re-encoding accepted config %+v: %v", cfg, err)
	}
	back := reflect.New(reflect.TypeOf(cfg).Elem()).Interface()
	if err := schema.Decode(again, back); err != nil {
		t.Fatalf("decoding re-encoded config %+v: %v", cfg, err)
	}
	if !reflect.DeepEqual(cfg, back) {
		t.Fatalf("round trip changed the config:\n%+v\n%+v", cfg, back)
	}
	if validate != nil {
		if err := validate(back); err != nil {
			t.Fatalf("accepted config %+v rejected after a round trip: %v", cfg, err)
		}
	}
}
