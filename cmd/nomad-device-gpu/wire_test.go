package main

// Wire tests: the built binary, launched and spoken to exactly as the Nomad
// client does (go-plugin handshake, gRPC, msgpack config as the agent
// encodes it), driving every base and device RPC.

import (
	"bytes"
	"context"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/nomad-gpu/nomad-gpu/gpu"
	"github.com/nomad-gpu/nomad-gpu/wire/base"
	"github.com/nomad-gpu/nomad-gpu/wire/device"
	basepb "github.com/nomad-gpu/nomad-gpu/wire/proto/nomad/base"
	devicepb "github.com/nomad-gpu/nomad-gpu/wire/proto/nomad/device"
	"github.com/nomad-gpu/nomad-gpu/wire/structs"
	"github.com/nomad-gpu/nomad-gpu/wire/wiretest"
)

var pluginBinary string

func TestMain(m *testing.M) { wiretest.Main(m, "nomad-device-gpu", &pluginBinary) }

type conn struct {
	*wiretest.Plugin
	device devicepb.DevicePluginClient
	pid    int
}

func launch(t testing.TB) *conn {
	t.Helper()
	p := wiretest.Launch(t, pluginBinary, device.PluginSet(nil, nil), "device")
	return &conn{Plugin: p, device: p.Service.(devicepb.DevicePluginClient), pid: p.Client.ReattachConfig().Pid}
}

// setConfig sends cfg as the agent does: runtime adds the Nomad config the
// client sends only to the instance it runs, after validating twice.
func (c *conn) setConfig(t testing.TB, cfg map[string]any, runtime bool) error {
	t.Helper()
	var nomad *basepb.NomadConfig
	if runtime {
		nomad = &basepb.NomadConfig{Driver: &basepb.NomadDriverConfig{ClientMinPort: 14000, ClientMaxPort: 14512}}
	}
	return c.SetConfig(t, cfg, nomad)
}

func simConfig(control string) map[string]any {
	return map[string]any{
		"backend":            "sim",
		"fingerprint_period": "1s",
		"sim": map[string]any{
			"system":       "dgxh100",
			"seed":         "wire-test",
			"control_file": control,
			"mig":          []map[string]any{{"gpus": []int{6, 7}, "profiles": []string{"3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"}}},
		},
		"mps": []map[string]any{{"gpus": []string{"4", "5"}, "shares": 4}},
	}
}

func TestPluginInfoAndSchema(t *testing.T) {
	c := launch(t)
	c.CheckInfo(t, basepb.PluginType_DEVICE, "nomad-device-gpu")
	schema, err := c.Base.ConfigSchema(context.Background(), &basepb.ConfigSchemaRequest{})
	if err != nil {
		t.Fatal(err)
	}
	attrs := schema.GetSpec().GetObject().GetAttributes()
	for _, k := range []string{"backend", "fingerprint_period", "ignored_gpu_ids", "mps", "health", "sim", "mps_pipe_root"} {
		if attrs[k] == nil {
			t.Errorf("schema lacks %q", k)
		}
	}
}

