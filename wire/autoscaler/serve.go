package autoscaler

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nomad-gpu/nomad-gpu/wire/base"
	apmpb "github.com/nomad-gpu/nomad-gpu/wire/proto/autoscaler/apm"
	basepb "github.com/nomad-gpu/nomad-gpu/wire/proto/autoscaler/base"
	strategypb "github.com/nomad-gpu/nomad-gpu/wire/proto/autoscaler/strategy"
	targetpb "github.com/nomad-gpu/nomad-gpu/wire/proto/autoscaler/target"
)

// Handshake is what nomad-autoscaler expects of every external plugin:
// go-plugin app protocol version 1 and the autoscaler's magic cookie
// (not Nomad's: a Nomad plugin binary is refused, and vice versa).
var Handshake = plugin.HandshakeConfig{
	ProtocolVersion:  1,
	MagicCookieKey:   "NOMAD_AUTOSCALER_PLUGIN_MAGIC_COOKIE",
	MagicCookieValue: "e082fa04d587a6525d683666fa253d6afda00f20c122c54a80a3ed57fec99ff3",
}

// keyBase is the plugin-set key of BasePluginService; a plugin's own
// service is under its PluginType's String.
const keyBase = "base"

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
// linger. name is what PluginInfo answers, which the agent requires to
// equal the plugin block's driver (the binary's file name). logger nil
// logs as base.NewLogger(name): hclog JSON on the real stderr. Nothing may
// be written to stdout before Serve; it never returns early on a bad impl,
// it exits with status 1.
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
	base.ServeHandshake(Handshake, set, logger)
}

// pluginSet is the go-plugin set the agent dispenses from: "base" and the
// type's own key, as upstream's Serve lays it out; impl may be nil on the
// agent's side, which never registers.
func pluginSet(name string, typ PluginType, impl Plugin, logger hclog.Logger) (map[string]plugin.Plugin, error) {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	wireType, err := typeToProto(typ)
	if err != nil {
		return nil, err
	}
	var register func(*grpc.Server)
	switch typ {
	case TypeAPM:
		p, ok := impl.(APM)
		if !ok && impl != nil {
			return nil, fmt.Errorf("%T is not an APM", impl)
		}
		register = func(s *grpc.Server) { apmpb.RegisterAPMPluginServiceServer(s, &apmServer{impl: p, logger: logger}) }
	case TypeStrategy:
		p, ok := impl.(Strategy)
		if !ok && impl != nil {
			return nil, fmt.Errorf("%T is not a Strategy", impl)
		}
		register = func(s *grpc.Server) {
			strategypb.RegisterStrategyPluginServiceServer(s, &strategyServer{impl: p, logger: logger})
		}
	case TypeTarget:
		p, ok := impl.(Target)
		if !ok && impl != nil {
			return nil, fmt.Errorf("%T is not a Target", impl)
		}
		register = func(s *grpc.Server) {
			targetpb.RegisterTargetPluginServiceServer(s, &targetServer{impl: p, logger: logger})
		}
	}
	// The agent dispenses only the type's key and reaches BasePluginService
	// through the same connection, so the type's client carries both.
	return map[string]plugin.Plugin{
		keyBase: &base.GRPCService{
			Register: func(s *grpc.Server) {
				basepb.RegisterBasePluginServiceServer(s, &baseServer{name: name, typ: wireType, impl: impl, logger: logger})
			},
			NewClient: func(ctx context.Context, c *grpc.ClientConn) any { return newRPC(ctx, c) },
		},
		typ.String(): &base.GRPCService{
			Register:  register,
			NewClient: func(ctx context.Context, c *grpc.ClientConn) any { return newRPC(ctx, c) },
		},
	}, nil
}

