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
