# Nomad client config for a GPU node: install bin/nomad-device-gpu into
# plugin_dir. Every key of the plugin config is listed with its default.
plugin_dir = "/opt/nomad/plugins"

plugin "nomad-device-gpu" {
  config {
    backend            = "nvml"   # or "sim" for a simulated DGX node
    fingerprint_period = "1m"     # re-enumeration; XID health changes are sent at once
    ignored_gpu_ids    = []       # GPU indexes, GPU- or MIG- UUIDs hidden from Nomad
    mps_pipe_root      = "/run/nomad-gpu/mps"

    # Offer GPUs 4 and 5 as 4 MPS shares each instead of whole GPUs.
    # mps {
    #   gpus   = ["4", "5"]       # indexes, GPU- UUIDs or "all"
    #   shares = 4
    # }

    health {
      enabled      = true
      ignored_xids = [13, 31, 43, 45, 68, 109] # application faults, not the GPU's
      # critical_xids = [48, 79]  # when set, only these mark a device unhealthy
    }
  }
}

# The task driver: jobspecs say driver = "gpu". Every key with its default.
plugin "nomad-driver-gpu" {
  config {
    state_dir           = "/var/lib/nomad-gpu/driver" # must survive restarts
    default_user        = "nobody"  # tasks without a `user`
    allow_root          = false     # tasks may not run as root
    cgroup_root         = "nomad-gpu"
    gpu_memory_watchdog = "kill"    # or "warn", "off"
    watchdog_interval   = "5s"

    mps {
      control_binary = "nvidia-cuda-mps-control"
      pipe_root      = "/run/nomad-gpu/mps" # = the device plugin's mps_pipe_root
      log_root       = "/var/log/nomad-gpu/mps"
    }

    gpu {
      backend = "nvml" # = the device plugin's backend
    }
  }
}

# Task stats (`nomad alloc status -stats`) need allocation metrics on.
telemetry {
  publish_allocation_metrics = true
}
