package tracereplay

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nomad-gpu/nomad-gpu/bench/traces"
	"github.com/nomad-gpu/nomad-gpu/contract/gpulayout"
)

// Params are a replay run's settings, as flags: `bench-trace`
// takes them on its command line, and `make bench-trace` passes them to
// the real-engine run in BENCH_TRACE_FLAGS, so both read one set.
type Params struct {
	// CSV is a trace in this package's CSV format; History a copy of the
	// controller's history file, whose runs since HistorySince ago become
	// the jobs (FromRuns, an MPS share 1/HistoryShares of a GPU); Philly a
	// Philly extract, used when both are empty (empty too: the embedded
	// copy).
	CSV, History, Philly string
	HistorySince         time.Duration
	HistoryShares        int
	// Jobs is the sample size (0: as many as Load asks); Window, Start
	// (empty: the busiest window, in arrivals of jobs asking for at least
	// BusiestMinGPUs where that is above 1) and Seed pick it.
	Jobs           int
	BusiestMinGPUs int
	// OfferedLoad is the offered load the sample is drawn to: the GPU time its
	// jobs ask for within the horizon over the fixed cluster's.
	OfferedLoad float64
	Window      time.Duration
	Start       string
	Seed        int64
	// FractionShare is the share of the Philly extract's 1-GPU jobs that
	// become fractional requests.
	FractionShare float64
	// Compression is trace seconds per wall-clock second; Drain how long
	// past the last arrival the run is measured (trace time; 0: a
	// quarter of the window).
	Compression float64
	Drain       time.Duration
	Nodes       int
	MinNodes    int
	MaxNodes    int
	GPUsPerNode int
	MPSGPUs     int
	MPSShares   int
	// LayoutShares is Cluster.LayoutShares; LayoutMinInterval
	// Policy.LayoutMinInterval, wall clock.
	LayoutShares      int
	LayoutMinInterval time.Duration
	// Configs lists the configurations compared, by name (ConfigNames);
	// Strategy is the autoscaling strategy of +autoscale and nomad-gpu.
	Configs  string
	Strategy string
	// PriceReserved, PriceOnDemand and PriceSpot price a node-hour.
	PriceReserved, PriceOnDemand, PriceSpot float64
	// SpotReclaimRate is Cluster.SpotReclaimRate: reclaims per spot
	// node-hour of trace time.
	SpotReclaimRate float64
	// PreemptionCooldown is Policy.PreemptionCooldown (0: no protection
	// of preempted work), wall clock.
	PreemptionCooldown time.Duration
	// Beyond is Policy.Beyond, wall clock: gpu-queue's
	// nodes_needed{beyond=…} (0: off).
	Beyond time.Duration
	// MultiNode is how jobs bigger than a node are replayed:
	// MultiNodeGang or MultiNodeClip (Cluster.FitJobs).
	MultiNode string
	// Teams are the team queues of configurations with Queues
	// (ParseTeams: "team=weight,…").
	Teams string
}

// TracePath is the file the trace is read from.
func (p Params) TracePath() string {
	switch {
	case p.CSV != "":
		return p.CSV
	case p.History != "":
		return p.History
	case p.Philly != "":
		return p.Philly
	}
	return traces.PhillyName
}

// DefaultConfigs is the baseline, each part on its own, all of them, and
// the references a fair comparison needs: stock Nomad's preemption, the
// built-in target-value strategy, and a fixed cluster as large (in
// node-hours) as the autoscaled one.
const DefaultConfigs = "baseline,+slices,+layouts,+preemption,+autoscale,nomad-gpu,nomad-gpu-fixed,stock-preemption,target-value,fixed-like-autoscale"

