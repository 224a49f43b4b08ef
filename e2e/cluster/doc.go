// Package cluster starts real Nomad agents on loopback for end-to-end tests.
//
// A cluster is one server agent plus any number of client agents, each a
// separate `nomad agent` process with its own data dir, its own name and its
// own free http, rpc and serf ports on 127.0.0.1. Clients are real (non -dev)
// clients, so their state survives Stop/Kill followed by Restart.
//
// Typical use:
//
//	func TestSomething(t *testing.T) {
//		c := cluster.Start(t, cluster.Options{
//			Clients: 1,
//			Client: cluster.ClientOptions{
//				PluginDir: cluster.BinDir(t),
//				ExtraHCL:  `plugin "nomad-device-gpu" { config { backend = "sim" } }`,
//			},
//		})
//		node := c.WaitForNode(t, "client-1", func(n *api.Node) bool {
//			return n.NodeResources != nil && len(n.NodeResources.Devices) > 0
//		}, time.Minute)
//		job := c.RunJob(t, jobHCL)
//		allocs := c.WaitForAllocs(t, *job.ID, 1, time.Minute)
//		c.WaitForAllocStatus(t, allocs[0].ID, "complete", time.Minute)
//		out := c.WaitForAllocLogs(t, allocs[0].ID, "task", "stdout", "hello", 30*time.Second)
//	}
//
// The nomad binary comes from $NOMAD_BINARY or PATH; without one, Start (and
// NomadBinary) skip the test with a single line saying so.
//
// Everything a cluster starts is torn down by t.Cleanup: agent processes and
// their process groups, processes the agents left behind (executors, tasks,
// plugins: found by an environment marker, or a working directory or
// executable under the cluster's directory), mounts under the cluster's
// directory, and the task cgroups of the cluster's allocations. When a test
// fails, the last lines of every agent's log are printed. Set
// NOMAD_E2E_KEEP=1 to keep the cluster directory (and its agent logs) after
// the test.
package cluster
