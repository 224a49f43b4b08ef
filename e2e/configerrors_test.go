package e2e

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/e2e/cluster"
	"github.com/nomad-gpu/nomad-gpu/e2e/harness"
	"github.com/nomad-gpu/nomad-gpu/internal/testenv"
)

// A plugin config mistake stops the client agent when it loads the plugin,
// with an error naming the key, rather than failing each task later; and a
// good config loads with no warning from where our binaries are installed.
func TestPluginConfigRefusedAtAgentStart(t *testing.T) {
	cluster.RequirePlugin(t, "nomad-device-gpu")
	cluster.RequirePlugin(t, "nomad-driver-gpu")
	c := cluster.Start(t, cluster.Options{})

	mpsOnMIG := harness.DefaultLayout
	mpsOnMIG.MPS = []int{4, 6}
	cases := []struct {
		name string
		node func(harness.GPUNode) harness.GPUNode
		want string
	}{
		{"nested cgroup_root", func(n harness.GPUNode) harness.GPUNode {
			n.DriverHCL = `cgroup_root = "a/b"`
			return n
		}, `cgroup_root: "a/b" is not a cgroup name (one name without "/" is allowed)`},
		{"relative supervisor_binary", func(n harness.GPUNode) harness.GPUNode {
			n.DriverHCL = `supervisor_binary = "libexec/nomad-driver-gpu-supervisor"`
			return n
		}, `supervisor_binary: "libexec/nomad-driver-gpu-supervisor" must be an absolute path`},
		{"denied default_user", func(n harness.GPUNode) harness.GPUNode {
			n.DriverHCL = `default_user = "root"`
			return n
		}, `default_user: "root" would fail every task without a user: user: "root" (uid 0) is denied by the plugin config`},
		{"mps on a MIG GPU", func(n harness.GPUNode) harness.GPUNode {
			n.Layout = &mpsOnMIG
			return n
		}, "mps[0].gpus[1]: GPU 6 (GPU-"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			node := tc.node(harness.NewGPUNode(t))
			a, err := c.TryAddClient(cluster.ClientOptions{
				Name: strings.ReplaceAll(tc.name, " ", "-"), PluginDir: cluster.PluginDir(t), ExtraHCL: node.HCL(t),
			})
			if err == nil {
				t.Fatalf("client with %s started", tc.name)
			}
			if a == nil {
				t.Fatalf("client not created: %v", err)
			}
			if log := a.LogTail(300); !strings.Contains(log, tc.want) {
				t.Fatalf("agent log does not say %q:\n%s", tc.want, log)
			}
		})
	}

	t.Run("good config loads without layout warnings", func(t *testing.T) {
		if os.Geteuid() != 0 {
			testenv.Skip(t, testenv.Root, "e2e: the gpu driver needs a root Nomad client")
		}
		node := harness.NewGPUNode(t)
		a := c.AddClient(t, cluster.ClientOptions{Name: "good", PluginDir: cluster.PluginDir(t), ExtraHCL: node.HCL(t)})
		c.WaitForNode(t, "good", func(n *api.Node) bool {
			d := n.Drivers["gpu"]
			return d != nil && d.Healthy && len(deviceGroups(n)) == 5
		}, 2*time.Minute)
		log := a.LogTail(2000)
		for _, warning := range []string{
			"plugin not referenced in the agent configuration file",
			"skipping subdir in plugin folder",
			"skipping un-executable file in plugin folder",
		} {
			if strings.Contains(log, warning) {
				t.Errorf("agent log has %q:\n%s", warning, log)
			}
		}
	})
}
