package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/controller"
	"github.com/nomad-gpu/nomad-gpu/controller/queues"
	"github.com/nomad-gpu/nomad-gpu/internal/metrics"
)

func init() {
	register("controller", command{
		summary: "the cluster brain: the one part that changes jobs (run it as jobs/controller/controller.nomad.hcl)",
		run:     runController,
	})
}

const controllerUsage = `usage: nomad-gpu controller [flags]

Takes part in the election of the leader (a Nomad variable lock at
nomad-gpu/controller/leader in -namespace) and, while it leads, reads the
cluster every -tick (a blocking query on allocations) and runs its modules:

  preemption protection: a job preempted by work of a higher priority is
  protected once its replacement runs: raised in place to its preemptor's
  priority for -preemption-cooldown, so that work of that class cannot
  preempt it again at once. It is never raised while it waits (it would
  preempt its own peers). Preempted anyway, by work at least 10 above the
  raise, it loses the raise at once.

  minimum runtime: an allocation younger than its minimum runtime (its
  job's meta nomad_gpu_min_runtime, else its node pool's -min-runtime)
  cannot be preempted at all: its job runs at -min-runtime-priority
  meanwhile.
  deadlines (-deadlines): a queued job whose meta nomad_gpu_deadline
  (RFC 3339) would be missed at its predicted wait and run time is raised
  to the next priority tier (-priority-tiers, at most -max-priority), one
  tier per -raise-every; the raise ends once the job has started.

  right-sizing (on with -history or -prometheus): every -sizing-interval,
  records each GPU task's utilisation and memory and how its runs end,
  sizes every job holding GPUs, and resizes the tasks whose meta
  nomad_gpu_sizing is auto, that checkpoint, and that were not resized
  within their nomad_gpu_sizing_interval: it registers the job with the
  new device request (guarded by the job's modify index); the gpu driver
  checkpoints the task before Nomad replaces it. Only the leader opens
  the -history file: give replicas a shared host volume for it, or use
  -prometheus alone (samples from Prometheus, runs from what Nomad
  remembers, no file). nomad-gpu sizer -dry-run shows what it would do.

  layouts (-layouts): free GPUs are relaid (whole, MPS shares, MIG
  geometries) as the queue needs, through node metadata
  nomad_gpu.layout.<GPU-UUID> that the device plugins apply.

  moves (-moves): when a queued allocation needs more whole GPUs than any
  node has free, the fewest running allocations of batch jobs that opted
  in (meta nomad_gpu_movable = "true", or -move-pools) and checkpoint on
  the gpu driver are stopped so that Nomad places them elsewhere and they
  resume from their checkpoints; the node they free is held ineligible
  until they are placed (-move-hold), within -move-budget-hour and
  -move-budget-job-day. Relief: when an MPS GPU stays above -relief-high
  for -relief-window while another of its pool is below -relief-low, its
  busiest movable client moves, the GPU held meanwhile through node
  metadata nomad_gpu.hold.<GPU-UUID>.
  Scale-in (-scale-in-pools): a node of those pools (or pool/class) that
  no queued allocation could use for -scale-in-quiet has its movable work
  moved onto the others; once it runs nothing it is marked with a drain
  whose meta is nomad_gpu_scale_in, for the autoscaler to remove
  (nodes_removable, gpu-queue's removable check).

  gangs (-gangs): a batch job whose meta nomad_gpu_gang is "true" waits
  with its groups at count 0; when Nomad's plan of it with every group at
  its meta nomad_gpu_gang_members places them all, its groups are scaled
  up; a member not running -gang-admit-timeout after that while another
  holds GPUs rolls the gang back to 0, planned again after a back-off
  (docs/design/gangs.md).

Every priority change goes through the priority ledger, one Nomad variable
per job at nomad-gpu/priority/<job> in the job's namespace: the job's own
priority and each raise in force (preemption protection, deadline), with
its reason and end; the job runs at the highest. A priority changed by
hand is taken as the job's own.

Run two replicas: a killed leader is replaced within -lock-ttl. (Nomad
keeps a variable lock twice the TTL it is given, then its lock delay: the
controller gives it (-lock-ttl − -lock-delay − 2s) / 2, 2s for the other's retry and request.)

Connection: NOMAD_ADDR, NOMAD_TOKEN, NOMAD_REGION and the TLS variables, as
the nomad CLI reads them; the flags override them. The token needs
read-job and submit-job in the namespaces of the jobs it changes
(alloc-lifecycle too with -moves), variable read/write on nomad-gpu/* in
those namespaces and in -namespace, and node:write with -layouts or
-moves (node metadata, a held node's eligibility, a held GPU), else
node:read.

Flags:
`

