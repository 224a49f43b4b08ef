// Package model is the discrete-event model of the Nomad scheduler and the
// nomad-autoscaler that tracereplay calls engine "model". It replays a
// Trace in trace time. Policy and Latencies are wall-clock figures, and the
// model multiplies them by Options.Compression. Its rules:
//
//   - Nodes. Each node has Cluster.WholeGPUs whole GPUs. With Slices it
//     also has MPSGPUs GPUs of MPSShares shares each and MIGGPUs GPUs with
//     the instances MIGProfiles. A job asks for Cluster.Slice and runs in
//     one allocation on one node. It fits a node with Count free instances
//     of its kind (of its profile for MIG); MPS shares must all come from
//     one GPU (the device plugin makes each MPS GPU a device group), and
//     a request takes the last MPS GPU with room, as Nomad's device
//     allocator takes the last group that fits. MIG instances come from
//     the most used MIG GPU first.
//   - Layouts (Features.Layouts). Every GPU starts whole; a fractional
//     job asks for Cluster.Shares-share MPS shares (Cluster.Slice). When a
//     scheduler pass leaves jobs waiting, the controller's round runs:
//     layoutplan.Plan itself, on the ready nodes' GPUs (current layout, the
//     other one as desired while a change is under way, held instances:
//     an MPS GPU's shares held, and whole GPUs held counted on the first
//     whole GPUs, the model not telling whole GPUs apart), the waiting
//     jobs as the queue (one ask per shape and priority, in the broker's
//     order), the running and queued jobs' shapes as the mix, shares
//     Cluster.Shares, whole and MPS only (no MIG mode is toggled), and
//     Policy.LayoutMinInterval × compression as its MinInterval. A GPU it
//     relays (never a held one) offers its new layout's instances
//     Latencies.Layout (DefaultLayoutLatency when 0) × compression later;
//     until the servers see it drained, LayoutSwitch before that, they
//     still offer its old ones: a placement on it before the plugin reads
//     the decision (LayoutPoll / 2) holds it, and the relayout is
//     abandoned; one after is refused at its start and placed again by
//     Nomad's one reschedule (5 s later, away from that node where another
//     fits) or the controller's forced one (relayout.go). When a node
//     becomes ready the controller's round plans on it before the
//     scheduler's pass, on the jobs blocked before that instant. MPS
//     shares come from one GPU (each GPU is a device group), any that
//     fits, at random: the replay's jobspecs have no device affinity, and
//     Nomad's allocator keeps the last group that fits in its range over
//     a map.
//   - Scheduling. Waiting jobs are taken by effective priority (highest
//     first), then the age of their evaluation (oldest first), then trace
//     order: Nomad's eval broker. A job's evaluation is made at its
//     arrival and at its preemption; a raise in place of a running job
//     (Protection) changes no waiting order. Each one is placed on its own, so no head-of-line blocking. The node is
//     Nomad's batch placement: the ready nodes in a random order (seeded by
//     Options.Seed), the first two that fit, the one scoring higher on
//     binpack (every replayed task asks for the same CPU and memory, so
//     the one with more allocations), ties to the first drawn. A placed
//     job holds its devices at once and runs Latencies.Start later; where
//     the run measured the start's tail (Latencies.StartP95, StartP99),
//     each start is drawn from it, the median at least. A job
//     that did not fit is retried only when capacity of its device kind
//     is freed: a finish, a preemption's leftover, a node ready, a
//     protection's raise ending or a minimum runtime reached. That is a
//     blocked evaluation being unblocked.
//   - Preemption (Features.Preemption). A job that does not fit may
//     preempt allocations (running or still starting) on one node (for
//     MPS shares, one GPU) whose effective priority is at least 10 below
//     its own, and only if that makes it fit. As Nomad preempts while it
//     places, the nodes are the first two, in a random order, where
//     preempting makes room. The victims hold its device kind; they are
//     Nomad's (PreemptForDevice, selectBestAllocs): the candidates lowest
//     priority first and, within one priority, in a random order (Nomad's
//     proposed allocations come out of a map), taken until they and the
//     free instances make the ask; of those, the largest first, kept
//     until they alone make it (free instances not counted). Each MPS
//     GPU is a device group of its own: of the GPUs (in a random order)
//     where preempting makes room, the one whose victims have the lowest
//     sum of distinct priorities wins, ties to the first. Of the two
//     nodes, the one left with more allocations wins (binpack, every
//     task asking the same CPU and memory), then the one whose victims
//     have the lower net priority (the preemption score: max + sum / max
//     of their priorities), then the one drawn first. A victim's devices are free at once; its run
//     ends Latencies.Preempt later (its checkpoint's commit and its stop),
//     and the preemptor runs Latencies.Start + Latencies.Preempt after
//     placement. The victim waits again at once, at its own priority,
//     behind the jobs of that priority that were already waiting. With
//     Checkpoints its task checkpoints on its stop signal and exits:
//     its checkpoint commits Latencies.CommitExit (at most
//     Latencies.Preempt) before its run ends, and it keeps the progress
//     the commit saved; the work after the commit is the run's
//     commit-to-exit gap. Without Checkpoints (stock Nomad) it starts
//     again from scratch, and nothing protects it.
//   - Protection (Checkpoints, the controller's). A preempted job is never
//     raised while it waits, so it preempts only what its own priority
//     may. Policy.ProtectReaction after its replacement's task is running,
//     that running allocation is raised in place to its preemptor's
//     priority for Policy.PreemptionCooldown (0: never). A running
//     allocation preempts nobody, so the raise only keeps work less than
//     10 above it from preempting it. Preempted anyway (by work at least
//     10 above the raise), it loses the raise before it waits, and its
//     next replacement is protected at its new preemptor's priority. With
//     Policy.PreemptMinRuntime, an allocation whose task has run less than
//     it (one still starting too) is no preemption candidate.
//   - Autoscaling (Features.Autoscale). The pool starts with Cluster.Nodes
//     clamped to [MinNodes, MaxNodes], all ready. Without autoscaling it
//     is Config.StartNodes, fixed. The autoscaler evaluates every
//     EvalInterval, from EvalInterval on. Within Cooldown of its last
//     action, and at the evaluation exactly Cooldown later (the cooldown
//     starts when the scale call returns), it does not act; the strategy
//     still observes. "Count" is
//     the booting and ready nodes. The real policies query the APM for
//     device nvidia/gpu, which only whole GPUs match, and so does the
//     model: "alloc %" is the whole GPUs held by placed jobs × 100 / the
//     whole GPUs of ready nodes (0 with none ready). A pool whose layouts
//     follow the queue (Features.Layouts) asks device=any, as
//     docs/autoscaling.md tells it to: "alloc %" is the GPU-equivalents
//     held over the ready nodes' GPUs.
//   - gpu-queue. nodes_needed is a best-fit-decreasing packing of the
//     waiting jobs that ask for whole GPUs, first into the free whole GPUs
//     of ready nodes, then into new nodes (with layouts: of every waiting
//     job's GPU-equivalents, into the ready nodes' free GPU-equivalents,
//     the query's optimistic rule). It leaves out jobs that no
//     empty node fits. If nodes_needed, minus the nodes still booting (the
//     plugin's in-flight ledger), is above 0, the autoscaler adds that
//     many nodes, at most MaxScaleUp and within MaxNodes. If nodes_needed
//     is 0 and alloc % has stayed below IdleFloor at every evaluation for
//     ScaleInAfter, it removes up to MaxScaleDown idle ready nodes (no
//     allocation, highest index first), never going below MinNodes. With
//     Policy.Beyond the query is nodes_needed{…,beyond=D}: the waiting
//     jobs that the product's runtime forecast (sizing.Forecast's waits,
//     predicted from the model's own finished and running runs, never the
//     trace's durations) places on the pool within D are left out of the
//     count; the work left out still keeps the pool from scaling in
//     (beyond.go).
//   - Scale-in by consolidation (Features.ScaleIn, with gpu-queue): once
//     no queued work could use a node for Policy.ScaleInQuiet, the
//     controller's consolidate.Empty picks the least loaded node above
//     MinNodes whose work all moves onto the others' free whole GPUs; its
//     jobs are moved (stopped as moves, and placed elsewhere), it is held
//     and marked once it runs nothing, and gpu-queue's removable check
//     removes it at its next evaluation but one that does not scale out,
//     out of cooldown. Queued work, or Policy.ScaleInWait without its
//     removal, gives it back (scalein.go).
//   - target-value. The desired count is ⌈count × alloc % / TargetAlloc⌉,
//     clamped to [MinNodes, MaxNodes]. A count of 0 stays 0. Growth adds
//     the difference. Shrinking removes idle ready nodes only.
//   - A new node is ready Latencies.Boot after the request. A node being
//     removed takes no work and holds no GPUs at once. It still counts in
//     Sample.Nodes until Latencies.Remove later.
//   - Jobs bigger than a node (Slice.Members), gangs and reservations:
//     gangs.go and reservations.go say how.
//   - Spot nodes (Features.Spot): the pool's burst nodes are spot nodes,
//     which only checkpointing work enters and the cloud reclaims at
//     Cluster.SpotReclaimRate; spot.go says how.
//   - Records. Each job's record has its runs: start, end, node, the
//     devices held (an MPS hold names its GPU), and its progress: restored
//     at the start, saved by the checkpoint, reached at the end. Runs
//     still going at Horizon end there (Open).
//   - Timeline. Samples are taken at 0, SampleEvery, ... and at Horizon,
//     after that instant's events and placements. Nodes counts booting,
//     ready and removing nodes. GPUs counts the physical GPUs of ready
//     nodes. Allocated counts the GPU-equivalents held. Busy is the sum of
//     held × EffectiveUtil/100 over running jobs (the telemetry's view).
//     Queued counts the jobs submitted and not running, placed ones
//     waiting out their start latency included.
//   - The run stops at Horizon. Jobs still running are not Done. Jobs
//     arriving after Horizon are never submitted (no runs).
package model

