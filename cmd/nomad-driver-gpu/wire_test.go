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

	"github.com/hashicorp/go-version"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nomad-gpu/nomad-gpu/wire/base"
	"github.com/nomad-gpu/nomad-gpu/wire/drivers"
	basepb "github.com/nomad-gpu/nomad-gpu/wire/proto/nomad/base"
	driverspb "github.com/nomad-gpu/nomad-gpu/wire/proto/nomad/drivers"
	"github.com/nomad-gpu/nomad-gpu/wire/wiretest"
)

var pluginBinary string

func TestMain(m *testing.M) {
	path, cleanup, err := wiretest.BuildBinary("nomad-driver-gpu")
	if err != nil {
		panic("building the plugin: " + err.Error())
	}
	pluginBinary = path
	code := m.Run()
	cleanup()
	os.Exit(code)
}

func launch(t *testing.T) (basepb.BasePluginClient, driverspb.DriverClient) {
	t.Helper()
	_, rpc := wiretest.Start(t, pluginBinary, drivers.PluginSet(nil, nil))
	b, err := rpc.Dispense("base")
	if err != nil {
		t.Fatal(err)
	}
	d, err := rpc.Dispense("driver")
	if err != nil {
		t.Fatal(err)
	}
	return b.(basepb.BasePluginClient), d.(driverspb.DriverClient)
}

func TestDriverWire(t *testing.T) {
	b, d := launch(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	info, err := b.PluginInfo(ctx, &basepb.PluginInfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if info.GetType() != basepb.PluginType_DRIVER || info.GetName() != "gpu" {
		t.Fatalf("info %v: want a DRIVER named gpu (jobspecs say driver = \"gpu\")", info)
	}
	if _, err := version.NewVersion(info.GetPluginVersion()); err != nil {
		t.Fatalf("plugin_version %q: %v", info.GetPluginVersion(), err)
	}

	schema, err := b.ConfigSchema(ctx, &basepb.ConfigSchemaRequest{})
	if err != nil {
		t.Fatal(err)
	}
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
		payload, err := wiretest.EncodeConfig(schema.GetSpec(), tc.cfg)
		if err != nil {
			t.Fatal(err)
		}
		_, err = b.SetConfig(ctx, &basepb.SetConfigRequest{MsgpackConfig: payload, PluginApiVersion: base.APIVersion})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("config %v: error %v, want one naming %q", tc.cfg, err, tc.want)
		}
	}
	dir := t.TempDir()
	payload, err := wiretest.EncodeConfig(schema.GetSpec(), map[string]any{
		"state_dir": filepath.Join(dir, "state"),
		"mps":       map[string]any{"pipe_root": filepath.Join(dir, "mps"), "log_root": filepath.Join(dir, "log")},
		"gpu":       map[string]any{"backend": "sim", "sim": map[string]any{"system": "dgxa100", "seed": "wire"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.SetConfig(ctx, &basepb.SetConfigRequest{MsgpackConfig: payload, PluginApiVersion: base.APIVersion}); err != nil {
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
