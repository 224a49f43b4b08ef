package contract

// Prometheus metrics. Both Nomad plugins serve them on their own
// metrics.address, and the gpu-queue strategy on its metrics_address (all
// off by default), each on a registry of its own. Dashboards and alert
// rules are written against these names and labels, so they are part of
// the contract: DeviceMetrics, DriverMetrics and StrategyMetrics list every
// metric each exports, with its type and labels, and the exporters are
// built from these lists, so an exported metric cannot be missing from
// them. (nomad-gpu-apm's cluster figures are listed by its package,
// autoscaler/apm.)
//
// Labels that name a node, allocation, job, group or task are those of
// Nomad's own allocation telemetry (nomad_client_allocs_*), so the series
// join with it: host (the node name; Nomad's own when the agent sets
// telemetry { use_node_name = true }, otherwise its hostname), namespace,
// job (the job's name), task_group, alloc_id and task.

// MetricType is a metric's Prometheus type.
type MetricType string

const (
	Gauge     MetricType = "gauge"
	Counter   MetricType = "counter"
	Histogram MetricType = "histogram"
)

// Metric is one exported metric: its name, type, help text and variable
// labels, in the order the exporter fills them.
type Metric struct {
	Name   string
	Type   MetricType
	Help   string
	Labels []string
}

// Label names.
const (
	LabelHost       = "host"
	LabelDeviceID   = "device_id"   // the Nomad device ID: GPU- or MIG- UUID, or MPS share ID
	LabelDeviceType = "device_type" // SliceGPU, SliceMIG or SliceMPS
	LabelGPU        = "gpu"         // the physical GPU's NVML index
	LabelDeviceName = "device_name" // the Nomad device group's name (product, MIG profile, or shared GPU's UUID)
	LabelGPUUUID    = "gpu_uuid"    // the physical GPU's GPU- UUID
	LabelModel      = "model"       // the physical GPU's product name
	LabelMIGProfile = "mig_profile"
	LabelPCIBusID   = "pci_bus_id"
	LabelUUID       = "uuid" // a GPU- or MIG- UUID as NVML names it
	LabelXID        = "xid"
	LabelErrorType  = "error_type"
	LabelNamespace  = "namespace"
	LabelJob        = "job"
	LabelTaskGroup  = "task_group"
	LabelAllocID    = "alloc_id"
	LabelTask       = "task"
	LabelResult     = "result"
	LabelReason     = "reason"
	LabelPool       = "pool"  // a gpu-queue check's pool key ("" for a check alone)
	LabelCheck      = "check" // a policy check's name
	LabelQuery      = "query" // a policy check's query
)

// Label values.
const (
	ECCCorrected   = "corrected"
	ECCUncorrected = "uncorrected"

	CheckpointCommitted = "committed" // committed and restorable
	CheckpointFailed    = "failed"    // the commit was refused or failed
	CheckpointTimeout   = "timeout"   // not committed within commit_timeout of a stop

	KillGPUMemory = "gpu_memory" // the GPU-memory watchdog killed the task

	CheckOK      = "ok"      // the strategy returned an action
	CheckRefused = "refused" // the check's strategy block or its pool's rules are refused
	CheckError   = "error"   // bad input: a negative count or a metric that is not a number
)

// DeviceLabels identify a device's series; TaskLabels a task's;
// CheckLabels a policy check's as the gpu-queue strategy sees it (the
// agent sends a strategy no policy ID: a pool is one policy's, and a check
// alone is told apart by its query).
var (
	DeviceLabels = []string{LabelHost, LabelDeviceID, LabelDeviceType, LabelGPU}
	TaskLabels   = []string{LabelHost, LabelNamespace, LabelJob, LabelTaskGroup, LabelAllocID, LabelTask}
	CheckLabels  = []string{LabelPool, LabelCheck, LabelQuery}
)

