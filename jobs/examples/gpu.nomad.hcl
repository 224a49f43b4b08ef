# One whole GPU. Run: nomad job run jobs/examples/gpu.nomad.hcl
job "gpu-example" {
  type      = "batch"
  node_pool = "all" # any node: make dev's (pool "default") or one of jobs/pools/

  group "train" {
    task "show-gpu" {
      driver = "gpu"

      config {
        command = "/bin/sh"
        args    = ["-c", "id -un; env | grep -E '^(CUDA|NVIDIA|NOMAD_GPU)_' | sort; sleep 30"]
      }

      resources {
        cpu    = 100
        memory = 64

        device "nvidia/gpu" {
          count = 1

          # Attributes carry units, so constraints compare real quantities.
          constraint {
            attribute = "${device.attr.memory}"
            operator  = ">="
            value     = "40 GiB"
          }
        }
      }
    }
  }
}
