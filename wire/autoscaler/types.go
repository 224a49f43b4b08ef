// Package autoscaler speaks the nomad-autoscaler external plugin protocol
// (go-plugin over gRPC, app protocol version 1): the base, APM, strategy
// and target services, through upstream's own plugins and sdk packages
// (github.com/hashicorp/nomad-autoscaler). Domain code implements the
// interfaces here with the plain Go types here; no protobuf or sdk type
// leaves this package.
package autoscaler

import (
	"errors"
	"time"
)

// PluginType is what a plugin is to the agent; the agent refuses a plugin
// whose type does not match its config block.
type PluginType int

const (
	TypeAPM      PluginType = 1
	TypeStrategy PluginType = 2
	TypeTarget   PluginType = 3
)

// String is the type's name in the agent's config and plugin set: "apm",
// "strategy" or "target".
func (t PluginType) String() string {
	switch t {
	case TypeAPM:
		return "apm"
	case TypeStrategy:
		return "strategy"
	case TypeTarget:
		return "target"
	}
	return "unknown"
}

// Config keys the agent puts in config maps besides the operator's.
const (
	// ConfigKeyNomadConfigInherit in a plugin block's config, set to
	// "false", stops the agent adding the NomadConfigKeys; it stays in the
	// map the plugin gets.
	ConfigKeyNomadConfigInherit = "nomad_config_inherit"
	// ConfigKeyGRPCTimeout is in every Status and Scale config (a policy's
	// target block): 75% of the policy's evaluation_interval, e.g. "7.5s".
	// The agent bounds Status (not Scale) by it.
	ConfigKeyGRPCTimeout = "_nomad_autoscaler_grpc_timeout"
)

// NomadConfigKeys are the agent's Nomad connection settings it adds to a
// plugin block's config (each only where the block leaves it empty and
// the agent has a value), so a plugin that checks its keys must allow them.
var NomadConfigKeys = []string{
	"nomad_address", "nomad_region", "nomad_namespace", "nomad_token",
	"nomad_http-auth", "nomad_ca-cert", "nomad_ca-path", "nomad_client-cert",
	"nomad_client-key", "nomad_tls-server-name", "nomad_skip-verify",
	"nomad_block-query-wait-time",
}

// Plugin is what every autoscaler plugin does. SetConfig gets the block's
// `config` map plus the agent's nomad_* connection keys (unless the block
// sets nomad_config_inherit = "false"); the agent may call it again at any
// time, on reload. An error stops the agent from starting: say which key is
// wrong and what is allowed.
type Plugin interface {
	SetConfig(config map[string]string) error
}

// Metric is one timestamped value an APM returns.
type Metric struct {
	Time  time.Time
	Value float64
}

// TimeRange is the window a query covers; From == To for an "instant"
// query window.
type TimeRange struct {
	From, To time.Time
}

// APM answers a check's query. Returning no metrics is a check error in
// the agent ("no metrics"): an APM that means zero returns one zero.
type APM interface {
	Plugin
	Query(query string, r TimeRange) ([]Metric, error)
}

// APMMultiple is an APM that also answers QueryMultiple, which only
// Enterprise Dynamic Application Sizing calls; an APM without it answers
// Unimplemented.
type APMMultiple interface {
	APM
	QueryMultiple(query string, r TimeRange) ([][]Metric, error)
}

// Direction is which way a strategy wants to scale. The agent refuses a
// response without one.
type Direction int

const (
	DirectionNone Direction = 1
	DirectionDown Direction = 2
	DirectionUp   Direction = 3
)

func (d Direction) String() string {
	switch d {
	case DirectionNone:
		return "none"
	case DirectionDown:
		return "down"
	case DirectionUp:
		return "up"
	}
	return "unspecified"
}

// Action is a strategy's decision, or what a target is asked to do.
type Action struct {
	// Count is the desired count, absolute.
	Count int64
	// Reason is what the agent logs for the decision: a human reads it.
	Reason    string
	Error     bool
	Direction Direction
	// Meta travels as a JSON object; nil for none.
	Meta map[string]any
}

// Check is the policy check a strategy runs for.
type Check struct {
	Name, Source, Query string
	QueryWindow         time.Duration
	// Strategy is the strategy block's label; Config its settings, every
	// value a string (the agent formats them with %v: "0.5", "true").
	Strategy string
	Config   map[string]string
}

// Strategy turns a check's metrics and the target's current count into
// an action.
type Strategy interface {
	Plugin
	Run(check Check, metrics []Metric, count int64) (Action, error)
}

// TargetStatus is what a target reports of the thing it scales.
type TargetStatus struct {
	Ready bool
	Count int64
	Meta  map[string]string
}

// ErrScaleNoOp, returned (or wrapped) by Target.Scale, tells the agent the
// target did not change: it reaches the agent as gRPC code Aborted, and
// the agent then skips its post-scale steps (no cooldown). Launch's Client
// returns an error that errors.Is ErrScaleNoOp, carrying the message.
var ErrScaleNoOp = errors.New("scale is a no-op")

// Target scales a thing: a job group, a cloud node group, or in tests a
// set of local Nomad clients. config is the policy's target block.
type Target interface {
	Plugin
	Scale(action Action, config map[string]string) error
	Status(config map[string]string) (TargetStatus, error)
}
