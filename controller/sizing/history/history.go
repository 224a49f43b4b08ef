package history

import (
	"context"
	"time"
)

// Slice kinds; they match contract.SliceGPU, SliceMIG and SliceMPS.
const (
	SliceGPU = "gpu"
	SliceMIG = "mig"
	SliceMPS = "mps"
)

// Key names a task: the unit whose history is kept and sized.
type Key struct{ Namespace, Job, Group, Task string }

// String returns "namespace/job/group/task".
func (k Key) String() string {
	return k.Namespace + "/" + k.Job + "/" + k.Group + "/" + k.Task
}

// Slice is the GPU resource an allocation of a task holds.
type Slice struct {
	Kind    string // SliceGPU, SliceMIG or SliceMPS
	Count   int    // GPUs or MPS shares; MIG instances
	Profile string // MIG profile, e.g. "1g.10gb"; empty otherwise
}

// Sample is one allocation's use of its slice at one time.
type Sample struct {
	Key           Key
	AllocID       string
	Time          time.Time
	Slice         Slice
	UtilPct       float64 // of its slice, 0..100
	MemBytes      uint64  // GPU memory used, summed over its devices
	MemLimitBytes uint64  // GPU memory it is limited to; 0 when unknown
}

// Outcome is how an allocation's run of a task ended, or OutcomeRunning.
type Outcome string

// Outcomes.
const (
	OutcomeRunning   Outcome = "running"
	OutcomeComplete  Outcome = "complete"
	OutcomeFailed    Outcome = "failed"
	OutcomeTimeout   Outcome = "timeout"
	OutcomeOOM       Outcome = "oom"
	OutcomeKilled    Outcome = "killed" // by GPU-memory enforcement
	OutcomePreempted Outcome = "preempted"
	OutcomeLost      Outcome = "lost"
	// OutcomeStopped: Nomad killed the task before it ended by itself (an
	// allocation stopped, moved, resized or drained, its job stopped):
	// its run time says nothing of how long the work runs.
	OutcomeStopped Outcome = "stopped"
)

// Run is one allocation's run of a task.
type Run struct {
	Key     Key
	AllocID string
	// Name is the allocation's name, "job.group[index]": a stopped,
	// preempted or lost allocation's replacement has the same, so the
	// runs of one submission with one Name are one piece of work.
	Name     string
	Slice    Slice
	Pool     string
	Priority int
	// Submitted is when the job version the allocation runs was
	// submitted (zero when not known): the demand's arrival, which
	// Created (its placement) is not where work queued.
	Submitted time.Time
	// Created, Started and Finished are zero when not (yet) reached.
	Created, Started, Finished time.Time
	Outcome                    Outcome
}

// Source is what the sizer reads.
type Source interface {
	// Samples returns k's samples with since <= Time < until (no upper
	// bound when until is zero), ordered by Time, then AllocID.
	Samples(ctx context.Context, k Key, since, until time.Time) ([]Sample, error)
	RunSource
}

// RunSource reads run records. A run is returned when it had not finished
// before since (it is unfinished, or Finished >= since).
type RunSource interface {
	// Runs returns k's runs, ordered by Created, then AllocID.
	Runs(ctx context.Context, k Key, since time.Time) ([]Run, error)
	// AllRuns returns every task's runs, ordered by Created, then AllocID:
	// the pool-wide fallback for prediction.
	AllRuns(ctx context.Context, since time.Time) ([]Run, error)
}

// Recorder is what the sizer writes.
type Recorder interface {
	AddSamples(ctx context.Context, samples []Sample) error
	// PutRun inserts or replaces the run with r.AllocID.
	PutRun(ctx context.Context, r Run) error
}
