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

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/controller/sizing"
	"github.com/nomad-gpu/nomad-gpu/controller/sizing/history"
)

func init() {
	register("recommend", command{
		summary: "the GPU slice each task of a job should have, from its history, with the evidence",
		run:     runRecommend,
	})
}

const recommendUsage = `usage: nomad-gpu recommend [flags] JOB

For each GPU task of JOB whose sizing policy (meta nomad_gpu_sizing) is
recommend or auto, says which slice it should have (MPS share count, MIG
profile or whole-GPU count) and why, from its utilisation, memory and run
outcomes over -window, bounded by nomad_gpu_sizing_min/_max and by what the
nodes of the job's pool offer; and whether the sizer would apply it now.
It changes nothing. (A queue's nominal quota from its use: nomad-gpu
recommend-quotas.)

History comes from Prometheus (-prometheus, the task metrics of the gpu
driver) or from a sizer's history file (-history); run outcomes come from
the history file. The history file is held by a running sizer: copy it, or
stop the sizer, to read it here.

Connection: NOMAD_ADDR, NOMAD_TOKEN, NOMAD_REGION, NOMAD_NAMESPACE and the
TLS variables, as the nomad CLI reads them; the flags override them.

Flags:
`

type recommendOptions struct {
	nomadConn
	historyPath, prometheus string
	window                  time.Duration
	json, all               bool
	job                     string
}

func parseRecommendFlags(args []string, stderr io.Writer) (*recommendOptions, error) {
	o := &recommendOptions{}
	fs := flag.NewFlagSet("recommend", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, recommendUsage)
		fs.PrintDefaults()
	}
	o.addFlags(fs, "the job's namespace (default $NOMAD_NAMESPACE, else default)")
	fs.StringVar(&o.historyPath, "history", "", "a sizer's history file (bbolt)")
	fs.StringVar(&o.prometheus, "prometheus", "", "Prometheus server URL to read the task metrics from, e.g. http://127.0.0.1:9090")
	fs.DurationVar(&o.window, "window", 6*time.Hour, "how far back the history is read")
	fs.BoolVar(&o.json, "json", false, "print JSON")
	fs.BoolVar(&o.all, "all", false, "also tasks whose sizing policy is off")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	switch {
	case fs.NArg() == 0:
		return nil, errors.New("name the job: nomad-gpu recommend [flags] JOB")
	case fs.NArg() > 1:
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(1))
	case o.historyPath == "" && o.prometheus == "":
		return nil, errors.New("give -history (a sizer's history file) or -prometheus (a Prometheus URL), or both")
	case o.window <= 0:
		return nil, fmt.Errorf("-window %v: must be positive", o.window)
	}
	o.job = fs.Arg(0)
	return o, nil
}

// noRuns is the run source without a history file: Prometheus has samples
// only.
type noRuns struct{}

func (noRuns) Runs(context.Context, history.Key, time.Time) ([]history.Run, error) { return nil, nil }
func (noRuns) AllRuns(context.Context, time.Time) ([]history.Run, error)           { return nil, nil }

func runRecommend(args []string, stdout, stderr io.Writer) int {
	o, err := parseRecommendFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "nomad-gpu recommend:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := recommend(ctx, o, stdout); err != nil {
		fmt.Fprintln(stderr, "nomad-gpu recommend:", err)
		return 1
	}
	return 0
}

func recommend(ctx context.Context, o *recommendOptions, stdout io.Writer) error {
	var src history.Source
	var runs history.RunSource = noRuns{}
	if o.historyPath != "" {
		st, err := history.Open(o.historyPath, history.Options{})
		if err != nil {
			return err
		}
		defer st.Close()
		src, runs = st, st
	}
	if o.prometheus != "" {
		p, err := history.NewPrometheus(o.prometheus, runs, history.PromOptions{})
		if err != nil {
			return fmt.Errorf("-prometheus: %w", err)
		}
		src = p
	}
	cl, err := api.NewClient(o.config())
	if err != nil {
		return err
	}
	q := (&api.QueryOptions{}).WithContext(ctx)
	job, _, err := cl.Jobs().Info(o.job, q)
	if err != nil {
		return fmt.Errorf("job %q: %w", o.job, err)
	}
	nq := (&api.QueryOptions{Params: map[string]string{"resources": "true"}}).WithContext(ctx)
	nodes, _, err := cl.Nodes().List(nq)
	if err != nil {
		return fmt.Errorf("nodes: %w", err)
	}
	res, err := sizing.SizeJob(ctx, job, src, nodes, o.window, sizing.DefaultThresholds, o.all, time.Now())
	if err != nil {
		return err
	}
	if o.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(recommendJSON(res))
	}
	if len(res) == 0 {
		_, err := fmt.Fprintf(stdout, "job %s has no GPU task with a sizing policy (meta %s = recommend or auto); -all shows them all\n", o.job, sizing.MetaMode)
		return err
	}
	for _, r := range res {
		fmt.Fprintf(stdout, "%s/%s (%s)\n", r.Key.Group, r.Key.Task, r.Policy.Mode)
		if r.Err != nil {
			fmt.Fprintf(stdout, "  cannot size: %v\n", r.Err)
			continue
		}
		fmt.Fprintf(stdout, "  %s\n", r.Recommendation.Summary())
		switch {
		case r.Decision.Apply:
			fmt.Fprintln(stdout, "  the sizer would apply it now (a checkpointed restart)")
		case r.Decision.Hold != "":
			fmt.Fprintf(stdout, "  not applied: %s\n", r.Decision.Hold)
		}
	}
	return nil
}

// recommendTask is one task in `nomad-gpu recommend -json`.
type recommendTask struct {
	Namespace, Job, Group, Task string
	Mode                        sizing.Mode
	Current, Recommended        history.Slice `json:",omitempty"`
	Change                      sizing.Change `json:",omitempty"`
	Reason                      string        `json:",omitempty"`
	Evidence                    []string      `json:",omitempty"`
	Apply                       bool
	Hold                        string `json:",omitempty"`
	Checkpoints                 bool
	Error                       string `json:",omitempty"`
}

func recommendJSON(res []sizing.TaskResult) []recommendTask {
	out := []recommendTask{}
	for _, r := range res {
		t := recommendTask{Namespace: r.Key.Namespace, Job: r.Key.Job, Group: r.Key.Group, Task: r.Key.Task, Mode: r.Policy.Mode, Checkpoints: r.Checkpoints}
		if r.Err != nil {
			t.Error = r.Err.Error()
		} else {
			rec := r.Recommendation
			t.Current, t.Recommended, t.Change, t.Reason, t.Evidence = rec.Current, rec.Recommended, rec.Change, rec.Reason, rec.Evidence
			t.Apply, t.Hold = r.Decision.Apply, r.Decision.Hold
		}
		out = append(out, t)
	}
	return out
}
