package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/clusterview"
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

Shows every GPU of the cluster's nodes: its MIG instances and MPS shares,
the allocations holding them (job/group/task), utilisation and memory
from the device stats, health; then the GPU work that waits, how long
and why, with the predicted time left of running GPU tasks and the
predicted wait and run time of blocked work (learnt from the allocations
that finished within -history-window). Redraws every -interval until interrupted; -once draws one frame,
-json prints one JSON document (its fields: clusterview/doc.go).

Connection: NOMAD_ADDR, NOMAD_TOKEN, NOMAD_REGION, NOMAD_NAMESPACE and the
NOMAD_CACERT/NOMAD_CLIENT_CERT/... TLS variables, as the nomad CLI reads
them; the flags below override them. Without a namespace, every
namespace's allocations and queued work are shown.

Flags:
`

// topOptions are the parsed flags of nomad-gpu top.
type topOptions struct {
	address, token, region, namespace string
	filter                            clusterview.Filter
	json, once                        bool
	interval, statsTimeout            time.Duration
	historyWindow                     time.Duration
}

func parseTopFlags(args []string, stderr io.Writer) (*topOptions, error) {
	o := &topOptions{}
	fs := flag.NewFlagSet("top", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, topUsage)
		fs.PrintDefaults()
	}
	var nodes string
	fs.StringVar(&o.address, "address", "", "Nomad HTTP API address (default $NOMAD_ADDR or http://127.0.0.1:4646)")
	fs.StringVar(&o.token, "token", "", "ACL token (default $NOMAD_TOKEN)")
	fs.StringVar(&o.region, "region", "", "region (default $NOMAD_REGION)")
	fs.StringVar(&o.namespace, "namespace", "", `namespace of the allocations and queue shown (default $NOMAD_NAMESPACE, else all: "*")`)
	fs.StringVar(&o.filter.Pool, "node-pool", "", "only nodes of this node pool, and work whose job targets it")
	fs.StringVar(&nodes, "node", "", "only these nodes: comma-separated names or ID prefixes")
	fs.BoolVar(&o.json, "json", false, "print one JSON document and exit")
	fs.BoolVar(&o.once, "once", false, "draw one frame and exit")
	fs.DurationVar(&o.interval, "interval", 2*time.Second, "time between redraws")
	fs.DurationVar(&o.statsTimeout, "stats-timeout", clusterview.DefaultStatsTimeout, "how long one node's device stats may take")
	fs.DurationVar(&o.historyWindow, "history-window", 24*time.Hour, "how far back finished allocations are read to predict run times and waits; 0 reads none")
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
	if o.historyWindow < 0 {
		return nil, fmt.Errorf("-history-window %v: must not be negative", o.historyWindow)
	}
	for _, n := range strings.Split(nodes, ",") {
		if n = strings.TrimSpace(n); n != "" {
			o.filter.Nodes = append(o.filter.Nodes, n)
		}
	}
	return o, nil
}

// reader connects to Nomad as the options and environment say.
func (o *topOptions) reader() (*clusterview.Reader, error) {
	cfg := api.DefaultConfig()
	if o.address != "" {
		cfg.Address = o.address
	}
	if o.token != "" {
		cfg.SecretID = o.token
	}
	if o.region != "" {
		cfg.Region = o.region
	}
	if o.namespace != "" {
		cfg.Namespace = o.namespace
	}
	cl, err := api.NewClient(cfg)
	if err != nil {
		return nil, err
	}
	return &clusterview.Reader{Client: cl, Namespace: cfg.Namespace, StatsTimeout: o.statsTimeout, HistoryWindow: o.historyWindow}, nil
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
	r, err := o.reader()
	if err != nil {
		fmt.Fprintln(stderr, "nomad-gpu top:", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return top(ctx, o, r, stdout, stderr)
}

// top runs the command once connected: one JSON document, one frame, or
// frames until ctx ends.
func top(ctx context.Context, o *topOptions, r *clusterview.Reader, stdout, stderr io.Writer) int {
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
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			err = enc.Encode(v)
		} else {
			err = clusterview.WriteTable(stdout, v)
		}
		if err != nil {
			fmt.Fprintln(stderr, "nomad-gpu top:", err)
			return 1
		}
		return 0
	}
	return watch(ctx, o, r, stdout, stderr)
}

// filterError says which flag names a node pool or node that does not
// exist, when err is that; nil otherwise.
func filterError(err error) error {
	var pool *clusterview.UnknownPoolError
	var nodes *clusterview.UnknownNodesError
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

// watch redraws the view every interval until ctx ends. A frame that
// cannot be read shows the error and the next one tries again; but a
// filter that matches no pool or node in the first frame is an error.
func watch(ctx context.Context, o *topOptions, r *clusterview.Reader, stdout, stderr io.Writer) int {
	t := time.NewTicker(o.interval)
	defer t.Stop()
	for first := true; ; first = false {
		var b bytes.Buffer
		b.WriteString(ansiClear)
		v, err := r.View(ctx, o.filter)
		if ctx.Err() != nil {
			return 0
		}
		if ferr := filterError(err); ferr != nil && first {
			fmt.Fprintln(stderr, "nomad-gpu top:", ferr)
			return 2
		}
		if err != nil {
			fmt.Fprintf(&b, "nomad-gpu top  %s\n\nerror: %v\n", time.Now().UTC().Format("2006-01-02 15:04:05 UTC"), err)
		} else {
			_ = clusterview.WriteTable(&b, v)
		}
		fmt.Fprintf(&b, "\nrefresh every %v; Ctrl-C quits\n", o.interval)
		if _, err := stdout.Write(b.Bytes()); err != nil {
			return 0
		}
		select {
		case <-ctx.Done():
			return 0
		case <-t.C:
		}
	}
}
