package contract

import (
	"reflect"
	"testing"
)

func TestMIGProfilesRoundTrip(t *testing.T) {
	cases := []struct {
		text string
		want []MIGProfileSpec
	}{
		{"none", nil},
		{"1g.10gb:1x7", []MIGProfileSpec{{"1g.10gb", 1, 7}}},
		{"1g.10gb:1x7,3g.40gb:3x2,7g.80gb:7x1", []MIGProfileSpec{{"1g.10gb", 1, 7}, {"3g.40gb", 3, 2}, {"7g.80gb", 7, 1}}},
	}
	for _, c := range cases {
		got, err := ParseMIGProfiles(c.text)
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("ParseMIGProfiles(%q) = %v, %v; want %v", c.text, got, err, c.want)
		}
		if back := FormatMIGProfiles(got); back != c.text {
			t.Errorf("FormatMIGProfiles(%v) = %q; want %q", got, back, c.text)
		}
	}
	for _, bad := range []string{"1g.10gb", "1g.10gb:1", "1g.10gb:0x7", "1g.10gb:8x1", ":1x7", "1g.10gb:1x0", "1g.10gb:1x7,"} {
		if _, err := ParseMIGProfiles(bad); err == nil {
			t.Errorf("ParseMIGProfiles(%q) accepted", bad)
		}
	}
}

func TestParseLayoutState(t *testing.T) {
	for _, s := range []LayoutState{LayoutReady, LayoutHeld, LayoutDraining, LayoutError} {
		if got, ok := ParseLayoutState(string(s)); !ok || got != s {
			t.Errorf("ParseLayoutState(%q) = %q, %v", s, got, ok)
		}
	}
	if _, ok := ParseLayoutState("busy"); ok {
		t.Error("ParseLayoutState accepted busy")
	}
}
