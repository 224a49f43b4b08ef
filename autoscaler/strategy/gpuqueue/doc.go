// Package gpuqueue is the nomad-autoscaler strategy plugin gpu-queue: GPU
// capacity that follows the queue. From the current count and its checks'
// metrics it returns an absolute count, with a reason a person can read in
// the agent's log.
//
//   - Scale out when queued work reaches an activation level, or has
//     waited max_wait. It goes straight to the capacity that places the
//     queue (count + nodes_needed − capacity already in flight), at most
//     max_scale_up at a time.
//   - Scale in only after the queue has been empty and utilisation below
//     floor for scale_in_after. It removes at most max_scale_down at a
//     time, and never more than the share of the count in use allows.
//   - Hysteresis: the two rules need opposite states of the queue, so the
//     count never flaps (see Hysteresis below).
//   - Optionally it looks ahead and orders capacity boot_time before the
//     queue needs it (see Look-ahead below).
//
// # Checks and pools
//
// The agent gives a strategy one series per check: one query's values,
// without labels. The rules need four signals, so a policy has one check
// per signal. Each check names its signal with the `signal` key. Checks
// with the same `pool` key share state in the plugin process.
//
//	signal          query (nomad-gpu-apm)                         what it is
//	nodes_needed    nodes_needed{node_pool=gpu}                   nodes to add to place the queue: the amount of every scale-out
//	queued          allocs_queued{…,state=blocked}, gpus_queued   queued work, compared with activation; 0 is an empty queue
//	wait            wait_max_seconds{…,state=blocked}             how long the oldest queued work has waited, compared with max_wait
//	util            gpu_alloc_pct{…} (or gpu_util_pct)            percent 0-100, compared with floor for scale-in
//	nodes           nodes_ready{node_pool=gpu,node_class=…}       the target's nodes that joined: what of the count is in flight (optional)
//
// In a pool whose GPU layouts follow the queue (the controller lays
// GPUs out as whole GPUs, MPS shares or MIG instances), query every
// signal with device=any: nodes_needed{node_pool=gpu,device=any},
// gpus_queued{node_pool=gpu,device=any,state=blocked} (GPU-equivalents:
// four queued MPS shares of 8 are 0.5, so set activation below 1),
// wait_max_seconds{…,device=any,state=blocked},
// gpu_alloc_pct{node_pool=gpu,device=any} and nodes_ready{…,device=any}.
// The strategy reads them as it reads any values.
//
// The agent runs the checks one after another and keeps one winner: Up
// beats None, None beats Down, and the larger count wins within a
// direction. Every check of a pool returns the same decision, made from
// the latest value of every signal in the pool. A check that runs earlier
// in an evaluation sees the later checks' values from the previous
// evaluation. The winner rule keeps that safe.
//
//   - A scale-in happens only if every check votes Down. Each check votes
//     on its own signal, which is always fresh. So each condition of a
//     scale-in is checked on current data by its own check.
//   - The util check alone bounds the scale-in step by the share of the
//     count in use, measured on its fresh value. The other checks bound it
//     by max_scale_down only. The agent keeps the largest Down count, so
//     the tighter bound holds.
//   - If a check fails and the agent ignores it, the agent counts None for
//     it, which vetoes any scale-in. A signal whose check has not reported
//     for three evaluation intervals is stale. A stale signal never counts
//     as an empty queue or as low utilisation.
//   - A scale-out may follow the previous evaluation's view for one
//     evaluation. The in-flight ledger (below) stops that from adding the
//     same capacity twice.
//
// A pool's first evaluation only records which checks it has ("learning
// its checks"). A check without `pool` is a pool by itself: it is keyed by
// check name, source, query and strategy block, because one process serves
// every policy that names this strategy block. A lone nodes_needed check
// scales out on its own metric. Without a queued check in its pool,
// activation compares with nodes_needed. Without a wait check, max_wait
// compares with how long the queue has been non-empty. A lone check never
// scales in: scale-in needs a util check. Each pool holds at most one check
// per signal.
//
// The rule keys (all keys except signal and pool) belong to the pool. Set
// each one on any one check of the pool, or in the plugin block's config
// as a default for every check. It is an error for two checks of a pool to
// set the same key to different values.
//
// # Example
//
// The agent config:
//
//	apm "nomad-gpu" { driver = "nomad-gpu-apm" }
//	strategy "gpu-queue" { driver = "gpu-queue" }
//
// A cluster policy. Do not name the APM "nomad-apm": the agent forces
// min = 1 on cluster policies that use a source with that name.
//
//	scaling "gpu" {
//	  min = 0
//	  max = 40
//	  policy {
//	    evaluation_interval  = "30s"
//	    cooldown             = "5m"
//	    cooldown_on_scale_up = "1m"
//
//	    check "queue" {
//	      source = "nomad-gpu"
//	      query  = "allocs_queued{node_pool=gpu,state=blocked}"
//	      strategy "gpu-queue" {
//	        signal     = "queued"
//	        pool       = "gpu"
//	        activation = 6         # more than 5 queued allocations
//	      }
//	    }
//	    check "wait" {
//	      source = "nomad-gpu"
//	      query  = "wait_max_seconds{node_pool=gpu,state=blocked}"
//	      strategy "gpu-queue" {
//	        signal   = "wait"
//	        pool     = "gpu"
//	        max_wait = "30m"
//	      }
//	    }
//	    check "idle" {
//	      source = "nomad-gpu"
//	      query  = "gpu_alloc_pct{node_pool=gpu}"
//	      strategy "gpu-queue" {
//	        signal         = "util"
//	        pool           = "gpu"
//	        floor          = 30
//	        scale_in_after = "15m"
//	      }
//	    }
//	    check "capacity" {
//	      source = "nomad-gpu"
//	      query  = "nodes_needed{node_pool=gpu}"
//	      strategy "gpu-queue" {
//	        signal       = "nodes_needed"
//	        pool         = "gpu"
//	        max_scale_up = 8
//	        boot_time    = "6m"
//	      }
//	    }
//	    target "aws-asg" {
//	      aws_asg_name           = "gpu"
//	      node_pool              = "gpu"
//	      node_selector_strategy = "empty_ignore_system"
//	      node_drain_deadline    = "2h"
//	    }
//	  }
//	}
//
// The smallest useful policy has two checks: "capacity" and "idle". It
// compares activation with nodes_needed and max_wait with how long the
// queue has been non-empty.
//
// Do not put gpu-queue checks in a check `group`, and do not give them
// their own `schedule`. Inside a group the agent ignores None votes, so a
// check could no longer veto a scale-in. Each pool name must be used by one
// policy only. The agent sends no policy ID, so two policies that use the
// same pool name would share its state.
//
// # Keys
//
//	key             default          allowed; meaning
//	signal          "nodes_needed"   nodes_needed | queued | wait | util: what this check's metric is
//	pool            "" (the check alone)  links the checks of one policy
//	activation      1                > 0: queued work (in the queue signal's unit) that opens scale-out
//	max_wait        "30m"            ≥ 1s, or "0" (off): waiting this long opens scale-out below activation
//	max_scale_up    10               integer ≥ 1: most units added by one action
//	max_scale_down  1                integer ≥ 1: most units removed by one action
//	floor           30               0-100 (0: never scale in): utilisation below which scale-in may happen
//	scale_in_after  "10m"            ≥ 1s: how long the queue must stay empty and utilisation below floor
//	boot_time       "10m"            ≥ 1s, or "0" (off): how long added capacity takes to show in nodes_needed
//	lookahead       false            true | false: order capacity boot_time ahead (needs boot_time > 0)
//	metrics_address ""               plugin config only: host:port to serve metrics on (see Metrics)
//
// Values arrive as strings, the way the agent formats them with %v.
// Durations are Go durations ("30m", "90s"). An error names the key and
// says what is allowed, for example:
//
//	gpu-queue: max_scale_up: "-1" must be a positive integer
//
// A key the plugin does not know is an error that names it. The agent's
// nomad_* keys (and nomad_config_inherit) are ignored. A bad plugin config
// stops the agent at start. A bad strategy block fails its check on every
// run, and so does a pool whose checks set a key to different values: the
// agent only logs a warning ("failed to run check") and counts the check
// as a vote for no change, so the plugin logs each such run at error level
// ("check refused", with check_name, pool, query and key) and counts it
// (see Metrics).
//
// # Metrics
//
// The plugin config's one key of its own is metrics_address (unset: off),
// host:port (":9404", "127.0.0.1:9404"). The plugin process then serves
// Prometheus metrics at MetricsPath there:
//
//	nomad_gpu_strategy_check_runs_total{pool, check, query, result}
//
// the runs of each check by result: ok (an action), refused (its strategy
// block or its pool's rules are refused), error (bad input: a negative
// count or a metric that is not a number). pool is the check's pool key
// ("" alone), check its name, query its query (the agent sends a strategy
// no policy ID). Each check has a series of every result from its first
// run; one that no evaluation has run for an hour is dropped, and at most
// 4096 are kept. An address it cannot listen on is a SetConfig error
// naming the key. ReadCheckRuns reads the counts back from the endpoint;
// jobs/monitoring/alerts.yml's GPUScalingCheckFailing fires on a check
// that fails on every evaluation for 10 minutes.
//
// # Scale out
//
// The gate opens when the queue reaches activation, or when its oldest
// work has waited max_wait. Once open, it stays open until the queue
// empties (a latch). A queue that dithers around activation therefore
// keeps its scale-out until all of it is placed. The amount is nodes_needed
// minus the capacity in flight, capped by max_scale_up.
//
// nodes_needed counts against the nodes that have registered, but the
// target's count already includes nodes that are still booting. For
// example, aws-asg reports its desired capacity as the count. The plugin
// keeps an in-flight ledger for this. Every rise of the count enters the
// ledger, and an entry stays for boot_time. Every fall of nodes_needed
// (capacity showing up) takes the oldest entries off first. A fall of the
// count takes the newest off. While the ledger covers nodes_needed, the
// plugin holds and says so. The ledger cannot tell a join from queued work
// placed on capacity that finished work freed. Both lower nodes_needed, so
// the ledger may release capacity early and add it again. It adds at most
// what it added in the last boot_time. Nor can it see a join while work
// arrives: the node takes the new work, nodes_needed does not fall, and
// the joined node counts as in flight until boot_time ends, so the next
// scale-out waits that long. With boot_time = "0" there is no ledger. In
// the simulation below, a pool without the ledger overshoots to 39 nodes
// where 11 do: 73 % more node-hours.
//
// A nodes check tells joins exactly. Its query counts the nodes of the
// target that joined and can take work (nodes_ready, filtered to the
// target's nodes: another group's nodes in the same pool would count as
// joined ones of this target). With it, the capacity in flight is the
// count minus the nodes joined, at most the ledger, so a node that never
// joins stops counting after boot_time; falls of nodes_needed no longer
// take entries off. The plugin weighs nodes_needed with the nodes value
// read no later than it (a newer join may not show in nodes_needed yet),
// and says which it used: "- 1 in flight (count 3 - 2 nodes joined)".
//
// # Scale in
//
// Scale-in needs every queue signal in the pool (queued, nodes_needed,
// wait) at 0, and utilisation below floor. Both must hold, without a
// break, for scale_in_after. Any queued work, or utilisation at or above
// the floor, starts the wait again. The new count is the largest of:
//
//   - count − max_scale_down
//   - the share of the count in use, ⌈count × util / 100⌉
//   - 0
//
// The agent caps the result at min. The conditions keep holding after a
// step, so the next step follows once the agent's cooldown has passed.
//
// # Hysteresis
//
// A scale-out needs queued work, and a scale-in needs an empty queue for
// scale_in_after. Between a scale-out and a later scale-in there is
// therefore at least scale_in_after of empty queue. Going back up needs
// work that reaches activation again, or waits max_wait. Noise around
// activation cannot stop and restart a scale-out (the latch). Noise around
// the floor only restarts the scale-in wait. The count changes direction
// only when the load changes regime. TestHysteresis replays noisy series
// around every threshold and asserts at most one change of direction.
//
// # Look-ahead
//
// With lookahead = true the plugin projects the queue boot_time ahead.
// boot_time is how long capacity ordered now takes to arrive. The plugin
// does not see arrivals. It sees the queue's net growth: arrivals that did
// not fit, minus placements. That growth is what capacity must absorb.
//
// Each queue signal's growth rate is an exponentially weighted moving
// average (EWMA), with time constant boot_time/2, of its change per
// second. The average learns only while the queue is non-empty, because
// the queue's first appearance is one arrival, not a trend. It resets when
// the queue empties. With this rate the plugin:
//
//   - opens scale-out early when the queue, growing at that rate, reaches
//     activation within boot_time;
//   - opens it early when the oldest wait plus boot_time reaches max_wait
//     (waiting grows one second a second);
//   - adds ⌊rate of nodes_needed × boot_time⌋ nodes to nodes_needed. Only
//     whole projected nodes count, so noise worth less than a node adds
//     nothing.
//
// The look-ahead never scales in and never acts on an empty queue.
//
// Measured in TestLookaheadHelps: 8-GPU nodes with a 6-minute boot,
// 20-minute one-GPU tasks, a ramp to 3 tasks a minute, a plateau and a
// burst, over 10 seeds. Without look-ahead: mean wait 1m13s, p95 6m06s,
// 36.9 node-hours. With it: mean wait 54s, p95 5m12s, 38.6 node-hours.
// That is 26 % less waiting on average and 15 % less at p95, for 4.6 %
// more node-hours, with the same number of direction changes. Other time
// constants, measured the same way: boot_time cut mean wait by 12 % for
// 1.9 % more node-hours; boot_time/4 cut it by 37 % for 15 % more, and it
// is more easily fooled by noise.
//
// # State
//
// The plugin keeps its state in memory and keys it by pool. One process
// keeps at most 4096 pools and drops the least recently used first. A pool
// that no check has run for an hour is dropped. The state is lost when the
// plugin restarts (the agent restarts its plugins with itself). After a
// restart, scale-in waits start again, which is conservative. The ledger
// starts empty, so set cooldown_on_scale_up to at least the boot time.
// Meta on every action has "gpu-queue.rule" (activation, max_wait,
// lookahead, latched, scale_in, or why it holds), "gpu-queue.pool", and
// the value of each fresh signal under "gpu-queue.<signal>".
package gpuqueue
