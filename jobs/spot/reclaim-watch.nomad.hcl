# Drains a spot (preemptible) GPU node the moment its cloud gives notice
# that it takes the instance back: one task per node of the spot pool, a
# system job. Its batch allocations are stopped at once, so that Nomad
# places them again elsewhere: each checkpointing task commits and runs
# again on another node within the notice (about 2 minutes on AWS, 30
# seconds on GCE and Azure); services migrate. docs/spot.md.
#
# It reads the instance metadata service (link-local, only from the
# instance itself), drains its own node and stops the batch allocations
# through the task API socket with its workload identity, which needs
# node write and alloc-lifecycle:
#   nomad acl policy apply -namespace default -job nomad-gpu-reclaim-watch \
#     nomad-gpu-reclaim-watch jobs/spot/acl-policy.hcl
#
# Run: nomad job run -var provider=aws jobs/spot/reclaim-watch.nomad.hcl
variable "provider" {
  type        = string
  default     = "aws"
  description = "the cloud whose notice is read: aws, gce or azure"
}

variable "node_pool" {
  type        = string
  default     = "training-spot"
  description = "the node pool of the spot nodes (jobs/pools/training-spot.hcl)"
}

variable "driver" {
  type        = string
  default     = "exec"
  description = "exec, or raw_exec where the nodes allow it"
}

variable "nomad_gpu" {
  type        = string
  default     = "/usr/local/bin/nomad-gpu"
  description = "the nomad-gpu binary on the nodes"
}

job "nomad-gpu-reclaim-watch" {
  type      = "system"
  node_pool = var.node_pool
  priority  = 90

  group "watch" {
    task "watch" {
      driver = var.driver

      # NOMAD_TOKEN: the task's workload identity, for the task API.
      identity {
        env = true
      }

      env {
        NOMAD_ADDR = "unix://${NOMAD_SECRETS_DIR}/api.sock"
      }

      config {
        command = var.nomad_gpu
        args = [
          "reclaim-watch",
          "-provider", var.provider,
          "-node-id", "${node.unique.id}",
          "-drain-deadline", "10s",
          # AWS warns of a raised risk before the notice: new work then
          # goes elsewhere while the node's running work goes on.
          "-rebalance", var.provider == "aws" ? "cordon" : "ignore",
        ]
      }

      resources {
        cpu    = 20
        memory = 32
      }
    }
  }
}