// Register adds the flags to fs, with their defaults.
func (p *Params) Register(fs *flag.FlagSet) {
	fs.StringVar(&p.CSV, "trace", "", "trace in the replay CSV format (docs/trace-replay.md); default: the Philly extract of -philly")
	fs.StringVar(&p.History, "history", "", "a copy of the controller's right-sizing history file (its -history): the jobs are the work it recorded, for the purchase question on your own cluster's record (docs/trace-replay.md); pair it with -window 0 -load 0 to replay all of it")
	fs.DurationVar(&p.HistorySince, "history-since", 7*24*time.Hour, "with -history: the record read, back from now")
	fs.IntVar(&p.HistoryShares, "history-shares", gpulayout.DefaultShares, "with -history: the MPS shares of a GPU on the recorded cluster (a run of k shares asks for k/this of a GPU)")
	fs.StringVar(&p.Philly, "philly", "", "a Philly extract (philly.csv, plain or gzip) to convert when no -trace is given; default: the copy in traces/philly.csv.gz")
	fs.IntVar(&p.Jobs, "jobs", 0, "jobs sampled from the window (0: as many as -load asks)")
	fs.Float64Var(&p.OfferedLoad, "load", 0.85, "offered load the sample is drawn to, with -jobs 0: GPU time asked within the horizon over the fixed cluster's (0: every job of the window; above 1: overloaded)")
	fs.DurationVar(&p.Window, "window", 2*time.Hour, "trace window the sample is drawn from (0: the whole trace)")
	fs.StringVar(&p.Start, "start", "", `window start, "2006-01-02 15:04:05" UTC (default: the busiest window)`)
	fs.IntVar(&p.BusiestMinGPUs, "busiest-min-gpus", 0, "with no -start, the busiest window counts only the arrivals of jobs asking for at least this many GPUs (0: every job): a sample with multi-GPU work")
	fs.Int64Var(&p.Seed, "seed", 1, "seed of the sample and of the derived priorities, fractions and utilisations")
	fs.Float64Var(&p.FractionShare, "fraction-share", 0.3, "share of the Philly extract's 1-GPU jobs that ask for part of a GPU")
	fs.Float64Var(&p.Compression, "compression", 25, "trace seconds per wall-clock second")
	fs.DurationVar(&p.Drain, "drain", 0, "how long past the last arrival the run is measured, trace time (0: a quarter of the window)")
	fs.IntVar(&p.Nodes, "nodes", 4, "nodes of a fixed cluster, and the autoscaled pool's start")
	fs.IntVar(&p.MinNodes, "min-nodes", 2, "autoscaled pool's minimum")
	fs.IntVar(&p.MaxNodes, "max-nodes", 6, "autoscaled pool's maximum")
	fs.IntVar(&p.GPUsPerNode, "gpus-per-node", 8, "GPUs per node (the real engine's sim nodes have 8)")
	fs.IntVar(&p.MPSGPUs, "mps-gpus", 2, "GPUs per node offered as MPS shares when slices are on")
	fs.IntVar(&p.MPSShares, "mps-shares", 4, "MPS shares per MPS GPU")
	fs.IntVar(&p.LayoutShares, "layout-shares", gpulayout.DefaultShares, "MPS shares of a GPU relaid for fractional work, with layouts (2 to 48)")
	fs.DurationVar(&p.LayoutMinInterval, "layout-min-interval", DefaultPolicy().LayoutMinInterval, "least time between two layout changes of one GPU, wall clock, unless no other GPU can serve the queue")
	fs.StringVar(&p.Configs, "configs", DefaultConfigs, "configurations compared: "+strings.Join(ConfigNames, ", "))
	fs.StringVar(&p.Strategy, "strategy", AutoscaleGPUQueue, "strategy of +autoscale and nomad-gpu: gpu-queue or target-value")
	// An 8-GPU H100 node's public list prices (on demand; a 1-year
	// reservation) give the figures a realistic ratio; set your own.
	fs.Float64Var(&p.PriceReserved, "price-reserved", 55, "price of a reserved node-hour (the fixed part of the cluster)")
	fs.Float64Var(&p.PriceOnDemand, "price-ondemand", 98, "price of an on-demand node-hour (autoscaled nodes above the minimum)")
	// AWS's spot GPU instances are typically 60–70 % below their
	// on-demand price: about 0.3× -price-ondemand's default.
	fs.Float64Var(&p.PriceSpot, "price-spot", 30, "price of a spot node-hour (nomad-gpu-spot's burst nodes); default about 0.3× -price-ondemand's, spot GPU instances being typically 60–70 % below on demand on AWS")
	fs.Float64Var(&p.SpotReclaimRate, "spot-reclaim-rate", 0.05, "reclaims per spot node-hour of trace time (nomad-gpu-spot): each spot node is taken back after an exponential time of this rate, its work stopped on a 2-minute notice to resume elsewhere; default about one in 20 node-hours, a guess to set from your cloud's record (0: never)")
	fs.StringVar(&p.MultiNode, "multi-node", MultiNodeGang, `jobs bigger than a node: "gang" keeps them whole, as members of at most a node's whole GPUs with slices on several nodes; "clip" asks for one node's (the real engine replays no gang yet)`)
	fs.StringVar(&p.Teams, "teams", "", `team queues of +queues: "team=weight,…", "*" for every other team together (Philly's virtual clusters); each queue's nominal quota is its weight's share of the fixed cluster, in whole nodes`)
	fs.DurationVar(&p.PreemptionCooldown, "preemption-cooldown", DefaultPolicy().PreemptionCooldown, "how long preempted work is protected once its replacement runs, wall clock, with checkpoints (0: never)")
	fs.DurationVar(&p.Beyond, "beyond", DefaultPolicy().Beyond, "gpu-queue's nodes_needed{beyond=…}, wall clock: queued work the runtime forecast places on the pool within it needs no new node (0: off; 1s or more; docs/autoscaling.md advises the larger of the boot time and the wait promised)")
}

