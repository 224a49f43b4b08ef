# ACL policy for nomad-gpu reclaim-watch's workload identity (see
# reclaim-watch.nomad.hcl). On the cloud's reclaim notice it drains its own
# node, which Nomad allows only with node write (the capability also sets
# eligibility and purges nodes; Nomad cannot scope it to one node), and
# stops the node's batch allocations so that Nomad places them again
# (alloc-lifecycle, in every namespace whose jobs may run on spot nodes).
namespace "*" {
  capabilities = ["read-job", "alloc-lifecycle"]
}

node {
  policy = "write"
}
