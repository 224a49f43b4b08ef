package e2e

// BenchmarkProtectionReaction measures the controller's reaction on a real
// Nomad: from a preempted job's replacement running (its task's start, as
// the client reports it to Nomad) to the job raised to its preemptor's
// priority (the submit time of the job version the controller
// registered): how long the replacement runs unprotected. The controller
// runs with its default -tick (1s) and with the trace replay's (200ms);
// the model assumes 1s (tracereplay.Policy.ProtectReaction). Reported,
// not asserted.
//
//	go test -run '^$' -bench ProtectionReaction -benchtime 1x ./e2e/

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nomad-gpu/nomad-gpu/e2e/cluster"
	"github.com/nomad-gpu/nomad-gpu/e2e/harness"
	"github.com/nomad-gpu/nomad-gpu/internal/quantile"
)

const protectionRounds = 4

func BenchmarkProtectionReaction(b *testing.B) {
	for _, tick := range []struct{ name, tick string }{
		{"default-tick-1s", "1s"},
		{"replay-tick-200ms", harness.ReplayControllerTick.String()},
	} {
		b.Run(tick.name, func(b *testing.B) {
			c := protectionCluster(b)
			c.StartController(b, "controller", "-preemption-cooldown", "5m", "-tick", tick.tick)
			var ms, fromServer []float64
			for round := range protectionRounds {
				r := measureProtection(b, c, round)
				ms = append(ms, float64(r.raised.Sub(r.started).Milliseconds()))
				fromServer = append(fromServer, float64(r.raised.Sub(r.serverSaw).Milliseconds()))
			}
			b.Logf("reaction per round: %v ms; of which after the server had the running replacement: %v ms", ms, fromServer)
			b.ReportMetric(quantile.Of(ms, 0.5), "reaction-p50-ms")
			b.ReportMetric(slices.Max(ms), "reaction-max-ms")
			b.ReportMetric(quantile.Of(fromServer, 0.5), "from-server-p50-ms")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// protectionTimes are one protection's moments: the replacement's task
// started (client clock), the server had it running (the allocation's
// modify time when first seen running), the job was raised.
type protectionTimes struct{ started, serverSaw, raised time.Time }

// measureProtection runs two priority-30 checkpointing jobs of 2 GPUs on
// the 4-GPU node, preempts one with a priority-90 job of 2 GPUs that
// holds them 5s, and times the protection of the preempted job once its
// replacement runs.
func measureProtection(b *testing.B, c *cluster.Cluster, round int) protectionTimes {
	b.Helper()
	lowA, lowB, high := fmt.Sprintf("low-a-%d", round), fmt.Sprintf("low-b-%d", round), fmt.Sprintf("high-%d", round)
	c.RunJob(b, counterJob(lowA, "batch", 30, 2, true))
	c.RunJob(b, counterJob(lowB, "batch", 30, 2, true))
	waitProgress(b, c, nextAlloc(b, c, lowA, 0, 2*time.Minute).ID, 3)
	waitProgress(b, c, nextAlloc(b, c, lowB, 0, 2*time.Minute).ID, 3)
	c.RunJob(b, holderJob2(high, 90, 2, 5*time.Second))
	victim := waitPreempted(b, c, time.Minute, lowA, lowB)
	rep := nextAlloc(b, c, victim, 1, 2*time.Minute)
	started := allocTaskStarted(b, c, rep.ID)
	waitPriority(b, c, victim, 90, 30*time.Second)
	job, _, err := c.API().Jobs().Info(victim, nil)
	if err != nil {
		b.Fatal(err)
	}
	raised := time.Unix(0, *job.SubmitTime)
	for _, j := range []string{lowA, lowB, high} {
		c.StopJob(b, j, true)
	}
	return protectionTimes{started: started, serverSaw: time.Unix(0, rep.ModifyTime), raised: raised}
}

// waitPreempted is the first of jobs one of whose allocations Nomad
// preempted.
func waitPreempted(b *testing.B, c *cluster.Cluster, within time.Duration, jobs ...string) string {
	b.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		for _, j := range jobs {
			if len(preemptedOf(b, c, j)) > 0 {
				return j
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	b.Fatalf("none of %v was preempted within %s", jobs, within)
	return ""
}

// allocTaskStarted is when the allocation's task "t" started, as its
// client reported it.
func allocTaskStarted(b *testing.B, c *cluster.Cluster, allocID string) time.Time {
	b.Helper()
	a, _, err := c.API().Allocations().Info(allocID, nil)
	if err != nil {
		b.Fatal(err)
	}
	st := a.TaskStates["t"]
	if st == nil || st.StartedAt.IsZero() {
		b.Fatalf("alloc %s runs with no task start: %s", allocID, cluster.AllocSummary(a))
	}
	return st.StartedAt
}
