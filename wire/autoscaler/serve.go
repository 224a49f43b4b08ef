package autoscaler

import (
	"context"
	"errors"
	"fmt"
	"path"
	"runtime/debug"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"github.com/hashicorp/nomad-autoscaler/plugins"
	"github.com/hashicorp/nomad-autoscaler/plugins/apm"
	pbase "github.com/hashicorp/nomad-autoscaler/plugins/base"
	"github.com/hashicorp/nomad-autoscaler/plugins/strategy"
	"github.com/hashicorp/nomad-autoscaler/plugins/target"
	"github.com/hashicorp/nomad-autoscaler/sdk"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nomad-gpu/nomad-gpu/wire/base"
)

// Handshake is what nomad-autoscaler expects of every external plugin:
// go-plugin app protocol version 1 and the autoscaler's magic cookie
// (not Nomad's: a Nomad plugin binary is refused, and vice versa).
var Handshake = plugins.Handshake

// ServeAPM serves p as the APM plugin name until the agent kills it (see
// Serve).
func ServeAPM(name string, p APM, logger hclog.Logger) { Serve(name, TypeAPM, p, logger) }

// ServeStrategy serves p as the strategy plugin name (see Serve).
func ServeStrategy(name string, p Strategy, logger hclog.Logger) {
	Serve(name, TypeStrategy, p, logger)
}

// ServeTarget serves p as the target plugin name (see Serve).
func ServeTarget(name string, p Target, logger hclog.Logger) { Serve(name, TypeTarget, p, logger) }

// Serve runs impl, an APM, Strategy or Target as typ says, as an external
// nomad-autoscaler plugin until the agent kills it, or its parent process
// (the agent) dies: the agent never reattaches, so an orphan would only
// linger. The protocol is upstream's (nomad-autoscaler's plugins/apm,
// plugins/strategy, plugins/target, plugins/base); Serve adds what
// upstream's plugins.Serve lacks: a panic in a call is that call's error
// (gRPC Internal), not a dead plugin the agent never relaunches, and the
// parent watchdog. name is what PluginInfo answers, which the agent
// requires to equal the plugin block's driver (the binary's file name).
// logger nil logs as base.NewLogger(name): hclog JSON on the real stderr.
// Nothing may be written to stdout before Serve; it never returns early on
// a bad impl, it exits with status 1.
func Serve(name string, typ PluginType, impl Plugin, logger hclog.Logger) {
	if logger == nil {
		logger = base.NewLogger(name)
	}
	set, err := pluginSet(name, typ, impl, logger)
	if err == nil && impl == nil {
		err = errors.New("no implementation")
	}
	if err != nil {
		logger.Error("cannot serve plugin", "plugin", name, "error", err)
		exit(1)
		return
	}
	watchParent(logger)
	base.ServeHandshake(Handshake, set, logger, grpc.ChainUnaryInterceptor(recoverPanics(logger)))
}

// pluginSet is the go-plugin set the agent dispenses from, laid out as
// upstream's plugins.Serve lays it out: the type's key and "base", both
// upstream's plugins over impl adapted to upstream's interfaces. impl may
// be nil on the agent's side, which never registers.
func pluginSet(name string, typ PluginType, impl Plugin, logger hclog.Logger) (map[string]plugin.Plugin, error) {
	tname, err := typeName(typ)
	if err != nil {
		return nil, err
	}
	b := adapter{name: name, typ: tname, plugin: impl}
	var p plugin.Plugin
	switch typ {
	case TypeAPM:
		a, ok := impl.(APM)
		if !ok && impl != nil {
			return nil, fmt.Errorf("%T is not an APM", impl)
		}
		p = &apm.PluginAPM{Impl: &apmAdapter{adapter: b, impl: a}}
	case TypeStrategy:
		s, ok := impl.(Strategy)
		if !ok && impl != nil {
			return nil, fmt.Errorf("%T is not a Strategy", impl)
		}
		p = &strategy.PluginStrategy{Impl: &strategyAdapter{adapter: b, impl: s}}
	case TypeTarget:
		t, ok := impl.(Target)
		if !ok && impl != nil {
			return nil, fmt.Errorf("%T is not a Target", impl)
		}
		p = &target.PluginTarget{Impl: &targetAdapter{adapter: b, impl: t}}
	}
	return map[string]plugin.Plugin{
		typ.String():       p,
		sdk.PluginTypeBase: &pbase.PluginBase{Impl: &b},
	}, nil
}