import (
	"fmt"
	"math"
	"time"

	"github.com/nomad-gpu/nomad-gpu/bench/tracereplay"
)

// Version is the model's Result.Version: bump it when a rule of the
// model changes, so reports can tell results of different rules apart.
// What each version changed is in git log (git log -S'const Version'
// bench/tracereplay/model); the rules themselves are in the package
// comment and beside the code that applies them.
const Version = "model-13"

// Options say what the model replays on and how.
type Options struct {
	Cluster   tracereplay.Cluster
	Config    tracereplay.Config
	Policy    tracereplay.Policy
	Latencies tracereplay.Latencies
	// Compression is trace seconds per wall-clock second; Policy and
	// Latencies times it are trace time. 0 means 1.
	Compression float64
	// Horizon ends the measured period, trace time. 0 means the last
	// arrival plus a tenth of the trace's span, or the longest job's
	// duration when every job arrives at 0.
	Horizon time.Duration
	// SampleEvery is the timeline's step, trace time; 0 means Horizon/600.
	SampleEvery time.Duration
	// Seed seeds the placement's random draw of nodes.
	Seed int64
}

// Run replays tr under o (the jobs o.Config runs: Cluster.JobsOf) and
// returns what the model measured.
func Run(tr tracereplay.Trace, o Options) (tracereplay.Result, error) {
	tr = o.Cluster.JobsOf(tr, o.Config)
	if err := validate(tr, &o); err != nil {
		return tracereplay.Result{}, err
	}
	s := newSim(tr, o)
	s.run()
	return s.result(), nil
}

