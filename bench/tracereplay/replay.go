// Package tracereplay replays a GPU job trace on a cluster and measures
// what the cluster made of it: how full it was, how long jobs waited, how
// fragmented its free GPUs were, what preemption cost and how many
// node-minutes it used. `make bench-trace` replays a trace on a real Nomad
// cluster with sim GPUs (the e2e harness, engine "nomad") and on the
// discrete-event model of package model (engine "model"), for each
// configuration compared, and package report turns the Results into a
// Markdown report with plots.
//
// All times here are trace time: the trace's own seconds, whatever the
// compression a real replay ran at. A real engine converts its wall-clock
// measurements back by multiplying them by the compression factor.
package tracereplay

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/contract/gpulayout"
)

// Job is one job of a trace.
type Job struct {
	// ID names the job; unique within a trace.
	ID string
	// Arrival is when the job is submitted, from the trace's zero.
	Arrival time.Duration
	// Duration is how long it runs once placed, without interruption.
	Duration time.Duration
	// GPUs is the whole GPUs it asks for (≥ 1); 1 when Fraction < 1.
	GPUs int
	// Fraction is the share of one GPU it asks for, in (0, 1]; 1 asks
	// for GPUs whole GPUs.
	Fraction float64
	// MemoryMiB is the GPU memory it needs per GPU; 0 when not given.
	MemoryMiB int
	// Priority is its Nomad job priority, 1 to 100; 0 when not given
	// (Nomad's default 50).
	Priority int
	// Util is the GPU utilisation its load runs at, in percent (0, 100];
	// 0 when not given (DefaultUtil).
	Util float64
	// Team is the team that submitted it (Philly's virtual cluster, a
	// CSV's team column); "" when the trace does not say.
	Team string
}

// DefaultPriority and DefaultUtil stand in for a Job's unset fields.
const (
	DefaultPriority = 50
	DefaultUtil     = 80
)

// EffectivePriority is the job's priority, DefaultPriority when unset.
func (j Job) EffectivePriority() int {
	if j.Priority == 0 {
		return DefaultPriority
	}
	return j.Priority
}

// EffectiveUtil is the job's utilisation, DefaultUtil when unset.
func (j Job) EffectiveUtil() float64 {
	if j.Util == 0 {
		return DefaultUtil
	}
	return j.Util
}

// Fractional reports whether the job asks for part of one GPU.
func (j Job) Fractional() bool { return j.Fraction > 0 && j.Fraction < 1 }

// Requested is the GPU-equivalents the job asks for: its fraction of one
// GPU, or its whole GPUs.
func (j Job) Requested() float64 {
	if j.Fractional() {
		return j.Fraction
	}
	return float64(max(1, j.GPUs))
}

// Record is the job's JobRecord before it ran: what it is and asks for.
func (j Job) Record(s Slice) JobRecord {
	return JobRecord{ID: j.ID, Arrival: j.Arrival, Submitted: j.Arrival, Slice: s,
		Requested: j.Requested(), Util: j.EffectiveUtil(), Priority: j.EffectivePriority(), Team: j.Team}
}

// Interrupted says the run was stopped for another's sake, by a
// preemption, a move, a queue's reclaim or its spot node's reclaim, for
// the job to run again: its job waits again, and resumes from what it
// saved.
func (r Run) Interrupted() bool { return r.Preempted || r.Moved || r.Reclaimed || r.SpotReclaimed }

// Preemptions counts the job's runs stopped by a preemption.
func (r JobRecord) Preemptions() int {
	n := 0
	for _, run := range r.Runs {
		if run.Preempted {
			n++
		}
	}
	return n
}

// Trace is a replayable job list, sorted by Arrival.
type Trace struct {
	Jobs []Job
	// Source says where the jobs came from and how they were picked, for
	// the report ("philly.csv: busiest 6h window from 2017-10-04 21:14:49,
	// 300 of 1947 jobs, seed 1").
	Source string
}

// Span is the time from the trace's zero to its last arrival.
func (t Trace) Span() time.Duration {
	if len(t.Jobs) == 0 {
		return 0
	}
	return t.Jobs[len(t.Jobs)-1].Arrival
}

