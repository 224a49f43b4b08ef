package checkpoint

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// commitStep commits c with marker as the commit marker's content.
func commitStep(t *testing.T, s *Store, r *Run, c content, marker string) (*Generation, error) {
	t.Helper()
	writeTree(t, r.Staging, c, r.uid, r.gid)
	mark(t, r)
	if err := os.WriteFile(filepath.Join(r.Staging, CommitMarker), []byte(marker), 0o644); err != nil {
		t.Fatal(err)
	}
	return s.Commit(r, "test", 5)
}

// The commit marker may name the checkpoint's step: it is recorded with
// the generation; an empty marker names none; anything else commits the
// checkpoint all the same, names no step, and says why.
func TestCommitMarkerNamesTheStep(t *testing.T) {
	s, _ := newStore(t)
	cases := []struct {
		marker  string
		step    int64 // -1: none
		problem string
	}{
		{"42\n", 42, ""},
		{"  7 ", 7, ""},
		{"", -1, ""},
		{"step 9", -1, `holds "step 9", not a step`},
		{"-3", -1, `holds "-3", not a step`},
		{strings.Repeat("9", 40), -1, "not a step"},
	}
	for i, c := range cases {
		r, _ := prepare(t, s, Key{Namespace: "ns", Job: "j", Group: "g", Task: "t", AllocIndex: i})
		g, err := commitStep(t, s, r, content{"data": "x"}, c.marker)
		if g == nil {
			t.Fatalf("%q: not committed: %v", c.marker, err)
		}
		got := int64(-1)
		if g.Step != nil {
			got = *g.Step
		}
		if got != c.step || (c.problem == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.problem)) {
			t.Errorf("marker %q: step %d, error %v; want %d and %q", c.marker, got, err, c.step, c.problem)
		}
		// The manifest keeps it: the next run restores it with its step.
		r2, _ := prepare(t, s, r.Key)
		if r2.Restore == nil || (r2.Restore.Step == nil) != (c.step < 0) || (c.step >= 0 && *r2.Restore.Step != c.step) {
			t.Errorf("marker %q: restored %+v", c.marker, r2.Restore)
		}
	}
}

func TestConsistentStep(t *testing.T) {
	w := func(i int) Key { return Key{Job: "j", Group: "w", Task: "t", AllocIndex: i} }
	cases := []struct {
		name      string
		committed map[Key][]int64
		step      int64
		ok        bool
	}{
		{"no members", nil, 0, false},
		{"one member", map[Key][]int64{w(0): {3, 1, 2}}, 3, true},
		{"all at the same", map[Key][]int64{w(0): {1, 2}, w(1): {1, 2}}, 2, true},
		{"one behind", map[Key][]int64{w(0): {1, 2, 3}, w(1): {1, 2}}, 2, true},
		{"never ahead of one that missed a step", map[Key][]int64{w(0): {4, 5, 6}, w(1): {4, 6}, w(2): {5, 6}}, 6, true},
		{"the newest common, not the newest of each", map[Key][]int64{w(0): {4, 5}, w(1): {4, 6}}, 4, true},
		{"a member with none", map[Key][]int64{w(0): {1, 2}, w(1): nil}, 0, false},
		{"nothing in common (old ones pruned)", map[Key][]int64{w(0): {5, 6}, w(1): {3, 4}}, 0, false},
	}
	for _, c := range cases {
		step, ok := ConsistentStep(c.committed)
		if step != c.step || ok != c.ok {
			t.Errorf("%s: ConsistentStep = %d, %v; want %d, %v", c.name, step, ok, c.step, c.ok)
		}
	}
}

// Two members' stores: one committed steps 1 to 3, the other missed 3.
// Read from the manifests, their common newest step is 2, and each member
// restores its own generation of it, not its newest; a member without a
// directory has none, so the gang has none in common and restores
// nothing.
func TestGangRestoresTheCommonStep(t *testing.T) {
	s, _ := newStore(t)
	k0 := Key{Namespace: "ns", Job: "train", Group: "w", Task: "t", AllocIndex: 0}
	k1, k2 := k0, k0
	k1.AllocIndex, k2.AllocIndex = 1, 2
	for k, steps := range map[Key][]string{k0: {"1", "2", "3"}, k1: {"1", "2", ""}} {
		r, _ := prepare(t, s, k)
		for _, st := range steps {
			if g, err := commitStep(t, s, r, content{"step": st}, st); g == nil || err != nil {
				t.Fatalf("%+v step %q: %v", k, st, err)
			}
		}
	}
	steps, err := s.CommittedSteps([]Key{k0, k1})
	if err != nil {
		t.Fatal(err)
	}
	step, ok := ConsistentStep(steps)
	if !ok || step != 2 {
		t.Fatalf("steps %v: common %d, %v; want 2", steps, step, ok)
	}
	for _, k := range []Key{k0, k1} {
		r, _, err := s.PrepareWith(k, taskUID, taskGID, RestoreStep(step))
		if err != nil {
			t.Fatal(err)
		}
		if r.Restore == nil || r.Restore.Seq != 2 || *r.Restore.Step != 2 {
			t.Errorf("%+v restores %+v, want its generation 2 of step 2", k, r.Restore)
		}
		if b, _ := os.ReadFile(filepath.Join(r.Restore.Dir, "step")); string(b) != "2" {
			t.Errorf("%+v restored a checkpoint holding %q", k, b)
		}
	}
	steps, err = s.CommittedSteps([]Key{k0, k1, k2})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := ConsistentStep(steps); ok || steps[k2] != nil {
		t.Errorf("with a member that never committed: steps %v, common %v", steps, ok)
	}
	r, _, err := s.PrepareWith(k0, taskUID, taskGID, RestoreNone)
	if err != nil || r.Restore != nil {
		t.Errorf("RestoreNone restored %+v (%v)", r.Restore, err)
	}
}
