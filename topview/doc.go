// Package topview is the cluster's GPUs as one view, read from the
// Nomad API: per node and GPU its slices (MIG instances, MPS shares), the
// allocations holding them, utilisation, memory, temperature and power
// from the device stats, health; and the queue of GPU work that waits,
// with how long and why.
// `nomad-gpu top` draws it; what nvidia-smi is for one machine, this is for
// the cluster.
//
// Build turns API objects into a View and is pure (tests feed it fixtures);
// Source reads them through a nomadview.Watcher; WriteTable draws a View as text.
//
// # Grouping
//
// Nomad sees devices, not GPUs: a whole GPU (nvidia/gpu/<product>, ID
// GPU-<uuid>), a MIG instance (nvidia/mig/<profile>, ID MIG-<uuid>) or an
// MPS share (nvidia/mps/<GPU-uuid>, ID <GPU-uuid>-mps-<n>). The view puts
// them back under their physical GPU: a whole GPU is its own; MPS shares by
// the GPU UUID in their ID (model, memory and index from parent_product,
// parent_memory and parent_index); MIG instances by the PCI bus ID they
// carry as locality, which is their GPU's (model and memory from
// parent_product and parent_memory). MIG instances without a PCI bus ID
// are grouped by parent_product. Devices of other vendors are not shown.
//
// A GPU's index and UUID come from the device stats, where the device
// plugin names every device's physical GPU ("GPU index", "GPU UUID"):
// device attributes cannot, since Nomad keeps them per device group and a
// group gathers several GPUs (whole GPUs by product, MIG instances by
// profile). So a whole GPU's index, and a MIG GPU's index and UUID, are
// unknown while its node's stats are unavailable (an MPS GPU's index is
// then parent_index; a whole GPU's UUID is its device ID). Temperature and
// power are the GPU's as any of its devices reports them.
//
// # JSON (`nomad-gpu top -json`)
//
// One document; field names are stable. Figures that are unknown are null
// (index is left out); lists are never null. Nodes are those with nvidia
// devices or the gpu task driver detected, and any a -node filter names.
//
//	{
//	  "generated_at": "2026-12-03T10:00:00Z",
//	  "nodes": [{
//	    "name", "id", "datacenter", "pool", "class", "status": "ready",
//	    "eligible": true, "drain": false,
//	    "stats_error": "stats unavailable: HTTP 500: …", // only when its stats could not be read
//	    "stray_pins": ["nomad_gpu.pin.GPU-bogus=mps:4 names no GPU of this node, so it is ignored (its GPUs: GPU-…)"], // only when some pin names no GPU of the node
//	    "gpus": [{
//	      "uuid": "GPU-…",                // "" for a GPU in MIG mode whose stats are unavailable
//	      "model": "NVIDIA H100 80GB HBM3",
//	      "index": 4,                     // only when known (see Grouping)
//	      "pci_bus_id": "0000:18:00.0",
//	      "mode": "whole" | "mig" | "mps",
//	      "healthy": true, "health_description": "XID 79 …" (only when unhealthy),
//	      "memory_total_mib": 81920, "memory_used_mib": 1000, "utilization_pct": 80,
//	      "temperature_c": 45, "power_w": 300.5,
//	      "slices": [{
//	        "type": "mig" | "mps", "id": "MIG-…" | "GPU-…-mps-0",
//	        "profile": "1g.10gb" | "1/4",  // MIG profile; MPS: one of <shares>
//	        "healthy": true, "health_description": "…",
//	        "memory_total_mib", "memory_used_mib", "utilization_pct",
//	        "alloc": null | {"alloc_id", "job", "group", "task", "namespace", "memory_used_mib", "prediction"}
//	      }],
//	      "layout": {                     // only where the device plugin publishes layouts
//	        "current": "mps:8", "desired": "whole" (only when asked), "pinned": true (only when pinned),
//	        "state": "ready" | "held" | "draining" | "error", "error": "…" (only when state is error),
//	        "changed": "2026-12-05T09:12:01Z", "reason": "whole → mps:8: …" // the controller's last change, when read
//	      },
//	      "allocations": [{
//	        "alloc_id", "job", "group", "task", "namespace",
//	        "memory_used_mib": 2048,      // what the task uses here, where known (see below); else null
//	        "prediction": {               // only for a GPU task of a batch or sysbatch job (see Forecasts)
//	          "remaining_seconds": 360,   // null when unknown, and for basis "elapsed"
//	          "runtime_seconds": 600,     // whole run: elapsed + remaining; null likewise
//	          "basis": "job" | "pool" | "elapsed" | "finished" | "none" | "other"
//	        }
//	      }]
//	    }]
//	  }],
//	  "queue": [{
//	    "job", "namespace", "group", "pool",
//	    "state": "blocked" | "pending",
//	    "devices": [{"name": "nvidia/gpu", "count": 9}],  // asked per allocation
//	    "count": 1,                       // allocations waiting
//	    "waiting_seconds": 42, "since": "2026-12-03T09:59:18Z",
//	    "reason": "constraint \"missing devices\" filtered 1 node",
//	    "never_fits": true,               // blocked only: no node of its pool could ever take one allocation; reason says why
//	    "node": "client-1",               // pending only: where it was placed
//	    "predicted_wait_seconds": 360,    // blocked only, when known: until its last allocation is placed
//	    "predicted_runtime_seconds": 600, // blocked batch and sysbatch jobs only, when known: one allocation's run time
//	    "prediction_basis": "fits_now" | "list_schedule" | "none"  // blocked only: what the wait rests on
//	  }],
//	  "history_error": "list finished allocations: …", // only when the history could not be read
//	  "controller": {                     // with -controller-namespace (default "default")
//	    "leading": true, "leader": "alloc 1a2b3c4d (nomad-gpu-controller.controller[0])",
//	    "raises": [{"namespace": "default", "job": "low-a", "own_priority": 30, "priority": 90,
//	      "reason": "preempted by alloc 8c41938a (job high-1, priority 90)",
//	      "in_force": true, "until": "2026-12-05T04:01:20Z"}]  // in_force false: waits for its replacement
//	  },
//	  "controller_error": "reading nomad-gpu/controller/leader: …" // only when it could not be read
//	}
//
// memory_used_mib and utilization_pct come from the client's host stats
// (/v1/client/stats): for a whole GPU its "Memory used" and "GPU
// utilization"; for an MPS GPU the "Physical GPU memory used" and "Physical
// GPU utilization" its shares carry (from a device plugin that predates
// those, the shares' "Memory used" and "GPU utilization", then the GPU's);
// for a MIG instance its own, for a MIG GPU the sum of its instances' memory
// and no utilisation; for an MPS share what its task uses of it: "MPS memory
// used" of its limit and "MPS utilization" of its SMs (null where the task
// is not measured), never the GPU's. temperature_c and power_w are the
// stats "Temperature" and "Power".
//
// An allocation's memory_used_mib is "where known": what the task holds
// of the device stats, since Nomad reports no per-process GPU memory. For
// a task holding a whole GPU it is that GPU's memory used, all processes
// on it included; holding MIG instances, the sum of their memory used;
// holding MPS shares, the sum of their "MPS memory used" (what the gpu
// driver measured of the task's processes). Under a slice it is that
// slice's. It is null when a device it holds has no such stat (node stats
// unavailable, a driver that publishes no MPS usage).
//
// # Queue
//
// Queued work is what asks for an nvidia gpu, mig or mps device and waits:
// (a) the unplaced allocations of blocked evaluations, per task group that
// failed to place, counted by the job summary's Queued (the evaluation's
// CoalescedFailures+1 when the summary has none yet), asking for its
// tasks' device blocks, waiting since the blocked evaluation was created,
// with the scheduler's placement failure as reason, preceded by "never
// fits: …" where one allocation asks for more whole GPUs than any node of
// its pool has (nomadview's NeverFits); (b) allocations placed
// but still pending on their node, waiting since they were created.
// A -node-pool filter keeps work whose job targets that pool (or "all");
// a -node filter drops pending work placed elsewhere. -node-pool all keeps
// every node. A filter naming a pool that does not exist, or nodes that
// match none, fails the read (UnknownPoolError, UnknownNodesError): a
// typo shows as one, not as an empty cluster.
//
// # Forecasts
//
// Run times and waits are sizing.Forecast's, the computation behind the
// APM's nomad_gpu_job_predicted_* metrics, over what the frame read: the
// run records of the pending and running allocations and of the terminal
// ones that finished within the watcher's FinishedWindow (`top -history-window`,
// 24h by default; the newest 2000 at most), each in its node's
// pool; the free slices per pool and unit (healthy nvidia instances of
// ready, eligible, not draining nodes that no pending or running
// allocation holds); and the blocked entries of the queue as queued work
// (their first GPU task by name, job priority, since and count).
//
// Only work that ends has a run time: every GPU task of a pending or
// running allocation of a batch or sysbatch job gets a prediction, every
// blocked entry a predicted wait and, for a batch or sysbatch job, a run
// time. Services and system jobs run until stopped: their tasks get no
// prediction and their queue entries no run time. A figure with nothing to
// rest on is null, and the basis says what a known one rests on
// (sizing.BasisKind). Basis "elapsed" (no history, or the task has outlived
// it: sizing takes it to be half done) is no prediction, only the time run
// so far: its figures are null. When the terminal allocations cannot be
// listed the frame is still shown, with history_error set and every
// forecast unknown (basis "none"). The table shows a known time left as
// "~12m00s" in a node's PRED LEFT column, and a known wait and run time in
// the queue's PRED WAIT and PRED RUN columns, "-" when there is none: the
// "~" and the PRED headers mark predictions.
//
// # Table
//
// WriteTable fits TableOptions.Width (80 columns by default). Per node:
// a line naming it; its GPUs (IDX, short UUID, MODEL without "NVIDIA ",
// HEALTH, UTIL, MEM GiB used/total, TEMP, POWER, USE: free, used, or
// slices held/all), slices beneath, and why an unhealthy GPU is so on the
// line below it; then its tasks (GPU index, SLICES held, TASK as
// [namespace:]job/group/task, ALLOC, MEM GiB used, PRED LEFT). Then the
// queue (JOB as [namespace:]job/group, STATE, DEVICES, COUNT, WAIT, PRED
// WAIT, PRED RUN), each entry's reason on the line below it. Where a table
// would be too wide, names are cut with "…" first to a useful length, then
// the PCI BUS and MODE columns (shown on wider lines) are left out, then
// names are cut further, then POWER and TEMP are left out. TableOptions
// Sort and Filter order and cut the rows as Arrange does.
package topview
