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
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "supervise":
			os.Exit(supervisor.RunSupervisor(os.Args[2:]))
		case "shim":
			os.Exit(supervisor.RunShim(os.Args[2:]))
		case "exec-shim":
			os.Exit(supervisor.RunExecShim(os.Args[2:]))
		case "version", "--version", "-v":
			fmt.Printf("%s %s\n", driver.BinaryName, driver.Version)
			return
		}
	}
	if os.Getenv(base.Handshake.MagicCookieKey) != base.Handshake.MagicCookieValue {
		fmt.Fprintf(os.Stderr, "%s is a Nomad task driver plugin (driver = %q): put it in the client's plugin_dir\n"+
			"and add a plugin %q block to the agent config; see README.md.\n", driver.BinaryName, driver.PluginName, driver.BinaryName)
		os.Exit(2)
	}
	logger := base.NewLogger(driver.BinaryName)
	drivers.Serve(driver.New(logger), logger)
}
