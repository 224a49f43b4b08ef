# A template for bursts of small GPU jobs: register it once, then dispatch
# one job per input; each runs on one MPS share (or change the device to a
# MIG profile). Queued dispatches are what nomad-gpu-apm counts and gpu-queue
# scales the pool for.
# Run: nomad job run jobs/batch/burst.nomad.hcl
#      nomad job dispatch -meta shard=17 burst
job "burst" {
  type      = "batch"
  node_pool = "inference"
  priority  = 30

  parameterized {
    meta_required = ["shard"]
    payload       = "optional"
  }

  group "work" {
    task "shard" {
      driver = "gpu"

      dispatch_payload {
        file = "input"
      }

      config {
        command = "/bin/sh"
        args    = ["-c", "echo shard $NOMAD_META_shard on $CUDA_VISIBLE_DEVICES; sleep 5"]
      }

      resources {
        cpu    = 100
        memory = 64

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
        }
      }
    }
  }
}
