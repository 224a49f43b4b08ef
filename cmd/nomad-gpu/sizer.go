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
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/autoscaler/apm"
	"github.com/nomad-gpu/nomad-gpu/clusterview"
	"github.com/nomad-gpu/nomad-gpu/nomadview"
	"github.com/nomad-gpu/nomad-gpu/sizing"
	"github.com/nomad-gpu/nomad-gpu/sizing/history"
)

func init() {
	register("sizer", command{
		summary: "keep the GPU history of the cluster's tasks and resize those whose policy is auto",
		run:     runSizer,
	})
}

const sizerUsage = `usage: nomad-gpu sizer [flags]

Every -interval: records each GPU task's utilisation and memory (from the
nodes' device stats) and how its runs end in the history file, sizes every
job holding GPUs, and resizes the tasks whose sizing policy (meta
nomad_gpu_sizing) is auto, that checkpoint, and that were not resized within
their nomad_gpu_sizing_interval: it registers the job with the new device
request (guarded by the job's modify index), and the gpu driver checkpoints
the task before Nomad replaces it, so the new allocation resumes from that
checkpoint. Tasks under recommend are logged only; nomad-gpu recommend JOB
shows why.

Deadlines: a queued job whose meta nomad_gpu_deadline (RFC 3339) would be
missed at its predicted wait and run time gets its priority raised to the
next tier (-priority-tiers, at most -max-priority), one tier per
-raise-every; once it runs, it gets its priority back (an in-place update).

One sizer per cluster: the history file is locked while it runs.

Connection: NOMAD_ADDR, NOMAD_TOKEN, NOMAD_REGION and the TLS variables, as
the nomad CLI reads them; the flags override them. The token needs
read-job and submit-job in the namespaces of the sized jobs, and node:read.

Flags:
`

type sizerOptions struct {
	nomadConn
	historyPath, prometheus string
	interval, window        time.Duration
	retention               time.Duration
	minSamples              int
	minSpan                 time.Duration
	once                    bool
	logLevel                string
	deadlines               sizing.DeadlineConfig
	forecastWindow          time.Duration
}

func parseSizerFlags(args []string, stderr io.Writer) (*sizerOptions, error) {
	o := &sizerOptions{}
	fs := flag.NewFlagSet("sizer", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, sizerUsage)
		fs.PrintDefaults()
	}
	o.addFlags(fs, "") // the sizer reads every namespace
	fs.StringVar(&o.historyPath, "history", "", "the history file (bbolt; created if missing)")
	fs.StringVar(&o.prometheus, "prometheus", "", "read utilisation and memory from this Prometheus (the gpu driver's task metrics) instead of sampling the nodes")
	fs.DurationVar(&o.interval, "interval", time.Minute, "time between rounds: the sample rate of the history")
	fs.DurationVar(&o.window, "window", 6*time.Hour, "how far back a recommendation reads")
	fs.DurationVar(&o.retention, "retention", history.DefaultRetention, "how long samples and finished runs are kept")
	fs.IntVar(&o.minSamples, "min-samples", sizing.DefaultThresholds.MinSamples, "samples a task needs before it is resized")
	fs.DurationVar(&o.minSpan, "min-span", sizing.DefaultThresholds.MinSpan, "time its samples must span before it is resized")
	tiers := fs.String("priority-tiers", "70,40", "priority tiers' lower bounds, decreasing (as the APM's priority_tiers): a deadline raise goes one tier up")
	fs.IntVar(&o.deadlines.MaxPriority, "max-priority", sizing.DefaultDeadlines.MaxPriority, "the highest priority a deadline raise gives")
	fs.DurationVar(&o.deadlines.Lead, "deadline-lead", sizing.DefaultDeadlines.Lead, "the wait assumed for a queued job whose wait cannot be predicted")
	fs.DurationVar(&o.forecastWindow, "forecast-window", 24*time.Hour, "how far back finished allocations are read to predict a queued job's wait for deadlines; 0: assume -deadline-lead")
	fs.DurationVar(&o.deadlines.RaiseEvery, "raise-every", sizing.DefaultDeadlines.RaiseEvery, "least time between two deadline raises of one job")
	fs.BoolVar(&o.once, "once", false, "one round, then exit")
	fs.StringVar(&o.logLevel, "log-level", "info", "trace, debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	t, err := apm.ParseTiers(*tiers)
	if err != nil {
		return nil, fmt.Errorf("-priority-tiers %q: %v", *tiers, err)
	}
	o.deadlines.Tiers = t
	switch {
	case fs.NArg() > 0:
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	case o.historyPath == "":
		return nil, errors.New("-history is required: the file the sizer keeps its run records (and, without -prometheus, its samples) in")
	case o.interval < time.Second:
		return nil, fmt.Errorf("-interval %v: must be at least 1s", o.interval)
	case o.window <= 0:
		return nil, fmt.Errorf("-window %v: must be positive", o.window)
	case o.retention < o.window:
		return nil, fmt.Errorf("-retention %v: must be at least -window (%v), or recommendations read history already dropped", o.retention, o.window)
	case o.minSamples < 1:
		return nil, fmt.Errorf("-min-samples %d: must be at least 1", o.minSamples)
	case o.minSpan < 0:
		return nil, fmt.Errorf("-min-span %v: must not be negative", o.minSpan)
	case o.deadlines.MaxPriority < 1 || o.deadlines.MaxPriority > 100:
		return nil, fmt.Errorf("-max-priority %d: allowed: 1 to 100 (Nomad's job priorities)", o.deadlines.MaxPriority)
	case o.forecastWindow < 0:
		return nil, fmt.Errorf("-forecast-window %v: must not be negative (0: no forecast)", o.forecastWindow)
	case o.deadlines.Lead < 0 || o.deadlines.RaiseEvery < 0:
		return nil, fmt.Errorf("-deadline-lead and -raise-every must not be negative")
	case hclog.LevelFromString(o.logLevel) == hclog.NoLevel:
		return nil, fmt.Errorf("-log-level %q: allowed: trace, debug, info, warn, error", o.logLevel)
	}
	return o, nil
}

