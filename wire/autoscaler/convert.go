package autoscaler

import (
	"encoding/json"
	"fmt"

	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	basepb "github.com/nomad-gpu/nomad-gpu/wire/proto/autoscaler/base"
	sharedpb "github.com/nomad-gpu/nomad-gpu/wire/proto/autoscaler/shared"
)

// Conversions between the wire messages and the plain types, written to
// behave as the agent's own (plugins/shared/util.go): both ends of this
// package use them, so a test through Launch sees what the agent would.

func typeToProto(t PluginType) (basepb.PluginType, error) {
	switch t {
	case TypeAPM:
		return basepb.PluginType_PLUGIN_TYPE_APM, nil
	case TypeStrategy:
		return basepb.PluginType_PLUGIN_TYPE_STRATEGY, nil
	case TypeTarget:
		return basepb.PluginType_PLUGIN_TYPE_TARGET, nil
	}
	return basepb.PluginType_PLUGIN_TYPE_UNSPECIFIED, fmt.Errorf("plugin is of unknown type: %d", int(t))
}

func typeFromProto(t basepb.PluginType) (PluginType, error) {
	switch t {
	case basepb.PluginType_PLUGIN_TYPE_APM:
		return TypeAPM, nil
	case basepb.PluginType_PLUGIN_TYPE_STRATEGY:
		return TypeStrategy, nil
	case basepb.PluginType_PLUGIN_TYPE_TARGET:
		return TypeTarget, nil
	}
	return 0, fmt.Errorf("plugin is of unknown type: %q", t.String())
}

// directionToProto refuses what has no wire value: the agent takes
// UNSPECIFIED as an error, so it is never sent.
func directionToProto(d Direction) (sharedpb.ScalingDirection, error) {
	switch d {
	case DirectionNone:
		return sharedpb.ScalingDirection_SCALING_DIRECTION_NONE, nil
	case DirectionDown:
		return sharedpb.ScalingDirection_SCALING_DIRECTION_DOWN, nil
	case DirectionUp:
		return sharedpb.ScalingDirection_SCALING_DIRECTION_UP, nil
	}
	return sharedpb.ScalingDirection_SCALING_DIRECTION_UNSPECIFIED,
		fmt.Errorf("scale direction is unknown: %d (want none, down or up)", int(d))
}

func directionFromProto(d sharedpb.ScalingDirection) (Direction, error) {
	switch d {
	case sharedpb.ScalingDirection_SCALING_DIRECTION_NONE:
		return DirectionNone, nil
	case sharedpb.ScalingDirection_SCALING_DIRECTION_DOWN:
		return DirectionDown, nil
	case sharedpb.ScalingDirection_SCALING_DIRECTION_UP:
		return DirectionUp, nil
	}
	return 0, fmt.Errorf("scale direction is unknown: %q", d.String())
}

// metaToProto abuses Any as the agent does: no type_url, the JSON object
// in value; nil meta is no Any at all.
func metaToProto(meta map[string]any) (*anypb.Any, error) {
	if meta == nil {
		return nil, nil
	}
	b, err := json.Marshal(meta)
	if err != nil {
		return nil, fmt.Errorf("action meta: %w", err)
	}
	return &anypb.Any{Value: b}, nil
}

// metaFromProto decodes as the agent does: JSON numbers become float64,
// empty or non-object bytes are an error, JSON null is nil meta.
func metaFromProto(a *anypb.Any) (map[string]any, error) {
	if a == nil {
		return nil, nil
	}
	out := make(map[string]any)
	if err := json.Unmarshal(a.GetValue(), &out); err != nil {
		return nil, fmt.Errorf("action meta is not a JSON object: %w", err)
	}
	return out, nil
}

func actionToProto(a Action) (*sharedpb.ScalingAction, error) {
	dir, err := directionToProto(a.Direction)
	if err != nil {
		return nil, err
	}
	meta, err := metaToProto(a.Meta)
	if err != nil {
		return nil, err
	}
	return &sharedpb.ScalingAction{
		Count:     a.Count,
		Reason:    a.Reason,
		Error:     a.Error,
		Direction: dir,
		Meta:      meta,
	}, nil
}

// actionFromProto is the agent's ProtoToScalingAction less its
// Canonicalize (which the agent's client adds). A missing action is the
// zero action, which in the agent's own types means direction none.
func actionFromProto(a *sharedpb.ScalingAction) (Action, error) {
	if a == nil {
		return Action{Direction: DirectionNone}, nil
	}
	dir, err := directionFromProto(a.GetDirection())
	if err != nil {
		return Action{}, err
	}
	meta, err := metaFromProto(a.GetMeta())
	if err != nil {
		return Action{}, err
	}
	return Action{
		Count:     a.GetCount(),
		Reason:    a.GetReason(),
		Error:     a.GetError(),
		Direction: dir,
		Meta:      meta,
	}, nil
}

func timeRangeToProto(r TimeRange) *sharedpb.TimeRange {
	return &sharedpb.TimeRange{To: timestamppb.New(r.To), From: timestamppb.New(r.From)}
}

// timeRangeFromProto: a missing bound is the Unix epoch, as in the agent.
func timeRangeFromProto(r *sharedpb.TimeRange) TimeRange {
	return TimeRange{From: r.GetFrom().AsTime(), To: r.GetTo().AsTime()}
}

func metricsToProto(ms []Metric) []*sharedpb.TimestampedMetric {
	out := make([]*sharedpb.TimestampedMetric, len(ms))
	for i, m := range ms {
		out[i] = &sharedpb.TimestampedMetric{Timestamp: timestamppb.New(m.Time), Value: m.Value}
	}
	return out
}

// metricsFromProto: a missing timestamp is the Unix epoch, as in the agent.
func metricsFromProto(ms []*sharedpb.TimestampedMetric) []Metric {
	out := make([]Metric, len(ms))
	for i, m := range ms {
		out[i] = Metric{Time: m.GetTimestamp().AsTime(), Value: m.GetValue()}
	}
	return out
}

func checkToProto(c Check) *sharedpb.ScalingPolicyCheck {
	return &sharedpb.ScalingPolicyCheck{
		Name:        c.Name,
		Source:      c.Source,
		Query:       c.Query,
		QueryWindow: durationpb.New(c.QueryWindow),
		Strategy:    &sharedpb.ScalingPolicyStrategy{Name: c.Strategy, Config: c.Config},
	}
}

func checkFromProto(c *sharedpb.ScalingPolicyCheck) Check {
	return Check{
		Name:        c.GetName(),
		Source:      c.GetSource(),
		Query:       c.GetQuery(),
		QueryWindow: c.GetQueryWindow().AsDuration(),
		Strategy:    c.GetStrategy().GetName(),
		Config:      nonNil(c.GetStrategy().GetConfig()),
	}
}

// nonNil gives the domain a map it may read without a nil check (an empty
// map and no map are the same on the wire).
func nonNil(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}
