// Package sizingbench is a deterministic benchmark, with no processes, of
// two things on the Philly trace: the run-time and wait predictions of
// package controller/sizing/predict, and the GPU-hours that auto sizing
// (package controller/sizing) saves or spends. Both replay recurring jobs through a
// simple event loop over a fixed pool.
//
// The Philly trace has no recurring jobs to learn from, so the replay
// makes them (Recur): templates drawn from the trace's busiest window,
// each recurring several times with jittered durations.
//
// # Predictions
//
// Each run's run time and wait are predicted before they happen from the
// history of the runs so far, with both the model and the simple
// baselines, and compared with what happened (Result.RuntimeErrors,
// Result.WaitErrors; BenchmarkPrediction).
//
// # Usage model
//
// The trace says how many GPUs a job asked for, not how many it used, so
// each template is given a true need, seeded by (Seed, template ID):
// TrueUse, the share of its asked count (in its unit: whole GPUs, MPS
// shares, MIG instances) that its work needs, drawn from one uniform u:
//
//   - u < 1/3, over-asking: TrueUse uniform in [0.3, 0.6);
//   - u < 2/3, fitting: [0.6, 0.9), most of its ask but not saturated;
//   - else starved: [1.2, 2.0), it would use more than it asked for.
//
// Its need is n = TrueUse × the asked count. A run given c units lasts
// Duration × max(1, n/c): fewer units than it needs stretch it, more do
// not speed it. A run that would last more than TimeLimit × Duration (1.5)
// is killed then, outcome timeout (so a starved job given its ask times
// out when n/c > 1.5). A run holds its whole slice: its requested GPU-hours
// are c × the unit's GPU-equivalents × its run time, and its used GPU-hours
// min(c, n) × the same, never more than requested.
//
// While it runs, a run is sampled every SampleEvery (1 min) as the
// sizer's collector would see it: utilisation min(n, c)/c × 100 % of its
// slice; memory MemShare × min(n, c) units' worth of GPU memory (MemShare
// uniform in [0.3, 0.7), seeded by (Seed, template ID), from its own
// stream), of a limit of c units' worth (a whole GPU GPUMemory, an MPS
// share GPUMemory / shares, a MIG instance its profile's memory).
//
// # Sizing
//
// Options.Size chooses each run's count at its arrival. AutoSize is the
// sizer in auto mode: sizing.Summarise of the template's samples over the
// last SampleWindow (6h, the sizer's default window) and its runs, at the
// slice its last run was given, then sizing.Recommend with
// sizing.DefaultThresholds, a policy of mode auto bounded to [1, 2 × the
// asked count], and an offer of a node's capacity of the unit. It sizes
// the next run only: a running one is never resized, so sizing.Decide's
// checkpoint and interval rules, which guard restarts, do not apply.
// CompareSizing replays the same jobs without sizing (each run asks the
// template's count) and with AutoSize, and SizingTable shows for both the
// GPU-hours requested and used, the share used, the share used by runs
// that completed, timeouts, and the mean wait, run time and job
// completion time (BenchmarkSizing).
package sizingbench

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nomad-gpu/nomad-gpu/bench/tracereplay"
	"github.com/nomad-gpu/nomad-gpu/controller/sizing"
	"github.com/nomad-gpu/nomad-gpu/controller/sizing/history"
	"github.com/nomad-gpu/nomad-gpu/controller/sizing/predict"
)

// Pool is the pool name the replay's runs carry.
const Pool = "philly"

const (
	// SampleEvery is how often a running run is sampled.
	SampleEvery = time.Minute
	// SampleWindow is how far back the samples given to Options.Size go
	// (the sizer's default -window).
	SampleWindow = 6 * time.Hour
	// GPUMemory is a whole GPU's memory (Philly's P100s had 16 GB).
	GPUMemory = 16 << 30
)

// Options are the replay's workload and pool; the zero value of a field
// takes the default in its comment.
type Options struct {
	// Seed seeds everything drawn: the derived Philly fields, the
	// templates, their repeats, arrivals, jitter and true use (1).
	Seed int64
	// Window is the length of the busiest window templates are drawn from
	// (24h).
	Window time.Duration
	// Load is the share of the pool's GPU capacity the runs offer, given
	// what they ask for, over the span their arrivals are spread over
	// (0.8); below 0, arrivals are spread over Window instead, whatever the
	// load (Recur).
	Load float64
	// Templates is how many recurring templates are drawn (60).
	Templates int
	// MinRepeats and MaxRepeats bound how often each recurs (5, 15).
	MinRepeats, MaxRepeats int
	// Jitter is each run's duration jitter, a share of the template's
	// (0.2: ±20 %; below 0: none).
	Jitter float64
	// TimeLimit is how long a run may last, as a multiple of its Duration,
	// before it is killed with outcome timeout (1.5; below 0: no limit).
	TimeLimit float64
	// Cluster is the fixed pool (4 nodes × 8 GPUs, one GPU per node
	// offered as 4 MPS shares). Its Nodes is the node count; MinNodes and
	// MaxNodes are ignored.
	Cluster tracereplay.Cluster
	// Size, when set, chooses the count of each run's slice (in its unit:
	// whole GPUs, MPS shares or MIG instances; the kind and profile stay
	// the template's) at its arrival, from what SizeInput holds. nil gives
	// every run the template's count. The count is clipped to [1, a node's
	// capacity of the unit].
	Size func(in SizeInput) (count int)
}

