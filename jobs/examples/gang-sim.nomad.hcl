# A gang (docs/design/gangs.md): two members of one GPU each that run all
# at once or not at all. Registered at count 0, it places nothing: the
# controller's gang admission scales the group to its members once Nomad's
# plan says both fit, and rolls it back if one is not running within the
# bound. Each member prints what the gpu driver tells it of the gang, the
# NOMAD_GPU_GANG_* variables: the driver sets them once the controller's
# gang admission and the driver's rendezvous land (issue 37); until then
# they print empty.
# Check: nomad-gpu validate jobs/examples/gang-sim.nomad.hcl
# Run:   nomad job run jobs/examples/gang-sim.nomad.hcl
job "gang-sim" {
  type      = "batch"
  node_pool = "all" # any node: make dev's (pool "default") or one of jobs/pools/

  meta {
    nomad_gpu_gang = "true"
  }

  group "worker" {
    count = 0 # the controller admits the gang: it scales this to the members

    meta {
      nomad_gpu_gang_members = "2"
    }

    # A member's failure is the gang's: the controller stops and requeues
    # the whole gang, so Nomad restarts and reschedules nothing alone.
    restart {
      attempts = 0
      mode     = "fail"
    }

    reschedule {
      attempts  = 0
      unlimited = false
    }

    # Rank 0's port: NOMAD_GPU_GANG_MASTER_PORT on NOMAD_GPU_GANG_MASTER_ADDR.
    network {
      port "rendezvous" {}
    }

    task "member" {
      driver = "gpu"

      config {
        command = "/bin/sh"
        args = ["-c", <<-EOT
          echo "member $NOMAD_ALLOC_NAME on $CUDA_VISIBLE_DEVICES"
          echo "rank=$NOMAD_GPU_GANG_RANK world_size=$NOMAD_GPU_GANG_WORLD_SIZE"
          echo "master=$NOMAD_GPU_GANG_MASTER_ADDR:$NOMAD_GPU_GANG_MASTER_PORT"
          if [ -n "$NOMAD_GPU_GANG_HOSTFILE" ]; then cat "$NOMAD_GPU_GANG_HOSTFILE"; fi
          sleep 30
        EOT
        ]
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
