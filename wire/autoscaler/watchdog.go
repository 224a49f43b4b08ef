package autoscaler

import (
	"os"
	"time"

	"github.com/hashicorp/go-hclog"
)

// exit is os.Exit; a variable so the package's tests see it called.
var exit = os.Exit

// parentPoll is how often watchParent looks at the parent.
const parentPoll = time.Second

// watchParent exits the process once its parent, the agent, is gone. The
// agent never reattaches to a plugin: a plugin left behind by a killed
// agent only holds its resources (and may act on stale decisions). A
// process whose parent dies is handed to init or a subreaper, so its
// parent pid changes; a plugin started by pid 1 itself has nothing to
// watch.
func watchParent(logger hclog.Logger) {
	ppid := os.Getppid()
	if ppid <= 1 {
		return
	}
	go func() {
		for range time.Tick(parentPoll) {
			if now := os.Getppid(); now != ppid {
				logger.Warn("agent process is gone, exiting", "agent_pid", ppid, "parent_pid", now)
				exit(0)
				return
			}
		}
	}()
}
