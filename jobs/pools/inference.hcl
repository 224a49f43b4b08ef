# Node pool for inference: GPUs shared through MPS by long-running services.
# Apply: nomad node pool apply jobs/pools/inference.hcl
node_pool "inference" {
  description = "GPU nodes for inference services on MPS shares"
  meta {
    workload = "inference"
  }
}
