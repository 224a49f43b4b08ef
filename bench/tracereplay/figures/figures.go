// Package figures defines, once, every figure the trace replay reports,
// and computes them from a tracereplay.Result. Both engines (the real
// Nomad cluster and the model) produce Results and nothing else; the
// report prints what this package computes. A figure a platform team
// would base a purchase on must mean the same in every column.
//
// The figures are computed from each job's own record (its run
// intervals, what it asked for and held, its checkpoint record), not
// from telemetry: telemetry is kept as a cross-check (Telemetry*). The
// definitions (docs/trace-replay.md repeats them):
//
//   - Capacity is ∫ GPUs of ready nodes dt over [0, Horizon].
//   - Allocated: Σ held GPU-equivalents × run time / capacity. A 0.25-GPU
//     job on a whole GPU holds 1. A gang's (a job bigger than a node, run
//     as members) are its members' runs, each holding its GPUs from its
//     placement (while it waits for its peers too).
//   - Useful allocation: Σ requested GPU-equivalents × run time /
//     capacity. That job counts 0.25. A gang's run time is while every
//     member runs: a member holding GPUs while another waits is not
//     useful.
//   - Partial placement (gangs): Σ over a gang's members of their GPUs ×
//     the time each was placed (from its allocation's placement) while
//     another member of its job was not: what gang admission is for.
//   - Reservation idle: the GPU-hours the reservations' placeholders held
//     (Result.ReservationIdleGPUHours), kept idle for the work they were
//     made for.
//   - Busy: Σ requested × utilisation × run time / capacity.
//   - Fragmentation (FGD, Weng et al., USENIX ATC 2023): at each instant,
//     the expected free capacity, in GPU-equivalents, that a request
//     drawn from the sample's mix of request shapes cannot use: for each
//     shape, a node where it does not fit counts all its free capacity;
//     a node where it fits counts its free capacity on devices of another
//     kind and its partial GPUs with less free than the request. Reported
//     as ∫FGD / capacity and ∫FGD / ∫free. With layouts that follow the
//     queue, a GPU no run holds is free for every kind the planner makes
//     (FGD's own model: any free GPU takes any request); the figure with
//     each GPU's layout as it stood is reported too (FragAsLaid).
//   - Wait: from the job's actual submission to its first start, plus
//     every re-wait, from a preemption's or move's stop to the next start; censored
//     at the horizon for jobs still waiting (Unstarted, or a re-wait
//     unfinished).
//   - JCT: finish − submission, over the jobs finished in every
//     configuration compared (Options.Common).
//   - Moves: runs the controller stopped to move them (consolidation,
//     Features.Moves); their re-waits and lost work count as a
//     preemption's. Moving GPU-hours: each moved run's GPU-equivalents ×
//     the time from its stop to its next start.
//   - Preemptions: runs stopped by a preemption. Preempting placements:
//     allocations placed by the horizon whose placement preempted at
//     least one allocation (counted only where the engine recorded them,
//     PreemptingPlacementsKnown). Preemptions well above preempting
//     placements are preempted jobs preempting in turn: a storm.
//   - Lost work: per preemption or move followed by a resume, the progress the
//     job had saved (its committed checkpoint; all it had reached without
//     one) minus the progress its next run restored, × the GPU-equivalents
//     it held. The work done between a checkpoint's commit and the task's
//     exit is reported apart (StopGapGPUHours, and StopGapP50 in wall
//     time): it is a latency of the machine, not lost progress.
//   - Layout changes: the GPU layout changes applied (to MPS shares, to
//     whole), with layouts that follow the queue. Under them a node's
//     GPUs change over time: fragmentation takes each node's MPS GPUs
//     from the timeline's samples (Sample.Layouts) and its holds from the
//     runs; capacity and allocation count physical GPUs and are the same
//     under any layout.
//   - Packing loss: the mean wait over the fluid pool's (model.Fluid: one
//     pool of the cluster's GPU-equivalents, exact fractions, no
//     latency, the model's scheduling order and backfill) on the same
//     sample and horizon: what node boundaries, device granularity and
//     latencies add to the wait, the order being the same. An
//     autoscaled configuration, or one given more nodes, has more GPUs
//     than the pool at times.
//   - Spot reclaims (Features.Spot): runs stopped because the cloud took
//     their spot node back; their re-waits and lost work count as a
//     preemption's. Reclaim GPU-hours: each reclaimed run's GPU-equivalents
//     × the time from its stop to its next start.
//   - Cost, node by node by its kind: the fixed part of the cluster (a
//     fixed configuration's nodes, an autoscaled one's minimum) at the
//     reserved price for the whole horizon; the spot nodes' node-hours
//     (Sample.Spot) at the spot price; every other node-hour above the
//     fixed part at the on-demand price.
package figures

