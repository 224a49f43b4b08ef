# Cluster scaling of the GPU node pool "training" (jobs/pools/training.hcl) on
# Google Cloud: a base group on reserved capacity that never scales below what
# you pay for anyway, plus a burst group on standard capacity that follows
# the GPU queue, from zero. Spot VMs go in a node pool of their own that only
# checkpointing work enters, with nomad-gpu reclaim-watch on each node
# (jobs/pools/training-spot.hcl, jobs/spot/, docs/spot.md).
#
# Nodes of both groups join node_pool "training"; the burst ones set
# node_class = "gpu-burst", the base ones node_class = "gpu-base".
#
# Burst: scale out when GPU work is queued (activation 1) or has waited 30
# minutes, straight to the nodes that place the queue (nodes_needed, from the
# per-node GPU inventory), at most 8 at a time; booting nodes are not
# ordered twice: the "nodes" check counts the burst nodes that joined, so
# the count minus those is in flight (for at most boot_time). Scale in only
# after the queue has been empty and the burst GPUs less than 30 % allocated
# for 15 minutes, 2 nodes at a time, and only empty nodes (node selection
# "empty_ignore_system"): a node still running GPU work is never picked.
# A burst node the controller emptied for removal (its movable checkpointing
# work moved onto other nodes: -scale-in-pools training/gpu-burst) goes at
# once, whatever the queue and the floor (the "removable" check).
# Only empty nodes go: Nomad 2 stops a drained batch allocation at the
# drain's deadline and never places it again, so a node still running work
# is emptied by the controller's moves first (nomad alloc stop, which Nomad
# does place again), never by the drain.

scaling "gpu-burst" {
  enabled = true
  min     = 0
  max     = 40

  policy {
    evaluation_interval  = "30s"
    cooldown             = "2m"
    cooldown_on_scale_up = "6m" # about a GPU node's boot time

    # gpus_per_node: the shape of a burst node (8 GPUs), so that the queue
    # is turned into nodes even before any node of the pool exists.
    check "capacity" {
      source = "nomad-gpu"
      query  = "nodes_needed{node_pool=training,gpus_per_node=8}"
      strategy "gpu-queue" {
        signal       = "nodes_needed"
        pool         = "gpu-burst"
        max_scale_up = 8
        boot_time    = "6m"
      }
    }

    check "queue" {
      source = "nomad-gpu"
      query  = "allocs_queued{node_pool=training,state=blocked}"
      strategy "gpu-queue" {
        signal     = "queued"
        pool       = "gpu-burst"
        activation = 1
      }
    }

    check "wait" {
      source = "nomad-gpu"
      query  = "wait_max_seconds{node_pool=training,state=blocked}"
      strategy "gpu-queue" {
        signal   = "wait"
        pool     = "gpu-burst"
        max_wait = "30m"
      }
    }

    # The burst nodes that joined Nomad and can take work; the base nodes
    # (another class) are not part of this count.
    check "nodes" {
      source = "nomad-gpu"
      query  = "nodes_ready{node_pool=training,node_class=gpu-burst}"
      strategy "gpu-queue" {
        signal = "nodes"
        pool   = "gpu-burst"
      }
    }

    # The burst nodes the controller emptied for removal (scale-in by
    # consolidation: nomad-gpu controller -scale-in-pools
    # training/gpu-burst): scaled in by them at once, whatever the queue
    # and the floor; the empty-node selection below removes exactly them.
    check "removable" {
      source = "nomad-gpu"
      query  = "nodes_removable{node_pool=training,node_class=gpu-burst}"
      strategy "gpu-queue" {
        signal = "removable"
        pool   = "gpu-burst"
      }
    }

    check "idle" {
      source = "nomad-gpu"
      query  = "gpu_alloc_pct{node_pool=training,node_class=gpu-burst}"
      strategy "gpu-queue" {
        signal         = "util"
        pool           = "gpu-burst"
        floor          = 30
        scale_in_after = "15m"
        max_scale_down = 2
      }
    }

    target "gce-mig" {
      project                       = "my-project"
      region                        = "us-central1"
      mig_name                      = "nomad-gpu-burst"
      node_class                    = "gpu-burst"
      node_pool                     = "training"
      node_selector_strategy        = "empty_ignore_system"
      node_drain_deadline           = "15m"
      node_drain_ignore_system_jobs = true
      node_purge                    = true
    }
  }
}

# Base: committed-use VMs, kept at what is reserved. The burst policy adds
# capacity above it; work lands on base nodes first because they are there.
scaling "gpu-base" {
  enabled = true
  min     = 4
  max     = 4

  policy {
    evaluation_interval = "5m"

    # fixed-value reads no metric; source and query only keep the agent from
    # defaulting to its nomad-apm, whose query rules this check cannot meet.
    check "reserved" {
      source = "nomad-gpu"
      query  = "gpu_alloc_pct{node_pool=training,node_class=gpu-base}"
      strategy "fixed-value" {
        value = 4
      }
    }

    target "gce-mig" {
      project                       = "my-project"
      region                        = "us-central1"
      mig_name                      = "nomad-gpu-base"
      node_class                    = "gpu-base"
      node_pool                     = "training"
      node_selector_strategy        = "empty_ignore_system"
      node_drain_deadline           = "15m"
      node_drain_ignore_system_jobs = true
    }
  }
}