type controllerOptions struct {
	nomadConn
	cfg            controller.Config
	minRuntime     string
	modules        moduleFlags
	metricsAddress string
	logLevel       string
	layouts        layoutFlags
	moves          moveFlags
	gangs          gangFlags
	queuesFile     string
}

func parseControllerFlags(args []string, stderr io.Writer) (*controllerOptions, error) {
	o := &controllerOptions{}
	fs := flag.NewFlagSet("controller", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, controllerUsage)
		fs.PrintDefaults()
	}
	o.addFlags(fs, "")
	fs.StringVar(&o.cfg.Namespace, "namespace", "default", "namespace of the leader lock")
	fs.DurationVar(&o.cfg.Cooldown, "preemption-cooldown", 5*time.Minute, "how long a resumed preempted job is protected; 0 turns protection off")
	fs.StringVar(&o.minRuntime, "min-runtime", "", `minimum runtime by node pool, "training=20m,hpc=1h" (off where unset)`)
	fs.IntVar(&o.cfg.MinRuntimePriority, "min-runtime-priority", 100, "what a job is raised to while an allocation is inside its minimum runtime (1 to 32767; Nomad's job_max_priority, 100 by default, cannot be preempted)")
	fs.DurationVar(&o.cfg.LockTTL, "lock-ttl", 30*time.Second, "the longest a dead leader keeps the lead: another replica leads within it (22s + -lock-delay to 48h)")
	fs.DurationVar(&o.cfg.LockDelay, "lock-delay", time.Second, "how long after a lapsed lock no replica may take it")
	fs.DurationVar(&o.cfg.Tick, "tick", time.Second, "the shortest time between two reads of the cluster (100ms to 1m)")
	fs.StringVar(&o.metricsAddress, "metrics-address", ":9405", `where /metrics is served ("" turns it off)`)
	fs.StringVar(&o.logLevel, "log-level", "info", "trace, debug, info, warn or error")
	fs.StringVar(&o.queuesFile, "queues", "", "the queue file (HCL: queues, cohorts, quotas, fair share; docs/controller.md#queues); unset: no queues")
	o.modules.add(fs)
	o.layouts.add(fs)
	o.moves.add(fs)
	o.gangs.add(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q; the controller takes flags only", fs.Arg(0))
	}
	switch {
	case o.cfg.Cooldown < 0:
		return nil, fmt.Errorf("-preemption-cooldown: %s; allowed: 0 (off) or more", o.cfg.Cooldown)
	case o.cfg.LockDelay <= 0 || o.cfg.LockDelay > time.Hour:
		return nil, fmt.Errorf("-lock-delay: %s; allowed: more than 0, at most 1h", o.cfg.LockDelay)
	case o.cfg.LockTTL < controller.MinLockTTL(o.cfg.LockDelay) || o.cfg.LockTTL > 48*time.Hour:
		return nil, fmt.Errorf("-lock-ttl: %s; allowed: %s (22s + -lock-delay: Nomad keeps a lock twice its TTL, at least 10s) to 48h",
			o.cfg.LockTTL, controller.MinLockTTL(o.cfg.LockDelay))
	case o.cfg.Tick < 100*time.Millisecond || o.cfg.Tick > time.Minute:
		return nil, fmt.Errorf("-tick: %s; allowed: 100ms to 1m", o.cfg.Tick)
	case o.cfg.Namespace == "":
		return nil, fmt.Errorf("-namespace: empty; allowed: a namespace name")
	case o.cfg.MinRuntimePriority < 1 || o.cfg.MinRuntimePriority > 32767:
		return nil, fmt.Errorf("-min-runtime-priority: %d; allowed: 1 to 32767", o.cfg.MinRuntimePriority)
	}
	var err error
	if o.cfg.MinRuntime, err = parsePoolDurations(o.minRuntime); err != nil {
		return nil, fmt.Errorf("-min-runtime: %v", err)
	}
	if err := o.modules.apply(&o.cfg); err != nil {
		return nil, err
	}
	if o.cfg.Layouts, err = o.layouts.bounds(); err != nil {
		return nil, err
	}
	if o.cfg.Gangs, err = o.gangs.gangs(); err != nil {
		return nil, err
	}
	if o.cfg.Moves, err = o.moves.moves(); err != nil {
		return nil, err
	}
	if o.metricsAddress != "" {
		if err := metrics.CheckListenAddress(o.metricsAddress); err != nil {
			return nil, fmt.Errorf("-metrics-address: %q: %v; allowed: host:port, such as :9405", o.metricsAddress, err)
		}
	}
	if hclog.LevelFromString(o.logLevel) == hclog.NoLevel {
		return nil, fmt.Errorf("-log-level: %q; allowed: trace, debug, info, warn, error", o.logLevel)
	}
	if o.queuesFile != "" {
		src, err := os.ReadFile(o.queuesFile)
		if err != nil {
			return nil, fmt.Errorf("-queues: %v", err)
		}
		cfg, err := queues.Parse(o.queuesFile, src)
		if err != nil {
			return nil, fmt.Errorf("-queues:\n%v", err)
		}
		if o.cfg.Gangs == nil {
			return nil, errors.New("-queues: set with -gangs=false; allowed: -gangs on (the queues admit held jobs through the gangs' gate)")
		}
		o.cfg.Queues = &cfg
	}
	return o, nil
}

