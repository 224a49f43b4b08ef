// Command nomad-driver-gpu-supervisor is the per-task supervisor of the gpu
// task driver, as a small binary of its own: one runs for every task, so it
// links nothing but the supervisor (about 4 MiB resident instead of the
// plugin's 18). Installed next to nomad-driver-gpu, the driver uses it; without
// it the plugin binary supervises tasks itself.
package main

import (
	"fmt"
	"os"

	"github.com/nomad-gpu/nomad-gpu/driver/supervisor"
)

func main() {
	if code, ok := supervisor.Dispatch(os.Args); ok {
		os.Exit(code)
	}
	fmt.Fprintln(os.Stderr, "nomad-driver-gpu-supervisor is run by the nomad-driver-gpu task driver, not by hand")
	os.Exit(2)
}