// Device plugin (nomad-device-gpu) metrics. Device series exist for every
// device Nomad is offered: whole GPUs, MIG instances and MPS shares. A MIG
// instance's and an MPS share's temperature, power, clocks and ECC counts are
// those of their GPU, as in `nomad node status -stats`; an MPS share's
// utilization and memory used are its task's own, never its GPU's; a value
// NVML does not report for a device has no series.
const (
	MetricDeviceInfo             = "nomad_gpu_device_info"
	MetricDeviceHealthy          = "nomad_gpu_device_healthy"
	MetricDeviceAllocated        = "nomad_gpu_device_allocated"
	MetricDeviceAllocationInfo   = "nomad_gpu_device_allocation_info"
	MetricDeviceAllocationsKnown = "nomad_gpu_device_allocations_known"
	MetricDeviceUtilization      = "nomad_gpu_device_utilization_percent"
	MetricDeviceMemUtilization   = "nomad_gpu_device_memory_utilization_percent"
	MetricDeviceMemoryUsed       = "nomad_gpu_device_memory_used_bytes"
	MetricDeviceMemoryTotal      = "nomad_gpu_device_memory_total_bytes"
	MetricDeviceTemperature      = "nomad_gpu_device_temperature_celsius"
	MetricDevicePower            = "nomad_gpu_device_power_watts"
	MetricDeviceSMClock          = "nomad_gpu_device_sm_clock_hertz"
	MetricDeviceMemClock         = "nomad_gpu_device_memory_clock_hertz"
	MetricDeviceECCErrors        = "nomad_gpu_device_ecc_errors_total"
	MetricDeviceMPSThreadPercent = "nomad_gpu_device_mps_active_thread_percent"
	MetricXIDErrors              = "nomad_gpu_xid_errors_total"
)

// Task driver (gpu) metrics, one series set per task (see TaskLabels).
const (
	MetricTaskGPUMemoryUsed      = "nomad_gpu_task_gpu_memory_used_bytes"
	MetricTaskGPUMemoryLimit     = "nomad_gpu_task_gpu_memory_limit_bytes"
	MetricTaskGPUUtilization     = "nomad_gpu_task_gpu_utilization_percent"
	MetricTaskCheckpointRequests = "nomad_gpu_task_checkpoint_requests_total"
	MetricTaskCheckpoints        = "nomad_gpu_task_checkpoints_total"
	MetricTaskCheckpointDuration = "nomad_gpu_task_checkpoint_duration_seconds"
	MetricTaskCheckpointReqDur   = "nomad_gpu_task_checkpoint_request_duration_seconds"
	MetricTaskCheckpointSize     = "nomad_gpu_task_checkpoint_size_bytes"
	MetricTaskCheckpointLastOK   = "nomad_gpu_task_checkpoint_last_success_timestamp_seconds"
	MetricTaskRestores           = "nomad_gpu_task_restores_total"
	MetricTaskPreemptions        = "nomad_gpu_task_preemptions_total"
	MetricTaskEnforcementKills   = "nomad_gpu_task_enforcement_kills_total"
)

// Strategy plugin (gpu-queue) metrics, one series set per policy check that
// names the strategy (see CheckLabels). A check no evaluation has run for
// an hour loses its series.
const (
	MetricStrategyCheckRuns = "nomad_gpu_strategy_check_runs_total"
)

