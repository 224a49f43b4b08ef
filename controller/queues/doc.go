// Package queues is the domain of team queues (docs/design/queues.md):
// the controller's queue file, the quota arithmetic of queues lending to
// and borrowing from each other in cohorts (Kueue's), the decayed use
// each queue has had (Slurm's fair-share usage, over a half-life), and
// the one rule that orders the cluster's waiting work. It reads no
// Nomad API: the controller gives it each queue's use and the waiting
// jobs, and acts on its answers, so every rule is a pure function a test
// can compute by hand.
package queues
