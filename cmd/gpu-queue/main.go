// Command gpu-queue is the nomad-autoscaler strategy plugin gpu-queue: GPU
// capacity that follows the queue (see package autoscaler/strategy/gpuqueue
// for what it decides and the policy to write). The agent starts it from
// plugin_dir for a `strategy` block whose driver is "gpu-queue".
package main

import (
	"fmt"
	"os"

	"github.com/nomad-gpu/nomad-gpu/autoscaler/strategy/gpuqueue"
	"github.com/nomad-gpu/nomad-gpu/wire/autoscaler"
	"github.com/nomad-gpu/nomad-gpu/wire/base"
)

const usage = `gpu-queue: nomad-autoscaler strategy plugin (GPU capacity that follows the queue).

The nomad-autoscaler agent starts this binary itself: copy it into the
agent's plugin_dir and add

  strategy "gpu-queue" {
    driver = "gpu-queue"
  }

then name it in a policy's checks: strategy "gpu-queue" { signal = ... }.
`

func main() {
	if os.Getenv(autoscaler.Handshake.MagicCookieKey) != autoscaler.Handshake.MagicCookieValue {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	logger := base.NewLogger(gpuqueue.PluginName)
	autoscaler.ServeStrategy(gpuqueue.PluginName, gpuqueue.New(logger), logger)
}