// Controller (nomad-gpu controller) metrics, one set per replica.
const (
	LabelKind                   = "kind" // a controller decision's kind
	MetricControllerLeader      = "nomad_gpu_controller_leader"
	MetricControllerDecisions   = "nomad_gpu_controller_decisions_total"
	MetricControllerLastTick    = "nomad_gpu_controller_last_tick_timestamp_seconds"
	MetricControllerLedgerWrite = "nomad_gpu_controller_ledger_writes_total"
	MetricControllerNomadCalls  = "nomad_gpu_controller_nomad_requests_total"
	LabelEndpoint               = "endpoint" // a Nomad API list a watch reads
	// Layouts that follow the queue.
	MetricControllerLayoutChanges = "nomad_gpu_controller_layout_changes_total"
	MetricControllerLayoutApplied = "nomad_gpu_controller_layout_apply_seconds"
	LabelLayoutKind               = "layout" // whole, mps or mig: what a GPU was relaid to; cancel: asked back to what it offers

	// Moves of checkpointed work (docs/controller.md, moving work).
	MetricControllerMoves          = "nomad_gpu_controller_moves_total"
	MetricControllerMoveGPUSeconds = "nomad_gpu_controller_move_gpu_seconds_total"
	LabelMoveReason                = "reason" // consolidate: to free a node for a multi-GPU ask

	// Gangs (docs/controller.md, gangs).
	MetricControllerGangs       = "nomad_gpu_controller_gangs"
	MetricControllerGangMembers = "nomad_gpu_controller_gang_members"
	MetricControllerReserveIdle = "nomad_gpu_controller_reservation_idle_gpu_seconds_total"
	LabelGangState              = "state" // gangs: waiting, placing, running; members: wanted, placed, running

	// Team queues (docs/controller.md, queues).
	MetricControllerQueueGPUs     = "nomad_gpu_controller_queue_gpus"
	MetricControllerQueueUsage    = "nomad_gpu_controller_queue_usage_gpu_seconds"
	MetricControllerQueueStanding = "nomad_gpu_controller_queue_fair_share_ratio"
	MetricControllerQueueWaiting  = "nomad_gpu_controller_queue_waiting_allocations"
	MetricControllerQueueHeld     = "nomad_gpu_controller_queue_waiting_jobs"
	LabelQueue                    = "queue"  // a queue of the controller's queue file
	LabelQueueFigure              = "figure" // used, nominal, borrowed, lent
)

// ControllerMetrics lists every metric a controller replica exports.
func ControllerMetrics() []Metric {
	return []Metric{
		{MetricControllerLeader, Gauge, "1 while this replica holds the leader lock and acts, 0 while it follows.", nil},
		{MetricControllerDecisions, Counter, "Decisions of the leader by kind: protection-pending, protected, protection-dropped, protection-over, min-runtime, min-runtime-over, min-runtime-skipped, deadline-raised, deadline-restored, resized, raised, restored, hand-change, moved, replaced, gang-admitted, gang-waiting, gang-invalid, gang-rolled-back, gang-requeued, reserved, reservation-raised, backfilled, reservation-ended, reservation-expired, reclaimed.", []string{LabelKind}},
		{MetricControllerLastTick, Gauge, "When the leader last read the cluster and ran its modules, in seconds since the epoch; absent on a follower that never led.", nil},
		{MetricControllerLedgerWrite, Counter, "Writes (and deletes) of priority ledger variables by this replica.", nil},
		{MetricControllerNomadCalls, Counter, "Nomad API list requests of the leader's watches of the cluster, by list.", []string{LabelEndpoint}},
		{MetricControllerLayoutChanges, Counter, "GPU layouts the leader asked for in node metadata, by the kind relaid to (whole, mps, mig; cancel: a GPU allocations took before it was relaid, asked back to what it offers).", []string{LabelLayoutKind}},
		{MetricControllerLayoutApplied, Histogram, "Time from the leader asking a GPU for a layout to its device plugin offering it, as the node list shows it (cancels left out).", nil},
		{MetricControllerMoves, Counter, "Allocations the leader stopped so that Nomad places them again elsewhere, by reason (consolidate: to free a node for a queued multi-GPU allocation; relief: off an overloaded MPS GPU; scale-in: to empty a node for removal).", []string{LabelMoveReason}},
		{MetricControllerGangs, Gauge, "Gangs the leader saw at its last tick, by state: waiting (at count 0, not admitted), placing (admitted, not every member running), running (every member running).", []string{LabelGangState}},
		{MetricControllerGangMembers, Gauge, "Members of the gangs the leader saw at its last tick: wanted (every gang's members), placed (holding GPUs, running or not), running.", []string{LabelGangState}},
		{MetricControllerReserveIdle, Counter, "GPU-seconds a reservation's placeholder held idle for the gang at the head of the queue: its running allocations (one GPU each) times the time they ran.", nil},
		{MetricControllerQueueGPUs, Gauge, "Each queue's GPU-equivalents at the leader's last tick, by figure: used (held by its namespaces' pending and running allocations), nominal (its quota), borrowed (used beyond nominal), lent (of its nominal, lendable and unused).", []string{LabelQueue, LabelQueueFigure}},
		{MetricControllerQueueUsage, Gauge, "Each queue's decayed use in GPU-equivalent-seconds, halving every fair_share half_life: what its fair-share standing weighs, with what it holds.", []string{LabelQueue}},
		{MetricControllerQueueStanding, Gauge, "Each active queue's fair-share standing: its share of the active queues' charged use (decayed use plus what it holds over the decay's mean life) over its weighted share (below 1: less than its share); no series for a queue with nothing held or waiting.", []string{LabelQueue}},
		{MetricControllerQueueWaiting, Gauge, "Allocations of each queue's queued task groups at the leader's last tick.", []string{LabelQueue}},
		{MetricControllerQueueHeld, Gauge, "Held jobs waiting for the controller's admission at its last tick, by queue (\"\" for none) and the kind of their reason: quota, cohort, dependency, gang (does not fit whole), capacity, invalid, other.", []string{LabelQueue, LabelReason}},
		{MetricControllerMoveGPUSeconds, Counter, "GPU-seconds spent moving: for each moved allocation, the GPUs it held times the time from its stop to its job running again (counted when it runs again).", nil},
	}
}

