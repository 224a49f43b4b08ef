# A training job that checkpoints: it counts (stand-in for training steps),
# resumes from its newest checkpoint, and on the checkpoint signal writes its
# count and commits. Stop it, run it again: it goes on where it stopped.
# Run: nomad job run jobs/examples/checkpoint.nomad.hcl
job "checkpoint-example" {
  type      = "batch"
  node_pool = "all" # any node: make dev's (pool "default") or one of jobs/pools/

  group "train" {
    task "count" {
      driver       = "gpu"
      kill_timeout = "30s" # the commit must fit in it

      config {
        command = "/bin/sh"
        args = ["-c", <<-EOT
          env | grep -E '^(CUDA_VISIBLE_DEVICES|NOMAD_GPU_(RESTORE|RESUME))' | sort
          n=0
          if [ -n "$NOMAD_GPU_RESTORE_DIR" ]; then n=$(cat "$NOMAD_GPU_RESTORE_DIR/step"); fi
          echo "starting at step $n (resume $NOMAD_GPU_RESUME_COUNT)"
          checkpoint() {
            echo $n > "$NOMAD_GPU_CHECKPOINT_DIR/step" # write everything ...
            echo "checkpointing step $n"               # (a stop follows the marker at once)
            : > "$NOMAD_GPU_CHECKPOINT_COMMIT"         # ... then commit
          }
          trap checkpoint USR1
          trap 'exit 0' INT TERM
          while :; do n=$((n+1)); sleep 0.1; done
        EOT
        ]

        checkpoint {
          signal         = "SIGUSR1" # asks for a checkpoint
          commit_timeout = "20s"     # time to commit after the signal
          interval       = "5m"      # also every 5 minutes while running
          keep           = 2         # committed generations kept
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
