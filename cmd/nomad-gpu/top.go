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
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nomad-gpu/nomad-gpu/topview"
)

func init() {
	register("top", command{
		summary: "the cluster's GPUs, slices, allocations, stats and queue, refreshed like top",
		run:     runTop,
	})
}

// ansiClear homes the cursor and clears the screen.
const ansiClear = "\x1b[H\x1b[2J"

const topUsage = `usage: nomad-gpu top [flags]

Shows every GPU of the cluster's nodes: its index and UUID, MIG instances
and MPS shares, utilisation, memory, temperature and power from the
device stats, health, and the tasks holding it (job/group/task) with the
memory they use; then the GPU work that waits, how long and why. Times
marked "~" under PRED headers are predictions, learnt from the
allocations that finished within -history-window: the time left of
batch and sysbatch GPU tasks, the wait and run time of blocked work.

Redraws every -interval until q or Ctrl-C. Keys, when stdin is a
terminal: n, u, m, w sort by node, utilisation, memory, predicted wait;
/ filters by node or job name (Enter keeps the filter, Esc clears it).
-once draws one frame, -json prints one JSON document (its fields:
docs/top.md). The table fits the terminal's width, 80 columns
when stdout is no terminal, or -width.

Connection: NOMAD_ADDR, NOMAD_TOKEN, NOMAD_REGION, NOMAD_NAMESPACE and the
NOMAD_CACERT/NOMAD_CLIENT_CERT/... TLS variables, as the nomad CLI reads
them; the flags below override them. Without a namespace, every
namespace's allocations and queued work are shown.

Flags:
`

// topOptions are the parsed flags of nomad-gpu top.
type topOptions struct {
	viewFlags
	filter                 topview.Filter
	json, once             bool
	interval, statsTimeout time.Duration
	width                  int
}

// minTopWidth is the narrowest -width: the GPU table's columns that are
// never left out fit it.
const minTopWidth = 70

func parseTopFlags(args []string, stderr io.Writer) (*topOptions, error) {
	o := &topOptions{}
	fs := flag.NewFlagSet("top", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, topUsage)
		fs.PrintDefaults()
	}
	var nodes string
	o.addViewFlags(fs, `namespace of the allocations and queue shown (default $NOMAD_NAMESPACE, else all: "*")`,
		`namespace of the controller's leader lock: top shows who leads and the jobs it raised ("" reads nothing of it)`)
	fs.StringVar(&o.filter.Pool, "node-pool", "", "only nodes of this node pool (one that exists; all: every node), and work whose job targets it")
	fs.StringVar(&nodes, "node", "", "only these nodes: comma-separated names or ID prefixes, each matching a node")
	fs.BoolVar(&o.json, "json", false, "print one JSON document and exit")
	fs.BoolVar(&o.once, "once", false, "draw one frame and exit")
	fs.DurationVar(&o.interval, "interval", 2*time.Second, "time between redraws")
	fs.DurationVar(&o.statsTimeout, "stats-timeout", topview.DefaultStatsTimeout, "how long one node's device stats may take")
	fs.IntVar(&o.width, "width", 0, fmt.Sprintf("line length of the table, at least %d; 0 fits the terminal (80 columns when stdout is no terminal)", minTopWidth))
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if o.interval < 100*time.Millisecond {
		return nil, fmt.Errorf("-interval %v: must be at least 100ms", o.interval)
	}
	if o.statsTimeout <= 0 {
		return nil, fmt.Errorf("-stats-timeout %v: must be positive", o.statsTimeout)
	}
	if err := o.checkViewFlags(); err != nil {
		return nil, err
	}
	if o.width != 0 && o.width < minTopWidth {
		return nil, fmt.Errorf("-width %d: must be 0 (the terminal's width) or at least %d", o.width, minTopWidth)
	}
	for _, n := range strings.Split(nodes, ",") {
		if n = strings.TrimSpace(n); n != "" {
			o.filter.Nodes = append(o.filter.Nodes, n)
		}
	}
	return o, nil
}

// source is the view's source with top's stats timeout. The caller
// closes the watcher.
func (o *topOptions) source() (*topview.Source, error) {
	r, err := o.viewSource()
	if err != nil {
		return nil, err
	}
	r.StatsTimeout = o.statsTimeout
	return r, nil
}

