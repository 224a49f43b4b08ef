package e2e

// BenchmarkAutoscalerBurst replays the same burst of GPU batch jobs on an
// autoscaled sim GPU pool three times, each on a fresh cluster with the
// real nomad-autoscaler: with gpu-queue from an empty pool (the policy of
// TestAutoscalerScalesGPUPool), with gpu-queue from one warm node (min 1),
// and with the built-in target-value strategy on GPU allocation percentage
// (target 70 %, the usual way to scale a pool on Nomad today; min 1, as
// target-value cannot scale up from a count of zero, so it starts with the
// same warm node). It reports, per variant:
//
//   - mean and max wait: from a job's Register until its task started;
//   - scalings: how many times the target was asked to change the count
//     during the burst (direction changes and overshoot show here);
//   - GPU-node-minutes: the pool's node count (started, not yet removed)
//     integrated from the first Register until 60 s after the last job
//     finished, the same window length past the work for both, so the
//     scale-in tail counts too.
//
// Reported, not asserted.
//
//	go test -run '^$' -bench AutoscalerBurst -benchtime 1x ./e2e/

import (
	"fmt"
	"testing"
	"time"

	"github.com/nomad-gpu/nomad-gpu/bench/tracereplay"
	"github.com/nomad-gpu/nomad-gpu/e2e/harness"
	"github.com/nomad-gpu/nomad-gpu/internal/quantile"
)

const (
	burstJobs = 11
	burstHold = 30 * time.Second
)

type burstResult struct {
	waits       []float64 // seconds
	nodeMinutes float64
	peak        int
	scalings    int // scale requests the target got
}

func BenchmarkAutoscalerBurst(b *testing.B) {
	b.StopTimer()
	variants := []struct {
		name   string
		policy func(string) string
		min    int
	}{
		{"gpu-queue", func(u string) string { return gpuPoolPolicy(u, 0, 4) }, 0},
		{"gpu-queue-min1", func(u string) string { return gpuPoolPolicy(u, 1, 4) }, 1},
		{"target-value", func(u string) string {
			return harness.TargetValuePolicy(u, 1, 4, tracereplay.Policy{EvalInterval: 2 * time.Second, Cooldown: 4 * time.Second, TargetAlloc: 70})
		}, 1},
	}
	for _, v := range variants {
		b.Run(v.name, func(b *testing.B) {
			r := replayBurst(b, v.policy, v.min)
			b.ReportMetric(mean(r.waits), "wait-mean-s")
			b.ReportMetric(quantile.Of(r.waits, 1), "wait-max-s")
			b.ReportMetric(r.nodeMinutes, "gpu-node-min")
			b.ReportMetric(float64(r.peak), "peak-nodes")
			b.ReportMetric(float64(r.scalings), "scalings")
		})
	}
}

func replayBurst(b *testing.B, policy func(string) string, minNodes int) burstResult {
	c, pool, _ := scaledPool(b, policy)
	if minNodes > 0 {
		// The floor a target-value pool keeps, there before the burst as
		// it would be in a cluster that has run for a while.
		pool.ScaleTo(b, minNodes, 2*time.Minute)
	}
	var r burstResult
	before := pool.Scalings()
	stop := make(chan struct{})
	sampled := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(sampled)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		last := time.Now()
		for {
			select {
			case <-stop:
				return
			case now := <-tick.C:
				ready, starting, _, _ := pool.Snapshot()
				n := ready + starting
				r.nodeMinutes += float64(n) * now.Sub(last).Minutes()
				r.peak = max(r.peak, n)
				last = now
			}
		}
	}()
	submitted := map[string]time.Time{}
	for i := 0; i < burstJobs; i++ {
		id := fmt.Sprintf("burst-%02d", i)
		submitted[id] = time.Now()
		c.RunJob(b, burstJob(id, burstHold))
	}
	for id, at := range submitted {
		stub := c.WaitForAllocs(b, id, 1, 5*time.Minute)[0]
		a := waitTerminalWithin(b, c, stub.ID, 10*time.Minute)
		if st := a.TaskStates["t"]; st != nil && !st.StartedAt.IsZero() {
			r.waits = append(r.waits, st.StartedAt.Sub(at).Seconds())
		}
	}
	time.Sleep(60 * time.Second)
	close(stop)
	<-sampled
	r.scalings = pool.Scalings() - before
	b.Logf("burst of %d × %s: %.1f GPU-node-minutes in %s, peak %d nodes, waits %v s",
		burstJobs, burstHold, r.nodeMinutes, time.Since(start).Round(time.Second), r.peak, r.waits)
	return r
}
