# One MIG instance of a given profile. Run: nomad job run jobs/examples/mig.nomad.hcl
job "mig-example" {
  type = "batch"

  group "infer" {
    task "show-mig" {
      driver = "raw_exec"

      config {
        command = "/bin/sh"
        args    = ["-c", "env | grep -E '^(CUDA|NVIDIA|NOMAD_GPU)_' | sort; sleep 5"]
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