// ConfigNames are the configurations Params.Configs may list.
var ConfigNames = []string{"baseline", "+slices", "+layouts", "+preemption", "+autoscale", "+gangs", "nomad-gpu", "nomad-gpu-fixed", "nomad-gpu-reservations", "nomad-gpu-fixed-reservations", "+queues", "alone", "nomad-gpu-no-moves", "nomad-gpu-fixed-no-moves", "nomad-gpu-no-scale-in", "nomad-gpu-spot", "stock-preemption", "target-value", "fixed-like-autoscale"}

// aloneEach is ParseConfigs' Config.Alone for "alone", until Load knows
// the queues: one configuration a queue.
const aloneEach = "*"

// ParseConfigs turns a comma-separated list of ConfigNames into
// configurations, autoscaling with strategy where they autoscale.
func ParseConfigs(list, strategy string) ([]Config, error) {
	var out []Config
	seen := map[string]bool{}
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		var f Features
		cfg := Config{}
		kind, sized, err := configSize(name)
		if err != nil {
			return nil, err
		}
		switch kind {
		case "baseline":
		case "+slices":
			f.Slices = true
		case "+layouts":
			f.Layouts = true
		case "+preemption":
			f.Preemption, f.Checkpoints = true, true
		case "+autoscale":
			f.Autoscale = strategy
		case "+gangs":
			f.Gangs = true
		case "nomad-gpu":
			// With gpu-queue, scale-in by consolidation, as
			// docs/autoscaling.md tells an autoscaled pool of movable work
			// (target-value has no removable check).
			f = Features{Layouts: true, Preemption: true, Checkpoints: true, Moves: true, Gangs: true, Autoscale: strategy,
				ScaleIn: strategy == AutoscaleGPUQueue}
		case "nomad-gpu-fixed":
			// nomad-gpu at the baseline's node count: what it does with
			// the nodes a platform team already has.
			f = Features{Layouts: true, Preemption: true, Checkpoints: true, Moves: true, Gangs: true}
		case "nomad-gpu-reservations":
			// nomad-gpu with the controller's reservations (-reservations,
			// off by default): what keeping nodes for big work adds.
			f = Features{Layouts: true, Preemption: true, Checkpoints: true, Moves: true, Gangs: true, Reservations: true, Autoscale: strategy}
		case "nomad-gpu-fixed-reservations":
			f = Features{Layouts: true, Preemption: true, Checkpoints: true, Moves: true, Gangs: true, Reservations: true}
		case "+queues":
			// +preemption with the team queues (-teams): what quotas and
			// fair share do for teams, against +preemption's one line.
			f.Preemption, f.Checkpoints, f.Queues = true, true, true
		case "nomad-gpu-no-moves":
			// nomad-gpu without consolidation: what moving checkpointed
			// work adds.
			f = Features{Layouts: true, Preemption: true, Checkpoints: true, Gangs: true, Autoscale: strategy}
		case "nomad-gpu-fixed-no-moves":
			f = Features{Layouts: true, Preemption: true, Checkpoints: true, Gangs: true}
		case "nomad-gpu-no-scale-in":
			// nomad-gpu without scale-in by consolidation: the pool
			// shrinks by idle nodes only, as before the controller
			// emptied them.
			f = Features{Layouts: true, Preemption: true, Checkpoints: true, Moves: true, Gangs: true, Autoscale: strategy}
		case "nomad-gpu-spot":
			// nomad-gpu whose burst nodes are spot nodes, which only
			// checkpointing work enters (docs/spot.md): what spot
			// capacity saves, and what its reclaims cost.
			f = Features{Layouts: true, Preemption: true, Checkpoints: true, Moves: true, Gangs: true, Autoscale: strategy,
				ScaleIn: strategy == AutoscaleGPUQueue, Spot: true}
		case "alone":
			// +preemption with each team queue's jobs alone on its
			// nominal (Load makes one configuration a queue): the
			// yardstick of +queues' waits, run by the engine itself.
			f.Preemption, f.Checkpoints = true, true
			cfg.Alone = aloneEach
		case "stock-preemption":
			f.Preemption, cfg.Reference = true, true
		case "target-value":
			f.Autoscale, cfg.Reference = AutoscaleTargetValue, true
		case "fixed-like-autoscale":
			// +autoscale's name as the loop gives it below.
			cfg.NodesLike, cfg.Reference = "+autoscale", true
			if strategy == AutoscaleTargetValue {
				cfg.NodesLike += " (target-value)"
			}
			if !seen["+autoscale"] {
				return nil, fmt.Errorf("configs: %q needs +autoscale listed before it (it runs as many node-hours)", name)
			}
		default:
			return nil, fmt.Errorf("configs: %q is not a configuration; allowed: %s", name, strings.Join(ConfigNames, ", "))
		}
		if sized > 0 {
			if f.Autoscale != "" || cfg.NodesLike != "" || cfg.Alone != "" {
				return nil, fmt.Errorf("configs: %q: a node count for %s; allowed: @N on a fixed configuration (an autoscaled one runs -min-nodes to -max-nodes)", name, kind)
			}
			cfg.Nodes = sized
		}
		if seen[name] {
			return nil, fmt.Errorf("configs: %q is listed twice", name)
		}
		seen[name] = true
		if err := f.Validate(); err != nil {
			return nil, fmt.Errorf("strategy: %w", err)
		}
		if strategy == AutoscaleTargetValue && f.Autoscale != "" && !cfg.Reference {
			name += " (target-value)"
		}
		cfg.Name, cfg.Features = name, f
		out = append(out, cfg)
	}
	return out, nil
}

