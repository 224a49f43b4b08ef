# A training job on whole GPUs that checkpoints: it resumes where it stopped
# after a preemption, a drain or a restart. Priority tiers map onto Nomad
# priorities 30 apart (Nomad preempts only work at least 10 below), so P0
# preempts P1 and P2, P1 preempts P2, and work of one tier never preempts its
# own. Each tier is a job of its own (train-p0, train-p1, train-p2), so the
# tiers run side by side and a P0 run preempts a P2 one instead of
# replacing it. The training loop here is a stand-in that counts steps;
# replace the command with yours and keep the checkpoint handling.
# Run: nomad job run -var tier=P1 jobs/training/train.nomad.hcl
variable "tier" {
  type        = string
  default     = "P2"
  description = "P0 (urgent), P1 (normal) or P2 (best effort, preempted first)"
  validation {
    condition     = contains(["P0", "P1", "P2"], var.tier)
    error_message = "The tier must be P0, P1 or P2."
  }
}

locals {
  priority = { P0 = 90, P1 = 60, P2 = 30 }
}

job "train" {
  id        = "train-${lower(var.tier)}"
  type      = "batch"
  node_pool = "training"
  priority  = local.priority[var.tier]

  meta {
    tier = var.tier
    # The controller may stop it to free a node for a queued multi-GPU
    # job; it resumes from its checkpoint elsewhere (docs/controller.md).
    nomad_gpu_movable = "true"
  }

  group "trainer" {
    restart {
      attempts = 3
      mode     = "delay"
    }

    task "train" {
      driver       = "gpu"
      kill_timeout = "60s" # more than commit_timeout

      config {
        command = "/bin/sh"
        args = ["-c", <<-EOT
          step=0
          if [ -n "$NOMAD_GPU_RESTORE_DIR" ]; then step=$(cat "$NOMAD_GPU_RESTORE_DIR/step"); fi
          echo "training on $CUDA_VISIBLE_DEVICES from step $step (resume $NOMAD_GPU_RESUME_COUNT)"
          checkpoint() {
            echo $step > "$NOMAD_GPU_CHECKPOINT_DIR/step"
            echo "checkpointing step $step"      # before the marker: the stop follows it at once
            : > "$NOMAD_GPU_CHECKPOINT_COMMIT"
          }
          trap checkpoint USR1
          trap 'exit 0' INT TERM
          while :; do step=$((step+1)); sleep 0.1; done
        EOT
        ]

        checkpoint {
          signal         = "SIGUSR1"
          commit_timeout = "45s"
          interval       = "15m"
          keep           = 2
        }
      }

      resources {
        cpu    = 500
        memory = 256

        device "nvidia/gpu" {
          count = 2
        }
      }
    }
  }
}
