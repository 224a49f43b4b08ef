// Package topview is the cluster's GPUs as one view, read from the Nomad
// API: per node and GPU its slices, the allocations holding them, device
// stats and health, and the queue of GPU work that waits, with how long
// and why. `nomad-gpu top` draws it: what nvidia-smi is for one machine,
// this is for the cluster.
//
// Build turns API objects into a View and is pure (tests feed it fixtures);
// Source reads them through a nomadview.Watcher; WriteTable draws a View
// as text, and the View's JSON is `top -json`. Waiting is a View's
// waiting work job by job, what `nomad-gpu queue` shows (WriteWaitTable).
//
// What the view shows, where each figure comes from and the JSON schema
// are described in docs/top.md.
package topview
