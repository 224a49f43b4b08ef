package devicefp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/gpu"
	"github.com/nomad-gpu/nomad-gpu/internal/metrics"
	"github.com/nomad-gpu/nomad-gpu/wire/base"
)

// simNode is a device plugin on a simulated dgxh100 cut down to three GPUs:
// GPU 0 as two MPS shares, GPU 1 in MIG mode (3g.40gb and 1g.10gb), GPU 2
// whole.
type simNode struct {
	p    *Plugin
	cfg  *Config
	ctl  *gpu.Control
	snap *gpu.Snapshot
}

const testHost = "gpu-node-1"

func newSimNode(t *testing.T, edit func(*Config)) *simNode {
	t.Helper()
	dir := t.TempDir()
	cfg := defaults(t)
	cfg.Backend = "sim"
	cfg.Sim = gpu.SimConfig{
		System: "dgxh100", Seed: "metrics-test", ControlFile: filepath.Join(dir, "sim.json"), ControlPoll: 10 * time.Millisecond,
		MIG: []gpu.MIGLayout{{GPUs: []int{1}, Profiles: []string{"3g.40gb", "1g.10gb"}}},
	}
	cfg.MPS = []MPSConfig{{GPUs: []string{"0"}, Shares: 2}}
	cfg.IgnoredGPUIDs = []string{"3", "4", "5", "6", "7"}
	cfg.MPSPipeRoot = filepath.Join(dir, "mps")
	cfg.Metrics.NodeName = testHost
	// Not the default agent address: an agent on 127.0.0.1:4646 (make dev)
	// is not the test's. Tests that read allocations set a fake of theirs.
	nomad := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(nomad.Close)
	cfg.Nomad.Address = nomad.URL
	if edit != nil {
		edit(cfg)
	}
	inv, err := gpu.Open(cfg.gpuConfig(), nil)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := inv.Snapshot()
	inv.Close()
	if err != nil {
		t.Fatal(err)
	}
	p := New(nil)
	if err := p.SetConfig(cfg, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	if _, err := p.CurrentFingerprint(); err != nil {
		t.Fatal(err)
	}
	return &simNode{p: p, cfg: cfg, ctl: gpu.OpenControl(cfg.Sim.ControlFile), snap: snap}
}

func (n *simNode) gpuUUID(i int) string    { return n.snap.GPUs[i].UUID }
func (n *simNode) migUUID(j int) string    { return n.snap.GPUs[1].MIG[j].UUID }
func (n *simNode) share(k int) string      { return contract.ShareID(n.gpuUUID(0), k) }
func (n *simNode) migProfile(j int) string { return n.snap.GPUs[1].MIG[j].Profile }

// devices lists the node's device IDs with their type and GPU index.
func (n *simNode) devices() [][3]string {
	return [][3]string{
		{n.share(0), "mps", "0"}, {n.share(1), "mps", "0"},
		{n.migUUID(0), "mig", "1"}, {n.migUUID(1), "mig", "1"},
		{n.gpuUUID(2), "gpu", "2"},
	}
}

// row is one sample line of a device series.
func row(name, id, typ, gpuIdx string, v float64, extra ...string) string {
	labels := []string{`device_id="` + id + `"`, `device_type="` + typ + `"`, `gpu="` + gpuIdx + `"`, `host="` + testHost + `"`}
	labels = append(labels, extra...)
	slices.Sort(labels)
	return fmt.Sprintf("%s{%s} %s", name, strings.Join(labels, ","), strconv.FormatFloat(v, 'g', -1, 64))
}

// expect is the exposition text of one metric family from the contract.
func expect(name string, rows ...string) string {
	m := metrics.Find(append(contract.DeviceMetrics(), contract.DriverMetrics()...), name)
	return fmt.Sprintf("# HELP %s %s\n# TYPE %s %s\n%s\n", name, m.Help, name, m.Type, strings.Join(rows, "\n"))
}

func eventuallyTrue(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// fakeNomad answers the two Nomad API reads the device plugin makes: the
// agent's own node ID and that node's allocations (a blocking query).
func fakeNomad(t *testing.T, allocs string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/agent/self":
			io.WriteString(w, `{"stats": {"client": {"node_id": "node-1"}}}`)
		case "/v1/node/node-1/allocations":
			if idx, _ := strconv.Atoi(r.URL.Query().Get("index")); idx >= 7 {
				select { // nothing changes: block as Nomad would, briefly
				case <-r.Context().Done():
					return
				case <-time.After(200 * time.Millisecond):
				}
			}
			w.Header().Set("X-Nomad-Index", "7")
			io.WriteString(w, allocs)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

func allocJSON(id, status, job, task string, deviceIDs ...string) map[string]any {
	ids, _ := json.Marshal(deviceIDs)
	var devs []any
	json.Unmarshal([]byte(`[{"Vendor":"nvidia","Type":"mps","Name":"x","DeviceIDs":`+string(ids)+`}]`), &devs)
	return map[string]any{
		"ID": id, "Namespace": "ml", "JobID": job + "-id", "TaskGroup": "g", "ClientStatus": status,
		"Job":                map[string]any{"Name": job},
		"AllocatedResources": map[string]any{"Tasks": map[string]any{task: map[string]any{"Devices": devs}}},
	}
}

func TestDeviceMetrics(t *testing.T) {
	cases := []struct {
		name    string
		edit    func(*Config)
		setup   func(t *testing.T, n *simNode)
		metrics []string
		want    func(n *simNode) string
	}{
		{
			name:    "info of whole GPUs, MIG instances and MPS shares",
			metrics: []string{contract.MetricDeviceInfo},
			want: func(n *simNode) string {
				var rows []string
				for _, d := range n.devices() {
					g, _ := strconv.Atoi(d[2])
					name, profile := n.snap.GPUs[g].Name, ""
					switch d[1] {
					case "mps":
						name = n.gpuUUID(0)
					case "mig":
						j := 0
						if d[0] == n.migUUID(1) {
							j = 1
						}
						name, profile = n.migProfile(j), n.migProfile(j)
					}
					rows = append(rows, row(contract.MetricDeviceInfo, d[0], d[1], d[2], 1,
						`device_name="`+name+`"`, `gpu_uuid="`+n.gpuUUID(g)+`"`, `model="NVIDIA H100 80GB HBM3"`,
						`mig_profile="`+profile+`"`, `pci_bus_id="`+n.snap.GPUs[g].PCIBusID+`"`))
				}
				return expect(contract.MetricDeviceInfo, rows...)
			},
		},
		{
			name:    "memory total: GPU, MIG instance, MPS share limit",
			metrics: []string{contract.MetricDeviceMemoryTotal, contract.MetricDeviceMPSThreadPercent},
			want: func(n *simNode) string {
				shareMiB := n.snap.GPUs[0].MemoryMiB / 2
				tele := func(uuid string) float64 {
					inv, _ := gpu.Open(n.cfg.gpuConfig(), nil)
					defer inv.Close()
					tm, _ := inv.Telemetry(uuid)
					return float64(tm.MemoryTotalMiB) * bytesPerMiB
				}
				return expect(contract.MetricDeviceMemoryTotal,
					row(contract.MetricDeviceMemoryTotal, n.share(0), "mps", "0", float64(shareMiB)*bytesPerMiB),
					row(contract.MetricDeviceMemoryTotal, n.share(1), "mps", "0", float64(shareMiB)*bytesPerMiB),
					row(contract.MetricDeviceMemoryTotal, n.migUUID(0), "mig", "1", tele(n.migUUID(0))),
					row(contract.MetricDeviceMemoryTotal, n.migUUID(1), "mig", "1", tele(n.migUUID(1))),
					row(contract.MetricDeviceMemoryTotal, n.gpuUUID(2), "gpu", "2", tele(n.gpuUUID(2))),
				) + expect(contract.MetricDeviceMPSThreadPercent,
					row(contract.MetricDeviceMPSThreadPercent, n.share(0), "mps", "0", 50),
					row(contract.MetricDeviceMPSThreadPercent, n.share(1), "mps", "0", 50),
				)
			},
		},
		{
			name: "utilisation and memory used follow the sim; an MPS share's are its task's (not measured: no utilisation)",
			setup: func(t *testing.T, n *simNode) {
				n.ctl.SetUtilization(n.gpuUUID(2), 80, 30)
				n.ctl.SetUtilization(n.gpuUUID(0), 40, 10)
				n.ctl.SetProcessMemory(4242, n.gpuUUID(2), 2048)
				n.ctl.SetProcessMemory(4243, n.gpuUUID(0), 5000)
				gpu.WriteShareUsage(gpu.ShareUsagePath(n.cfg.MPSPipeRoot, n.gpuUUID(0)),
					gpu.ShareUsage{UpdatedAt: time.Now(), Shares: map[string]uint64{n.share(1): 1000}})
				eventuallyTrue(t, "sim control read", func() bool {
					s, _ := n.p.newSampler(time.Now())
					tm := s.telemetry(n.gpuUUID(2))
					return tm != nil && tm.MemoryUsedMiB == 2048 && *tm.GPUUtilPercent == 80
				})
			},
			metrics: []string{contract.MetricDeviceUtilization, contract.MetricDeviceMemoryUsed},
			want: func(n *simNode) string {
				// The driver publishes share 1's task's memory, not its
				// utilisation: share 1 has no series, share 0 (no task) 0.
				return expect(contract.MetricDeviceUtilization,
					row(contract.MetricDeviceUtilization, n.share(0), "mps", "0", 0),
					row(contract.MetricDeviceUtilization, n.migUUID(0), "mig", "1", 0),
					row(contract.MetricDeviceUtilization, n.migUUID(1), "mig", "1", 0),
					row(contract.MetricDeviceUtilization, n.gpuUUID(2), "gpu", "2", 80),
				) + expect(contract.MetricDeviceMemoryUsed,
					row(contract.MetricDeviceMemoryUsed, n.share(0), "mps", "0", 0),
					row(contract.MetricDeviceMemoryUsed, n.share(1), "mps", "0", 1000*bytesPerMiB),
					row(contract.MetricDeviceMemoryUsed, n.migUUID(0), "mig", "1", 0),
					row(contract.MetricDeviceMemoryUsed, n.migUUID(1), "mig", "1", 0),
					row(contract.MetricDeviceMemoryUsed, n.gpuUUID(2), "gpu", "2", 2048*bytesPerMiB),
				)
			},
		},
		{
			name: "an XID on a MIG GPU marks its instances unhealthy; ignored XIDs are counted too",
			setup: func(t *testing.T, n *simNode) {
				ctx, cancel := context.WithCancel(context.Background())
				t.Cleanup(cancel)
				ch, _ := n.p.Fingerprint(ctx)
				go func() {
					for range ch {
					}
				}()
				n.ctl.InjectXID(n.gpuUUID(1), 79)
				n.ctl.InjectXID(n.gpuUUID(2), 13) // application fault: ignored by default
				eventuallyTrue(t, "XIDs seen", func() bool {
					n.p.metrics.mu.Lock()
					defer n.p.metrics.mu.Unlock()
					return len(n.p.metrics.xids) == 2 && n.p.model().signature != ""
				})
				eventuallyTrue(t, "MIG instances unhealthy", func() bool {
					for _, g := range n.p.model().groups {
						for _, d := range g.Devices {
							if d.ID == n.migUUID(0) {
								return !d.Healthy
							}
						}
					}
					return false
				})
			},
			metrics: []string{contract.MetricDeviceHealthy, contract.MetricXIDErrors},
			want: func(n *simNode) string {
				return expect(contract.MetricDeviceHealthy,
					row(contract.MetricDeviceHealthy, n.share(0), "mps", "0", 1),
					row(contract.MetricDeviceHealthy, n.share(1), "mps", "0", 1),
					row(contract.MetricDeviceHealthy, n.migUUID(0), "mig", "1", 0),
					row(contract.MetricDeviceHealthy, n.migUUID(1), "mig", "1", 0),
					row(contract.MetricDeviceHealthy, n.gpuUUID(2), "gpu", "2", 1),
				) + expect(contract.MetricXIDErrors,
					`nomad_gpu_xid_errors_total{host="`+testHost+`",uuid="`+n.gpuUUID(1)+`",xid="79"} 1`,
					`nomad_gpu_xid_errors_total{host="`+testHost+`",uuid="`+n.gpuUUID(2)+`",xid="13"} 1`,
				)
			},
		},
		{
			name: "a lost GPU stays listed, unhealthy, without telemetry",
			setup: func(t *testing.T, n *simNode) {
				n.ctl.SetGPULost(n.gpuUUID(2), true)
				eventuallyTrue(t, "GPU lost", func() bool {
					for _, g := range n.p.refresh(true).groups {
						for _, d := range g.Devices {
							if d.ID == n.gpuUUID(2) {
								return !d.Healthy
							}
						}
					}
					return false
				})
			},
			metrics: []string{contract.MetricDeviceHealthy, contract.MetricDevicePower},
			want: func(n *simNode) string {
				return expect(contract.MetricDeviceHealthy,
					row(contract.MetricDeviceHealthy, n.share(0), "mps", "0", 1),
					row(contract.MetricDeviceHealthy, n.share(1), "mps", "0", 1),
					row(contract.MetricDeviceHealthy, n.migUUID(0), "mig", "1", 1),
					row(contract.MetricDeviceHealthy, n.migUUID(1), "mig", "1", 1),
					row(contract.MetricDeviceHealthy, n.gpuUUID(2), "gpu", "2", 0),
				) + expect(contract.MetricDevicePower,
					row(contract.MetricDevicePower, n.share(0), "mps", "0", 70),
					row(contract.MetricDevicePower, n.share(1), "mps", "0", 70),
					row(contract.MetricDevicePower, n.migUUID(0), "mig", "1", 70),
					row(contract.MetricDevicePower, n.migUUID(1), "mig", "1", 70),
				)
			},
		},
		{
			name: "allocated or free, from the node's allocations in Nomad",
			setup: func(t *testing.T, n *simNode) {
				allocs, _ := json.Marshal([]any{
					allocJSON("alloc-1", "running", "train", "worker", n.share(0)),
					allocJSON("alloc-2", "pending", "infer", "server", n.migUUID(1)),
					allocJSON("alloc-3", "complete", "old", "done", n.gpuUUID(2)), // terminal: frees its device
				})
				n.cfg.Nomad.Address = fakeNomad(t, string(allocs)).URL
				n.cfg.Metrics.Address = "127.0.0.1:0"
				if err := n.p.SetConfig(n.cfg, &base.AgentConfig{}); err != nil {
					t.Fatal(err)
				}
				eventuallyTrue(t, "allocations known", func() bool { return n.p.metrics.watcher().current().known })
			},
			metrics: []string{contract.MetricDeviceAllocated, contract.MetricDeviceAllocationInfo, contract.MetricDeviceAllocationsKnown},
			want: func(n *simNode) string {
				info := func(id, alloc, job, task string) string {
					return `nomad_gpu_device_allocation_info{alloc_id="` + alloc + `",device_id="` + id + `",host="` + testHost +
						`",job="` + job + `",namespace="ml",task="` + task + `",task_group="g"} 1`
				}
				return expect(contract.MetricDeviceAllocated,
					row(contract.MetricDeviceAllocated, n.share(0), "mps", "0", 1),
					row(contract.MetricDeviceAllocated, n.share(1), "mps", "0", 0),
					row(contract.MetricDeviceAllocated, n.migUUID(0), "mig", "1", 0),
					row(contract.MetricDeviceAllocated, n.migUUID(1), "mig", "1", 1),
					row(contract.MetricDeviceAllocated, n.gpuUUID(2), "gpu", "2", 0),
				) + expect(contract.MetricDeviceAllocationInfo,
					info(n.share(0), "alloc-1", "train", "worker"),
					info(n.migUUID(1), "alloc-2", "infer", "server"),
				) + expect(contract.MetricDeviceAllocationsKnown, `nomad_gpu_device_allocations_known{host="`+testHost+`"} 1`)
			},
		},
		{
			name: "allocations unknown while Nomad cannot be read",
			setup: func(t *testing.T, n *simNode) {
				dead := httptest.NewServer(http.NotFoundHandler())
				dead.Close()
				n.cfg.Nomad.Address = dead.URL
				n.cfg.Metrics.Address = "127.0.0.1:0"
				n.p.SetConfig(n.cfg, &base.AgentConfig{})
			},
			metrics: []string{contract.MetricDeviceAllocated, contract.MetricDeviceAllocationsKnown},
			want: func(n *simNode) string {
				return expect(contract.MetricDeviceAllocationsKnown, `nomad_gpu_device_allocations_known{host="`+testHost+`"} 0`)
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := newSimNode(t, c.edit)
			if c.setup != nil {
				c.setup(t, n)
			}
			if err := testutil.CollectAndCompare(n.p.metrics, strings.NewReader(c.want(n)), c.metrics...); err != nil {
				t.Error(err)
			}
		})
	}
}

// With everything on (XIDs, MPS usage, allocations), every metric of the
// contract's list is exported, nothing else is, and the exposition passes
// the Prometheus linter.
func TestDeviceMetricsLintAndContract(t *testing.T) {
	n := newSimNode(t, nil)
	allocs, _ := json.Marshal([]any{allocJSON("alloc-1", "running", "train", "worker", n.share(0))})
	n.cfg.Nomad.Address = fakeNomad(t, string(allocs)).URL
	n.cfg.Metrics.Address = "127.0.0.1:0"
	if err := n.p.SetConfig(n.cfg, &base.AgentConfig{}); err != nil {
		t.Fatal(err)
	}
	eventuallyTrue(t, "allocations known", func() bool { return n.p.metrics.watcher().current().known })
	n.p.metrics.xid(gpu.Event{UUID: n.gpuUUID(2), XID: 48})

	problems, err := testutil.CollectAndLint(n.p.metrics)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(n.p.metrics)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range fams {
		got = append(got, f.GetName())
	}
	var want []string
	for _, m := range contract.DeviceMetrics() {
		want = append(want, m.Name)
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("exported %v\ncontract  %v", got, want)
	}
}

// The endpoint serves only in the runtime launch and only when configured.
func TestMetricsEndpoint(t *testing.T) {
	n := newSimNode(t, func(c *Config) { c.Metrics.Address = "127.0.0.1:0" })
	if n.p.MetricsAddr() != "" {
		t.Fatal("a validation launch (SetConfig without the agent's config) must not listen")
	}
	if err := n.p.SetConfig(n.cfg, &base.AgentConfig{}); err != nil {
		t.Fatal(err)
	}
	addr := n.p.MetricsAddr()
	if addr == "" {
		t.Fatal("not serving")
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `nomad_gpu_device_info{device_id="`+n.gpuUUID(2)+`"`) {
		t.Fatalf("%s: %.300s", resp.Status, body)
	}
	// Nomad's Fingerprint and a repeated SetConfig keep the one listener.
	n.p.SetConfig(n.cfg, &base.AgentConfig{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	n.p.Fingerprint(ctx)
	if n.p.MetricsAddr() != addr {
		t.Fatalf("rebound: %s then %s", addr, n.p.MetricsAddr())
	}
	// Unset: nothing listens.
	n.cfg.Metrics.Address = ""
	n.p.SetConfig(n.cfg, &base.AgentConfig{})
	if n.p.MetricsAddr() != "" {
		t.Fatal("still serving with metrics.address unset")
	}
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Fatalf("%s still accepts connections", addr)
	}
}

// Off by default: a plugin without a metrics block never listens, even
// fingerprinting.
func TestMetricsOffByDefault(t *testing.T) {
	n := newSimNode(t, nil)
	n.p.SetConfig(n.cfg, &base.AgentConfig{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	n.p.Fingerprint(ctx)
	if n.p.MetricsAddr() != "" || n.p.metrics.watcher() != nil {
		t.Fatalf("serving %q without metrics.address", n.p.MetricsAddr())
	}
}

// A busy address does not fail SetConfig (which would stop the agent): it
// is logged and retried.
func TestMetricsBindFailureIsNotFatal(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n := newSimNode(t, func(c *Config) { c.Metrics.Address = busy.Addr().String() })
	if err := n.p.SetConfig(n.cfg, &base.AgentConfig{}); err != nil {
		t.Fatalf("SetConfig failed for a busy metrics address: %v", err)
	}
	if n.p.MetricsAddr() != "" || n.p.metrics.exp.Err() == nil {
		t.Fatal("want a kept bind error")
	}
	busy.Close()
	n.p.metrics.activate() // as the next fingerprint period does
	if n.p.MetricsAddr() != busy.Addr().String() {
		t.Fatalf("not serving after the retry: %v", n.p.metrics.exp.Err())
	}
}

func TestMetricsConfigErrorsNameTheKey(t *testing.T) {
	cases := []struct {
		edit func(*Config)
		want string
	}{
		{func(c *Config) { c.Metrics.Address = "9400" }, `metrics.address: "9400" is not a host:port address`},
		{func(c *Config) { c.Metrics.Address = "0.0.0.0:99999" }, `metrics.address: "0.0.0.0:99999" has port "99999"`},
		{func(c *Config) { c.Metrics.NodeName = "a\tb" }, `metrics.node_name: "a\tb"`},
		{func(c *Config) { c.Nomad.Address = "127.0.0.1:4646" }, `nomad.address: "127.0.0.1:4646" is not an http://, https:// or unix:// address`},
	}
	for _, c := range cases {
		cfg := defaults(t)
		c.edit(cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %v, want %q", err, c.want)
		}
	}
	cfg := defaults(t)
	cfg.Metrics.Address = "127.0.0.1:9400"
	if err := cfg.Validate(); err != nil {
		t.Errorf("valid metrics block: %v", err)
	}
}

// Once closed, the plugin opens no inventory again: a fingerprint loop
// winding down after Close would otherwise reopen the sim node, which
// writes its control file, into a directory being removed.
func TestClosedPluginOpensNoInventory(t *testing.T) {
	n := newSimNode(t, nil)
	if err := n.p.Close(); err != nil {
		t.Fatal(err)
	}
	if inv, err := n.p.inventory(); !errors.Is(err, errClosed) || inv != nil {
		t.Fatalf("inventory after Close: %v, %v; want errClosed", inv, err)
	}
}