func validate(tr tracereplay.Trace, o *Options) error {
	if err := o.Cluster.Validate(); err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	if err := o.Config.Validate(); err != nil {
		return fmt.Errorf("config %q: %w", o.Config.Name, err)
	}
	if f := o.Config.Features; f.Queues && (f.Layouts || f.Moves || f.Reservations || len(o.Cluster.Teams) < 2) {
		// Their rounds read Nomad's queue, which held work is not in.
		return fmt.Errorf("config %q: queues with layouts, moves or reservations, or without two teams; allowed: queues with two or more Cluster.Teams, and none of those (the model's rounds of them do not see held work yet)", o.Config.Name)
	}
	if f := o.Config.Features; f.Spot && (!f.Gangs || f.Reservations) {
		// Jobs bigger than a node are what stays off spot nodes; kept
		// out of Nomad's queue by gang admission, they leave its
		// sub-queues to work that may enter them.
		return fmt.Errorf("config %q: spot without gangs, or with reservations; allowed: spot with gang admission and no reservations (the model keeps gangs off spot nodes only when they wait for admission, and does not keep placeholders off them)", o.Config.Name)
	}
	c := o.Compression
	if c == 0 {
		o.Compression = 1
	} else if c < 0 || math.IsNaN(c) || math.IsInf(c, 0) {
		return fmt.Errorf("compression: %v; allowed: a number above 0 (0: 1)", c)
	}
	if o.Horizon < 0 {
		return fmt.Errorf("horizon: %s; allowed: 0 (default) or more", o.Horizon)
	}
	if o.SampleEvery < 0 {
		return fmt.Errorf("sample_every: %s; allowed: 0 (default) or more", o.SampleEvery)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"latencies.start", o.Latencies.Start}, {"latencies.boot", o.Latencies.Boot},
		{"latencies.remove", o.Latencies.Remove}, {"latencies.preempt", o.Latencies.Preempt},
		{"latencies.commit_exit", o.Latencies.CommitExit}, {"latencies.layout", o.Latencies.Layout},
		{"latencies.layout_p95", o.Latencies.LayoutP95},
		{"policy.layout_min_interval", o.Policy.LayoutMinInterval},
		{"policy.eval_interval", o.Policy.EvalInterval}, {"policy.cooldown", o.Policy.Cooldown},
		{"policy.scale_in_after", o.Policy.ScaleInAfter}, {"policy.preemption_cooldown", o.Policy.PreemptionCooldown},
		{"policy.protect_reaction", o.Policy.ProtectReaction}, {"policy.preempt_min_runtime", o.Policy.PreemptMinRuntime},
		{"policy.scale_in_quiet", o.Policy.ScaleInQuiet}, {"policy.scale_in_wait", o.Policy.ScaleInWait},
		{"policy.beyond", o.Policy.Beyond},
	} {
		if d.v < 0 {
			return fmt.Errorf("%s: %s; allowed: 0 or more", d.name, d.v)
		}
	}
	for kind, sp := range o.Latencies.StartByKind {
		if sp.P50 < 0 || sp.P95 < 0 || sp.P99 < 0 {
			return fmt.Errorf("latencies.start_by_kind.%s: %+v; allowed: percentiles of 0 or more", kind, sp)
		}
	}
	switch o.Config.Autoscale {
	case tracereplay.AutoscaleGPUQueue:
		if o.Policy.MaxScaleUp < 1 {
			return fmt.Errorf("policy.max_scale_up: %d; allowed: 1 or more", o.Policy.MaxScaleUp)
		}
		if o.Policy.MaxScaleDown < 1 {
			return fmt.Errorf("policy.max_scale_down: %d; allowed: 1 or more", o.Policy.MaxScaleDown)
		}
	case tracereplay.AutoscaleTargetValue:
		if !(o.Policy.TargetAlloc > 0) {
			return fmt.Errorf("policy.target_alloc: %v; allowed: above 0", o.Policy.TargetAlloc)
		}
	}
	if o.Config.ScaleIn && time.Duration(float64(o.Policy.ScaleInWait)*o.Compression) <= 0 {
		// Zero would give an emptied node back before its removal.
		return fmt.Errorf("policy.scale_in_wait: %s; allowed: above 0 with scale-in", o.Policy.ScaleInWait)
	}
	if o.Config.Autoscale != "" && time.Duration(float64(o.Policy.EvalInterval)*o.Compression) <= 0 {
		// Zero would evaluate forever at one instant.
		return fmt.Errorf("policy.eval_interval: %s; allowed: above 0 with autoscale %q", o.Policy.EvalInterval, o.Config.Autoscale)
	}
	for i, j := range tr.Jobs {
		switch {
		case j.Arrival < 0:
			return fmt.Errorf("jobs[%d] %q: arrival %s; allowed: 0 or more", i, j.ID, j.Arrival)
		case j.Duration < 0:
			return fmt.Errorf("jobs[%d] %q: duration %s; allowed: 0 or more", i, j.ID, j.Duration)
		case j.Priority < 0 || j.Priority > maxPriority:
			return fmt.Errorf("jobs[%d] %q: priority %d; allowed: 1 to %d, or 0 (default %d)", i, j.ID, j.Priority, maxPriority, tracereplay.DefaultPriority)
		}
	}
	return nil
}
