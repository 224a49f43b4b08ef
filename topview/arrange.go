package topview

import (
	"cmp"
	"slices"
	"strings"
)

// SortKey orders the rows of a view (Arrange).
type SortKey string

const (
	// SortNode is Build's order: nodes by name, GPUs by PCI bus ID, tasks
	// by GPU, the queue by time waited, longest first.
	SortNode SortKey = "node"
	// SortUtil puts the busiest first: nodes by their busiest GPU, GPUs by
	// utilisation, tasks by their GPU's.
	SortUtil SortKey = "util"
	// SortMemory puts the most memory used first: nodes by their GPUs'
	// sum, GPUs and tasks by their own.
	SortMemory SortKey = "memory"
	// SortWait puts what ends or starts soonest first: tasks by predicted
	// time left, the queue by predicted wait.
	SortWait SortKey = "wait"
)

// Arrange is v with its rows ordered by key, unknown figures last and
// ties in Build's order, and cut to what filter matches (case aside): a
// node whose name holds it whole; of other nodes the GPUs holding a task
// whose job's name holds it; queue entries whose job or node does. An
// empty filter keeps everything. v is not changed.
func Arrange(v *View, key SortKey, filter string) *View {
	out := *v
	out.Nodes = filterNodes(v.Nodes, filter)
	out.Queue = slices.DeleteFunc(slices.Clone(v.Queue), func(e QueueEntry) bool {
		return !matches(filter, e.Job) && !matches(filter, e.Node)
	})
	for i := range out.Nodes {
		sortGPUs(out.Nodes[i].GPUs, key)
	}
	switch key {
	case SortUtil:
		slices.SortStableFunc(out.Nodes, func(a, b Node) int { return higherFirst(busiest(a), busiest(b)) })
	case SortMemory:
		slices.SortStableFunc(out.Nodes, func(a, b Node) int { return higherFirst(memoryUsed(a), memoryUsed(b)) })
	case SortWait:
		slices.SortStableFunc(out.Queue, func(a, b QueueEntry) int {
			return lowerFirst(a.PredictedWaitSeconds, b.PredictedWaitSeconds)
		})
	}
	return &out
}

// matches reports whether s holds filter, case aside.
func matches(filter, s string) bool {
	return strings.Contains(strings.ToLower(s), strings.ToLower(filter))
}

// filterNodes copies the nodes and GPUs that filter keeps.
func filterNodes(nodes []Node, filter string) []Node {
	out := make([]Node, 0, len(nodes))
	for _, n := range nodes {
		if filter == "" || matches(filter, n.Name) {
			n.GPUs = slices.Clone(n.GPUs)
			out = append(out, n)
			continue
		}
		n.GPUs = slices.DeleteFunc(slices.Clone(n.GPUs), func(g GPU) bool {
			return !slices.ContainsFunc(g.Allocations, func(a AllocRef) bool { return matches(filter, a.Job) })
		})
		if len(n.GPUs) > 0 {
			out = append(out, n)
		}
	}
	return out
}

func sortGPUs(gpus []GPU, key SortKey) {
	switch key {
	case SortUtil:
		slices.SortStableFunc(gpus, func(a, b GPU) int { return higherFirst(a.UtilizationPct, b.UtilizationPct) })
	case SortMemory:
		slices.SortStableFunc(gpus, func(a, b GPU) int { return higherFirst(a.MemoryUsedMiB, b.MemoryUsedMiB) })
	}
}

// busiest is the highest utilisation of n's GPUs, nil when none is known.
func busiest(n Node) *float64 {
	var out *float64
	for _, g := range n.GPUs {
		if g.UtilizationPct != nil && (out == nil || *g.UtilizationPct > *out) {
			out = g.UtilizationPct
		}
	}
	return out
}

// memoryUsed sums the known memory used of n's GPUs, nil when none is
// known.
func memoryUsed(n Node) *int64 {
	var out *int64
	for _, g := range n.GPUs {
		if g.MemoryUsedMiB != nil {
			sum := *g.MemoryUsedMiB
			if out != nil {
				sum += *out
			}
			out = &sum
		}
	}
	return out
}

// higherFirst orders known figures high to low, then unknown ones.
func higherFirst[T int64 | float64](a, b *T) int {
	return cmp.Or(knownFirst(a, b), cmp.Compare(deref(b), deref(a)))
}

// lowerFirst orders known figures low to high, then unknown ones.
func lowerFirst[T int64 | float64](a, b *T) int {
	return cmp.Or(knownFirst(a, b), cmp.Compare(deref(a), deref(b)))
}

func knownFirst[T any](a, b *T) int {
	switch {
	case a != nil && b == nil:
		return -1
	case a == nil && b != nil:
		return 1
	}
	return 0
}

func deref[T int64 | float64](p *T) T {
	if p == nil {
		return 0
	}
	return *p
}

// taskRow is a task on a GPU it holds, or holds slices of.
type taskRow struct {
	gpu   *GPU
	alloc AllocRef
}

// sortedTasks are the tasks on gpus, in GPU order or, by SortMemory and
// SortWait, by memory used and predicted time left.
func sortedTasks(gpus []GPU, key SortKey) []taskRow {
	var out []taskRow
	for i := range gpus {
		for _, a := range gpus[i].Allocations {
			out = append(out, taskRow{&gpus[i], a})
		}
	}
	switch key {
	case SortMemory:
		slices.SortStableFunc(out, func(a, b taskRow) int { return higherFirst(a.alloc.MemoryUsedMiB, b.alloc.MemoryUsedMiB) })
	case SortWait:
		slices.SortStableFunc(out, func(a, b taskRow) int { return lowerFirst(timeLeft(a.alloc), timeLeft(b.alloc)) })
	}
	return out
}

// timeLeft is the predicted time left that the table shows, nil for none.
func timeLeft(a AllocRef) *int64 {
	if predLeft(a.Prediction) == "-" {
		return nil
	}
	return a.Prediction.RemainingSeconds
}