import (
	"cmp"
	"math"
	"slices"
	"time"

	"github.com/nomad-gpu/nomad-gpu/bench/tracereplay"
	"github.com/nomad-gpu/nomad-gpu/internal/quantile"
)

// Dist summarises durations.
type Dist struct {
	Mean, P50, P95, Max time.Duration
	N                   int
}

// DistOf summarises ds.
func DistOf(ds []time.Duration) Dist {
	xs := make([]float64, len(ds))
	var d Dist
	var sum float64
	for i, v := range ds {
		xs[i] = v.Seconds()
		sum += xs[i]
		d.Max = max(d.Max, v)
	}
	d.N = len(ds)
	if d.N > 0 {
		d.Mean = seconds(sum / float64(d.N))
	}
	d.P50, d.P95 = seconds(quantile.Of(xs, 0.5)), seconds(quantile.Of(xs, 0.95))
	return d
}

// Prices are a node-hour's price, reserved, on demand and spot.
type Prices struct {
	Reserved, OnDemand, Spot float64
}

// Options are what a Result's figures are computed against.
type Options struct {
	// Mix is the sample's request shapes under the configuration (MixOf).
	Mix []Shape
	// Common are the jobs JCT is computed over; nil: every finished job.
	Common map[string]bool
	Prices Prices
}

