# ACL policy for the nomad-gpu controller's workload identity (see
# controller.nomad.hcl). It reads the cluster, registers jobs again with a
# changed priority, and keeps the priority ledger and its leader lock in
# variables under nomad-gpu/. Give it the namespaces of the jobs it
# protects ("*" for all).
#
# read-job also opens Nomad's event stream of allocations, which the
# controller follows instead of listing every allocation at each change;
# Nomad opens it for all namespaces only when read-job is granted in every
# one of them, so keep namespace "*" unless the cost of lists is fine.
#
# node "write" is for GPU layouts that follow the queue: the controller
# writes each GPU's layout into its node's dynamic metadata
# (nomad_gpu.layout.<GPU-UUID>), which Nomad allows only with node write.
# Nomad cannot scope it more narrowly: the same capability drains nodes,
# sets their eligibility and purges them. Run the controller with
# -layouts=false and set node back to "read" if that is too much.
#
# alloc-lifecycle is for moving checkpointed work: the controller stops
# an allocation that opted in (job meta nomad_gpu_movable) so that Nomad
# places it again, holding the node it frees ineligible meanwhile, or the
# overloaded MPS GPU it relieves (node metadata nomad_gpu.hold.<GPU-UUID>)
# (node write). Drop it with -moves=false.
namespace "*" {
  capabilities = ["read-job", "submit-job", "list-jobs", "alloc-lifecycle"]

  variables {
    path "nomad-gpu/*" {
      capabilities = ["read", "write", "list", "destroy"]
    }
  }
}

node {
  policy = "write"
}
