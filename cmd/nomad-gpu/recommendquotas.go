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
	"strconv"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/prometheus/common/model"

	"github.com/nomad-gpu/nomad-gpu/controller/queues"
)

func init() {
	register("recommend-quotas", command{
		summary: "each queue's nominal quota from its use over a window, with the evidence; -write applies it",
		run:     runRecommendQuotas,
	})
}

// It is a command of its own, not a mode of recommend: its window is
// days (7d, which recommend's Go durations do not read) where recommend's
// is hours, its source is Prometheus only, and -quantile, -step, -floor
// and -write mean nothing to a job's tasks.
const recommendQuotasUsage = `usage: nomad-gpu recommend-quotas -queues FILE -prometheus URL [flags]

Recommends each queue's nominal quota from its use over -window, as the
leader controller exported it to Prometheus (nomad_gpu_controller_queue_gpus
figure used, with nomad_gpu_controller_leader == 1). Within a cohort the
cohort's total nominal is kept and shared out in proportion to each queue's
-quantile use, rounded to -step with the total kept exactly; a queue with
no use gets none (unless -floor). A queue in no cohort cannot borrow: it is
only lowered, to its use rounded up to -step. A lending_limit above a new
nominal is lowered to it. A queue with no history keeps its nominal.

Prints QUEUE, COHORT, NOMINAL, the quantile used, MEAN, MAX, RECOMMENDED
and CHANGE, then each queue's reason (-json: one JSON document). It
changes nothing unless -write: then FILE is rewritten with the new
nominal and lending_limit values, all else of it as written.

Flags:
`

type recommendQuotasOptions struct {
	queuesPath, prometheus string
	window                 time.Duration
	quantile               float64
	rec                    queues.RecommendOptions
	json, write            bool
}

// Bounds of -window: under an hour is too few ticks to say a queue's use.
const minQuotaWindow = time.Hour

func parseRecommendQuotasFlags(args []string, stderr io.Writer) (*recommendQuotasOptions, error) {
	o := &recommendQuotasOptions{window: 7 * 24 * time.Hour}
	fs := flag.NewFlagSet("recommend-quotas", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, recommendQuotasUsage)
		fs.PrintDefaults()
	}
	fs.StringVar(&o.queuesPath, "queues", "", "the controller's queue file (HCL)")
	fs.StringVar(&o.prometheus, "prometheus", "", "Prometheus server URL that scrapes the controller, e.g. http://127.0.0.1:9090")
	fs.Func("window", "how far back use is read, at least 1h: 7d, 36h, 2w (default 7d)", func(s string) error {
		d, err := model.ParseDuration(s)
		o.window = time.Duration(d)
		return err
	})
	fs.Float64Var(&o.quantile, "quantile", 0.9, "the quantile of each queue's use its nominal follows, in (0,1]")
	fs.Float64Var(&o.rec.Step, "step", queues.DefaultStep, "GPU-equivalents nominals are rounded to, more than 0")
	fs.Float64Var(&o.rec.Floor, "floor", 0, "least nominal of a queue with history, a multiple of -step")
	fs.BoolVar(&o.json, "json", false, "print JSON")
	fs.BoolVar(&o.write, "write", false, "rewrite the queue file with the recommended nominals")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	return o, o.check(fs)
}

func (o *recommendQuotasOptions) check(fs *flag.FlagSet) error {
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("unexpected argument %q; allowed: flags only (nomad-gpu recommend JOB sizes a job's tasks)", fs.Arg(0))
	case o.queuesPath == "":
		return errors.New("-queues: not set; allowed: the controller's queue file")
	case o.prometheus == "":
		return errors.New("-prometheus: not set; allowed: the URL of a Prometheus server that scrapes the controller")
	case o.window < minQuotaWindow:
		return fmt.Errorf("-window %s; allowed: at least %s", model.Duration(o.window), model.Duration(minQuotaWindow))
	case !(o.quantile > 0 && o.quantile <= 1):
		return fmt.Errorf("-quantile %g; allowed: more than 0, at most 1", o.quantile)
	}
	if err := o.rec.Validate(); err != nil {
		return fmt.Errorf("-%w", err)
	}
	return nil
}

func runRecommendQuotas(args []string, stdout, stderr io.Writer) int {
	o, err := parseRecommendQuotasFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "nomad-gpu recommend-quotas:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	code, err := recommendQuotas(ctx, o, stdout)
	if err != nil {
		fmt.Fprintln(stderr, "nomad-gpu recommend-quotas:", err)
	}
	return code
}

