package gang

import (
	"cmp"
	"slices"
	"time"
)

// Reservations (docs/design/gangs.md): when the head of a pool's queue is a
// gang, or a job, that does not fit, the controller keeps for it the nodes
// expected to free soonest, so that a stream of small jobs does not take
// every GPU that frees first. These are the rules: which nodes, when the
// reservation is due, and what other work may still use the kept GPUs
// meanwhile (backfill that cannot delay it).

// NodeOutlook is what a reservation weighs of one node.
type NodeOutlook struct {
	ID string
	// GPUs are the whole GPUs the node offers; Free those free now.
	GPUs, Free int
	// Releases are its running allocations: the GPUs each holds and when
	// it is expected to end (the sizer's prediction; zero when unknown).
	Releases []Release
}

// Release is one running allocation's GPUs and its expected end.
type Release struct {
	GPUs int
	At   time.Time
}

// Reservation is the nodes kept for a gang, and when they are expected to
// have its members' GPUs free.
type Reservation struct {
	Nodes []string
	Due   time.Time
}

// readyAt is when n is expected to have per GPUs free, and whether that
// is known: the releases end in order of their expected ends, and one of
// unknown end makes every GPU behind it unknown.
func (n NodeOutlook) readyAt(per int, now time.Time) (time.Time, bool) {
	if n.GPUs < per {
		return time.Time{}, false
	}
	free, at := n.Free, now
	rel := slices.Clone(n.Releases)
	slices.SortStableFunc(rel, func(a, b Release) int {
		switch {
		case a.At.IsZero() != b.At.IsZero():
			if a.At.IsZero() {
				return 1
			}
			return -1
		}
		return a.At.Compare(b.At)
	})
	for _, r := range rel {
		if free >= per {
			break
		}
		if r.At.IsZero() {
			return time.Time{}, false
		}
		free, at = free+r.GPUs, maxTime(at, r.At)
	}
	return at, free >= per
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// Choose keeps, for a gang of members members of per whole GPUs each (one
// member a node), the members nodes expected to have per GPUs free
// soonest; ties go to the node with fewer GPUs free now (the tighter fit
// leaves more free GPUs to other work), then by ID. The reservation is due when the last of them is ready. ok is
// false when fewer than members nodes have a known time: a reservation
// whose due time is a guess would hold GPUs idle for nothing.
func Choose(nodes []NodeOutlook, members, per int, now time.Time) (Reservation, bool) {
	type ready struct {
		id   string
		at   time.Time
		free int // GPUs free now
	}
	var rs []ready
	for _, n := range nodes {
		if at, ok := n.readyAt(per, now); ok {
			rs = append(rs, ready{n.ID, at, n.Free})
		}
	}
	if members < 1 || len(rs) < members {
		return Reservation{}, false
	}
	slices.SortFunc(rs, func(a, b ready) int {
		return cmp.Or(a.at.Compare(b.at), cmp.Compare(a.free, b.free), cmp.Compare(a.id, b.id))
	})
	res := Reservation{}
	for _, r := range rs[:members] {
		res.Nodes = append(res.Nodes, r.id)
		res.Due = maxTime(res.Due, r.at)
	}
	slices.Sort(res.Nodes)
	return res, true
}

// Work is a queued allocation that could take a reserved node's free
// GPUs before the reservation is due.
type Work struct {
	// Runtime is its predicted runtime; Known false when there is none.
	Runtime time.Duration
	Known   bool
	// Movable: it checkpoints and opted in to being moved (job meta
	// nomad_gpu_movable), so it can be moved off, losing nothing, when
	// the reservation is due.
	Movable bool
}

// BackfillMargin is how many times its predicted run time backfilled
// work must be able to run before the reservation is due: a prediction
// is a median, and the reserved work waits for the last backfilled job.
const BackfillMargin = 1.5

// Backfill says whether w may take a reserved node's free GPUs at now:
// when it is predicted to end before the reservation is due, with margin
// to spare (a prediction is a median, and the gang waits for the last
// backfilled job), or when it can be moved off losing nothing. Work of
// unknown runtime that cannot be moved never backfills.
func Backfill(w Work, now, due time.Time, margin float64) bool {
	if w.Movable {
		return true
	}
	if !w.Known {
		return false
	}
	return now.Add(time.Duration(float64(w.Runtime) * margin)).Before(due)
}
