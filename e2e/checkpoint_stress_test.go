package e2e

// Checkpointed stops under stress, against a real Nomad, in two parts.
//
// Preemptions: the trace replay's own task (harness.ReplayTask) on every whole
// GPU of a node, all of them preempted together, round after round, at
// moments from the first milliseconds after a start or restore to seconds
// into the work, with interval checkpoints committing meanwhile.
//
// Moves and relayouts: the same task, movable, on 4 of the 8 whole GPUs of
// two nodes sharing a checkpoint root, with the controller's move and
// layout modules on (moveStress). Every round spreads the tasks 2 and 2
// with a preemption and queues a 4-GPU job the controller frees a node
// for, moving 2 tasks; every second round a fractional job has a free GPU
// relaid whole → MPS, tasks are preempted while it drains and restored on
// its node, and then a whole-GPU shortage has it relaid back, a task
// restored onto it.
//
// Every stop must leave a record a replay can read (a commit and a stop,
// or the driver's word that it could not ask), and every replacement must
// resume from its predecessor's last commit: no progress lost beyond the
// commit-to-stop gap. A record that is incomplete is kept with the task's
// events and the client's log lines for its allocation, so its cause can
// be named.

import (
	"context"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/controller"
	"github.com/nomad-gpu/nomad-gpu/e2e/cluster"
	"github.com/nomad-gpu/nomad-gpu/e2e/harness"
	"github.com/nomad-gpu/nomad-gpu/internal/quantile"
)

// positiveEnv is the positive count in the environment variable name,
// else def.
func positiveEnv(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive count", name, v)
	}
	return n
}

// stressPreemptions is how many checkpointed preemptions the preemption
// part makes at least, and the checkpointed stops the whole test does:
// NOMAD_GPU_STRESS_PREEMPTIONS, else 300.
func stressPreemptions(t *testing.T) int {
	return positiveEnv(t, "NOMAD_GPU_STRESS_PREEMPTIONS", 300)
}

// stressMoveRounds is how many rounds the moves-and-relayouts part makes:
// NOMAD_GPU_STRESS_MOVE_ROUNDS, else 8. Each round moves 2 tasks; every
// second one relays a GPU whole → MPS → whole.
func stressMoveRounds(t *testing.T) int {
	return positiveEnv(t, "NOMAD_GPU_STRESS_MOVE_ROUNDS", 8)
}

// stressVictim is a low-priority batch job running the replay's task for
// an hour of work, checkpointing every second and on every stop. A movable
// one opts in to the controller's moves, and its reschedule policy is on
// with an hour's delay: the controller's forced reschedule of a placement
// a relayout refused needs a policy that is on (it ignores the attempts
// left and the delay), and within the test nothing else reschedules it (a
// failure of the task's own stays failed, and shows).
func stressVictim(id, cli string, movable bool) string {
	meta, reschedule := "", `
    reschedule {
      attempts  = 0
      unlimited = false
    }`
	if movable {
		meta = fmt.Sprintf("\n  meta {\n    %s = \"true\"\n  }", controller.MetaMovable)
		reschedule = `
    reschedule {
      attempts       = 1
      interval       = "24h"
      delay          = "1h"
      delay_function = "constant"
      unlimited      = false
    }`
	}
	return fmt.Sprintf(`
job %q {
  type     = "batch"
  priority = 30%s
  group "g" {
    restart {
      attempts = 0
      mode     = "fail"
    }%s
    task "t" {
      driver       = "gpu"
      kill_timeout = "15s"
      config {
        command = "/bin/sh"
        args    = ["-c", %q]
        checkpoint {
          commit_timeout = "10s"
          interval       = "1s"
        }
      }
      resources {
        cpu    = 10
        memory = 64
        device "nvidia/gpu" {
          count = 1
        }
      }
    }
  }
}`, id, meta, reschedule, harness.ReplayTask(time.Hour, 40, cli))
}

// stressHolder is a batch job that holds count instances of device for
// hold at priority, on the node named (any node when ""). At priority 90
// it preempts the victims (30); at 30 it waits for room.
func stressHolder(id, device string, count, priority int, node string, hold time.Duration) string {
	constraint := ""
	if node != "" {
		constraint = fmt.Sprintf(`
    constraint {
      attribute = "${node.unique.name}"
      value     = %q
    }`, node)
	}
	return fmt.Sprintf(`
job %q {
  type     = "batch"
  priority = %d
  group "g" {%s
    task "t" {
      driver = "gpu"
      config {
        command = "/bin/sleep"
        args    = [%q]
      }
      resources {
        cpu    = 10
        memory = 16
        device %q {
          count = %d
        }
      }
    }
  }
}`, id, priority, constraint, strconv.FormatFloat(hold.Seconds(), 'f', -1, 64), device, count)
}

// stressPreemptor takes n whole GPUs at priority 90 for a moment.
func stressPreemptor(id string, n int) string {
	return stressHolder(id, "nvidia/gpu", n, 90, "", 500*time.Millisecond)
}

