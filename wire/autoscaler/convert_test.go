package autoscaler

import (
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/anypb"

	basepb "github.com/nomad-gpu/nomad-gpu/wire/proto/autoscaler/base"
	sharedpb "github.com/nomad-gpu/nomad-gpu/wire/proto/autoscaler/shared"
)

func TestDirections(t *testing.T) {
	for _, tc := range []struct {
		d    Direction
		wire sharedpb.ScalingDirection
		ok   bool
	}{
		{DirectionNone, sharedpb.ScalingDirection_SCALING_DIRECTION_NONE, true},
		{DirectionDown, sharedpb.ScalingDirection_SCALING_DIRECTION_DOWN, true},
		{DirectionUp, sharedpb.ScalingDirection_SCALING_DIRECTION_UP, true},
		{0, sharedpb.ScalingDirection_SCALING_DIRECTION_UNSPECIFIED, false},
		{127, sharedpb.ScalingDirection_SCALING_DIRECTION_UNSPECIFIED, false},
	} {
		w, err := directionToProto(tc.d)
		if (err == nil) != tc.ok || w != tc.wire {
			t.Errorf("directionToProto(%s) = %s, %v", tc.d, w, err)
		}
		d, err := directionFromProto(tc.wire)
		if tc.ok && (err != nil || d != tc.d) || !tc.ok && err == nil {
			t.Errorf("directionFromProto(%s) = %s, %v", tc.wire, d, err)
		}
	}
	if _, err := directionFromProto(sharedpb.ScalingDirection(9)); err == nil {
		t.Error("direction 9 read")
	}
}

func TestPluginTypes(t *testing.T) {
	for _, typ := range []PluginType{TypeAPM, TypeStrategy, TypeTarget} {
		w, err := typeToProto(typ)
		if err != nil || int(w) != int(typ) {
			t.Errorf("typeToProto(%s) = %s, %v", typ, w, err)
		}
		if back, err := typeFromProto(w); err != nil || back != typ {
			t.Errorf("typeFromProto(%s) = %s, %v", w, back, err)
		}
	}
	if _, err := typeFromProto(basepb.PluginType_PLUGIN_TYPE_UNSPECIFIED); err == nil {
		t.Error("UNSPECIFIED read as a type")
	}
}

func TestMeta(t *testing.T) {
	for _, tc := range []struct {
		name string
		meta map[string]any
		wire *anypb.Any
		err  string
	}{
		{name: "nil is absent", meta: nil, wire: nil},
		{name: "empty", meta: map[string]any{}, wire: &anypb.Any{Value: []byte(`{}`)}},
		{name: "values", meta: map[string]any{"a": 1.5, "b": []any{"x"}}, wire: &anypb.Any{Value: []byte(`{"a":1.5,"b":["x"]}`)}},
		{name: "NaN", meta: map[string]any{"a": math.NaN()}, err: "unsupported value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := metaToProto(tc.meta)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if (got == nil) != (tc.wire == nil) || got != nil && (got.GetTypeUrl() != "" || string(got.GetValue()) != string(tc.wire.GetValue())) {
				t.Fatalf("metaToProto = %v, want %v", got, tc.wire)
			}
			back, err := metaFromProto(got)
			if err != nil || !reflect.DeepEqual(back, tc.meta) {
				t.Fatalf("metaFromProto = %v, %v", back, err)
			}
		})
	}
	for _, bad := range []string{"", "{", "[1]", `"s"`, "1"} {
		if _, err := metaFromProto(&anypb.Any{Value: []byte(bad)}); err == nil {
			t.Errorf("meta %q read as an object", bad)
		}
	}
	if m, err := metaFromProto(&anypb.Any{Value: []byte("null")}); err != nil || m != nil {
		t.Errorf("meta null = %v, %v; want nil as the agent reads it", m, err)
	}
}

func TestTimeRangeWire(t *testing.T) {
	to := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	from := to.Add(-time.Hour)
	w := timeRangeToProto(TimeRange{From: from, To: to})
	if !w.GetTo().AsTime().Equal(to) || !w.GetFrom().AsTime().Equal(from) {
		t.Fatalf("wire range %v", w)
	}
	if got := timeRangeFromProto(w); !got.From.Equal(from) || !got.To.Equal(to) {
		t.Fatalf("range %v", got)
	}
	if got := timeRangeFromProto(nil); !got.From.Equal(time.Unix(0, 0)) || !got.To.Equal(time.Unix(0, 0)) {
		t.Fatalf("missing range read as %v, want the epoch as the agent does", got)
	}
}

func TestActionFromMissing(t *testing.T) {
	a, err := actionFromProto(nil)
	if err != nil || a.Direction != DirectionNone || a.Meta != nil {
		t.Fatalf("missing action = %#v, %v", a, err)
	}
}
