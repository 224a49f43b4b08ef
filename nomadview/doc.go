// Package nomadview is the one read model of the Nomad cluster that
// nomad-gpu's cluster-wide parts share: the APM (nomad-gpu-apm), `nomad-gpu
// top` and the controller.
//
// It exists so that they agree: each reading Nomad on its own, with rules
// of its own, `top` could show a queue the autoscaler calls empty.
//
// Here the cluster is read once, by blocking-query watches on nodes, node
// pools, blocked evaluations and jobs, and by Nomad's event stream for the
// allocations, which change too often to list each time (Watcher,
// stream.go), into an immutable Snapshot, and the rules about it are
// written once, as methods of the snapshot:
//
//   - QueuedGroups and PendingAllocs: the GPU work that waits (one rule for
//     a job summary against a blocked evaluation, see queuedCount);
//   - HeldSlices: the device instances each node's allocations hold;
//   - FreeSlices: the free whole GPUs, MIG instances by profile and MPS
//     shares of each node pool;
//   - DeviceAsk.GPUEquivalents and IsGPUAsk: what an ask weighs and
//     whether it asks for our devices at all.
//
// A caller takes a snapshot with Watcher.Latest or subscribes with
// Watcher.Watch; either way the snapshot it holds never changes: a change
// in the cluster makes a new one. The API objects a snapshot points to are
// decoded afresh by every list and never mutated, by this package or its
// callers (they are shared between snapshots).
//
// The package is domain over github.com/hashicorp/nomad/api; it knows no
// wire or protobuf types.
package nomadview
