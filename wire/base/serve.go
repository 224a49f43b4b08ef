package base

import (
	"context"
	"os/signal"
	"syscall"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
)

// Serve runs the plugin set until the agent shuts it down. Nothing may be
// written to stdout before this: the handshake line must come first.
func Serve(plugins map[string]plugin.Plugin, logger hclog.Logger) {
	// A plugin that outlives a crashed agent must not die of SIGPIPE on its
	// next log line to the dead agent's pipe.
	signal.Ignore(syscall.SIGPIPE)
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: Handshake,
		Plugins:         plugins,
		GRPCServer:      plugin.DefaultGRPCServer,
		Logger:          logger,
	})
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
