package topview

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/nomadview"
)

// buildQueue lists the GPU work that waits: unplaced allocations of blocked
// evaluations and pending allocations holding GPUs (the snapshot's rules),
// longest wait first.
func buildQueue(in *Input) []QueueEntry {
	out := []QueueEntry{}
	for _, g := range in.QueuedGroups() {
		if !in.Filter.matchPool(g.Pool) {
			continue
		}
		reason := FailureReason(g.Metric, g.QuotaLimitReached)
		if g.Gang {
			reason = fmt.Sprintf("gang: its %d members wait to be admitted all at once (CONTROLLER says why)", g.Count)
		}
		never := in.NeverFits(g)
		if never != "" {
			// First: Nomad's own words say only that nodes were
			// filtered or exhausted, as if waiting would help.
			reason = never + "; " + reason
		}
		out = append(out, QueueEntry{
			Job: g.JobID, Namespace: g.Namespace, Group: g.Group, Pool: g.Pool, State: StateBlocked,
			Devices: deviceAsks(g.Asks), Count: g.Count, Since: g.Since.UTC(), WaitingSeconds: waitSeconds(in.Now, g.Since),
			Reason: reason, Gang: g.Gang, NeverFits: never != "",
		})
	}
	for _, p := range in.PendingAllocs() {
		if e, ok := pendingEntry(in, p); ok {
			out = append(out, e)
		}
	}
	slices.SortStableFunc(out, func(a, b QueueEntry) int {
		return cmp.Or(-cmp.Compare(a.WaitingSeconds, b.WaitingSeconds),
			cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Job, b.Job), cmp.Compare(a.Group, b.Group),
			cmp.Compare(a.State, b.State))
	})
	return out
}

// pendingEntry is the queue entry of a pending allocation, false when the
// filter drops it.
func pendingEntry(in *Input, p nomadview.PendingAlloc) (QueueEntry, bool) {
	a := p.Alloc
	name, pool := a.NodeName, ""
	if n := p.Node; n != nil {
		name, pool = n.Name, n.NodePool
		if len(in.Filter.Nodes) > 0 && !in.Filter.matchNode(n) {
			return QueueEntry{}, false
		}
	} else if len(in.Filter.Nodes) > 0 {
		return QueueEntry{}, false
	}
	if !in.Filter.matchPool(pool) {
		return QueueEntry{}, false
	}
	if name == "" {
		name = shortID(a.NodeID)
	}
	reason := "placed on " + name + ", not running yet"
	if a.ClientDescription != "" {
		reason += ": " + a.ClientDescription
	}
	since := time.Unix(0, a.CreateTime)
	return QueueEntry{
		Job: a.JobID, Namespace: a.Namespace, Group: a.TaskGroup, Pool: pool, State: StatePending,
		Devices: deviceAsks(p.Held), Count: 1, Since: since.UTC(), WaitingSeconds: waitSeconds(in.Now, since),
		Reason: reason, Node: name,
	}, true
}

// deviceAsks are asks as the view names them.
func deviceAsks(asks []nomadview.DeviceAsk) []DeviceAsk {
	out := make([]DeviceAsk, len(asks))
	for i, a := range asks {
		out[i] = DeviceAsk{Name: a.Device.String(), Count: a.Count}
	}
	return out
}

func waitSeconds(now, since time.Time) int64 {
	if since.IsZero() || since.Unix() <= 0 || now.Before(since) {
		return 0
	}
	return int64(now.Sub(since) / time.Second)
}

// FailureReason sums up why the scheduler could not place a task group, in
// the words of `nomad job status`: quotas, nodes filtered by constraint or
// class, resources exhausted.
func FailureReason(m *api.AllocationMetric, quotaReached string) string {
	var parts []string
	if quotaReached != "" {
		parts = append(parts, fmt.Sprintf("quota %q reached", quotaReached))
	}
	if m == nil {
		if len(parts) == 0 {
			return "blocked"
		}
		return strings.Join(parts, "; ")
	}
	if m.NodesEvaluated == 0 {
		s := "no nodes were eligible for evaluation"
		if m.NodePool != "" {
			s += " in node pool " + m.NodePool
		}
		parts = append(parts, s)
	}
	for _, k := range slices.Sorted(maps.Keys(m.ClassFiltered)) {
		parts = append(parts, fmt.Sprintf("class %q filtered %s", k, nodes(m.ClassFiltered[k])))
	}
	for _, k := range slices.Sorted(maps.Keys(m.ConstraintFiltered)) {
		parts = append(parts, fmt.Sprintf("constraint %q filtered %s", k, nodes(m.ConstraintFiltered[k])))
	}
	if m.NodesExhausted > 0 {
		if len(m.DimensionExhausted) == 0 {
			parts = append(parts, "resources exhausted on "+nodes(m.NodesExhausted))
		}
		for _, k := range slices.Sorted(maps.Keys(m.DimensionExhausted)) {
			parts = append(parts, fmt.Sprintf("%s exhausted on %s", k, nodes(m.DimensionExhausted[k])))
		}
	}
	if len(m.QuotaExhausted) > 0 {
		parts = append(parts, "quota exhausted: "+strings.Join(m.QuotaExhausted, ", "))
	}
	if len(parts) == 0 {
		return "blocked"
	}
	return strings.Join(parts, "; ")
}

func nodes(n int) string {
	if n == 1 {
		return "1 node"
	}
	return fmt.Sprintf("%d nodes", n)
}

func shortID(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}
