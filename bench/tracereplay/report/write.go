package report

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/nomad-gpu/nomad-gpu/bench/tracereplay"
	"github.com/nomad-gpu/nomad-gpu/bench/tracereplay/figures"
	"github.com/nomad-gpu/nomad-gpu/bench/tracereplay/model"
	"github.com/nomad-gpu/nomad-gpu/internal/snapshot"
)

// Run is one `make bench-trace` run: the trace, and what each engine
// measured for each configuration.
type Run struct {
	Title string
	// Trace's Source and jobs go into the method section.
	Trace tracereplay.Trace
	Seed  int64
	// Attribution is printed verbatim (the trace's licence asks for it).
	Attribution string
	// Real are the results of engine "nomad", one per configuration, the
	// first being the baseline; empty for a model-only run.
	Real []tracereplay.Result
	// Model are the results of engine "model", one per configuration.
	Model []tracereplay.Result
	// Started and Elapsed are the run's, in wall-clock time.
	Started time.Time
	Elapsed time.Duration
	// Prices price the node-hours (figures.Figures.Cost).
	Prices figures.Prices
	// Notes say how the sample was adjusted (Setup.Notes).
	Notes []string
	// Latencies are the model's, per Model result, where calibrated from
	// a real run.
	Latencies []tracereplay.Latencies

	// fluid is the fluid pool's figures on the run's sample (Write sets
	// it; withFluid).
	fluid *Figures
	// realAlone and modelAlone are the results of a queue alone
	// (aloneRuns), which Write takes out of Real and Model.
	realAlone, modelAlone []tracereplay.Result
}

// aloneRuns takes the results of a queue's jobs alone (Config.Alone) out
// of rs, and their latencies out of lats (as long as rs, or nil): they
// ran a part of the sample, so the tables of the whole leave them out
// (their JCT has no job in common with the others), and the queues'
// table holds their waits.
func aloneRuns(rs []tracereplay.Result, lats []tracereplay.Latencies) (whole, alone []tracereplay.Result, wholeLats []tracereplay.Latencies) {
	for i, r := range rs {
		if r.Config.Alone != "" {
			alone = append(alone, r)
			continue
		}
		whole = append(whole, r)
		if i < len(lats) {
			wholeLats = append(wholeLats, lats[i])
		}
	}
	return whole, alone, wholeLats
}

// withFluid runs the fluid reference (model.Fluid) on the run's sample,
// with the cluster, horizon and compression of its first result, for
// the packing loss of every configuration of either engine. A cluster
// with no fixed nodes has no pool to compare with: none is run.
func (run Run) withFluid() (Run, error) {
	rs := run.Real
	if len(rs) == 0 {
		rs = run.Model
	}
	r0 := rs[0]
	if r0.Cluster.Nodes == 0 {
		return run, nil
	}
	fl, err := model.Fluid(run.Trace, model.Options{Cluster: r0.Cluster, Compression: r0.Compression, Horizon: r0.Horizon, Seed: run.Seed})
	if err != nil {
		return run, fmt.Errorf("fluid reference: %w", err)
	}
	f := figures.Compute(fl, figures.Options{})
	run.fluid = &f
	return run, nil
}

// compute is the figures of an engine's results: each against the
// sample's request mix under its configuration, JCT over the jobs all of
// them finished.
func (run Run) compute(rs []tracereplay.Result) []Figures {
	common := figures.CommonDone(rs)
	out := make([]Figures, len(rs))
	for i, r := range rs {
		out[i] = figures.Compute(r, figures.Options{
			Mix: figures.MixOf(run.Trace.Jobs, r.Cluster, r.Config.Features), Common: common, Prices: run.Prices,
		})
		if run.fluid != nil {
			out[i].SetFluid(*run.fluid)
		}
	}
	return out
}

