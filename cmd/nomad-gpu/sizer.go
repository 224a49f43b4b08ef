package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/controller"
)

func init() {
	register("sizer", command{
		summary: "show what the controller's deadline and right-sizing modules would do now (a dry run; the controller acts)",
		run:     runSizer,
	})
}

const sizerUsage = `usage: nomad-gpu sizer -dry-run [flags]

Reads the cluster and the priority ledger once and prints what the
controller's deadline and right-sizing modules would do now: the deadline
raises and their ends, the priorities the ledger would then write, and the
jobs it would register with new device requests. It changes nothing and
records no history. Its flags are the controller's (nomad-gpu controller
-h), so that it shows what a controller run with them would do.

The controller does the work: deadline raises go through its priority
ledger, and resizes are registered by its leader. nomad-gpu sizer no
longer runs a loop nor writes jobs; -dry-run says so on the command line.

Right-sizing is shown with -history or -prometheus. The history file can
be read only while no controller holds it (the leader does while it
leads); with -prometheus alone nothing needs to be free.

Connection: NOMAD_ADDR, NOMAD_TOKEN, NOMAD_REGION and the TLS variables, as
the nomad CLI reads them; the flags override them. The token needs
read-job, node:read and variable read on nomad-gpu/*.

Flags:
`

type sizerOptions struct {
	nomadConn
	modules  moduleFlags
	dryRun   bool
	logLevel string
}

func parseSizerFlags(args []string, stderr io.Writer) (*sizerOptions, controller.Config, error) {
	o := &sizerOptions{}
	var cfg controller.Config
	fs := flag.NewFlagSet("sizer", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, sizerUsage)
		fs.PrintDefaults()
	}
	o.addFlags(fs, "") // every namespace
	o.modules.add(fs)
	fs.BoolVar(&o.dryRun, "dry-run", false, "print what the controller would do (required: the sizer changes nothing)")
	fs.Bool("once", true, "one round (the only mode; accepted for older scripts)")
	fs.StringVar(&o.logLevel, "log-level", "warn", "trace, debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return nil, cfg, err
	}
	switch {
	case fs.NArg() > 0:
		return nil, cfg, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	case !o.dryRun:
		return nil, cfg, errors.New("-dry-run is required: the sizer's loop moved into nomad-gpu controller, which raises and resizes; nomad-gpu sizer -dry-run shows what it would do")
	case hclog.LevelFromString(o.logLevel) == hclog.NoLevel:
		return nil, cfg, fmt.Errorf("-log-level: %q; allowed: trace, debug, info, warn, error", o.logLevel)
	}
	if err := o.modules.apply(&cfg); err != nil {
		return nil, cfg, err
	}
	return o, cfg, nil
}

func runSizer(args []string, stdout, stderr io.Writer) int {
	o, cfg, err := parseSizerFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "nomad-gpu sizer:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logger := hclog.New(&hclog.LoggerOptions{Name: "sizer", Output: stderr, Level: hclog.LevelFromString(o.logLevel)})
	cl, err := api.NewClient(o.config())
	if err != nil {
		fmt.Fprintln(stderr, "nomad-gpu sizer:", err)
		return 2
	}
	plan, err := controller.Preview(ctx, cl, cfg, logger)
	if err != nil {
		fmt.Fprintln(stderr, "nomad-gpu sizer:", err)
		return 1
	}
	printPlan(stdout, plan)
	return 0
}

// printPlan writes one line per thing the controller would do.
func printPlan(w io.Writer, p controller.Plan) {
	for _, d := range p.Decisions {
		fmt.Fprintf(w, "%s %s/%s: %s\n", d.Kind, d.Job.Namespace, d.Job.ID, d.Reason)
	}
	for _, c := range p.Priorities {
		fmt.Fprintf(w, "priority %s/%s: %d → %d\n", c.Job.Namespace, c.Job.ID, c.From, c.To)
	}
	for _, jr := range p.Resizes {
		for _, r := range jr.Resized {
			fmt.Fprintf(w, "resize %s\n", r)
		}
	}
	if len(p.Decisions)+len(p.Priorities)+len(p.Resizes) == 0 {
		fmt.Fprintln(w, "nothing to do")
	}
}
