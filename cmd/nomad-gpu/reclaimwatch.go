package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/autoscaler/reclaim"
)

func init() {
	register("reclaim-watch", command{
		summary: "on a spot node: drain it the moment its cloud gives notice (run it as jobs/spot/reclaim-watch.nomad.hcl)",
		run:     runReclaimWatch,
	})
}

const reclaimWatchUsage = `usage: nomad-gpu reclaim-watch -provider aws|gce|azure -node-id ID [flags]

Reads the instance metadata service every -interval for the cloud's notice
that it takes the spot (preemptible) instance back, and then drains the
node -node-id at once (its services migrate, within -drain-deadline;
system jobs stay) and stops its batch allocations with nomad alloc stop,
so that Nomad places them again elsewhere (a checkpointing task of the
gpu driver commits as it stops and resumes there). The drain's meta
nomad_gpu_reclaim carries the notice. With -rebalance cordon (aws), an
EC2 rebalance recommendation makes the node ineligible first: no new
work lands on it, its running work goes on. Run it on every spot node as
a system job (jobs/spot/reclaim-watch.nomad.hcl); docs/spot.md.

Flags:
`

type reclaimWatchOptions struct {
	nomadConn
	provider, metadataURL, node, logLevel string
	rebalance                             string
	interval, deadline                    time.Duration
}

func parseReclaimWatchFlags(args []string, stderr io.Writer) (*reclaimWatchOptions, error) {
	o := &reclaimWatchOptions{}
	fs := flag.NewFlagSet("reclaim-watch", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, reclaimWatchUsage); fs.PrintDefaults() }
	o.addFlags(fs, "")
	fs.StringVar(&o.provider, "provider", "", "the cloud: "+strings.Join(reclaim.Providers, ", "))
	fs.StringVar(&o.metadataURL, "metadata-url", "", "the instance metadata service (default the provider's: http://169.254.169.254 for aws and azure, http://metadata.google.internal for gce)")
	fs.StringVar(&o.node, "node-id", "", `this node's ID (in a jobspec: "${node.unique.id}")`)
	fs.DurationVar(&o.interval, "interval", 5*time.Second, "how often the metadata service is read")
	fs.DurationVar(&o.deadline, "drain-deadline", 10*time.Second, "how long the node's services may take to migrate before the drain stops them (batch work is stopped at once)")
	fs.StringVar(&o.rebalance, "rebalance", "ignore", "on AWS's rebalance recommendation (a raised risk of reclaim, often minutes before the notice): ignore, or cordon (the node takes no new work; its running work goes on, and once it ends the autoscaler may replace the node)")
	fs.StringVar(&o.logLevel, "log-level", "info", "trace, debug, info, warn, error")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	switch {
	case fs.NArg() > 0:
		return nil, fmt.Errorf("unexpected argument %q; reclaim-watch takes flags only", fs.Arg(0))
	case !slices.Contains(reclaim.Providers, o.provider):
		return nil, fmt.Errorf("-provider: %q; allowed: %s", o.provider, strings.Join(reclaim.Providers, ", "))
	case strings.TrimSpace(o.node) == "":
		return nil, fmt.Errorf(`-node-id: empty; allowed: the node's ID, "${node.unique.id}" in a jobspec`)
	case o.interval < 100*time.Millisecond || o.interval > time.Minute:
		return nil, fmt.Errorf("-interval: %s; allowed: 100ms to 1m (a notice gives 30s to 2m)", o.interval)
	case o.deadline < time.Second || o.deadline > 2*time.Minute:
		return nil, fmt.Errorf("-drain-deadline: %s; allowed: 1s to 2m", o.deadline)
	case o.rebalance != "ignore" && o.rebalance != "cordon":
		return nil, fmt.Errorf("-rebalance: %q; allowed: ignore, cordon", o.rebalance)
	case o.rebalance == "cordon" && o.provider != "aws":
		return nil, fmt.Errorf("-rebalance: cordon with -provider %s; allowed: ignore (only aws gives a rebalance recommendation)", o.provider)
	case hclog.LevelFromString(o.logLevel) == hclog.NoLevel:
		return nil, fmt.Errorf("-log-level: %q; allowed: trace, debug, info, warn, error", o.logLevel)
	}
	if o.metadataURL != "" {
		if u, err := url.Parse(o.metadataURL); err != nil || u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
			return nil, fmt.Errorf("-metadata-url: %q; allowed: an http:// or https:// URL", o.metadataURL)
		}
	}
	return o, nil
}

func runReclaimWatch(args []string, _, stderr io.Writer) int {
	o, err := parseReclaimWatchFlags(args, stderr)
	if err == flag.ErrHelp {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "nomad-gpu reclaim-watch: %v\n", err)
		return 2
	}
	client, err := api.NewClient(o.config())
	if err != nil {
		fmt.Fprintf(stderr, "nomad-gpu reclaim-watch: %v\n", err)
		return 2
	}
	src, err := reclaim.NewSource(o.provider, o.metadataURL, &http.Client{Timeout: 2 * time.Second})
	if err != nil {
		fmt.Fprintf(stderr, "nomad-gpu reclaim-watch: -provider: %v\n", err)
		return 2
	}
	log := hclog.New(&hclog.LoggerOptions{Name: "nomad-gpu-reclaim-watch", Level: hclog.LevelFromString(o.logLevel), Output: stderr})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log.Info("watching", "provider", o.provider, "node", o.node, "interval", o.interval, "drain_deadline", o.deadline, "rebalance", o.rebalance)
	w := &reclaim.Watcher{Source: src, Drain: reclaim.NomadDrainer(client, o.node, o.deadline), Interval: o.interval, Log: log}
	if o.rebalance == "cordon" {
		w.Cordon = reclaim.NomadCordoner(client, o.node)
	}
	_ = w.Run(ctx) // ends only with ctx
	return 0
}
