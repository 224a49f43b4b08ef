package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/nomad-gpu/nomad-gpu/devicefp"
	"github.com/nomad-gpu/nomad-gpu/gpu"
)

var simUsage = fmt.Sprintf(`nomad-device-gpu sim --control-file FILE COMMAND [flags]

Drives a running simulated node (backend = "sim") through its control file,
the sim.control_file of the plugin config, which the node creates when it
starts and where it records its devices. DEVICE is a GPU- or MIG- UUID of
the node, or a prefix of one that names no other device (the short form
nomad-gpu top shows, GPU-1c0d2a3b). Commands:

  xid   --device DEVICE --xid N                  inject an NVML XID event (N from 1 to %d)
  util  --device DEVICE --gpu PCT [--mem PCT]    set utilisation
  proc  --device DEVICE --pid PID --mib N        process PID uses N MiB on the device (0 removes it)
  clear                                          forget all injected state
  show                                           print the control file
`, devicefp.MaxXID)

// simCmd is one sim command against an existing control file.
type simCmd struct {
	name, file     string
	stdout, stderr io.Writer
}

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
	c := &simCmd{name: fs.Arg(0), file: *file, stdout: stdout, stderr: stderr}
	if err := controlFileExists(*file); err != nil {
		return c.fail(2, err)
	}
	rest := fs.Args()[1:]
	switch c.name {
	case "xid":
		return c.xid(rest)
	case "util":
		return c.util(rest)
	case "proc":
		return c.proc(rest)
	case "clear":
		return c.done(gpu.OpenControl(*file).Clear(), "cleared")
	case "show":
		return c.show()
	}
	fmt.Fprintf(stderr, "sim: unknown command %q\n\n%s", c.name, simUsage)
	return 2
}

// controlFileExists refuses a path no node created: writing there would
// drive nothing, and a typo would go unnoticed.
func controlFileExists(path string) error {
	st, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("--control-file %s does not exist; a running sim node creates it: give the sim.control_file of its plugin config, and start the node first", path)
	}
	if err != nil {
		return fmt.Errorf("--control-file %s: %v", path, err)
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("--control-file %s is not a regular file", path)
	}
	return nil
}

func (c *simCmd) fail(code int, err error) int {
	fmt.Fprintf(c.stderr, "sim %s: %v\n", c.name, err)
	return code
}

// done reports a write: its error, or what was done.
func (c *simCmd) done(err error, what string) int {
	if err != nil {
		return c.fail(1, err)
	}
	fmt.Fprintln(c.stdout, what)
	return 0
}

// flags parses a command's flags; the device flag's value is resolved to
// a device of the node (required).
func (c *simCmd) flags(args []string, define func(*flag.FlagSet)) (device string, code int) {
	sub := flag.NewFlagSet("sim "+c.name, flag.ContinueOnError)
	sub.SetOutput(c.stderr)
	dev := sub.String("device", "", "GPU- or MIG- UUID of the node, or a unique prefix of one")
	define(sub)
	if sub.Parse(args) != nil {
		return "", 2
	}
	if sub.NArg() > 0 {
		return "", c.fail(2, fmt.Errorf("unexpected argument %q", sub.Arg(0)))
	}
	if *dev == "" {
		return "", c.fail(2, errors.New("--device is required"))
	}
	st, err := gpu.ReadControl(c.file)
	if err != nil {
		return "", c.fail(1, err)
	}
	uuid, err := st.ResolveDevice(*dev)
	if err != nil {
		return "", c.fail(2, fmt.Errorf("--device: %v", err))
	}
	return uuid, 0
}

func (c *simCmd) xid(args []string) int {
	var xid uint64
	uuid, code := c.flags(args, func(f *flag.FlagSet) {
		f.Uint64Var(&xid, "xid", 0, "XID number, e.g. 79 (GPU has fallen off the bus)")
	})
	if code != 0 {
		return code
	}
	if xid == 0 {
		return c.fail(2, fmt.Errorf("--xid is required; allowed: 1 to %d, e.g. 79 (GPU has fallen off the bus)", devicefp.MaxXID))
	}
	if xid > devicefp.MaxXID {
		return c.fail(2, fmt.Errorf("--xid %d is not an XID; allowed: 1 to %d, the XIDs NVIDIA defines (e.g. 79, GPU has fallen off the bus)", xid, devicefp.MaxXID))
	}
	err := gpu.OpenControl(c.file).InjectXID(uuid, xid)
	return c.done(err, fmt.Sprintf("XID %d (%s) injected on %s", xid, devicefp.XIDDescription(xid), uuid))
}

func (c *simCmd) util(args []string) int {
	var g, m uint
	uuid, code := c.flags(args, func(f *flag.FlagSet) {
		f.UintVar(&g, "gpu", 0, "GPU utilisation percent")
		f.UintVar(&m, "mem", 0, "memory utilisation percent")
	})
	if code != 0 {
		return code
	}
	for _, p := range []struct {
		flag string
		v    uint
	}{{"--gpu", g}, {"--mem", m}} {
		if p.v > 100 {
			return c.fail(2, fmt.Errorf("%s %d is out of range; allowed: 0 to 100 (percent)", p.flag, p.v))
		}
	}
	err := gpu.OpenControl(c.file).SetUtilization(uuid, uint32(g), uint32(m))
	return c.done(err, fmt.Sprintf("%s: GPU %d%%, memory %d%%", uuid, g, m))
}

func (c *simCmd) proc(args []string) int {
	var pid uint
	var mib uint64
	uuid, code := c.flags(args, func(f *flag.FlagSet) {
		f.UintVar(&pid, "pid", 0, "process id")
		f.Uint64Var(&mib, "mib", 0, "GPU memory in MiB (0 removes the process)")
	})
	if code != 0 {
		return code
	}
	if pid == 0 || pid > 1<<22 {
		return c.fail(2, fmt.Errorf("--pid %d is not a process id; allowed: 1 to %d", pid, 1<<22))
	}
	err := gpu.OpenControl(c.file).SetProcessMemory(uint32(pid), uuid, mib)
	return c.done(err, fmt.Sprintf("%s: process %d uses %d MiB", uuid, pid, mib))
}

func (c *simCmd) show() int {
	st, err := gpu.ReadControl(c.file)
	if err != nil {
		return c.fail(1, err)
	}
	enc := json.NewEncoder(c.stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(st); err != nil {
		return c.fail(1, err)
	}
	return 0
}
