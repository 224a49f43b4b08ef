package contract

// The checkpoint protocol's environment, as a task sees it. These names are
// a contract with every checkpointing task: never change one.
const (
	// EnvCheckpointDir is where the task writes its next checkpoint.
	EnvCheckpointDir = "NOMAD_GPU_CHECKPOINT_DIR"
	// EnvCheckpointCommit is the file the task creates once the last byte
	// of a checkpoint is written and closed: the commit. Empty, or naming
	// the training step the checkpoint is of (written aside and renamed
	// into place, so that it is never read half written); a gang's
	// members restore the newest step all of them committed.
	EnvCheckpointCommit = "NOMAD_GPU_CHECKPOINT_COMMIT"
	// EnvCheckpointSignal names the signal that asks for a checkpoint.
	EnvCheckpointSignal = "NOMAD_GPU_CHECKPOINT_SIGNAL"
	// EnvRestoreDir is the newest committed checkpoint, read-only; unset
	// when there is none.
	EnvRestoreDir = "NOMAD_GPU_RESTORE_DIR"
	// EnvRestoreGeneration is that checkpoint's generation number.
	EnvRestoreGeneration = "NOMAD_GPU_RESTORE_GENERATION"
	// EnvResumeCount is how many times this task has been resumed from a
	// checkpoint, this run included.
	EnvResumeCount = "NOMAD_GPU_RESUME_COUNT"
)
