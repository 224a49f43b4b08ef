// Package consolidate finds the running allocations to move so that a
// queued allocation needing more GPUs on one node than any node has free
// can run. Nomad places each allocation once and never moves it: a pool
// with 8 free GPUs spread 2, 2, 2, 2 over four nodes keeps an 8-GPU job
// waiting until enough work on one node happens to finish. A task that
// checkpoints on every stop and restores on its next run, on any node
// sharing its checkpoint root, costs its commit time to move, not its
// progress; moving a few of them frees a node.
//
// The search is pure: the controller hands it the schedulable nodes'
// free whole GPUs and the running allocations that hold whole GPUs,
// each already judged movable or not (opt-in, checkpoints, protection,
// budget), and stops what it returns. A move is simulated on the
// snapshot: every moved allocation must fit on another node right now,
// or nothing moves. A partial move would stop work and free nothing
// usable.
package consolidate

import (
	"cmp"
	"fmt"
	"slices"
)

// Node is a schedulable node of the ask's pool and its free whole GPUs.
type Node struct {
	ID, Name string
	Free     int
}

// Alloc is a running allocation holding whole GPUs on a node.
type Alloc struct {
	ID, Namespace, Job, Node string
	GPUs                     int
	// Movable says the controller may move it now; Why says why not.
	Movable bool
	Why     string
}

// Ask is one queued allocation that needs Count whole GPUs on one node.
type Ask struct {
	Namespace, Job, Group string
	Count                 int
}

// Move is one allocation to stop, and the node the simulation fitted it
// on (Nomad, not the controller, places its replacement).
type Move struct {
	Alloc Alloc
	To    Node
}

// Plan is the moves that free Node for an ask.
type Plan struct {
	Ask   Ask
	Node  Node
	Moves []Move
	// Freed is Node's free GPUs once the moved allocations have gone.
	Freed int
}

// GPUsMoved is the GPUs the plan's moves hold.
func (p Plan) GPUsMoved() int {
	n := 0
	for _, m := range p.Moves {
		n += m.Alloc.GPUs
	}
	return n
}

func (p Plan) String() string {
	if p.Ask.Job == "" {
		return fmt.Sprintf("move %d allocations (%d GPUs) off %s to empty it for removal",
			len(p.Moves), p.GPUsMoved(), p.Node.Name)
	}
	return fmt.Sprintf("move %d allocations (%d GPUs) off %s to free %d GPUs for %s/%s",
		len(p.Moves), p.GPUsMoved(), p.Node.Name, p.Freed, p.Ask.Job, p.Ask.Group)
}

// Empty is the node of candidates whose allocations can all move onto
// the other nodes' free GPUs now, for scale-in: the fewest allocations
// moved, then the fewest GPUs, then the first by name (a node running
// nothing needs none). A candidate running an allocation that may not
// move is never emptied: its work is waited out. The plan's Ask is zero
// but for Count, the GPUs the node has free once emptied.
func Empty(nodes []Node, allocs []Alloc, candidates []string) (best Plan, ok bool) {
	byName := slices.Clone(nodes)
	slices.SortFunc(byName, func(a, b Node) int { return cmp.Compare(a.Name, b.Name) })
	on := map[string][]Alloc{}
	for _, a := range allocs {
		on[a.Node] = append(on[a.Node], a)
	}
	for _, n := range byName {
		if !slices.Contains(candidates, n.ID) || slices.ContainsFunc(on[n.ID], func(a Alloc) bool { return !a.Movable }) ||
			len(on[n.ID]) > maxCandidates || ok && len(on[n.ID]) > len(best.Moves) {
			continue
		}
		others := slices.DeleteFunc(slices.Clone(byName), func(o Node) bool { return o.ID == n.ID || o.Free <= 0 })
		moves, fits := fit(on[n.ID], others)
		if !fits {
			continue
		}
		p := Plan{Node: n, Moves: moves}
		p.Freed = n.Free + p.GPUsMoved()
		p.Ask.Count = p.Freed
		if !ok || better(p, best) {
			best, ok = p, true
		}
	}
	return best, ok
}

// maxCandidates bounds the allocations of one node the search combines
// (2^maxCandidates subsets at most): a node's GPUs are few, and the
// largest movable allocations free the most.
const maxCandidates = 16

// Search is the smallest set of movable allocations on one node whose
// move frees Count GPUs there while each of them fits on another node:
// the fewest allocations, then the fewest GPUs moved, then the node
// freed first by name. ok is false when a node already has Count free
// (Nomad places the ask without help) or no node can be freed.
func Search(nodes []Node, allocs []Alloc, ask Ask) (best Plan, ok bool) {
	if ask.Count < 1 || slices.ContainsFunc(nodes, func(n Node) bool { return n.Free >= ask.Count }) {
		return Plan{}, false
	}
	byName := slices.Clone(nodes)
	slices.SortFunc(byName, func(a, b Node) int { return cmp.Compare(a.Name, b.Name) })
	// Only a node with a free GPU can take a moved allocation: the others
	// are left out of every fit, which keeps the rest in their order.
	room := slices.DeleteFunc(slices.Clone(byName), func(n Node) bool { return n.Free <= 0 })
	movable := movableByNode(allocs)
	for _, n := range byName {
		// A plan of more moves than the best so far cannot be better.
		most := maxCandidates
		if ok {
			most = len(best.Moves)
		}
		p, found := searchNode(room, movable[n.ID], ask, n, most)
		if found && (!ok || better(p, best)) {
			best, ok = p, true
		}
	}
	return best, ok
}