// Features are the parts of nomad-gpu a configuration turns on. The zero
// value is the baseline: whole GPUs only, no preemption, a fixed node
// count (what Nomad with the stock NVIDIA device plugin gives).
type Features struct {
	// Slices sends fractional requests to MPS shares or MIG slices
	// where the node layout has them (Layout.Slice); without it every
	// job takes whole GPUs.
	Slices bool
	// Layouts makes GPU layouts follow the queue: every GPU starts whole,
	// and the controller (layoutplan.Plan) asks a free GPU to become
	// Cluster.LayoutShares MPS shares when fractional work waits, and an
	// unheld MPS GPU to become whole again when whole-GPU work waits.
	// Fractional requests ask for MPS shares. It replaces Slices' static
	// layout, so the two are exclusive.
	Layouts bool
	// Preemption enables Nomad's priority preemption for batch jobs. On
	// its own it is stock Nomad's: a preempted job starts again from
	// scratch.
	Preemption bool
	// Checkpoints, with Preemption, is nomad-gpu's: a checkpoint on every
	// stop (a preempted job resumes from it) and the driver's preemption
	// cooldown.
	Checkpoints bool
	// Moves, with Checkpoints, is the controller's consolidation: when a
	// queued job asks for more whole GPUs than any node has free, the
	// fewest running jobs whose move frees a node are stopped (they
	// resume from their checkpoints elsewhere) and the node is held for
	// the queued job (controller.Mover; the jobs opt in with job meta).
	Moves bool
	// ScaleIn, with Moves and the gpu-queue strategy, is the controller's
	// scale-in by consolidation (-scale-in-pools): once no queued work
	// could use a node for Policy.ScaleInQuiet, the movable work of the
	// least loaded node above the pool's minimum is moved onto the other
	// nodes' free GPUs (consolidate.Empty) and the node, emptied and held,
	// is removed at once by the policy's removable check.
	ScaleIn bool `json:",omitempty"`
	// Autoscale names the strategy that scales the node pool between
	// Cluster.MinNodes and MaxNodes: "gpu-queue" or "target-value"; ""
	// keeps the node count fixed.
	Autoscale string
	// Gangs is the controller's gang admission for jobs bigger than a
	// node (Slice.Members > 1): their members are placed all at once, when
	// Nomad's plan places every one, and stop as one. Without it (stock
	// Nomad) the members are one job's allocations, placed one at a time
	// as GPUs free, each holding its GPUs while the others wait.
	Gangs bool
	// Queues, with Checkpoints, on a fixed cluster with Cluster.Teams, is
	// the controller's team queues (teams.go): every job is held and
	// admitted in weighted fair-share order within its queue's nominal
	// quota, or beyond it on what the other queues lend; a queue whose
	// work within its nominal does not fit takes back the borrowers'
	// newest runs, checkpointed.
	Queues bool
	// Reservations, with Gangs and Preemption (the handover preempts the
	// placeholder), is the controller's reservation for the head of the
	// queue among gangs and jobs asking 2 or more whole GPUs:
	// the nodes predicted to free soonest are kept for it by a
	// placeholder that takes their GPUs as they free, and handed over
	// when it holds them all.
	Reservations bool
	// Spot, with Checkpoints and the gpu-queue strategy, makes the
	// autoscaled pool's burst nodes spot nodes (docs/spot.md): a node
	// pool of their own that only checkpointing work enters, taken back
	// by the cloud at Cluster.SpotReclaimRate, their work stopped on the
	// notice (reclaim-watch) to resume from its checkpoint elsewhere. Work
	// that may not enter (in the replay, jobs bigger than a node) has an
	// on-demand group of its own. The pool's minimum stays reserved.
	Spot bool `json:",omitempty"`
}

// Autoscale strategies a configuration may name.
const (
	AutoscaleNone        = ""
	AutoscaleGPUQueue    = "gpu-queue"
	AutoscaleTargetValue = "target-value"
)

// Validate says what is wrong with f, naming the field.
func (f Features) Validate() error {
	if f.Slices && f.Layouts {
		return fmt.Errorf("slices, layouts: both on; allowed: static slices or layouts that follow the queue, not both")
	}
	if f.Checkpoints && !f.Preemption {
		return fmt.Errorf("checkpoints: on without preemption; allowed: checkpoints only with preemption")
	}
	if f.Moves && !f.Checkpoints {
		return fmt.Errorf("moves: on without checkpoints; allowed: moves only with checkpoints (a moved job resumes from its checkpoint)")
	}
	if f.ScaleIn && (!f.Moves || f.Autoscale != AutoscaleGPUQueue) {
		return fmt.Errorf("scale_in: on without moves or gpu-queue; allowed: scale-in by consolidation only with moves (it moves the work off the node) and gpu-queue autoscaling (its removable check removes the node)")
	}
	if f.Queues && (!f.Checkpoints || f.Autoscale != "") {
		return fmt.Errorf("queues: on without checkpoints, or autoscaled; allowed: queues only with checkpoints (reclaim stops borrowed work checkpointed) on a fixed cluster (the quotas are shares of its GPUs)")
	}
	if f.Spot && (!f.Checkpoints || f.Autoscale != AutoscaleGPUQueue) {
		return fmt.Errorf("spot: on without checkpoints or gpu-queue; allowed: spot nodes only with checkpoints (a reclaimed node's work resumes from its checkpoint) in a pool autoscaled by gpu-queue (its nodes_needed grows the spot group for checkpointing work and the on-demand group for the rest)")
	}
	if f.Reservations && (!f.Gangs || !f.Preemption) {
		return fmt.Errorf("reservations: on without gangs or preemption; allowed: reservations only with both (the controller keeps nodes for a gang it admits, and hands them over by preempting its placeholder: Nomad's batch preemption must be on)")
	}
	switch f.Autoscale {
	case AutoscaleNone, AutoscaleGPUQueue, AutoscaleTargetValue:
		return nil
	}
	return fmt.Errorf("autoscale: %q is not a strategy; allowed: %q, %q or none", f.Autoscale, AutoscaleGPUQueue, AutoscaleTargetValue)
}

// Config is one configuration compared in a run.
type Config struct {
	// Name is how the report calls it ("baseline", "nomad-gpu",
	// "+slices").
	Name string
	Features
	// Reference marks a configuration that is a yardstick rather than a
	// part of nomad-gpu: stock preemption, the built-in target-value
	// strategy, a fixed cluster as large as an autoscaled one.
	Reference bool
	// NodesLike names the autoscaled configuration whose node-hours this
	// fixed cluster matches (FixedNodes); its Result must come first.
	// "" runs Cluster.Nodes.
	NodesLike string
	// Nodes is the node count of a fixed configuration, set once known:
	// Cluster.Nodes, or the match for NodesLike.
	Nodes int
	// Alone names the team queue whose jobs alone it runs, without
	// queues, on the queue's nominal quota in nodes (Cluster.AloneConfigs):
	// the yardstick a queue's wait with the queues is held to, run by an
	// engine as any configuration. "" runs every job.
	Alone string
}

// StartNodes is the nodes the configuration starts with: a fixed
// cluster's (Nodes, else Cluster.Nodes), or an autoscaled pool's
// Cluster.Nodes within [MinNodes, MaxNodes].
func (c Config) StartNodes(cl Cluster) int {
	switch {
	case c.Autoscale != "":
		return min(max(cl.Nodes, cl.MinNodes), cl.MaxNodes)
	case c.Nodes > 0:
		return c.Nodes
	}
	return cl.Nodes
}

