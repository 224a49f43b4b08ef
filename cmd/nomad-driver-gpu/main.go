// Command nomad-driver-gpu is the Nomad task driver "gpu". Started by the
// Nomad client it serves the plugin protocol; it is also its own per-task
// supervisor and shim (sub-commands the driver runs, not people).
package main

import (
	"fmt"
	"os"

	"github.com/nomad-gpu/nomad-gpu/driver"
	"github.com/nomad-gpu/nomad-gpu/driver/supervisor"
	"github.com/nomad-gpu/nomad-gpu/wire/base"
	"github.com/nomad-gpu/nomad-gpu/wire/drivers"
)

func main() {
	if code, ok := supervisor.Dispatch(os.Args); ok {
		os.Exit(code)
	}
	if len(os.Args) > 1 && (os.Args[1] == "version" || os.Args[1] == "--version") {
		fmt.Printf("%s %s\n", driver.BinaryName, driver.Version)
		return
	}
	if os.Getenv(base.Handshake.MagicCookieKey) != base.Handshake.MagicCookieValue {
		fmt.Fprintf(os.Stderr, "%s is a Nomad task driver plugin (driver = %q): put it in the client's plugin_dir\n"+
			"and add a plugin %q block to the agent config; see docs/driver.md.\n", driver.BinaryName, driver.PluginName, driver.BinaryName)
		os.Exit(2)
	}
	logger := base.NewLogger(driver.BinaryName)
	base.Serve(drivers.PluginSet(driver.New(logger), logger), logger)
}
