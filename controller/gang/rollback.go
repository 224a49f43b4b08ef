package gang

import (
	"fmt"
	"time"
)

// Member is what the controller knows of one member it wanted placed
// when it admitted the gang.
type Member struct {
	// Name is its allocation's name (job.group[i]), or the group and
	// index it is wanted as when it has no allocation.
	Name string
	// Placed: an allocation of it is on a node, holding its GPUs.
	Placed bool
	// Running: its tasks run.
	Running bool
	// Done: it completed successfully, so it neither waits nor holds.
	Done bool
	// Ended says why its allocation of this run ended before it was done
	// ("failed", "lost", "preempted", "drained"); "" while it runs or
	// waits.
	Ended string
}

// Rollback says whether an admitted gang must be rolled back (every group
// scaled to 0, its allocations stopped) and why. At once when a member's
// allocation ended (it failed, was lost, preempted or drained): the gang's
// run is over, its other members would hang in their collective calls,
// and it is admitted again as a unit (restart is true). Otherwise once
// bound has passed since admittedAt, when a member is not running while
// another holds GPUs (placed or running) that wait for it. Never before
// the bound (members take a while to start), never when no other member
// holds GPUs (nothing is held idle: the gang waits as Nomad's blocked
// evaluation does), never for a zero admittedAt (not admitted).
func Rollback(members []Member, admittedAt, now time.Time, bound time.Duration) (back, restart bool, reason string) {
	if admittedAt.IsZero() {
		return false, false, ""
	}
	for _, m := range members {
		if m.Ended != "" && !m.Done {
			return true, true, fmt.Sprintf("member %s %s; the gang stops as one (its members checkpoint) and is admitted again", m.Name, m.Ended)
		}
	}
	if now.Sub(admittedAt) < bound {
		return false, false, ""
	}
	var waiting, holding []int
	for i, m := range members {
		if m.Done {
			continue
		}
		if !m.Running {
			waiting = append(waiting, i)
		}
		if m.Placed || m.Running {
			holding = append(holding, i)
		}
	}
	for _, w := range waiting {
		for _, h := range holding {
			if h != w {
				return true, false, fmt.Sprintf("%d of %d members not running %s after admission (%s) while %s holds GPUs",
					len(waiting), len(members), bound, members[w].Name, members[h].Name)
			}
		}
	}
	return false, false, ""
}