// RealEngine says why the real engine (make bench-trace) does not run the
// configuration, naming it; nil where it does.
func (c Config) RealEngine() error {
	if c.Spot {
		return fmt.Errorf("config %q: not run on real Nomad yet: spot nodes and their reclaims are modelled only (bench-trace); allowed on the real engine: the configurations without spot", c.Name)
	}
	return nil
}

// ReservedNodes is the part of the cluster paid for whether used or not:
// a fixed cluster's nodes, an autoscaled pool's minimum.
func (c Config) ReservedNodes(cl Cluster) int {
	if c.Autoscale != "" {
		return cl.MinNodes
	}
	return c.StartNodes(cl)
}

// StepIntegral is the step integral of v over the timeline within
// [0, horizon], in v × seconds: each sample holds until the next (the
// last until horizon), and the first also stands for the time before it.
// Engines sample the cluster when it changes, so a trapezoid would invent
// ramps between samples.
func StepIntegral(tl []Sample, horizon time.Duration, v func(Sample) float64) float64 {
	var sum float64
	for i, s := range tl {
		if s.At >= horizon {
			break
		}
		from := s.At
		if i == 0 {
			from = 0
		}
		to := horizon
		if i+1 < len(tl) {
			to = min(tl[i+1].At, horizon)
		}
		if to > from {
			sum += v(s) * (to - from).Seconds()
		}
	}
	return sum
}

// NodeHours is ∫ nodes up dt over [0, Horizon], in hours.
func (r Result) NodeHours() float64 {
	return StepIntegral(r.Timeline, r.Horizon, func(s Sample) float64 { return float64(s.Nodes) }) / 3600
}

// Resolve fixes cfg's node count: a NodesLike configuration runs the
// fixed count closest to the node-hours of that configuration's result in
// done (run before it).
func Resolve(cfg Config, done []Result) (Config, error) {
	if cfg.NodesLike == "" {
		return cfg, nil
	}
	for _, r := range done {
		if r.Config.Name == cfg.NodesLike {
			cfg.Nodes = FixedNodes(r, r.NodeHours())
			return cfg, nil
		}
	}
	return cfg, fmt.Errorf("config %q: no result of %q to match the node-hours of (it must run first and succeed)", cfg.Name, cfg.NodesLike)
}

// FixedNodes is the fixed node count whose node-hours over the horizon
// come closest to an autoscaled run's (at least 1).
func FixedNodes(autoscaled Result, nodeHours float64) int {
	h := autoscaled.Horizon.Hours()
	if h <= 0 {
		return 1
	}
	return max(1, int(math.Round(nodeHours/h)))
}

// Cluster is the cluster's shape, the same for every configuration of a
// run.
type Cluster struct {
	// Nodes is the node count of a fixed cluster and the count an
	// autoscaled pool starts with.
	Nodes int
	// MinNodes and MaxNodes bound an autoscaled pool.
	MinNodes, MaxNodes int
	// GPUsPerNode is each node's physical GPUs.
	GPUsPerNode int
	// MPSGPUs of each node's GPUs are offered as MPSShares MPS shares
	// each when a configuration has Slices (whole GPUs otherwise).
	MPSGPUs, MPSShares int
	// MIGGPUs further GPUs of each node are in MIG mode with the
	// instances MIGProfiles when a configuration has Slices.
	MIGGPUs     int
	MIGProfiles []string
	// LayoutShares is the MPS shares of a GPU relaid for fractional work
	// when a configuration has Layouts (gpulayout's PoolBounds.Shares);
	// 0 means gpulayout.DefaultShares.
	LayoutShares int
	// Teams are the team queues of a configuration with Queues (teams.go);
	// none: no queues.
	Teams []TeamWeight `json:",omitempty"`
	// SpotReclaimRate is how often the cloud takes a spot node back
	// (Features.Spot), in reclaims per spot node-hour of trace time: the
	// cluster's own time, which the trace stands for (not scaled by the
	// compression, unlike the wall-clock latencies and policy times);
	// 0: never.
	SpotReclaimRate float64 `json:",omitempty"`
}

// Shares is the share count of a GPU relaid as MPS shares under
// Layouts: LayoutShares, or gpulayout.DefaultShares when it is 0.
func (c Cluster) Shares() int {
	if c.LayoutShares == 0 {
		return gpulayout.DefaultShares
	}
	return c.LayoutShares
}

// Validate says what is wrong with c, naming the field.
func (c Cluster) Validate() error {
	switch {
	case c.GPUsPerNode < 1:
		return fmt.Errorf("gpus_per_node: %d; allowed: 1 or more", c.GPUsPerNode)
	case c.Nodes < 0:
		return fmt.Errorf("nodes: %d; allowed: 0 or more", c.Nodes)
	case c.MinNodes < 0 || c.MinNodes > c.MaxNodes:
		return fmt.Errorf("min_nodes, max_nodes: %d, %d; allowed: 0 ≤ min ≤ max", c.MinNodes, c.MaxNodes)
	case c.MPSGPUs < 0 || c.MIGGPUs < 0 || c.MPSGPUs+c.MIGGPUs > c.GPUsPerNode:
		return fmt.Errorf("mps_gpus, mig_gpus: %d, %d; allowed: 0 or more, together at most gpus_per_node (%d)", c.MPSGPUs, c.MIGGPUs, c.GPUsPerNode)
	case c.MPSGPUs > 0 && (c.MPSShares < 2 || c.MPSShares > 48):
		return fmt.Errorf("mps_shares: %d; allowed: 2 to 48", c.MPSShares)
	case c.LayoutShares != 0 && (c.LayoutShares < 2 || c.LayoutShares > gpulayout.MaxShares):
		return fmt.Errorf("layout_shares: %d; allowed: 2 to %d (0: %d)", c.LayoutShares, gpulayout.MaxShares, gpulayout.DefaultShares)
	case c.SpotReclaimRate < 0 || math.IsNaN(c.SpotReclaimRate) || math.IsInf(c.SpotReclaimRate, 0):
		return fmt.Errorf("spot_reclaim_rate: %v; allowed: 0 (never) or more reclaims per spot node-hour", c.SpotReclaimRate)
	case c.MIGGPUs > 0 && len(c.MIGProfiles) == 0:
		return fmt.Errorf("mig_profiles: empty with mig_gpus %d; allowed: profiles such as 3g.40gb, 1g.10gb", c.MIGGPUs)
	}
	sevenths := 0
	for i, p := range c.MIGProfiles {
		g, err := MIGSevenths(p)
		if err != nil {
			return fmt.Errorf("mig_profiles[%d]: %w", i, err)
		}
		sevenths += g
	}
	if c.MIGGPUs > 0 && sevenths > 7 {
		return fmt.Errorf("mig_profiles: %v take %d sevenths of a GPU; allowed: at most 7", c.MIGProfiles, sevenths)
	}
	return nil
}

