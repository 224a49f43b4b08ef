package main

import (
	"context"
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

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/driver/checkpoint"
	"github.com/nomad-gpu/nomad-gpu/nomadview"
	"github.com/nomad-gpu/nomad-gpu/topview"
)

func init() {
	register("checkpoints", command{
		summary: "list a node's task checkpoints; prune those of jobs Nomad no longer has",
		run:     runCheckpoints,
	})
}

const checkpointsUsage = `usage: nomad-gpu checkpoints list  -root DIR [flags]
       nomad-gpu checkpoints prune -root DIR [-older-than D] [-apply] [flags]

Checkpoints of the gpu driver outlive their job: after nomad job stop
-purge, a new job of the same name (and group, task and alloc index)
resumes from them. Run as root on the node, with -root the driver's
checkpoint.root (default /var/lib/nomad-gpu/checkpoints).

list shows every stored checkpoint: its namespace, job, group, task and
alloc index, generations, size, when it was last used, and whether its
job still exists in Nomad.

prune removes the checkpoints whose job Nomad no longer has (a job that
is stopped but not purged still has its checkpoints), last used at least
-older-than ago. It prints what it would remove and removes it only with
-apply, each checkpoint at once (renamed away, then deleted). It removes
nothing unless Nomad answered for every job.

Connection: NOMAD_ADDR, NOMAD_TOKEN, NOMAD_REGION and the TLS variables,
as the nomad CLI reads them; the flags below override them. The token
needs read-job in the checkpoints' namespaces.

Flags:
`

type checkpointsOptions struct {
	nomadConn
	sub       string
	root      string
	olderThan time.Duration
	apply     bool
}

func parseCheckpointsFlags(args []string, stderr io.Writer) (*checkpointsOptions, error) {
	if len(args) == 0 || (args[0] != "list" && args[0] != "prune") {
		fmt.Fprint(stderr, checkpointsUsage)
		if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
			return nil, flag.ErrHelp
		}
		return nil, fmt.Errorf("unknown subcommand %q; allowed: list, prune", args[0])
	}
	o := &checkpointsOptions{sub: args[0]}
	fs := flag.NewFlagSet("checkpoints "+o.sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, checkpointsUsage)
		fs.PrintDefaults()
	}
	fs.StringVar(&o.root, "root", "", "the driver's checkpoint.root (required)")
	if o.sub == "prune" {
		fs.DurationVar(&o.olderThan, "older-than", 0, "prune only checkpoints last used at least this long ago, e.g. 168h")
		fs.BoolVar(&o.apply, "apply", false, "remove them; without it, only print what would be removed")
	}
	o.addFlags(fs, "")
	if err := fs.Parse(args[1:]); err != nil {
		return nil, err
	}
	switch {
	case fs.NArg() > 0:
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	case o.root == "":
		return nil, errors.New("-root is required: the driver's checkpoint.root, e.g. /var/lib/nomad-gpu/checkpoints")
	case o.olderThan < 0:
		return nil, fmt.Errorf("-older-than %v: must not be negative", o.olderThan)
	}
	return o, nil
}

