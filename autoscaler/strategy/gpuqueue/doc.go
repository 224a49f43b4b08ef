// Package gpuqueue is the nomad-autoscaler strategy plugin gpu-queue: GPU
// capacity that follows the queue. From the current count and its checks'
// metrics it returns an absolute count, with a reason a person can read in
// the agent's log.
//
// It exists because nomad-autoscaler's own strategies scale a count by a
// ratio, so a pool at zero never grows. This one scales out when queued
// work reaches an activation level or has waited too long, straight to
// the capacity that places the queue, and scales in only after the queue
// has been empty and utilisation low for a while, so the count does not
// flap. Nodes the controller emptied for removal (the removable signal)
// go at once, unless the pool scales out.
//
// Its keys, rules and metrics are described in docs/autoscaling.md (The
// strategy gpu-queue) and docs/metrics.md (Check runs).
package gpuqueue