// call runs one domain call for a gRPC method: its error becomes a gRPC
// error with the message intact (a status error keeps its code), and a
// panic becomes Internal instead of killing the plugin, which the agent
// would never relaunch.
func call[T any](logger hclog.Logger, method string, f func() (T, error)) (resp T, err error) {
	defer func() {
		if r := recover(); r != nil {
			logger.Error("plugin panicked", "method", method, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			var zero T
			resp, err = zero, status.Errorf(codes.Internal, "%s: plugin panicked: %v", method, r)
		}
	}()
	resp, err = f()
	if err != nil {
		var zero T
		return zero, toStatus(err)
	}
	return resp, nil
}

func toStatus(err error) error {
	if errors.Is(err, ErrScaleNoOp) {
		return status.Error(codes.Aborted, err.Error())
	}
	if s, ok := status.FromError(err); ok {
		return s.Err()
	}
	return status.Error(codes.Unknown, err.Error())
}

type baseServer struct {
	basepb.UnimplementedBasePluginServiceServer
	name   string
	typ    basepb.PluginType
	impl   Plugin
	logger hclog.Logger
}

func (s *baseServer) PluginInfo(context.Context, *basepb.PluginInfoRequest) (*basepb.PluginInfoResponse, error) {
	return &basepb.PluginInfoResponse{Name: s.name, Type: s.typ}, nil
}

func (s *baseServer) SetConfig(_ context.Context, req *basepb.SetConfigRequest) (*basepb.SetConfigResponse, error) {
	return call(s.logger, "SetConfig", func() (*basepb.SetConfigResponse, error) {
		if err := s.impl.SetConfig(nonNil(req.GetConfig())); err != nil {
			return nil, err
		}
		return &basepb.SetConfigResponse{}, nil
	})
}

type apmServer struct {
	apmpb.UnimplementedAPMPluginServiceServer
	impl   APM
	logger hclog.Logger
}

func (s *apmServer) Query(_ context.Context, req *apmpb.QueryRequest) (*apmpb.QueryResponse, error) {
	return call(s.logger, "Query", func() (*apmpb.QueryResponse, error) {
		ms, err := s.impl.Query(req.GetQuery(), timeRangeFromProto(req.GetTimeRange()))
		if err != nil {
			return nil, err
		}
		return &apmpb.QueryResponse{TimestampedMetric: metricsToProto(ms)}, nil
	})
}

func (s *apmServer) QueryMultiple(_ context.Context, req *apmpb.QueryMultipleRequest) (*apmpb.QueryMultipleResponse, error) {
	m, ok := s.impl.(APMMultiple)
	if !ok {
		return nil, status.Error(codes.Unimplemented, "QueryMultiple is not supported by this APM")
	}
	return call(s.logger, "QueryMultiple", func() (*apmpb.QueryMultipleResponse, error) {
		sets, err := m.QueryMultiple(req.GetQuery(), timeRangeFromProto(req.GetTimeRange()))
		if err != nil {
			return nil, err
		}
		out := make([]*apmpb.QueryResponse, len(sets))
		for i, ms := range sets {
			out[i] = &apmpb.QueryResponse{TimestampedMetric: metricsToProto(ms)}
		}
		return &apmpb.QueryMultipleResponse{TimestampedMetric: out}, nil
	})
}

type strategyServer struct {
	strategypb.UnimplementedStrategyPluginServiceServer
	impl   Strategy
	logger hclog.Logger
}

func (s *strategyServer) Run(_ context.Context, req *strategypb.RunRequest) (*strategypb.RunResponse, error) {
	return call(s.logger, "Run", func() (*strategypb.RunResponse, error) {
		a, err := s.impl.Run(checkFromProto(req.GetCheck()), metricsFromProto(req.GetTimestampedMetric()), req.GetCount())
		if err != nil {
			return nil, err
		}
		action, err := actionToProto(a)
		if err != nil {
			return nil, fmt.Errorf("strategy returned a bad action: %w", err)
		}
		// Upstream echoes the check and metrics; the agent reads only action.
		return &strategypb.RunResponse{Action: action, Check: req.GetCheck(), TimestampedMetric: req.GetTimestampedMetric()}, nil
	})
}

type targetServer struct {
	targetpb.UnimplementedTargetPluginServiceServer
	impl   Target
	logger hclog.Logger
}

func (s *targetServer) Scale(_ context.Context, req *targetpb.ScaleRequest) (*targetpb.ScaleResponse, error) {
	return call(s.logger, "Scale", func() (*targetpb.ScaleResponse, error) {
		a, err := actionFromProto(req.GetAction())
		if err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
		if err := s.impl.Scale(a, nonNil(req.GetConfig())); err != nil {
			return nil, err
		}
		return &targetpb.ScaleResponse{}, nil
	})
}

func (s *targetServer) Status(_ context.Context, req *targetpb.StatusRequest) (*targetpb.StatusResponse, error) {
	return call(s.logger, "Status", func() (*targetpb.StatusResponse, error) {
		st, err := s.impl.Status(nonNil(req.GetConfig()))
		if err != nil {
			return nil, err
		}
		return &targetpb.StatusResponse{Ready: st.Ready, Count: st.Count, Meta: st.Meta}, nil
	})
}
