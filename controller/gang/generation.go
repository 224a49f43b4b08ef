package gang

import "slices"

// ConsistentGeneration is the checkpoint generation a gang restores from:
// the newest one every member committed, so no member resumes ahead of
// another. committed is each member's committed generations (by member
// name, in any order). ok is false when some member, or the gang, has
// none, or no generation is common to all.
func ConsistentGeneration(committed map[string][]int) (gen int, ok bool) {
	var common []int
	first := true
	for _, gens := range committed {
		if first {
			common, first = slices.Clone(gens), false
			continue
		}
		common = slices.DeleteFunc(common, func(g int) bool { return !slices.Contains(gens, g) })
	}
	if len(common) == 0 {
		return 0, false
	}
	return slices.Max(common), true
}