func (o Options) withDefaults() Options {
	if o.Seed == 0 {
		o.Seed = 1
	}
	if o.Window == 0 {
		o.Window = 24 * time.Hour
	}
	if o.Load == 0 {
		o.Load = 0.8
	}
	if o.Templates == 0 {
		o.Templates = 60
	}
	if o.MinRepeats == 0 {
		o.MinRepeats = 5
	}
	if o.MaxRepeats == 0 {
		o.MaxRepeats = 15
	}
	o.MaxRepeats = max(o.MaxRepeats, o.MinRepeats)
	switch {
	case o.Jitter == 0:
		o.Jitter = 0.2
	case o.Jitter < 0:
		o.Jitter = 0
	}
	if o.TimeLimit == 0 {
		o.TimeLimit = 1.5
	}
	if o.Cluster.GPUsPerNode == 0 {
		o.Cluster = tracereplay.Cluster{Nodes: 4, GPUsPerNode: 8, MPSGPUs: 1, MPSShares: 4}
	}
	if o.Cluster.Nodes == 0 {
		o.Cluster.Nodes = 4
	}
	return o
}

// Template is a trace job that recurs.
type Template struct {
	// ID is the trace job's ID ("philly-123").
	ID string
	// Key is the task it recurs as: namespace "default", job ID, group and
	// task "train".
	Key history.Key
	// Slice is what its runs ask for: the trace job's request mapped onto
	// the pool by tracereplay.Cluster.Slice with slices on (a fractional
	// request takes MPS shares; a whole-GPU one at most a node's whole
	// GPUs).
	Slice history.Slice
	// GPUsPerUnit is the GPU-equivalents of one unit of Slice (1 for a
	// whole GPU, 1/shares for an MPS share, sevenths/7 for a MIG instance).
	GPUsPerUnit float64
	Priority    int
	// Duration is the trace job's duration, which its runs jitter.
	Duration time.Duration
	// TrueUse is the share of its asked count that its work needs (the
	// usage model in the package comment): [0.3, 0.6) over-asking, [0.6,
	// 0.9) fitting, [1.2, 2.0) starved. A run given fewer units than its
	// need, TrueUse × Slice.Count, is stretched (Replay).
	TrueUse float64
	// MemShare is the share of a unit's GPU memory its work uses per unit
	// of need, in [0.3, 0.7).
	MemShare float64
}

// Need is the units its work needs: TrueUse × Slice.Count.
func (t Template) Need() float64 { return t.TrueUse * float64(t.Slice.Count) }

// Class is "over-ask" (TrueUse below 0.6), "fit" (up to 1) or "starved".
func (t Template) Class() string {
	switch {
	case t.TrueUse < 0.6:
		return ClassOverAsk
	case t.TrueUse <= 1:
		return ClassFit
	}
	return ClassStarved
}

// Template classes (Template.Class).
const (
	ClassOverAsk = "over-ask"
	ClassFit     = "fit"
	ClassStarved = "starved"
)

// Classes are the template classes in table order.
var Classes = []string{ClassOverAsk, ClassFit, ClassStarved}

// trueUse maps one uniform u in [0, 1) onto the usage model's classes.
func trueUse(u float64) float64 {
	k := min(int(3*u), 2)
	f := 3*u - float64(k)
	switch k {
	case 0:
		return 0.3 + 0.3*f
	case 1:
		return 0.6 + 0.3*f
	}
	return 1.2 + 0.8*f
}

// Job is one run of a template.
type Job struct {
	Template Template
	// ID is "<template ID>#<n>", n from 1 in arrival order.
	ID string
	// Arrival is from the window's start; Duration is its run time when
	// given at least its need.
	Arrival, Duration time.Duration
}

