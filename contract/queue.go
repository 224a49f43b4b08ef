package contract

// Team queues (docs/design/queues.md): what a jobspec says to the
// controller's queues.
const (
	// MetaAfter, job meta, "<job>[,<job>…]" (a job of another namespace
	// as "<namespace>/<job>"): the job is held until each named job's
	// latest run completed successfully (Slurm's afterok).
	MetaAfter = "nomad_gpu_after"
)
