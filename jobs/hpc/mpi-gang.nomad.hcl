# An Open MPI job across nodes as a gang (docs/design/gangs.md): three
# members of 4 GPUs each that start all at once or not at all. Every member
# runs an sshd on its group's "ssh" port for Open MPI's launcher; rank 0
# also runs mpirun over the hostfile the gpu driver writes
# (NOMAD_GPU_GANG_HOSTFILE: "<address> slots=<GPUs>" a member), one MPI
# rank per GPU, and the job ends when mpirun does: the other members wait
# on rank 0's rendezvous port and exit once it closes.
#
# Needs Open MPI, sshd and your solver on the nodes, and the members' keys
# in /etc/nomad-gpu/mpi-ssh; it is not run by the e2e suite (no MPI there),
# only checked: nomad job validate and
# nomad-gpu validate jobs/hpc/mpi-gang.nomad.hcl.
# Run: nomad job run jobs/hpc/mpi-gang.nomad.hcl
job "mpi-gang" {
  type      = "batch"
  node_pool = "hpc"
  priority  = 60

  meta {
    nomad_gpu_gang = "true"
    # The solver does not checkpoint: a member's failure restarts the
    # whole gang from the beginning. Said here, as gangs must; a solver
    # that writes restart files takes a checkpoint block instead.
    nomad_gpu_gang_checkpoint = "none"
  }

  group "rank" {
    count = 0 # the controller scales it to the members when it admits the gang

    meta {
      nomad_gpu_gang_members = "3"
    }

    restart {
      attempts = 0 # a member's failure is the gang's
      mode     = "fail"
    }

    reschedule {
      attempts  = 0
      unlimited = false
    }

    network {
      port "rendezvous" {} # rank 0 holds it open while mpirun runs
      port "ssh" {
        static = 2222 # the same on every member: Open MPI's ssh uses one port
      }
    }

    task "mpi" {
      driver = "gpu"

      config {
        command = "/bin/sh"
        args = ["-c", <<-EOT
          /usr/sbin/sshd -p 2222 -f /etc/nomad-gpu/mpi-ssh/sshd_config
          if [ "$NOMAD_GPU_GANG_RANK" = 0 ]; then
            # Holds the rendezvous port while mpirun runs.
            nc -lk -p "$NOMAD_GPU_GANG_MASTER_PORT" >/dev/null &
            np=$(awk -F'slots=' '{n += $2} END {print n}' "$NOMAD_GPU_GANG_HOSTFILE")
            mpirun --hostfile "$NOMAD_GPU_GANG_HOSTFILE" -np "$np" \
              --mca plm_rsh_args "-p 2222 -i /etc/nomad-gpu/mpi-ssh/id_ed25519" \
              /opt/solver/solve
          else
            # Waits while rank 0's port answers.
            while nc -z "$NOMAD_GPU_GANG_MASTER_ADDR" "$NOMAD_GPU_GANG_MASTER_PORT"; do sleep 5; done
          fi
        EOT
        ]
      }

      resources {
        cpu    = 4000
        memory = 16384

        device "nvidia/gpu" {
          count = 4
        }
      }
    }
  }
}
