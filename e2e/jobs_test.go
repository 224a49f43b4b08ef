package e2e

// Every file in jobs/ is checked against the real tools, and every jobspec
// in it runs as written on simulated GPU nodes with our plugins, or is
// skipped here by name with the reason.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/e2e/cluster"
	"github.com/nomad-gpu/nomad-gpu/e2e/harness"
	"github.com/nomad-gpu/nomad-gpu/internal/testenv"
)

// jobsFiles lists jobs/ files matching pattern (relative to jobs/).
func jobsFiles(t testing.TB, pattern string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(cluster.RepoRoot(t), "jobs", pattern))
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// nomadTool runs the nomad CLI (against addr when set) and returns its
// output and error.
func nomadTool(t testing.TB, addr string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, cluster.NomadBinary(t), args...)
	cmd.Env = os.Environ()
	if addr != "" {
		cmd.Env = append(cmd.Env, "NOMAD_ADDR="+addr)
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// Every jobspec passes `nomad job validate` and `nomad-gpu validate`,
// every agent config `nomad config validate`, every node pool spec `nomad
// node pool apply` on a real server. (Scaling policies:
// TestAutoscalerPoliciesInJobs.)
func TestJobsFilesValidate(t *testing.T) {
	c := cluster.Start(t, cluster.Options{Clients: 0})
	addr := c.Server().HTTPAddr()
	specs := jobsFiles(t, "*/*.nomad.hcl")
	if len(specs) < 8 {
		t.Fatalf("only %d jobspecs in jobs/", len(specs))
	}
	// The pools first: a job in a pool the server lacks does not validate.
	for _, f := range jobsFiles(t, "pools/*.hcl") {
		if out, err := nomadTool(t, addr, "node", "pool", "apply", f); err != nil {
			t.Errorf("nomad node pool apply %s: %v\n%s", f, err, out)
		}
	}
	// Valid without a word of warning: a warning at validate is one at
	// every submit.
	for _, f := range specs {
		if out, err := nomadTool(t, addr, "job", "validate", f); err != nil || strings.Contains(strings.ToLower(out), "warning") {
			t.Errorf("nomad job validate %s: %v\n%s", f, err, out)
		}
	}
	// And our own check before submission: every gpu task's config against
	// the driver's schema, and a gang's conventions.
	cli := cluster.RequireBinary(t, "nomad-gpu")
	for _, f := range specs {
		out, err := exec.Command(cli, "validate", "-address", addr, f).CombinedOutput()
		if err != nil {
			t.Errorf("nomad-gpu validate %s: %v\n%s", f, err, out)
		}
	}
	for _, f := range jobsFiles(t, "agent/*.hcl") {
		if out, err := nomadTool(t, "", "config", "validate", f); err != nil || !strings.Contains(out, "Configuration is valid") {
			t.Errorf("nomad config validate %s: %v\n%s", f, err, out)
		}
	}
}

// The training tiers are jobs of their own: run side by side, a P0 run
// preempts a P2 one instead of replacing it as a new version of one job.
func TestTrainingTiersAreDistinctJobs(t *testing.T) {
	f := filepath.Join(cluster.RepoRoot(t), "jobs", "training", "train.nomad.hcl")
	ids := map[string]string{}
	for _, tier := range []string{"P0", "P1", "P2"} {
		out, err := nomadTool(t, "", "job", "run", "-output", "-var", "tier="+tier, f)
		if err != nil {
			t.Fatalf("nomad job run -output -var tier=%s: %v\n%s", tier, err, out)
		}
		var spec struct{ Job api.Job }
		if err := json.Unmarshal([]byte(out), &spec); err != nil || spec.Job.ID == nil {
			t.Fatalf("tier %s: %v\n%s", tier, err, out)
		}
		id := *spec.Job.ID
		if other, ok := ids[id]; ok {
			t.Errorf("tiers %s and %s share the job ID %q", other, tier, id)
		}
		ids[id] = tier
	}
}

// workloadSkips are the jobspecs the run below leaves out, and why.
var workloadSkips = map[string]string{
	"autoscaler/inference-horizontal.nomad.hcl": "runs vLLM on a real model (/opt/vllm, /models); its scaling policy is checked by nomad job validate",
	"controller/controller.nomad.hcl":           "run by TestControllerJob (raw_exec, on nodes without GPUs)",
	"examples/checkpoint.nomad.hcl":             "run by TestExampleJobs",
	"examples/gang-sim.nomad.hcl":               "registered by TestExampleJobs (a gang waits at count 0 for the controller)",
	"examples/gpu.nomad.hcl":                    "run by TestExampleJobs",
	"examples/inference-mps.nomad.hcl":          "run by TestExampleJobs",
	"examples/mig.nomad.hcl":                    "run by TestExampleJobs",
	"examples/mps.nomad.hcl":                    "run by TestExampleJobs",
	"examples/sim-load.nomad.hcl":               "run by TestExampleJobs",
	"training/torchrun-gang.nomad.hcl":          "runs PyTorch's torchrun on real GPUs; checked by nomad job validate and nomad-gpu validate (TestJobsFilesValidate); a gang's lifecycle runs in TestGangLifecycle",
	"hpc/mpi-gang.nomad.hcl":                    "runs Open MPI over sshd on real nodes; checked by nomad job validate and nomad-gpu validate (TestJobsFilesValidate)",
	"spot/reclaim-watch.nomad.hcl":              "reads a cloud's instance metadata service; its command runs in TestSpotReclaim against a fake one",
}

// The workload jobs run on one sim GPU node per pool (training, inference,
// hpc), the pools made from jobs/pools.
func TestWorkloadJobs(t *testing.T) {
	cluster.RequirePlugin(t, "nomad-device-gpu")
	cluster.RequirePlugin(t, "nomad-driver-gpu")
	if os.Geteuid() != 0 {
		testenv.Skip(t, testenv.Root, "e2e: the gpu driver needs a root Nomad client")
	}
	c := cluster.Start(t, cluster.Options{Clients: 0})
	for _, f := range jobsFiles(t, "pools/*.hcl") {
		if out, err := nomadTool(t, c.Server().HTTPAddr(), "node", "pool", "apply", f); err != nil {
			t.Fatalf("nomad node pool apply %s: %v\n%s", f, err, out)
		}
	}
	pools := []string{"training", "inference", "hpc"}
	var opts []cluster.ClientOptions
	for _, p := range pools {
		n := harness.NewGPUNode(t)
		opts = append(opts, cluster.ClientOptions{Name: "gpu-" + p, PluginDir: cluster.PluginDir(t), ExtraHCL: n.HCL(t), ClientHCL: fmt.Sprintf("node_pool = %q", p)})
	}
	c.StartClients(t, opts...)
	for _, p := range pools {
		c.WaitForNode(t, "gpu-"+p, func(n *api.Node) bool {
			d := n.Drivers["gpu"]
			return d != nil && d.Healthy && len(deviceGroups(n)) == 5
		}, 2*time.Minute)
	}

	root := filepath.Join(cluster.RepoRoot(t), "jobs")
	ran := map[string]bool{}
	run := map[string]func(t *testing.T, src string){
		"training/train.nomad.hcl":     func(t *testing.T, src string) { runPrinting(t, c, src, "training on GPU-") },
		"training/train-mig.nomad.hcl": func(t *testing.T, src string) { runPrinting(t, c, src, "training on MIG-") },
		"hpc/hpc.nomad.hcl":            func(t *testing.T, src string) { runPrinting(t, c, src, "solving on GPU-") },
		"inference/inference.nomad.hcl": func(t *testing.T, src string) {
			runInference(t, c, src)
		},
		"inference/inference-consul.nomad.hcl": func(t *testing.T, src string) {
			testenv.Skip(t, testenv.Consul, "the Consul variant runs only against a real Consul agent, which this suite does not start yet")
		},
		"batch/burst.nomad.hcl": func(t *testing.T, src string) { runDispatched(t, c, src) },
	}
	for _, f := range jobsFiles(t, "*/*.nomad.hcl") {
		rel, _ := filepath.Rel(root, f)
		if why, ok := workloadSkips[rel]; ok {
			t.Logf("skipping %s: %s", rel, why)
			continue
		}
		fn, ok := run[rel]
		if !ok {
			t.Errorf("%s is neither run nor skipped by this test: add it", rel)
			continue
		}
		ran[rel] = true
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		t.Run(rel, func(t *testing.T) { fn(t, string(src)) })
	}
	for rel := range run {
		if !ran[rel] {
			t.Errorf("%s is gone from jobs/; update this test", rel)
		}
	}
}

// runPrinting runs the job, waits until its task prints want, and stops
// it (a checkpointing task commits on the way out).
func runPrinting(t *testing.T, c *cluster.Cluster, src, want string) {
	job := c.RunJob(t, src)
	a := c.WaitForAllocs(t, *job.ID, 1, time.Minute)[0]
	c.WaitForAllocStatus(t, a.ID, "running", 2*time.Minute)
	c.WaitForAllocLogs(t, a.ID, job.TaskGroups[0].Tasks[0].Name, "stdout", want, time.Minute)
	c.StopJob(t, *job.ID, false)
	waitTerminal(t, c, a.ID)
}

// runInference runs the service and checks it is discoverable and healthy.
func runInference(t *testing.T, c *cluster.Cluster, src string) {
	job := c.RunJob(t, src)
	allocs := c.WaitForAllocs(t, *job.ID, 2, time.Minute)
	for _, a := range allocs {
		c.WaitForAllocStatus(t, a.ID, "running", 2*time.Minute)
		c.WaitForAllocLogs(t, a.ID, "serve", "stdout", "serving on GPU-", time.Minute)
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		regs, _, err := c.API().Services().Get("inference", nil)
		healthy := 0
		for _, a := range allocs {
			checks, err := c.API().Allocations().Checks(a.ID, nil)
			if err != nil {
				continue
			}
			for _, r := range checks {
				if r.Status == "success" {
					healthy++
				}
			}
		}
		if err == nil && len(regs) == 2 && healthy == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("inference: %d registrations (err %v), %d healthy checks after 90s", len(regs), err, healthy)
		}
		time.Sleep(time.Second)
	}
	if out := nomadCLI(t, c, "service", "info", "inference"); !strings.Contains(out, "inference") {
		t.Errorf("nomad service info inference: %s", out)
	}
	c.StopJob(t, *job.ID, false)
	for _, a := range allocs {
		waitTerminal(t, c, a.ID)
	}
}