// Recur makes the recurring workload from window, a trace window's jobs
// (arrivals from the window's start), as Options document:
//
//   - Templates: tracereplay.SampleJobs(window, o.Templates, o.Seed), so a
//     uniform sample of the window's jobs, seeded by job ID.
//   - Each template recurs R times, R uniform in [MinRepeats, MaxRepeats];
//     each run lasts the template's Duration × (1 + Jitter × (2u − 1)), u
//     uniform in [0, 1): ±Jitter around the trace's duration.
//   - Each run arrives at u × span, u uniform in [0, 1). The span is
//     o.Window when o.Load is below 0; else it is the offered GPU-hours
//     (every run's asked GPU-equivalents × the time it holds them when
//     given its ask: its duration × max(1, TrueUse), at most TimeLimit ×
//     its duration) over o.Load × the pool's GPUs, so that the pool is
//     offered o.Load of its capacity over the span when runs get what they
//     ask for. Philly's durations are heavy-tailed, so the GPU-hours of 60
//     jobs drawn from a window vary by more than ten times from seed to
//     seed; spreading them by load keeps the pool busy, but not hopelessly
//     behind, whatever is drawn.
//   - TrueUse is drawn as the package comment says, from one uniform.
//
// Every draw comes from a PCG generator seeded by FNV-64a of
// "sizingbench", the seed and the template's ID (MemShare from one seeded
// by the ID and "/mem"), so a template recurs the same way whatever else
// is drawn. The jobs are sorted by arrival, then ID.
func Recur(window []tracereplay.Job, o Options) []Job {
	o = o.withDefaults()
	var jobs []Job
	var at []float64 // per job, the u of its arrival
	offered := 0.0   // GPU-hours
	for _, tj := range tracereplay.SampleJobs(window, o.Templates, o.Seed) {
		r := rand.New(seededPCG(o.Seed, tj.ID))
		s := o.Cluster.Slice(tj, tracereplay.Features{Slices: true})
		t := Template{
			ID:          tj.ID,
			Key:         history.Key{Namespace: "default", Job: tj.ID, Group: "train", Task: "train"},
			Slice:       history.Slice{Kind: s.Kind, Count: s.Count, Profile: s.Profile},
			GPUsPerUnit: s.GPUs / float64(s.Count),
			Priority:    tj.EffectivePriority(),
			Duration:    tj.Duration,
			TrueUse:     trueUse(r.Float64()),
			MemShare:    0.3 + 0.4*rand.New(seededPCG(o.Seed, tj.ID+"/mem")).Float64(),
		}
		n := o.MinRepeats + r.IntN(o.MaxRepeats-o.MinRepeats+1)
		for range n {
			u := r.Float64()
			d := max(time.Duration(float64(tj.Duration)*(1+o.Jitter*(2*r.Float64()-1))), time.Second)
			jobs = append(jobs, Job{Template: t, Duration: d})
			at = append(at, u)
			offered += s.GPUs * d.Hours() * heldFor(t.TrueUse, o.TimeLimit)
		}
	}
	span := float64(o.Window)
	if o.Load > 0 {
		span = offered / (o.Load * float64(o.Cluster.Nodes*o.Cluster.GPUsPerNode)) * float64(time.Hour)
	}
	for i := range jobs {
		jobs[i].Arrival = time.Duration(at[i] * span)
	}
	slices.SortStableFunc(jobs, func(a, b Job) int {
		return cmp.Or(cmp.Compare(a.Template.ID, b.Template.ID), cmp.Compare(a.Arrival, b.Arrival))
	})
	n := 0
	for i := range jobs {
		if i == 0 || jobs[i-1].Template.ID != jobs[i].Template.ID {
			n = 0
		}
		n++
		jobs[i].ID = fmt.Sprintf("%s#%d", jobs[i].Template.ID, n)
	}
	slices.SortFunc(jobs, compareJobs)
	return jobs
}

// heldFor is how much longer than its Duration a run given its asked count
// holds it, by the usage model: its stretch max(1, TrueUse), cut at the
// time limit (none when limit is 0 or below).
func heldFor(trueUse, limit float64) float64 {
	f := max(1, trueUse)
	if limit > 0 {
		f = min(f, limit)
	}
	return f
}

func compareJobs(a, b Job) int {
	return cmp.Or(cmp.Compare(a.Arrival, b.Arrival), cmp.Compare(a.ID, b.ID))
}

func seededPCG(seed int64, id string) *rand.PCG {
	h := fnv.New64a()
	h.Write([]byte("sizingbench"))
	h.Write(binary.LittleEndian.AppendUint64(nil, uint64(seed)))
	h.Write([]byte(id))
	return rand.NewPCG(h.Sum64(), 0x9E3779B97F4A7C15)
}