// stressDelays are the waits, cycled, between the victims all running and
// the next preemptor's (or move's) submission: its placement follows
// within tens of milliseconds, so the first hits tasks in their first
// moments.
var stressDelays = []time.Duration{0, 50 * time.Millisecond, 300 * time.Millisecond, time.Second, 2500 * time.Millisecond}

// TestCheckpointStress runs both parts; together they make at least
// NOMAD_GPU_STRESS_PREEMPTIONS checkpointed stops (the preemption part
// alone does).
func TestCheckpointStress(t *testing.T) {
	want := stressPreemptions(t)
	var parts []stressCounts
	t.Run("preemptions", func(t *testing.T) { parts = append(parts, stressPreemptionPart(t, want)) })
	t.Run("moves-relayouts", func(t *testing.T) { parts = append(parts, stressMovePart(t, stressMoveRounds(t))) })
	if len(parts) < 2 {
		return // a part left out by -run, or stopped by its failure
	}
	all := newStressCounts()
	for _, p := range parts {
		all.add(p)
	}
	t.Logf("in all %d checkpointed stops: %d preemptions, %d moves, %d stopped by the test; %d of them while a GPU drained for a relayout; commit-to-stop gap median %.0f ms, p95 %.0f ms",
		all.checkpointed, all.byCause[causePreempted], all.byCause[causeMoved], all.byCause[causeStopped], all.duringDrain, quantile.Of(all.gaps, 0.5), quantile.Of(all.gaps, 0.95))
	if all.checkpointed < want {
		t.Errorf("%d checkpointed stops in all, want at least %d", all.checkpointed, want)
	}
}

// stressPreemptionPart preempts every victim of one node together, round
// after round, want preemptions at least, and checks that as many stops
// were checkpointed.
func stressPreemptionPart(t *testing.T, want int) stressCounts {
	cli := cluster.RequireBinary(t, "nomad-gpu")
	nodes := []harness.GPUNode{harness.NewGPUNode(t)}
	// The client keeps every allocation until the records are read (by
	// default it collects all but 50 terminal ones).
	c := checkpointCluster(t, nodes, "", "gc_max_allocs = 2000")
	c.EnablePreemption(t)
	gpus := wholeGPUs(t, c, "gpu-1")

	var victims []string
	records := map[string]*stressRecord{}
	for i := range gpus {
		id := fmt.Sprintf("victim-%d", i)
		c.RunJob(t, stressVictim(id, cli, false))
		victims = append(victims, id)
		records[id] = &stressRecord{seen: map[string]bool{}}
	}
	start := time.Now()
	rounds := (want + gpus - 1) / gpus
	for r := range rounds {
		waitAllRunning(t, c, victims, 2*time.Minute)
		// The records are read as they are made.
		for _, v := range victims {
			records[v].read(t, c, v)
		}
		time.Sleep(stressDelays[r%len(stressDelays)])
		id := fmt.Sprintf("preemptor-%d", r)
		c.RunJob(t, stressPreemptor(id, gpus))
		waitJobDone(t, c, id, 2*time.Minute)
	}
	waitAllRunning(t, c, victims, 2*time.Minute)
	t.Logf("%d rounds of %d preemptions in %s", rounds, gpus, time.Since(start).Round(time.Second))
	for _, v := range victims {
		c.StopJob(t, v, false)
	}

	counts := newStressCounts()
	for _, v := range victims {
		records[v].read(t, c, v)
		counts.addRecord(records[v], stopCauses(nil))
	}
	t.Logf("%d stops: %d checkpointed (%d preemptions, %d stopped by the test), %d stopped before the task handled the signal; commit-to-stop gap median %.0f ms, p95 %.0f ms",
		counts.stops, counts.checkpointed, counts.byCause[causePreempted], counts.byCause[causeStopped], counts.unasked, quantile.Of(counts.gaps, 0.5), quantile.Of(counts.gaps, 0.95))
	if counts.checkpointed < want {
		t.Errorf("%d checkpointed stops, want at least %d", counts.checkpointed, want)
	}
	return counts
}

// What stopped a run, read from its allocation and the controller's move
// history.
const (
	causePreempted = "preempted"
	causeMoved     = "moved"
	causeStopped   = "stopped" // by the test, at the end
)

// stopCauses says what stopped a run: moved are the allocations the
// controller moved.
func stopCauses(moved map[string]bool) func(*api.Allocation) string {
	return func(a *api.Allocation) string {
		switch {
		case moved[a.ID]:
			return causeMoved
		case a.PreemptedByAllocation != "":
			return causePreempted
		}
		return causeStopped
	}
}

// stressCounts are a part's stops.
type stressCounts struct {
	stops, checkpointed, unasked int
	gaps                         []float64 // commit-to-stop, ms
	// byCause are the checkpointed stops by what stopped them, allByCause
	// all stops; duringDrain the checkpointed ones that overlapped a
	// GPU's drain for a relayout.
	byCause, allByCause map[string]int
	duringDrain         int
}