// MIGSevenths is the compute share of a MIG profile ("3g.40gb") in
// sevenths of a GPU: its leading g count.
func MIGSevenths(profile string) (int, error) {
	var g, mem int
	if _, err := fmt.Sscanf(profile, "%dg.%dgb", &g, &mem); err != nil || g < 1 || g > 7 {
		return 0, fmt.Errorf("%q is not a MIG profile; allowed: <1-7>g.<memory>gb, such as 1g.10gb", profile)
	}
	return g, nil
}

// Slice is what a job runs on.
type Slice struct {
	// Kind is "gpu", "mps" or "mig".
	Kind string
	// Count is the whole GPUs, MPS shares or MIG instances asked.
	Count int
	// Profile is the MIG profile; "" otherwise.
	Profile string
	// GPUs is the GPU-equivalents held: whole GPUs, shares / shares
	// per GPU, or the profile's sevenths / 7; a gang's, all its members'.
	GPUs float64
	// Members are the allocations of Count whole GPUs each of a job
	// bigger than a node (a gang); 0 for a job of one allocation.
	Members int `json:",omitempty"`
}

// Device is the Nomad device name a job asks for this slice with:
// nvidia/gpu, nvidia/mps or nvidia/mig/<profile>.
func (s Slice) Device() string {
	switch s.Kind {
	case "mps":
		return "nvidia/mps"
	case "mig":
		return "nvidia/mig/" + s.Profile
	}
	return "nvidia/gpu"
}

// Slice maps a job's request onto this cluster's layout under a
// configuration: with Slices, a fractional request takes the fewest MPS
// shares that cover its fraction when the nodes offer MPS; else, with MIG,
// the smallest profile whose compute share covers it; else one whole GPU.
// With Layouts, a fractional request takes the fewest of a relaid GPU's
// Shares that cover it (one GPU when that is all of them). A whole-GPU
// request that fits a node asks for its GPUs; a larger one is a gang of
// Members (Cluster.Members), the same in every configuration. Every
// engine maps jobs through here.
func (c Cluster) Slice(j Job, f Features) Slice {
	if f.Layouts && j.Fractional() {
		shares := c.Shares()
		if n := max(1, int(math.Ceil(j.Fraction*float64(shares)-1e-9))); n < shares {
			return Slice{Kind: "mps", Count: n, GPUs: float64(n) / float64(shares)}
		}
	}
	if f.Slices && j.Fractional() {
		if c.MPSGPUs > 0 {
			n := max(1, int(math.Ceil(j.Fraction*float64(c.MPSShares)-1e-9)))
			if n < c.MPSShares {
				return Slice{Kind: "mps", Count: n, GPUs: float64(n) / float64(c.MPSShares)}
			}
		}
		if c.MIGGPUs > 0 {
			best, bestG := "", 8
			for _, p := range c.MIGProfiles {
				g, err := MIGSevenths(p)
				if err == nil && float64(g)/7 >= j.Fraction-1e-9 && g < bestG {
					best, bestG = p, g
				}
			}
			if best != "" {
				return Slice{Kind: "mig", Count: 1, Profile: best, GPUs: float64(bestG) / 7}
			}
		}
	}
	if m, per := c.Members(j); m > 1 {
		return Slice{Kind: "gpu", Count: per, Members: m, GPUs: float64(m * per)}
	}
	n := max(1, min(j.GPUs, c.WholeGPUs(f)))
	return Slice{Kind: "gpu", Count: n, GPUs: float64(n)}
}

// Members splits a whole-GPU ask larger than the whole GPUs a node offers
// with slices (most, so that the split is the same in every
// configuration) into m = ⌈GPUs / most⌉ members of ⌈GPUs / m⌉ GPUs each
// (8 GPUs a node, 2 of them MPS: 12 → 2 × 6, 16 → 3 × 6, 32 → 6 × 6).
// A job that fits a node is one member of its GPUs.
func (c Cluster) Members(j Job) (m, per int) {
	most := c.WholeGPUs(Features{Slices: true})
	if j.Fractional() || most < 1 || j.GPUs <= most {
		return 1, max(1, j.GPUs)
	}
	m = (j.GPUs + most - 1) / most
	return m, (j.GPUs + m - 1) / m
}

// MultiNode ways of replaying jobs bigger than a node.
const (
	// MultiNodeGang keeps them whole: members of a node's GPUs or less
	// (Cluster.Members), run as a gang or as stock Nomad runs them.
	MultiNodeGang = "gang"
	// MultiNodeClip clips them to one node's whole GPUs with slices.
	MultiNodeClip = "clip"
)