// LoadPhilly reads the Philly extract at path, "" for the one this
// repository carries (tracereplay.OpenPhilly, then ReadPhilly with
// o.Seed), takes its busiest o.Window and makes the recurring workload of
// it (Recur). source says what was picked and ends with the Philly
// attribution, which is to be shown with any figures derived from it.
func LoadPhilly(path string, o Options) (jobs []Job, source string, err error) {
	o = o.withDefaults()
	f, name, err := tracereplay.OpenPhilly(path)
	if err != nil {
		return nil, "", err
	}
	defer f.Close()
	all, epoch, _, err := tracereplay.ReadPhilly(f, tracereplay.PhillyOptions{Seed: o.Seed})
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", name, err)
	}
	tr, err := tracereplay.Select(all, epoch, tracereplay.Selection{Window: o.Window, Busiest: true}, "philly.csv")
	if err != nil {
		return nil, "", err
	}
	jobs = Recur(tr.Jobs, o)
	spread := "over the window"
	if o.Load > 0 {
		spread = fmt.Sprintf("to offer %g %% of %d×%d GPUs", 100*o.Load, o.Cluster.Nodes, o.Cluster.GPUsPerNode)
	}
	source = fmt.Sprintf("%s; %d templates recurring %d–%d times (%d runs), durations ±%g %%, arrivals spread %s, seed %d. %s",
		tr.Source, min(o.Templates, len(tr.Jobs)), o.MinRepeats, o.MaxRepeats, len(jobs), 100*o.Jitter, spread, o.Seed, tracereplay.PhillyAttribution)
	return jobs, source, nil
}

// Run is what happened to one Job in a Replay, and what was predicted.
type Run struct {
	Job Job
	// Given is the slice it held: the template's, or Options.Size's count.
	Given history.Slice
	// Start and Finish are from the window's start; Wait is Start −
	// Arrival, Runtime Finish − Start.
	Start, Finish, Wait, Runtime time.Duration
	// TimedOut is set when it was killed at Options.TimeLimit.
	TimedOut bool
	// RequestedGPUHours are the GPU-hours it held (Given.Count ×
	// GPUsPerUnit × Runtime); UsedGPUHours those its work used (min(Given,
	// need) × GPUsPerUnit × Runtime).
	RequestedGPUHours, UsedGPUHours float64
	// RuntimeModel and RuntimeBaseline were predicted as it started
	// (predict.Runtime with elapsed 0, predict.RuntimeBaseline); WaitModel
	// and WaitBaseline at its arrival (predict.Wait, predict.WaitBaseline),
	// each from the history then.
	RuntimeModel, RuntimeBaseline, WaitModel, WaitBaseline predict.Estimate
}

// JCT is its job completion time: Finish − Arrival (to its kill, when it
// timed out).
func (r Run) JCT() time.Duration { return r.Finish - r.Job.Arrival }

// SizeInput is what Options.Size reads at a run's arrival.
type SizeInput struct {
	Template Template
	// Runs are all the runs so far (finished, running and queued), in
	// arrival order; the arriving one is not among them.
	Runs []history.Run
	// Samples are the template's runs' samples over the last SampleWindow,
	// ordered by time, then alloc ID.
	Samples []history.Sample
	// MaxCount is a node's capacity of the template's unit.
	MaxCount int
}

// Usage is what a set of runs held and used.
type Usage struct {
	Runs, Timeouts int
	// Resized is the runs given another count than their template's.
	Resized int
	// RequestedGPUHours and UsedGPUHours are summed over the runs;
	// TimedOutGPUHours is the part of RequestedGPUHours held by runs that
	// timed out, whose work was lost, and UsefulGPUHours the part of
	// UsedGPUHours used by runs that completed.
	RequestedGPUHours, UsedGPUHours, TimedOutGPUHours, UsefulGPUHours float64
	// MeanJCT is the mean of the runs' JCT, timed-out runs to their kill:
	// MeanWait + MeanRuntime, to the nanosecond.
	MeanJCT, MeanWait, MeanRuntime time.Duration
}

// UsedShare is UsedGPUHours / RequestedGPUHours (0 when nothing was
// requested).
func (u Usage) UsedShare() float64 {
	if u.RequestedGPUHours == 0 {
		return 0
	}
	return u.UsedGPUHours / u.RequestedGPUHours
}

// UsefulShare is UsefulGPUHours / RequestedGPUHours (0 when nothing was
// requested): the share of what was held that went into completed work.
func (u Usage) UsefulShare() float64 {
	if u.RequestedGPUHours == 0 {
		return 0
	}
	return u.UsefulGPUHours / u.RequestedGPUHours
}

func usageOf(runs []Run, keep func(Run) bool) Usage {
	var u Usage
	var jct, wait, rt time.Duration
	for _, r := range runs {
		if !keep(r) {
			continue
		}
		u.Runs++
		if r.TimedOut {
			u.Timeouts++
			u.TimedOutGPUHours += r.RequestedGPUHours
		} else {
			u.UsefulGPUHours += r.UsedGPUHours
		}
		if r.Given.Count != r.Job.Template.Slice.Count {
			u.Resized++
		}
		u.RequestedGPUHours += r.RequestedGPUHours
		u.UsedGPUHours += r.UsedGPUHours
		jct, wait, rt = jct+r.JCT(), wait+r.Wait, rt+r.Runtime
	}
	if u.Runs > 0 {
		n := time.Duration(u.Runs)
		u.MeanJCT, u.MeanWait, u.MeanRuntime = jct/n, wait/n, rt/n
	}
	return u
}

