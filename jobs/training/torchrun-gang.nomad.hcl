# Multi-node PyTorch training as a gang (docs/design/gangs.md): two nodes
# of 8 GPUs that start all at once or not at all, each running torchrun's
# elastic agent with the c10d rendezvous on rank 0's port. The controller
# (nomad-gpu controller) admits the gang when Nomad's plan places both
# members; the gpu driver starts each member once both are placed, with
# NOMAD_GPU_GANG_RANK, _WORLD_SIZE, _MASTER_ADDR and _MASTER_PORT, which
# map onto torchrun's --node-rank, --nnodes and --rdzv-endpoint. A member
# that fails, is preempted or drained stops the gang, which is admitted
# again and resumes from the newest step both members committed: the
# training script names its step in the commit marker (docs/checkpoints.md).
# The checkpoint root must be shared by the training pool's nodes (NFS).
#
# Needs PyTorch on the nodes and your train.py; it is not run by the e2e
# suite (no GPUs there), only checked: nomad job validate and
# nomad-gpu validate jobs/training/torchrun-gang.nomad.hcl.
# Run: nomad job run jobs/training/torchrun-gang.nomad.hcl
job "torchrun-gang" {
  type      = "batch"
  node_pool = "training"
  priority  = 60

  meta {
    nomad_gpu_gang = "true"
    # Members on nodes sharing one value of a node attribute, for example
    # one rack where every training node sets meta.rack:
    # nomad_gpu_gang_locality = "${meta.rack}"
  }

  group "node" {
    count = 0 # the controller scales it to the members when it admits the gang

    meta {
      nomad_gpu_gang_members = "2"
    }

    restart {
      attempts = 0 # a member's failure is the gang's
      mode     = "fail"
    }

    reschedule {
      attempts  = 0
      unlimited = false
    }

    network {
      port "rendezvous" {} # torchrun's c10d store, on rank 0
    }

    task "torchrun" {
      driver       = "gpu"
      kill_timeout = "90s" # more than commit_timeout

      config {
        command = "/bin/sh"
        args = ["-c", <<-EOT
          exec torchrun \
            --nnodes="$NOMAD_GPU_GANG_WORLD_SIZE" \
            --node-rank="$NOMAD_GPU_GANG_RANK" \
            --nproc-per-node=8 \
            --rdzv-backend=c10d \
            --rdzv-endpoint="$NOMAD_GPU_GANG_MASTER_ADDR:$NOMAD_GPU_GANG_MASTER_PORT" \
            --rdzv-id="$NOMAD_JOB_ID" \
            /opt/train/train.py \
              --checkpoint-dir="$NOMAD_GPU_CHECKPOINT_DIR" \
              --commit-marker="$NOMAD_GPU_CHECKPOINT_COMMIT" \
              --restore-dir="$NOMAD_GPU_RESTORE_DIR"
        EOT
        ]

        checkpoint {
          signal         = "SIGUSR1" # train.py saves at the next step and writes the step into the marker
          commit_timeout = "60s"
          interval       = "30m"
          keep           = 3 # a member that missed a step holds the gang to an older one
        }
      }

      resources {
        cpu    = 8000
        memory = 65536

        device "nvidia/gpu" {
          count = 8
        }
      }
    }
  }
}
