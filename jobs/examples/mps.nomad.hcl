# Two MPS shares of one GPU: the thread percentage and pinned memory limit
# are summed over the shares. Run: nomad job run jobs/examples/mps.nomad.hcl
job "mps-example" {
  type      = "batch"
  node_pool = "all" # any node: make dev's (pool "default") or one of jobs/pools/

  group "infer" {
    task "show-mps" {
      driver = "gpu"

      config {
        command = "/bin/sh"
        args    = ["-c", "id -un; env | grep -E '^(CUDA|NVIDIA|NOMAD_GPU)_' | sort; sleep 30"]
      }

      resources {
        cpu    = 100
        memory = 64

        device "nvidia/mps" {
          count = 2
          # Fill one GPU's shares before opening the next: a GPU whose shares
          # are partly in use scores higher (the device plugin's shares_in_use).
          affinity {
            attribute = "${device.attr.unique.shares_in_use}"
            operator  = ">"
            value     = "0"
            weight    = 100
          }
        }
      }
    }
  }
}