// recoverPanics makes a panic in any call, ours or upstream's conversion
// code, that call's error (code Internal) instead of killing the plugin,
// which the agent would never relaunch.
func recoverPanics(logger hclog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			if r := recover(); r != nil {
				method := path.Base(info.FullMethod)
				logger.Error("plugin panicked", "method", method, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
				resp, err = nil, status.Errorf(codes.Internal, "%s: plugin panicked: %v", method, r)
			}
		}()
		return handler(ctx, req)
	}
}

// adapter is upstream's base.Base over a Plugin. An error from a domain
// method reaches the agent as gRPC Unknown with its message (a status
// error keeps its code).
type adapter struct {
	name, typ string
	plugin    Plugin
}

func (a *adapter) PluginInfo() (*pbase.PluginInfo, error) {
	return &pbase.PluginInfo{Name: a.name, PluginType: a.typ}, nil
}

func (a *adapter) SetConfig(config map[string]string) error {
	return a.plugin.SetConfig(nonNil(config))
}

type apmAdapter struct {
	adapter
	impl APM
}

func (a *apmAdapter) Query(q string, r sdk.TimeRange) (sdk.TimestampedMetrics, error) {
	ms, err := a.impl.Query(q, timeRangeFromSDK(r))
	if err != nil {
		return nil, err
	}
	return metricsToSDK(ms), nil
}

// QueryMultiple is Unimplemented for an APM without APMMultiple: only
// Enterprise DAS calls it.
func (a *apmAdapter) QueryMultiple(q string, r sdk.TimeRange) ([]sdk.TimestampedMetrics, error) {
	m, ok := a.impl.(APMMultiple)
	if !ok {
		return nil, status.Error(codes.Unimplemented, "QueryMultiple is not supported by this APM")
	}
	sets, err := m.QueryMultiple(q, timeRangeFromSDK(r))
	if err != nil {
		return nil, err
	}
	out := make([]sdk.TimestampedMetrics, len(sets))
	for i, ms := range sets {
		out[i] = metricsToSDK(ms)
	}
	return out, nil
}

type strategyAdapter struct {
	adapter
	impl Strategy
}

// Run never sends direction UNSPECIFIED: a strategy returning it gets the
// error "strategy returned a bad action: …".
func (s *strategyAdapter) Run(eval *sdk.ScalingCheckEvaluation, count int64) (*sdk.ScalingCheckEvaluation, error) {
	a, err := s.impl.Run(checkFromSDK(eval.Check), metricsFromSDK(eval.Metrics), count)
	if err != nil {
		return nil, err
	}
	action, err := actionToSDK(a)
	if err != nil {
		return nil, fmt.Errorf("strategy returned a bad action: %w", err)
	}
	eval.Action = &action
	return eval, nil
}

type targetAdapter struct {
	adapter
	impl Target
}

// Scale: an error that errors.Is ErrScaleNoOp becomes upstream's
// TargetScalingNoOpError, which upstream sends as code Aborted.
func (t *targetAdapter) Scale(action sdk.ScalingAction, config map[string]string) error {
	a, err := actionFromSDK(action)
	if err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	if err := t.impl.Scale(a, nonNil(config)); err != nil {
		if errors.Is(err, ErrScaleNoOp) {
			return sdk.NewTargetScalingNoOpError("%s", err.Error())
		}
		return err
	}
	return nil
}

func (t *targetAdapter) Status(config map[string]string) (*sdk.TargetStatus, error) {
	st, err := t.impl.Status(nonNil(config))
	if err != nil {
		return nil, err
	}
	return &sdk.TargetStatus{Ready: st.Ready, Count: st.Count, Meta: st.Meta}, nil
}
