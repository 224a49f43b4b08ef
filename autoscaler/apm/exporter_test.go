package apm

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/nomad-gpu/nomad-gpu/controller/sizing/predict"
)

func fixedCollector(in scrapeInput) *clusterCollector {
	return newClusterCollector(func() scrapeInput { return in })
}

// fullInput has every figure: whole GPUs, MIG, MPS, util, a queue, runs,
// lists and calls.
func fullInput() scrapeInput {
	nodes := append(wholeGPUNodes(), migNode(), mpsNode())
	runs := runs()
	for i := range runs {
		runs[i].Pool = "gpu"
	}
	// A running GPU task: its predicted runtime and remaining.
	runs = append(runs, gpuRun("live", "train", "a", "gpu", "running", 1, t0.Add(-time.Minute), time.Time{}))
	return scrapeInput{
		snap: &Snapshot{Now: t0, Nodes: nodes,
			Work: []Work{
				blocked("gpu", 2, ask("nvidia/gpu", 7)),
				{Source: FromPendingAlloc, Pool: "mps", Priority: 50, Allocs: 1, Since: t0.Add(-time.Second), Asks: []DeviceAsk{{Device: DeviceSpec{Vendor: "nvidia", Type: "mps", Name: "GPU-A"}, Count: 1}}},
			},
			Util: map[string][]InstanceUtil{"a": {{h100, "a-0", 80}, {h100, "a-7", 0}}},
			Runs: runs,
			// As the read model counts wholeGPUNodes: a 3, b 1, c 8, e 6.
			Free: map[string]predict.Capacity{"gpu": {{Kind: "gpu"}: 18}}},
		lists:  []listState{{"nodes", true}, {"blocked_evaluations", true}, {"allocations", true}, {"finished_allocations", false}},
		calls:  map[string]uint64{EndpointNodes: 2, EndpointAllocs: 3},
		cost:   map[CostKey]CostTotals{{"gpu", "a100"}: {NodeSeconds: 60, AllocatedGPUSeconds: 100, IdleGPUSeconds: 380}},
		prices: mustPrices("gpu=2.5"),
	}
}

func mustPrices(s string) Prices {
	p, err := ParsePrices(s)
	if err != nil {
		panic(err)
	}
	return p
}

