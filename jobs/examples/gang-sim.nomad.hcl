# A gang (docs/design/gangs.md): a simulated distributed training job of
# two members of one GPU each that run all at once or not at all.
# Registered at count 0, it places nothing: the controller's gang admission
# scales the group to its members once Nomad's plan says both fit, and
# rolls it back if one is not running within the bound. The gpu driver
# starts each member once both are placed, with its rank, the world size
# and rank 0's address and port (NOMAD_GPU_GANG_*). `nomad-gpu sim-train`
# then does what a torchrun worker would: rank 0 listens on its port, the
# other joins it, every step ends at a barrier both pass, and every step is
# checkpointed naming its step. A member that fails takes the gang with it;
# the gang comes back from the newest step both members committed.
#
# The task runs nomad-gpu from the node: the driver's Landlock lets a task
# execute only what the plugin config unveils (make dev unveils bin/).
# Check: nomad-gpu validate jobs/examples/gang-sim.nomad.hcl
# Run (make dev): nomad job run -var nomad_gpu=$PWD/bin/nomad-gpu jobs/examples/gang-sim.nomad.hcl
variable "nomad_gpu" {
  type        = string
  default     = "/usr/local/bin/nomad-gpu"
  description = "absolute path of the nomad-gpu binary on the node, unveiled rx by the driver's isolation.unveil_paths"
}

job "gang-sim" {
  type      = "batch"
  node_pool = "all" # any node: make dev's (pool "default") or one of jobs/pools/

  meta {
    nomad_gpu_gang = "true"
  }

  group "worker" {
    count = 0 # the controller admits the gang: it scales this to the members

    meta {
      nomad_gpu_gang_members = "2"
    }

    # A member's failure is the gang's: the controller stops and requeues
    # the whole gang, so Nomad restarts and reschedules nothing alone.
    restart {
      attempts = 0
      mode     = "fail"
    }

    reschedule {
      attempts  = 0
      unlimited = false
    }

    # Rank 0's port: NOMAD_GPU_GANG_MASTER_PORT on NOMAD_GPU_GANG_MASTER_ADDR.
    network {
      port "rendezvous" {}
    }

    task "member" {
      driver       = "gpu"
      kill_timeout = "30s" # the commit on stop must fit in it

      config {
        command = var.nomad_gpu
        args    = ["sim-train", "--steps", "300", "--step-time", "1s"]

        checkpoint {
          signal         = "SIGUSR1"
          commit_timeout = "20s"
          keep           = 5 # a member that missed a step holds the gang to an older one
        }
      }

      resources {
        cpu    = 100
        memory = 64

        device "nvidia/gpu" {
          count = 1
        }
      }
    }
  }
}
