// Package apm is the domain logic of nomad-gpu-apm, a nomad-autoscaler APM
// plugin that reads GPU queue depth, wait time, allocation and
// utilisation from Nomad, for GPU cluster and job scaling policies.
//
// It exists because the built-in nomad-apm knows CPU and memory only,
// fails on an empty pool and re-lists the cluster for every query. This
// plugin sees devices and queued work, answers 0 for an empty or missing
// pool so that a pool can scale from zero, and keeps the cluster state in
// a cache refreshed by blocking queries. With metrics_address set it also
// serves the cluster figures to Prometheus.
//
// Its configuration, query grammar, metrics and cost are described in
// docs/autoscaling.md; the cluster figures in docs/metrics.md.
package apm
