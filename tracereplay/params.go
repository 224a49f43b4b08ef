package tracereplay

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/nomad-gpu/nomad-gpu/traces"
)

// Params are a replay run's settings, as flags: `nomad-gpu bench-trace`
// takes them on its command line, and `make bench-trace` passes them to
// the real-engine run in BENCH_TRACE_FLAGS, so both read one set.
type Params struct {
	// CSV is a trace in this package's CSV format; Philly a Philly
	// extract, used when CSV is empty (empty too: the embedded copy).
	CSV, Philly string
	// Jobs is the sample size; Window, Start (empty: the busiest window)
	// and Seed pick it.
	Jobs   int
	Window time.Duration
	Start  string
	Seed   int64
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
	// Configs lists the configurations compared, by name (ConfigNames);
	// Strategy is the autoscaling strategy of those that autoscale.
	Configs  string
	Strategy string
}

// TracePath is the file the trace is read from.
func (p Params) TracePath() string {
	switch {
	case p.CSV != "":
		return p.CSV
	case p.Philly != "":
		return p.Philly
	}
	return traces.PhillyName
}

// DefaultConfigs is the baseline, each part on its own, and all of them.
const DefaultConfigs = "baseline,+slices,+preemption,+autoscale,nomad-gpu"

// Register adds the flags to fs, with their defaults.
func (p *Params) Register(fs *flag.FlagSet) {
	fs.StringVar(&p.CSV, "trace", "", "trace in the replay CSV format (docs/trace-replay.md); default: the Philly extract of -philly")
	fs.StringVar(&p.Philly, "philly", "", "a Philly extract (philly.csv, plain or gzip) to convert when no -trace is given; default: the copy in traces/philly.csv.gz")
	fs.IntVar(&p.Jobs, "jobs", 300, "jobs sampled from the window (0: all)")
	fs.DurationVar(&p.Window, "window", 6*time.Hour, "trace window the sample is drawn from (0: the whole trace)")
	fs.StringVar(&p.Start, "start", "", `window start, "2006-01-02 15:04:05" UTC (default: the busiest window)`)
	fs.Int64Var(&p.Seed, "seed", 1, "seed of the sample and of the derived priorities, fractions and utilisations")
	fs.Float64Var(&p.FractionShare, "fraction-share", 0.3, "share of the Philly extract's 1-GPU jobs that ask for part of a GPU")
	fs.Float64Var(&p.Compression, "compression", 360, "trace seconds per wall-clock second")
	fs.DurationVar(&p.Drain, "drain", 0, "how long past the last arrival the run is measured, trace time (0: a quarter of the window)")
	fs.IntVar(&p.Nodes, "nodes", 4, "nodes of a fixed cluster, and the autoscaled pool's start")
	fs.IntVar(&p.MinNodes, "min-nodes", 2, "autoscaled pool's minimum")
	fs.IntVar(&p.MaxNodes, "max-nodes", 6, "autoscaled pool's maximum")
	fs.IntVar(&p.GPUsPerNode, "gpus-per-node", 8, "GPUs per node (the real engine's sim nodes have 8)")
	fs.IntVar(&p.MPSGPUs, "mps-gpus", 2, "GPUs per node offered as MPS shares when slices are on")
	fs.IntVar(&p.MPSShares, "mps-shares", 4, "MPS shares per MPS GPU")
	fs.StringVar(&p.Configs, "configs", DefaultConfigs, "configurations compared: "+strings.Join(ConfigNames, ", "))
	fs.StringVar(&p.Strategy, "strategy", AutoscaleGPUQueue, "strategy of the autoscaled configurations: gpu-queue or target-value")
}

// ConfigNames are the configurations Params.Configs may list.
var ConfigNames = []string{"baseline", "+slices", "+preemption", "+autoscale", "nomad-gpu"}

// ParseConfigs turns a comma-separated list of ConfigNames into
// configurations, autoscaling with strategy where they autoscale.
func ParseConfigs(list, strategy string) ([]Config, error) {
	var out []Config
	seen := map[string]bool{}
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		var f Features
		switch name {
		case "baseline":
		case "+slices":
			f.Slices = true
		case "+preemption":
			f.Preemption = true
		case "+autoscale":
			f.Autoscale = strategy
		case "nomad-gpu":
			f = Features{Slices: true, Preemption: true, Autoscale: strategy}
		default:
			return nil, fmt.Errorf("configs: %q is not a configuration; allowed: %s", name, strings.Join(ConfigNames, ", "))
		}
		if seen[name] {
			return nil, fmt.Errorf("configs: %q is listed twice", name)
		}
		seen[name] = true
		if err := f.Validate(); err != nil {
			return nil, fmt.Errorf("strategy: %w", err)
		}
		if strategy == AutoscaleTargetValue && f.Autoscale != "" {
			name += " (target-value)"
		}
		out = append(out, Config{Name: name, Features: f})
	}
	return out, nil
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
}

// Load reads and samples the trace and checks every setting, naming the
// flag of one that is wrong.
func (p Params) Load() (Setup, error) {
	s := Setup{Policy: DefaultPolicy(), Compression: p.Compression, Seed: p.Seed}
	if p.Compression <= 0 {
		return s, fmt.Errorf("compression: %v; allowed: a number above 0", p.Compression)
	}
	if p.Jobs < 0 {
		return s, fmt.Errorf("jobs: %d; allowed: 0 (all) or more", p.Jobs)
	}
	s.Cluster = Cluster{
		Nodes: p.Nodes, MinNodes: p.MinNodes, MaxNodes: p.MaxNodes, GPUsPerNode: p.GPUsPerNode,
		MPSGPUs: p.MPSGPUs, MPSShares: p.MPSShares,
	}
	if err := s.Cluster.Validate(); err != nil {
		return s, err
	}
	configs, err := ParseConfigs(p.Configs, p.Strategy)
	if err != nil {
		return s, err
	}
	s.Configs = configs

	var jobs []Job
	var epoch time.Time
	source := p.CSV
	if p.CSV != "" {
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
	} else {
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
	t, err := Select(jobs, epoch, Selection{Window: p.Window, Start: p.Start, Busiest: p.Start == "", Sample: p.Jobs, Seed: p.Seed}, source)
	if err != nil {
		return s, err
	}
	if len(t.Jobs) == 0 {
		return s, fmt.Errorf("jobs: the selection holds no job")
	}
	s.Trace = t
	drain := p.Drain
	if drain == 0 {
		drain = max(p.Window, t.Span()) / 4
	}
	s.Horizon = t.Span() + drain
	return s, nil
}