func with(base []string, extra ...string) []string {
	return append(append([]string(nil), base...), extra...)
}

// DeviceMetrics lists every metric the device plugin exports.
func DeviceMetrics() []Metric {
	return []Metric{
		{MetricDeviceInfo, Gauge, "Always 1: a device Nomad is offered (whole GPU, MIG instance or MPS share) and what it is.",
			with(DeviceLabels, LabelDeviceName, LabelGPUUUID, LabelModel, LabelMIGProfile, LabelPCIBusID)},
		{MetricDeviceHealthy, Gauge, "1 when the device is healthy as Nomad sees it, 0 when an XID event or an NVML failure marked it unhealthy.", DeviceLabels},
		{MetricDeviceAllocated, Gauge, "1 when a running or pending allocation on this node holds the device, 0 when it is free; absent while the node's allocations cannot be read from Nomad.", DeviceLabels},
		{MetricDeviceAllocationInfo, Gauge, "Always 1: the task of an allocation that holds the device; joins device series to Nomad's allocation metrics.",
			[]string{LabelHost, LabelDeviceID, LabelNamespace, LabelJob, LabelTaskGroup, LabelAllocID, LabelTask}},
		{MetricDeviceAllocationsKnown, Gauge, "1 when the plugin read this node's allocations from the Nomad API, so nomad_gpu_device_allocated is known; 0 when it cannot.", []string{LabelHost}},
		{MetricDeviceUtilization, Gauge, "Share of time a kernel ran on the GPU (MIG: the instance's, where NVML reports it), in percent; for an MPS share, its task's utilization of the share's SMs as the gpu driver measures and publishes it (0 without a task), never the GPU's: no series where the driver does not measure the share's task.", DeviceLabels},
		{MetricDeviceMemUtilization, Gauge, "Share of time device memory was read or written, in percent; whole GPUs and MIG instances only (an MPS share's own is not measured).", DeviceLabels},
		{MetricDeviceMemoryUsed, Gauge, "GPU memory in use: the whole GPU's or MIG instance's; for an MPS share, what its task uses of the share.", DeviceLabels},
		{MetricDeviceMemoryTotal, Gauge, "GPU memory of the whole GPU or MIG instance; for an MPS share, its pinned memory limit.", DeviceLabels},
		{MetricDeviceTemperature, Gauge, "GPU temperature.", DeviceLabels},
		{MetricDevicePower, Gauge, "GPU power draw.", DeviceLabels},
		{MetricDeviceSMClock, Gauge, "Current SM clock.", DeviceLabels},
		{MetricDeviceMemClock, Gauge, "Current memory clock.", DeviceLabels},
		{MetricDeviceECCErrors, Counter, "Volatile ECC error count (since the NVIDIA driver loaded), corrected or uncorrected.", with(DeviceLabels, LabelErrorType)},
		{MetricDeviceMPSThreadPercent, Gauge, "The SM share of an MPS share (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE per share), in percent.", DeviceLabels},
		{MetricXIDErrors, Counter, "XID error events NVML reported since the plugin started, by the GPU- or MIG- UUID it named, including XIDs the health policy ignores.",
			[]string{LabelHost, LabelUUID, LabelXID}},
	}
}

