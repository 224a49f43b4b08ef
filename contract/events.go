package contract

// The details of the gpu driver's task events (Nomad keeps a driver's
// event annotations as the event's Details, beside its message), which
// readers match instead of the message's English. The GPU-memory
// watchdog's event carries all four.
const (
	EventDetailGPU      = "gpu"       // the GPU or MIG instance UUID
	EventDetailUsedMiB  = "used_mib"  // the task's GPU memory, MiB
	EventDetailLimitMiB = "limit_mib" // its limit, MiB
	EventDetailAction   = "action"    // EventActionKill or EventActionWarn
)

// What the GPU-memory watchdog did (EventDetailAction).
const (
	EventActionKill = "kill" // killed the task
	EventActionWarn = "warn" // only warned
)

// The gpu driver's checkpoint events carry what became of the checkpoint
// as EventDetailCheckpoint, and the stop or interval that asked for it as
// EventDetailTrigger ("stop", "interval").
const (
	EventDetailCheckpoint = "checkpoint"
	EventDetailTrigger    = "trigger"
	// EventDetailStep is the training step a committed checkpoint is of,
	// as its task named it in the commit marker; absent where it named
	// none. A gang restores the newest step every member committed.
	EventDetailStep = "step"
)

// What became of a checkpoint (EventDetailCheckpoint); CheckpointCommitted,
// CheckpointFailed and CheckpointTimeout (not committed within the stop's
// commit_timeout) are the metrics' words too.
const (
	CheckpointRequested  = "requested"   // the task was signalled
	CheckpointNotHandled = "not_handled" // not signalled: the signal would end it (no handler yet)
	CheckpointPending    = "pending"     // a stop found the task answering an earlier request
)
