package e2e

// Cluster scaling of a GPU node pool with a real nomad-autoscaler running
// our plugins: nomad-gpu-apm reads the queue, gpu-queue decides, and the
// test-only target nomad-gpu-e2e-target grows and shrinks a pool of
// simulated GPU nodes (harness.SimPool). The pool starts empty: it scales from zero
// when GPU work arrives, grows until a burst larger than one node is
// placed, and once the work is done and the GPUs idle it is drained and
// removed, never a node still running work.

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/autoscaler/strategy/gpuqueue"
	"github.com/nomad-gpu/nomad-gpu/bench/tracereplay"
	"github.com/nomad-gpu/nomad-gpu/e2e/cluster"
	"github.com/nomad-gpu/nomad-gpu/e2e/harness"
	"github.com/nomad-gpu/nomad-gpu/internal/testenv"
)

// gpuPoolPolicy scales the sim pool on the queue (from zero, as fast as
// the queue needs) and in when its GPUs idle.
func gpuPoolPolicy(controlURL string, min, max int) string {
	return harness.GPUQueuePolicy(controlURL, min, max, 5, tracereplay.Policy{
		EvalInterval: 2 * time.Second, Cooldown: 4 * time.Second, MaxScaleUp: 4, MaxScaleDown: 4,
		IdleFloor: 30, ScaleInAfter: 15 * time.Second,
	}, 20*time.Second, false)
}

// burstJob is a batch job on the gpu pool holding one whole GPU for hold.
func burstJob(id string, hold time.Duration) string {
	return fmt.Sprintf(`
job %q {
  type      = "batch"
  node_pool = "gpu"
  group "g" {
    restart {
      attempts = 0
      mode     = "fail"
    }
    reschedule {
      attempts  = 0
      unlimited = false
    }
    task "t" {
      driver = "gpu"
      config {
        command = "/bin/sh"
        args    = ["-c", "echo $CUDA_VISIBLE_DEVICES; sleep %d"]
      }
      resources {
        cpu    = 20
        memory = 16
        device "nvidia/gpu" {
          count = 1
        }
      }
    }
  }
}`, id, int(hold.Seconds()))
}

// simPoolCluster starts a server and an empty sim pool "gpu", and makes
// the autoscaler's plugin dir.
func simPoolCluster(t testing.TB) (*cluster.Cluster, *harness.SimPool, string) {
	t.Helper()
	cluster.AutoscalerBinary(t)
	cluster.RequirePlugin(t, "nomad-device-gpu")
	cluster.RequirePlugin(t, "nomad-driver-gpu")
	if os.Geteuid() != 0 {
		testenv.Skip(t, testenv.Root, "e2e: the gpu driver needs a root Nomad client")
	}
	plugins := harness.AutoscalerPlugins(t)
	c := cluster.Start(t, cluster.Options{Clients: 0})
	return c, harness.NewSimPool(t, c, "gpu"), plugins
}

// scaledPool starts a server, an empty sim pool "gpu" and an autoscaler
// scaling it with the policy made for the pool's control URL.
func scaledPool(t testing.TB, policy func(controlURL string) string) (*cluster.Cluster, *harness.SimPool, *cluster.Autoscaler) {
	t.Helper()
	c, pool, plugins := simPoolCluster(t)
	as := c.StartAutoscaler(t, cluster.AutoscalerOptions{
		PluginDir: plugins,
		HCL:       harness.AutoscalerAgentHCL,
		Policies:  map[string]string{"gpu-pool.hcl": policy(pool.URL())},
	})
	return c, pool, as
}

