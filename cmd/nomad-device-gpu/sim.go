package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"

	"github.com/nomad-gpu/nomad-gpu/gpu"
)

const simUsage = `nomad-device-gpu sim --control-file FILE COMMAND [flags]

Drives a running simulated node (backend = "sim") through its control file,
the sim.control_file of the plugin config. Commands:

  xid   --device UUID --xid N                    inject an NVML XID event
  util  --device UUID --gpu PCT [--mem PCT]      set utilisation
  proc  --device UUID --pid PID --mib N          process PID uses N MiB on the device (0 removes it)
  clear                                          forget all injected state
  show                                           print the control file
`

func runSim(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, simUsage) }
	file := fs.String("control-file", "", "the sim node's control file (sim.control_file in the plugin config)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *file == "" || fs.NArg() == 0 {
		fs.Usage()
		return 2
	}
	ctl := gpu.OpenControl(*file)
	cmd, rest := fs.Arg(0), fs.Args()[1:]
	sub := flag.NewFlagSet("sim "+cmd, flag.ContinueOnError)
	sub.SetOutput(stderr)
	dev := sub.String("device", "", "GPU- or MIG- UUID")
	var err error
	switch cmd {
	case "xid":
		xid := sub.Uint64("xid", 0, "XID number, e.g. 79 (GPU has fallen off the bus)")
		if sub.Parse(rest) != nil {
			return 2
		}
		if *dev == "" || *xid == 0 {
			fmt.Fprintln(stderr, "sim xid: --device and --xid are required")
			return 2
		}
		err = ctl.InjectXID(*dev, *xid)
	case "util":
		g := sub.Uint("gpu", 0, "GPU utilisation percent")
		m := sub.Uint("mem", 0, "memory utilisation percent")
		if sub.Parse(rest) != nil {
			return 2
		}
		if *dev == "" || *g > 100 || *m > 100 {
			fmt.Fprintln(stderr, "sim util: --device is required; --gpu and --mem are 0 to 100")
			return 2
		}
		err = ctl.SetUtilization(*dev, uint32(*g), uint32(*m))
	case "proc":
		pid := sub.Uint("pid", 0, "process id")
		mib := sub.Uint64("mib", 0, "GPU memory in MiB (0 removes the process)")
		if sub.Parse(rest) != nil {
			return 2
		}
		if *dev == "" || *pid == 0 {
			fmt.Fprintln(stderr, "sim proc: --device and --pid are required")
			return 2
		}
		err = ctl.SetProcessMemory(uint32(*pid), *dev, *mib)
	case "clear":
		err = ctl.Clear()
	case "show":
		st, rerr := gpu.ReadControl(*file)
		if rerr != nil {
			fmt.Fprintln(stderr, rerr)
			return 1
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(st)
	default:
		fmt.Fprintf(stderr, "sim: unknown command %q\n\n%s", cmd, simUsage)
		return 2
	}
	if err != nil {
		fmt.Fprintf(stderr, "sim %s: %v\n", cmd, err)
		return 1
	}
	return 0
}
