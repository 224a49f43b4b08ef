package e2e

// BenchmarkPreemption measures, on one cluster in one run, what checkpointed
// preemption costs and what it saves, against the same preemption of a
// task without a checkpoint block:
//
//   - preemption latency: from the high-priority job's Register call until
//     its task runs (the client's StartedAt). Nomad's client starts the
//     preemptor only once the preempted allocation has stopped, so this
//     includes the checkpoint's request and commit;
//   - lost work per preemption: the victim's count when its stop began
//     (when the driver first signalled it) minus the count its replacement
//     resumed from. Target 0 with a checkpoint block; without one, all of it.
//
// The counting it did after the stop began (while committing, before the
// kill) is reported apart, as "tail": it was never before the stop.
//
// Rounds alternate the two variants, so that drift on the shared 2-core box
// falls on both alike. Reported, not asserted.
//
//	go test -run '^$' -bench Preemption -benchtime 1x ./e2e/

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/nomad-gpu/nomad-gpu/e2e/cluster"
	"github.com/nomad-gpu/nomad-gpu/e2e/harness"
	"github.com/nomad-gpu/nomad-gpu/internal/quantile"
	"github.com/nomad-gpu/nomad-gpu/internal/testenv"
)

const preemptionRounds = 5

type preemptionSample struct {
	latency    time.Duration
	lost, tail int
}

func BenchmarkPreemption(b *testing.B) {
	if os.Geteuid() != 0 {
		testenv.Skip(b, testenv.Root, "e2e: the gpu driver needs a root Nomad client")
	}
	b.StopTimer()
	nodes := []harness.GPUNode{harness.NewGPUNode(b)}
	c := checkpointCluster(b, nodes, "")
	c.EnablePreemption(b)
	gpus := wholeGPUs(b, c, "gpu-1")

	samples := map[bool][]preemptionSample{}
	for i := 0; i < 2*preemptionRounds; i++ {
		checkpoint := (i+i/2)%2 == 0 // ck, none, none, ck, ck, none, …
		samples[checkpoint] = append(samples[checkpoint], measurePreemption(b, c, i, gpus, checkpoint))
	}
	for _, checkpoint := range []bool{true, false} {
		name := map[bool]string{true: "checkpoint", false: "none"}[checkpoint]
		var lat, lost, tail []float64
		for _, s := range samples[checkpoint] {
			lat = append(lat, float64(s.latency.Milliseconds()))
			lost = append(lost, float64(s.lost))
			tail = append(tail, float64(s.tail))
		}
		b.ReportMetric(quantile.Of(lat, 0.5), name+"-latency-p50-ms")
		b.ReportMetric(quantile.Of(lat, 0.9), name+"-latency-p90-ms")
		b.ReportMetric(mean(lost), name+"-lost-steps/preemption")
		b.ReportMetric(mean(tail), name+"-tail-steps/preemption")
		b.Logf("%s: latency %v ms, lost %v steps, tail %v steps", name, lat, lost, tail)
	}
	b.ReportMetric(quantile.Of(latencies(samples[true]), 0.5)-quantile.Of(latencies(samples[false]), 0.5), "checkpoint-extra-latency-p50-ms")
}

func latencies(s []preemptionSample) []float64 {
	var out []float64
	for _, x := range s {
		out = append(out, float64(x.latency.Milliseconds()))
	}
	return out
}

// measurePreemption runs a low job on every whole GPU, preempts it with a
// job 50 priority points higher, and reads what its replacement resumed
// from.
func measurePreemption(b *testing.B, c *cluster.Cluster, round, gpus int, checkpoint bool) preemptionSample {
	b.Helper()
	low, high := fmt.Sprintf("victim-%02d", round), fmt.Sprintf("preemptor-%02d", round)
	c.RunJob(b, counterJob(low, "batch", 30, gpus, checkpoint))
	first := nextAlloc(b, c, low, 0, 2*time.Minute)
	waitProgress(b, c, first.ID, 40)

	job, err := c.API().Jobs().ParseHCL(holderJob(high, 80, 2*time.Second), true)
	if err != nil {
		b.Fatal(err)
	}
	submitted := time.Now()
	if _, _, err := c.API().Jobs().Register(job, nil); err != nil {
		b.Fatal(err)
	}
	started := waitTaskStarted(b, c, high)
	s := preemptionSample{latency: started.Sub(submitted)}

	waitTerminal(b, c, first.ID)
	stopped := counts(c.AllocLogs(b, first.ID, "t", "stdout"))
	atStop := stopped["stopped"]
	if checkpoint {
		atStop = stopped["signal"]
	}
	second := nextAlloc(b, c, low, 1, 2*time.Minute)
	restored := counts(c.WaitForAllocLogs(b, second.ID, "t", "stdout", "restored=", time.Minute))["restored"]
	s.lost, s.tail = atStop-restored, stopped["stopped"]-atStop
	c.StopJob(b, low, false)
	waitTerminal(b, c, second.ID)
	c.StopJob(b, low, true)
	c.StopJob(b, high, true)
	return s
}

// waitTaskStarted waits for the job's first allocation's task to run and
// returns when the client started it.
func waitTaskStarted(b *testing.B, c *cluster.Cluster, jobID string) time.Time {
	b.Helper()
	id := c.WaitForAllocs(b, jobID, 1, time.Minute)[0].ID
	deadline := time.Now().Add(2 * time.Minute)
	for {
		a, _, err := c.API().Allocations().Info(id, nil)
		if err == nil {
			if st := a.TaskStates["t"]; st != nil && !st.StartedAt.IsZero() {
				return st.StartedAt
			}
		}
		if time.Now().After(deadline) {
			b.Fatalf("job %s's task did not start: %s", jobID, cluster.AllocSummary(a))
		}
		time.Sleep(50 * time.Millisecond)
	}
}
