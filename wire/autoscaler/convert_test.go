package autoscaler

import (
	"reflect"
	"testing"
	"time"

	"github.com/hashicorp/nomad-autoscaler/sdk"
)

func TestDirections(t *testing.T) {
	for _, tc := range []struct {
		d   Direction
		sdk sdk.ScaleDirection
	}{
		{DirectionNone, sdk.ScaleDirectionNone},
		{DirectionDown, sdk.ScaleDirectionDown},
		{DirectionUp, sdk.ScaleDirectionUp},
	} {
		w, err := directionToSDK(tc.d)
		if err != nil || w != tc.sdk {
			t.Errorf("directionToSDK(%s) = %s, %v", tc.d, w, err)
		}
		d, err := directionFromSDK(tc.sdk)
		if err != nil || d != tc.d {
			t.Errorf("directionFromSDK(%s) = %s, %v", tc.sdk, d, err)
		}
	}
	for _, d := range []Direction{0, 127} {
		if _, err := directionToSDK(d); err == nil {
			t.Errorf("direction %d sent", d)
		}
	}
	if _, err := directionFromSDK(sdk.ScaleDirectionRecommendation); err == nil {
		t.Error("direction recommendation read")
	}
}

func TestPluginTypes(t *testing.T) {
	for _, typ := range []PluginType{TypeAPM, TypeStrategy, TypeTarget} {
		w, err := typeName(typ)
		if err != nil || w != typ.String() {
			t.Errorf("typeName(%s) = %s, %v", typ, w, err)
		}
		if back, err := typeFromName(w); err != nil || back != typ {
			t.Errorf("typeFromName(%s) = %s, %v", w, back, err)
		}
	}
	if _, err := typeFromName(sdk.PluginTypeBase); err == nil {
		t.Error("base read as a type")
	}
	if _, err := typeName(0); err == nil {
		t.Error("type 0 named")
	}
}

func TestRoundTrips(t *testing.T) {
	ts := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	ms := []Metric{{Time: ts, Value: 1.5}, {Time: ts.Add(time.Second), Value: -2}}
	if got := metricsFromSDK(metricsToSDK(ms)); !reflect.DeepEqual(got, ms) {
		t.Errorf("metrics %v", got)
	}
	r := TimeRange{From: ts.Add(-time.Hour), To: ts}
	if got := timeRangeFromSDK(timeRangeToSDK(r)); got != r {
		t.Errorf("range %v", got)
	}
	c := Check{Name: "q", Source: "s", Query: "x", QueryWindow: time.Minute, Strategy: "gpu-queue", Config: map[string]string{"a": "b"}}
	if got := checkFromSDK(checkToSDK(c)); !reflect.DeepEqual(got, c) {
		t.Errorf("check %v", got)
	}
	if got := checkFromSDK(&sdk.ScalingPolicyCheck{Name: "n"}); got.Config == nil {
		t.Error("a check without a strategy block has a nil config")
	}
	a := Action{Count: 3, Reason: "r", Error: true, Direction: DirectionUp, Meta: map[string]any{"k": 1.0}}
	sa, err := actionToSDK(a)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := actionFromSDK(sa); err != nil || !reflect.DeepEqual(got, a) {
		t.Errorf("action %v, %v", got, err)
	}
}
