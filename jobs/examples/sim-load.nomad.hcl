# Simulated GPU work for a simulated node (device plugin and driver with
# backend = "sim", as in `make dev`): one whole GPU held at 80 % with 20 GiB
# of memory for 10 minutes, so its utilisation, memory, power and
# temperature move in `nomad alloc status -stats`, `nomad-gpu top` and the
# metrics. On a real GPU node, run your workload instead.
#
# The task runs nomad-gpu from the node: the driver's Landlock lets a task
# execute only what the plugin config unveils (make dev unveils bin/).
# Run (make dev): nomad job run -var nomad_gpu=$PWD/bin/nomad-gpu jobs/examples/sim-load.nomad.hcl
variable "nomad_gpu" {
  type        = string
  default     = "/usr/local/bin/nomad-gpu"
  description = "absolute path of the nomad-gpu binary on the node, unveiled rx by the driver's isolation.unveil_paths"
}

job "sim-load" {
  type      = "batch"
  node_pool = "all" # any node: make dev's (pool "default") or one of jobs/pools/

  group "load" {
    task "load" {
      driver = "gpu"

      config {
        command = var.nomad_gpu
        args    = ["sim-load", "--util", "80", "--memory", "20GiB", "--duration", "10m"]
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
