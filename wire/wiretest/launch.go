package wiretest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/go-plugin"
	"github.com/hashicorp/go-version"

	"github.com/nomad-gpu/nomad-gpu/wire/base"
	basepb "github.com/nomad-gpu/nomad-gpu/wire/proto/nomad/base"
)

// BuildBinary builds the main package in the current directory (a test's
// own cmd/ folder) into a temporary directory, for TestMain; call the
// returned function to remove it.
func BuildBinary(name string) (path string, cleanup func(), err error) {
	dir, err := os.MkdirTemp("", name+"-wire")
	if err != nil {
		return "", nil, err
	}
	path = filepath.Join(dir, name)
	build := exec.Command("go", "build", "-o", path, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	return path, func() { os.RemoveAll(dir) }, nil
}

// Main is a wire test's TestMain: it builds the test's own binary as name
// (BuildBinary), points *binary at it, runs the tests, removes the binary
// and exits with the tests' status.
func Main(m *testing.M, name string, binary *string) {
	path, cleanup, err := BuildBinary(name)
	if err != nil {
		fmt.Fprintf(os.Stderr, "building %s: %v\n", name, err)
		os.Exit(2)
	}
	*binary = path
	code := m.Run()
	cleanup()
	os.Exit(code)
}

// Start launches the binary as the Nomad client does and returns the client
// and a dispenser for the plugin-set keys ("base", "device", "driver"); the
// plugin is killed when the test ends.
func Start(t testing.TB, binary string, set map[string]plugin.Plugin) (*plugin.Client, plugin.ClientProtocol) {
	t.Helper()
	c, err := base.Launch(binary, nil, set, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Kill)
	rpc, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	return c, rpc
}

// Serve serves the plugin set in this process through go-plugin's real gRPC
// server and client, as the agent reaches a plugin, and returns the
// dispenser; both ends close when the test ends.
func Serve(t testing.TB, set map[string]plugin.Plugin) plugin.ClientProtocol {
	t.Helper()
	client, server := plugin.TestPluginGRPCConn(t, false, set)
	t.Cleanup(func() {
		server.Stop()
		_ = client.Close()
	})
	return client
}

// Dispense returns the client of the service under key, failing the test
// when there is none.
func Dispense(t testing.TB, rpc plugin.ClientProtocol, key string) any {
	t.Helper()
	c, err := rpc.Dispense(key)
	if err != nil {
		t.Fatalf("dispense %q: %v", key, err)
	}
	return c
}

// rpcContext bounds one call to a plugin under test.
func rpcContext(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// Plugin is a launched plugin binary with its two services dispensed.
type Plugin struct {
	Client *plugin.Client
	Base   basepb.BasePluginClient
	// Service is the client of the plugin's own service (key in Launch):
	// a devicepb.DevicePluginClient or a driverspb.DriverClient.
	Service any
}

// Launch starts the binary (Start) and dispenses "base" and key from set.
func Launch(t testing.TB, binary string, set map[string]plugin.Plugin, key string) *Plugin {
	t.Helper()
	c, rpc := Start(t, binary, set)
	return &Plugin{Client: c, Base: Dispense(t, rpc, "base").(basepb.BasePluginClient), Service: Dispense(t, rpc, key)}
}

// CheckInfo fails the test unless PluginInfo answers as the agent needs it
// to start the plugin: the given type and name, a plugin_version that parses
// as a version, and the one plugin API version the agent speaks.
func (p *Plugin) CheckInfo(t testing.TB, typ basepb.PluginType, name string) {
	t.Helper()
	info, err := p.Base.PluginInfo(rpcContext(t), &basepb.PluginInfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if info.GetType() != typ || info.GetName() != name {
		t.Fatalf("plugin info %v: want a %s named %q", info, typ, name)
	}
	if _, err := version.NewVersion(info.GetPluginVersion()); err != nil {
		t.Fatalf("plugin_version %q does not parse (the agent would refuse to start): %v", info.GetPluginVersion(), err)
	}
	if got := info.GetPluginApiVersions(); len(got) != 1 || got[0] != base.APIVersion {
		t.Fatalf("plugin API versions %v, want [%s]", got, base.APIVersion)
	}
}

// SetConfig encodes cfg against the plugin's own config schema as the agent
// does (EncodeConfig) and sends it. nomad is what the client adds when it
// configures the instance it will run, nil when it only validates. Only the
// plugin's answer is returned; failing to encode fails the test.
func (p *Plugin) SetConfig(t testing.TB, cfg map[string]any, nomad *basepb.NomadConfig) error {
	t.Helper()
	ctx := rpcContext(t)
	schema, err := p.Base.ConfigSchema(ctx, &basepb.ConfigSchemaRequest{})
	if err != nil {
		t.Fatal(err)
	}
	payload, err := EncodeConfig(schema.GetSpec(), cfg)
	if err != nil {
		t.Fatalf("encoding config %v as the agent would: %v", cfg, err)
	}
	_, err = p.Base.SetConfig(ctx, &basepb.SetConfigRequest{MsgpackConfig: payload, PluginApiVersion: base.APIVersion, NomadConfig: nomad})
	return err
}