// DriverMetrics lists every metric the gpu task driver exports. A task's
// series go when Nomad destroys the task, after the plugin's
// metrics.task_retention, so that the last scrape sees how it ended.
func DriverMetrics() []Metric {
	return []Metric{
		{MetricTaskGPUMemoryUsed, Gauge, "GPU memory the task's processes hold on a GPU or MIG instance, as the GPU-memory watchdog last measured it.", with(TaskLabels, LabelUUID)},
		{MetricTaskGPUMemoryLimit, Gauge, "The task's GPU memory limit on a GPU or MIG instance (its MPS shares' pinned memory, or the MIG instance's memory); absent for whole GPUs.", with(TaskLabels, LabelUUID)},
		{MetricTaskGPUUtilization, Gauge, "The task's utilization of its slice on a GPU or MIG instance, in percent of its slice: its processes' SM utilization (NVML per-process samples) over the slice's share of the SMs (MPS: its thread percentage; whole GPU, MIG instance: all), capped at 100; where NVML has no per-process samples, a whole GPU's or MIG instance's own utilization, and none for MPS shares.", with(TaskLabels, LabelUUID)},
		{MetricTaskCheckpointRequests, Counter, "Checkpoints the driver asked the task for (the checkpoint signal): on stop and on the checkpoint interval.", TaskLabels},
		{MetricTaskCheckpoints, Counter, "Checkpoints by result: committed, failed (refused or not written), timeout (not committed within commit_timeout of a stop).", with(TaskLabels, LabelResult)},
		{MetricTaskCheckpointDuration, Histogram, "Time the driver took to commit a checkpoint (manifest, sync, rename into a generation).", TaskLabels},
		{MetricTaskCheckpointReqDur, Histogram, "Time from the driver's checkpoint signal to the commit, for checkpoints the driver asked for.", TaskLabels},
		{MetricTaskCheckpointSize, Gauge, "Size of the task's last committed checkpoint.", TaskLabels},
		{MetricTaskCheckpointLastOK, Gauge, "When the task's last checkpoint was committed, in seconds since the epoch.", TaskLabels},
		{MetricTaskRestores, Counter, "Runs of the task that restored a committed checkpoint.", TaskLabels},
		{MetricTaskPreemptions, Counter, "Stops of the task because Nomad preempted its allocation.", TaskLabels},
		{MetricTaskEnforcementKills, Counter, "Kills of the task by the driver's enforcement, by reason (gpu_memory: over its GPU memory limit).", with(TaskLabels, LabelReason)},
	}
}

// StrategyMetrics lists every metric the gpu-queue strategy exports.
func StrategyMetrics() []Metric {
	return []Metric{
		{MetricStrategyCheckRuns, Counter, "Runs of a policy check by the gpu-queue strategy, by result: ok (it returned an action), refused (the check's strategy block or its pool's rules are refused: the check fails on every evaluation until the policy is fixed; the autoscaler's log names the key at error level), error (bad input: a negative count or a metric that is not a number).",
			with(CheckLabels, LabelResult)},
	}
}

// SeriesNames lists the names a query can use for ms: a histogram's
// <name>_bucket, <name>_sum and <name>_count, every other metric's name.
func SeriesNames(ms []Metric) []string {
	var out []string
	for _, m := range ms {
		if m.Type == Histogram {
			out = append(out, m.Name+"_bucket", m.Name+"_sum", m.Name+"_count")
			continue
		}
		out = append(out, m.Name)
	}
	return out
}
