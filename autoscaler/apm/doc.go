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
//	    default_gpus_per_node = "8"              # optional, see nodes_needed
//	    metrics_address       = "127.0.0.1:9403" # optional, see Cluster figures
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
//   - default_gpus_per_node: the devices one new node brings (device=any:
//     its GPUs), for nodes_needed when neither the query nor any node of
//     the pool says.
//   - stats_ttl (30s): how long a node's device stats are reused.
//   - min_refresh_interval (1s): the least time between two lists of one
//     kind; coalesces bursts of changes on busy clusters.
//   - sync_timeout (30s): how long a query waits for the first lists.
//   - max_staleness (1m): how long a list may keep failing before queries
//     that read it fail rather than answer from the last good state.
//   - util_stat ("GPU utilization"): the device stat gpu_util_pct
//     averages (the name devicefp and nomad-device-nvidia report). devicefp
//     reports, for an MPS share, its task's utilisation of the share (not
//     its GPU's), so the mean over nvidia/mps is the shares' own load, and
//     a share whose task is not measured reports none and is left out.
//   - metrics_address (unset: off): host:port (":9403", "127.0.0.1:9403";
//     port 0 picks one) where the plugin process serves the cluster
//     figures as Prometheus metrics, at /metrics. A reload keeps the
//     listener when the address is unchanged and moves it when it
//     changes; an address that is malformed or cannot be listened on is
//     a SetConfig error naming metrics_address (the running config stays).
//   - priority_tiers ("70,40"): the job priority tiers of the priority
//     label, as decreasing lower bounds: P0 >= 70, P1 >= 40, P2 below;
//     "90,50,10" gives P0..P3. A job whose priority is not known (purged
//     before it was read) is "unknown".
//   - finished_window (1h): how far back the task figures look.
//   - finished_max_allocs (5000): the most terminal allocations one list
//     of them reads (the most recently created; see Cost).
//   - finished_refresh_interval (30s): the least time between two lists
//     of terminal allocations (at least min_refresh_interval).
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
//	nodes_needed{node_pool=gpu,device=any}
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
//     Or any: every kind of GPU ask and device group of ours
//     (nomadview.IsGPUAsk: nvidia gpu, mig/<profile>, mps; a request
//     naming no vendor too), counted in GPU-equivalents (see device=any
//     below): for pools whose GPU layouts follow the queue, where
//     fractional work waiting must open a node. "any" stands alone
//     (any/x, nvidia/any are errors).
//   - state (queue metrics only): all (default), blocked or pending.
//   - gpus_per_node (nodes_needed only): the devices one new node brings
//     (device=any: its GPUs).
//
// Values are letters, digits and - _ . / : without quotes; blanks around
// names, braces, commas and "=" are allowed. Anything else (an unknown
// metric or key, a repeated key, an empty value, a key the metric does not
// take) is an error that names the bad part and lists what is allowed.
//
// # Metrics
//
// The plugin reads the cluster through nomadview, the read model `nomad-gpu
// top` and the controller read too, and counts the queue by its rules
// (nomadview.Snapshot.QueuedGroups and PendingAllocs), so `top` and the
// autoscaler see the same queue. Queued work is (a) the unplaced
// allocations of blocked evaluations: per task group in the evaluation's
// FailedTGAllocs that asks for a GPU, MIG instance or MPS share, the
// group's Queued count from the job summary when the summary is at least
// as new as the evaluation (its modify index), even when it says 0 (the
// scheduler has placed them since, or the job was scaled down), else the
// evaluation's own CoalescedFailures+1, each asking for the devices of the
// group's tasks' device blocks; and (b) allocations placed but still
// pending on their node, asking for the GPU devices they were given, and
// placed by their node's pool, datacenter and class. Only work asking for
// at least one matching device counts.
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
//   - nodes_ready: schedulable (ready, eligible, not draining) matching
//     nodes with at least one healthy matching device: the nodes
//     nodes_needed places on. gpu-queue's nodes signal reads it to tell
//     which of the target's count has joined; filter it to the target's
//     nodes (node_class, datacenter).
//
// Device groups of type layout (contract.SliceLayout: one per GPU, no
// instances, its layout and state) are no capacity: no metric or figure
// counts them, whatever the device key; nodes_needed reads them for the
// node's GPU count and for GPUs being laid out anew.
//
// With device=any the metrics weigh in GPU-equivalents (GPUWeight, below:
// a whole GPU 1, a MIG instance of profile <g>g.<mem>gb g/7, an MPS share
// 1/k), so a GPU's capacity is 1 however it is laid out. For a queued ask
// k is the pool's share count: the most common (ties to the larger) of the
// MPS groups of the query's nodes, each group's mps_shares attribute
// (contract.AttrMPSShares; else its instance count), else
// gpulayout.DefaultShares (8), the share count the controller splits a GPU
// into by default. A MIG ask naming no profile weighs 1.
//
//   - gpus_queued: Σ allocs × the GPU-equivalents of one allocation's
//     GPU asks (a pending allocation: of what it was given).
//   - allocs_queued, wait_max_seconds, wait_mean_seconds: over the queued
//     allocations asking for any GPU kind.
//   - gpu_alloc_pct: GPU-equivalents of the healthy instances held by
//     pending or running allocations over those of all healthy instances
//     of schedulable matching nodes (an MPS share is 1 over its GPU's
//     shares listed, as nomad_gpu_cluster_capacity_gpus weighs it).
//   - gpu_util_pct: the mean over the instances of every GPU kind that
//     report util_stat (instances, not GPU-equivalents).
//   - nodes_ready: schedulable matching nodes with a healthy instance of
//     any GPU kind.
//   - nodes_needed: the shape is GPUs per node: gpus_per_node; else the
//     most common, over matching nodes, of the node's GPUs: its layout
//     groups where it publishes them (one per GPU), else its whole GPUs
//     plus the GPUs its MIG instances and MPS shares are of (by PCI bus
//     ID, share ID, MPS group), healthy or not; else default_gpus_per_node;
//     else 1 with work queued. Each blocked allocation's GPU-equivalents
//     are fitted, largest first, best fit, into the free GPU-equivalents of
//     schedulable matching nodes (healthy instances held by none, plus 1
//     per GPU whose layout group says it is draining to another layout or
//     is in MIG mode with no instance), then into new nodes of the shape;
//     one that weighs more than the shape is left out. An ask fits a node
//     that has at least that much free in all: this is optimistic (a whole
//     GPU ask may find only free MPS shares and MIG instances, parts of
//     GPUs others hold), because the controller relays free GPUs into what
//     the queue asks for; it may under-count while partly used GPUs hold the
//     free capacity. Fractional work waiting with no free capacity anywhere
//     needs at least 1 node.
//
// Every query answers one point, stamped with the range's To (now if
// unset), whatever the range: the value is the cluster now. An empty or
// missing pool answers 0, never an error; the agent treats no points as a
// check error.
//
// # Cluster figures
//
// With metrics_address set, the plugin process serves the cluster figures
// (ComputeFigures, pure functions of the cached Snapshot) as Prometheus
// metrics from a registry of its own: each scrape computes them from the
// cache, making no Nomad call. Every name starts nomad_gpu_cluster_;
// MetricNames lists them all, ExportedMetrics with type, labels and help.
// Labels:
//
//   - pool, datacenter: the node's (device, GPU-equivalent and task
//     figures); for queued work the job's node pool (a pending
//     allocation: its node's). The GPU-equivalent figures have no device
//     label: fragmentation weighs all device kinds of a node at once.
//   - device: vendor/type/name of the node's device group, as a jobspec
//     names it (nvidia/gpu/<model>, nvidia/mig/1g.10gb), except MPS
//     shares, which are nvidia/mps (their group name is a GPU UUID); for
//     queued work the request's name (gpu, nvidia/gpu, nvidia/mig/1g.10gb)
//     or, pending, the group given.
//   - priority: the job priority's tier (priority_tiers): P0, P1, P2 or
//     unknown. Tiers, not the priority, keep the series few.
//   - state: blocked (unplaced allocations of blocked evaluations) or
//     pending (placed, not yet running). stat: p50, p90, p99, max, mean.
//     outcome: complete, failed, lost.
//
// Notation: for a schedulable node n and one of its device groups g, F(g)
// are g's healthy instances held by no pending or running allocation and
// m(g) one instance's memory (the group's memory attribute); D(n) is the
// node demand: the device asks of capacity-blocked (not quota-limited)
// blocked evaluations whose job's pool (or "all"), datacenters and
// ${node.class} constraints accept n. A physical GPU is a whole-GPU
// instance, or the MIG instances or MPS shares with its PCI bus ID. A
// device figure sums over the nodes and groups its labels select; W is
// finished_window; every figure below is a gauge unless said.
//
// GPU-equivalents (GPUWeight) weigh an instance by the part of a GPU it
// is: w = 1 for a whole GPU, 1/k for an MPS share of a GPU cut into k
// shares (the GPU: the UUID its share ID encodes, contract.ParseShareID,
// else its group's name, which is that UUID), and g/7 for a MIG instance
// of profile "<g>g.<mem>gb" (c/7 for a compute instance "<c>c.<g>g..."; 1
// for a group name that is no profile). M(p) is the request mix of pool p,
// over all its datacenters (RequestMixes): the shapes (device, count) of
// the device requests of the pending and running allocations on p's nodes
// (by the held group's type, and a MIG group's profile) and of the
// unplaced allocations of blocked evaluations of jobs in p or in "all" (as
// named), each weighted by its share of those requests. frag(n, s) is the
// free capacity of node n, in GPU-equivalents, that a request of shape s
// cannot use (package fgd, the trace replay's definition): all of it when
// s fits none of n's device groups that DeviceSpec.Compatible matches to
// s's device (Nomad fills a request from one group; an MPS request takes
// one GPU's shares), else the free capacity of the other groups and of the
// matching groups with fewer free instances than s asks for. FGD(n) =
// Σ_{s∈M(p)} weight(s) · frag(n, s) (Weng et al., "Beware of
// Fragmentation", USENIX ATC 2023); with no request in p it is 0.
//
//   - nomad_gpu_cluster_devices{pool,datacenter,device}: healthy device instances of schedulable (ready, eligible, not draining) nodes, Σ|healthy(g)|.
//   - nomad_gpu_cluster_allocated_devices{pool,datacenter,device}: those held by a pending or running allocation, Σ|held ∩ healthy(g)|.
//   - nomad_gpu_cluster_free_devices{pool,datacenter,device}: those held by none, Σ|F(g)|.
//   - nomad_gpu_cluster_free_memory_bytes{pool,datacenter,device}: the memory of the free instances, Σ|F(g)|·m(g).
//   - nomad_gpu_cluster_stranded_devices{pool,datacenter,device}: free instances that no queued request which could go to their node fits, while some could go there, Σ|F(g)| over groups with D(n) ≠ ∅ and no ask a ∈ D(n) compatible with g with count(a) ≤ |F(g)| (Nomad fills a request from one group).
//   - nomad_gpu_cluster_stranded_slices{pool,datacenter,device}: free MIG instances and MPS shares on partly used GPUs, Σ|free(p)| over physical GPUs p with more than one instance and at least one held.
//   - nomad_gpu_cluster_stranded_memory_bytes{pool,datacenter,device}: the memory of the free instances that are stranded either way (each once), Σ m(g) over stranded_devices ∪ stranded_slices.
//   - nomad_gpu_cluster_allocated_ratio{pool,datacenter,device}: allocated_devices / devices (0 with none), gpu_alloc_pct / 100.
//   - nomad_gpu_cluster_utilization_ratio{pool,datacenter,device}: mean utilisation of the instances of ready nodes that report util_stat, Σ util / (100 · N) (no series when none report), gpu_util_pct / 100. An MPS share's is its task's of the share.
//   - nomad_gpu_cluster_load_ratio{pool,datacenter,device}: mean GPU load, the same mean over the reporting instances held by an allocation.
//   - nomad_gpu_cluster_capacity_gpus{pool,datacenter}: GPU-equivalents of the healthy GPU, MIG and MPS instances of schedulable nodes, Σ w(i) over healthy(g).
//   - nomad_gpu_cluster_allocated_gpus{pool,datacenter}: those held by a pending or running allocation, Σ w(i) over held ∩ healthy(g). Nomad gives a request exactly the instances it names, so this is also what the allocations asked for.
//   - nomad_gpu_cluster_free_gpus{pool,datacenter}: those held by none, Σ w(i) over F(g).
//   - nomad_gpu_cluster_fragmentation_gpus{pool,datacenter}: FGD fragmentation, the expected free GPU-equivalents that a request drawn from the pool's mix cannot use, Σ FGD(n) over schedulable nodes n.
//   - nomad_gpu_cluster_fragmentation_ratio{pool,datacenter}: fragmentation_gpus / free_gpus (0 when nothing is free).
//   - nomad_gpu_cluster_queued_allocs{pool,device,priority,state}: queued allocations asking for the device, Σ allocs (one asking for two devices counts under both).
//   - nomad_gpu_cluster_queued_devices{pool,device,priority,state}: devices they ask for, Σ allocs · per-allocation ask.
//   - nomad_gpu_cluster_queue_wait_max_seconds{pool,device,priority,state}: the longest wait of queued work, max(now − since), since being the blocked evaluation's or pending allocation's create time.
//   - nomad_gpu_cluster_queue_wait_mean_seconds{pool,device,priority,state}: the per-allocation mean wait, Σ allocs·(now − since) / Σ allocs.
//   - nomad_gpu_cluster_task_wait_seconds{pool,priority,stat}: wait of the GPU allocations whose first task started within W, start − create, as p50, p90, p99 (nearest rank: the value at rank ⌈q·N⌉), max and mean.
//   - nomad_gpu_cluster_task_run_seconds{pool,priority,stat}: run time of the GPU allocations that finished within W after starting, finish − start (finish: the last task's; start: the first task's first), same stats.
//   - nomad_gpu_cluster_allocs_started{pool,priority}: the N of task_wait_seconds, GPU allocations whose first task started within W.
//   - nomad_gpu_cluster_allocs_finished{pool,priority,outcome}: GPU allocations that finished within W, by client status.
//   - nomad_gpu_cluster_alloc_failure_ratio{pool,priority}: (failed + lost) / (complete + failed + lost) within W (no series when none finished).
//   - nomad_gpu_cluster_list_up{list}: 1 when the list (nodes, blocked_evaluations, jobs, allocations, finished_allocations) has been read and has not been failing for over max_staleness, else 0.
//   - nomad_gpu_cluster_nomad_requests_total{endpoint} (counter): Nomad API requests the plugin made, by endpoint (Stats).
//
// A GPU allocation is one given at least one device instance; its pool
// is its node's (allocations of nodes no longer listed are left out).
// Device series exist per pool, datacenter and device group of ready nodes,
// GPU-equivalent series per pool and datacenter of ready nodes with GPUs,
// MIG instances or MPS shares (a drained pool's are 0; a pool with no
// ready node has none); queue and task series exist where there is such
// work. In PromQL, absent is nothing: use `or vector(0)`.
//
// Fragmentation is FGD rather than a count of stranded instances
// (stranded_devices, stranded_slices): an instance count weighs an MPS
// share like a GPU, calls a free share of a partly used GPU wasted when
// the next fractional request fits it, follows the instant's queue, and
// is 0 for whole GPUs whenever nothing is queued. Summed over
// datacenters, fragmentation_gpus and free_gpus give a pool's; their
// ratio is the pool's fragmentation_ratio.
//
// The task figures are gauges over the window rather than histograms: a
// window's count falls as allocations leave it, which a counter, and so a
// histogram's buckets, must not do; cumulative histograms would instead
// need the exporter to remember each allocation it had observed, would
// start from nothing after each restart, and would need a range query to
// say what the last hour was. Gauges read the window in one scrape, are
// exact for it, and allocs_started and allocs_finished weigh them when
// pools are combined (a mean: Σ mean·N / Σ N).
//
// # Cost
//
// Four lists are kept by blocking queries (WaitIndex = last index) of a
// nomadview.Watcher, each in its own goroutine, started by the first query
// that needs it: /v1/nodes?resources=true; /v1/evaluations?status=blocked;
// /v1/jobs?meta=true (job summaries and priorities; the blocked queue
// reads it); and /v1/allocations?resources=true filtered to pending and
// running. A list is re-read only when its table's index moves, at most
// once per min_refresh_interval. With the blocked evaluations, each
// blocked job's spec is read once per job modify index. Queries read the
// cache, so a policy evaluation of any number of queries makes no Nomad
// call when the cluster did not change; each change costs one list of the
// kind that changed (plus the new or re-blocked jobs' spec). The one
// exception is gpu_util_pct: one client stats call per matching node, at
// most once per stats_ttl. Stats counts every call.
//
// With metrics_address set, all lists start at SetConfig, plus: a fourth
// blocking list, /v1/allocations?resources=true&reverse=true&per_page=
// finished_max_allocs filtered to complete, failed and lost, at most once
// per finished_refresh_interval (one page: the newest terminal
// allocations, so a list costs at most finished_max_allocs stubs; an
// allocation created before that many newer terminal ones is missed; an
// allocation's priority is its job's in the jobs list, 0 once the job is
// purged); and the device stats of
// every ready node with devices, once per stats_ttl, in the background
// (a scrape reads stats no older than 3 × stats_ttl). A scrape makes no
// Nomad call; its own cost at 1,000 nodes is BenchmarkClusterScrape's.
//
// The token needs node:read and, in the namespaces read, read-job (jobs,
// evaluations, allocations); gpu_util_pct and the exporter also reach the
// clients' stats through the servers.
package apm
