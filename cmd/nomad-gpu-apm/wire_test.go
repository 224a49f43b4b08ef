package main

// Wire test: the built binary, launched and spoken to as nomad-autoscaler
// does (handshake, PluginInfo name check, SetConfig, Query over gRPC),
// against a real Nomad server when there is a nomad binary.

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/e2e/cluster"
	"github.com/nomad-gpu/nomad-gpu/wire/autoscaler"
	"github.com/nomad-gpu/nomad-gpu/wire/wiretest"
)

var pluginBinary string

func TestMain(m *testing.M) { wiretest.Main(m, "nomad-gpu-apm", &pluginBinary) }

func launch(t *testing.T, config map[string]string) (*autoscaler.Client, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	c, err := autoscaler.Launch(ctx, pluginBinary, autoscaler.TypeAPM, config)
	if err == nil {
		t.Cleanup(c.Kill)
	}
	return c, err
}

func TestWireBadConfigStopsTheAgent(t *testing.T) {
	_, err := launch(t, map[string]string{"default_gpus_per_node": "0"})
	if err == nil || !strings.Contains(err.Error(), `nomad-gpu-apm: config: default_gpus_per_node = "0"`) {
		t.Fatalf("Launch: %v", err)
	}
}

func TestWireBadMetricsAddress(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	for addr, want := range map[string]string{
		"9464":               "missing port",
		busy.Addr().String(): "address already in use",
	} {
		_, err := launch(t, map[string]string{"metrics_address": addr})
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf(`nomad-gpu-apm: config: metrics_address = %q: `, addr)) ||
			!strings.Contains(err.Error(), want) {
			t.Errorf("metrics_address %q: Launch: %v", addr, err)
		}
	}
}

// freeAddr is a 127.0.0.1 address with a port free just now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func getMetrics(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape: %s %v", resp.Status, err)
	}
	return string(body)
}

func TestWire(t *testing.T) {
	c := cluster.Start(t, cluster.Options{Clients: 0})
	if _, err := c.API().NodePools().Register(&api.NodePool{Name: "gpu"}, nil); err != nil {
		t.Fatal(err)
	}
	metrics := freeAddr(t)
	p, err := launch(t, map[string]string{"nomad_address": c.Server().HTTPAddr(), "default_gpus_per_node": "8", "min_refresh_interval": "50ms",
		"metrics_address": metrics})
	if err != nil {
		t.Fatal(err)
	}
	name, typ, err := p.PluginInfo()
	if err != nil || name != "nomad-gpu-apm" || typ != autoscaler.TypeAPM {
		t.Fatalf("PluginInfo: %q %v %v", name, typ, err)
	}
	to := time.Now().Truncate(time.Second)
	q := func(query string) []autoscaler.Metric {
		t.Helper()
		ms, err := p.Query(query, autoscaler.TimeRange{From: to.Add(-time.Minute), To: to})
		if err != nil {
			t.Fatalf("%s: %v", query, err)
		}
		return ms
	}
	// An empty pool is one 0 point at the range's end.
	if ms := q("nodes_needed{node_pool=gpu}"); len(ms) != 1 || ms[0].Value != 0 || !ms[0].Time.Equal(to) {
		t.Fatalf("empty pool: %v", ms)
	}
	c.RunJob(t, `
job "train" {
  type      = "batch"
  node_pool = "gpu"
  group "g" {
    count = 3
    task "t" {
      driver = "raw_exec"
      config { command = "/bin/true" }
      resources {
        device "nvidia/gpu" { count = 4 }
      }
    }
  }
}`)
	deadline := time.Now().Add(20 * time.Second)
	for q("gpus_queued{node_pool=gpu}")[0].Value != 12 {
		if time.Now().After(deadline) {
			t.Fatalf("gpus_queued never reached 12")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if v := q("nodes_needed{node_pool=gpu}")[0].Value; v != 2 {
		t.Errorf("nodes_needed = %v, want 2 (3 × 4 GPUs into 8-GPU nodes)", v)
	}
	// The plugin process serves the cluster figures.
	want := `nomad_gpu_cluster_queued_devices{device="nvidia/gpu",pool="gpu",priority="P1",state="blocked"} 12`
	for body := getMetrics(t, metrics); !strings.Contains(body, want); body = getMetrics(t, metrics) {
		if time.Now().After(deadline) {
			t.Fatalf("metrics lack %s:\n%s", want, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// A bad query is the check's error, naming what is allowed.
	if _, err := p.Query("gpus_queued{zone=a}", autoscaler.TimeRange{}); err == nil ||
		!strings.Contains(autoscaler.ErrorMessage(err), `unknown parameter "zone"; allowed: node_pool`) {
		t.Fatalf("bad query: %v", err)
	}
	// A reload with a bad key keeps the plugin up and says which key.
	if err := p.SetConfig(map[string]string{"gpus_per_node": "8"}); err == nil || !strings.Contains(err.Error(), `unknown key "gpus_per_node"`) {
		t.Fatalf("SetConfig: %v", err)
	}
}
