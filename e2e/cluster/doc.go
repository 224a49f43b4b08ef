// Package cluster starts real Nomad agents on loopback for end-to-end tests.
//
// A cluster is one server agent plus any number of client agents, each a
// separate `nomad agent` process with its own data dir, its own name and its
// own free http, rpc and serf ports on 127.0.0.1. Clients are real (non -dev)
// clients, so their state survives Stop/Kill followed by Restart. Every
// client has raw_exec enabled, the cloud fingerprinters denied, and
// network_interface "lo"; a test adds its plugin_dir and plugin blocks.
//
// A test that needs the device plugin:
//
//	const gpuPlugin = `
//	plugin "nomad-device-gpu" {
//	  config {
//	    backend = "sim"
//	    sim { system = "dgxh100" }
//	  }
//	}`
//
//	func TestGPU(t *testing.T) {
//		cluster.RequirePlugin(t, "nomad-device-gpu") // fails if `make build` was not run
//		c := cluster.Start(t, cluster.Options{      // skips if there is no nomad binary
//			Clients: 1,
//			Client:  cluster.ClientOptions{PluginDir: cluster.PluginDir(t), ExtraHCL: gpuPlugin},
//		})
//		node := c.WaitForNode(t, "client-1", func(n *api.Node) bool {
//			return n.NodeResources != nil && len(n.NodeResources.Devices) > 0
//		}, time.Minute)
//		job := c.RunJob(t, jobHCL)
//		allocs := c.WaitForAllocs(t, *job.ID, 1, time.Minute)
//		c.WaitForAllocStatus(t, allocs[0].ID, "complete", time.Minute)
//		out := c.WaitForAllocLogs(t, allocs[0].ID, "task", "stdout", "GPU-", 30*time.Second)
//		_, _ = node, out
//	}
//
// Clients that differ (say, each with its own sim seed) are started with
// StartClients, in parallel. TryAddClient returns the error of a client that
// refuses to start (e.g. on a bad plugin config) instead of failing.
//
// The nomad binary comes from $NOMAD_BINARY or PATH; without one, Start (and
// NomadBinary) skip the test with a single line saying so.
//
// Every wait is bounded and, when it gives up, says why: the node's status,
// drivers, devices and events; the job's evaluations and placement failures;
// the allocation's task events; or the end of a dead agent's log.
//
// Everything a cluster starts is torn down by t.Cleanup: agent processes and
// their process groups, processes the agents left behind (executors, tasks,
// plugins: found by an environment marker, or a working directory or
// executable under the cluster's directory), mounts under the cluster's
// directory, and the task cgroups of the cluster's allocations (thawed
// first: a driver killed while it froze a group to kill it leaves it frozen,
// and a frozen process takes no signal). When a test
// fails, the last lines of every agent's log are printed. Agents are also
// killed if the test binary dies (e.g. `go test -timeout`), and the next
// Start cleans up what such a run left. Set NOMAD_E2E_KEEP=1 to keep the
// cluster directory (configs, data and agent logs) after the test.
package cluster