// runDispatched registers the parameterized job and dispatches one shard.
func runDispatched(t *testing.T, c *cluster.Cluster, src string) {
	job := c.RunJob(t, src)
	resp, _, err := c.API().Jobs().Dispatch(*job.ID, map[string]string{"shard": "7"}, []byte("input"), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	a := c.WaitForAllocs(t, resp.DispatchedJobID, 1, time.Minute)[0]
	c.WaitForAllocLogs(t, a.ID, "shard", "stdout", "shard 7 on GPU-", time.Minute)
	if done := waitTerminal(t, c, a.ID); done.ClientStatus != api.AllocClientStatusComplete {
		t.Errorf("the dispatched shard ended %s: %s", done.ClientStatus, cluster.AllocSummary(done))
	}
	c.StopJob(t, *job.ID, false)
}

// jobs/agent/client-sim.hcl's plugin blocks run as docs/install.md's one
// machine without a GPU runs them, with only the host paths moved under a
// root of the test's own (none of which exists beforehand, as on a fresh
// node) and the ports made the test's own: the node comes up with every device group and
// a healthy driver, and jobs/training/train.nomad.hcl runs as the driver's
// default user (nobody), checkpoints when stopped and resumes from it.
func TestSimClientConfigInJobs(t *testing.T) {
	cluster.RequirePlugin(t, "nomad-device-gpu")
	cluster.RequirePlugin(t, "nomad-driver-gpu")
	if os.Geteuid() != 0 {
		testenv.Skip(t, testenv.Root, "e2e: the gpu driver needs a root Nomad client")
	}
	src, err := os.ReadFile(filepath.Join(cluster.RepoRoot(t), "jobs", "agent", "client-sim.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	root, err := os.MkdirTemp("", "nge2e-sim")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	if err := os.Chmod(root, 0o755); err != nil { // as / is
		t.Fatal(err)
	}
	c := cluster.Start(t, cluster.Options{Clients: 0})
	plugins := simClientPlugins(t, string(src), root, c.Server().HTTPAddr())
	if out, err := nomadTool(t, c.Server().HTTPAddr(), "node", "pool", "apply", filepath.Join(cluster.RepoRoot(t), "jobs", "pools", "training.hcl")); err != nil {
		t.Fatalf("nomad node pool apply: %v\n%s", err, out)
	}
	// Of the client block, what the harness does not set itself: the
	// kill timeout a checkpointing task needs to commit.
	maxKill := regexp.MustCompile(`(?m)^\s*max_kill_timeout\s*=.*$`).FindString(string(src))
	if maxKill == "" {
		t.Fatal("client-sim.hcl sets no max_kill_timeout; the training job's commit would be cut to Nomad's 30s")
	}
	c.StartClients(t, cluster.ClientOptions{Name: "sim-1", PluginDir: cluster.PluginDir(t), ClientHCL: "node_pool = \"training\"\n" + maxKill, ExtraHCL: plugins})
	// Whole GPUs, three MIG profiles, and MPS shares of GPUs 4 and 5.
	c.WaitForNode(t, "sim-1", func(n *api.Node) bool {
		d := n.Drivers["gpu"]
		return d != nil && d.Healthy && len(deviceGroups(n)) == 6
	}, 2*time.Minute)

	train, err := os.ReadFile(filepath.Join(cluster.RepoRoot(t), "jobs", "training", "train.nomad.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	for run, want := range []string{"from step 0 (resume 0)", "(resume 1)"} {
		job := c.RunJobVars(t, string(train), `tier = "P1"`)
		a := c.WaitForAllocs(t, *job.ID, run+1, time.Minute)[run]
		c.WaitForAllocStatus(t, a.ID, "running", 2*time.Minute)
		c.WaitForAllocLogs(t, a.ID, "train", "stdout", want, time.Minute)
		if out := nomadCLI(t, c, "alloc", "exec", "-task", "train", a.ID, "id", "-un"); strings.TrimSpace(out) != "nobody" {
			t.Errorf("the task runs as %q, want nobody (default_user)", out)
		}
		c.StopJob(t, *job.ID, false)
		done := waitTerminal(t, c, a.ID)
		committed := false
		for _, e := range done.TaskStates["train"].Events {
			committed = committed || strings.HasPrefix(e.DisplayMessage, "checkpoint committed")
			if strings.Contains(e.DisplayMessage, "is longer than the task's kill_timeout") {
				t.Errorf("run %d: the commit time was cut: %s", run, e.DisplayMessage)
			}
		}
		if !committed {
			t.Fatalf("run %d: no checkpoint committed on stop: %s", run, cluster.AllocSummary(done))
		}
	}
}

// simClientPlugins is client-sim.hcl's plugin blocks with its host paths
// under root, its metrics on free ports and the driver reaching Nomad at
// nomadAddr. Each path or port it moves must be in the file, so a new one
// there fails here instead of reaching outside the test.
func simClientPlugins(t *testing.T, src, root, nomadAddr string) string {
	t.Helper()
	start, end := strings.Index(src, `plugin "nomad-device-gpu" {`), strings.Index(src, "\ntelemetry {")
	if start < 0 || end < start {
		t.Fatal(`client-sim.hcl: want the plugin blocks, then a telemetry block`)
	}
	blocks := src[start:end]
	moves := []string{
		"/var/lib/nomad-gpu", root + "/var/lib/nomad-gpu",
		"/run/nomad-gpu", root + "/run/nomad-gpu",
		"/var/log/nomad-gpu", root + "/var/log/nomad-gpu",
		"/opt/nomad/libexec/", filepath.Join(cluster.RepoRoot(t), "bin", "libexec") + "/",
		`"0.0.0.0:9401"`, fmt.Sprintf("%q", harness.FreeAddr(t)),
		`"0.0.0.0:9402"`, fmt.Sprintf("%q", harness.FreeAddr(t)),
		"\n    state_dir", fmt.Sprintf("\n    nomad {\n      address = %q\n    }\n    state_dir", nomadAddr),
	}
	for i := 0; i < len(moves); i += 2 {
		if !strings.Contains(blocks, moves[i]) {
			t.Fatalf("client-sim.hcl has no %q; update this test", moves[i])
		}
	}
	blocks = strings.NewReplacer(moves...).Replace(blocks)
	for _, host := range []string{`"/var/`, `"/run/`, `"/opt/`} {
		if strings.Contains(blocks, host) {
			t.Fatalf("client-sim.hcl names a host path this test does not move: %s", blocks)
		}
	}
	return blocks
}
