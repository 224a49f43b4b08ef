package driver

import (
	"os"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// stopTask is StopTask for a test that expects it to work: an error fails
// the test, which goes on (so its own cleanup still runs).
func stopTask(t testing.TB, d *Driver, id string, timeout time.Duration, signal string) {
	t.Helper()
	if err := d.StopTask(id, timeout, signal); err != nil {
		t.Errorf("StopTask %s: %v", id, err)
	}
}

// destroyTask is DestroyTask(id, true) for a test that expects it to work.
func destroyTask(t testing.TB, d *Driver, id string) {
	t.Helper()
	if err := d.DestroyTask(id, true); err != nil {
		t.Errorf("DestroyTask %s: %v", id, err)
	}
}

// reapOnCleanup makes sure nothing of a task outlives the test, passed or
// failed: when the test ends, a fresh plugin process destroys the task from
// its ID alone, as after a failed recovery (supervisor, task tree, cgroup,
// MPS references, and so an MPS daemon the task kept running). For a task
// the test destroyed already this finds nothing to do.
func (e *env) reapOnCleanup(id string) {
	cfg := *e.cfg
	e.t.Cleanup(func() {
		d := New(hclog.NewNullLogger())
		exe, err := os.Executable()
		if err != nil {
			e.t.Errorf("reaping task %s: %v", id, err)
			return
		}
		d.SetExecutable(exe)
		c := cfg
		if err := d.SetConfig(&c, nil); err != nil {
			e.t.Errorf("reaping task %s: %v", id, err)
			return
		}
		defer d.Shutdown()
		if err := d.DestroyTask(id, true); err != nil {
			e.t.Errorf("reaping task %s: %v", id, err)
		}
	})
}
