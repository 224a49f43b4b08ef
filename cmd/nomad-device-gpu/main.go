// Command nomad-device-gpu is the Nomad device plugin for NVIDIA GPUs, MIG
// instances and MPS shares. Started by the Nomad client it serves the plugin
// protocol; started by a person it offers `inventory` and `sim`.
package main

import (
	"fmt"
	"os"

	"github.com/nomad-gpu/nomad-gpu/devicefp"
	"github.com/nomad-gpu/nomad-gpu/wire/base"
	"github.com/nomad-gpu/nomad-gpu/wire/device"
)

func main() {
	if os.Getenv(base.Handshake.MagicCookieKey) == base.Handshake.MagicCookieValue {
		logger := base.NewLogger(devicefp.PluginName)
		base.Serve(device.PluginSet(devicefp.New(logger), logger), logger)
		return
	}
	os.Exit(run(os.Args[1:]))
}

const usage = `nomad-device-gpu: Nomad device plugin for NVIDIA GPUs, MIG instances and MPS shares.

Nomad starts this binary itself (plugin_dir + a plugin "nomad-device-gpu" block).
By hand:

  nomad-device-gpu inventory [flags]     what this node would report to Nomad
  nomad-device-gpu sim --control-file F  drive a simulated node (XIDs, utilisation, processes)
  nomad-device-gpu version

Run a subcommand with -h for its flags.
`

func run(args []string) int {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, usage)
		return 2
	}
	switch args[0] {
	case "inventory":
		return runInventory(args[1:], os.Stdout, os.Stderr)
	case "sim":
		return runSim(args[1:], os.Stdout, os.Stderr)
	case "version", "--version", "-v":
		fmt.Printf("%s %s\n", devicefp.PluginName, devicefp.Version)
		return 0
	case "help", "-h", "--help":
		fmt.Print(usage)
		return 0
	}
	fmt.Fprintf(os.Stderr, "unknown command %q\n\n%s", args[0], usage)
	return 2
}