// Figures summarise one Result over [0, Horizon]. Fractions are 0–1.
type Figures struct {
	CapacityGPUHours float64
	AllocUtil        float64
	UsefulUtil       float64
	BusyUtil         float64
	// TelemetryAlloc and TelemetryBusy are the same from the cluster's
	// telemetry (Sample.Allocated, Sample.Busy): a cross-check.
	TelemetryAlloc, TelemetryBusy float64
	// FragCapacity and FragFree are ∫FGD over ∫capacity and ∫free.
	FragCapacity, FragFree float64
	// FragAsLaid is ∫FGD over ∫capacity with layouts that follow the
	// queue taken as they stood (FGDIntegralAsLaid).
	FragAsLaid float64
	// Wait is each job's whole wait (first wait and re-waits), FirstWait
	// its first only; ReWaitHours sums the re-waits.
	Wait, FirstWait Dist
	ReWaits         int
	ReWaitHours     float64
	// WaitByTier is Wait by job priority, WaitByKind by request kind
	// (RequestKind), WaitByTeam by team (JobRecord.Team; empty when no
	// job has one).
	WaitByTier map[int]Dist
	WaitByKind map[string]Dist
	WaitByTeam map[string]Dist
	// UsefulGPUHoursByTeam is each team's useful GPU-hours (what its jobs
	// asked for × the time they ran, to the horizon): its share of the
	// cluster's work.
	UsefulGPUHoursByTeam map[string]float64
	Unstarted            int
	// Reclaims are the runs taken back for a lending queue or for their
	// own queue's work 10 above (a yield; Features.Queues); QueueWaitGPUSeconds the GPU-time each queue held
	// while every queue had work waiting (its share: Shares of it; nil
	// without Cluster.Teams).
	Reclaims            int
	QueueWaitGPUSeconds map[string]float64
	// WaitByQueue is Wait by team queue (nil without Cluster.Teams).
	WaitByQueue map[string]Dist
	// JCT is over Options.Common (JCT.N of them).
	JCT         Dist
	Done, Jobs  int
	Preemptions int
	// Moves are the runs the controller stopped to move them
	// (consolidation); MoveGPUHours what they cost: the GPU-equivalents
	// each held × the time from its stop to its next start (censored at
	// the horizon), as the controller's move_gpu_seconds counts it.
	Moves        int
	MoveGPUHours float64
	// MoveLooks are the model's consolidation rounds (Result.MoveLooks).
	MoveLooks tracereplay.MoveLooks
	// PreemptingPlacements is valid where PreemptingPlacementsKnown
	// (Result.PlacementsRecorded).
	PreemptingPlacements      int
	PreemptingPlacementsKnown bool
	// PartialGPUHours is the gangs' partial placement; Reservations and
	// ReservationIdleGPUHours are Result's.
	PartialGPUHours         float64
	Reservations            int
	ReservationIdleGPUHours float64
	// WaitBig is Wait over the jobs asking 4 GPUs or more, gangs
	// included: the jobs reservations are for.
	WaitBig Dist
	// LostGPUHours is progress lost (the checkpoint record);
	// StopGapGPUHours the work done after commits and thrown away.
	LostGPUHours, StopGapGPUHours float64
	// StopGapP50 is the median wall-clock gap from commit to exit.
	StopGapP50 time.Duration
	NodeHours  float64
	PeakNodes  int
	// NodeHours by kind, as Cost prices them: ReservedNodeHours the fixed
	// part, paid for the whole horizon (used or not), OnDemandNodeHours
	// the node-hours above it not on spot nodes, SpotNodeHours those on
	// spot nodes.
	ReservedNodeHours, OnDemandNodeHours, SpotNodeHours float64
	// SpotReclaims are the runs stopped by their spot node's reclaim;
	// SpotReclaimGPUHours what they cost in waiting (as MoveGPUHours),
	// SpotLostGPUHours the progress they lost (part of LostGPUHours).
	SpotReclaims                          int
	SpotReclaimGPUHours, SpotLostGPUHours float64
	// UsefulGPUHours are the GPU-hours the jobs asked for, over the time
	// they ran: what CostPerUsefulGPUHour divides by.
	UsefulGPUHours float64
	// LayoutToMPS and LayoutToWhole count the GPU layout changes applied
	// (Result.LayoutChanges); valid where LayoutsKnown: a configuration
	// without layouts changes none, one with them where the engine
	// recorded them.
	LayoutToMPS, LayoutToWhole int
	LayoutsKnown               bool
	// Cost is at Options.Prices; CostPerUsefulGPUHour divides it by the
	// useful GPU-hours.
	Cost, CostPerUsefulGPUHour float64
	// FluidWait is the fluid pool's wait on the same sample, and
	// PackingLoss this wait's mean over it (SetFluid); valid where
	// PackingLossKnown: the pool was run and waited at all.
	FluidWait        Dist
	PackingLoss      float64
	PackingLossKnown bool
}

// SetFluid sets the packing loss of f against the fluid pool's figures.
func (f *Figures) SetFluid(fluid Figures) {
	f.FluidWait = fluid.Wait
	f.PackingLoss, f.PackingLossKnown = 0, fluid.Wait.Mean > 0
	if f.PackingLossKnown {
		f.PackingLoss = f.Wait.Mean.Seconds() / fluid.Wait.Mean.Seconds()
	}
}