// parsePoolDurations reads "pool=duration,pool=duration".
func parsePoolDurations(s string) (map[string]time.Duration, error) {
	out := map[string]time.Duration{}
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	for _, part := range strings.Split(s, ",") {
		pool, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		d, err := time.ParseDuration(strings.TrimSpace(v))
		switch {
		case !ok || strings.TrimSpace(pool) == "":
			return nil, fmt.Errorf("%q; allowed: pool=duration, comma-separated, such as training=20m,hpc=1h", part)
		case err != nil || d <= 0:
			return nil, fmt.Errorf("%q: %q is not a duration above 0 such as 20m", part, v)
		case out[strings.TrimSpace(pool)] != 0:
			return nil, fmt.Errorf("pool %q given twice", strings.TrimSpace(pool))
		}
		out[strings.TrimSpace(pool)] = d
	}
	return out, nil
}

func runController(args []string, _, stderr io.Writer) int {
	o, err := parseControllerFlags(args, stderr)
	if err == flag.ErrHelp {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "nomad-gpu controller: %v\n", err)
		return 2
	}
	log := hclog.New(&hclog.LoggerOptions{Name: "nomad-gpu-controller", Level: hclog.LevelFromString(o.logLevel), Output: stderr})
	client, err := api.NewClient(o.config())
	if err != nil {
		fmt.Fprintf(stderr, "nomad-gpu controller: %v\n", err)
		return 2
	}
	m := controller.NewMetrics()
	if o.metricsAddress != "" {
		srv, err := metrics.Listen(o.metricsAddress, m.Handler(), log)
		if err != nil {
			fmt.Fprintf(stderr, "nomad-gpu controller: -metrics-address %s: %v\n", o.metricsAddress, err)
			return 1
		}
		defer srv.Close()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log.Info("started", "nomad", client.Address(), "preemption_cooldown", o.cfg.Cooldown, "lock_ttl", o.cfg.LockTTL,
		"deadlines", o.cfg.Deadlines != nil, "sizing", o.cfg.Sizing != nil, "layouts", o.cfg.Layouts != nil, "moves", o.cfg.Moves != nil, "gangs", o.cfg.Gangs != nil)
	if err := controller.New(client, o.cfg, log, m).Run(ctx); err != nil {
		fmt.Fprintf(stderr, "nomad-gpu controller: %v\n", err)
		return 1
	}
	return 0
}
