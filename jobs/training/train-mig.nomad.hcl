# Small-model training on MIG slices: two 1g.10gb instances, each a fenced
# seventh of a GPU, checkpointing like train.nomad.hcl. MIG instances suit
# many small experiments that would each waste a whole GPU.
# Run: nomad job run jobs/training/train-mig.nomad.hcl
job "train-mig" {
  type      = "batch"
  node_pool = "training"
  priority  = 30 # P2

  group "trainer" {
    task "train" {
      driver       = "gpu"
      kill_timeout = "60s"

      config {
        command = "/bin/sh"
        args = ["-c", <<-EOT
          step=0
          if [ -n "$NOMAD_GPU_RESTORE_DIR" ]; then step=$(cat "$NOMAD_GPU_RESTORE_DIR/step"); fi
          echo "training on $CUDA_VISIBLE_DEVICES from step $step"
          trap 'echo $step > "$NOMAD_GPU_CHECKPOINT_DIR/step"; : > "$NOMAD_GPU_CHECKPOINT_COMMIT"' USR1
          trap 'exit 0' INT TERM
          while :; do step=$((step+1)); sleep 0.1; done
        EOT
        ]

        checkpoint {
          commit_timeout = "30s"
        }
      }

      resources {
        cpu    = 200
        memory = 128

        device "nvidia/mig/1g.10gb" {
          count = 2
        }
      }
    }
  }
}