// Result is a Replay's runs, in the order of the jobs passed, the
// prediction errors and the GPU-hours.
type Result struct {
	Runs []Run
	// Makespan is when the last run finished.
	Makespan time.Duration
	// RuntimeErrors and WaitErrors compare the predictions on the runs
	// where both the model and the baseline predicted.
	RuntimeErrors, WaitErrors Errors
	// Basis counts the model's runtime predictions by level: "job",
	// "pool slice", "pool kind", "none".
	Basis map[string]int
	// RuntimeByBasis splits RuntimeErrors by the model's level.
	RuntimeByBasis map[string]Errors
	// Usage is over all runs; ByClass by their template's Class.
	Usage   Usage
	ByClass map[string]Usage
}

// Errors compares the model with the baseline on the runs both predicted.
type Errors struct {
	// N is the runs compared; NonZero those with an actual above 0, over
	// which the MAPEs are taken (predict.MAPE skips zeros).
	N, NonZero int
	// MAPEModel and MAPEBaseline are in percent.
	MAPEModel, MAPEBaseline float64
	// MAEModel and MAEBaseline are the mean absolute errors in seconds,
	// over all N (zeros included).
	MAEModel, MAEBaseline float64
}

func compare(model, base, actual []float64) Errors {
	e := Errors{N: len(actual), MAPEModel: predict.MAPE(model, actual), MAPEBaseline: predict.MAPE(base, actual)}
	for i, a := range actual {
		if a != 0 {
			e.NonZero++
		}
		e.MAEModel += math.Abs(model[i]-a) / float64(len(actual))
		e.MAEBaseline += math.Abs(base[i]-a) / float64(len(actual))
	}
	return e
}

type node map[predict.Unit]int

type active struct {
	run    int // index into Result.Runs and hist
	node   int
	finish time.Duration
}

// memPerUnit is the GPU memory one unit of s is limited to.
func memPerUnit(c tracereplay.Cluster, s history.Slice) uint64 {
	switch s.Kind {
	case history.SliceMPS:
		return GPUMemory / uint64(max(1, c.MPSShares))
	case history.SliceMIG:
		_, mem, _ := strings.Cut(strings.SplitN(s.Profile, "+", 2)[0], "g.")
		gb, err := strconv.Atoi(strings.TrimSuffix(mem, "gb"))
		if err != nil || gb < 1 {
			return 0
		}
		return uint64(gb) << 30
	}
	return GPUMemory
}

// samples are r's samples with since <= Time <= until, every SampleEvery
// from its start to its finish, as the usage model says (package comment);
// none before it starts.
func (r Run) samples(base time.Time, c tracereplay.Cluster, started bool, since, until time.Duration) []history.Sample {
	if !started {
		return nil
	}
	until = min(until, r.Finish)
	n, given := r.Job.Template.Need(), float64(r.Given.Count)
	used := min(n, given)
	perUnit := memPerUnit(c, r.Given)
	var out []history.Sample
	first := max(1, (since-r.Start+SampleEvery-1)/SampleEvery)
	for t := r.Start + first*SampleEvery; t <= until; t += SampleEvery {
		out = append(out, history.Sample{
			Key: r.Job.Template.Key, AllocID: r.Job.ID, Time: base.Add(t), Slice: r.Given,
			UtilPct:       100 * used / given,
			MemBytes:      uint64(r.Job.Template.MemShare * used * float64(perUnit)),
			MemLimitBytes: uint64(r.Given.Count) * perUnit,
		})
	}
	return out
}

