package main

// Wire test: the built binary, launched and spoken to as nomad-autoscaler
// does (handshake, PluginInfo name check, SetConfig with the agent's
// nomad_* keys added, Run over gRPC).

import (
	"context"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nomad-gpu/nomad-gpu/autoscaler/strategy/gpuqueue"
	"github.com/nomad-gpu/nomad-gpu/wire/autoscaler"
	"github.com/nomad-gpu/nomad-gpu/wire/wiretest"
)

var pluginBinary string

func TestMain(m *testing.M) { wiretest.Main(m, "gpu-queue", &pluginBinary) }

func launch(t *testing.T, config map[string]string) (*autoscaler.Client, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	c, err := autoscaler.Launch(ctx, pluginBinary, autoscaler.TypeStrategy, config)
	if err == nil {
		t.Cleanup(c.Kill)
	}
	return c, err
}

func TestWire(t *testing.T) {
	c, err := launch(t, map[string]string{"max_scale_up": "4"})
	if err != nil {
		t.Fatal(err)
	}
	name, typ, err := c.PluginInfo()
	if err != nil || name != "gpu-queue" || typ != autoscaler.TypeStrategy {
		t.Fatalf("PluginInfo: %q %v %v", name, typ, err)
	}

	// scale from zero on a lone nodes_needed check, capped by the plugin default
	check := autoscaler.Check{Name: "capacity", Source: "nomad-gpu", Query: "nodes_needed{node_pool=gpu}",
		QueryWindow: time.Minute, Strategy: "gpu-queue", Config: map[string]string{"signal": "nodes_needed"}}
	a, err := c.Run(check, []autoscaler.Metric{{Time: time.Now(), Value: 6}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if a.Direction != autoscaler.DirectionUp || a.Count != 4 || !strings.Contains(a.Reason, "capped by max_scale_up 4") ||
		a.Meta["gpu-queue.rule"] != "activation" {
		t.Fatalf("Run: %+v", a)
	}

	// a bad strategy block is the check's error, naming the key
	check.Config = map[string]string{"signal": "nodes_needed", "max_scale_up": "-1"}
	if _, err := c.Run(check, []autoscaler.Metric{{Time: time.Now(), Value: 1}}, 0); err == nil ||
		!strings.Contains(autoscaler.ErrorMessage(err), `gpu-queue: max_scale_up: "-1" must be a positive integer`) {
		t.Fatalf("Run with a bad key: %v", err)
	}

	// reload with a bad key keeps the plugin up and says which key
	if err := c.SetConfig(map[string]string{"max_step": "2"}); err == nil || !strings.Contains(err.Error(), `gpu-queue: unknown key "max_step"`) {
		t.Fatalf("SetConfig: %v", err)
	}
}

func TestWireBadConfigStopsTheAgent(t *testing.T) {
	_, err := launch(t, map[string]string{"floor": "120"})
	if err == nil || !strings.Contains(err.Error(), `gpu-queue: floor: "120" must be a percentage from 0 to 100`) {
		t.Fatalf("Launch: %v", err)
	}
}

// With metrics_address, the plugin process serves its checks' run counts:
// a refused check counts as refused on every run.
func TestWireMetrics(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	c, err := launch(t, map[string]string{"metrics_address": addr})
	if err != nil {
		t.Fatal(err)
	}
	check := autoscaler.Check{Name: "capacity", Query: "nodes_needed{node_pool=gpu}", Strategy: "gpu-queue",
		Config: map[string]string{"signal": "nodes_needed", "pool": "gpu", "boot_time": "512ms"}}
	for range 2 {
		if _, err := c.Run(check, []autoscaler.Metric{{Time: time.Now(), Value: 1}}, 0); err == nil {
			t.Fatal("boot_time 512ms accepted")
		}
	}
	runs, err := gpuqueue.ReadCheckRuns(context.Background(), "http://"+addr+gpuqueue.MetricsPath)
	want := []gpuqueue.CheckRuns{{Pool: "gpu", Check: "capacity", Query: check.Query, Refused: 2}}
	if err != nil || !slices.Equal(runs, want) {
		t.Fatalf("got %+v, %v\nwant %+v", runs, err, want)
	}
}
