package consolidate

import (
	"slices"
	"strings"
	"testing"
)

func movable(id, node string, gpus int) Alloc {
	return Alloc{ID: id, Job: "job-" + id, Node: node, GPUs: gpus, Movable: true}
}

func pinned(id, node string, gpus int) Alloc {
	a := movable(id, node, gpus)
	a.Movable, a.Why = false, "not opted in"
	return a
}

func TestSearch(t *testing.T) {
	for _, c := range []struct {
		name   string
		nodes  []Node
		allocs []Alloc
		count  int
		// node is the node freed, moves the allocations moved, sorted;
		// empty node: no plan.
		node  string
		moves []string
	}{
		{
			name:   "two nodes of 4, two 1-GPU jobs on each: two move off the first",
			nodes:  []Node{{ID: "a", Name: "gpu-1", Free: 2}, {ID: "b", Name: "gpu-2", Free: 2}},
			allocs: []Alloc{movable("a1", "a", 1), movable("a2", "a", 1), movable("b1", "b", 1), movable("b2", "b", 1)},
			count:  4, node: "gpu-1", moves: []string{"a1", "a2"},
		},
		{
			name:   "none movable: nothing moves",
			nodes:  []Node{{ID: "a", Name: "gpu-1", Free: 2}, {ID: "b", Name: "gpu-2", Free: 2}},
			allocs: []Alloc{pinned("a1", "a", 1), pinned("a2", "a", 1), pinned("b1", "b", 1), pinned("b2", "b", 1)},
			count:  4,
		},
		{
			name:   "one not movable on each node: nothing can free one",
			nodes:  []Node{{ID: "a", Name: "gpu-1", Free: 2}, {ID: "b", Name: "gpu-2", Free: 2}},
			allocs: []Alloc{movable("a1", "a", 1), pinned("a2", "a", 1), movable("b1", "b", 1), pinned("b2", "b", 1)},
			count:  4,
		},
		{
			name:  "the node needing the fewest moves: one off gpu-2 rather than three off gpu-1",
			nodes: []Node{{ID: "a", Name: "gpu-1", Free: 0}, {ID: "b", Name: "gpu-2", Free: 3}, {ID: "c", Name: "gpu-3", Free: 2}},
			allocs: []Alloc{movable("x", "a", 2), movable("y", "a", 1), movable("z", "a", 1),
				movable("w", "b", 1)},
			count: 4, node: "gpu-2", moves: []string{"w"},
		},
		{
			name:   "as few GPUs moved as allocations allow",
			nodes:  []Node{{ID: "a", Name: "gpu-1", Free: 2}, {ID: "b", Name: "gpu-2", Free: 2}},
			allocs: []Alloc{movable("p", "a", 2), movable("q", "a", 1)},
			count:  3, node: "gpu-1", moves: []string{"q"},
		},
		{
			name:   "no move when a moved allocation fits nowhere else",
			nodes:  []Node{{ID: "a", Name: "gpu-1", Free: 2}, {ID: "b", Name: "gpu-2", Free: 1}},
			allocs: []Alloc{movable("x", "a", 2)},
			count:  4,
		},
		{
			name:  "moved allocations packed so that all fit: 2 on the node of 2, 1 and 1 on the node of 2",
			nodes: []Node{{ID: "a", Name: "gpu-1", Free: 0}, {ID: "b", Name: "gpu-2", Free: 2}, {ID: "c", Name: "gpu-3", Free: 2}},
			allocs: []Alloc{movable("x", "a", 2), movable("y", "a", 1), movable("z", "a", 1),
				pinned("b1", "b", 1), pinned("b2", "b", 1), pinned("c1", "c", 1), pinned("c2", "c", 1)},
			count: 4, node: "gpu-1", moves: []string{"x", "y", "z"},
		},
		{
			name:   "a node already has the GPUs: Nomad places the ask, nothing moves",
			nodes:  []Node{{ID: "a", Name: "gpu-1", Free: 4}, {ID: "b", Name: "gpu-2", Free: 0}},
			allocs: []Alloc{movable("b1", "b", 4)},
			count:  4,
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, ok := Search(c.nodes, c.allocs, Ask{Job: "hpc", Group: "train", Count: c.count})
			checkPlan(t, "Search", p, ok, c.node, c.moves)
			if ok && p.Freed < c.count {
				t.Errorf("Search = %v freed %d, want %d", p, p.Freed, c.count)
			}
		})
	}
}

// checkPlan checks a search's plan: none where node is "", else node's
// allocations moves (sorted) moved, none onto node itself.
func checkPlan(t *testing.T, search string, p Plan, ok bool, node string, moves []string) {
	t.Helper()
	if node == "" {
		if ok {
			t.Fatalf("%s = %v, want no plan", search, p)
		}
		return
	}
	if !ok {
		t.Fatalf("%s found no plan, want %v off %s", search, moves, node)
	}
	var moved []string
	for _, m := range p.Moves {
		moved = append(moved, m.Alloc.ID)
		if m.To.ID == p.Node.ID {
			t.Errorf("%s moved onto the node it frees", m.Alloc.ID)
		}
	}
	slices.Sort(moved)
	if p.Node.Name != node || !slices.Equal(moved, moves) {
		t.Errorf("%s = %v (%v off %s), want %v off %s", search, p, moved, p.Node.Name, moves, node)
	}
}

