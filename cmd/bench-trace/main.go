// Command bench-trace replays a GPU job trace on the cluster model and
// writes its report (docs/trace-replay.md). It is the benchmark's own
// binary, apart from the product's: nomad-gpu links neither the trace
// nor the plotting library.
package main

import "os"

func main() { os.Exit(runBenchTrace(os.Args[1:], os.Stdout, os.Stderr)) }
