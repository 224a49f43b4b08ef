package tracereplay

import (
	"strings"
	"testing"
)

// The driver's events, as the real run kept them in three incomplete
// records of a fraction-heavy run on an overloaded machine.
func TestIncompleteCause(t *testing.T) {
	for _, c := range []struct {
		name, events, want string
	}{
		{"stopped while starting", "Killing: Sent interrupt\nDriver: checkpoint not requested (stop): the task does not handle SIGUSR1 (yet)\nTerminated: Exit Code: 130, Signal: 2",
			"stopped before its task handled the checkpoint signal"},
		{"no commit in time", "Driver: checkpoint requested (stop): SIGUSR1, 10s to commit\nDriver: checkpoint not committed within 10s; stopping the task\nTerminated: Exit Code: 137, Signal: 9",
			"did not commit within its commit_timeout; the driver stopped it, so nothing since its last commit is kept; Nomad killed it at its kill_timeout"},
		{"committed, killed before logging", "Driver: checkpoint requested (stop): SIGUSR1, 10s to commit\nDriver: checkpoint committed: generation 1\nTerminated: Exit Code: 137, Signal: 9",
			"its checkpoint committed (the driver's event)"},
		{"nothing told", "Killing: Sent interrupt", "not told by the driver's events"},
	} {
		if got := (IncompleteRecord{Events: c.events}).Cause(); !strings.Contains(got, c.want) {
			t.Errorf("%s: %q, want %q in it", c.name, got, c.want)
		}
	}
}