func newStressCounts() stressCounts {
	return stressCounts{byCause: map[string]int{}, allByCause: map[string]int{}}
}

func (s *stressCounts) addRecord(rec *stressRecord, cause func(*api.Allocation) string) {
	s.stops += rec.stops
	s.checkpointed += rec.checkpointed
	s.unasked += rec.unasked
	s.gaps = append(s.gaps, rec.gaps...)
	for _, r := range rec.runs {
		s.allByCause[cause(r.alloc)]++
		if r.checkpointed {
			s.byCause[cause(r.alloc)]++
		}
	}
}

func (s *stressCounts) add(o stressCounts) {
	s.stops += o.stops
	s.checkpointed += o.checkpointed
	s.unasked += o.unasked
	s.gaps = append(s.gaps, o.gaps...)
	s.duringDrain += o.duringDrain
	for k, n := range o.byCause {
		s.byCause[k] += n
	}
	for k, n := range o.allByCause {
		s.allByCause[k] += n
	}
}

// stressRecord is what one victim job's allocations said so far.
type stressRecord struct {
	stops, checkpointed, unasked int
	gaps                         []float64 // commit-to-stop, ms
	// refused are allocations whose devices' Reserve a relayout refused
	// (the task never started).
	refused int
	// runs are the allocations whose task started, in order.
	runs []stressRun
	// saved is the progress the next run must restore; seen the
	// allocations read.
	saved int
	seen  map[string]bool
}

// stressRun is one allocation whose task started, as it ended.
type stressRun struct {
	alloc *api.Allocation
	// checkpointed: its stop left a commit and a stop.
	checkpointed bool
}