// Replay runs jobs through a fixed pool of o.Cluster.Nodes nodes, each
// offering a node's whole GPUs, MPS shares and MIG instances as
// tracereplay.Cluster lays them out with slices on. It is an event loop in
// trace time: at each time something happens, runs that end free their
// slices and become finished history (outcome complete), arriving jobs are
// queued, and then the queue, in predict.Before order (priority, then
// arrival, then ID), is placed greedily: each job takes the first node
// with room for its slice; one that does not fit waits without blocking
// the next. A slice must fit on one node; MPS shares of one node are
// pooled, which is exact for one MPS GPU per node.
//
// A run given Given.Count units when its work needs need = TrueUse ×
// Slice.Count runs Duration × need / Given.Count when that is more than 1,
// else Duration: fewer units than it needs stretch it, more do not speed
// it. One that would run past TimeLimit × Duration is killed then: it
// ends with outcome timeout.
//
// At each arrival the wait is predicted (model: predict.Wait with the
// pool's free units, the running runs' predict.Runtime remaining and the
// queued runs ahead; baseline: predict.WaitBaseline), and at each start
// the run time, from the history of all runs so far. Runs in the history
// carry times from a fixed base; jobs need not be sorted, and are replayed
// by arrival, then ID. Options.Size, when set, is called at each arrival
// with the history and the template's samples then.
func Replay(jobs []Job, o Options) Result {
	o = o.withDefaults()
	c := o.Cluster
	perNode := node{}
	if w := c.WholeGPUs(tracereplay.Features{Slices: true}); w > 0 {
		perNode[predict.Unit{Kind: history.SliceGPU}] = w
	}
	if c.MPSGPUs > 0 {
		perNode[predict.Unit{Kind: history.SliceMPS}] = c.MPSGPUs * c.MPSShares
	}
	for range c.MIGGPUs {
		for _, p := range c.MIGProfiles {
			perNode[predict.Unit{Kind: history.SliceMIG, Profile: p}]++
		}
	}
	nodes := make([]node, c.Nodes)
	for i := range nodes {
		nodes[i] = maps.Clone(perNode)
	}

	order := make([]int, len(jobs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return compareJobs(jobs[a], jobs[b]) })

	base := time.Date(2017, 10, 1, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return base.Add(d) }
	res := Result{Runs: make([]Run, len(jobs)), Basis: map[string]int{}}
	hist := make([]history.Run, 0, len(jobs)) // hist[k] is the k-th arrival's run
	histRun := make([]int, 0, len(jobs))      // hist index → res.Runs index
	byKey := map[history.Key][]int{}          // hist indices per template
	var queue []int                           // hist indices
	var running []active
	next := 0 // into order
	now := time.Duration(0)

	queued := func(k int) predict.QueuedTask {
		h := hist[k]
		return predict.QueuedTask{ID: h.AllocID, Key: h.Key, Slice: h.Slice, Priority: h.Priority, Created: h.Created}
	}
	for next < len(order) || len(running) > 0 {
		// The next time something happens.
		t := time.Duration(math.MaxInt64)
		if next < len(order) {
			t = jobs[order[next]].Arrival
		}
		for _, a := range running {
			t = min(t, a.finish)
		}
		now = t

		// Runs that end free their slices.
		kept := running[:0]
		for _, a := range running {
			if a.finish > now {
				kept = append(kept, a)
				continue
			}
			h := &hist[a.run]
			nodes[a.node][predict.UnitOf(h.Slice)] += h.Slice.Count
			h.Finished, h.Outcome = at(a.finish), history.OutcomeComplete
			if res.Runs[histRun[a.run]].TimedOut {
				h.Outcome = history.OutcomeTimeout
			}
			res.Makespan = max(res.Makespan, a.finish)
		}
		running = kept

		// Arrivals join the queue.
		var arrived []int
		for next < len(order) && jobs[order[next]].Arrival == now {
			i := order[next]
			next++
			j := jobs[i]
			given := j.Template.Slice
			if o.Size != nil {
				in := SizeInput{Template: j.Template, Runs: hist, MaxCount: perNode[predict.UnitOf(given)]}
				for _, k := range byKey[j.Template.Key] {
					in.Samples = append(in.Samples, res.Runs[histRun[k]].samples(base, c, !hist[k].Started.IsZero(), now-SampleWindow, now)...)
				}
				slices.SortStableFunc(in.Samples, func(a, b history.Sample) int {
					return cmp.Or(a.Time.Compare(b.Time), cmp.Compare(a.AllocID, b.AllocID))
				})
				given.Count = o.Size(in)
			}
			given.Count = max(1, min(given.Count, perNode[predict.UnitOf(given)]))
			res.Runs[i] = Run{Job: j, Given: given}
			hist = append(hist, history.Run{
				Key: j.Template.Key, AllocID: j.ID, Slice: given, Pool: Pool,
				Priority: j.Template.Priority, Created: at(now), Outcome: history.OutcomeRunning,
			})
			histRun = append(histRun, i)
			byKey[j.Template.Key] = append(byKey[j.Template.Key], len(hist)-1)
			queue = append(queue, len(hist)-1)
			arrived = append(arrived, len(hist)-1)
		}

		// Predict the arrivals' waits from the pool as it is now.
		if len(arrived) > 0 {
			free := predict.Capacity{}
			for _, n := range nodes {
				for u, v := range n {
					free[u] += v
				}
			}
			var rts []predict.RunningTask
			for _, a := range running {
				h := hist[a.run]
				rts = append(rts, predict.RunningTask{Key: h.Key, Slice: h.Slice,
					Remaining: predict.Runtime(h.Key, h.Slice, now-h.Started.Sub(base), hist)})
			}
			cache := map[string]predict.Estimate{}
			var qts []predict.QueuedTask
			for _, k := range queue {
				q := queued(k)
				ck := q.Key.String() + "|" + predict.SliceString(q.Slice)
				e, ok := cache[ck]
				if !ok {
					e = predict.Runtime(q.Key, q.Slice, 0, hist)
					cache[ck] = e
				}
				q.Runtime = e
				qts = append(qts, q)
			}
			wb := predict.WaitBaseline(hist)
			for _, k := range arrived {
				q := queued(k)
				r := &res.Runs[histRun[k]]
				r.WaitModel = predict.Wait(q, rts, predict.Ahead(q, qts), free)
				r.WaitBaseline = wb
			}
		}

		// Place the queue greedily, in queue order.
		slices.SortFunc(queue, func(a, b int) int {
			qa, qb := queued(a), queued(b)
			if predict.Before(qa, qb) {
				return -1
			}
			if predict.Before(qb, qa) {
				return 1
			}
			return 0
		})
		waiting := queue[:0]
		for _, k := range queue {
			h := &hist[k]
			u := predict.UnitOf(h.Slice)
			ni := slices.IndexFunc(nodes, func(n node) bool { return n[u] >= h.Slice.Count })
			if ni < 0 {
				waiting = append(waiting, k)
				continue
			}
			nodes[ni][u] -= h.Slice.Count
			r := &res.Runs[histRun[k]]
			r.RuntimeModel = predict.Runtime(h.Key, h.Slice, 0, hist)
			r.RuntimeBaseline = predict.RuntimeBaseline(hist)
			res.Basis[basisLevel(r.RuntimeModel.Basis)]++
			j := r.Job
			rt := j.Duration
			need, given := j.Template.Need(), float64(h.Slice.Count)
			if need > given {
				rt = time.Duration(float64(rt) * need / given)
			}
			if limit := time.Duration(o.TimeLimit * float64(j.Duration)); o.TimeLimit > 0 && rt > limit {
				rt, r.TimedOut = limit, true
			}
			r.Start, r.Wait, r.Runtime, r.Finish = now, now-j.Arrival, rt, now+rt
			r.RequestedGPUHours = given * j.Template.GPUsPerUnit * rt.Hours()
			r.UsedGPUHours = min(given, need) * j.Template.GPUsPerUnit * rt.Hours()
			h.Started = at(now)
			running = append(running, active{run: k, node: ni, finish: r.Finish})
		}
		queue = waiting
		if next >= len(order) && len(running) == 0 && len(queue) > 0 {
			panic("sizingbench: queued runs that never fit") // cannot happen: asks are clipped to a node
		}
	}

	var rm, rb, ra, wm, wbs, wa []float64
	type triple struct{ m, b, a []float64 }
	byLevel := map[string]*triple{}
	for _, r := range res.Runs {
		if r.RuntimeModel.Known && r.RuntimeBaseline.Known {
			rm, rb, ra = append(rm, r.RuntimeModel.Seconds), append(rb, r.RuntimeBaseline.Seconds), append(ra, r.Runtime.Seconds())
			l := basisLevel(r.RuntimeModel.Basis)
			if byLevel[l] == nil {
				byLevel[l] = &triple{}
			}
			t := byLevel[l]
			t.m, t.b, t.a = append(t.m, r.RuntimeModel.Seconds), append(t.b, r.RuntimeBaseline.Seconds), append(t.a, r.Runtime.Seconds())
		}
		if r.WaitModel.Known && r.WaitBaseline.Known {
			wm, wbs, wa = append(wm, r.WaitModel.Seconds), append(wbs, r.WaitBaseline.Seconds), append(wa, r.Wait.Seconds())
		}
	}
	res.RuntimeErrors, res.WaitErrors = compare(rm, rb, ra), compare(wm, wbs, wa)
	res.RuntimeByBasis = map[string]Errors{}
	for l, t := range byLevel {
		res.RuntimeByBasis[l] = compare(t.m, t.b, t.a)
	}
	res.Usage = usageOf(res.Runs, func(Run) bool { return true })
	res.ByClass = map[string]Usage{}
	for _, cl := range Classes {
		res.ByClass[cl] = usageOf(res.Runs, func(r Run) bool { return r.Job.Template.Class() == cl })
	}
	return res
}

