// Package history stores and reads the utilisation history that the
// nomad-gpu-apm sizer uses to right-size GPU tasks.
//
// Two kinds of record are kept, both per task, identified by a Key
// (namespace, job, task group, task):
//
//   - Samples: every sample interval, one per running allocation of the
//     task: the slice it holds (whole GPUs, MIG instances or MPS shares), its
//     utilisation of that slice in percent, and the GPU memory it uses and
//     is limited to.
//   - Runs: one per allocation, upserted by allocation ID as it moves from
//     created to started to finished, with its outcome (complete, failed,
//     timeout, oom, killed by GPU-memory enforcement, preempted, lost).
//
// Retention and bounds: samples and finished runs older than
// Options.Retention (default 7 days) are pruned, cheaply, from AddSamples
// at most every Options.PruneInterval, and on Open. A run that has not
// finished is kept whatever its age, because it is current. Each task keeps
// at most Options.MaxSamplesPerKey samples (default 20000, the oldest
// dropped first), and the store at most Options.MaxRuns runs (default
// 100000, the earliest created dropped first), so the file stays bounded
// however many tasks come and go.
//
// Store keeps these in a single bbolt file. bbolt is what Nomad itself uses
// for its client and server state; it is one file with no server process,
// its transactions are crash-safe (a sizer killed mid-write leaves the last
// committed state), and its sorted keys make time-range scans cheap: each
// task has its own bucket of samples keyed by big-endian Unix nanoseconds
// and allocation ID. The file holds a format version in a meta bucket and
// a build refuses a file written by a newer format. Only one process may
// hold the file; a second gets an error saying it is in use, and by whom,
// after Options.OpenTimeout rather than hanging.
//
// Prometheus reads samples from a Prometheus server instead, from the task
// metrics the nomad-gpu-apm plugin exports, and takes run records from a
// Store, since Prometheus has none.
package history
