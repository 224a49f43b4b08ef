// Package controller is the cluster brain of nomad-gpu: the one process
// that changes jobs. It runs as replicas of a Nomad service job; one of
// them, the leader, holds a Nomad variable lock (Leader) and is the only
// one that acts. Every module reads the same picture of the cluster and
// writes through the one priority ledger (Ledger), so no two code paths
// ever race on a job's priority.
//
// Why one process rather than the node drivers: a cluster-wide decision
// made on every GPU node would need a job-submit token on every node, have
// N nodes racing on one check-and-set, and let a compromised node rewrite
// jobs across the cluster. The driver only reads its own allocation, so
// its token needs read access only.
//
// Preemption protection (Protector) keeps a just-preempted job from being
// preempted again at once by work of the class that preempted it. It
// never raises a job while it waits (a waiting job at a raised priority
// preempts its own peers, which are raised in turn: a preemption storm).
// It raises the job in place once its replacement runs: a running
// allocation preempts nobody, so the raise only shields it, for the
// cooldown. If the job is preempted anyway (by work at least 10 above
// the raise), the raise is dropped at once, before its replacement waits.
//
// Deadlines (Deadliner) raise a queued job that would miss its meta
// nomad_gpu_deadline a tier, as a ledger raise keyed "deadline", ended
// when the job starts; the rule is the sizing package's. A deadline raise
// and a protection on one job compose: the ledger gives the higher.
//
// Right-sizing (Resizer) runs the sizing package's round once an
// interval and registers its resizes, guarded by the job's modify index.
// A resize changes a device request, never a priority, so it does not go
// through the ledger. Its history is Prometheus (no state: any replica
// can lead) or a bbolt file that only the leader opens while it leads
// (bbolt locks it; replicas on different nodes need a shared volume).
//
// Preview runs the deadline and sizing modules once on a copy of the
// ledger and writes nothing: `nomad-gpu sizer -dry-run`.
package controller