func runCheckpoints(args []string, stdout, stderr io.Writer) int {
	o, err := parseCheckpointsFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "nomad-gpu checkpoints:", err)
		return 2
	}
	prefix := "nomad-gpu checkpoints " + o.sub + ":"
	store, err := checkpoint.OpenExisting(o.root)
	if err != nil {
		fmt.Fprintln(stderr, prefix, "-root:", err)
		return 2
	}
	cl, err := api.NewClient(o.config())
	if err != nil {
		fmt.Fprintln(stderr, prefix, err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if o.sub == "list" {
		err = listCheckpoints(ctx, store, cl, stdout)
	} else {
		err = pruneCheckpoints(ctx, o, store, cl, stdout)
	}
	if err != nil {
		fmt.Fprintln(stderr, prefix, err)
		return 1
	}
	return 0
}

// jobState is what Nomad said of a checkpoint's job.
type jobState struct {
	exists, gone bool  // neither: unknown
	err          error // why it is unknown, if Nomad was asked
}

func (s jobState) String() string {
	switch {
	case s.exists:
		return "exists"
	case s.gone:
		return "not in Nomad"
	}
	return "unknown"
}

type jobRef struct{ namespace, job string }

// jobStates asks Nomad once per job whether each checkpoint's job exists.
// A key read back inexactly names no job: it stays unknown.
func jobStates(ctx context.Context, cl *api.Client, stored []checkpoint.Stored) map[jobRef]jobState {
	states := map[jobRef]jobState{}
	for _, st := range stored {
		ref := jobRef{st.Key.Namespace, st.Key.Job}
		if _, done := states[ref]; done || !st.Exact {
			continue
		}
		q := (&api.QueryOptions{Namespace: ref.namespace}).WithContext(ctx)
		_, _, err := cl.Jobs().Info(ref.job, q)
		switch {
		case err == nil:
			states[ref] = jobState{exists: true}
		case nomadview.IsNotFound(err):
			states[ref] = jobState{gone: true}
		default:
			states[ref] = jobState{err: fmt.Errorf("job %q (namespace %q): %w", ref.job, ref.namespace, err)}
		}
	}
	return states
}

// firstError is the first reason a job's state is unknown.
func firstError(states map[jobRef]jobState) error {
	for _, s := range states {
		if s.err != nil {
			return s.err
		}
	}
	return nil
}

func listCheckpoints(ctx context.Context, store *checkpoint.Store, cl *api.Client, stdout io.Writer) error {
	stored, err := store.List()
	if err != nil {
		return err
	}
	states := jobStates(ctx, cl, stored)
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE\tJOB\tGROUP\tTASK\tINDEX\tGENERATIONS\tSIZE\tLAST USED\tJOB IN NOMAD")
	now := time.Now()
	for _, st := range stored {
		k := st.Key
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s ago\t%s\n", k.Namespace, k.Job, k.Group, k.Task, k.AllocIndex,
			st.Generations, fmtBytes(uint64(st.Bytes)), age(now, st.LastUsed), states[jobRef{k.Namespace, k.Job}])
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if err := firstError(states); err != nil {
		return fmt.Errorf("cannot tell whether every job exists: %w", err)
	}
	return nil
}

func age(now, t time.Time) string {
	return topview.FormatWait(int64(max(now.Sub(t), 0) / time.Second))
}

func keyName(k checkpoint.Key) string {
	return k.Namespace + "/" + k.Job + "/" + k.Group + "/" + k.Task + "[" + strconv.Itoa(k.AllocIndex) + "]"
}

// pruneCheckpoints removes (with -apply; else names) the checkpoints of
// jobs Nomad does not have, last used at least -older-than ago.
func pruneCheckpoints(ctx context.Context, o *checkpointsOptions, store *checkpoint.Store, cl *api.Client, stdout io.Writer) error {
	stored, err := store.List()
	if err != nil {
		return err
	}
	states := jobStates(ctx, cl, stored)
	if err := firstError(states); err != nil {
		return fmt.Errorf("nothing removed: cannot tell whether every job exists: %w", err)
	}
	now := time.Now()
	var picked []checkpoint.Stored
	for _, st := range stored {
		switch {
		case !st.Exact:
			fmt.Fprintf(stdout, "skipped %s: its names were cut for length, so its job cannot be asked for; remove it by hand if that job is gone\n", st.Dir)
		case states[jobRef{st.Key.Namespace, st.Key.Job}].gone && now.Sub(st.LastUsed) >= o.olderThan:
			picked = append(picked, st)
		}
	}
	var bytes int64
	var errs []error
	for _, st := range picked {
		what := fmt.Sprintf("%s: %d generations, %s, last used %s ago (%s)", keyName(st.Key), st.Generations, fmtBytes(uint64(st.Bytes)), age(now, st.LastUsed), st.Dir)
		if !o.apply {
			fmt.Fprintln(stdout, "would remove", what)
			bytes += st.Bytes
			continue
		}
		if err := removeIfStillGone(ctx, store, cl, st); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", keyName(st.Key), err))
			continue
		}
		fmt.Fprintln(stdout, "removed", what)
		bytes += st.Bytes
	}
	done := len(picked) - len(errs)
	if !o.apply {
		fmt.Fprintf(stdout, "dry run: %d of %d checkpoints (%s) would be removed; run with -apply to remove them\n", done, len(stored), fmtBytes(uint64(bytes)))
	} else {
		fmt.Fprintf(stdout, "removed %d of %d checkpoints (%s)\n", done, len(stored), fmtBytes(uint64(bytes)))
	}
	if len(errs) > 0 {
		return fmt.Errorf("not removed: %w", errors.Join(errs...))
	}
	return nil
}

// removeIfStillGone asks Nomad again right before removing: a job
// registered again under the same name since the first answer keeps its
// checkpoints.
func removeIfStillGone(ctx context.Context, store *checkpoint.Store, cl *api.Client, st checkpoint.Stored) error {
	ref := jobRef{st.Key.Namespace, st.Key.Job}
	if s := jobStates(ctx, cl, []checkpoint.Stored{st})[ref]; !s.gone {
		if s.err != nil {
			return s.err
		}
		return errors.New("its job exists again; kept")
	}
	return store.RemoveStored(st)
}