// basisLevel is the level of a predict.Runtime basis.
func basisLevel(b string) string {
	switch {
	case strings.HasPrefix(b, "job "):
		return "job"
	case strings.HasPrefix(b, "pool ") && strings.Contains(b, "×"):
		return "pool slice"
	case strings.HasPrefix(b, "pool "):
		return "pool kind"
	}
	return "none"
}

// Table is the prediction errors as a text table.
func (r Result) Table() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-12s %6s %8s %12s %14s %12s %14s\n", "", "n", "nonzero", "MAPE model", "MAPE baseline", "MAE model", "MAE baseline")
	for _, row := range []struct {
		name string
		e    Errors
	}{{"runtime", r.RuntimeErrors}, {"  job", r.RuntimeByBasis["job"]}, {"  pool slice", r.RuntimeByBasis["pool slice"]},
		{"  pool kind", r.RuntimeByBasis["pool kind"]}, {"wait", r.WaitErrors}} {
		fmt.Fprintf(&b, "%-12s %6d %8d %11.1f%% %13.1f%% %11.0fs %13.0fs\n", row.name, row.e.N, row.e.NonZero,
			row.e.MAPEModel, row.e.MAPEBaseline, row.e.MAEModel, row.e.MAEBaseline)
	}
	fmt.Fprintf(&b, "runtime model basis: job %d, pool slice %d, pool kind %d, none %d; makespan %v\n",
		r.Basis["job"], r.Basis["pool slice"], r.Basis["pool kind"], r.Basis["none"], r.Makespan.Round(time.Second))
	u := r.Usage
	fmt.Fprintf(&b, "GPU-hours requested %.1f, used %.1f (%.1f %%), by completed runs %.1f (%.1f %%); mean JCT %v; %d of %d runs timed out, %d resized\n",
		u.RequestedGPUHours, u.UsedGPUHours, 100*u.UsedShare(), u.UsefulGPUHours, 100*u.UsefulShare(), u.MeanJCT.Round(time.Second), u.Timeouts, u.Runs, u.Resized)
	return b.String()
}

