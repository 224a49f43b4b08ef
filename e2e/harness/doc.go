// Package harness is the simulated GPU cluster that the e2e suite and the
// trace replay's real engine (bench/tracereplay/realengine) both run on,
// built on package cluster's agents:
//
//   - GPUNode: the config of a sim GPU node running both of our plugins
//     (the device plugin's sim GPUs, their MIG and MPS layout, the gpu
//     driver's checkpoint root and Nomad address);
//   - SimPool: a pool of such nodes that a scaling target grows and
//     shrinks over HTTP, as a cloud node group would (the test's side of
//     the autoscaler target plugin e2e/autoscaletarget), and the
//     autoscaler's plugin dir, agent config and gpu-queue and
//     target-value policies that drive it;
//   - the trace replay's task (ReplayTask), which the checkpoint stress
//     test runs too, and the reading of what it logs (LogValue,
//     IncompleteEvidence).
//
// Package cluster starts agents and processes any test of this module
// may need (Nomad, nomad-autoscaler, Prometheus, a controller replica)
// and reads what they serve; this package is what a GPU test puts on
// them. Its helpers take a testing.TB and fail or skip the test, as
// cluster's do.
package harness
