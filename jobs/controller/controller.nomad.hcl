# The nomad-gpu controller: the one part of nomad-gpu that changes jobs
# (preemption protection, through one priority ledger in Nomad Variables).
# Two replicas on two hosts; they elect a leader with a Nomad variable lock
# (nomad-gpu/controller/leader), and only the leader acts. A killed leader
# is replaced within -lock-ttl (30s by default; docs/controller.md).
#
# It talks to Nomad through the task API socket with its workload
# identity. Where ACLs are on, give that identity what it needs:
#   nomad acl policy apply -namespace default -job nomad-gpu-controller \
#     nomad-gpu-controller jobs/controller/acl-policy.hcl
#
# It needs no GPU: run it on any node with the exec driver and
# /usr/local/bin/nomad-gpu installed (docs/install.md), or set driver = "raw_exec".
# Run: nomad job run jobs/controller/controller.nomad.hcl
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

variable "preemption_cooldown" {
  type        = string
  default     = "5m"
  description = "how long a resumed preempted job is protected; 0s turns protection off"
}

job "nomad-gpu-controller" {
  type     = "service"
  priority = 90

  group "controller" {
    count = 2

    constraint {
      operator = "distinct_hosts"
      value    = "true"
    }

    network {
      port "metrics" {}
    }

    # Deregistered before the replica stops: Prometheus drops it first.
    shutdown_delay = "2s"

    service {
      provider = "nomad"
      name     = "nomad-gpu-controller"
      port     = "metrics"
      tags     = ["metrics"]
    }

    task "controller" {
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
          "controller",
          "-preemption-cooldown", var.preemption_cooldown,
          "-metrics-address", "${NOMAD_ADDR_metrics}",
        ]
      }

      # A stopped replica releases the lock at once.
      kill_signal  = "SIGTERM"
      kill_timeout = "10s"

      resources {
        cpu    = 200
        memory = 128
      }
    }
  }
}