func runTop(args []string, stdout, stderr io.Writer) int {
	o, err := parseTopFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "nomad-gpu top:", err)
		return 2
	}
	r, err := o.source()
	if err != nil {
		fmt.Fprintln(stderr, "nomad-gpu top:", err)
		return 1
	}
	defer r.Watcher.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	scr, restore, err := openScreen(o, os.Stdin, stdout)
	if err != nil {
		fmt.Fprintln(stderr, "nomad-gpu top:", err)
		return 1
	}
	defer restore()
	return top(ctx, o, r, scr, stderr)
}

// top runs the command once connected: one JSON document, one frame, or
// frames until ctx ends or the operator quits.
func top(ctx context.Context, o *topOptions, r *topview.Source, scr topScreen, stderr io.Writer) int {
	if o.json || o.once {
		v, err := r.View(ctx, o.filter)
		if ferr := filterError(err); ferr != nil {
			fmt.Fprintln(stderr, "nomad-gpu top:", ferr)
			return 2
		}
		if err != nil {
			fmt.Fprintln(stderr, "nomad-gpu top:", err)
			return 1
		}
		if o.json {
			err = writeTopJSON(scr.out, v)
		} else {
			err = topview.WriteTable(scr.out, v, topview.TableOptions{Width: scr.lineWidth()})
		}
		if err != nil {
			fmt.Fprintln(stderr, "nomad-gpu top:", err)
			return 1
		}
		return 0
	}
	return watch(ctx, o, r, scr, stderr)
}

// writeTopJSON writes the view as `top -json` prints it: one indented
// JSON document.
func writeTopJSON(w io.Writer, v *topview.View) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// filterError says which flag names a node pool or node that does not
// exist, when err is that; nil otherwise.
func filterError(err error) error {
	var pool *topview.UnknownPoolError
	var nodes *topview.UnknownNodesError
	switch {
	case errors.As(err, &pool):
		return fmt.Errorf("-node-pool %q: no such node pool; the node pools are %s", pool.Pool, strings.Join(pool.Pools, ", "))
	case errors.As(err, &nodes):
		return fmt.Errorf("-node: no node is named or has an ID starting %s", strings.Join(quoted(nodes.Nodes), ", "))
	}
	return nil
}

func quoted(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = strconv.Quote(s)
	}
	return out
}

// topFrame is one read of the cluster: its view, or why there is none.
type topFrame struct {
	view *topview.View
	err  error
	// panicked is a panic of the read, with its stack, for watch to panic
	// with: only a panic in runTop's goroutine runs the deferred restore
	// of the terminal.
	panicked any
}

// watch redraws the view every interval, and at once on a key, until ctx
// ends or the operator quits. A frame that cannot be read shows the error
// and the next one tries again; but a filter that matches no pool or node
// in the first frame is an error.
func watch(ctx context.Context, o *topOptions, r *topview.Source, scr topScreen, stderr io.Writer) int {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	frames := make(chan topFrame)
	go readFrames(ctx, o, r, frames)
	ui := topUI{sort: topview.SortNode}
	var last *topFrame
	for {
		select {
		case <-ctx.Done():
			return 0
		case f := <-frames:
			if f.panicked != nil {
				panic(f.panicked)
			}
			if ferr := filterError(f.err); ferr != nil && last == nil {
				fmt.Fprintln(stderr, "nomad-gpu top:", ferr)
				return 2
			}
			last = &f
		case chunk, ok := <-scr.keys:
			if !ok {
				scr.keys = nil // stdin closed: no more keys
				continue
			}
			for _, k := range keysOf(chunk) {
				ui = ui.press(k)
			}
			if ui.quit {
				return 0
			}
		}
		if last != nil && scr.draw(*last, ui, o.interval) != nil {
			return 0
		}
	}
}

// readFrames reads a frame every interval into frames until ctx ends.
func readFrames(ctx context.Context, o *topOptions, r *topview.Source, frames chan<- topFrame) {
	defer func() {
		if p := recover(); p != nil {
			select {
			case frames <- topFrame{panicked: fmt.Sprintf("%v\n\n%s", p, debug.Stack())}:
			case <-ctx.Done():
			}
		}
	}()
	t := time.NewTicker(o.interval)
	defer t.Stop()
	for {
		v, err := r.View(ctx, o.filter)
		if ctx.Err() != nil {
			return
		}
		select {
		case frames <- topFrame{view: v, err: err}:
		case <-ctx.Done():
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