// movableByNode are the movable allocations holding GPUs, by node ID, in
// allocs' order.
func movableByNode(allocs []Alloc) map[string][]Alloc {
	out := map[string][]Alloc{}
	for _, a := range allocs {
		if a.Movable && a.GPUs > 0 {
			out[a.Node] = append(out[a.Node], a)
		}
	}
	return out
}

func better(a, b Plan) bool {
	if len(a.Moves) != len(b.Moves) {
		return len(a.Moves) < len(b.Moves)
	}
	return a.GPUsMoved() < b.GPUsMoved()
}

// searchNode is the smallest move set, of at most most moves, that frees
// ask.Count GPUs on n; movable are n's movable allocations.
func searchNode(nodes []Node, movable []Alloc, ask Ask, n Node, most int) (Plan, bool) {
	if len(movable) == 0 {
		return Plan{}, false
	}
	need := ask.Count - n.Free
	cands := slices.Clone(movable)
	slices.SortStableFunc(cands, func(a, b Alloc) int { return cmp.Compare(b.GPUs, a.GPUs) })
	cands = cands[:min(len(cands), maxCandidates)]
	others := slices.DeleteFunc(slices.Clone(nodes), func(o Node) bool { return o.ID == n.ID })
	// A set with an allocation larger than any other node's free GPUs
	// does not fit: leaving those out (the largest, a prefix) leaves the
	// other sets in their order.
	roomiest := 0
	for _, o := range others {
		roomiest = max(roomiest, o.Free)
	}
	cands = slices.DeleteFunc(cands, func(a Alloc) bool { return a.GPUs > roomiest })
	var set []Alloc // fit copies what it keeps
	top := 0        // the GPUs of the size largest candidates
	for size := 1; size <= min(len(cands), most); size++ {
		if top += cands[size-1].GPUs; top < need {
			continue // no set of this size frees enough
		}
		var best Plan
		found := false
		combinations(len(cands), size, func(idx []int) {
			set = set[:0]
			gpus := 0
			for _, j := range idx {
				set = append(set, cands[j])
				gpus += cands[j].GPUs
			}
			if gpus < need {
				return
			}
			moves, fits := fit(set, others)
			if !fits {
				return
			}
			p := Plan{Ask: ask, Node: n, Moves: moves, Freed: n.Free + gpus}
			if !found || better(p, best) {
				best, found = p, true
			}
		})
		if found {
			return best, true
		}
	}
	return Plan{}, false
}

// combinations calls f with every ascending choice of k of 0..n-1.
func combinations(n, k int, f func([]int)) {
	idx := make([]int, k)
	var rec func(from, depth int)
	rec = func(from, depth int) {
		if depth == k {
			f(idx)
			return
		}
		for i := from; i <= n-(k-depth); i++ {
			idx[depth] = i
			rec(i+1, depth+1)
		}
	}
	rec(0, 0)
}

// fit places every allocation of set, largest first, on the nodes'
// free GPUs, each on the fullest node it fits (Nomad's binpacking),
// trying the others where that leaves a later one nowhere: an exact
// search, the sets being small.
func fit(set []Alloc, nodes []Node) ([]Move, bool) {
	order := slices.Clone(set)
	slices.SortStableFunc(order, func(a, b Alloc) int { return cmp.Compare(b.GPUs, a.GPUs) })
	// A node with less free than the smallest allocation never takes one
	// (where every allocation holds GPUs, free only falls), and leaving
	// it out keeps the others' order: the search is the same.
	smallest := 0
	if len(order) > 0 && order[len(order)-1].GPUs > 0 {
		smallest = order[len(order)-1].GPUs
	}
	var at []int // nodes' indexes
	for i, n := range nodes {
		if smallest == 0 || n.Free >= smallest {
			at = append(at, i)
		}
	}
	free := make([]int, len(at))
	for i, j := range at {
		free[i] = nodes[j].Free
	}
	to := make([]int, len(order))
	var place func(i int) bool
	place = func(i int) bool {
		if i == len(order) {
			return true
		}
		for _, j := range fullestFirst(free) {
			if free[j] < order[i].GPUs {
				continue
			}
			free[j] -= order[i].GPUs
			to[i] = j
			if place(i + 1) {
				return true
			}
			free[j] += order[i].GPUs
		}
		return false
	}
	if !place(0) {
		return nil, false
	}
	moves := make([]Move, len(order))
	for i, a := range order {
		moves[i] = Move{Alloc: a, To: nodes[at[to[i]]]}
	}
	return moves, true
}

// fullestFirst is the indexes of free, the least free first.
func fullestFirst(free []int) []int {
	idx := make([]int, len(free))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int { return cmp.Compare(free[a], free[b]) })
	return idx
}
