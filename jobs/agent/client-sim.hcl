# Nomad client config for a simulated GPU node: client-gpu.hcl with both
# plugins on the "sim" backend, a DGX H100 of 8 GPUs (MIG on GPUs 6 and 7,
# GPUs 4 and 5 as 4 MPS shares each, the rest whole). For trying nomad-gpu,
# and running its jobs, on a machine without a GPU; keys left out are at
# their defaults (client-gpu.hcl lists them). Install as for client-gpu.hcl.
# Run: nomad agent -config client-sim.hcl
#  or, server and node in one agent (docs/install.md, one machine):
#      nomad agent -config server.hcl -config client-sim.hcl
data_dir   = "/var/lib/nomad"
plugin_dir = "/opt/nomad/plugins"

client {
  enabled   = true
  servers   = ["127.0.0.1:4647"] # your servers' RPC addresses
  node_pool = "training"         # or "inference", "hpc" (jobs/pools/)

  # Nomad cuts every task's kill_timeout to this (default 30s), and a
  # checkpointing task has only its kill_timeout to commit when stopped
  # (jobs/training: commit_timeout 45s, kill_timeout 60s).
  max_kill_timeout = "5m"

  # Off a cloud, the cloud fingerprinters only wait for their metadata
  # servers' timeouts.
  options {
    "fingerprint.denylist" = "env_aws,env_gce,env_azure,env_digitalocean"
  }
}

plugin "nomad-device-gpu" {
  config {
    backend            = "sim"
    fingerprint_period = "10s"
    mps_pipe_root      = "/run/nomad-gpu/mps"

    # The same system, seed and control file as the driver's gpu.sim: both
    # plugins see one simulated node. `nomad-device-gpu sim --control-file
    # /var/lib/nomad-gpu/sim.json ...` injects XIDs and load (docs/sim.md).
    sim {
      system       = "dgxh100"
      seed         = "sim-node-1"
      control_file = "/var/lib/nomad-gpu/sim.json"
      mig {
        gpus     = [6, 7]
        profiles = ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]
      }
    }

    mps {
      gpus   = ["4", "5"]
      shares = 4
    }

    metrics {
      address = "0.0.0.0:9401"
    }
  }
}

plugin "nomad-driver-gpu" {
  config {
    state_dir = "/var/lib/nomad-gpu/driver"

    mps {
      # A simulated node has no CUDA MPS binaries: a stand-in, installed
      # with the supervisor, plays the control daemon.
      control_binary = "/opt/nomad/libexec/nvidia-cuda-mps-control-sim"
      pipe_root      = "/run/nomad-gpu/mps"
      log_root       = "/var/log/nomad-gpu/mps"
    }

    checkpoint {
      root = "/var/lib/nomad-gpu/checkpoints"
    }

    gpu {
      backend = "sim"
      sim {
        system       = "dgxh100"
        seed         = "sim-node-1"
        control_file = "/var/lib/nomad-gpu/sim.json"
        mig {
          gpus     = [6, 7]
          profiles = ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]
        }
      }
    }

    metrics {
      address = "0.0.0.0:9402"
    }
  }
}

telemetry {
  publish_allocation_metrics = true
}