func TestSetConfigRejectsBadValues(t *testing.T) {
	c := launch(t)
	cases := []struct {
		name string
		cfg  map[string]any
		want string
	}{
		{"unknown backend", map[string]any{"backend": "cuda"}, `backend: "cuda" is not a backend`},
		{"bad duration", map[string]any{"fingerprint_period": "5x"}, `fingerprint_period: "5x" is not a duration`},
		{"period too short", map[string]any{"fingerprint_period": "10ms"}, "fingerprint_period: 10ms is too short"},
		{"bad ignored id", map[string]any{"ignored_gpu_ids": []string{"first"}}, `ignored_gpu_ids[0]: "first" is not a GPU`},
		{"one share", map[string]any{"mps": []map[string]any{{"gpus": []string{"0"}, "shares": 1}}}, "mps[0].shares: 1 is out of range"},
		{"unknown system", map[string]any{"backend": "sim", "sim": map[string]any{"system": "dgx9"}}, "sim.system"},
		{"bad MIG profile", map[string]any{"backend": "sim", "sim": map[string]any{"system": "dgxh100",
			"mig": []map[string]any{{"gpus": []int{0}, "profiles": []string{"5g.10gb"}}}}}, "sim.mig[0].profiles[0]"},
		{"sim keys without sim backend", map[string]any{"sim": map[string]any{"seed": "x"}}, "sim: only used with backend"},
		{"fraction of a share", map[string]any{"mps": []map[string]any{{"gpus": []string{"0"}, "shares": 2.5}}}, "mps[0].shares: expected a whole number"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := c.setConfig(t, tc.cfg, false)
			if err == nil {
				t.Fatal("accepted")
			}
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want InvalidArgument containing %q", err, tc.want)
			}
		})
	}
	// Bytes no agent would send: headers claiming billions of elements,
	// a cut-off value, nesting past any config's depth.
	for _, payload := range [][]byte{
		{0xdd, 0xff, 0xff, 0xff, 0xff},
		{0xdf, 0xff, 0xff, 0xff, 0xff},
		{0xdb, 0xff, 0xff, 0xff, 0xff},
		{0xc6, 0xff, 0xff, 0xff, 0xff},
		{0x81, 0xa7, 'b', 'a', 'c', 'k', 'e', 'n', 'd'},
		append(bytes.Repeat([]byte{0x91}, 1<<16), 0xc0),
	} {
		_, err := c.Base.SetConfig(context.Background(), &basepb.SetConfigRequest{MsgpackConfig: payload, PluginApiVersion: base.APIVersion})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "nomad-device-gpu config: config is not valid msgpack: ") {
			t.Errorf("payload % x…: error %v, want InvalidArgument saying it is not valid msgpack", payload[:min(len(payload), 9)], err)
		}
	}
	// A rejected config leaves the plugin usable.
	if err := c.setConfig(t, simConfig(""), false); err != nil {
		t.Fatalf("valid config after rejections: %v", err)
	}
}

// fingerprintStream opens the stream and returns a function that waits for
// the next message.
func fingerprintStream(t *testing.T, c *conn) (func(time.Duration) *devicepb.FingerprintResponse, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := c.device.Fingerprint(ctx, &devicepb.FingerprintRequest{})
	if err != nil {
		t.Fatal(err)
	}
	msgs := make(chan *devicepb.FingerprintResponse, 16)
	errs := make(chan error, 1)
	go func() {
		for {
			m, err := stream.Recv()
			if err != nil {
				errs <- err
				return
			}
			msgs <- m
		}
	}()
	next := func(d time.Duration) *devicepb.FingerprintResponse {
		t.Helper()
		select {
		case m := <-msgs:
			return m
		case err := <-errs:
			t.Fatalf("fingerprint stream ended: %v", err)
		case <-time.After(d):
		}
		return nil
	}
	return next, cancel
}

func groupsByKey(fp *devicepb.FingerprintResponse) map[string]*devicepb.DeviceGroup {
	out := map[string]*devicepb.DeviceGroup{}
	for _, g := range fp.GetDeviceGroup() {
		out[g.GetVendor()+"/"+g.GetDeviceType()+"/"+g.GetDeviceName()] = g
	}
	return out
}