// Write writes dir/report.md and the PNG plots it links to, creating dir.
func Write(dir string, run Run) error {
	if len(run.Real) == 0 && len(run.Model) == 0 {
		return errors.New("report: the run has no results")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	all := run
	run.Real, run.realAlone, _ = aloneRuns(run.Real, nil)
	run.Model, run.modelAlone, run.Latencies = aloneRuns(run.Model, run.Latencies)
	if len(run.Real) == 0 && len(run.Model) == 0 {
		return errors.New("report: the run has only configurations of a queue alone; allowed: those with others")
	}
	run, err := run.withFluid()
	if err != nil {
		return err
	}
	var b strings.Builder
	title := run.Title
	if title == "" {
		title = "Trace replay"
	}
	fmt.Fprintf(&b, "# %s\n\n", title)
	writeMethod(&b, all)

	main, mainWho := run.Real, "Real cluster (engine nomad)"
	if len(main) == 0 {
		main, mainWho = run.Model, "Model (engine model; no real run)"
	}
	fmt.Fprintf(&b, "## Results: %s\n\n", mainWho)
	mainFigs := run.compute(main)
	writeTable(&b, main, mainFigs, nil)
	fmt.Fprintf(&b, definitions, run.Prices.Reserved, run.Prices.OnDemand)
	if hasSpot(all.Model) || hasSpot(all.Real) {
		fmt.Fprintf(&b, spotDefinitions, run.Prices.Spot, spotRate(slices.Concat(all.Real, all.Model)))
	}
	writeWaitBreakdown(&b, main, mainFigs)
	writeTeams(&b, main, mainFigs)
	mainAlone := run.realAlone
	if len(run.Real) == 0 {
		mainAlone = run.modelAlone
	}
	writeQueues(&b, main, mainFigs, mainAlone)
	writeDistortion(&b, all.Real)

	if len(run.Real) > 0 && len(run.Model) > 0 {
		b.WriteString("## Model\n\n")
		b.WriteString(calibrationNote)
		writeLatencies(&b, run.Model, run.Latencies)
		modelFigs, realFigs := run.compute(run.Model), run.compute(run.Real)
		writeTable(&b, run.Model, modelFigs, pairUp(run.Model, run.Real, realFigs))
		writeWaitBreakdown(&b, run.Model, modelFigs)
		writeTeams(&b, run.Model, modelFigs)
		writeQueues(&b, run.Model, modelFigs, run.modelAlone)
		writeCalibration(&b, run.Model, modelFigs, pairUp(run.Model, run.Real, realFigs))
	}

	b.WriteString("## Plots\n\n")
	for _, set := range []struct {
		prefix, who string
		rs          []tracereplay.Result
	}{{"real", "Real cluster", run.Real}, {"model", "Model", run.Model}} {
		if len(set.rs) == 0 {
			continue
		}
		rs := set.rs[:min(len(set.rs), snapshot.MaxSeries)]
		fmt.Fprintf(&b, "### %s\n\n", set.who)
		if len(rs) < len(set.rs) {
			fmt.Fprintf(&b, "The plots show the first %d of %d configurations; the tables have them all.\n\n", len(rs), len(set.rs))
		}
		plots, err := writePlots(dir, set.prefix, set.who, rs, run.Trace.Jobs)
		if err != nil {
			return err
		}
		for _, p := range plots {
			fmt.Fprintf(&b, "![%s](%s)\n\n", p.Caption, p.File)
		}
	}
	writeNotes(&b, all)
	if err := writeIncomplete(dir, all.Real); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "report.md"), []byte(b.String()), 0o644)
}

// IncompleteFile is where Write puts the real runs' incomplete records.
const IncompleteFile = "incomplete-records.md"

// writeIncomplete writes dir/IncompleteFile with each incomplete record's
// evidence, when a real result has any.
func writeIncomplete(dir string, real []tracereplay.Result) error {
	var b strings.Builder
	for _, r := range real {
		for _, in := range r.Incomplete {
			fmt.Fprintf(&b, "## %s: job %s, allocation %s on %s\n\nCause: %s.\n\n", r.Config.Name, in.Job, in.Alloc, in.Node, in.Cause())
			for _, part := range []struct{ name, text string }{{"Task log", in.TaskLog}, {"Task events", in.Events}, {"Agent log lines", in.AgentLog}} {
				fmt.Fprintf(&b, "%s:\n\n```\n%s\n```\n\n", part.name, strings.TrimSpace(part.text))
			}
		}
	}
	if b.Len() == 0 {
		return nil
	}
	head := "# Incomplete records\n\nInterrupted runs whose task logged neither a commit nor a stop, with the evidence the real run kept.\n\n"
	return os.WriteFile(filepath.Join(dir, IncompleteFile), []byte(head+b.String()), 0o644)
}

