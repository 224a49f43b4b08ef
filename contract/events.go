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