// The simulated destinations never take more than a node has free.
func TestFitRespectsFree(t *testing.T) {
	nodes := []Node{{ID: "b", Name: "gpu-2", Free: 2}, {ID: "c", Name: "gpu-3", Free: 2}}
	moves, ok := fit([]Alloc{movable("y", "a", 1), movable("x", "a", 2), movable("z", "a", 1)}, nodes)
	if !ok {
		t.Fatal("fit: no placement, want x on one node, y and z on the other")
	}
	used := map[string]int{}
	for _, m := range moves {
		used[m.To.ID] += m.Alloc.GPUs
	}
	for _, n := range nodes {
		if used[n.ID] > n.Free {
			t.Errorf("node %s given %d GPUs, has %d free: %v", n.Name, used[n.ID], n.Free, moves)
		}
	}
	if _, ok := fit([]Alloc{movable("x", "a", 3)}, nodes); ok {
		t.Error("fit placed a 3-GPU allocation on nodes of 2 free")
	}
}

func TestPlanString(t *testing.T) {
	p := Plan{Ask: Ask{Job: "hpc-3", Group: "train", Count: 4}, Node: Node{Name: "gpu-2"}, Freed: 4,
		Moves: []Move{{Alloc: movable("a1", "a", 1)}, {Alloc: movable("a2", "a", 1)}}}
	if got := p.String(); !strings.Contains(got, "move 2 allocations (2 GPUs) off gpu-2 to free 4 GPUs for hpc-3/train") {
		t.Errorf("String = %q", got)
	}
}

func TestEmpty(t *testing.T) {
	for _, c := range []struct {
		name       string
		nodes      []Node
		allocs     []Alloc
		candidates []string
		// node is the node emptied, moves the allocations moved, sorted;
		// empty node: no plan.
		node  string
		moves []string
	}{
		{
			name:       "two nodes of 4 each half full: gpu-1's two move onto gpu-2",
			nodes:      []Node{{ID: "a", Name: "gpu-1", Free: 2}, {ID: "b", Name: "gpu-2", Free: 2}},
			allocs:     []Alloc{movable("a1", "a", 1), movable("a2", "a", 1), movable("b1", "b", 1), movable("b2", "b", 1)},
			candidates: []string{"a", "b"}, node: "gpu-1", moves: []string{"a1", "a2"},
		},
		{
			name:       "the node with a pinned allocation is never emptied: the other one is",
			nodes:      []Node{{ID: "a", Name: "gpu-1", Free: 2}, {ID: "b", Name: "gpu-2", Free: 2}},
			allocs:     []Alloc{pinned("a1", "a", 1), movable("a2", "a", 1), movable("b1", "b", 1), movable("b2", "b", 1)},
			candidates: []string{"a", "b"}, node: "gpu-2", moves: []string{"b1", "b2"},
		},
		{
			name:       "a pinned allocation on each node: nothing is emptied",
			nodes:      []Node{{ID: "a", Name: "gpu-1", Free: 2}, {ID: "b", Name: "gpu-2", Free: 2}},
			allocs:     []Alloc{pinned("a1", "a", 1), movable("a2", "a", 1), pinned("b1", "b", 1), movable("b2", "b", 1)},
			candidates: []string{"a", "b"},
		},
		{
			name:       "a node running nothing needs no move, whatever its name",
			nodes:      []Node{{ID: "a", Name: "gpu-1", Free: 3}, {ID: "b", Name: "gpu-2", Free: 4}, {ID: "c", Name: "gpu-3", Free: 1}},
			allocs:     []Alloc{movable("a1", "a", 1), movable("c1", "c", 3)},
			candidates: []string{"a", "b", "c"}, node: "gpu-2",
		},
		{
			name:       "the least loaded node: one allocation rather than two",
			nodes:      []Node{{ID: "a", Name: "gpu-1", Free: 2}, {ID: "b", Name: "gpu-2", Free: 3}, {ID: "c", Name: "gpu-3", Free: 1}},
			allocs:     []Alloc{movable("a1", "a", 1), movable("a2", "a", 1), movable("b1", "b", 1), movable("c1", "c", 3)},
			candidates: []string{"a", "b", "c"}, node: "gpu-2", moves: []string{"b1"},
		},
		{
			name:       "equal moves: the fewer GPUs moved",
			nodes:      []Node{{ID: "a", Name: "gpu-1", Free: 2}, {ID: "b", Name: "gpu-2", Free: 3}, {ID: "c", Name: "gpu-3", Free: 4}},
			allocs:     []Alloc{movable("a1", "a", 2), movable("b1", "b", 1)},
			candidates: []string{"a", "b"}, node: "gpu-2", moves: []string{"b1"},
		},
		{
			name:       "only candidates are emptied",
			nodes:      []Node{{ID: "a", Name: "gpu-1", Free: 2}, {ID: "b", Name: "gpu-2", Free: 4}},
			allocs:     []Alloc{movable("a1", "a", 2)},
			candidates: []string{"a"}, node: "gpu-1", moves: []string{"a1"},
		},
		{
			name:       "the work does not fit on the others: nothing is emptied",
			nodes:      []Node{{ID: "a", Name: "gpu-1", Free: 1}, {ID: "b", Name: "gpu-2", Free: 1}},
			allocs:     []Alloc{movable("a1", "a", 3), movable("b1", "b", 3)},
			candidates: []string{"a", "b"},
		},
		{
			name:       "the moved allocations must all fit: two of 2 on free 2 and 1 do not",
			nodes:      []Node{{ID: "a", Name: "gpu-1", Free: 0}, {ID: "b", Name: "gpu-2", Free: 2}, {ID: "c", Name: "gpu-3", Free: 1}},
			allocs:     []Alloc{movable("a1", "a", 2), movable("a2", "a", 2), pinned("b1", "b", 2), pinned("c1", "c", 3)},
			candidates: []string{"a"},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, ok := Empty(c.nodes, c.allocs, c.candidates)
			checkPlan(t, "Empty", p, ok, c.node, c.moves)
			if ok && !strings.Contains(p.String(), "to empty it for removal") {
				t.Errorf("String = %q, want it to say the node is emptied for removal", p)
			}
		})
	}
}