const definitions = `How each figure is computed (package tracereplay/figures; all times trace time, over [0, horizon]):

- Capacity is ∫ GPUs of ready nodes dt. GPU allocated is Σ held GPU-equivalents × run time / capacity, from each job's own runs; useful allocation counts what the job asked for instead (a 0.25-GPU job on a whole GPU: 0.25); busy is useful × the job's utilisation. The telemetry rows are the cluster exporter's allocated and busy-of-held figures, a cross-check.
- Fragmentation (FGD, Weng et al., USENIX ATC 2023): the expected free capacity, in GPU-equivalents, that a request drawn from this sample's mix of request shapes cannot use (a node where the shape does not fit counts all its free capacity; else its free capacity of other device kinds and its partial GPUs with less free than asked), over capacity and over free capacity. With layouts that follow the queue, a GPU no run holds counts as free for every kind the planner can make of it (FGD's own model, where any free GPU takes any request), a partly held MPS GPU as shares; "layouts as they stood" counts each GPU as the kind it was laid out as at the instant (an idle MPS GPU unusable by a whole-GPU request, a free whole GPU by a share request), what fragmentation would be were no other GPU relaid.
- A wait runs from the job's actual submission to its first start, plus each re-wait from a preemption or move to the next start; jobs still waiting at the horizon count their wait so far (censored: lower bounds when "unstarted" is not 0).
- JCT is finish − submission, over the jobs every configuration of this table finished.
- Moves: runs the controller stopped to move them, to free a node for a queued job asking for more whole GPUs than any node has free (consolidation), or, with scale-in by consolidation, to empty a quiet node for the autoscaler to remove; their re-waits and lost work count as a preemption's. Moving GPU-hours: each moved run's GPUs × the time from its stop to its next start.
- Lost GPU-hours: per preemption or move, the progress saved by the checkpoint (all progress without one) minus the progress the next run restored, × GPUs held. Commit-to-exit GPU-hours is the work done between a checkpoint's commit and the task's exit: a latency of the machine × compression, shown apart.
- Layout changes: the GPU layout changes applied, to MPS shares and to whole, with layouts that follow the queue; under them fragmentation takes each node's GPUs as they were at the time.
- The fluid pool is the model's reference for packing (the same for both engines): one pool of the cluster's GPU-equivalents (the -nodes GPUs; an autoscaled configuration, or one given more nodes, has more GPUs than it at times, so its ratio is not packing alone), where a job takes exactly what it asks for (a 0.25-GPU job 0.25) and runs the instant it is placed, never preempted, the jobs taken in the model's scheduling order (priority, then arrival) with backfill. Packing loss is a configuration's wait mean over the fluid pool's: what node boundaries, whole GPUs and shares, device kinds and latencies add, the order being the same. Both rows are left out of the calibration.
- Cost: the fixed nodes (an autoscaled pool's minimum) at %g per node-hour for the whole horizon, node-hours above it at %g (on demand).

`

// spotDefinitions says how spot capacity is modelled and priced, where
// a configuration has it.
const spotDefinitions = `Spot capacity (nomad-gpu-spot; the model only, bench/tracereplay/model/spot.go): the pool's minimum stays reserved; its burst nodes are spot nodes, which only checkpointing work enters (in the replay every job but those bigger than a node, which get on-demand nodes of their own). Spot node-hours are priced at %g. Each spot node is reclaimed after an exponential time of rate %g per spot node-hour of trace time (0: never); on the notice its work is stopped, commits its checkpoint and waits again to resume elsewhere, and the node is gone two minutes later. Spot reclaims count those runs (in no preemption or move count), reclaim GPU-hours their GPUs × the time from the stop to the next start, and their lost GPU-hours (part of lost GPU-hours) what they did not keep.

`

// hasSpot says whether one of rs ran with spot nodes.
func hasSpot(rs []tracereplay.Result) bool {
	return slices.ContainsFunc(rs, func(r tracereplay.Result) bool { return r.Config.Spot })
}

