package e2e

// The monitoring loop against real parts: a sim GPU node with both
// plugins' metrics on, nomad-gpu-apm's cluster figures, gpu-queue's check
// runs, and a real Prometheus server scraping all four with the alert
// rules of jobs/monitoring. Its query API must return every metric the
// dashboard and the rules use; utilisation must follow sim-load; the
// idle-GPU alert, its `for` shortened, must go from pending to firing, and
// so must the failing-check alert for a check gpu-queue refuses.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/autoscaler/apm"
	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/e2e/cluster"
	"github.com/nomad-gpu/nomad-gpu/e2e/harness"
	"github.com/nomad-gpu/nomad-gpu/gpu"
	"github.com/nomad-gpu/nomad-gpu/internal/testenv"
	"github.com/nomad-gpu/nomad-gpu/wire/autoscaler"
)

// metricRef finds our metric names in PromQL.
var metricRef = regexp.MustCompile(`\bnomad_gpu_[a-z0-9_]+`)

// monitoringQueries are the dashboard's panel queries and the rules'
// expressions, by where they come from.
func monitoringQueries(t testing.TB) map[string]string {
	t.Helper()
	dir := filepath.Join(cluster.RepoRoot(t), "jobs", "monitoring")
	out := map[string]string{}
	b, err := os.ReadFile(filepath.Join(dir, "dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("dashboard.json: %v", err)
	}
	for _, p := range dash.Panels {
		for i, tg := range p.Targets {
			out[fmt.Sprintf("panel %q target %d", p.Title, i)] = tg.Expr
		}
	}
	rules, err := os.ReadFile(filepath.Join(dir, "alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	// One expr per rule; the file is ours and keeps each `expr:` a block
	// or a line.
	var alert string
	lines := strings.Split(string(rules), "\n")
	for i := 0; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		if a, ok := strings.CutPrefix(l, "- alert: "); ok {
			alert = a
		}
		if e, ok := strings.CutPrefix(l, "expr:"); ok {
			e = strings.TrimSpace(e)
			if e == "|" {
				e = ""
				for i+1 < len(lines) && strings.HasPrefix(lines[i+1], "          ") {
					i++
					e += strings.TrimSpace(lines[i]) + " "
				}
			}
			out["rule "+alert] = e
		}
	}
	return out
}

// exportedSeries are every series name our components export.
func exportedSeries() map[string]string {
	out := map[string]string{}
	for _, ms := range [][]contract.Metric{contract.DeviceMetrics(), contract.DriverMetrics()} {
		for _, n := range contract.SeriesNames(ms) {
			out[n] = "plugins"
		}
	}
	for _, n := range contract.SeriesNames(contract.StrategyMetrics()) {
		out[n] = "gpu-queue"
	}
	for _, n := range contract.SeriesNames(contract.ControllerMetrics()) {
		out[n] = "controller"
	}
	for _, n := range apm.MetricNames() {
		out[n] = "nomad-gpu-apm"
	}
	return out
}

// Every metric a panel or a rule names is one we export, and the rules
// pass promtool's check and their unit tests (alerts_test.yml).
func TestMonitoringNamesExportedMetrics(t *testing.T) {
	exported := exportedSeries()
	qs := monitoringQueries(t)
	if len(qs) < 20 {
		t.Fatalf("only %d queries found in jobs/monitoring", len(qs))
	}
	for where, q := range qs {
		refs := metricRef.FindAllString(q, -1)
		if len(refs) == 0 {
			t.Errorf("%s names no nomad_gpu metric: %s", where, q)
		}
		for _, r := range refs {
			if _, ok := exported[r]; !ok {
				t.Errorf("%s uses %s, which nothing exports", where, r)
			}
		}
	}
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		testenv.Skip(t, testenv.Prometheus, "e2e: no promtool (apt-get install prometheus); skipping the rule check")
	}
	dir := filepath.Join(cluster.RepoRoot(t), "jobs", "monitoring")
	for _, args := range [][]string{{"check", "rules", filepath.Join(dir, "alerts.yml")}, {"check", "config", filepath.Join(dir, "prometheus.yml")},
		{"test", "rules", filepath.Join(dir, "alerts_test.yml")}} {
		if out, err := exec.Command(promtool, args...).CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// monitored is a Nomad server with one sim GPU client (gpu-1) whose
// device plugin and driver export metrics, nomad-gpu-apm exporting the
// cluster figures, gpu-queue exporting its check runs (one check has run
// once), and a Prometheus server scraping all four.
type monitored struct {
	c    *cluster.Cluster
	node harness.GPUNode
	n    *api.Node
	prom *cluster.Prometheus
	// cli is bin/nomad-gpu, which tasks may run (sim-load).
	cli string
	// strategy is the gpu-queue plugin, as the agent would run it.
	strategy *autoscaler.Client
}

// startMonitoredCluster starts a monitored cluster, with alerts.yml loaded
// after edit (nil: as it is). It skips the test without Prometheus, the
// plugins or root. Everything stops with the test.
func startMonitoredCluster(t *testing.T, edit func(rules string) string) *monitored {
	t.Helper()
	cluster.PrometheusBinary(t)
	cluster.RequirePlugin(t, "nomad-device-gpu")
	cluster.RequirePlugin(t, "nomad-driver-gpu")
	cli := cluster.RequireBinary(t, "nomad-gpu")
	apmBin := cluster.RequireBinary(t, "nomad-gpu-apm")
	strategyBin := cluster.RequireBinary(t, "gpu-queue")
	if os.Geteuid() != 0 {
		testenv.Skip(t, testenv.Root, "e2e: the gpu driver needs a root Nomad client")
	}
	devAddr, drvAddr, apmAddr, strategyAddr := harness.FreeAddr(t), harness.FreeAddr(t), harness.FreeAddr(t), harness.FreeAddr(t)
	c := cluster.Start(t, cluster.Options{Clients: 0})
	node := harness.NewGPUNode(t)
	// The plugins reach Nomad through the server here, whose agent is not
	// the node's: node_name says which node they are.
	node.DeviceHCL = fmt.Sprintf("metrics {\naddress = %q\nnode_name = \"gpu-1\"\n}\nnomad {\naddress = %q\n}", devAddr, c.Server().HTTPAddr())
	node.DriverHCL = fmt.Sprintf("metrics {\naddress = %q\nnode_name = \"gpu-1\"\n}\nnomad {\naddress = %q\n}\nisolation {\nunveil_paths = [%q]\n}", drvAddr, c.Server().HTTPAddr(), "rx:"+filepath.Dir(cli))
	c.StartClients(t, cluster.ClientOptions{Name: "gpu-1", PluginDir: cluster.PluginDir(t), ExtraHCL: node.HCL(t)})
	n := c.WaitForNode(t, "gpu-1", func(n *api.Node) bool {
		d := n.Drivers["gpu"]
		return d != nil && d.Healthy && len(deviceGroups(n)) == 5
	}, 2*time.Minute)

	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	// gpu-1 is in the default pool: its price gives the Cost panels theirs.
	apmc, err := autoscaler.Launch(ctx, apmBin, autoscaler.TypeAPM, map[string]string{"metrics_address": apmAddr, "prices": "default=2.5"},
		autoscaler.WithNomad(&api.Config{Address: c.Server().HTTPAddr()}))
	if err != nil {
		t.Fatalf("launching nomad-gpu-apm: %v", err)
	}
	t.Cleanup(apmc.Kill)
	strategy, err := autoscaler.Launch(ctx, strategyBin, autoscaler.TypeStrategy, map[string]string{"metrics_address": strategyAddr})
	if err != nil {
		t.Fatalf("launching gpu-queue: %v", err)
	}
	t.Cleanup(strategy.Kill)
	if _, err := strategy.Run(autoscaler.Check{Name: "capacity", Query: "nodes_needed{node_pool=gpu}", Strategy: "gpu-queue",
		Config: map[string]string{"signal": "nodes_needed"}}, []autoscaler.Metric{{Time: time.Now(), Value: 0}}, 0); err != nil {
		t.Fatalf("gpu-queue: %v", err)
	}

	rules, err := os.ReadFile(filepath.Join(cluster.RepoRoot(t), "jobs", "monitoring", "alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	body := string(rules)
	if edit != nil {
		body = edit(body)
	}
	prom := c.StartPrometheus(t, cluster.PrometheusOptions{
		Targets: map[string][]string{"nomad-gpu-device": {devAddr}, "nomad-gpu-driver": {drvAddr}, "nomad-gpu-apm": {apmAddr},
			"gpu-queue": {strategyAddr}},
		Rules: map[string]string{"alerts.yml": body},
	})
	return &monitored{c: c, node: node, n: n, prom: prom, cli: cli, strategy: strategy}
}

func TestMonitoringWithPrometheus(t *testing.T) {
	// The idle-GPU rule's 10 minutes and the failing-check rule's 5,
	// shortened so the test sees them fire.
	m := startMonitoredCluster(t, func(rules string) string {
		for _, r := range [][2]string{{"for: 10m", "for: 6s"}, {"for: 5m", "for: 3s"}} {
			shortened := strings.Replace(rules, r[0], r[1], 1)
			if shortened == rules {
				t.Fatalf("alerts.yml has no `%s` to shorten", r[0])
			}
			rules = shortened
		}
		return rules
	})
	c, node, n, prom, cli := m.c, m.node, m.n, m.prom, m.cli

	// A policy check gpu-queue refuses, run as the agent would every
	// evaluation (its pool's other check keeps working).
	refused := autoscaler.Check{Name: "refused", Query: "nodes_needed{node_pool=gpu}", Strategy: "gpu-queue",
		Config: map[string]string{"signal": "nodes_needed", "pool": "monitored", "boot_time": "512ms"}}
	working := autoscaler.Check{Name: "queue", Query: "allocs_queued{node_pool=gpu}", Strategy: "gpu-queue",
		Config: map[string]string{"signal": "queued", "pool": "monitored"}}
	evaluations := time.NewTicker(time.Second)
	stopEvaluations := make(chan struct{})
	evaluated := make(chan struct{})
	go func() {
		defer close(evaluated)
		for {
			select {
			case <-stopEvaluations:
				return
			case <-evaluations.C:
			}
			m.strategy.Run(refused, []autoscaler.Metric{{Time: time.Now(), Value: 1}}, 0)
			m.strategy.Run(working, []autoscaler.Metric{{Time: time.Now(), Value: 0}}, 0)
		}
	}()
	defer func() { evaluations.Stop(); close(stopEvaluations); <-evaluated }()

	// Work for every figure: a GPU under sim load; a
	// checkpointing task stopped and run again (commit, restore); an MPS
	// task the watchdog kills; an XID; a job that cannot be placed.
	c.RunJob(t, loadJob("loaded", "service", "nvidia/gpu", 1, 1, cli+" sim-load --util 90 --duration 25s; sleep 3600"))
	c.RunJob(t, loadJob("queued", "service", "nvidia/gpu", 9, 1, "sleep 1"))
	ckpt := counterJob("ckpt", "batch", 50, 1, true)
	c.RunJob(t, ckpt)
	first := nextAlloc(t, c, "ckpt", 0, 2*time.Minute)
	waitProgress(t, c, first.ID, 20)
	c.StopJob(t, "ckpt", false)
	waitTerminal(t, c, first.ID)
	c.RunJob(t, ckpt)
	nextAlloc(t, c, "ckpt", 1, 2*time.Minute)

	c.RunJob(t, loadJob("greedy", "service", "nvidia/mps", 1, 1, "sleep 3600"))
	greedy := nextAlloc(t, c, "greedy", 0, 2*time.Minute)
	ctl := gpu.OpenControl(node.Control)
	if err := ctl.SetProcessMemory(uint32(allocTaskPID(t, c, node, greedy.ID)), deviceGPU(t, greedy), 70000); err != nil {
		t.Fatal(err)
	}
	loaded := nextAlloc(t, c, "loaded", 0, 2*time.Minute)
	var loadedGPU string
	for _, d := range loaded.AllocatedResources.Tasks["t"].Devices {
		loadedGPU = d.DeviceIDs[0]
	}
	if err := ctl.InjectXID(firstOtherGPU(t, n, loadedGPU), 48); err != nil {
		t.Fatal(err)
	}

	// Utilisation follows the load: up while sim-load runs, down after.
	waitQuery(t, prom, fmt.Sprintf(`nomad_gpu_device_utilization_percent{device_id=%q} >= 80`, loadedGPU), 90*time.Second)
	waitQuery(t, prom, fmt.Sprintf(`nomad_gpu_device_utilization_percent{device_id=%q} < 10`, loadedGPU), 90*time.Second)

	// Every metric the dashboard and the rules use is there.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var missing []string
		for _, name := range usedMetrics(t) {
			if len(prom.Query(t, fmt.Sprintf(`count({__name__=%q})`, name))) == 0 {
				missing = append(missing, name)
			}
		}
		if len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Prometheus has no series of %v", missing)
		}
		time.Sleep(2 * time.Second)
	}

	// The Cost panels answer for the pool: the loaded job holds a GPU, the
	// others are idle, and the pool has a price.
	for _, title := range costPanels {
		expr := strings.ReplaceAll(monitoringQueries(t)[fmt.Sprintf("panel %q target 0", title)], "$__range", "1m")
		waitQuery(t, prom, expr, time.Minute)
		if v := prom.Query(t, expr); len(v) != 1 || string(v[0].Metric["pool"]) != "default" || !(float64(v[0].Value) > 0) {
			t.Errorf("panel %q: %v, want one positive value for pool default", title, v)
		}
	}

	// A GPU held idle pages: pending first, then firing. (The loaded GPU
	// idles too once its sim-load is over: the rule's state is watched
	// from before that, per device.)
	c.RunJob(t, loadJob("idle", "service", "nvidia/gpu", 1, 1, "sleep 3600"))
	idle := nextAlloc(t, c, "idle", 0, 2*time.Minute)
	idleGPU := idle.AllocatedResources.Tasks["t"].Devices[0].DeviceIDs[0]
	var seen []string
	deadline = time.Now().Add(2 * time.Minute)
	for {
		st := prom.AlertState(t, "GPUAllocatedButIdle", idleGPU)
		if len(seen) == 0 || seen[len(seen)-1] != st {
			seen = append(seen, st)
		}
		if st == "firing" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GPUAllocatedButIdle states %v, want pending then firing", seen)
		}
		time.Sleep(250 * time.Millisecond)
	}
	if !contains(seen, "pending") {
		t.Errorf("GPUAllocatedButIdle states %v: never pending before firing", seen)
	}

	// The refused check pages; its pool's working check does not.
	waitQuery(t, prom, `ALERTS{alertname="GPUScalingCheckFailing",alertstate="firing",check="refused",pool="monitored",query="nodes_needed{node_pool=gpu}"}`, time.Minute)
	if v := prom.Query(t, `ALERTS{alertname="GPUScalingCheckFailing",check!="refused"}`); len(v) > 0 {
		t.Errorf("GPUScalingCheckFailing for a working check: %v", v)
	}
}

// costPanels are the dashboard's Cost row, each one instant query over
// the dashboard's range ($__range).
var costPanels = []string{"Cost per useful GPU-hour by pool", "Idle GPU-hours by pool", "Cost by pool"}

// The Cost panels' PromQL, over an hour of counters as nomad-gpu-apm
// serves them, with promtool: prices join by pool and node class (a class
// without a price drops out of cost and of useful GPU-hours alike), and
// the seconds cancel.
func TestDashboardCostQueries(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		testenv.Skip(t, testenv.Prometheus, "e2e: no promtool (apt-get install prometheus); skipping the Cost panels' check")
	}
	qs := monitoringQueries(t)
	target := func(extra string) string { return `,instance="apm:9403",job="nomad-gpu-apm"` + extra + `}` }
	series := func(name, poolClass, values string) map[string]string {
		return map[string]string{"series": name + "{" + poolClass + target(""), "values": values}
	}
	const (
		nodeS  = "nomad_gpu_cluster_node_seconds_total"
		gpuS   = "nomad_gpu_cluster_gpu_seconds_total"
		price  = "nomad_gpu_cluster_price_per_node_hour"
		base   = `pool="training",node_class="gpu-base"`
		burst  = `pool="training",node_class="gpu-burst"`
		spot   = `pool="training",node_class="gpu-spot"`
		infer  = `pool="inference",node_class=""`
		alloc  = `,state="allocated"`
		idle   = `,state="idle"`
		minute = "1m"
	)
	// One sample a minute for an hour. training: 2 gpu-base nodes of 8
	// GPUs, 8 held, at 2.1 a node-hour; 1 gpu-burst node of 8, all held,
	// at 3.2; 1 gpu-spot node of 8, all held, no price. inference: 1
	// node, its 1 GPU held, no price.
	input := []map[string]string{
		series(nodeS, base, "0+120x60"), series(nodeS, burst, "0+60x60"), series(nodeS, spot, "0+60x60"), series(nodeS, infer, "0+60x60"),
		series(gpuS, base+alloc, "0+480x60"), series(gpuS, base+idle, "0+480x60"),
		series(gpuS, burst+alloc, "0+480x60"), series(gpuS, burst+idle, "0x60"),
		series(gpuS, spot+alloc, "0+480x60"), series(gpuS, spot+idle, "0x60"),
		series(gpuS, infer+alloc, "0+60x60"), series(gpuS, infer+idle, "0x60"),
		series(price, base, "2.1x60"), series(price, burst, "3.2x60"),
	}
	// Over the last 30 minutes: training's priced nodes cost 2 × 0.5 h ×
	// 2.1 + 0.5 h × 3.2 = 3.7 for 16 × 0.5 = 8 held GPU-hours (the spot
	// node's 4 are not theirs), and 4 GPU-hours sat idle.
	want := map[string][]map[string]any{
		"Cost per useful GPU-hour by pool": {{"labels": `{pool="training"}`, "value": 3.7 / 8}},
		"Idle GPU-hours by pool":           {{"labels": `{pool="inference"}`, "value": 0}, {"labels": `{pool="training"}`, "value": 4}},
		"Cost by pool":                     {{"labels": `{pool="training"}`, "value": 3.7}},
	}
	var exprTests []map[string]any
	for _, title := range costPanels {
		expr, ok := qs[fmt.Sprintf("panel %q target 0", title)]
		if !ok {
			t.Fatalf("dashboard.json has no panel %q", title)
		}
		if !strings.Contains(expr, "[$__range]") {
			t.Errorf("panel %q does not read the dashboard's range: %s", title, expr)
		}
		exprTests = append(exprTests, map[string]any{"expr": strings.ReplaceAll(expr, "$__range", "30m"), "eval_time": "60m", "exp_samples": want[title]})
	}
	file := map[string]any{"rule_files": []string{}, "evaluation_interval": minute,
		"tests": []map[string]any{{"interval": minute, "input_series": input, "promql_expr_test": exprTests}}}
	b, err := json.Marshal(file) // JSON is YAML
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "cost_test.yml")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "test", "rules", path).CombinedOutput(); err != nil {
		t.Errorf("promtool test rules (the Cost panels): %v\n%s", err, out)
	}
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// usedMetrics are the names the dashboard and rules use, sorted.
// usedMetrics are the metrics the dashboard and the rules use that the
// monitored cluster exports: the controller's are left out (this cluster
// runs none; TestLayoutsFollowTheQueue reads its layout series from the
// replica itself).
func usedMetrics(t testing.TB) []string {
	set := map[string]bool{}
	exported := exportedSeries()
	for _, q := range monitoringQueries(t) {
		for _, r := range metricRef.FindAllString(q, -1) {
			if exported[r] != "controller" {
				set[r] = true
			}
		}
	}
	var out []string
	for n := range set {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func waitQuery(t testing.TB, p *cluster.Prometheus, expr string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for len(p.Query(t, expr)) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no result for %s after %s", expr, d)
		}
		time.Sleep(time.Second)
	}
}

// deviceGPU is the GPU UUID the alloc's first device sits on (an MPS
// share's ID starts with its GPU's UUID).
func deviceGPU(t testing.TB, a *api.Allocation) string {
	t.Helper()
	if devs := a.AllocatedResources.Tasks["t"].Devices; len(devs) > 0 {
		id := devs[0].DeviceIDs[0]
		if i := strings.Index(id, "-mps-"); i > 0 {
			return id[:i]
		}
		return id
	}
	t.Fatalf("alloc %s holds no device", a.ID)
	return ""
}

// firstOtherGPU is a whole GPU of the node other than skip.
func firstOtherGPU(t testing.TB, n *api.Node, skip string) string {
	t.Helper()
	for _, d := range n.NodeResources.Devices {
		if d.Type != "gpu" {
			continue
		}
		for _, in := range d.Instances {
			if in.ID != skip {
				return in.ID
			}
		}
	}
	t.Fatal("no other whole GPU")
	return ""
}