// Request kinds of WaitByKind.
const (
	KindFraction = "fraction"
	KindOneGPU   = "1 GPU"
	KindFewGPUs  = "2–3 GPUs"
	// KindManyGPUs is what consolidation (moving checkpointed work to
	// free a node) is for: the asks that fragmentation keeps waiting.
	KindManyGPUs = "4+ GPUs"
	// KindGang is a job bigger than a node, run as members (a gang).
	KindGang = "gang (more than a node)"
)

// RequestKind is what the job asked for, as WaitByKind groups it.
func RequestKind(r tracereplay.JobRecord) string {
	switch {
	case r.Slice.Members > 1:
		return KindGang
	case r.Requested < 1:
		return KindFraction
	case r.Requested < 2:
		return KindOneGPU
	case r.Requested < 4:
		return KindFewGPUs
	}
	return KindManyGPUs
}

// Compute summarises r.
func Compute(r tracereplay.Result, o Options) Figures {
	f := Figures{Jobs: len(r.Jobs), WaitByTier: map[int]Dist{}, WaitByKind: map[string]Dist{}, WaitByTeam: map[string]Dist{},
		UsefulGPUHoursByTeam: map[string]float64{}}
	h := r.Horizon
	capacity := tracereplay.StepIntegral(r.Timeline, h, func(s tracereplay.Sample) float64 { return s.GPUs })
	f.CapacityGPUHours = capacity / 3600
	f.NodeHours = r.NodeHours()
	f.MoveLooks = r.MoveLooks
	for _, s := range r.Timeline {
		if s.At <= h {
			f.PeakNodes = max(f.PeakNodes, s.Nodes)
		}
	}
	var held, useful, busy float64 // GPU-seconds
	for _, j := range r.Jobs {
		for _, run := range j.Runs {
			d := overlap(run.Start, run.End, h).Seconds()
			useful += d * j.Requested
			busy += d * j.Requested * j.Util / 100
			if j.Team != "" {
				f.UsefulGPUHoursByTeam[j.Team] += d * j.Requested / 3600
			}
		}
		runs, gpus := j.Holding()
		for _, run := range runs {
			held += overlap(run.Start, run.End, h).Seconds() * gpus
		}
		f.PartialGPUHours += PartialPlacement(j, h).Hours() * float64(j.Slice.Count)
	}
	f.Reservations, f.ReservationIdleGPUHours = r.Reservations, r.ReservationIdleGPUHours
	if capacity > 0 {
		f.AllocUtil, f.UsefulUtil, f.BusyUtil = held/capacity, useful/capacity, busy/capacity
		f.TelemetryAlloc = tracereplay.StepIntegral(r.Timeline, h, func(s tracereplay.Sample) float64 { return s.Allocated }) / capacity
		f.TelemetryBusy = tracereplay.StepIntegral(r.Timeline, h, func(s tracereplay.Sample) float64 { return s.Busy }) / capacity
	}
	frag, free := FGDIntegral(r, o.Mix)
	if capacity > 0 {
		f.FragCapacity = frag / capacity
		f.FragAsLaid = FGDIntegralAsLaid(r, o.Mix) / capacity
	}
	if free > 0 {
		f.FragFree = frag / free
	}
	f.LayoutToMPS, f.LayoutToWhole = tracereplay.LayoutCounts(r.LayoutChanges)
	f.LayoutsKnown = !r.Config.Layouts || r.LayoutsRecorded
	f.waits(r)
	f.work(r, o.Common)
	f.QueueWaitGPUSeconds = QueueWaitGPUSeconds(r)
	f.cost(r, o.Prices, useful/3600)
	return f
}

