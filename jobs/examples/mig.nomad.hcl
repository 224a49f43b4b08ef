# One MIG instance of a given profile. Run: nomad job run jobs/examples/mig.nomad.hcl
job "mig-example" {
  type      = "batch"
  node_pool = "all" # any node: make dev's (pool "default") or one of jobs/pools/

  group "infer" {
    task "show-mig" {
      driver = "gpu"

      config {
        command = "/bin/sh"
        args    = ["-c", "id -un; env | grep -E '^(CUDA|NVIDIA|NOMAD_GPU)_' | sort; sleep 30"]
      }

      resources {
        cpu    = 100
        memory = 64

        device "nvidia/mig/1g.10gb" {
          count = 1
        }
      }
    }
  }
}
