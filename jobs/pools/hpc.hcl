# Node pool for HPC: whole GPUs, several per job on one node.
# Apply: nomad node pool apply jobs/pools/hpc.hcl
node_pool "hpc" {
  description = "GPU nodes for HPC jobs that need several whole GPUs on one node"
  meta {
    workload = "hpc"
  }
}