func TestFingerprintStatsReserve(t *testing.T) {
	c := launch(t)
	control := filepath.Join(t.TempDir(), "control.json")
	cfg := simConfig(control)
	// Layouts followed: one layout group per GPU. The agent it reads its
	// metadata from is this test's, and has none.
	agent := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(agent.Close)
	cfg["layout"] = map[string]any{"enabled": true, "state_file": filepath.Join(t.TempDir(), "layouts.json")}
	cfg["nomad"] = map[string]any{"address": agent.URL}
	// The agent validates twice, then configures the runtime instance.
	for i := 0; i < 2; i++ {
		if err := c.setConfig(t, cfg, false); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.setConfig(t, cfg, true); err != nil {
		t.Fatal(err)
	}
	next, cancel := fingerprintStream(t, c)
	defer cancel()
	fp := next(10 * time.Second)
	if fp == nil {
		t.Fatal("no first fingerprint within 10s")
	}
	groups := groupsByKey(fp)
	// One layout group per GPU, with no devices and every attribute
	// through the wire (one the agent refused would drop them all).
	layouts := 0
	for k, g := range groups {
		if g.GetDeviceType() != "layout" {
			continue
		}
		layouts++
		if len(g.GetDevices()) != 0 || len(g.GetAttributes()) != 12 {
			t.Errorf("layout group %s: %d devices, attributes %v", k, len(g.GetDevices()), g.GetAttributes())
		}
		delete(groups, k)
	}
	if layouts != 8 {
		t.Errorf("%d layout groups, want 8", layouts)
	}
	want := map[string]int{
		"nvidia/gpu/NVIDIA H100 80GB HBM3": 4, // 0-3 whole; 4,5 shared; 6,7 MIG
		"nvidia/mig/3g.40gb":               2,
		"nvidia/mig/2g.20gb":               2,
		"nvidia/mig/1g.10gb":               4,
	}
	// MPS shares are grouped per GPU, named by its UUID.
	var mpsGroup string
	for k, g := range groups {
		if g.GetDeviceType() == "mps" {
			if !strings.HasPrefix(g.GetDeviceName(), "GPU-") {
				t.Errorf("MPS group %s is not named by its GPU's UUID", k)
			}
			want[k] = 4
			mpsGroup = k
		}
	}
	if len(groups) != 6 || len(want) != 6 {
		t.Errorf("got groups %v, want %v and two MPS groups", slices.Sorted(maps.Keys(groups)), want)
	}
	ids := map[string]string{} // device type → one ID
	for k, n := range want {
		g := groups[k]
		if g == nil {
			t.Fatalf("missing group %s; have %v", k, slices.Sorted(maps.Keys(groups)))
		}
		if len(g.GetDevices()) != n {
			t.Errorf("%s: %d devices, want %d", k, len(g.GetDevices()), n)
		}
		for name, a := range g.GetAttributes() {
			if err := structs.AttributeFromProto(a).Validate(); err != nil {
				t.Errorf("%s attribute %s: %v (the agent would drop every device)", k, name, err)
			}
		}
		if g.GetAttributes()["memory"].GetUnit() != "MiB" {
			t.Errorf("%s: memory attribute %v lacks its unit", k, g.GetAttributes()["memory"])
		}
		for _, d := range g.GetDevices() {
			if !d.GetHealthy() || d.GetID() == "" {
				t.Errorf("%s: device %v", k, d)
			}
			if bus := d.GetHwLocality().GetPciBusId(); len(bus) != len("0000:00:00.0") {
				t.Errorf("%s: pci bus id %q not in domain:bus:device.function form", k, bus)
			}
		}
		ids[g.GetDeviceType()] = g.GetDevices()[0].GetID()
	}
	if a := groups["nvidia/mig/1g.10gb"].GetAttributes(); a["mig_profile"].GetStringVal() != "1g.10gb" || a["parent_product"].GetStringVal() != "NVIDIA H100 80GB HBM3" {
		t.Errorf("mig attributes %v", a)
	}
	if a := groups[mpsGroup].GetAttributes(); a["mps_thread_percentage"].GetIntVal() != 25 || a["mps_shares"].GetIntVal() != 4 || a["parent_product"].GetStringVal() != "NVIDIA H100 80GB HBM3" {
		t.Errorf("mps attributes %v", a)
	}

	t.Run("stats", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		st, err := c.device.Stats(ctx, &devicepb.StatsRequest{CollectionInterval: durationpb.New(200 * time.Millisecond)})
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 2; i++ {
			m, err := st.Recv()
			if err != nil {
				t.Fatal(err)
			}
			for _, g := range m.GetGroups() {
				fg := groups[g.GetVendor()+"/"+g.GetType()+"/"+g.GetName()]
				if fg == nil {
					t.Fatalf("stats group %s/%s/%s not fingerprinted", g.GetVendor(), g.GetType(), g.GetName())
				}
				if len(g.GetInstanceStats()) != len(fg.GetDevices()) {
					t.Errorf("%s: stats for %d of %d devices", g.GetName(), len(g.GetInstanceStats()), len(fg.GetDevices()))
				}
				for id, s := range g.GetInstanceStats() {
					if s.GetTimestamp() == nil || s.GetSummary() == nil {
						t.Errorf("%s: stats without timestamp or summary", id)
					}
				}
			}
		}
	})

	t.Run("reserve", func(t *testing.T) {
		ctx := context.Background()
		for typ, id := range ids {
			res, err := c.device.Reserve(ctx, &devicepb.ReserveRequest{DeviceIds: []string{id}})
			if err != nil {
				t.Fatalf("%s: %v", typ, err)
			}
			env := res.GetContainerRes().GetEnvs()
			vis := env["CUDA_VISIBLE_DEVICES"]
			switch typ {
			case "gpu":
				if vis != id {
					t.Errorf("gpu: CUDA_VISIBLE_DEVICES=%q, want %q", vis, id)
				}
			case "mig":
				if vis != id || !strings.HasPrefix(vis, "MIG-") {
					t.Errorf("mig: CUDA_VISIBLE_DEVICES=%q, want %q", vis, id)
				}
			case "mps":
				if !strings.HasPrefix(vis, "GPU-") || env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] != "25" ||
					env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "" || !strings.HasSuffix(env["CUDA_MPS_PIPE_DIRECTORY"], vis) {
					t.Errorf("mps env %v", env)
				}
			}
			if env["NVIDIA_VISIBLE_DEVICES"] != vis {
				t.Errorf("%s: NVIDIA_VISIBLE_DEVICES=%q, CUDA_VISIBLE_DEVICES=%q", typ, env["NVIDIA_VISIBLE_DEVICES"], vis)
			}
		}
		res, err := c.device.Reserve(ctx, &devicepb.ReserveRequest{})
		if err != nil || res.GetContainerRes() == nil {
			t.Fatalf("empty reserve: %v, %v (container_res must never be nil)", res, err)
		}
		_, err = c.device.Reserve(ctx, &devicepb.ReserveRequest{DeviceIds: []string{"GPU-nope"}})
		if err == nil || !strings.Contains(err.Error(), "device GPU-nope no longer exists on this node") {
			t.Fatalf("unknown ID: %v", err)
		}
	})

	t.Run("xid marks unhealthy", func(t *testing.T) {
		gpuID := ids["gpu"]
		if err := gpu.OpenControl(control).InjectXID(gpuID, 79); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(15 * time.Second)
		for time.Now().Before(deadline) {
			m := next(time.Until(deadline))
			if m == nil {
				break
			}
			for _, d := range groupsByKey(m)["nvidia/gpu/NVIDIA H100 80GB HBM3"].GetDevices() {
				if d.GetID() == gpuID && !d.GetHealthy() {
					if !strings.Contains(d.GetHealthDescription(), "XID 79") {
						t.Errorf("health description %q", d.GetHealthDescription())
					}
					return
				}
			}
		}
		t.Fatal("device not marked unhealthy after XID 79")
	})

	t.Run("application XID ignored", func(t *testing.T) {
		if err := gpu.OpenControl(control).InjectXID(ids["mig"], 13); err != nil {
			t.Fatal(err)
		}
		// Give the plugin two periods: any message must still show the MIG device healthy.
		for end := time.Now().Add(2500 * time.Millisecond); time.Now().Before(end); {
			m := next(time.Until(end))
			if m == nil {
				break
			}
			for _, g := range m.GetDeviceGroup() {
				for _, d := range g.GetDevices() {
					if d.GetID() == ids["mig"] && !d.GetHealthy() {
						t.Fatalf("XID 13 marked %s unhealthy: %s", d.GetID(), d.GetHealthDescription())
					}
				}
			}
		}
	})
}

// Without NVML (this machine has no GPU) the default backend reports no
// devices and keeps the stream open: a closed stream would disable the
// plugin on the agent until restart.
func TestNoNVMLKeepsStreamOpen(t *testing.T) {
	c := launch(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Base.SetConfig(ctx, &basepb.SetConfigRequest{PluginApiVersion: base.APIVersion}); err != nil {
		t.Fatalf("empty config (all defaults): %v", err)
	}
	next, stop := fingerprintStream(t, c)
	defer stop()
	fp := next(10 * time.Second)
	if fp == nil {
		t.Fatal("no first fingerprint")
	}
	if os.Getenv("NOMAD_GPU_HAVE_NVML") == "" && len(fp.GetDeviceGroup()) != 0 {
		t.Fatalf("devices without NVML: %v", fp)
	}
	if m := next(1500 * time.Millisecond); m != nil {
		t.Logf("extra message %v", m)
	}
}
