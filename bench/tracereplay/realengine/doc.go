// Package realengine is the trace replay's real engine, apart from the
// product's e2e suite: TestTraceReplay replays a sampled trace on fresh
// real Nomad clusters of simulated GPU nodes, one per configuration, then
// the model (bench/tracereplay/model) on the same configurations with
// the latencies the real run measured, and writes the report and the
// run's record (real-run.json.gz) to $BENCH_TRACE_DIR. `make bench-trace`
// runs it; without BENCH_TRACE_DIR it skips. It needs root, nomad,
// nomad-autoscaler and `make build`'s binaries, as the e2e suite does,
// and runs on the same simulated cluster (e2e/harness, e2e/cluster).
//
// The engine is a test, not a binary: it drives real agents through the
// e2e helpers, which take a testing.TB. bench-trace (cmd/bench-trace)
// runs the model alone, and reads the record a real run left with -real.
package realengine
