package tracereplay

import (
	"strings"
	"testing"

	"github.com/nomad-gpu/nomad-gpu/contract"
)

// The driver's checkpoint outcomes, as a real run kept them in three
// incomplete records of a fraction-heavy run on an overloaded machine.
func TestIncompleteCause(t *testing.T) {
	for _, c := range []struct {
		name     string
		outcomes []string
		killedBy int
		want     string
	}{
		{"stopped while starting", []string{contract.CheckpointNotHandled}, 0, "stopped before its task handled the checkpoint signal"},
		{"no commit in time", []string{contract.CheckpointRequested, contract.CheckpointTimeout}, 9,
			"did not commit within its commit_timeout; the driver stopped it, so nothing since its last commit is kept; Nomad killed it at its kill_timeout"},
		{"committed, killed before logging", []string{contract.CheckpointRequested, contract.CheckpointCommitted}, 9, "its checkpoint committed (the driver's event)"},
		{"nothing told", nil, 0, "not told by the driver's events"},
	} {
		if got := (IncompleteRecord{Checkpoint: c.outcomes, KilledBy: c.killedBy}).Cause(); !strings.Contains(got, c.want) {
			t.Errorf("%s: %q, want %q in it", c.name, got, c.want)
		}
	}
}