// configSize splits a configuration's name into its kind and the node
// count it asks for with "@N" (0 when none): "nomad-gpu-fixed@3" is
// nomad-gpu-fixed on 3 nodes, beside the others' -nodes, so one run
// compares the baseline on its cluster with nomad-gpu on a smaller one.
func configSize(name string) (kind string, nodes int, err error) {
	kind, size, sized := strings.Cut(name, "@")
	if !sized {
		return name, 0, nil
	}
	n, err := strconv.Atoi(size)
	if err != nil || n < 1 {
		return "", 0, fmt.Errorf("configs: %q: node count %q; allowed: a configuration, or a fixed one with @N, N ≥ 1 nodes (nomad-gpu-fixed@3)", name, size)
	}
	return kind, n, nil
}

// WithBeyond names the configurations that beyond (Policy.Beyond)
// applies to, those autoscaled by gpu-queue, after it ("+autoscale
// (beyond 8s)"), and the configurations matching their node-hours after
// the new names; with beyond 0 it returns configs as they are.
func WithBeyond(configs []Config, beyond time.Duration) []Config {
	if beyond <= 0 {
		return configs
	}
	renamed := map[string]string{}
	out := slices.Clone(configs)
	for i, c := range out {
		if c.Autoscale == AutoscaleGPUQueue {
			out[i].Name = fmt.Sprintf("%s (beyond %s)", c.Name, beyond)
			renamed[c.Name] = out[i].Name
		}
	}
	for i, c := range out {
		if to, ok := renamed[c.NodesLike]; ok {
			out[i].NodesLike = to
		}
	}
	return out
}