// read reads the victim job's terminal allocations not read yet, in
// order: each stopped one logged its stop and, unless the driver says it
// could not ask, a commit; each later one restored its predecessor's
// last commit.
func (rec *stressRecord) read(t *testing.T, c *cluster.Cluster, job string) {
	t.Helper()
	stubs, _, err := c.API().Jobs().Allocations(job, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(stubs, func(a, b *api.AllocationListStub) int { return int(a.CreateIndex) - int(b.CreateIndex) })
	for _, a := range stubs {
		if rec.seen[a.ID] || a.DesiredStatus == api.AllocDesiredStatusRun && a.ClientStatus != api.AllocClientStatusComplete && a.ClientStatus != api.AllocClientStatusFailed {
			continue
		}
		info := waitTerminalWithin(t, c, a.ID, time.Minute)
		rec.seen[a.ID] = true
		if st := info.TaskStates["t"]; st == nil || st.StartedAt.IsZero() {
			if controller.RefusedByRelayout(info.TaskStates) {
				rec.refused++
			}
			continue // preempted or refused before its task started: nothing to record
		}
		rec.check(t, c, job, info)
	}
}

// check reads one terminal allocation's record.
func (rec *stressRecord) check(t *testing.T, c *cluster.Cluster, job string, a *api.Allocation) {
	t.Helper()
	logs := c.AllocLogs(t, a.ID, "t", "stdout")
	unasked := checkpointOutcome(a, contract.CheckpointNotHandled)
	name := fmt.Sprintf("%s alloc %s on %s", job, a.ID[:8], a.NodeName)
	restored, ok := harness.LogValue(logs, "restored")
	switch {
	case !ok && unasked:
		// Stopped before its shell ran its first lines (a stop within
		// milliseconds of the start, one that came while it restored
		// included): the driver did not ask, the task's default action
		// ended it, and it neither logged nor committed anything. The
		// next run restores what this one did, which the next record
		// checks.
		rec.stops++
		rec.unasked++
		rec.runs = append(rec.runs, stressRun{alloc: a})
		return
	case !ok:
		t.Errorf("%s logged no restore%s", name, stressDiagnosis(c, a, logs))
		return
	}
	if restored != rec.saved {
		t.Errorf("%s restored %d ms, its predecessor's last commit was %d ms%s", name, restored, rec.saved, stressDiagnosis(c, a, logs))
	}
	committed, hasCommit := harness.LogValue(logs, "committed")
	stopped, hasStop := harness.LogValue(logs, "stopped")
	rec.stops++
	run := stressRun{alloc: a}
	switch {
	case unasked:
		rec.unasked++
		if hasCommit {
			rec.saved = committed
		}
	case !hasCommit || !hasStop:
		t.Errorf("%s: incomplete record (commit %v, stop %v)%s", name, hasCommit, hasStop, stressDiagnosis(c, a, logs))
	default:
		rec.checkpointed++
		rec.gaps = append(rec.gaps, float64(stopped-committed))
		rec.saved = committed
		run.checkpointed = true
	}
	rec.runs = append(rec.runs, run)
}

// stressDiagnosis is an incomplete record's evidence, as the trace
// replay keeps it.
func stressDiagnosis(c *cluster.Cluster, a *api.Allocation, logs string) string {
	in := harness.IncompleteEvidence(c, a.JobID, a.ID, a.NodeName, logs)
	return fmt.Sprintf("\ntask log:\n%s\ntask events:\n%s\nagent log:\n%s", in.TaskLog, in.Events, in.AgentLog)
}

// waitAllRunning waits until each job has a running allocation.
func waitAllRunning(t *testing.T, c *cluster.Cluster, jobs []string, timeout time.Duration) {
	t.Helper()
	if got := waitRunningCount(t, c, jobs, len(jobs), timeout); got < len(jobs) {
		t.Fatalf("%d of %d jobs running after %s", got, len(jobs), timeout)
	}
}

// waitJobDone waits until the job's allocation has completed.
func waitJobDone(t *testing.T, c *cluster.Cluster, job string, timeout time.Duration) {
	t.Helper()
	a := c.WaitForAllocs(t, job, 1, timeout)[0]
	if got := waitTerminalWithin(t, c, a.ID, timeout); got.ClientStatus != api.AllocClientStatusComplete {
		t.Fatalf("%s: %s", job, cluster.AllocSummary(got))
	}
}

// moveStress is the moves-and-relayouts part: two nodes of 4 whole GPUs
// (and 4 in MIG mode, which neither part uses) whose device plugins follow
// the layouts in their metadata, the controller's move and layout modules,
// and 4 movable victims.
type moveStress struct {
	c       *cluster.Cluster
	ctl     *cluster.Controller
	nodes   [2]string // names
	victims []string
	records map[string]*stressRecord
	layouts *layoutLog
}

// stressMoveCount is how many victims the part runs: 2 on each node once
// spread, so that a 4-GPU job needs 2 of them moved, and room on the
// other node for them.
const stressMoveCount = 4

// stressMovePart makes rounds of moves, every second one with a relayout
// there and back (moveStress.relayoutRound).
func stressMovePart(t *testing.T, rounds int) stressCounts {
	cli := cluster.RequireBinary(t, "nomad-gpu")
	c, ids := moveClusterWith(t, func(n harness.GPUNode) string { return layoutNodeHCL(n, "3s") }, "gc_max_allocs = 2000")
	c.EnablePreemption(t)
	s := &moveStress{c: c, nodes: [2]string{"gpu-1", "gpu-2"}, records: map[string]*stressRecord{}}
	s.layouts = followLayouts(t, []*cluster.Agent{c.Client(t, s.nodes[0]), c.Client(t, s.nodes[1])})
	var owners []*ownershipRecord
	for _, id := range ids {
		owners = append(owners, recordOwnership(t, c, id))
	}
	// Fast and unbounded: a tick of 200ms, no budget that a stress test
	// would spend, no protection raise (it would make the preempted
	// victims unmovable and out of the preemptors' reach), relayouts as
	// often as the queue asks, on any GPU, into 2 shares; relief off (no
	// MPS client here is movable).
	s.ctl = c.StartController(t, "controller", "-tick", "200ms", "-log-level", "debug", "-preemption-cooldown", "0",
		"-move-budget-hour", "1000", "-move-budget-job-day", "1000", "-move-settle", "30s",
		"-layout-min-interval", "0s", "-layout-min-whole", "*=0", "-layout-shares", "*=2", "-relief-high", "0")
	for i := range stressMoveCount {
		id := fmt.Sprintf("mover-%d", i)
		c.RunJob(t, stressVictim(id, cli, true))
		s.victims = append(s.victims, id)
		s.records[id] = &stressRecord{seen: map[string]bool{}}
	}
	s.settle(t)

	start := time.Now()
	var mixed, relayouts int
	for r := range rounds {
		// Even rounds queue a fractional job beside the 4-GPU one; odd
		// ones make a relayout round after their moves, from the whole
		// GPUs a plain move round leaves.
		s.moveRound(t, r, r%2 == 0)
		if r%2 == 0 {
			mixed++
		} else {
			s.relayoutRound(t, r)
			relayouts++
		}
	}
	t.Logf("%d rounds in %s: %d with a fractional job beside the 4-GPU one, %d followed by a relayout round", rounds, time.Since(start).Round(time.Second), mixed, relayouts)
	for _, v := range s.victims {
		c.StopJob(t, v, false)
	}
	return s.check(t, rounds, mixed, relayouts, owners)
}

// where is the victims running on each node, by node name: those with an
// allocation that runs and is to run (one being stopped is not counted).
func (s *moveStress) where(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, v := range s.victims {
		stubs, _, err := s.c.API().Jobs().Allocations(v, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range stubs {
			if a.ClientStatus == api.AllocClientStatusRunning && a.DesiredStatus == api.AllocDesiredStatusRun {
				out[a.NodeName] = append(out[a.NodeName], v)
			}
		}
	}
	return out
}

// settle waits until every victim runs, reads the records made meanwhile
// and returns where the victims run.
func (s *moveStress) settle(t *testing.T) map[string][]string {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		on := s.where(t)
		if len(on[s.nodes[0]])+len(on[s.nodes[1]]) == len(s.victims) {
			for _, v := range s.victims {
				s.records[v].read(t, s.c, v)
			}
			return on
		}
		if time.Now().After(deadline) {
			t.Fatalf("victims running by node after 2m: %v, want all %d\ncontroller log:\n%s", on, len(s.victims), tail(s.ctl.Log(), 40))
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// fuller is the node with more victims and the other one.
func (s *moveStress) fuller(on map[string][]string) (string, string) {
	a, b := s.nodes[0], s.nodes[1]
	if len(on[a]) < len(on[b]) {
		a, b = b, a
	}
	return a, b
}

// moveRound spreads the victims 2 and 2, a preemptor at priority 90
// taking 2 GPUs of the fuller node (its free ones first, then victims'),
// whose victims Nomad places on the other node; then it queues a 4-GPU
// job, which fits no node until the controller moves the 2 victims of
// one to the other. Both come at stressDelays after the victims all run,
// so that some hit tasks in their first moments after a restore. With
// frac, a fractional job is queued just before the 4-GPU one: the
// planner relays a free GPU whole → mps:2 for it, consolidation waits
// while that node relays, and once the fractional job is done the
// planner relays the idle GPU back to whole for room, the moves follow,
// and moved tasks may be restored onto it.
func (s *moveStress) moveRound(t *testing.T, r int, frac bool) {
	t.Helper()
	on := s.settle(t)
	full, other := s.fuller(on)
	if len(on[full]) > len(on[other]) {
		time.Sleep(stressDelays[r%len(stressDelays)])
		id := fmt.Sprintf("spread-%d", r)
		s.c.RunJob(t, stressHolder(id, "nvidia/gpu", 2, 90, full, 500*time.Millisecond))
		waitJobDone(t, s.c, id, 2*time.Minute)
		on = s.settle(t)
	}
	if len(on[full]) != 2 || len(on[other]) != 2 {
		t.Fatalf("round %d: victims by node %v after the spread, want 2 and 2", r, on)
	}
	time.Sleep(stressDelays[(r+2)%len(stressDelays)])
	fracID := fmt.Sprintf("mixed-frac-%d", r)
	if frac {
		s.c.RunJob(t, stressHolder(fracID, "nvidia/mps", 1, 30, "", 2*time.Second))
	}
	id := fmt.Sprintf("hpc-%d", r)
	s.c.RunJob(t, stressHolder(id, "nvidia/gpu", 4, 30, "", time.Second))
	if frac {
		s.waitDone(t, fracID)
	}
	s.waitDone(t, id)
	s.settle(t)
}

// relayoutRound starts with the victims all on one node, full, and the
// other's 4 GPUs free and whole. A fractional job has the planner relay a
// free GPU of the other node whole → mps:2; once its device plugin
// drains it, a preemptor takes 2 GPUs of full, and Nomad places the 2
// victims on the node being relaid (the servers may still offer the
// draining GPU: a victim placed on it has its Reserve refused and the
// controller places it again). Then a holder takes all 4 GPUs of full: of
// its 2 victims one fits the other node's last whole GPU, and the other
// waits until the planner relays the MPS GPU, free by now, back to whole;
// while it drains, another preemptor takes a victim's GPU on that node,
// and the 2 victims waiting are restored there, one onto the GPU just
// relaid.
func (s *moveStress) relayoutRound(t *testing.T, r int) {
	t.Helper()
	s.waitWhole(t)
	on := s.settle(t)
	full, other := s.fuller(on)
	if len(on[full]) != stressMoveCount {
		t.Fatalf("round %d: victims by node %v, want all on one node", r, on)
	}
	asked := time.Now()
	frac := fmt.Sprintf("frac-%d", r)
	s.c.RunJob(t, stressHolder(frac, "nvidia/mps", 1, 30, "", 2*time.Second))
	s.layouts.waitDrain(t, other, asked, 90*time.Second)
	pre := fmt.Sprintf("drain-preemptor-%d", r)
	s.c.RunJob(t, stressHolder(pre, "nvidia/gpu", 2, 90, full, 500*time.Millisecond))
	s.waitDone(t, pre)
	s.waitDone(t, frac)
	s.settle(t)

	hold := fmt.Sprintf("holder-%d", r)
	asked = time.Now()
	s.c.RunJob(t, stressHolder(hold, "nvidia/gpu", stressMoveCount, 90, full, 10*time.Minute))
	// While the MPS GPU drains back to whole, a victim of its own node is
	// preempted (the draining GPU has no whole instance to take): once the
	// victim placed on the node's last whole GPU runs, else Nomad may
	// preempt that one before its task starts, which leaves no record.
	s.layouts.waitDrain(t, other, asked, 90*time.Second)
	for wait := time.Now().Add(5 * time.Second); len(s.where(t)[other]) < stressMoveCount-1 && time.Now().Before(wait); {
		time.Sleep(100 * time.Millisecond)
	}
	pre = fmt.Sprintf("drain-preemptor-%d-2", r)
	s.c.RunJob(t, stressHolder(pre, "nvidia/gpu", 1, 90, other, 500*time.Millisecond))
	s.waitDone(t, pre)
	deadline := time.Now().Add(2 * time.Minute)
	for on = s.where(t); len(on[other]) < stressMoveCount; on = s.where(t) {
		if time.Now().After(deadline) {
			t.Fatalf("round %d: victims by node %v 2m after %s took %s, want all on %s\ncontroller log:\n%s", r, on, hold, full, other, tail(s.ctl.Log(), 40))
		}
		time.Sleep(250 * time.Millisecond)
	}
	s.c.StopJob(t, hold, false)
	a := s.c.WaitForAllocs(t, hold, 1, time.Minute)[0]
	waitTerminalWithin(t, s.c, a.ID, time.Minute)
	s.settle(t)
}

// waitWhole waits until the servers show both nodes' 4 GPUs whole and
// every GPU's layout ready: a relayout round starts from there.
func (s *moveStress) waitWhole(t *testing.T) {
	t.Helper()
	for _, name := range s.nodes {
		s.c.WaitForNode(t, name, func(n *api.Node) bool {
			for _, d := range layoutGroups(n) {
				if attrText(d, contract.AttrLayoutState) != string(contract.LayoutReady) {
					return false
				}
			}
			return wholeGPUsOf(n) == 4
		}, 90*time.Second)
	}
}

// waitDone waits until the job's allocation has completed, with the
// controller's last words when it does not.
func (s *moveStress) waitDone(t *testing.T, job string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		stubs, _, err := s.c.API().Jobs().Allocations(job, false, nil)
		if err == nil && slices.ContainsFunc(stubs, func(a *api.AllocationListStub) bool { return a.ClientStatus == api.AllocClientStatusComplete }) {
			return
		}
		if time.Now().After(deadline) {
			var got []string
			for _, a := range stubs {
				got = append(got, fmt.Sprintf("%s on %s: %s/%s", a.ID[:8], a.NodeName, a.DesiredStatus, a.ClientStatus))
			}
			t.Fatalf("%s not done after 2m (allocations %v); queued %d\ncontroller log:\n%s", job, got, queued(t, s.c, job), tail(s.ctl.Log(), 40))
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// check reads the last records and classifies every run: what stopped it
// (the controller's move history names the moves), whether its stop or
// its start fell in a GPU's drain, whether it was the first restore onto
// a GPU just relaid whole.
func (s *moveStress) check(t *testing.T, rounds, mixed, relayouts int, owners []*ownershipRecord) stressCounts {
	t.Helper()
	history, _, err := controller.LoadMoves(context.Background(), s.c.API(), "default")
	if err != nil {
		t.Fatal(err)
	}
	moved := map[string]bool{}
	for _, m := range history {
		moved[m.Alloc] = true
	}
	counts := newStressCounts()
	var runs []stressRun
	refused := 0
	for _, v := range s.victims {
		rec := s.records[v]
		rec.read(t, s.c, v)
		counts.addRecord(rec, stopCauses(moved))
		runs = append(runs, rec.runs...)
		refused += rec.refused
	}
	for _, o := range owners {
		o.check(t)
	}
	drains := s.layouts.drains()
	var drainNode, startDrain int
	for _, r := range runs {
		st := r.alloc.TaskStates["t"]
		began, ended := stopSpan(st), st.FinishedAt
		if i := slices.IndexFunc(drains, func(d drainSpan) bool { return d.overlaps(began, ended) }); i >= 0 && r.checkpointed {
			counts.duringDrain++
		}
		if slices.ContainsFunc(drains, func(d drainSpan) bool { return d.node == r.alloc.NodeName && d.overlaps(began, ended) }) {
			drainNode++
		}
		for _, d := range drains {
			if d.node == r.alloc.NodeName && d.overlaps(st.StartedAt, st.StartedAt) {
				startDrain++
				break
			}
		}
	}
	ontoRelaid := restoredOntoRelaid(runs, drains)

	moves := s.ctl.MetricByLabel(t, contract.MetricControllerMoves, contract.LabelMoveReason)
	layouts := s.ctl.MetricByLabel(t, contract.MetricControllerLayoutChanges, contract.LabelLayoutKind)
	replaced := s.ctl.MetricByLabel(t, contract.MetricControllerDecisions, contract.LabelKind)["replaced"]
	t.Logf("%d stops: %d checkpointed (%d preemptions, %d moves, %d stopped by the test), %d stopped before the task handled the signal; commit-to-stop gap median %.0f ms, p95 %.0f ms",
		counts.stops, counts.checkpointed, counts.byCause[causePreempted], counts.byCause[causeMoved], counts.byCause[causeStopped], counts.unasked,
		quantile.Of(counts.gaps, 0.5), quantile.Of(counts.gaps, 0.95))
	t.Logf("controller: moves %v, layouts asked %v, refused placements placed again %v; GPU drains %d; checkpointed stops while a GPU drained: %d; stops while another GPU of the task's node drained: %d; tasks started on a node while another of its GPUs drained: %d; tasks restored onto a GPU just relaid whole: %d; placements a drain refused: %d",
		moves, layouts, replaced, len(drains), counts.duringDrain, drainNode, startDrain, ontoRelaid, refused)
	defer func() {
		if t.Failed() {
			t.Logf("drains and stops:\n%s", stressTimeline(runs, drains, moved))
		}
	}()

	// Each round's 4-GPU job needs exactly 2 victims moved (2 and 2 on
	// nodes of 4 GPUs); each relayout round and each round with a
	// fractional job relays one GPU there and back, and a relayout round
	// restores a victim onto it.
	if got := int(moves["consolidate"]); got < 2*rounds || got != counts.allByCause[causeMoved] {
		t.Errorf("%s{reason=consolidate} = %d, stops of moved runs recorded %d; want at least %d, each a recorded stop", contract.MetricControllerMoves, got, counts.allByCause[causeMoved], 2*rounds)
	}
	if want := float64(relayouts + mixed); layouts["mps"] < want || layouts["whole"] < want {
		t.Errorf("layout changes by kind %v, want at least %v to mps and %v back to whole", layouts, want, want)
	}
	if ontoRelaid < relayouts {
		t.Errorf("%d restores onto a GPU just relaid whole, want at least %d (one a relayout round)", ontoRelaid, relayouts)
	}
	// A relayout round preempts a victim beside its node's drain as soon
	// as it can; whether the stop begins before the drain's grace ends
	// is the machine's timing, so one in all is what must be seen.
	if relayouts > 0 && drainNode == 0 {
		t.Errorf("no stop began while another GPU of the task's node drained")
	}
	return counts
}

// stressTimeline is the drains and the runs' starts and stops in time
// order, for a failure's reader.
func stressTimeline(runs []stressRun, drains []drainSpan, moved map[string]bool) string {
	type line struct {
		at   time.Time
		text string
	}
	var lines []line
	for _, d := range drains {
		lines = append(lines, line{d.since, fmt.Sprintf("%s %s drains", d.node, d.uuid)})
		if !d.until.IsZero() {
			lines = append(lines, line{d.until, fmt.Sprintf("%s %s drained (switched %v, now %s)", d.node, d.uuid, d.switched, d.layout)})
		}
	}
	cause := stopCauses(moved)
	for _, r := range runs {
		st := r.alloc.TaskStates["t"]
		name := fmt.Sprintf("%s alloc %s on %s %v", r.alloc.JobID, r.alloc.ID[:8], r.alloc.NodeName, allocGPUs(r.alloc))
		lines = append(lines, line{st.StartedAt, name + " started"},
			line{stopSpan(st), fmt.Sprintf("%s stopping (%s, checkpointed %v)", name, cause(r.alloc), r.checkpointed)},
			line{st.FinishedAt, name + " stopped"})
	}
	slices.SortStableFunc(lines, func(a, b line) int { return a.at.Compare(b.at) })
	var b strings.Builder
	for _, l := range lines {
		fmt.Fprintf(&b, "%s %s\n", l.at.Format("15:04:05.000"), l.text)
	}
	return b.String()
}

// stopSpan is when the task's stop began: Nomad's Killing event, else its
// end.
func stopSpan(st *api.TaskState) time.Time {
	for _, e := range st.Events {
		if e.Type == api.TaskKilling {
			return time.Unix(0, e.Time)
		}
	}
	return st.FinishedAt
}

// restoredOntoRelaid counts the relayouts to whole that a victim was
// restored onto: a run on the GPU began within a minute of its switch.
func restoredOntoRelaid(runs []stressRun, drains []drainSpan) int {
	n := 0
	for _, d := range drains {
		if !d.switched || d.layout != "whole" {
			continue
		}
		if slices.ContainsFunc(runs, func(r stressRun) bool {
			started := r.alloc.TaskStates["t"].StartedAt
			return r.alloc.NodeName == d.node && slices.Contains(allocGPUs(r.alloc), d.uuid) &&
				!started.Before(d.until) && started.Sub(d.until) <= time.Minute
		}) {
			n++
		}
	}
	return n
}

// allocGPUs are the whole GPUs (UUIDs) an allocation holds.
func allocGPUs(a *api.Allocation) []string {
	var out []string
	if a.AllocatedResources == nil {
		return nil
	}
	for _, tr := range a.AllocatedResources.Tasks {
		for _, d := range tr.Devices {
			for _, id := range d.DeviceIDs {
				if strings.HasPrefix(id, "GPU-") {
					out = append(out, id)
				}
			}
		}
	}
	return out
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// layoutLog follows the device plugins' GPU layout states in the
// clients' logs: each change of state ("ready → draining", "draining →
// ready") at the plugin's own time. The servers learn of a drain seconds
// later (a node update), so their view cannot time one; the plugin's
// logged transitions can.
type layoutLog struct {
	mu     sync.Mutex
	events []layoutEvent
	stop   chan struct{}
	done   chan struct{}
}

// layoutEvent is one logged change of a GPU's layout state.
type layoutEvent struct {
	node, uuid string
	from, to   contract.LayoutState
	// layout is the plugin's "current → desired"; reason why.
	layout, reason string
	at             time.Time
}

// logFieldRe is a key=value field of an agent's log line: hclog quotes a
// value only when it has spaces.
var logFieldRe = regexp.MustCompile(`(?:^|\s)(\w+)=(?:"((?:[^"\\]|\\.)*)"|(\S*))`)

// logFields are a log line's key=value fields.
func logFields(line string) map[string]string {
	out := map[string]string{}
	for _, m := range logFieldRe.FindAllStringSubmatch(line, -1) {
		out[m[1]] = m[2] + m[3]
	}
	return out
}

// followLayouts reads the agents' logs from their start, every 200ms,
// until the test ends.
func followLayouts(t *testing.T, agents []*cluster.Agent) *layoutLog {
	l := &layoutLog{stop: make(chan struct{}), done: make(chan struct{})}
	offsets, partial := make([]int64, len(agents)), make([]string, len(agents))
	go func() {
		defer close(l.done)
		for {
			for i, a := range agents {
				offsets[i], partial[i] = l.readFrom(a, offsets[i], partial[i])
			}
			select {
			case <-l.stop:
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() {
		close(l.stop)
		<-l.done
	})
	return l
}

// readFrom reads the agent's log from off on, keeping the layout
// transitions of its whole lines; it returns where it stopped and the
// line it read part of.
func (l *layoutLog) readFrom(a *cluster.Agent, off int64, partial string) (int64, string) {
	f, err := os.Open(a.LogPath())
	if err != nil {
		return off, partial
	}
	defer f.Close()
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return off, partial
	}
	b, err := io.ReadAll(f)
	if err != nil || len(b) == 0 {
		return off, partial
	}
	lines := strings.Split(partial+string(b), "\n")
	var got []layoutEvent
	for _, line := range lines[:len(lines)-1] {
		if e, ok := parseLayoutLine(a.Name(), line); ok {
			got = append(got, e)
		}
	}
	l.mu.Lock()
	l.events = append(l.events, got...)
	l.mu.Unlock()
	return off + int64(len(b)), lines[len(lines)-1]
}

// parseLayoutLine reads a device plugin's "GPU layout" line, one that
// changes the state.
func parseLayoutLine(node, line string) (layoutEvent, bool) {
	if !strings.Contains(line, "GPU layout:") {
		return layoutEvent{}, false
	}
	f := logFields(line)
	from, to, ok := strings.Cut(f["state"], " → ")
	if !ok || from == to || f["uuid"] == "" {
		return layoutEvent{}, false
	}
	at, err := time.Parse(time.RFC3339, f["timestamp"])
	if err != nil {
		if at, err = time.Parse("2006-01-02T15:04:05.000Z0700", f["timestamp"]); err != nil {
			return layoutEvent{}, false
		}
	}
	return layoutEvent{node: node, uuid: f["uuid"], from: contract.LayoutState(from), to: contract.LayoutState(to),
		layout: f["layout"], reason: f["reason"], at: at}, true
}

// waitDrain waits until a GPU of node begins to drain after after.
func (l *layoutLog) waitDrain(t *testing.T, node string, after time.Time, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		l.mu.Lock()
		found := slices.ContainsFunc(l.events, func(e layoutEvent) bool {
			return e.node == node && e.to == contract.LayoutDraining && !e.at.Before(after)
		})
		l.mu.Unlock()
		if found {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no GPU of %s began to drain within %s", node, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// drainSpan is one GPU's drain: from its start until it ended (zero: it
// had not when the log was last read), switched when it ended with the
// layout applied, layout the one it ended in.
type drainSpan struct {
	node, uuid   string
	since, until time.Time
	switched     bool
	layout       string
}

func (d drainSpan) overlaps(from, to time.Time) bool {
	return !to.Before(d.since) && (d.until.IsZero() || !from.After(d.until))
}

// drains are the GPUs' drains logged so far.
func (l *layoutLog) drains() []drainSpan {
	l.mu.Lock()
	defer l.mu.Unlock()
	open := map[string]*drainSpan{}
	var out []drainSpan
	for _, e := range l.events {
		key := e.node + "/" + e.uuid
		switch {
		case e.to == contract.LayoutDraining:
			open[key] = &drainSpan{node: e.node, uuid: e.uuid, since: e.at}
		case e.from == contract.LayoutDraining && open[key] != nil:
			d := open[key]
			delete(open, key)
			d.until, d.switched = e.at, e.reason == "switched"
			if _, to, ok := strings.Cut(e.layout, " → "); ok {
				d.layout = to
			}
			out = append(out, *d)
		}
	}
	for _, d := range open {
		out = append(out, *d)
	}
	return out
}
