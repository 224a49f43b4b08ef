package main

// Wire tests: the built driver binary, launched and spoken to as the Nomad
// client does. The lifecycle RPCs are covered against a real client in e2e.

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nomad-gpu/nomad-gpu/wire/drivers"
	basepb "github.com/nomad-gpu/nomad-gpu/wire/proto/nomad/base"
	driverspb "github.com/nomad-gpu/nomad-gpu/wire/proto/nomad/drivers"
	"github.com/nomad-gpu/nomad-gpu/wire/wiretest"
)

var pluginBinary string

func TestMain(m *testing.M) { wiretest.Main(m, "nomad-driver-gpu", &pluginBinary) }

func TestDriverWire(t *testing.T) {
	p := wiretest.Launch(t, pluginBinary, drivers.PluginSet(nil, nil), "driver")
	d := p.Service.(driverspb.DriverClient)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// Jobspecs say driver = "gpu".
	p.CheckInfo(t, basepb.PluginType_DRIVER, "gpu")

	bad := []struct {
		cfg  map[string]any
		want string
	}{
		{map[string]any{"gpu_memory_watchdog": "explode"}, `gpu_memory_watchdog: "explode" is not a mode`},
		{map[string]any{"state_dir": "relative"}, "state_dir"},
		{map[string]any{"watchdog_interval": "1ms"}, "watchdog_interval"},
		{map[string]any{"gpu": map[string]any{"backend": "sim", "sim": map[string]any{"system": "dgx0"}}}, "gpu.sim.system"},
	}
	for _, tc := range bad {
		err := p.SetConfig(t, tc.cfg, nil)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("config %v: error %v, want one naming %q", tc.cfg, err, tc.want)
		}
	}
	dir := t.TempDir()
	// Task users must pass through to the checkpoint root (t.TempDir's
	// parent is 0700), or the driver refuses it.
	if err := os.Chmod(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := p.SetConfig(t, map[string]any{
		"state_dir":  filepath.Join(dir, "state"),
		"checkpoint": map[string]any{"root": filepath.Join(dir, "checkpoints")},
		"mps":        map[string]any{"pipe_root": filepath.Join(dir, "mps"), "log_root": filepath.Join(dir, "log")},
		"gpu":        map[string]any{"backend": "sim", "sim": map[string]any{"system": "dgxa100", "seed": "wire"}},
	}, nil); err != nil {
		t.Fatal(err)
	}

	ts, err := d.TaskConfigSchema(ctx, &driverspb.TaskConfigSchemaRequest{})
	if err != nil || ts.GetSpec().GetObject().GetAttributes()["command"] == nil {
		t.Fatalf("task config schema %v, %v", ts, err)
	}
	caps, err := d.Capabilities(ctx, &driverspb.CapabilitiesRequest{})
	if err != nil || !caps.GetCapabilities().GetSendSignals() || !caps.GetCapabilities().GetExec() {
		t.Fatalf("capabilities %v, %v", caps, err)
	}
	fp, err := d.Fingerprint(ctx, &driverspb.FingerprintRequest{})
	if err != nil {
		t.Fatal(err)
	}
	first, err := fp.Recv()
	if err != nil {
		t.Fatal(err)
	}
	attrs := first.GetAttributes()
	if attrs["driver.gpu.nvml"].GetStringVal() != "sim" || attrs["driver.gpu.cgroups"] == nil || attrs["driver.gpu.version"] == nil {
		t.Fatalf("fingerprint attributes %v", attrs)
	}
	if os.Geteuid() == 0 && first.GetHealth() != driverspb.FingerprintResponse_HEALTHY && attrs["driver.gpu.cgroups"].GetStringVal() != "none" {
		t.Fatalf("fingerprint %v: want healthy as root with cgroups", first)
	}

	// Lifecycle calls for unknown tasks answer as the client needs them to.
	if _, err := d.StopTask(ctx, &driverspb.StopTaskRequest{TaskId: "nope"}); err != nil {
		t.Errorf("StopTask of an unknown task: %v (the client retries errors)", err)
	}
	if _, err := d.DestroyTask(ctx, &driverspb.DestroyTaskRequest{TaskId: "nope", Force: true}); err != nil {
		t.Errorf("DestroyTask of an unknown task: %v", err)
	}
	if _, err := d.SignalTask(ctx, &driverspb.SignalTaskRequest{TaskId: "nope", Signal: "SIGHUP"}); status.Code(err) != codes.NotFound {
		t.Errorf("SignalTask of an unknown task: %v, want NotFound", err)
	}
}
