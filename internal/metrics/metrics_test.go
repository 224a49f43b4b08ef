package metrics

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nomad-gpu/nomad-gpu/contract"
)

func TestConfigErrorsNameTheKey(t *testing.T) {
	cases := []struct {
		cfg  Config
		want string // "" for valid
	}{
		{Config{}, ""},
		{Config{Address: "127.0.0.1:9400"}, ""},
		{Config{Address: ":9400"}, ""},
		{Config{Address: "[::1]:9400"}, ""},
		{Config{Address: "localhost:0"}, ""},
		{Config{NodeName: "gpu-node-1"}, ""},
		{Config{Address: "9400"}, `metrics.address: "9400" is not a host:port address`},
		{Config{Address: "127.0.0.1"}, `metrics.address: "127.0.0.1" is not a host:port address`},
		{Config{Address: "127.0.0.1:http"}, `metrics.address: "127.0.0.1:http" has port "http"; allowed: 0 to 65535`},
		{Config{Address: "127.0.0.1:70000"}, `has port "70000"`},
		{Config{Address: "http://127.0.0.1:9400"}, `metrics.address: "http://127.0.0.1:9400"`},
		{Config{NodeName: " node"}, `metrics.node_name: " node" must be a node name`},
		{Config{NodeName: "a\nb"}, `metrics.node_name:`},
	}
	for _, c := range cases {
		err := c.cfg.Validate("metrics")
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%+v: %v", c.cfg, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%+v: error %v, want %q", c.cfg, err, c.want)
		}
	}
}

func TestHost(t *testing.T) {
	if got := (Config{NodeName: "n1"}).Host(); got != "n1" {
		t.Errorf("host %q", got)
	}
	if got := (Config{}).Host(); got == "" {
		t.Error("no hostname")
	}
}

var upDesc = prometheus.NewDesc("nomad_gpu_test_up", "Test.", nil, nil)

type upCollector struct{}

func (upCollector) Describe(ch chan<- *prometheus.Desc) { ch <- upDesc }
func (upCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(upDesc, prometheus.GaugeValue, 1)
}

func scrape(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + Path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s: %s", Path, resp.Status, b)
	}
	return string(b)
}

func refused(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err == nil {
		c.Close()
	}
	return err != nil
}

// An exporter serves only once activated, keeps one listener across
// repeated configs, moves with the address and stops without one.
func TestExporterLifecycle(t *testing.T) {
	e := NewExporter(nil, upCollector{})
	defer e.Close()
	if err := e.SetConfig(Config{Address: "127.0.0.1:0"}); err != nil || e.Addr() != "" || e.Enabled() {
		t.Fatalf("a validation launch must not listen: %v, %q", err, e.Addr())
	}
	if err := e.Activate(); err != nil {
		t.Fatal(err)
	}
	first := e.Addr()
	if first == "" || !e.Enabled() {
		t.Fatal("not serving after Activate")
	}
	if body := scrape(t, first); !strings.Contains(body, "nomad_gpu_test_up 1") {
		t.Fatalf("body %q", body)
	}
	// The agent may call SetConfig again (reload): the same address is
	// not bound twice.
	e.SetConfig(Config{Address: "127.0.0.1:0"})
	e.Activate()
	if e.Addr() != first {
		t.Fatalf("rebound from %s to %s for the same config", first, e.Addr())
	}
	// A new address moves the listener.
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	moved := ln.Addr().String()
	ln.Close()
	if err := e.SetConfig(Config{Address: moved}); err != nil {
		t.Fatal(err)
	}
	if e.Addr() != moved || !refused(first) {
		t.Fatalf("serving %q, want %q and nothing on %s", e.Addr(), moved, first)
	}
	scrape(t, moved)
	// No address: nothing listens.
	e.SetConfig(Config{})
	if e.Addr() != "" || e.Enabled() || !refused(moved) {
		t.Fatalf("still serving %q", e.Addr())
	}
}

// A bind failure is kept and reported, never fatal, and retried.
func TestExporterBindFailureRetried(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := busy.Addr().String()
	e := NewExporter(nil, upCollector{})
	defer e.Close()
	e.SetConfig(Config{Address: addr})
	if err := e.Activate(); err == nil || e.Err() == nil || !strings.Contains(e.Err().Error(), "metrics.address") {
		t.Fatalf("bind on a busy port: %v / %v", err, e.Err())
	}
	busy.Close()
	if err := e.Activate(); err != nil || e.Err() != nil || e.Addr() != addr {
		t.Fatalf("retry: %v, %v, %q", err, e.Err(), e.Addr())
	}
	scrape(t, addr)
}

func TestDescsAndFind(t *testing.T) {
	ms := contract.DeviceMetrics()
	d := Descs(ms)
	if len(d) != len(ms) {
		t.Fatalf("%d descs for %d metrics", len(d), len(ms))
	}
	if Find(ms, contract.MetricDeviceInfo).Name != contract.MetricDeviceInfo {
		t.Fatal("Find")
	}
	defer func() {
		if recover() == nil {
			t.Fatal("Find of an unlisted name must panic")
		}
	}()
	Find(ms, "nomad_gpu_nope")
}