// spotRate is the reclaim rate of the first of rs with spot nodes.
func spotRate(rs []tracereplay.Result) float64 {
	if i := slices.IndexFunc(rs, func(r tracereplay.Result) bool { return r.Config.Spot }); i >= 0 {
		return rs[i].Cluster.SpotReclaimRate
	}
	return 0
}

// writeWaitBreakdown writes the mean wait by priority and by request kind.
func writeWaitBreakdown(b *strings.Builder, rs []tracereplay.Result, fs []Figures) {
	tiers, kinds := map[int]bool{}, map[string]bool{}
	for _, f := range fs {
		for p := range f.WaitByTier {
			tiers[p] = true
		}
		for k := range f.WaitByKind {
			kinds[k] = true
		}
	}
	b.WriteString("Mean wait (with re-waits) by job priority and by request:\n\n| jobs |")
	for _, r := range rs {
		fmt.Fprintf(b, " %s |", cellText(r.Config.Name))
	}
	b.WriteString("\n|---|" + strings.Repeat("---:|", len(rs)) + "\n")
	line := func(label string, get func(Figures) figures.Dist) {
		fmt.Fprintf(b, "| %s |", label)
		for _, f := range fs {
			d := get(f)
			fmt.Fprintf(b, " %s (%d) |", Human(d.Mean), d.N)
		}
		b.WriteString("\n")
	}
	for _, p := range slices.Sorted(maps.Keys(tiers)) {
		line(fmt.Sprintf("priority %d", p), func(f Figures) figures.Dist { return f.WaitByTier[p] })
	}
	for _, k := range slices.Sorted(maps.Keys(kinds)) {
		line(k, func(f Figures) figures.Dist { return f.WaitByKind[k] })
	}
	b.WriteString("\n")
}