// FitJobs makes the jobs the same in every configuration, each able to
// run on the fixed cluster: with MultiNodeGang a job bigger than a node
// is kept whole as members (Members) and one whose members could not all
// fit the fixed cluster's Nodes at once is left out; with MultiNodeClip
// such a job asks for a node's whole GPUs with slices ("" is
// MultiNodeGang). Notes say how many jobs were changed or left out.
func (c Cluster) FitJobs(jobs []Job, multiNode string) ([]Job, []string, error) {
	if multiNode != MultiNodeGang && multiNode != MultiNodeClip && multiNode != "" {
		return nil, nil, fmt.Errorf("multi-node: %q; allowed: %q or %q (\"\": %[2]q)", multiNode, MultiNodeGang, MultiNodeClip)
	}
	most := c.WholeGPUs(Features{Slices: true})
	var out []Job
	gangs, clipped, left := 0, 0, 0
	for _, j := range jobs {
		m, per := c.Members(j)
		switch {
		case m == 1:
		case multiNode == MultiNodeClip:
			j.GPUs = most
			clipped++
		case m > c.Nodes*(most/per):
			left++
			continue
		default:
			gangs++
		}
		out = append(out, j)
	}
	var notes []string
	if gangs > 0 {
		notes = append(notes, fmt.Sprintf("%d jobs ask for more than the %d whole GPUs a node offers with slices; each runs as members of at most %d GPUs on several nodes, in every configuration", gangs, most, most))
	}
	if left > 0 {
		notes = append(notes, fmt.Sprintf("%d jobs bigger than a node need more members than the %d nodes of the fixed cluster hold at once; left out", left, c.Nodes))
	}
	if clipped > 0 {
		notes = append(notes, fmt.Sprintf("%d jobs asked for more than the %d whole GPUs a node offers with slices; they ask for %d in every configuration", clipped, most, most))
	}
	return out, notes, nil
}

// WholeGPUs is the GPUs a node offers whole under f; with Layouts all of
// them, as the planner makes MPS GPUs whole again for whole-GPU work.
func (c Cluster) WholeGPUs(f Features) int {
	if f.Slices {
		return c.GPUsPerNode - c.MPSGPUs - c.MIGGPUs
	}
	return c.GPUsPerNode
}

// Result is what one engine measured for one configuration.
type Result struct {
	// Engine is "nomad" (real agents) or "model".
	Engine string
	// QueueAlone is, for a configuration with Queues, each team queue's
	// mean wait with its jobs alone on a cluster of its nominal quota
	// (Cluster.NominalNodes) in the same configuration less the queues:
	// what quotas promise a team whatever the others do.
	QueueAlone map[string]time.Duration `json:",omitempty"`
	// Version is the Nomad version a real run used, or the model's.
	Version string
	Config  Config
	Cluster Cluster
	// Compression is trace seconds per wall-clock second of a real run;
	// the model runs in trace time and records the compression it was
	// calibrated for (its latencies are wall-clock ones times it).
	Compression float64
	// Horizon is the end of the measured period; figures cover
	// [0, Horizon]. Work not done by then is cut off there.
	Horizon time.Duration
	// Jobs holds one record per trace job, in trace order.
	Jobs []JobRecord
	// Timeline samples the cluster over [0, Horizon], in time order.
	Timeline []Sample
	// Notes are things the engine saw that the figures do not show
	// (jobs clipped to a node's GPUs, placement errors), one line each.
	Notes []string
	// Distortion is what a real run measured of its own faithfulness;
	// nil for the model.
	Distortion *Distortion
	// PlacementsRecorded says the engine filled each JobRecord's
	// PreemptingPlacements; records written before it existed did not.
	PlacementsRecorded bool
	// LayoutChanges are the GPU layout changes applied (Features.Layouts),
	// in time order; LayoutsRecorded says the engine recorded them (records
	// written before they existed did not).
	LayoutChanges   []LayoutChange `json:",omitempty"`
	LayoutsRecorded bool           `json:",omitempty"`
	// MoveLooks counts, in the model with moves, the consolidation rounds
	// that had a waiting multi-GPU job to free a node for, and of them
	// those where the free whole GPUs of the nodes it may use added up to its
	// ask: the only rounds a move can serve (the rest wait for capacity).
	MoveLooks MoveLooks `json:",omitzero"`
	// Reservations counts the reservations made (Features.Reservations),
	// and ReservationIdleGPUHours the GPU-hours their placeholders held:
	// GPUs kept idle for the work they were made for.
	Reservations            int     `json:",omitempty"`
	ReservationIdleGPUHours float64 `json:",omitempty"`
	// SpotNodes name the nodes that were spot nodes (Features.Spot), in
	// the order they started.
	SpotNodes []string `json:",omitempty"`
	// Incomplete is the evidence a real run kept of each interrupted run
	// whose task's log tells neither a commit nor a stop, so that its
	// cause can be named.
	Incomplete []IncompleteRecord `json:",omitempty"`
}

// IncompleteRecord is one interrupted run whose task's log tells neither
// a commit nor a stop: its task's log and events, and the lines of its
// node's agent log (the agent's, the driver's and the supervisor's) that
// name its allocation.
type IncompleteRecord struct {
	Job, Alloc, Node          string
	TaskLog, Events, AgentLog string
	// Checkpoint lists the outcomes the gpu driver's events gave, in
	// order (their contract.EventDetailCheckpoint detail); KilledBy is the
	// signal that ended the task (0: it exited).
	Checkpoint []string `json:",omitempty"`
	KilledBy   int      `json:",omitempty"`
}

