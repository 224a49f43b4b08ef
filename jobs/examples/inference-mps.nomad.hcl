# Two inference servers sharing GPUs through MPS: each instance holds one
# share (a quarter of a GPU's SMs and memory on the dev node). The gpu driver
# runs each under its GPU's MPS daemon and kills an instance that uses more
# GPU memory than its share. Run: nomad job run jobs/examples/inference-mps.nomad.hcl
job "inference" {
  type      = "service"
  node_pool = "all" # any node: make dev's (pool "default") or one of jobs/pools/

  group "server" {
    count = 2

    task "serve" {
      driver = "gpu"
      user   = "nobody"

      config {
        command = "/bin/sh"
        args    = ["-c", "echo serving on $CUDA_VISIBLE_DEVICES with $CUDA_MPS_ACTIVE_THREAD_PERCENTAGE% of its SMs; while true; do sleep 5; done"]
      }

      resources {
        cpu    = 100
        memory = 128

        device "nvidia/mps" {
          count = 1
          # Fill one GPU's shares before opening the next: a GPU whose shares
          # are partly in use scores higher (the device plugin's shares_in_use).
          affinity {
            attribute = "${device.attr.unique.shares_in_use}"
            operator  = ">"
            value     = "0"
            weight    = 100
          }

          constraint {
            attribute = "${device.attr.parent_product}"
            operator  = "regexp"
            value     = "H100"
          }
        }
      }
    }
  }
}
