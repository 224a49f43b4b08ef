# Nomad client config for a GPU node. Run: nomad agent -config client-gpu.hcl
#
# Before its first start (docs/install.md, "Run it on your cluster"):
#   - bin/plugins/* (and nothing else) in plugin_dir, and
#     bin/libexec/* in /opt/nomad/libexec (../libexec from plugin_dir,
#     where the driver looks for its per-task supervisor);
#   - install -d -m 0755 /var/lib/nomad: a data_dir Nomad makes itself is
#     0700, and then no task with a non-root user reaches its files.
#
# The plugin blocks list every key. Each is at its default, except where a
# comment says "not the default": metrics are on, so that
# jobs/monitoring/prometheus.yml can scrape them.
data_dir   = "/var/lib/nomad"
plugin_dir = "/opt/nomad/plugins"

client {
  enabled = true

  # Your servers' RPC addresses (127.0.0.1 when the server runs in the
  # same agent, as on docs/install.md's one machine). With Consul, leave this
  # out: the client finds the servers through the consul block's
  # client_auto_join (a consul { address = "127.0.0.1:8500" } block).
  servers = ["127.0.0.1:4647"]

  # One pool per workload class (jobs/pools/): "training", "inference" or
  # "hpc". Jobs pick theirs with node_pool.
  node_pool = "training"

  # Nomad cuts every task's kill_timeout to this (default 30s), and a
  # checkpointing task has only its kill_timeout to commit when stopped
  # (jobs/training: commit_timeout 45s, kill_timeout 60s).
  max_kill_timeout = "5m"
}

plugin "nomad-device-gpu" {
  config {
    backend            = "nvml" # or "sim" for a simulated node (client-sim.hcl)
    fingerprint_period = "1m"   # re-enumeration; XID health changes are sent at once
    ignored_gpu_ids    = []     # GPU indexes, GPU- or MIG- UUIDs hidden from Nomad
    mps_pipe_root      = "/run/nomad-gpu/mps"

    # None by default. Offer GPUs 4 and 5 as 4 MPS shares each instead of
    # whole GPUs:
    # mps {
    #   gpus   = ["4", "5"]       # indexes, GPU- UUIDs or "all"
    #   shares = 4
    # }

    health {
      enabled      = true
      ignored_xids = [13, 31, 43, 45, 68, 109] # application faults, not the GPU's
      # critical_xids = [48, 79]  # when set, only these mark a device unhealthy
    }

    # Prometheus metrics of every device (docs/metrics.md). Not the
    # default (off); on every interface, for a Prometheus elsewhere.
    metrics {
      address   = "0.0.0.0:9401"
      node_name = "" # the host label; "" is the hostname
    }

    # The local agent's API, read with metrics on: which devices
    # allocations hold.
    nomad {
      address = "http://127.0.0.1:4646"
      token   = "" # with ACLs: node:read, read-job (agent:read to find the node by ID)
    }

    # Lay GPUs out as the node's metadata asks (nomad_gpu.pin.<GPU-UUID>,
    # else nomad_gpu.layout.<GPU-UUID>); docs/device-plugin.md#gpu-layouts.
    layout {
      enabled     = false
      poll        = "2s" # reads of the node's metadata
      drain_grace = "3s" # instances refused before a switch
      state_file  = "/var/lib/nomad-gpu/device/layouts.json" # must survive restarts
    }
  }
}

# The task driver: jobspecs say driver = "gpu".
plugin "nomad-driver-gpu" {
  config {
    state_dir           = "/var/lib/nomad-gpu/driver" # must survive restarts
    default_user        = "nobody"                    # tasks without a `user`
    denied_host_uids    = "0"                         # users tasks may not run as ("0,10-20"; "" for none)
    denied_host_gids    = "0"                         # groups (primary or supplementary) tasks may not have
    cgroup_root         = "nomad-gpu"                 # one cgroup name, made under each hierarchy's root
    supervisor_binary   = ""                          # "": ../libexec/nomad-driver-gpu-supervisor from the driver
    gpu_memory_watchdog = "kill"                      # or "warn", "off"
    watchdog_interval   = "5s"

    mps {
      control_binary = "nvidia-cuda-mps-control"
      pipe_root      = "/run/nomad-gpu/mps" # = the device plugin's mps_pipe_root
      log_root       = "/var/log/nomad-gpu/mps"
    }

    gpu {
      backend = "nvml" # = the device plugin's backend
    }

    # Checkpoints of tasks with a checkpoint block; task users must be able
    # to reach the root (the driver makes it, and its parents, 0755). On a
    # shared filesystem (NFS, no_root_squash, same uids) a task resumes on
    # another node too.
    checkpoint {
      root = "/var/lib/nomad-gpu/checkpoints"
    }

    # The local agent's API: why a task is stopped (preempted, drained).
    nomad {
      address = "http://127.0.0.1:4646"
      token   = "" # where ACLs are on: read-job (the driver writes nothing)
    }

    # A gang's member (job meta nomad_gpu_gang = "true") starts once every
    # member is placed; its task fails after waiting this long. The
    # controller admits gangs whole; without it, raise this to the
    # rendezvous timeout the jobs would have.
    gang {
      wait = "1m"
    }

    # Every guard is on by default; only this block can relax it.
    isolation {
      pid_mode       = "private"  # each task in its own PID namespace; or "host"
      allow_host_pid = false      # may a jobspec ask for pid_mode = "host"?
      landlock       = "required" # or "best_effort" (unconfined where the kernel lacks it), "off"
      unveil_by_task = false      # may a jobspec add paths with config.unveil?
      unveil_paths   = []         # extra paths for every task, e.g. ["r:/data/models"]
    }

    # Prometheus metrics of every task (docs/metrics.md). Not the default
    # (off); on every interface, for a Prometheus elsewhere.
    metrics {
      address        = "0.0.0.0:9402"
      node_name      = ""   # the host label; "" is the hostname
      task_retention = "5m" # a destroyed task's series stay this long
    }
  }
}

# Task stats (`nomad alloc status -stats`) need allocation metrics on.
telemetry {
  publish_allocation_metrics = true
}
