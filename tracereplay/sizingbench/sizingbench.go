// Package sizingbench is a deterministic benchmark of the run-time and
// wait predictions of package sizing/predict (issue 12) on the Philly
// trace, with no processes: a replay of recurring jobs through a simple
// event loop over a fixed pool, predicting each run before it happens from
// the history of the runs finished so far, with both the model and the
// simple baselines, and comparing them with what happened.
//
// The Philly trace has no recurring jobs to learn from, so the replay
// makes them (Recur): templates drawn from the trace's busiest window,
// each recurring several times with jittered durations. Replay is exported
// so that a sizing benchmark can reuse the event loop: Options.Size lets a
// sizer choose each run's slice, and Result carries each run's GPU-hours
// held and used.
package sizingbench

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/nomad-gpu/nomad-gpu/sizing/history"
	"github.com/nomad-gpu/nomad-gpu/sizing/predict"
	"github.com/nomad-gpu/nomad-gpu/tracereplay"
)

// Pool is the pool name the replay's runs carry.
const Pool = "philly"

// Options are the replay's workload and pool; the zero value of a field
// takes the default in its comment.
type Options struct {
	// Seed seeds everything drawn: the derived Philly fields, the
	// templates, their repeats, arrivals, jitter and true use (1).
	Seed int64
	// Window is the length of the busiest window templates are drawn from
	// (24h).
	Window time.Duration
	// Load is the share of the pool's GPU capacity the runs offer over the
	// span their arrivals are spread over (0.8); below 0, arrivals are
	// spread over Window instead, whatever the load (Recur).
	Load float64
	// Templates is how many recurring templates are drawn (60).
	Templates int
	// MinRepeats and MaxRepeats bound how often each recurs (5, 15).
	MinRepeats, MaxRepeats int
	// Jitter is each run's duration jitter, a share of the template's
	// (0.2: ±20 %; below 0: none).
	Jitter float64
	// Cluster is the fixed pool (4 nodes × 8 GPUs, one GPU per node
	// offered as 4 MPS shares). Its Nodes is the node count; MinNodes and
	// MaxNodes are ignored.
	Cluster tracereplay.Cluster
	// Size, when set, chooses the count of each run's slice (in its unit:
	// whole GPUs, MPS shares or MIG instances; the kind and profile stay
	// the template's) at its arrival, from its template and the history of
	// runs so far (finished, running and queued). nil gives every run the
	// trace's request. The count is clipped to [1, a node's capacity of
	// the unit].
	Size func(t Template, h []history.Run) (count int)
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
	// TrueUse is the share of its asked count that its work needs, in
	// [0.25, 1]: uniform, seeded by (Seed, ID). A run given fewer units
	// than TrueUse × Slice.Count is stretched (Replay).
	TrueUse float64
}

// Job is one run of a template.
type Job struct {
	Template Template
	// ID is "<template ID>#<n>", n from 1 in arrival order.
	ID string
	// Arrival is from the window's start; Duration is its run time when
	// given at least its true need.
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
//     (every run's asked GPU-equivalents × duration) over o.Load × the
//     pool's GPUs, so that the pool is offered o.Load of its capacity over
//     the span. Philly's durations are heavy-tailed, so the GPU-hours of 60
//     jobs drawn from a window vary by more than ten times from seed to
//     seed; spreading them by load keeps the pool busy, but not hopelessly
//     behind, whatever is drawn.
//   - TrueUse is uniform in [0.25, 1].
//
// Every draw comes from a PCG generator seeded by FNV-64a of
// "sizingbench", the seed and the template's ID, so a template recurs the
// same way whatever else is drawn. The jobs are sorted by arrival, then ID.
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
			TrueUse:     0.25 + 0.75*r.Float64(),
		}
		n := o.MinRepeats + r.IntN(o.MaxRepeats-o.MinRepeats+1)
		for range n {
			u := r.Float64()
			d := max(time.Duration(float64(tj.Duration)*(1+o.Jitter*(2*r.Float64()-1))), time.Second)
			jobs = append(jobs, Job{Template: t, Duration: d})
			at = append(at, u)
			offered += s.GPUs * d.Hours()
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

// LoadPhilly reads the Philly extract at path (tracereplay.ReadPhilly with
// o.Seed), takes its busiest o.Window and makes the recurring workload of
// it (Recur). source says what was picked and ends with the Philly
// attribution, which is to be shown with any figures derived from it.
func LoadPhilly(path string, o Options) (jobs []Job, source string, err error) {
	o = o.withDefaults()
	f, err := os.Open(path)
	if err != nil {
		return nil, "", err
	}
	defer f.Close()
	all, epoch, _, err := tracereplay.ReadPhilly(f, tracereplay.PhillyOptions{Seed: o.Seed})
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", path, err)
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
	// GPUHours are the GPU-hours it held (Given × GPUsPerUnit × Runtime);
	// UsedGPUHours those its work used (TrueUse × asked count ×
	// GPUsPerUnit × Duration), whatever it was given.
	GPUHours, UsedGPUHours float64
	// RuntimeModel and RuntimeBaseline were predicted as it started
	// (predict.Runtime with elapsed 0, predict.RuntimeBaseline); WaitModel
	// and WaitBaseline at its arrival (predict.Wait, predict.WaitBaseline),
	// each from the history then.
	RuntimeModel, RuntimeBaseline, WaitModel, WaitBaseline predict.Estimate
}

// Result is a Replay's runs, in the order of the jobs passed, and the
// prediction errors.
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
// it.
//
// At each arrival the wait is predicted (model: predict.Wait with the
// pool's free units, the running runs' predict.Runtime remaining and the
// queued runs ahead; baseline: predict.WaitBaseline), and at each start
// the run time, from the history of all runs so far. Runs in the history
// carry times from a fixed base; jobs need not be sorted, and are replayed
// by arrival, then ID.
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
				given.Count = o.Size(j.Template, hist)
			}
			given.Count = max(1, min(given.Count, perNode[predict.UnitOf(given)]))
			res.Runs[i] = Run{Job: j, Given: given}
			hist = append(hist, history.Run{
				Key: j.Template.Key, AllocID: j.ID, Slice: given, Pool: Pool,
				Priority: j.Template.Priority, Created: at(now), Outcome: history.OutcomeRunning,
			})
			histRun = append(histRun, i)
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
			if need := j.Template.TrueUse * float64(j.Template.Slice.Count); need > float64(h.Slice.Count) {
				rt = time.Duration(float64(rt) * need / float64(h.Slice.Count))
			}
			r.Start, r.Wait, r.Runtime, r.Finish = now, now-j.Arrival, rt, now+rt
			r.GPUHours = float64(h.Slice.Count) * j.Template.GPUsPerUnit * rt.Hours()
			r.UsedGPUHours = j.Template.TrueUse * float64(j.Template.Slice.Count) * j.Template.GPUsPerUnit * j.Duration.Hours()
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
	return b.String()
}
