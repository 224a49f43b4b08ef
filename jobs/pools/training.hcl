# Node pool for training: whole GPUs and MIG slices for checkpointing batch
# jobs. Apply: nomad node pool apply jobs/pools/training.hcl
node_pool "training" {
  description = "GPU nodes for training jobs (batch, checkpointed, preemptible by tier)"
  meta {
    workload = "training"
  }
}