// Cause is what the gpu driver's events say became of the record's
// checkpoint, so that a report names it: the driver records every stop's
// outcome, the task's log only what the task lived to write.
func (r IncompleteRecord) Cause() string {
	var cause string
	switch has := func(o string) bool { return slices.Contains(r.Checkpoint, o) }; {
	case has(contract.CheckpointNotHandled):
		cause = "stopped before its task handled the checkpoint signal (its handlers were not set yet): the driver asked no checkpoint, so nothing since its restore is kept"
	case has(contract.CheckpointTimeout):
		cause = "asked to checkpoint, its task did not commit within its commit_timeout; the driver stopped it, so nothing since its last commit is kept"
	case has(contract.CheckpointCommitted):
		cause = "its checkpoint committed (the driver's event), but its task did not live to log it: the next run restored what it committed"
	default:
		return "not told by the driver's events: see the agent's log"
	}
	if r.KilledBy == int(syscall.SIGKILL) {
		cause += "; Nomad killed it at its kill_timeout"
	}
	return cause
}

// MoveLooks are Result.MoveLooks.
type MoveLooks struct{ Looks, WithRoom int }

// LayoutChange is one GPU's layout changed: the device plugin applied a
// layout the controller asked for.
type LayoutChange struct {
	At time.Duration
	// Node and GPU name the GPU as Run and Hold do.
	Node, GPU string
	// From and To are layouts as gpulayout writes them: "whole", "mps:8".
	From, To string
}

// LayoutCounts are the changes to MPS shares and to whole GPUs among cs.
func LayoutCounts(cs []LayoutChange) (toMPS, toWhole int) {
	for _, c := range cs {
		switch {
		case c.To == string(gpulayout.Whole):
			toWhole++
		case strings.HasPrefix(c.To, string(gpulayout.MPS)+":"):
			toMPS++
		}
	}
	return toMPS, toWhole
}

// Distortion is how far a real run strayed from the trace it replays:
// what the machine's load added. Times are wall-clock.
type Distortion struct {
	// SubmitLag is how late jobs were submitted after their scaled
	// arrival.
	SubmitLagP50, SubmitLagP95 time.Duration
	// Start is from an allocation's placement to its task running.
	StartP50, StartP95, StartP99 time.Duration
	// Preempt is from a preemptor's placement to its victim's task
	// stopped (its checkpoint committed, where it has one); 0 without
	// preemptions.
	PreemptP50 time.Duration
	// CPUBusy is the machine's busy share of its CPUs over the run.
	CPUBusy float64
}

// Limits a real run's Distortion must stay within for its figures to
// describe the trace rather than the machine.
const (
	MaxSubmitLagP95 = time.Second
	// MaxStartTrace bounds the median start latency in trace time
	// (× compression): a start must cost the trace a minute at most.
	MaxStartTrace = time.Minute
	MaxCPUBusy    = 0.9
)

// Violations are the limits d breaks at compression, one line each.
func (d Distortion) Violations(compression float64) []string {
	var out []string
	if d.SubmitLagP95 > MaxSubmitLagP95 {
		out = append(out, fmt.Sprintf("submission lag p95 %s is over %s", d.SubmitLagP95, MaxSubmitLagP95))
	}
	if st := time.Duration(float64(d.StartP50) * compression); st > MaxStartTrace {
		out = append(out, fmt.Sprintf("median start %s × compression %g = %s of trace time is over %s", d.StartP50, compression, st.Round(time.Second), MaxStartTrace))
	}
	if d.CPUBusy > MaxCPUBusy {
		out = append(out, fmt.Sprintf("CPU busy %.0f %% is over %.0f %%", 100*d.CPUBusy, 100*MaxCPUBusy))
	}
	return out
}

// JobRecord is what happened to one job.
type JobRecord struct {
	ID      string
	Arrival time.Duration
	// Finish is when it completed; valid with Done.
	Finish time.Duration
	Done   bool
	// Slice is what it ran on.
	Slice Slice
	// Submitted is when the engine submitted it (≥ Arrival; the real
	// engine's submission loop may lag).
	Submitted time.Duration
	// Runs are its allocations that started by the horizon, in order:
	// each later one a resume (or restart) after a preemption.
	Runs []Run
	// Requested is the GPU-equivalents it asks for: its fraction of one
	// GPU, or its whole GPUs; the same in every configuration.
	Requested float64
	// Util is its load's utilisation of what it asked for, in percent.
	Util float64
	// Priority is its job priority; Team its team ("" when the trace
	// says none).
	Priority int
	Team     string `json:",omitempty"`
	// PreemptingPlacements counts its allocations, placed by the horizon
	// (started or not), whose placement preempted at least one
	// allocation: Nomad's PreemptedAllocations not empty.
	PreemptingPlacements int
	// MemberRuns are a gang's (Slice.Members > 1) members' allocations,
	// each holding Slice.Count GPUs, in the order they started; its Runs
	// are then the spans during which every member ran: the job's
	// progress. Empty for a job of one allocation.
	MemberRuns []Run `json:",omitempty"`
}

// Holding are the runs that held devices and the GPU-equivalents each
// held: a gang's members' runs, each from its placement (a member holds
// its GPUs while it waits for its peers, its task not yet started), else
// the job's runs.
func (r JobRecord) Holding() ([]Run, float64) {
	if r.Slice.Members < 2 {
		return r.Runs, r.Slice.GPUs
	}
	held := make([]Run, len(r.MemberRuns))
	for i, run := range r.MemberRuns {
		run.Start = min(run.Start, run.Placed)
		held[i] = run
	}
	return held, float64(r.Slice.Count)
}

