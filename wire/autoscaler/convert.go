package autoscaler

import (
	"fmt"

	"github.com/hashicorp/nomad-autoscaler/sdk"
)

// typeName is t as upstream's sdk names it (sdk.PluginTypeAPM, …).
func typeName(t PluginType) (string, error) {
	switch t {
	case TypeAPM:
		return sdk.PluginTypeAPM, nil
	case TypeStrategy:
		return sdk.PluginTypeStrategy, nil
	case TypeTarget:
		return sdk.PluginTypeTarget, nil
	}
	return "", fmt.Errorf("plugin is of unknown type: %d", int(t))
}

func typeFromName(s string) (PluginType, error) {
	switch s {
	case sdk.PluginTypeAPM:
		return TypeAPM, nil
	case sdk.PluginTypeStrategy:
		return TypeStrategy, nil
	case sdk.PluginTypeTarget:
		return TypeTarget, nil
	}
	return 0, fmt.Errorf("plugin is of unknown type: %q", s)
}

// directionToSDK refuses what has no wire value: the agent takes
// UNSPECIFIED as an error, so it is never sent.
func directionToSDK(d Direction) (sdk.ScaleDirection, error) {
	switch d {
	case DirectionNone:
		return sdk.ScaleDirectionNone, nil
	case DirectionDown:
		return sdk.ScaleDirectionDown, nil
	case DirectionUp:
		return sdk.ScaleDirectionUp, nil
	}
	return sdk.ScaleDirectionNone, fmt.Errorf("scale direction is unknown: %d (want none, down or up)", int(d))
}

func directionFromSDK(d sdk.ScaleDirection) (Direction, error) {
	switch d {
	case sdk.ScaleDirectionNone:
		return DirectionNone, nil
	case sdk.ScaleDirectionDown:
		return DirectionDown, nil
	case sdk.ScaleDirectionUp:
		return DirectionUp, nil
	}
	return 0, fmt.Errorf("scale direction is unknown: %d", int(d))
}

func actionToSDK(a Action) (sdk.ScalingAction, error) {
	dir, err := directionToSDK(a.Direction)
	if err != nil {
		return sdk.ScalingAction{}, err
	}
	return sdk.ScalingAction{Count: a.Count, Reason: a.Reason, Error: a.Error, Direction: dir, Meta: a.Meta}, nil
}

func actionFromSDK(a sdk.ScalingAction) (Action, error) {
	dir, err := directionFromSDK(a.Direction)
	if err != nil {
		return Action{}, err
	}
	return Action{Count: a.Count, Reason: a.Reason, Error: a.Error, Direction: dir, Meta: a.Meta}, nil
}

func timeRangeToSDK(r TimeRange) sdk.TimeRange { return sdk.TimeRange{From: r.From, To: r.To} }

func timeRangeFromSDK(r sdk.TimeRange) TimeRange { return TimeRange{From: r.From, To: r.To} }

func metricsToSDK(ms []Metric) sdk.TimestampedMetrics {
	out := make(sdk.TimestampedMetrics, len(ms))
	for i, m := range ms {
		out[i] = sdk.TimestampedMetric{Timestamp: m.Time, Value: m.Value}
	}
	return out
}

// metricsFromSDK: a missing timestamp is the Unix epoch, as upstream
// decodes it.
func metricsFromSDK(ms sdk.TimestampedMetrics) []Metric {
	out := make([]Metric, len(ms))
	for i, m := range ms {
		out[i] = Metric{Time: m.Timestamp, Value: m.Value}
	}
	return out
}

func checkToSDK(c Check) *sdk.ScalingPolicyCheck {
	return &sdk.ScalingPolicyCheck{
		Name:        c.Name,
		Source:      c.Source,
		Query:       c.Query,
		QueryWindow: c.QueryWindow,
		Strategy:    &sdk.ScalingPolicyStrategy{Name: c.Strategy, Config: c.Config},
	}
}

func checkFromSDK(c *sdk.ScalingPolicyCheck) Check {
	if c == nil {
		return Check{Config: map[string]string{}}
	}
	out := Check{Name: c.Name, Source: c.Source, Query: c.Query, QueryWindow: c.QueryWindow, Config: map[string]string{}}
	if c.Strategy != nil {
		out.Strategy, out.Config = c.Strategy.Name, nonNil(c.Strategy.Config)
	}
	return out
}

// nonNil gives the domain a map it may read without a nil check (an empty
// map and no map are the same on the wire).
func nonNil(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}
