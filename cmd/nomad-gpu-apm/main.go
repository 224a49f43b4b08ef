// Command nomad-gpu-apm is the nomad-autoscaler APM plugin nomad-gpu-apm:
// GPU queue depth, wait time, allocation, utilisation and nodes needed,
// read from Nomad, and with metrics_address the cluster figures as
// Prometheus metrics (see package autoscaler/apm for the query language,
// the metrics and the config). The agent starts it from plugin_dir for an
// `apm` block whose driver is "nomad-gpu-apm".
package main

import (
	"fmt"
	"os"

	"github.com/nomad-gpu/nomad-gpu/autoscaler/apm"
	"github.com/nomad-gpu/nomad-gpu/wire/autoscaler"
	"github.com/nomad-gpu/nomad-gpu/wire/base"
)

const usage = `nomad-gpu-apm: nomad-autoscaler APM plugin (GPU queue, wait, allocation, utilisation, nodes needed).

The nomad-autoscaler agent starts this binary itself: copy it into the
agent's plugin_dir and add

  apm "nomad-gpu" {
    driver = "nomad-gpu-apm"
  }

then name it in a policy's checks: source = "nomad-gpu",
query = "gpus_queued{node_pool=gpu}" (or allocs_queued, wait_max_seconds,
wait_mean_seconds, gpu_alloc_pct, gpu_util_pct, nodes_needed).

With config = { metrics_address = "127.0.0.1:9403" } it also serves the
cluster figures (capacity, fragmentation, load, queue, task wait, run time
and failure ratio) as Prometheus metrics at /metrics.
`

func main() {
	if os.Getenv(autoscaler.Handshake.MagicCookieKey) != autoscaler.Handshake.MagicCookieValue {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	logger := base.NewLogger(apm.PluginName)
	autoscaler.ServeAPM(apm.PluginName, apm.New(logger), logger)
}