// Run is one allocation of a job, from its task's start to its stop.
type Run struct {
	// Start and End bound it; a run still going at the horizon ends
	// there (Open).
	Start, End time.Duration
	Open       bool
	// Placed is when its allocation was placed, holding its devices
	// before its task started; recorded for a gang's members (MemberRuns)
	// only, where a member placed while another is not is what gangs
	// prevent.
	Placed time.Duration `json:",omitempty"`
	// Preempted says it was stopped by a preemption; Moved that the
	// controller stopped it to move it (Features.Moves); Reclaimed that
	// the controller took it back for a queue lending to its team's, or
	// for its own team's work 10 above it (a yield; Features.Queues);
	// SpotReclaimed that the cloud took its spot node back and the
	// reclaim watcher stopped it on the notice (Features.Spot).
	Preempted, Moved bool
	Reclaimed        bool `json:",omitempty"`
	SpotReclaimed    bool `json:",omitempty"`
	// Node is the node it ran on, and Held the devices it held there.
	Node string
	Held []Hold
	// Restored is the progress (work done, trace time) it started from;
	// Saved the progress its last checkpoint committed (Checkpointed);
	// Reached the progress it had made when it stopped. Known only where
	// ProgressKnown (the real engine reads them from the task's log).
	Restored, Saved, Reached time.Duration
	Checkpointed             bool
	ProgressKnown            bool
	// StopGap is the wall-clock time from its checkpoint's commit to its
	// task's exit: work done after the commit and thrown away. It is a
	// latency of the machine, not of the trace, and reported apart; 0
	// where not measured (the task logged no progress at its exit).
	StopGap time.Duration
}

// Hold is what a run held of one GPU.
type Hold struct {
	// Kind is "gpu", "mps" or "mig"; Profile the MIG profile.
	Kind, Profile string
	// GPU names the physical GPU on its node (a UUID, an index); for
	// "gpu" holds it may be "" (only their count matters).
	GPU string
	// Units are the whole GPUs, MPS shares or MIG instances held.
	Units int
}

// Sample is the cluster at one instant.
type Sample struct {
	At time.Duration
	// Nodes are the nodes up: started and not yet removed, booting ones
	// included (they cost node-minutes).
	Nodes int
	// Spot are those of Nodes that are spot nodes (Features.Spot), priced
	// as such; the others are the reserved minimum and on-demand nodes.
	Spot int `json:",omitempty"`
	// GPUs are the physical GPUs of ready nodes.
	GPUs float64
	// Allocated are the GPU-equivalents held by allocations, and Busy
	// Σ utilisation × held, as the cluster's telemetry tells them: a
	// cross-check of the figures computed from the jobs' runs.
	Allocated float64
	Busy      float64
	// Queued are the jobs submitted and not running.
	Queued int
	// Layouts are, with Features.Layouts, the ready nodes that have MPS
	// GPUs at this instant and those GPUs (every other GPU is whole).
	// Optional: a sample without it has the configuration's static
	// layout on every node.
	Layouts []NodeLayout `json:",omitempty"`
}

// NodeLayout is one node's MPS GPUs at a sample.
type NodeLayout struct {
	Node string
	MPS  []MPSGPU
}

// MPSGPU is one GPU offered as MPS shares: GPU names it as Hold.GPU does;
// Free are its shares no allocation holds (the telemetry's view; the
// figures count holds from the jobs' runs).
type MPSGPU struct {
	GPU          string
	Shares, Free int
}

// Policy is how the cluster's control loops behave, in wall-clock time
// of the deployment: a real replay writes these into its autoscaler
// policy and plugin configs, and the model multiplies them by the
// compression to get trace time. Every engine reads the same Policy.
type Policy struct {
	// EvalInterval and Cooldown are the scaling policy's
	// evaluation_interval and cooldown.
	EvalInterval, Cooldown time.Duration
	// MaxScaleUp and MaxScaleDown bound one scaling action (gpu-queue's
	// max_scale_up and max_scale_down).
	MaxScaleUp, MaxScaleDown int
	// IdleFloor is the GPU allocation percentage under which gpu-queue
	// scales in, once it has been under it for ScaleInAfter.
	IdleFloor    float64
	ScaleInAfter time.Duration
	// TargetAlloc is target-value's target GPU allocation percentage.
	TargetAlloc float64
	// PreemptionCooldown is how long preempted work is protected once its
	// replacement runs (the preemption { cooldown }); 0: never.
	PreemptionCooldown time.Duration
	// ProtectReaction is from a preempted job's replacement running to
	// the controller's raise of it in place: a watch's wake-up and a job
	// update.
	ProtectReaction time.Duration
	// PreemptMinRuntime is how long an allocation of nomad-gpu's
	// preemption (with checkpoints) runs before it can be preempted at
	// all, as Slurm's PreemptExemptTime and KAI's min-runtime; 0: off.
	PreemptMinRuntime time.Duration
	// CommitTimeout is the tasks' checkpoint { commit_timeout }.
	CommitTimeout time.Duration
	// LayoutMinInterval is the controller's -layout-min-interval
	// (layoutplan.Bounds.MinInterval): a GPU changed less than this ago
	// changes again only for a queue no other GPU can serve.
	LayoutMinInterval time.Duration
	// MoveBudgetHour and MoveBudgetJobDay are the controller's
	// -move-budget-hour and -move-budget-job-day, wall clock like the
	// rest: at compression 25, 100 consolidations an hour are 4 in an
	// hour of trace, and 3 moves of a job a day bound it to 3 in a run.
	// MoveSettle and MoveHold are its -move-settle and -move-hold.
	MoveBudgetHour, MoveBudgetJobDay int
	MoveSettle, MoveHold             time.Duration
	// ReservationMaxHold is the controller's -reserve-max-hold: the
	// longest a reservation holds (its work is not kept again for as
	// long).
	ReservationMaxHold time.Duration `json:",omitzero"`
	// QueueHalfLife is the team queues' fair_share { half_life }
	// (Features.Queues), wall clock.
	QueueHalfLife time.Duration `json:",omitzero"`
	// ScaleInQuiet and ScaleInWait are the controller's -scale-in-quiet
	// (how long no queued work could use a node before it is emptied)
	// and -scale-in-wait (the longest an emptied node waits for the
	// autoscaler before it takes work again), Features.ScaleIn.
	ScaleInQuiet time.Duration `json:",omitzero"`
	ScaleInWait  time.Duration `json:",omitzero"`
	// Beyond is gpu-queue's nodes_needed{…,beyond=…}
	// (docs/autoscaling.md): queued work that the runtime forecast places
	// on the pool's capacity within it needs no new node. 0: off (the
	// query without it). Only gpu-queue reads it.
	Beyond time.Duration `json:",omitzero"`
}

