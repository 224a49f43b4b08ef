package base

import (
	"context"
	"os/signal"
	"syscall"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
)

// Serve runs the plugin set until the agent shuts it down. Nothing may be
// written to stdout before this: the handshake line must come first.
func Serve(plugins map[string]plugin.Plugin, logger hclog.Logger) {
	ServeHandshake(Handshake, plugins, logger)
}

// ServeHandshake is Serve for a host with its own handshake (the
// nomad-autoscaler agent): gRPC only, logging to logger; opts are added to
// the gRPC server's (an interceptor, say).
func ServeHandshake(handshake plugin.HandshakeConfig, plugins map[string]plugin.Plugin, logger hclog.Logger, opts ...grpc.ServerOption) {
	// A plugin that outlives a crashed agent must not die of SIGPIPE on its
	// next log line to the dead agent's pipe.
	signal.Ignore(syscall.SIGPIPE)
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: handshake,
		Plugins:         plugins,
		GRPCServer: func(base []grpc.ServerOption) *grpc.Server {
			return grpc.NewServer(append(base, opts...)...)
		},
		Logger: logger,
	})
}

// GRPCService is one entry of a go-plugin set that speaks gRPC only:
// Register adds the service to the plugin's server (nil on the host side),
// NewClient wraps the host side's connection; its ctx is done when the
// plugin process is gone.
type GRPCService struct {
	plugin.NetRPCUnsupportedPlugin
	Register  func(*grpc.Server)
	NewClient func(ctx context.Context, conn *grpc.ClientConn) any
}

func (s *GRPCService) GRPCServer(_ *plugin.GRPCBroker, srv *grpc.Server) error {
	s.Register(srv)
	return nil
}

func (s *GRPCService) GRPCClient(ctx context.Context, _ *plugin.GRPCBroker, conn *grpc.ClientConn) (any, error) {
	return s.NewClient(ctx, conn), nil
}

// Pump forwards every value from ch with send until ctx is done. Most
// streams must never end on their own (the agent takes a finished device
// stream as the plugin gone, and reopens a finished driver stream at once,
// in a hot loop): should ch close while ctx is live, ended runs (to log, or
// send a last message) and Pump waits for ctx. With ended nil the stream
// simply ends when ch closes. Pump returns the first error of send or ended.
func Pump[T any](ctx context.Context, ch <-chan T, send func(T) error, ended func() error) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case v, ok := <-ch:
			if !ok {
				if ctx.Err() != nil || ended == nil {
					return nil
				}
				if err := ended(); err != nil {
					return err
				}
				<-ctx.Done()
				return nil
			}
			if err := send(v); err != nil {
				return err
			}
		}
	}
}
