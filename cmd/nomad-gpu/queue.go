package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nomad-gpu/nomad-gpu/topview"
)

func init() {
	register("queue", command{
		summary: "the GPU work that waits, in the queues' order: why each job waits and when it is predicted to start",
		run:     runQueue,
	})
}

const queueUsage = `usage: nomad-gpu queue [flags]

Answers "when will my job start?": every job waiting for GPUs, one line
per job, then the controller's team queues. Held jobs (submitted at
count 0 for the controller to admit, gangs of one member or more) come
first, in the queues' one order; then the rest, longest wait first.

Columns: POS is a held job's place in the queues' order (1 is admitted
next; - when not ordered: no queue file, held by a dependency, invalid,
or not held). QUEUE its team queue. JOB namespace/job. ASKS per group
the allocations × what one asks for. WAITING how long it has waited.
PREDICTED START "~14:05 (in 12m)", learnt from the allocations that
finished within -history-window; "unknown" when there is no basis, "-"
for pending work (placed, not running yet). KIND the sort of reason:
quota, cohort, dependency, gang, capacity, invalid, pending or other.
Beneath each job its reason: a held job's is the controller's (the
leader's last word on it); other work's is Nomad's placement failure.

Then each queue: USED GPU-equivalents, its NOMINAL quota, BORROWED
beyond it, LENT of it, FAIR SHARE standing (1: its weighted share of the
recent use; - while it holds and waits for nothing) and the allocations
WAITING, as the leader last wrote them (a minute old at most).

-json prints the report as one JSON document (its fields: docs/queue.md).

Connection: NOMAD_ADDR, NOMAD_TOKEN, NOMAD_REGION, NOMAD_NAMESPACE and the
NOMAD_CACERT/NOMAD_CLIENT_CERT/... TLS variables, as the nomad CLI reads
them; the flags below override them. Without a namespace, every
namespace's waiting work is shown.

Flags:
`

// queueOptions are the parsed flags of nomad-gpu queue.
type queueOptions struct {
	viewFlags
	json bool
}

func parseQueueFlags(args []string, stderr io.Writer) (*queueOptions, error) {
	o := &queueOptions{}
	fs := flag.NewFlagSet("queue", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, queueUsage)
		fs.PrintDefaults()
	}
	o.addViewFlags(fs, `namespace of the waiting work shown (default $NOMAD_NAMESPACE, else all: "*")`,
		`namespace of the controller's leader lock and status: the held jobs' reasons, places and queues ("" reads nothing of it)`)
	fs.BoolVar(&o.json, "json", false, "print one JSON document")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if err := o.checkViewFlags(); err != nil {
		return nil, err
	}
	return o, nil
}

func runQueue(args []string, stdout, stderr io.Writer) int {
	o, err := parseQueueFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "nomad-gpu queue:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	r, err := o.waitReport(ctx)
	if err == nil {
		err = writeQueueReport(stdout, r, o.json, queueWidth(stdout), time.Local)
	}
	if err != nil {
		fmt.Fprintln(stderr, "nomad-gpu queue:", err)
		return 1
	}
	return 0
}

// waitReport reads the cluster once, without nodes' stats (the report
// shows none), and reports what waits.
func (o *queueOptions) waitReport(ctx context.Context) (topview.WaitReport, error) {
	src, err := o.viewSource()
	if err != nil {
		return topview.WaitReport{}, err
	}
	defer src.Watcher.Close()
	src.SkipStats = true
	v, err := src.View(ctx, topview.Filter{})
	if err != nil {
		return topview.WaitReport{}, err
	}
	return topview.Waiting(v, o.config().Namespace), nil
}

// writeQueueReport writes the report as one indented JSON document, or
// as tables width columns wide with times in loc.
func writeQueueReport(w io.Writer, r topview.WaitReport, asJSON bool, width int, loc *time.Location) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	return topview.WriteWaitTable(w, r, topview.WaitTableOptions{Width: width, Location: loc})
}

// queueWidth is the terminal's width when w is one, else
// topview.DefaultWidth.
func queueWidth(w io.Writer) int {
	if fd, ok := terminalFd(w); ok {
		return terminalWidth(fd)
	}
	return topview.DefaultWidth
}
