// Package apm is the domain logic of nomad-gpu-apm, a nomad-autoscaler APM
// plugin that reads GPU queue depth, wait time, allocation and
// utilisation from Nomad, for GPU cluster and job scaling policies.
//
// Unlike the built-in nomad-apm (CPU and memory only, an error on an empty
// pool, a full re-list per query), it sees devices and queued work, answers
// 0 for an empty or missing pool so a pool can scale from zero, and keeps
// the cluster state in a cache refreshed by blocking queries.
//
// # Agent configuration
//
//	apm "nomad-gpu" {
//	  driver = "nomad-gpu-apm"
//	  config = {
//	    default_gpus_per_node = "8"   # optional, see nodes_needed
//	  }
//	}
//
// Keys (all optional):
//
//   - the nomad_* connection keys the agent passes to every plugin
//     (nomad_address, nomad_region, nomad_namespace, nomad_token,
//     nomad_http-auth, nomad_ca-cert, nomad_ca-path, nomad_client-cert,
//     nomad_client-key, nomad_tls-server-name, nomad_skip-verify,
//     nomad_block-query-wait-time), read as nomad-autoscaler reads them,
//     over api.DefaultConfig (NOMAD_ADDR and friends). nomad_namespace
//     limits the queue and allocations read to that namespace; unset, all
//     namespaces ("*") are read.
//   - default_gpus_per_node: the devices one new node brings, for
//     nodes_needed when neither the query nor any node of the pool says.
//   - stats_ttl (30s): how long a node's device stats are reused.
//   - min_refresh_interval (1s): the least time between two lists of one
//     kind; coalesces bursts of changes on busy clusters.
//   - sync_timeout (30s): how long a query waits for the first lists.
//   - max_staleness (1m): how long a list may keep failing before queries
//     that read it fail rather than answer from the last good state.
//   - util_stat ("GPU utilization"): the device stat gpu_util_pct
//     averages (the name devicefp and nomad-device-nvidia report).
//
// Any other key is an error naming it.
//
// # Queries
//
//	metric
//	metric{key=value,key=value,...}
//
// for example
//
//	gpus_queued{node_pool=gpu}
//	allocs_queued{pool=gpu,datacenter=dc1,state=blocked}
//	wait_max_seconds{node_pool=gpu,device=nvidia/mig/1g.10gb}
//	gpu_alloc_pct{node_pool=gpu,node_class=a100}
//	gpu_util_pct{node_pool=gpu}
//	nodes_needed{node_pool=gpu,gpus_per_node=8}
//
// Keys, each at most once:
//
//   - node_pool (alias pool): nodes of that pool; work whose job targets
//     it. A job in the built-in pool "all" is counted only by queries
//     without node_pool (or with node_pool=all): it would otherwise scale
//     every pool at once.
//   - datacenter: nodes of that datacenter; work whose job's datacenters
//     (with * wildcards) include it.
//   - node_class (alias class): nodes of that class; work whose job,
//     group and task constraints on ${node.class} (=, !=, regexp,
//     set_contains_any, is_set, ...) a node of that class meets. Work with
//     no such constraint matches every class.
//   - device: type, vendor/type or vendor/type/name, as a jobspec names
//     devices (nvidia/gpu, nvidia/mig/1g.10gb, nvidia/mps, gpu). Default
//     nvidia/gpu. A node device group or a request matches when every part
//     both name is equal: a request "gpu" or "nvidia/gpu/H100" matches
//     device=nvidia/gpu; "nvidia/mig" matches device=nvidia/mig/1g.10gb.
//   - state (queue metrics only): all (default), blocked or pending.
//   - gpus_per_node (nodes_needed only): the devices one new node brings.
//
// Values are letters, digits and - _ . / : without quotes; blanks around
// names, braces, commas and "=" are allowed. Anything else (an unknown
// metric or key, a repeated key, an empty value, a key the metric does not
// take) is an error that names the bad part and lists what is allowed.
//
// # Metrics
//
// Queued work is (a) the unplaced allocations of blocked evaluations: per
// task group in the evaluation's FailedTGAllocs, the group's Queued count
// from the job summary (which the scheduler decrements as it places;
// CoalescedFailures+1 when there is no summary), each asking for the
// devices of the group's tasks' device blocks; and (b) allocations placed
// but still pending on their node, asking for the devices they were given,
// and placed by their node's pool, datacenter and class. Only work asking
// for at least one matching device counts.
//
//   - gpus_queued: matching devices asked for by queued allocations
//     (per-allocation ask × allocations).
//   - allocs_queued: queued allocations asking for a matching device.
//   - wait_max_seconds, wait_mean_seconds: the longest and the
//     per-allocation mean wait of queued work: now minus the blocked
//     evaluation's create time (kept across re-blocks; a new job version
//     starts a new one) or the pending allocation's create time. 0 with
//     nothing queued.
//   - gpu_alloc_pct: healthy matching device instances held by pending or
//     running allocations, as a percentage of the healthy matching
//     instances of schedulable (ready, eligible, not draining) matching
//     nodes. 0 when there are none.
//   - gpu_util_pct: mean of the util_stat stat over the matching device
//     instances of ready matching nodes that report it (client host
//     stats). 0 when none do.
//   - nodes_needed: see NodesNeeded. Shape (NodeShape): gpus_per_node from
//     the query; else the most common instance count of the matching
//     device over matching nodes that have it (ties to the larger); else
//     default_gpus_per_node; else, with an empty pool and work queued, 1
//     (enough to learn the shape). Blocked allocations only (pending ones
//     hold their devices already), best fit, largest first, into the free
//     healthy devices of schedulable matching nodes, then into new nodes.
//
// Every query answers one point, stamped with the range's To (now if
// unset), whatever the range: the value is the cluster now. An empty or
// missing pool answers 0, never an error; the agent treats no points as a
// check error.
//
// # Cost
//
// Three lists are kept by blocking queries (WaitIndex = last index), each
// in its own goroutine, started by the first query that needs it:
// /v1/nodes?resources=true; /v1/evaluations?status=blocked; and
// /v1/allocations?resources=true filtered to pending and running. A list
// is re-read only when its table's index moves, at most once per
// min_refresh_interval. With the blocked evaluations, each blocked job's
// spec is read once per job modify index, and its summary once per
// modify index of its blocked evaluation (and again on each evaluations
// change, for up to 10 s, while it shows a failed group with nothing
// queued: the scheduler records the queued counts just after it writes
// the blocked evaluation). Queries read the cache, so a
// policy evaluation of any number of queries makes no Nomad call when the
// cluster did not change; each change costs one list of the kind that
// changed (plus the new or re-blocked jobs' spec and summary). The one
// exception is gpu_util_pct: one client stats call per matching node, at
// most once per stats_ttl. Stats counts every call.
//
// The token needs node:read and, in the namespaces read, read-job (jobs,
// evaluations, allocations); gpu_util_pct also reaches the clients'
// stats through the servers.
package apm
