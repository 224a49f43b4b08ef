# Node pool for spot (preemptible) GPU nodes. A job lands here only if its
# jobspec says so (node_pool = "training-spot", or "all" with a constraint
# on ${node.pool}), so work that cannot survive a reclaim never does: give
# it to jobs whose GPU tasks checkpoint (docs/spot.md). Each spot node runs
# jobs/spot/reclaim-watch.nomad.hcl. Apply:
#   nomad node pool apply jobs/pools/training-spot.hcl
node_pool "training-spot" {
  description = "spot GPU nodes: reclaimed with short notice; checkpointing batch jobs only"
  meta {
    workload = "training"
    capacity = "spot"
  }
}