// AutoRecommend is what the sizer in auto mode says of in's template: the
// slice its last run was given (the template's when it has none) is
// summarised (sizing.Summarise) from in.Samples and the template's runs,
// and sizing.Recommend decides with sizing.DefaultThresholds, a policy of
// mode auto with bounds [1, 2 × the template's count] and an offer of
// in.MaxCount (for MIG, the template's profile only, so the profile stays).
func AutoRecommend(in SizeInput) sizing.Recommendation {
	t := in.Template
	cur := t.Slice
	var runs []history.Run
	for _, r := range in.Runs {
		if r.Key == t.Key {
			runs = append(runs, r)
			cur = r.Slice
		}
	}
	p := sizing.Policy{Mode: sizing.ModeAuto, Min: sizing.Bound{Count: 1}, Max: sizing.Bound{Count: 2 * t.Slice.Count}, Interval: sizing.DefaultInterval}
	offer := sizing.Offer{MaxCount: in.MaxCount}
	if cur.Kind == history.SliceMIG {
		p.Min, p.Max = sizing.Bound{}, sizing.Bound{}
		offer.Profiles = []string{cur.Profile}
	}
	return sizing.Recommend(t.Key, p, cur, sizing.Summarise(cur, in.Samples, runs), offer, sizing.DefaultThresholds)
}

// AutoSize is an Options.Size: AutoRecommend's count.
func AutoSize(in SizeInput) int {
	r := AutoRecommend(in)
	if r.Recommended.Kind != in.Template.Slice.Kind || r.Recommended.Profile != in.Template.Slice.Profile {
		return in.Template.Slice.Count
	}
	return r.Recommended.Count
}

// CompareSizing replays jobs twice with o: static, every run asking its
// template's count (o.Size ignored), and auto, sized by AutoSize.
func CompareSizing(jobs []Job, o Options) (static, auto Result) {
	o.Size = nil
	static = Replay(jobs, o)
	o.Size = AutoSize
	return static, Replay(jobs, o)
}

// SizingTable shows the GPU-hours requested and used, the share used, the
// share used by completed runs, and the mean wait, run time and job
// completion time of a static and an auto replay of the same jobs
// (CompareSizing), over all runs and by template class.
func SizingTable(static, auto Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-6s %-8s %4s %7s %8s %9s %8s %6s %7s %9s %9s %9s\n",
		"sizing", "class", "runs", "resized", "timeouts", "requested", "used", "used%", "useful%", "mean wait", "mean run", "mean JCT")
	row := func(mode, class string, u Usage) {
		fmt.Fprintf(&b, "%-6s %-8s %4d %7d %8d %8.1fh %7.1fh %5.1f%% %6.1f%% %9v %9v %9v\n", mode, class, u.Runs, u.Resized, u.Timeouts,
			u.RequestedGPUHours, u.UsedGPUHours, 100*u.UsedShare(), 100*u.UsefulShare(),
			u.MeanWait.Round(time.Second), u.MeanRuntime.Round(time.Second), u.MeanJCT.Round(time.Second))
	}
	for _, m := range []struct {
		name string
		r    Result
	}{{"static", static}, {"auto", auto}} {
		row(m.name, "all", m.r.Usage)
		for _, cl := range Classes {
			row(m.name, cl, m.r.ByClass[cl])
		}
	}
	return b.String()
}