func TestExporterLint(t *testing.T) {
	problems, err := testutil.CollectAndLint(fixedCollector(fullInput()))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

// TestExporterMetricNames: the full fixture serves every family
// MetricNames lists, of the type and labels ExportedMetrics says, and no
// other.
func TestExporterMetricNames(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(fixedCollector(fullInput()))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	specs := map[string]MetricSpec{}
	for _, m := range ExportedMetrics() {
		specs[m.Name] = m
	}
	var got []string
	for _, mf := range mfs {
		got = append(got, mf.GetName())
		spec, ok := specs[mf.GetName()]
		if !ok {
			t.Errorf("%s served, not listed", mf.GetName())
			continue
		}
		if typ := strings.ToLower(mf.GetType().String()); typ != spec.Type {
			t.Errorf("%s: type %s, listed %s", mf.GetName(), typ, spec.Type)
		}
		for _, m := range mf.GetMetric() {
			var names []string
			for _, l := range m.GetLabel() {
				names = append(names, l.GetName())
			}
			want := slices.Sorted(slices.Values(spec.Labels))
			if !slices.Equal(names, want) {
				t.Errorf("%s: labels %v, listed %v", mf.GetName(), names, want)
				break
			}
		}
	}
	if want := MetricNames(); !slices.Equal(got, want) {
		t.Errorf("served %v\nlisted %v", got, want)
	}
	for _, n := range MetricNames() {
		if !strings.HasPrefix(n, "nomad_gpu_cluster_") && !strings.HasPrefix(n, "nomad_gpu_job_predicted_") {
			t.Errorf("%s: not prefixed nomad_gpu_cluster_ or nomad_gpu_job_predicted_", n)
		}
	}
}

// header is the HELP and TYPE lines of one exported family.
func header(name string) string {
	for _, m := range exportedMetrics {
		if m.Name == name {
			return fmt.Sprintf("# HELP %s %s\n# TYPE %s %s\n", m.Name, m.Help, m.Name, m.Type)
		}
	}
	panic(name)
}

func TestExporterCollectAndCompare(t *testing.T) {
	m := time.Minute
	in := scrapeInput{
		snap: &Snapshot{Now: t0,
			Nodes: []Node{node("a", "gpu", "a100", []UsedDevices{{h100, []string{"a-0", "a-1"}}}, wholeGPUs("a", 4))},
			Work:  []Work{{Source: FromBlockedEval, Pool: "gpu", Priority: 80, Allocs: 1, Asks: []DeviceAsk{ask("nvidia/gpu", 4)}, Since: t0.Add(-m), CapacityBlocked: true}},
			Util:  map[string][]InstanceUtil{"a": {{h100, "a-0", 90}, {h100, "a-2", 30}}},
			Runs: []AllocRun{
				{ID: "r1", Pool: "gpu", Priority: 50, Status: "complete", Created: t0.Add(-10 * m), Started: t0.Add(-9 * m), Finished: t0.Add(-m)},
				{ID: "r2", Pool: "gpu", Priority: 50, Status: "failed", Created: t0.Add(-5 * m), Started: t0.Add(-4 * m), Finished: t0.Add(-3 * m)},
			}},
		lists: []listState{{"nodes", true}, {"finished_allocations", false}},
		calls: map[string]uint64{EndpointNodes: 3, EndpointFinished: 2},
		// a100 nodes are priced, h100 nodes not.
		cost: map[CostKey]CostTotals{
			{"gpu", "a100"}: {NodeSeconds: 7200, AllocatedGPUSeconds: 3600 * 3.5, IdleGPUSeconds: 3600 * 4.5},
			{"gpu", "h100"}: {NodeSeconds: 60},
		},
		prices: mustPrices("gpu/a100=3.2,batch=1"),
	}
	cap := `{datacenter="dc1",device="nvidia/gpu/H100",pool="gpu"}`
	queue := `{device="nvidia/gpu",pool="gpu",priority="P0",state="blocked"}`
	pool := `{datacenter="dc1",pool="gpu"}`
	task := `{pool="gpu",priority="P1"}`
	stat := func(s string) string { return fmt.Sprintf(`{pool="gpu",priority="P1",stat=%q}`, s) }
	expected := header("nomad_gpu_cluster_devices") + "nomad_gpu_cluster_devices" + cap + " 4\n" +
		header("nomad_gpu_cluster_allocated_devices") + "nomad_gpu_cluster_allocated_devices" + cap + " 2\n" +
		header("nomad_gpu_cluster_free_devices") + "nomad_gpu_cluster_free_devices" + cap + " 2\n" +
		header("nomad_gpu_cluster_free_memory_bytes") + "nomad_gpu_cluster_free_memory_bytes" + cap + " 171798691840\n" +
		header("nomad_gpu_cluster_stranded_devices") + "nomad_gpu_cluster_stranded_devices" + cap + " 2\n" +
		header("nomad_gpu_cluster_stranded_slices") + "nomad_gpu_cluster_stranded_slices" + cap + " 0\n" +
		header("nomad_gpu_cluster_stranded_memory_bytes") + "nomad_gpu_cluster_stranded_memory_bytes" + cap + " 171798691840\n" +
		header("nomad_gpu_cluster_allocated_ratio") + "nomad_gpu_cluster_allocated_ratio" + cap + " 0.5\n" +
		header("nomad_gpu_cluster_utilization_ratio") + "nomad_gpu_cluster_utilization_ratio" + cap + " 0.6\n" +
		header("nomad_gpu_cluster_load_ratio") + "nomad_gpu_cluster_load_ratio" + cap + " 0.9\n" +
		// Mix: the held 2-GPU request and the queued 4-GPU one, half each;
		// the 2 free GPUs serve the first, not the second.
		header("nomad_gpu_cluster_capacity_gpus") + "nomad_gpu_cluster_capacity_gpus" + pool + " 4\n" +
		header("nomad_gpu_cluster_allocated_gpus") + "nomad_gpu_cluster_allocated_gpus" + pool + " 2\n" +
		header("nomad_gpu_cluster_free_gpus") + "nomad_gpu_cluster_free_gpus" + pool + " 2\n" +
		header("nomad_gpu_cluster_fragmentation_gpus") + "nomad_gpu_cluster_fragmentation_gpus" + pool + " 1\n" +
		header("nomad_gpu_cluster_fragmentation_ratio") + "nomad_gpu_cluster_fragmentation_ratio" + pool + " 0.5\n" +
		header("nomad_gpu_cluster_queued_allocs") + "nomad_gpu_cluster_queued_allocs" + queue + " 1\n" +
		header("nomad_gpu_cluster_queued_devices") + "nomad_gpu_cluster_queued_devices" + queue + " 4\n" +
		header("nomad_gpu_cluster_queue_wait_max_seconds") + "nomad_gpu_cluster_queue_wait_max_seconds" + queue + " 60\n" +
		header("nomad_gpu_cluster_queue_wait_mean_seconds") + "nomad_gpu_cluster_queue_wait_mean_seconds" + queue + " 60\n" +
		header("nomad_gpu_cluster_queued_never_fit_allocs") + "nomad_gpu_cluster_queued_never_fit_allocs" + queue + " 0\n" +
		header("nomad_gpu_cluster_task_wait_seconds") +
		"nomad_gpu_cluster_task_wait_seconds" + stat("max") + " 60\n" +
		"nomad_gpu_cluster_task_wait_seconds" + stat("mean") + " 60\n" +
		"nomad_gpu_cluster_task_wait_seconds" + stat("p50") + " 60\n" +
		"nomad_gpu_cluster_task_wait_seconds" + stat("p90") + " 60\n" +
		"nomad_gpu_cluster_task_wait_seconds" + stat("p99") + " 60\n" +
		header("nomad_gpu_cluster_task_run_seconds") +
		"nomad_gpu_cluster_task_run_seconds" + stat("max") + " 480\n" +
		"nomad_gpu_cluster_task_run_seconds" + stat("mean") + " 270\n" +
		"nomad_gpu_cluster_task_run_seconds" + stat("p50") + " 60\n" +
		"nomad_gpu_cluster_task_run_seconds" + stat("p90") + " 480\n" +
		"nomad_gpu_cluster_task_run_seconds" + stat("p99") + " 480\n" +
		header("nomad_gpu_cluster_allocs_started") + "nomad_gpu_cluster_allocs_started" + task + " 2\n" +
		header("nomad_gpu_cluster_allocs_finished") +
		`nomad_gpu_cluster_allocs_finished{outcome="complete",pool="gpu",priority="P1"} 1` + "\n" +
		`nomad_gpu_cluster_allocs_finished{outcome="failed",pool="gpu",priority="P1"} 1` + "\n" +
		`nomad_gpu_cluster_allocs_finished{outcome="lost",pool="gpu",priority="P1"} 0` + "\n" +
		header("nomad_gpu_cluster_alloc_failure_ratio") + "nomad_gpu_cluster_alloc_failure_ratio" + task + " 0.5\n" +
		header("nomad_gpu_cluster_list_up") +
		`nomad_gpu_cluster_list_up{list="finished_allocations"} 0` + "\n" +
		`nomad_gpu_cluster_list_up{list="nodes"} 1` + "\n" +
		header("nomad_gpu_cluster_nomad_requests_total") +
		`nomad_gpu_cluster_nomad_requests_total{endpoint="finished_allocations"} 2` + "\n" +
		`nomad_gpu_cluster_nomad_requests_total{endpoint="nodes"} 3` + "\n" +
		header("nomad_gpu_cluster_node_seconds_total") +
		`nomad_gpu_cluster_node_seconds_total{node_class="a100",pool="gpu"} 7200` + "\n" +
		`nomad_gpu_cluster_node_seconds_total{node_class="h100",pool="gpu"} 60` + "\n" +
		header("nomad_gpu_cluster_gpu_seconds_total") +
		`nomad_gpu_cluster_gpu_seconds_total{node_class="a100",pool="gpu",state="allocated"} 12600` + "\n" +
		`nomad_gpu_cluster_gpu_seconds_total{node_class="a100",pool="gpu",state="idle"} 16200` + "\n" +
		`nomad_gpu_cluster_gpu_seconds_total{node_class="h100",pool="gpu",state="allocated"} 0` + "\n" +
		`nomad_gpu_cluster_gpu_seconds_total{node_class="h100",pool="gpu",state="idle"} 0` + "\n" +
		header("nomad_gpu_cluster_price_per_node_hour") +
		`nomad_gpu_cluster_price_per_node_hour{node_class="a100",pool="gpu"} 3.2` + "\n"
	if err := testutil.CollectAndCompare(fixedCollector(in), strings.NewReader(expected)); err != nil {
		t.Fatal(err)
	}
	// Not configured: only the request counts.
	if n := testutil.CollectAndCount(fixedCollector(scrapeInput{calls: map[string]uint64{EndpointNodes: 1}})); n != 1 {
		t.Errorf("unconfigured: %d series, want 1", n)
	}
	// An empty cluster: only the lists.
	if n := testutil.CollectAndCount(fixedCollector(scrapeInput{snap: &Snapshot{Now: t0}, lists: []listState{{"nodes", true}}})); n != 1 {
		t.Errorf("empty cluster: %d series, want 1", n)
	}
}

// scrape GETs the exporter's metrics and returns each series' value by
// its exposition text (name{labels} as served, labels sorted).
func scrape(t testing.TB, addr string) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + MetricsPath)
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("scrape: %s: %s", resp.Status, body)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("scrape: line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

func reachable(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err == nil {
		c.Close()
	}
	return err == nil
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestMetricsServerReload: the exporter follows metrics_address across
// SetConfig calls, without Nomad.
func TestMetricsServerReload(t *testing.T) {
	p := New(nil)
	defer p.Close()
	base := map[string]string{"nomad_address": "http://127.0.0.1:1", "metrics_address": "127.0.0.1:0"}
	with := func(kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			if kv[i+1] == "" {
				delete(m, kv[i])
			} else {
				m[kv[i]] = kv[i+1]
			}
		}
		return m
	}
	if err := p.SetConfig(base); err != nil {
		t.Fatal(err)
	}
	addr := p.metricsAddr()
	got := scrape(t, addr)
	if v, ok := got[`nomad_gpu_cluster_list_up{list="nodes"}`]; !ok || v != 0 {
		t.Errorf("nodes list up %v %v with Nomad unreachable; scrape %v", v, ok, got)
	}
	// The same address (other keys changed, or none): not bound again.
	if err := p.SetConfig(base); err != nil || p.metricsAddr() != addr {
		t.Fatalf("same config: %v, %s → %s", err, addr, p.metricsAddr())
	}
	if err := p.SetConfig(with("stats_ttl", "5s")); err != nil || p.metricsAddr() != addr {
		t.Fatalf("other key: %v, %s → %s", err, addr, p.metricsAddr())
	}
	// A port in use: the error names the key, the old exporter and config stay.
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	cache := p.cache
	err = p.SetConfig(with("metrics_address", busy.Addr().String()))
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf(`metrics_address = %q`, busy.Addr().String())) || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("busy port: %v", err)
	}
	if p.metricsAddr() != addr || p.cache != cache || !reachable(addr) {
		t.Fatalf("busy port: exporter %s (was %s), cache replaced %v", p.metricsAddr(), addr, p.cache != cache)
	}
	// A new address: bound there, the old one closed.
	if err := p.SetConfig(with("metrics_address", "localhost:0")); err != nil {
		t.Fatal(err)
	}
	moved := p.metricsAddr()
	if moved == addr || reachable(addr) || !reachable(moved) {
		t.Fatalf("moved %s → %s; old reachable %v", addr, moved, reachable(addr))
	}
	// The old listener holding the port the new address needs.
	port := freePort(t)
	if err := p.SetConfig(with("metrics_address", fmt.Sprintf("127.0.0.1:%d", port))); err != nil {
		t.Fatal(err)
	}
	if err := p.SetConfig(with("metrics_address", fmt.Sprintf(":%d", port))); err != nil {
		t.Fatalf("127.0.0.1:%d → :%d: %v", port, port, err)
	}
	scrape(t, fmt.Sprintf("127.0.0.1:%d", port))
	// Unset: off.
	if err := p.SetConfig(with("metrics_address", "")); err != nil || p.metricsAddr() != "" || reachable(fmt.Sprintf("127.0.0.1:%d", port)) {
		t.Fatalf("unset: %v, still %q", err, p.metricsAddr())
	}
	if err := p.SetConfig(base); err != nil {
		t.Fatal(err)
	}
	addr = p.metricsAddr()
	p.Close()
	if p.metricsAddr() != "" || reachable(addr) {
		t.Fatal("exporter still up after Close")
	}
}

// TestMetricsServerOnlyPath: other paths are 404; the root says where.
func TestMetricsServerOnlyPath(t *testing.T) {
	p := New(nil)
	defer p.Close()
	if err := p.SetConfig(map[string]string{"nomad_address": "http://127.0.0.1:1", "metrics_address": "127.0.0.1:0"}); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]int{"/": 200, "/nosuch": 404, MetricsPath: 200} {
		resp, err := http.Get("http://" + p.metricsAddr() + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("%s: %s, want %d", path, resp.Status, want)
		}
	}
}
