package base

import (
	"context"
	"os/exec"
	"os/signal"
	"syscall"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
)

func commandContext(_ context.Context, path string, args ...string) *exec.Cmd {
	// go-plugin owns the process lifetime (Kill); a context-bound command
	// would race with its graceful shutdown.
	return exec.Command(path, args...)
}

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