// DefaultPolicy is what `make bench-trace` runs with.
func DefaultPolicy() Policy {
	return Policy{
		EvalInterval:       2 * time.Second,
		Cooldown:           4 * time.Second,
		MaxScaleUp:         4,
		MaxScaleDown:       2,
		IdleFloor:          30,
		ScaleInAfter:       10 * time.Second,
		TargetAlloc:        70,
		PreemptionCooldown: 10 * time.Second,
		// The driver's raise came half its 2s check period (a 10s
		// cooldown's) late on average; the controller is held to that.
		ProtectReaction: time.Second,
		CommitTimeout:   10 * time.Second,
		// The controller's default.
		LayoutMinInterval: 5 * time.Minute,
		MoveBudgetHour:    100,
		MoveBudgetJobDay:  3,
		// The controller's 2m settle and 30s hold are a real cluster's;
		// in a replay's wall clock a placement takes well under a second.
		MoveSettle: 5 * time.Second,
		MoveHold:   10 * time.Second,
		// The controller's default (controller.DefaultReserveConfig) is
		// an hour of a real cluster's time: an hour of trace at the
		// replay's default compression of 25.
		ReservationMaxHold: time.Hour / 25,
		// The controller's default is 7 days of a real cluster's time,
		// longer than any replay: use since the start would weigh alike.
		// An hour of trace at compression 25 lets the order follow the
		// teams' recent use, as over days of a real cluster.
		QueueHalfLife: time.Hour / 25,
		// The controller's defaults, 10m and 15m of a real cluster's
		// time: as long in trace time at compression 25.
		ScaleInQuiet: 10 * time.Minute / 25,
		ScaleInWait:  15 * time.Minute / 25,
	}
}

// Latencies are how long the cluster's mechanics take, wall-clock: the
// model's calibration parameters, measured by a real run.
type Latencies struct {
	// Start is from a placeable job's submission to its task running.
	Start time.Duration
	// StartP95 and StartP99 are the 95th and 99th percentiles of Start
	// (Start being its median): the model draws each start from them. 0:
	// every start takes Start.
	StartP95, StartP99 time.Duration `json:",omitzero"`
	// StartByKind is Start and its tail for the starts of one kind of
	// slice (Slice.Kind: "gpu", "mps", "mig"), where the run measured
	// them: a whole GPU's task starts at once, an MPS share's after its
	// control daemon's client setup, a restore after its checkpoint's
	// copy. A kind not in it takes Start.
	StartByKind map[string]Spread `json:",omitempty"`
	// Boot is from a scale-out's request to its node being ready.
	Boot time.Duration
	// Remove is from a scale-in's request to its node being gone.
	Remove time.Duration
	// Preempt is from a preemptor's submission to the preempted task
	// stopped with its checkpoint committed.
	Preempt time.Duration
	// CommitExit is the last part of Preempt with checkpoints: from the
	// preempted task's checkpoint commit to its exit, the work it does
	// and throws away (a run's Reached − Saved). 0: not measured, taken
	// as none.
	CommitExit time.Duration
	// Layout is from the planner's decision to the new layout's
	// instances placeable (Features.Layouts): the median, where LayoutP95
	// is set, else the mean; 0: not measured, taken as DefaultLatencies'
	// (LayoutOr).
	Layout time.Duration
	// LayoutP95 is Layout's 95th percentile: the model draws each
	// relayout's latency from Layout and it. 0: every relayout takes
	// Layout.
	LayoutP95 time.Duration `json:",omitzero"`
}

// Spread is a latency's median and upper percentiles, wall clock.
type Spread struct {
	P50, P95, P99 time.Duration
}

// DefaultLayoutLatency is a relayout's latency, wall clock: what real
// replays measured (the controller's nomad_gpu_controller_layout_apply_seconds,
// mean 8.6–9.8 s with the plugin's default 2 s poll and 3 s drain grace,
// on 30-minute windows of the default sample, 2026-12-05). By the apply
// sequence (docs/design/gpu-layouts.md): the controller's tick, the
// plugin's metadata poll, the drain grace and the allocation read, then
// the new layout's fingerprint in one of Nomad's 5–10 s node-update
// batches.
const DefaultLayoutLatency = 9 * time.Second

// LayoutPoll is how long, wall clock, the device plugin takes to read a
// layout the controller asked for: its layout.poll (devicefp's default,
// which the replay's plugins keep), the period of its metadata reads. Until
// then an allocation placed on the GPU holds it and the plugin does not
// drain it. The replay's plugin logs show 0.9–2.5 s from the controller's
// decision to the plugin's drain or hold (2026-12-06).
const LayoutPoll = 2 * time.Second

// LayoutSwitch is how long, wall clock, the device plugin drains a GPU
// before it switches it: its drain_grace (3 s by default, which the
// replay keeps) rounded up to its poll, since it decides once a poll.
// The replay's plugin logs show 4.0–4.8 s (2026-12-06).
const LayoutSwitch = 4 * time.Second

// LayoutOr is l.Layout, or DefaultLayoutLatency where not measured.
func (l Latencies) LayoutOr() time.Duration {
	if l.Layout > 0 {
		return l.Layout
	}
	return DefaultLayoutLatency
}

// DefaultLatencies are the figures a real replay on this kind of machine
// measured (2 cores, sim GPUs); a calibrated run measures its own.
func DefaultLatencies() Latencies {
	return Latencies{Start: 1 * time.Second, Boot: 8 * time.Second, Remove: 3 * time.Second, Preempt: 1 * time.Second, Layout: DefaultLayoutLatency}
}