// Setup is what a run replays, on what, and how.
type Setup struct {
	Trace       Trace
	Cluster     Cluster
	Configs     []Config
	Policy      Policy
	Compression float64
	// Horizon is the last arrival plus the drain.
	Horizon time.Duration
	Seed    int64
	// Attribution is the trace's required attribution ("" for a CSV).
	Attribution string
	// Notes say how the trace's jobs were adjusted to the cluster.
	Notes []string
	// Prices price the node-hours.
	PriceReserved, PriceOnDemand, PriceSpot float64
}

// ErrNoJobs is Load's error for a selection that holds no job.
var ErrNoJobs = errors.New("jobs: the selection holds no job")

// Load reads and samples the trace and checks every setting, naming the
// flag of one that is wrong.
func (p Params) Load() (Setup, error) {
	s := Setup{Policy: DefaultPolicy(), Compression: p.Compression, Seed: p.Seed}
	if p.Compression <= 0 {
		return s, fmt.Errorf("compression: %v; allowed: a number above 0", p.Compression)
	}
	if p.Jobs < 0 {
		return s, fmt.Errorf("jobs: %d; allowed: 0 (by -load) or more", p.Jobs)
	}
	if p.OfferedLoad < 0 {
		return s, fmt.Errorf("load: %v; allowed: 0 (all jobs of the window) or above", p.OfferedLoad)
	}
	if p.PriceReserved < 0 || p.PriceOnDemand < 0 {
		return s, fmt.Errorf("price-reserved, price-ondemand: %v, %v; allowed: 0 or more", p.PriceReserved, p.PriceOnDemand)
	}
	if !(p.PriceSpot >= 0) || math.IsInf(p.PriceSpot, 0) {
		return s, fmt.Errorf("price-spot: %v; allowed: 0 or more", p.PriceSpot)
	}
	if !(p.SpotReclaimRate >= 0) || math.IsInf(p.SpotReclaimRate, 0) {
		return s, fmt.Errorf("spot-reclaim-rate: %v; allowed: 0 (never) or more reclaims per spot node-hour", p.SpotReclaimRate)
	}
	s.PriceReserved, s.PriceOnDemand, s.PriceSpot = p.PriceReserved, p.PriceOnDemand, p.PriceSpot
	if p.PreemptionCooldown < 0 {
		return s, fmt.Errorf("preemption-cooldown: %s; allowed: 0 (off) or more", p.PreemptionCooldown)
	}
	s.Policy.PreemptionCooldown = p.PreemptionCooldown
	if p.LayoutMinInterval < 0 {
		return s, fmt.Errorf("layout-min-interval: %s; allowed: 0 or more", p.LayoutMinInterval)
	}
	s.Policy.LayoutMinInterval = p.LayoutMinInterval
	if p.Beyond != 0 && p.Beyond < time.Second {
		return s, fmt.Errorf("beyond: %s; allowed: 0 (off) or 1s or more (the APM's least)", p.Beyond)
	}
	s.Policy.Beyond = p.Beyond
	s.Cluster = Cluster{
		Nodes: p.Nodes, MinNodes: p.MinNodes, MaxNodes: p.MaxNodes, GPUsPerNode: p.GPUsPerNode,
		MPSGPUs: p.MPSGPUs, MPSShares: p.MPSShares, LayoutShares: p.LayoutShares,
	}
	if err := s.Cluster.Validate(); err != nil {
		return s, err
	}
	configs, err := ParseConfigs(p.Configs, p.Strategy)
	if err != nil {
		return s, err
	}
	s.Configs = WithBeyond(configs, p.Beyond)
	if slices.ContainsFunc(configs, func(c Config) bool { return c.Spot }) {
		// Only where spot nodes run: the other configurations' records
		// stay as they were.
		s.Cluster.SpotReclaimRate = p.SpotReclaimRate
	}
	if s.Cluster.Teams, err = ParseTeams(p.Teams); err != nil {
		return s, err
	}
	queued := slices.ContainsFunc(configs, func(c Config) bool { return c.Queues || c.Alone != "" })
	switch {
	case queued && len(s.Cluster.Teams) == 0:
		return s, fmt.Errorf("teams: none, with a configuration of queues or alone; allowed: -teams \"team=weight,…\"")
	case queued:
		if err := s.Cluster.validateTeams(s.Cluster.Nodes); err != nil {
			return s, err
		}
	}
	if i := slices.IndexFunc(s.Configs, func(c Config) bool { return c.Alone == aloneEach }); i >= 0 {
		if len(s.Configs) == 1 {
			return s, fmt.Errorf("configs: \"alone\" with no other; allowed: alone beside the configurations whose queue waits it is the yardstick of (+queues, say)")
		}
		s.Configs = slices.Replace(s.Configs, i, i+1, s.Cluster.AloneConfigs(s.Configs[i])...)
	}

	var jobs []Job
	var epoch time.Time
	var notes []string
	source := p.CSV
	switch {
	case p.CSV != "" && p.History != "":
		return s, fmt.Errorf("trace, history: both given; allowed: one of them")
	case p.History != "":
		if p.HistorySince <= 0 {
			return s, fmt.Errorf("history-since: %s; allowed: above 0", p.HistorySince)
		}
		now := time.Now()
		var st HistoryStats
		jobs, epoch, st, err = ReadHistory(p.History, p.HistorySince, HistoryOptions{Shares: p.HistoryShares, Until: now})
		if err != nil {
			return s, err
		}
		source = filepath.Base(p.History)
		notes = append(notes, st.Note())
	case p.CSV != "":
		f, err := os.Open(p.CSV)
		if err != nil {
			return s, fmt.Errorf("trace: %w", err)
		}
		defer f.Close()
		t, err := ReadCSV(f)
		if err != nil {
			return s, fmt.Errorf("trace %s: %w", p.CSV, err)
		}
		jobs = t.Jobs
	default:
		f, name, err := OpenPhilly(p.Philly)
		if err != nil {
			return s, fmt.Errorf("philly: %w", err)
		}
		defer f.Close()
		share := p.FractionShare
		if share == 0 {
			share = -1 // PhillyOptions' "none"; its 0 is the default
		}
		jobs, epoch, _, err = ReadPhilly(f, PhillyOptions{Seed: p.Seed, FractionShare: share})
		if err != nil {
			return s, fmt.Errorf("philly %s: %w", name, err)
		}
		source = name
		s.Attribution = PhillyAttribution
	}
	t, err := Select(jobs, epoch, Selection{Window: p.Window, Start: p.Start, Busiest: p.Start == "", BusiestMinGPUs: p.BusiestMinGPUs, Sample: p.Jobs, Seed: p.Seed}, source)
	if err != nil {
		return s, err
	}
	drain := p.Drain
	if drain == 0 {
		drain = max(p.Window, t.Span()) / 4
	}
	horizon := max(p.Window, t.Span()) + drain
	capacity := float64(s.Cluster.Nodes*s.Cluster.GPUsPerNode) * horizon.Seconds()
	offered := func(jobs []Job) float64 {
		var sum float64
		for _, j := range jobs {
			sum += Offered(j, horizon)
		}
		return sum / capacity
	}
	if p.Jobs == 0 && p.OfferedLoad > 0 {
		t.Jobs = SampleLoad(t.Jobs, p.OfferedLoad, capacity, horizon, p.Seed)
		t.Source += fmt.Sprintf(", %d drawn with seed %d to an offered load of %.2f (target %.2f) of %d nodes", len(t.Jobs), p.Seed, offered(t.Jobs), p.OfferedLoad, s.Cluster.Nodes)
	}
	if len(t.Jobs) == 0 {
		return s, ErrNoJobs
	}
	drawn := len(t.Jobs)
	if t.Jobs, s.Notes, err = s.Cluster.FitJobs(t.Jobs, p.MultiNode); err != nil {
		return s, err
	}
	s.Notes = append(notes, s.Notes...)
	if len(t.Jobs) < drawn && p.Jobs == 0 && p.OfferedLoad > 0 {
		s.Notes = append(s.Notes, fmt.Sprintf("the sample's offered load without the jobs left out: %.2f", offered(t.Jobs)))
	}
	if len(t.Jobs) == 0 {
		return s, ErrNoJobs
	}
	s.Trace = t
	s.Horizon = t.Span() + drain
	return s, nil
}
