package gang

import "testing"

func TestConsistentGeneration(t *testing.T) {
	cases := []struct {
		name      string
		committed map[string][]int
		gen       int
		ok        bool
	}{
		{"no members", nil, 0, false},
		{"one member", map[string][]int{"w[0]": {3, 1, 2}}, 3, true},
		{"all at the same", map[string][]int{"w[0]": {1, 2}, "w[1]": {1, 2}}, 2, true},
		{"one behind", map[string][]int{"w[0]": {1, 2, 3}, "w[1]": {1, 2}}, 2, true},
		{"never ahead of one that missed a generation", map[string][]int{"w[0]": {4, 5, 6}, "w[1]": {4, 6}, "w[2]": {5, 6}}, 6, true},
		{"the newest common, not the newest of each", map[string][]int{"w[0]": {4, 5}, "w[1]": {4, 6}}, 4, true},
		{"a member with none", map[string][]int{"w[0]": {1, 2}, "w[1]": nil}, 0, false},
		{"nothing in common (old ones pruned)", map[string][]int{"w[0]": {5, 6}, "w[1]": {3, 4}}, 0, false},
	}
	for _, c := range cases {
		gen, ok := ConsistentGeneration(c.committed)
		if gen != c.gen || ok != c.ok {
			t.Errorf("%s: ConsistentGeneration = %d, %v; want %d, %v", c.name, gen, ok, c.gen, c.ok)
		}
	}
}