// recommendQuotas reads, recommends, prints and, with -write, writes; its
// exit status is 2 for bad input (the file, -floor), 1 for the rest.
func recommendQuotas(ctx context.Context, o *recommendQuotasOptions, stdout io.Writer) (int, error) {
	src, err := os.ReadFile(o.queuesPath)
	if err != nil {
		return 2, fmt.Errorf("-queues: %w", err)
	}
	cfg, err := queues.Parse(o.queuesPath, src)
	if err != nil {
		return 2, err
	}
	use, err := queueUse(ctx, o.prometheus, o.window, o.quantile, time.Now())
	if err != nil {
		return 1, err
	}
	recs, err := queues.Recommend(cfg, use, o.rec)
	if err != nil {
		return 2, fmt.Errorf("-%w", err)
	}
	written := false
	if o.write && changes(recs) {
		if err := writeQuotas(o.queuesPath, src, recs); err != nil {
			return 1, err
		}
		written = true
	}
	if o.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return 0, enc.Encode(quotaReportOf(o, recs, written))
	}
	return 0, printQuotas(stdout, o, recs, written)
}

func changes(recs []queues.Recommendation) bool {
	for _, r := range recs {
		if r.Change() != 0 || r.LendingLowered {
			return true
		}
	}
	return false
}

func printQuotas(w io.Writer, o *recommendQuotasOptions, recs []queues.Recommendation, written bool) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "QUEUE\tCOHORT\tNOMINAL\tP%s USED\tMEAN\tMAX\tRECOMMENDED\tCHANGE\n", gpuNum(100*o.quantile))
	for _, r := range recs {
		p, mean, mx := "-", "-", "-"
		if r.History {
			p, mean, mx = gpuNum(r.Use.Quantile), gpuNum(r.Use.Mean), gpuNum(r.Use.Max)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Queue, orDash(r.Cohort), gpuNum(r.Nominal),
			p, mean, mx, gpuNum(r.Recommended), signed(r.Change()))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	for _, r := range recs {
		fmt.Fprintf(w, "%s: %s\n", r.Queue, r.Reason)
	}
	switch {
	case written:
		_, err := fmt.Fprintf(w, "\nwrote %s\n", o.queuesPath)
		return err
	case !changes(recs):
		_, err := fmt.Fprintln(w, "\nno change to recommend")
		return err
	case !o.write:
		_, err := fmt.Fprintf(w, "\nnothing changed; -write rewrites %s with these nominals\n", o.queuesPath)
		return err
	}
	return nil
}

// gpuNum writes GPU-equivalents to a thousandth: "6", "0.5", "2.333".
func gpuNum(x float64) string {
	return strconv.FormatFloat(float64(int64(x*1000+0.5))/1000, 'f', -1, 64)
}

func signed(x float64) string {
	if x > 0 {
		return "+" + gpuNum(x)
	}
	if x < 0 {
		return "-" + gpuNum(-x)
	}
	return "0"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// quotaReport is `nomad-gpu recommend-quotas -json`.
type quotaReport struct {
	File        string
	Window      string
	Quantile    float64
	Step, Floor float64
	Written     bool
	Queues      []quotaQueue
}

type quotaQueue struct {
	Queue, Cohort                string
	History                      bool
	Nominal, Recommended, Change float64
	Mean, Quantile, Max, Starved float64
	LendingLimit                 float64
	LendingLowered               bool
	Reason                       string
}

func quotaReportOf(o *recommendQuotasOptions, recs []queues.Recommendation, written bool) quotaReport {
	rep := quotaReport{File: o.queuesPath, Window: model.Duration(o.window).String(), Quantile: o.quantile,
		Step: o.rec.Step, Floor: o.rec.Floor, Written: written, Queues: []quotaQueue{}}
	for _, r := range recs {
		rep.Queues = append(rep.Queues, quotaQueue{Queue: r.Queue, Cohort: r.Cohort, History: r.History,
			Nominal: r.Nominal, Recommended: r.Recommended, Change: r.Change(),
			Mean: r.Use.Mean, Quantile: r.Use.Quantile, Max: r.Use.Max, Starved: r.Use.Starved,
			LendingLimit: r.LendingLimit, LendingLowered: r.LendingLowered, Reason: r.Reason})
	}
	return rep
}
