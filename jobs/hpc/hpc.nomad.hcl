# An HPC job: four whole GPUs on one node for one task, only on GPUs with
# compute capability 9.0 or newer and at least 80 GB of memory. Nomad fills
# a device request from one device group, so the four GPUs are of one model
# and on one node. The device plugin reports each GPU's PCI bus id trimmed
# the way Nomad's NUMA awareness reads it: on Nomad Enterprise, add
# resources { numa { affinity = "require" } } to keep the GPUs and the
# task's cores on one NUMA node.
# Run: nomad job run jobs/hpc/hpc.nomad.hcl
job "hpc" {
  type      = "batch"
  node_pool = "hpc"
  priority  = 60

  group "solver" {
    task "mpi-rank" {
      driver = "gpu"

      config {
        command = "/bin/sh"
        args    = ["-c", "echo solving on $CUDA_VISIBLE_DEVICES; sleep 20"]
      }

      resources {
        cpu    = 1000
        memory = 512

        device "nvidia/gpu" {
          count = 4

          constraint {
            attribute = "${device.attr.compute_capability}"
            operator  = "version"
            value     = ">= 9.0"
          }

          constraint {
            attribute = "${device.attr.memory}"
            operator  = ">="
            value     = "80 GB"
          }
        }
      }
    }
  }
}