// writeTeams writes each team's share of the useful GPU-hours and its
// mean wait, in every configuration; nothing when no job has a team.
func writeTeams(b *strings.Builder, rs []tracereplay.Result, fs []Figures) {
	teams := map[string]bool{}
	for _, f := range fs {
		for t := range f.WaitByTeam {
			teams[t] = true
		}
	}
	if len(teams) == 0 {
		return
	}
	b.WriteString("By team (the jobs' team: Philly's virtual cluster): its share of the useful GPU-hours, and its mean wait (with re-waits):\n\n| team |")
	for _, r := range rs {
		fmt.Fprintf(b, " %s |", cellText(r.Config.Name))
	}
	b.WriteString("\n|---|" + strings.Repeat("---:|", len(rs)) + "\n")
	for _, t := range slices.Sorted(maps.Keys(teams)) {
		fmt.Fprintf(b, "| %s |", cellText(t))
		for _, f := range fs {
			total := 0.0
			for _, h := range f.UsefulGPUHoursByTeam {
				total += h
			}
			share := 0.0
			if total > 0 {
				share = f.UsefulGPUHoursByTeam[t] / total
			}
			d := f.WaitByTeam[t]
			fmt.Fprintf(b, " %.1f %%, %s (%d) |", 100*share, Human(d.Mean), d.N)
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
}

// writeQueues writes, with Cluster.Teams, each team queue's weight share,
// its share of the queues' GPU-time while every queue had work waiting and its
// mean wait in every configuration, its mean wait alone on its nominal
// quota in the configurations with queues (the model's), and its mean
// wait in the run's own configurations of it alone (alone, this engine's).
func writeQueues(b *strings.Builder, rs []tracereplay.Result, fs []Figures, alone []tracereplay.Result) {
	if len(rs) == 0 {
		return
	}
	names, shares := rs[0].Cluster.Queues()
	if len(names) < 2 {
		return
	}
	b.WriteString("Team queues (-teams): each queue's weight share (its nominal quota's share of the cluster, and its fair share); its share of the queues' GPU-time while every queue had work waiting, and its mean wait (with re-waits)")
	var modelled []int
	for i, r := range rs {
		if r.QueueAlone != nil {
			modelled = append(modelled, i)
		}
	}
	if len(modelled) > 0 {
		b.WriteString("; and, for a configuration with queues, its mean wait with its jobs alone on its nominal quota, the model at that configuration's latencies")
	}
	if len(alone) > 0 {
		fmt.Fprintf(b, "; and its mean wait in this run's configuration of its jobs alone on its nominal quota (engine %s)", alone[0].Engine)
	}
	b.WriteString(":\n\n| queue | weight share |")
	for _, r := range rs {
		fmt.Fprintf(b, " %s |", cellText(r.Config.Name))
	}
	for _, i := range modelled {
		fmt.Fprintf(b, " alone on its nominal, model (%s) |", cellText(rs[i].Config.Name))
	}
	if len(alone) > 0 {
		b.WriteString(" alone on its nominal, run |")
	}
	b.WriteString("\n|---|---:|" + strings.Repeat("---:|", len(rs)+len(modelled)+min(1, len(alone))) + "\n")
	for q, name := range names {
		fmt.Fprintf(b, "| %s | %.1f %% |", cellText(name), 100*shares[q])
		for _, f := range fs {
			fmt.Fprintf(b, " %.1f %%, %s |", 100*figures.Shares(f.QueueWaitGPUSeconds)[name], Human(f.WaitByQueue[name].Mean))
		}
		for _, i := range modelled {
			fmt.Fprintf(b, " %s |", Human(rs[i].QueueAlone[name]))
		}
		if len(alone) > 0 {
			b.WriteString(" " + aloneWait(alone, name) + " |")
		}
		b.WriteString("\n")
	}
	b.WriteString("\nRuns taken back by the queues (for a lender, or for their own work 10 above):")
	for i, r := range rs {
		fmt.Fprintf(b, " %s %d;", r.Config.Name, fs[i].Reclaims)
	}
	b.WriteString("\n\n")
}

// aloneWait is queue q's mean wait (its jobs, censored unstarted
// included) in the result of its jobs alone: "not run" where none is.
func aloneWait(alone []tracereplay.Result, q string) string {
	i := slices.IndexFunc(alone, func(r tracereplay.Result) bool { return r.Config.Alone == q })
	if i < 0 {
		return "not run"
	}
	d := figures.DistOf(figures.Waits(alone[i]))
	return fmt.Sprintf("%s (%d)", Human(d.Mean), d.N)
}

// writeDistortion writes what the real runs measured of their own
// faithfulness, against the limits.
func writeDistortion(b *strings.Builder, real []tracereplay.Result) {
	if len(real) == 0 {
		return
	}
	b.WriteString("### Distortion of the real run\n\n")
	fmt.Fprintf(b, "What the machine added, wall clock. Limits: submission lag p95 ≤ %s, median start × compression ≤ %s of trace time, CPU busy ≤ %.0f %%.\n\n",
		tracereplay.MaxSubmitLagP95, tracereplay.MaxStartTrace, 100*tracereplay.MaxCPUBusy)
	b.WriteString("| configuration | submission lag p50 / p95 | start p50 / p95 / p99 | start p50 in trace time | preemption p50 | CPU busy | within limits |\n|---|---:|---:|---:|---:|---:|---|\n")
	for _, r := range real {
		d := r.Distortion
		if d == nil {
			fmt.Fprintf(b, "| %s | – | – | – | – | – | not measured |\n", cellText(r.Config.Name))
			continue
		}
		ok := "yes"
		if v := d.Violations(r.Compression); len(v) > 0 {
			ok = "no: " + strings.Join(v, "; ")
		}
		fmt.Fprintf(b, "| %s | %s / %s | %s / %s / %s | %s | %s | %.0f %% | %s |\n", cellText(r.Config.Name),
			Human(d.SubmitLagP50), Human(d.SubmitLagP95), Human(d.StartP50), Human(d.StartP95), Human(d.StartP99),
			Human(time.Duration(float64(d.StartP50)*r.Compression)), Human(d.PreemptP50), 100*d.CPUBusy, ok)
	}
	b.WriteString("\n")
}

// writeLatencies writes the latencies each model result was calibrated
// with.
func writeLatencies(b *strings.Builder, model []tracereplay.Result, lats []tracereplay.Latencies) {
	if len(lats) != len(model) {
		return
	}
	b.WriteString("The model's latencies, from the real run of each configuration (wall clock, × compression in trace time): start is the scheduler's placement of a job its first evaluation placed plus placement to running (medians), and its tail that start plus the run's 95th and 99th percentiles of placement to running less their median (the model draws each start from these; – where the run measured none); by kind, the same for the starts of whole GPUs, MPS shares and MIG instances apart, where the run measured at least 10 of a kind (a kind without takes the start); preemption is a preemptor's placement to its victim stopped (median), and of it, with checkpoints, commit to exit is the victim's checkpoint commit to its exit (median); boot is a node's start to its GPUs offered, where the run started nodes, else the pool's first nodes' start.\n\n")
	b.WriteString("Relayout is a GPU layout change's latency, from the controller's decision to the new layout placeable, with layouts that follow the queue: the real run's median and 95th percentile (its mean in records without the percentile) from the controller's ask to the node list showing the layout offered (its nomad_gpu_controller_layout_apply_seconds, interpolated within its buckets; tracereplay.DefaultLayoutLatency where the run applied none), each relayout's latency drawn from them as a start's is. Until tracereplay.LayoutSwitch before that the model offers the GPU as it was, as the servers do until they see it drained: a placement on it before the plugin reads the decision (tracereplay.LayoutPoll / 2) abandons the relayout, one after is refused and placed again.\n\n")
	b.WriteString("| configuration | start | start p95 / p99 | start by kind | preemption | commit to exit | boot | relayout |\n|---|---:|---:|---|---:|---:|---:|---:|\n")
	wall := func(d time.Duration) string {
		if d < time.Second {
			return fmt.Sprintf("%d ms", d.Milliseconds())
		}
		return Human(d)
	}
	for i, m := range model {
		l := lats[i]
		preempt, commit := "–", "–"
		if m.Config.Preemption {
			preempt = wall(l.Preempt)
		}
		if m.Config.Preemption && m.Config.Checkpoints {
			commit = wall(min(l.CommitExit, l.Preempt))
		}
		relayout := "–"
		if m.Config.Layouts {
			relayout = wall(l.LayoutOr())
			if l.LayoutP95 > l.Layout {
				relayout += " (p95 " + wall(l.LayoutP95) + ")"
			}
		}
		tail := "–"
		if l.StartP95 > l.Start {
			tail = wall(l.StartP95) + " / " + wall(max(l.StartP95, l.StartP99))
		}
		var kinds []string
		for _, k := range slices.Sorted(maps.Keys(l.StartByKind)) {
			sp := l.StartByKind[k]
			kinds = append(kinds, fmt.Sprintf("%s %s (p95 %s)", k, wall(sp.P50), wall(sp.P95)))
		}
		byKind := "–"
		if len(kinds) > 0 {
			byKind = strings.Join(kinds, ", ")
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", cellText(m.Config.Name), wall(l.Start), tail, byKind, preempt, commit, wall(l.Boot), relayout)
	}
	b.WriteString("\n")
}

// pairUp is, for each model result, the real figures of the same
// configuration; nil where there is none.
func pairUp(model, real []tracereplay.Result, realFigs []Figures) []*Figures {
	out := make([]*Figures, len(model))
	for i, m := range model {
		if j := indexOf(real, m.Config.Name); j >= 0 {
			out[i] = &realFigs[j]
		}
	}
	return out
}

func writeMethod(b *strings.Builder, run Run) {
	all := slices.Concat(run.Real, run.Model)
	c := all[0].Cluster
	b.WriteString("## Method\n\n")
	fmt.Fprintf(b, "- Cluster: %s.\n", clusterShape(c))
	for _, r := range all[1:] {
		if !reflect.DeepEqual(r.Cluster, c) {
			fmt.Fprintf(b, "- Warning: %s %q ran on a different cluster: %s.\n", r.Engine, r.Config.Name, clusterShape(r.Cluster))
		}
	}
	fmt.Fprintf(b, "- Trace: %s; %d jobs, last arrival at %s; seed %d.\n", orNone(run.Trace.Source), len(run.Trace.Jobs), Human(run.Trace.Span()), run.Seed)
	for _, set := range []struct {
		engine string
		rs     []tracereplay.Result
	}{{"nomad", run.Real}, {"model", run.Model}} {
		if len(set.rs) == 0 {
			continue
		}
		var versions, compressions, horizons []string
		for _, r := range set.rs {
			versions = appendNew(versions, orNone(r.Version))
			compressions = appendNew(compressions, fmt.Sprintf("%g×", r.Compression))
			horizons = appendNew(horizons, Human(r.Horizon))
		}
		verb := "ran at"
		if set.engine == "model" {
			verb = "calibrated for"
		}
		fmt.Fprintf(b, "- Engine %s: version %s, %d configurations; %s compression %s (trace seconds per wall-clock second); horizon %s.\n",
			set.engine, strings.Join(versions, ", "), len(set.rs), verb, strings.Join(compressions, ", "), strings.Join(horizons, ", "))
	}
	if run.Started.IsZero() {
		fmt.Fprintf(b, "- Run: took %s (wall clock).\n", Human(run.Elapsed))
	} else {
		fmt.Fprintf(b, "- Run: started %s, took %s (wall clock).\n", run.Started.UTC().Format("2006-01-02 15:04:05 UTC"), Human(run.Elapsed))
	}
	b.WriteString("\n| configuration | slices | preemption | autoscale | nodes | reference |\n|---|---|---|---|---|---|\n")
	seen := map[string]bool{}
	for _, r := range all {
		if seen[r.Config.Name] {
			continue
		}
		seen[r.Config.Name] = true
		f := r.Config.Features
		preempt := "no"
		switch {
		case f.Checkpoints:
			preempt = "with checkpoints"
		case f.Preemption:
			preempt = "stock (restart)"
		}
		nodes := fmt.Sprint(r.Config.StartNodes(r.Cluster))
		if f.Autoscale != "" {
			nodes = fmt.Sprintf("%d–%d", r.Cluster.MinNodes, r.Cluster.MaxNodes)
		} else if r.Config.NodesLike != "" {
			nodes += " (node-hours of " + r.Config.NodesLike + ")"
		}
		slices := "no"
		switch {
		case f.Slices:
			slices = "static"
		case f.Layouts:
			slices = "layouts follow the queue"
		}
		autoscale := orNone(f.Autoscale)
		if f.ScaleIn {
			autoscale += ", scale-in by consolidation"
		}
		if f.Spot {
			autoscale += fmt.Sprintf(", burst nodes spot (reclaims: %g a node-hour)", r.Cluster.SpotReclaimRate)
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s |\n", cellText(r.Config.Name), slices, preempt, autoscale, nodes, yesNo(r.Config.Reference))
	}
	b.WriteString("\n")
	if run.Attribution != "" {
		fmt.Fprintf(b, "%s\n\n", run.Attribution)
	}
}

func clusterShape(c tracereplay.Cluster) string {
	s := fmt.Sprintf("%s (autoscaled configurations: %d to %d), %s per node", plural(c.Nodes, "node"), c.MinNodes, c.MaxNodes, plural(c.GPUsPerNode, "GPU"))
	var with []string
	if c.MPSGPUs > 0 {
		with = append(with, fmt.Sprintf("%s as %d MPS shares each", plural(c.MPSGPUs, "GPU"), c.MPSShares))
	}
	if c.MIGGPUs > 0 {
		with = append(with, fmt.Sprintf("%s in MIG mode as %s", plural(c.MIGGPUs, "GPU"), strings.Join(c.MIGProfiles, " + ")))
	}
	if len(with) == 0 {
		return s + "; no static MPS or MIG" + layoutsShape(c)
	}
	return s + "; with slices, per node " + strings.Join(with, " and ") + fmt.Sprintf(", %d whole", c.WholeGPUs(tracereplay.Features{Slices: true})) +
		layoutsShape(c)
}

// layoutsShape says what a node is under layouts that follow the queue.
func layoutsShape(c tracereplay.Cluster) string {
	return fmt.Sprintf("; with layouts, every GPU whole at first, relaid as %d MPS shares as the queue needs", c.Shares())
}

// writeTable writes one row per figure and one column per result; with
// real figures, each cell has its calibration error against the real
// result of the same configuration, where there is one.
func writeTable(b *strings.Builder, rs []tracereplay.Result, fs []Figures, real []*Figures) {
	b.WriteString("| figure |")
	for _, r := range rs {
		fmt.Fprintf(b, " %s |", cellText(r.Config.Name))
	}
	b.WriteString("\n|---|" + strings.Repeat("---:|", len(rs)) + "\n")
	for _, rw := range tableRows(hasSpot(rs)) {
		fmt.Fprintf(b, "| %s |", rw.name)
		for i := range rs {
			if i < len(real) && real[i] != nil {
				fmt.Fprintf(b, " %s |", rw.calibrated(fs[i], *real[i]))
			} else {
				fmt.Fprintf(b, " %s |", rw.cell(fs[i]))
			}
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
}

// calibrationNote says how the model's errors are counted, once per
// report.
const calibrationNote = "Each cell is the model's figure with its calibration error against the real run of the same configuration. " +
	"Shares (%) by their difference, in percentage points; counts as |model − real| / max(real, 10); durations as |model − real| / max(real, 60 s); " +
	"GPU-hours, node-hours (re-wait hours among them) and cost as |model − real| / max(real, 1). Figures whose real value is 0 count too.\n\n"

// overThreshold is the error above which a figure is listed apart.
const overThreshold = 0.25

func writeCalibration(b *strings.Builder, model []tracereplay.Result, fs []Figures, real []*Figures) {
	b.WriteString("### Calibration\n\n")
	b.WriteString("Mean calibration error per configuration (a point of a share counts as 1 %; cross-checks and the fluid pool's rows left out), the worst figure, and every figure over 25 %:\n\n")
	for i, m := range model {
		if real[i] == nil {
			fmt.Fprintf(b, "- %s: no real run to compare with.\n", m.Config.Name)
			continue
		}
		c := calibration(fs[i], *real[i])
		if len(c.errs) == 0 {
			fmt.Fprintf(b, "- %s: no figure recorded by both engines.\n", m.Config.Name)
			continue
		}
		worst := c.worst()
		fmt.Fprintf(b, "- %s: %s over %d figures; worst %s (%s)", m.Config.Name, percentText(c.mean()), len(c.errs), worst.name, percentText(worst.err))
		var over []string
		for _, e := range c.errs {
			if e.err > overThreshold {
				over = append(over, fmt.Sprintf("%s %s", e.name, percentText(e.err)))
			}
		}
		if len(over) > 0 {
			fmt.Fprintf(b, "; over 25 %%: %s", strings.Join(over, ", "))
		}
		b.WriteString(".\n")
	}
	b.WriteString("\n")
}

// figureError is one figure's calibration error.
type figureError struct {
	name string
	err  float64
}

// calibrationOf is the calibration errors of one configuration's
// figures, in row order.
type calibrationOf struct{ errs []figureError }

func (c calibrationOf) mean() float64 {
	var sum float64
	for _, e := range c.errs {
		sum += e.err
	}
	return sum / float64(len(c.errs))
}

// worst is the figure with the largest error, the first of equals.
func (c calibrationOf) worst() figureError {
	w := c.errs[0]
	for _, e := range c.errs[1:] {
		if e.err > w.err {
			w = e
		}
	}
	return w
}

// calibration is the calibration error of model figures m against real
// figures r, per figure both recorded (cross-checks left out: they are
// not the figures the report is read for).
func calibration(m, r Figures) calibrationOf {
	var c calibrationOf
	for _, rw := range rows {
		if rw.check || !rw.recorded(m) || !rw.recorded(r) {
			continue
		}
		c.errs = append(c.errs, figureError{rw.name, calibrationError(rw.kind, rw.get(m), rw.get(r))})
	}
	return c
}

func writeNotes(b *strings.Builder, run Run) {
	var notes []string
	for _, n := range run.Notes {
		notes = append(notes, "- "+n+"\n")
	}
	for _, r := range slices.Concat(run.Real, run.Model) {
		for _, n := range r.Notes {
			notes = append(notes, fmt.Sprintf("- %s, %s: %s\n", r.Engine, r.Config.Name, n))
		}
	}
	if len(notes) == 0 {
		return
	}
	b.WriteString("## Notes\n\nWhat the engines saw that the figures do not show.\n\n")
	b.WriteString(strings.Join(notes, ""))
	b.WriteString("\n")
}

func indexOf(rs []tracereplay.Result, name string) int {
	return slices.IndexFunc(rs, func(r tracereplay.Result) bool { return r.Config.Name == name })
}

func appendNew(ss []string, s string) []string {
	if slices.Contains(ss, s) {
		return ss
	}
	return append(ss, s)
}

// cellText keeps a configuration name from breaking a Markdown table.
func cellText(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