func TestAutoscalerScalesGPUPool(t *testing.T) {
	c, pool, as := scaledPool(t, func(u string) string { return gpuPoolPolicy(u, 0, 3) })

	// An empty pool answers 0 and nothing scales.
	time.Sleep(6 * time.Second)
	if ready, starting, _, _ := pool.Snapshot(); ready+starting != 0 {
		t.Fatalf("the idle empty pool grew to %d nodes", ready+starting)
	}

	// More work than one node holds (a sim node has 5 whole GPUs).
	const jobs = 11
	for i := 0; i < jobs; i++ {
		c.RunJob(t, burstJob(fmt.Sprintf("burst-%02d", i), 20*time.Second))
	}
	deadline := time.Now().Add(4 * time.Minute)
	for {
		placed := 0
		for i := 0; i < jobs; i++ {
			stubs, _, _ := c.API().Jobs().Allocations(fmt.Sprintf("burst-%02d", i), true, nil)
			for _, s := range stubs {
				if s.ClientStatus == api.AllocClientStatusRunning || s.ClientStatus == api.AllocClientStatusComplete {
					placed++
					break
				}
			}
		}
		if placed == jobs {
			break
		}
		if time.Now().After(deadline) {
			ready, starting, _, errs := pool.Snapshot()
			t.Fatalf("%d of %d burst jobs placed after 4m; pool %d ready, %d starting, errors %v", placed, jobs, ready, starting, errs)
		}
		time.Sleep(time.Second)
	}
	if n := pool.Started(); n != 3 {
		t.Errorf("the pool started %d nodes for the burst; 11 GPUs need 3 nodes of 5", n)
	}

	// Every job finishes: no node was taken from under one.
	for i := 0; i < jobs; i++ {
		id := fmt.Sprintf("burst-%02d", i)
		stubs := c.WaitForAllocs(t, id, 1, time.Minute)
		for _, s := range stubs {
			a := waitTerminalWithin(t, c, s.ID, 2*time.Minute)
			if a.ClientStatus != api.AllocClientStatusComplete {
				t.Errorf("job %s alloc %s ended %s: %s", id, s.ID, a.ClientStatus, cluster.AllocSummary(a))
			}
		}
	}

	// Idle GPUs: the pool is drained and removed, back to zero.
	deadline = time.Now().Add(3 * time.Minute)
	for {
		ready, starting, removed, errs := pool.Snapshot()
		if len(errs) > 0 {
			t.Fatalf("sim pool errors: %v", errs)
		}
		if ready+starting == 0 && len(removed) == pool.Started() {
			for _, r := range removed {
				if len(r.Running) > 0 {
					t.Errorf("node %s was removed while running %v", r.Name, r.Running)
				}
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pool did not scale in to 0: %d ready, %d starting, %d removed\n%s", ready, starting, len(removed), tailLines(as.Log(), 40))
		}
		time.Sleep(time.Second)
	}

	// Every scaling decision in the agent's log gives the metric, the rule
	// that fired and the count chosen.
	decisions := scalingDecisions(as.Log())
	if len(decisions) < 2 {
		t.Fatalf("the autoscaler logged %d scaling decisions:\n%s", len(decisions), tailLines(as.Log(), 60))
	}
	var up, down bool
	for _, d := range decisions {
		switch {
		case strings.Contains(d, "scale up from"):
			up = true
			if !regexp.MustCompile(`scale up from \d+ to \d+: .*(nodes_needed|queued) \d+`).MatchString(d) {
				t.Errorf("scale-up decision without its metric and rule: %s", d)
			}
		case strings.Contains(d, "scale down from"):
			down = true
			if !regexp.MustCompile(`scale down from \d+ to \d+: queue empty and util [\d.]+% < floor 30%`).MatchString(d) {
				t.Errorf("scale-in decision without its metric and rule: %s", d)
			}
		}
	}
	if !up || !down {
		t.Errorf("decisions logged: %q; want a scale-up and a scale-in", decisions)
	}
}

// scalingDecisions are the agent's log lines for the scalings it made.
func scalingDecisions(log string) []string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "scaling target") && strings.Contains(l, "reason=") {
			out = append(out, l)
		}
	}
	return out
}

