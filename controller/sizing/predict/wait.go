package predict

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/nomad-gpu/nomad-gpu/controller/sizing/history"
)

// Unit is a kind of slice capacity that asks are counted in: whole GPUs
// ("gpu"), MPS shares ("mps"), or MIG instances of one profile ("mig" and
// the profile). Profile is empty for the other kinds.
type Unit struct{ Kind, Profile string }

// UnitOf is the unit s is counted in; s.Count is how many.
func UnitOf(s history.Slice) Unit {
	if s.Kind == history.SliceMIG {
		return Unit{s.Kind, s.Profile}
	}
	return Unit{Kind: s.Kind}
}

// Capacity is a pool's free slices now, per unit: free whole GPUs, free
// MPS shares, free MIG instances per profile. It is deliberately flat: it
// does not know which node a slice is on, so an ask that fits the pool's
// free count is taken to fit, although the slices may be spread over nodes
// that each hold too few (the simulation is then early), and units do not
// convert into one another (a whole GPU is not re-partitioned into MIG
// instances or MPS shares).
type Capacity map[Unit]int

// QueuedTask is a task waiting for its slice.
type QueuedTask struct {
	// ID tells tasks queued at the same time with the same priority apart
	// (an allocation or evaluation ID); it orders them last.
	ID       string
	Key      history.Key
	Slice    history.Slice
	Priority int
	Created  time.Time
	// Runtime is the task's predicted run time once it starts (Runtime
	// with elapsed 0); used when it is ahead of the task whose wait is
	// predicted.
	Runtime Estimate
}

// RunningTask is a task holding its slice.
type RunningTask struct {
	Key   history.Key
	Slice history.Slice
	// Remaining is its predicted remaining run time (Runtime with the
	// time it has run).
	Remaining Estimate
}

// Before says whether a is ahead of b in the queue: higher priority first,
// then older (earlier Created), then by ID.
func Before(a, b QueuedTask) bool {
	return compareQueued(a, b) < 0
}

func compareQueued(a, b QueuedTask) int {
	return cmp.Or(
		cmp.Compare(b.Priority, a.Priority),
		a.Created.Compare(b.Created),
		cmp.Compare(a.ID, b.ID),
	)
}

// Ahead is the tasks of queue that are ahead of q (Before), in queue
// order; q itself, by ID, is left out.
func Ahead(q QueuedTask, queue []QueuedTask) []QueuedTask {
	var out []QueuedTask
	for _, t := range queue {
		if t.ID != q.ID && Before(t, q) {
			out = append(out, t)
		}
	}
	slices.SortStableFunc(out, compareQueued)
	return out
}

// Wait predicts how long queued will wait, from now, until its slice is
// placed, by list scheduling the pool forward from now:
//
//   - free is the pool's free capacity now, per Unit; asks are counted in
//     the same units (Slice.Count of UnitOf(Slice)).
//   - Each running task frees its slice at now + its Remaining; one whose
//     Remaining is not Known holds its slice for good.
//   - The tasks ahead (Ahead, put in queue order here whatever the order
//     passed) and then queued are scheduled greedily: at now and at each
//     time slices free, each task still waiting, in queue order, takes its
//     slice if it fits in what is free. A task that does not fit does not
//     stop a later one that does, as with Nomad, which places each
//     evaluation that fits. A task ahead that starts frees its slice after
//     its Runtime; one whose Runtime is not Known holds it for good.
//   - The wait is the first time queued is placed: 0 when it fits now.
//
// Tasks that arrive later, even at a higher priority, and preemption are
// not foreseen; each is a reason the real wait can be longer.
//
// The Estimate is not Known when queued never fits: its ask is larger than
// the pool's whole capacity of its unit (free plus what the running tasks
// hold), or the slices it needs stay with tasks of unknown run time.
func Wait(queued QueuedTask, running []RunningTask, ahead []QueuedTask, free Capacity) Estimate {
	avail := map[Unit]int{}
	total := map[Unit]int{}
	for u, n := range free {
		avail[u] += n
		total[u] += n
	}
	type release struct {
		at    float64
		unit  Unit
		count int
	}
	var releases []release
	held := 0 // tasks holding slices for good
	for _, r := range running {
		u := UnitOf(r.Slice)
		total[u] += r.Slice.Count
		if !r.Remaining.Known {
			held++
			continue
		}
		releases = append(releases, release{max(r.Remaining.Seconds, 0), u, r.Slice.Count})
	}
	qu := UnitOf(queued.Slice)
	if queued.Slice.Count > total[qu] {
		return unknown(fmt.Sprintf("ask of %s exceeds the pool's %d", SliceString(queued.Slice), total[qu]))
	}

	waiting := slices.Clone(ahead)
	slices.SortStableFunc(waiting, compareQueued)
	waiting = append(waiting, queued)
	basis := fmt.Sprintf("list schedule of %d running, %d ahead", len(running), len(ahead))

	now := 0.0
	for {
		// Place, in queue order, every waiting task that fits.
		kept := waiting[:0]
		for i, t := range waiting {
			u := UnitOf(t.Slice)
			if t.Slice.Count > avail[u] {
				kept = append(kept, t)
				continue
			}
			if i == len(waiting)-1 { // queued is last
				if now == 0 {
					return Estimate{Seconds: 0, Basis: "fits now", Known: true}
				}
				return Estimate{Seconds: now, Basis: basis, Known: true}
			}
			avail[u] -= t.Slice.Count
			if !t.Runtime.Known {
				held++
				continue
			}
			releases = append(releases, release{now + max(t.Runtime.Seconds, 0), u, t.Slice.Count})
		}
		waiting = kept

		// Advance to the next time slices free.
		if len(releases) == 0 {
			return unknown(fmt.Sprintf("never fits: %d tasks of unknown run time hold slices", held))
		}
		next := releases[0].at
		for _, r := range releases {
			next = min(next, r.at)
		}
		rest := releases[:0]
		for _, r := range releases {
			if r.at <= next {
				avail[r.unit] += r.count
			} else {
				rest = append(rest, r)
			}
		}
		releases = rest
		now = next
	}
}