// waits fills the wait figures.
func (f *Figures) waits(r tracereplay.Result) {
	var all, first, big []time.Duration
	byTier, byKind, byTeam := map[int][]time.Duration{}, map[string][]time.Duration{}, map[string][]time.Duration{}
	byQueue := map[string][]time.Duration{}
	for _, w := range jobWaits(r) {
		if w.unstarted {
			f.Unstarted++
		}
		f.ReWaits += w.rewaits
		f.ReWaitHours += (w.whole - w.first).Hours()
		first, all = append(first, w.first), append(all, w.whole)
		byTier[w.job.Priority] = append(byTier[w.job.Priority], w.whole)
		byKind[RequestKind(w.job)] = append(byKind[RequestKind(w.job)], w.whole)
		if w.job.Team != "" {
			byTeam[w.job.Team] = append(byTeam[w.job.Team], w.whole)
		}
		if q := r.Cluster.QueueOf(w.job.Team); q != "" {
			byQueue[q] = append(byQueue[q], w.whole)
		}
		if w.job.Requested >= 4 {
			big = append(big, w.whole)
		}
	}
	f.Wait, f.FirstWait, f.WaitBig = DistOf(all), DistOf(first), DistOf(big)
	for p, ws := range byTier {
		f.WaitByTier[p] = DistOf(ws)
	}
	for k, ws := range byKind {
		f.WaitByKind[k] = DistOf(ws)
	}
	for t, ws := range byTeam {
		f.WaitByTeam[t] = DistOf(ws)
	}
	for q, ws := range byQueue {
		if f.WaitByQueue == nil {
			f.WaitByQueue = map[string]Dist{}
		}
		f.WaitByQueue[q] = DistOf(ws)
	}
}

// Waits are the whole waits (first wait and re-waits, censored at the
// horizon) of r's jobs submitted within it, in trace order.
func Waits(r tracereplay.Result) []time.Duration {
	ws := jobWaits(r)
	out := make([]time.Duration, len(ws))
	for i, w := range ws {
		out[i] = w.whole
	}
	return out
}

type jobWait struct {
	job          tracereplay.JobRecord
	first, whole time.Duration
	rewaits      int
	unstarted    bool
}

// jobWaits are the waits of the jobs submitted by the horizon: from the
// actual submission to the first start, and from each preemption's stop
// to the next start.
func jobWaits(r tracereplay.Result) []jobWait {
	h := r.Horizon
	var out []jobWait
	for _, j := range r.Jobs {
		if j.Submitted > h {
			continue // never submitted within the measured period
		}
		w := jobWait{job: j, first: h - j.Submitted, unstarted: len(j.Runs) == 0}
		if !w.unstarted {
			w.first = max(0, j.Runs[0].Start-j.Submitted)
		}
		w.whole = w.first
		for i, run := range j.Runs {
			if !run.Interrupted() || run.End >= h {
				continue
			}
			next := h
			if i+1 < len(j.Runs) {
				next = j.Runs[i+1].Start
			}
			w.rewaits++
			w.whole += max(0, next-run.End)
		}
		out = append(out, w)
	}
	return out
}

// work fills completion, preemption and lost-work figures.
func (f *Figures) work(r tracereplay.Result, common map[string]bool) {
	var jcts, gaps []time.Duration
	for _, j := range r.Jobs {
		if j.Done {
			f.Done++
			if common == nil || common[j.ID] {
				jcts = append(jcts, j.Finish-j.Submitted)
			}
		}
		f.PreemptingPlacements += j.PreemptingPlacements
		for i, run := range j.Runs {
			if !run.Interrupted() {
				continue
			}
			// rewait is the GPU-hours from the run's end to the next start.
			next := r.Horizon
			if i+1 < len(j.Runs) {
				next = min(j.Runs[i+1].Start, r.Horizon)
			}
			rewait := max(0, next-run.End).Hours() * j.Slice.GPUs
			switch {
			case run.Reclaimed:
				f.Reclaims++
			case run.Moved:
				f.Moves++
				f.MoveGPUHours += rewait
			case run.SpotReclaimed:
				f.SpotReclaims++
				f.SpotReclaimGPUHours += rewait
			default:
				f.Preemptions++
			}
			if run.Checkpointed && run.StopGap > 0 {
				gaps = append(gaps, run.StopGap)
			}
			if run.Checkpointed {
				f.StopGapGPUHours += max(0, run.Reached-run.Saved).Hours() * j.Slice.GPUs
			}
			if i+1 >= len(j.Runs) || !run.ProgressKnown || !j.Runs[i+1].ProgressKnown {
				continue // not resumed yet, or its record unread
			}
			kept := run.Reached
			if run.Checkpointed {
				kept = run.Saved
			}
			lost := max(0, kept-j.Runs[i+1].Restored).Hours() * j.Slice.GPUs
			f.LostGPUHours += lost
			if run.SpotReclaimed {
				f.SpotLostGPUHours += lost
			}
		}
	}
	f.PreemptingPlacementsKnown = r.PlacementsRecorded
	f.JCT = DistOf(jcts)
	f.StopGapP50 = DistOf(gaps).P50
}