func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// waitTerminalWithin is waitTerminal with its own bound.
func waitTerminalWithin(t testing.TB, c *cluster.Cluster, allocID string, d time.Duration) *api.Allocation {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		a, _, err := c.API().Allocations().Info(allocID, nil)
		if err == nil && a.ClientTerminalStatus() {
			return a
		}
		if time.Now().After(deadline) {
			t.Fatalf("alloc %s not terminal after %s: %s (%v)", allocID, d, cluster.AllocSummary(a), err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// The cluster policies in jobs/autoscaler load in a real agent: parsed and
// validated, every scaling block found.
func TestAutoscalerPoliciesInJobs(t *testing.T) {
	cluster.AutoscalerBinary(t)
	files, err := filepath.Glob(filepath.Join(cluster.RepoRoot(t), "jobs", "autoscaler", "gpu-pool-*.hcl"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no policies in jobs/autoscaler: %v", err)
	}
	policies := map[string]string{}
	blocks := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		policies[filepath.Base(f)] = string(b)
		blocks += strings.Count(string(b), "\nscaling \"")
	}
	c := cluster.Start(t, cluster.Options{Clients: 0})
	as := c.StartAutoscaler(t, cluster.AutoscalerOptions{PluginDir: harness.AutoscalerPlugins(t), HCL: harness.AutoscalerAgentHCL, Policies: policies})
	deadline := time.Now().Add(30 * time.Second)
	for {
		log := as.Log()
		if strings.Contains(log, "failed to validate") || strings.Contains(log, "failed to parse") {
			t.Fatalf("the agent refused a policy:\n%s", tailLines(log, 40))
		}
		if n := strings.Count(log, "found policy in file"); n >= blocks {
			// Validation is logged after the finds.
			time.Sleep(2 * time.Second)
			if log := as.Log(); strings.Contains(log, "failed to validate") {
				t.Fatalf("the agent refused a policy:\n%s", tailLines(log, 40))
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent found %d of %d policies:\n%s", strings.Count(log, "found policy in file"), blocks, tailLines(log, 40))
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// jobs/autoscaler/agent.hcl starts a real agent with our plugins: every
// block is one the agent accepts and every plugin it names launches.
func TestAutoscalerAgentConfigInJobs(t *testing.T) {
	bin := cluster.AutoscalerBinary(t)
	plugins := harness.AutoscalerPlugins(t)
	addr := harness.FreeAddr(t)
	// The APM's and the strategy's metrics on ports of the test's own: their
	// answering shows the plugins launched with the file's config.
	src, err := os.ReadFile(filepath.Join(cluster.RepoRoot(t), "jobs", "autoscaler", "agent.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	const fileMetrics, fileStrategyMetrics = `metrics_address = "0.0.0.0:9403"`, `metrics_address = "0.0.0.0:9404"`
	for _, m := range []string{fileMetrics, fileStrategyMetrics} {
		if !strings.Contains(string(src), m) {
			t.Fatalf("jobs/autoscaler/agent.hcl has no %s (jobs/monitoring/prometheus.yml scrapes it)", m)
		}
	}
	metrics, strategyMetrics := harness.FreeAddr(t), harness.FreeAddr(t)
	// Nor the file's Nomad, 127.0.0.1:4646, which may be a make dev agent:
	// one of the test's own that knows nothing.
	const fileNomad = `address = "http://127.0.0.1:4646"`
	if !strings.Contains(string(src), fileNomad) {
		t.Fatalf("jobs/autoscaler/agent.hcl has no %s; update this test", fileNomad)
	}
	nomad := httptest.NewServer(http.NotFoundHandler())
	defer nomad.Close()
	hcl := strings.NewReplacer(fileMetrics, fmt.Sprintf("metrics_address = %q", metrics), fileStrategyMetrics, fmt.Sprintf("metrics_address = %q", strategyMetrics),
		fileNomad, fmt.Sprintf("address = %q", nomad.URL)).Replace(string(src))
	config := filepath.Join(t.TempDir(), "agent.hcl")
	if err := os.WriteFile(config, []byte(hcl), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "agent", "-config", config,
		"-plugin-dir", plugins, "-policy-dir", t.TempDir(), "-http-bind-address", "127.0.0.1", "-http-bind-port", addr[strings.LastIndexByte(addr, ':')+1:])
	var log strings.Builder
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() { cmd.Process.Kill(); <-done }()
	for {
		select {
		case err := <-done:
			done <- err
			t.Fatalf("the agent exited (%v):\n%s", err, log.String())
		case <-ctx.Done():
			t.Fatalf("the agent did not come up:\n%s", log.String())
		case <-time.After(250 * time.Millisecond):
		}
		if httpOK("http://"+addr+"/v1/health") && httpOK("http://"+metrics+"/metrics") && httpOK("http://"+strategyMetrics+gpuqueue.MetricsPath) {
			return
		}
	}
}

// A policy whose gpu-queue strategy block is refused (boot_time = "512ms";
// it must be at least 1s), run by a real agent: the agent only warns, so
// the strategy logs every refused run at error level, naming the key, and
// counts it in its metrics while the pool's other checks count as ok.
func TestAutoscalerCountsRefusedChecks(t *testing.T) {
	cluster.AutoscalerBinary(t)
	plugins := harness.AutoscalerPlugins(t)
	c := cluster.Start(t, cluster.Options{Clients: 0})
	pool := harness.NewSimPool(t, c, "gpu")
	metrics := "http://" + harness.FreeAddr(t) + gpuqueue.MetricsPath
	hcl := strings.Replace(harness.AutoscalerAgentHCL, `driver = "gpu-queue"`,
		fmt.Sprintf("driver = \"gpu-queue\"\n  config = {\n    metrics_address = %q\n  }", strings.TrimSuffix(strings.TrimPrefix(metrics, "http://"), gpuqueue.MetricsPath)), 1)
	policy := harness.GPUQueuePolicy(pool.URL(), 0, 2, 5, tracereplay.Policy{
		EvalInterval: time.Second, Cooldown: 4 * time.Second, MaxScaleUp: 2, MaxScaleDown: 1,
		IdleFloor: 30, ScaleInAfter: time.Minute,
	}, 512*time.Millisecond, false)
	as := c.StartAutoscaler(t, cluster.AutoscalerOptions{PluginDir: plugins, HCL: hcl, Policies: map[string]string{"gpu-pool.hcl": policy}})

	// runs reads the counts until cond holds of the capacity check's.
	runs := func(cond func(gpuqueue.CheckRuns) bool) map[string]gpuqueue.CheckRuns {
		t.Helper()
		deadline := time.Now().Add(45 * time.Second)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			rs, err := gpuqueue.ReadCheckRuns(ctx, metrics)
			cancel()
			byCheck := map[string]gpuqueue.CheckRuns{}
			for _, r := range rs {
				byCheck[r.Check] = r
			}
			if err == nil && cond(byCheck["capacity"]) {
				return byCheck
			}
			if time.Now().After(deadline) {
				t.Fatalf("gpu-queue's check runs %+v (%v); agent log:\n%s", rs, err, tailLines(as.Log(), 40))
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
	first := runs(func(r gpuqueue.CheckRuns) bool { return r.Refused >= 2 })
	if r := first["capacity"]; !r.Failing() || r.Pool != "gpu" || r.Query != "nodes_needed{node_pool=gpu,gpus_per_node=5}" {
		t.Errorf("capacity: %+v", r)
	}
	for _, name := range []string{"queue", "nodes", "idle"} {
		if r := first[name]; r.OK == 0 || r.Failures() != 0 {
			t.Errorf("%s: %+v", name, r)
		}
	}
	// It keeps failing: the count rises with every evaluation.
	runs(func(r gpuqueue.CheckRuns) bool { return r.Refused >= first["capacity"].Refused+2 && r.OK == 0 })

	var refusedLine string
	for _, l := range strings.Split(as.Log(), "\n") {
		if strings.Contains(l, "[ERROR]") && strings.Contains(l, "check refused") {
			refusedLine = l
			break
		}
	}
	for _, want := range []string{"check_name=capacity", "key=boot_time", "must be a duration of at least 1s"} {
		if !strings.Contains(refusedLine, want) {
			t.Fatalf("no error line of the refusal with %s in the agent's log:\n%s", want, tailLines(as.Log(), 40))
		}
	}
}

// httpOK says whether a GET of url answers 200.
func httpOK(url string) bool {
	resp, err := http.Get(url)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}
