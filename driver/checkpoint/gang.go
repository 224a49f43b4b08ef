package checkpoint

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// The members of a gang (docs/design/gangs.md) resume together: a
// member ahead of another would train on from a step its peers never
// reached. Each member numbers its own generations, so "generation 4" of
// two members need not be the same round when one missed a checkpoint;
// what lines up is the training step the members name in their commit
// markers (a distributed job checkpoints at the same step on every rank).
// The gang restores the newest step every member committed. A gang's
// members share the store's root (as moved work does), so each member's
// driver reads its peers' manifests and decides alone, and all decide
// alike: the gang's previous run has stopped before any member starts.

// ConsistentStep is the step a gang restores: the newest one that every
// member's key committed, so no member resumes ahead of another.
// committed holds each member key's committed steps, in any order. ok is
// false when some member, or the gang, has none, or none is common to all.
func ConsistentStep(committed map[Key][]int64) (step int64, ok bool) {
	var common []int64
	first := true
	for _, steps := range committed {
		if first {
			common, first = slices.Clone(steps), false
			continue
		}
		common = slices.DeleteFunc(common, func(s int64) bool { return !slices.Contains(steps, s) })
	}
	if len(common) == 0 {
		return 0, false
	}
	return slices.Max(common), true
}

// CommittedSteps reads the steps the committed generations of each key
// name, from their manifests: a key without a directory has none, a
// generation whose marker named no step adds none. It takes no lock and
// checks no generation (the member's own Prepare does): manifests are
// replaced whole, and one whose generation is gone is left out.
func (s *Store) CommittedSteps(keys []Key) (map[Key][]int64, error) {
	out := make(map[Key][]int64, len(keys))
	for _, k := range keys {
		dir := s.KeyDir(k)
		entries, err := os.ReadDir(dir)
		if errors.Is(err, fs.ErrNotExist) {
			out[k] = nil
			continue
		}
		if err != nil {
			return nil, err
		}
		names := map[string]bool{}
		for _, e := range entries {
			names[e.Name()] = true
		}
		var steps []int64
		for _, e := range entries {
			g, isManifest := strings.CutSuffix(e.Name(), manifestSuffix)
			if _, gen := parseGen(g); !isManifest || !gen || !names[g] {
				continue
			}
			m, err := readManifest(filepath.Join(dir, e.Name()))
			if err == nil && m.Step != nil {
				steps = append(steps, *m.Step)
			}
		}
		out[k] = steps
	}
	return out, nil
}

// RestoreRule picks, from a key's intact generations (oldest first), the
// one a run restores; nil restores none.
type RestoreRule func(intact []*Generation) *Generation

// RestoreNewest is Prepare's rule: the newest intact generation.
func RestoreNewest(intact []*Generation) *Generation {
	if len(intact) == 0 {
		return nil
	}
	return intact[len(intact)-1]
}

// RestoreStep restores the newest intact generation of step, none when no
// intact one names it.
func RestoreStep(step int64) RestoreRule {
	return func(intact []*Generation) *Generation {
		for i := len(intact) - 1; i >= 0; i-- {
			if g := intact[i]; g.Step != nil && *g.Step == step {
				return g
			}
		}
		return nil
	}
}

// RestoreNone restores nothing: the run starts afresh, its key's
// generations kept.
func RestoreNone([]*Generation) *Generation { return nil }