func runSizer(args []string, stdout, stderr io.Writer) int {
	o, err := parseSizerFlags(args, stderr)
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
	if err := sizerLoop(ctx, o, logger, stdout); err != nil {
		fmt.Fprintln(stderr, "nomad-gpu sizer:", err)
		return 1
	}
	return 0
}

// sizerLoop runs rounds until ctx ends (or one with -once). A failed round
// is logged and retried at the next tick: Nomad being briefly away must
// not stop the sizer.
func sizerLoop(ctx context.Context, o *sizerOptions, logger hclog.Logger, stdout io.Writer) error {
	st, err := history.Open(o.historyPath, history.Options{Retention: o.retention})
	if err != nil {
		return fmt.Errorf("-history: %w", err)
	}
	defer st.Close()
	cl, err := api.NewClient(o.config())
	if err != nil {
		return err
	}
	th := sizing.DefaultThresholds
	th.MinSamples, th.MinSpan = o.minSamples, o.minSpan
	s := &sizing.Sizer{Nomad: cl, Store: st, Window: o.window, Thresholds: th, Logger: logger, Deadlines: &o.deadlines}
	if o.forecastWindow > 0 {
		// The deadlines' waits: the forecast top shows, from Nomad's own
		// allocations of the last -forecast-window.
		w := nomadview.NewWatcher(cl, nomadview.Config{FinishedWindow: o.forecastWindow})
		defer w.Close()
		r := &clusterview.Source{Client: cl, Watcher: w, History: true, SkipStats: true}
		s.Forecast = func(ctx context.Context, _ time.Time) (sizing.Forecasts, error) {
			in, err := r.Read(ctx, clusterview.Filter{})
			if err != nil {
				return sizing.Forecasts{}, err
			}
			return clusterview.Forecast(in)
		}
	}
	if o.prometheus != "" {
		p, err := history.NewPrometheus(o.prometheus, st, history.PromOptions{})
		if err != nil {
			return fmt.Errorf("-prometheus: %w", err)
		}
		s.Samples = p
	}
	logger.Info("sizer started", "history", o.historyPath, "interval", o.interval, "window", o.window)
	tick := time.NewTicker(o.interval)
	defer tick.Stop()
	for {
		rep, err := s.Step(ctx, time.Now())
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil && o.once:
			return err
		case err != nil:
			logger.Error("round failed; the next round tries again", "error", err)
		default:
			logger.Debug("round", "samples", rep.Samples, "runs", rep.Runs, "tasks", len(rep.Results), "resized", len(rep.Resized))
		}
		if o.once {
			for _, r := range rep.Resized {
				fmt.Fprintf(stdout, "resized %s: %s\n", r.Key, r.Reason)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}
