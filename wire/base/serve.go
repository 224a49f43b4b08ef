package base

import (
	"os/signal"
	"syscall"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
)

// Serve runs the plugin set until the agent shuts it down. Nothing may be
// written to stdout before this: the handshake line must come first.
func Serve(plugins map[string]plugin.Plugin, logger hclog.Logger) {
	// A plugin that outlives a crashed agent must not die of SIGPIPE on its
	// next log line to the dead agent's pipe (protocol-facts §10).
	signal.Ignore(syscall.SIGPIPE)
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: Handshake,
		Plugins:         plugins,
		GRPCServer:      plugin.DefaultGRPCServer,
		Logger:          logger,
	})
}