// cost prices the node-hours by the nodes' kinds: the fixed part
// reserved, the spot nodes' at the spot price, the rest on demand. The
// fixed part is never spot (an autoscaled pool's minimum stays reserved),
// so the on-demand node-hours are those of the other nodes above it.
func (f *Figures) cost(r tracereplay.Result, p Prices, usefulGPUHours float64) {
	fixed := float64(r.Config.ReservedNodes(r.Cluster)) * r.Horizon.Hours()
	f.SpotNodeHours = tracereplay.StepIntegral(r.Timeline, r.Horizon, func(s tracereplay.Sample) float64 { return float64(s.Spot) }) / 3600
	f.ReservedNodeHours = fixed
	f.OnDemandNodeHours = max(0, f.NodeHours-f.SpotNodeHours-fixed)
	f.UsefulGPUHours = usefulGPUHours
	f.Cost = fixed*p.Reserved + f.OnDemandNodeHours*p.OnDemand + f.SpotNodeHours*p.Spot
	if usefulGPUHours > 0 {
		f.CostPerUsefulGPUHour = f.Cost / usefulGPUHours
	}
}

// CommonDone are the jobs finished in every one of rs: the set JCT is
// compared over.
func CommonDone(rs []tracereplay.Result) map[string]bool {
	if len(rs) == 0 {
		return nil
	}
	common := map[string]bool{}
	for _, j := range rs[0].Jobs {
		if j.Done {
			common[j.ID] = true
		}
	}
	for _, r := range rs[1:] {
		done := map[string]bool{}
		for _, j := range r.Jobs {
			if j.Done && common[j.ID] {
				done[j.ID] = true
			}
		}
		common = done
	}
	return common
}

// PartialPlacement is, for a gang, Σ over its members of the time each
// was placed (Run.Placed to End) within [0, horizon] while another member
// was not: member-seconds, × the member's GPUs for GPU-seconds. 0 for a
// job of one allocation.
func PartialPlacement(r tracereplay.JobRecord, horizon time.Duration) time.Duration {
	m := r.Slice.Members
	if m < 2 {
		return 0
	}
	type edge struct {
		at    time.Duration
		delta int
	}
	var es []edge
	for _, run := range r.MemberRuns {
		from, to := max(run.Placed, 0), min(run.End, horizon)
		if to > from {
			es = append(es, edge{from, 1}, edge{to, -1})
		}
	}
	slices.SortFunc(es, func(a, b edge) int { return cmp.Or(cmp.Compare(a.at, b.at), a.delta-b.delta) })
	var partial time.Duration
	placed := 0
	for i, e := range es {
		if i > 0 && placed > 0 && placed < m {
			partial += time.Duration(placed) * (e.at - es[i-1].at)
		}
		placed += e.delta
	}
	return partial
}

// overlap is the part of [from, to) within [0, horizon].
func overlap(from, to, horizon time.Duration) time.Duration {
	from, to = max(from, 0), min(to, horizon)
	return max(0, to-from)
}

func seconds(s float64) time.Duration { return time.Duration(math.Round(s * float64(time.Second))) }
