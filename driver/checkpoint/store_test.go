package checkpoint

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var testKey = Key{Namespace: "default", Job: "train", Group: "g", Task: "t", AllocIndex: 0}

// genA and genB are two checkpoints of the same task, each with what the
// other lacks.
var (
	genA = content{
		"weights.bin":     strings.Repeat("\x00\x01\x02A", 20000),
		"step":            "1000\n",
		"opt/adam.bin":    strings.Repeat("m", 3000),
		"opt/empty":       "",
		"only-in-a/x":     "x",
		"deep/a/b/c/d/e/": "",
	}
	genB = content{
		"weights.bin":   strings.Repeat("\x03\x02\x01B", 20000),
		"step":          "2000\n",
		"opt/adam.bin":  strings.Repeat("n", 3001),
		"opt/empty":     "",
		"emptydir/":     "",
		"only-in-b/y/z": "zz",
	}
)

func TestOpen(t *testing.T) {
	requireRoot(t)
	if _, err := Open("relative/root"); err == nil {
		t.Error("Open took a relative root")
	}
	tmp := t.TempDir()
	root := filepath.Join(tmp, "a", "b", "root")
	if err := os.MkdirAll(root, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chown(root, int(taskUID), int(taskGID))
	s, err := Open(root + "/")
	if err != nil {
		t.Fatal(err)
	}
	if s.Root() != root {
		t.Errorf("Root() = %q, want %q", s.Root(), root)
	}
	wantOwner(t, root, 0, 0, 0o711)
	f := filepath.Join(tmp, "file")
	os.WriteFile(f, nil, 0o644)
	if _, err := Open(f); err == nil {
		t.Error("Open took a regular file as root")
	}
}

func TestRoundTrip(t *testing.T) {
	requireRoot(t)
	for _, id := range []struct {
		name     string
		uid, gid uint32
	}{{"nobody", taskUID, taskGID}, {"root", 0, 0}, {"mixed", 1234, 5678}} {
		t.Run(id.name, func(t *testing.T) {
			s, _ := newStore(t)
			r, d, err := s.Prepare(testKey, id.uid, id.gid)
			if err != nil {
				t.Fatal(err)
			}
			if len(d) != 0 || r.Restore != nil || r.Resumes != 0 {
				t.Fatalf("first Prepare: discarded %v, restore %v, resumes %d", d, r.Restore, r.Resumes)
			}
			dir := s.KeyDir(testKey)
			for p := dir; p != filepath.Dir(s.Root()); p = filepath.Dir(p) {
				wantOwner(t, p, 0, 0, 0o711)
			}
			wantOwner(t, filepath.Join(dir, lockName), 0, 0, 0o600)
			wantOwner(t, filepath.Join(dir, stateName), 0, 0, 0o600)
			wantOwner(t, r.Staging, id.uid, id.gid, 0o700)
			if n := names(t, r.Staging); len(n) != 0 {
				t.Fatalf("a new staging directory holds %v", n)
			}

			staging := r.Staging
			writeTree(t, r.Staging, genA, id.uid, id.gid)
			if r.CommitRequested() {
				t.Fatal("CommitRequested before COMMIT")
			}
			if _, err := s.Commit(r, "stop", 2); !errors.Is(err, ErrNoMarker) {
				t.Fatalf("Commit without the marker: %v, want ErrNoMarker", err)
			}
			mark(t, r)
			if !r.CommitRequested() {
				t.Fatal("CommitRequested false with COMMIT")
			}
			before := time.Now().Add(-time.Second)
			g, err := s.Commit(r, "stop", 2)
			if err != nil {
				t.Fatal(err)
			}
			bytes, files := genA.bytesAndFiles()
			if g.Seq != 1 || g.Bytes != bytes || g.Files != files || g.Trigger != "stop" || g.Dir != filepath.Join(dir, "gen-00000001") {
				t.Errorf("generation %+v, want seq 1, %d bytes, %d files, trigger stop", g, bytes, files)
			}
			if g.CommittedAt.Before(before) || g.CommittedAt.After(time.Now()) {
				t.Errorf("committed at %v", g.CommittedAt)
			}
			if r.Staging != staging {
				t.Errorf("staging moved from %s to %s", staging, r.Staging)
			}
			wantOwner(t, r.Staging, id.uid, id.gid, 0o700)
			if n := names(t, r.Staging); len(n) != 0 {
				t.Errorf("staging holds %v after the commit", n)
			}
			if r.CommitRequested() {
				t.Error("CommitRequested after the commit")
			}
			checkSealed(t, g.Dir, id.uid, id.gid)
			wantOwner(t, g.Dir+manifestSuffix, 0, 0, 0o600)
			if err := s.Verify(g); err != nil {
				t.Fatal(err)
			}
			sameSums(t, "the generation", sums(t, g.Dir), genA.want())
			onlyCommittedState(t, dir, r.Staging)

			r2, d, err := s.Prepare(testKey, id.uid, id.gid)
			if err != nil {
				t.Fatal(err)
			}
			// The run before left its staging directory empty, as every
			// commit does: removed, and not reported as a lost checkpoint.
			if len(d) != 0 {
				t.Errorf("discarded %v, want nothing reported", d)
			}
			if _, err := os.Lstat(staging); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("the empty staging directory of the run before is still there: %v", err)
			}
			if r2.Restore == nil {
				t.Fatal("nothing to restore")
			}
			if *r2.Restore != *g && !(r2.Restore.CommittedAt.Equal(g.CommittedAt) && r2.Restore.Seq == g.Seq && r2.Restore.Dir == g.Dir && r2.Restore.Bytes == g.Bytes && r2.Restore.Files == g.Files && r2.Restore.Trigger == g.Trigger) {
				t.Errorf("restore %+v, want %+v", r2.Restore, g)
			}
			if r2.Resumes != 1 {
				t.Errorf("resumes %d, want 1", r2.Resumes)
			}
			sameSums(t, "the restored generation", sums(t, r2.Restore.Dir), genA.want())
			checkSealed(t, r2.Restore.Dir, id.uid, id.gid)
			if err := s.Verify(r2.Restore); err != nil {
				t.Fatal(err)
			}

			// Seq goes on from the newest; resumes count restoring runs.
			g2 := commit(t, s, r2, genB, 2)
			if g2.Seq != 2 {
				t.Errorf("second seq %d", g2.Seq)
			}
			r3, _, err := s.Prepare(testKey, id.uid, id.gid)
			if err != nil {
				t.Fatal(err)
			}
			if r3.Resumes != 2 || r3.Restore == nil || r3.Restore.Seq != 2 {
				t.Fatalf("third run: resumes %d, restore %+v", r3.Resumes, r3.Restore)
			}
			sameSums(t, "the second generation", sums(t, r3.Restore.Dir), genB.want())
			if g3 := commit(t, s, r3, content{"f": "3"}, 2); g3.Seq != 3 {
				t.Errorf("third seq %d", g3.Seq)
			}
		})
	}
}

// checkSealed: every entry of the generation is uid:gid, files 0400,
// directories 0500.
func checkSealed(t testing.TB, dir string, uid, gid uint32) {
	t.Helper()
	wantOwner(t, dir, uid, gid, 0o500)
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		if d.IsDir() {
			wantOwner(t, p, uid, gid, 0o500)
		} else {
			wantOwner(t, p, uid, gid, 0o400)
		}
		return nil
	})
}

func TestRetention(t *testing.T) {
	s, _ := newStore(t)
	r0, _ := prepare(t, s, testKey)
	commit(t, s, r0, content{"n": "0"}, 2)
	r, _ := prepare(t, s, testKey)
	if r.Restore == nil || r.Restore.Seq != 1 {
		t.Fatalf("restore %+v", r.Restore)
	}
	for i := 2; i <= 6; i++ {
		g := commit(t, s, r, content{"n": fmt.Sprint(i)}, 2)
		if g.Seq != i {
			t.Fatalf("seq %d, want %d", g.Seq, i)
		}
		want := []string{genName(1)}
		for j := max(2, i-1); j <= i; j++ {
			want = append(want, genName(j))
		}
		if got := gens(t, s, testKey); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("after commit %d: %v, want %v (the newest 2 and the one restored from)", i, got, want)
		}
		onlyCommittedState(t, s.KeyDir(testKey), r.Staging)
	}
	// The next run restores 6; its commits may prune 1.
	r2, _ := prepare(t, s, testKey)
	if r2.Restore == nil || r2.Restore.Seq != 6 {
		t.Fatalf("restore %+v", r2.Restore)
	}
	commit(t, s, r2, content{"n": "7"}, 2)
	if got := gens(t, s, testKey); fmt.Sprint(got) != fmt.Sprint([]string{genName(6), genName(7)}) {
		t.Fatalf("after the next run's commit: %v", got)
	}
	// keep 1 still keeps the generation the run restored from.
	commit(t, s, r2, content{"n": "8"}, 1)
	if got := gens(t, s, testKey); fmt.Sprint(got) != fmt.Sprint([]string{genName(6), genName(8)}) {
		t.Fatalf("keep 1: %v", got)
	}
	for _, keep := range []int{0, -1} {
		mark(t, r2)
		if _, err := s.Commit(r2, "x", keep); err == nil {
			t.Errorf("keep %d accepted", keep)
		}
	}
	// The marker stays: nothing was done.
	if !r2.CommitRequested() {
		t.Error("a refused keep took the marker")
	}
	sameSums(t, "generation 8", sums(t, filepath.Join(s.KeyDir(testKey), genName(8))), content{"n": "8"}.want())
}

// brokenGen is something done to the newest of two generations; Prepare
// must then restore the older one, byte for byte, and say why.
func TestPrepareDiscardsBrokenGenerations(t *testing.T) {
	requireRoot(t)
	for _, tc := range []struct {
		name   string
		break_ func(t *testing.T, gdir string)
		reason string
	}{
		{"file truncated", func(t *testing.T, g string) { truncate(t, filepath.Join(g, "step"), 2) }, "is 2 bytes, the manifest says 5"},
		{"file emptied", func(t *testing.T, g string) { truncate(t, filepath.Join(g, "weights.bin"), 0) }, "weights.bin is 0 bytes"},
		{"file extended", func(t *testing.T, g string) { truncate(t, filepath.Join(g, "step"), 4096) }, "is 4096 bytes"},
		{"file added", func(t *testing.T, g string) {
			writeTree(t, g, content{"opt/extra": "x"}, taskUID, taskGID)
		}, "opt/extra (a regular file) is not in the manifest"},
		{"directory added", func(t *testing.T, g string) {
			writeTree(t, g, content{"newdir/": ""}, taskUID, taskGID)
		}, "newdir (a directory) is not in the manifest"},
		{"file removed", func(t *testing.T, g string) { rm(t, filepath.Join(g, "opt/empty")) }, "opt/empty is missing"},
		{"directory removed", func(t *testing.T, g string) { rm(t, filepath.Join(g, "emptydir")) }, "directory emptydir is missing"},
		{"file made a directory", func(t *testing.T, g string) {
			rm(t, filepath.Join(g, "step"))
			os.Mkdir(filepath.Join(g, "step"), 0o700)
		}, "step is a directory, the manifest says a regular file"},
		{"symlink swapped in", func(t *testing.T, g string) {
			rm(t, filepath.Join(g, "step"))
			os.Symlink("/etc/passwd", filepath.Join(g, "step"))
		}, "step is a symbolic link"},
		{"file of another user", func(t *testing.T, g string) { os.Chown(filepath.Join(g, "step"), 4321, 4321) }, "step is owned by uid 4321"},
		{"manifest missing", func(t *testing.T, g string) { rm(t, g+manifestSuffix) }, "its manifest is missing"},
		{"manifest corrupt", func(t *testing.T, g string) { os.WriteFile(g+manifestSuffix, []byte("{\"version\":1,"), 0o600) }, "unreadable"},
		{"manifest of another generation", func(t *testing.T, g string) {
			b, _ := os.ReadFile(g + manifestSuffix)
			os.WriteFile(g+manifestSuffix, []byte(strings.Replace(string(b), `"seq": 2`, `"seq": 1`, 1)), 0o600)
		}, "for generation 1"},
		{"manifest of version 0", func(t *testing.T, g string) {
			b, _ := os.ReadFile(g + manifestSuffix)
			os.WriteFile(g+manifestSuffix, []byte(strings.Replace(string(b), `"version": 1`, `"version": 0`, 1)), 0o600)
		}, "version 0"},
		{"generation a file", func(t *testing.T, g string) {
			rm(t, g)
			os.WriteFile(g, nil, 0o600)
		}, "opening it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := newStore(t)
			r, _ := prepare(t, s, testKey)
			commit(t, s, r, genA, 3)
			g := commit(t, s, r, genB, 3)
			tc.break_(t, g.Dir)
			r2, d := prepare(t, s, testKey)
			if !hasDiscarded(d, g.Dir, tc.reason) {
				t.Errorf("discarded %v, want %s: %q", d, g.Dir, tc.reason)
			}
			if r2.Restore == nil || r2.Restore.Seq != 1 {
				t.Fatalf("restore %+v, want generation 1", r2.Restore)
			}
			sameSums(t, "the restored generation", sums(t, r2.Restore.Dir), genA.want())
			if err := s.Verify(r2.Restore); err != nil {
				t.Error(err)
			}
			for _, p := range []string{g.Dir, g.Dir + manifestSuffix} {
				if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("%s is still there: %v", p, err)
				}
			}
			onlyCommittedState(t, s.KeyDir(testKey), r2.Staging)
			// Its number is not taken for a generation of the next commit
			// while another generation is newer; here it is the newest
			// gone, and the next commit is 2 again or later.
			if g3 := commit(t, s, r2, content{"f": "x"}, 3); g3.Seq < 2 {
				t.Errorf("next seq %d", g3.Seq)
			}
		})
	}
}

// Content changed but sizes kept: Prepare does not hash, Verify does.
func TestVerifyCatchesSameSizeChange(t *testing.T) {
	s, _ := newStore(t)
	r, _ := prepare(t, s, testKey)
	g := commit(t, s, r, genA, 2)
	p := filepath.Join(g.Dir, "step")
	os.Chmod(p, 0o600)
	if err := os.WriteFile(p, []byte("9999\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.Verify(g); err == nil || !strings.Contains(err.Error(), "step has SHA-256") {
		t.Errorf("Verify: %v", err)
	}
	r2, _ := prepare(t, s, testKey)
	if r2.Restore == nil {
		t.Fatal("Prepare discarded a generation of the right sizes")
	}
	wantOwner(t, p, taskUID, taskGID, 0o400)
	if err := s.Verify(&Generation{Dir: filepath.Join(os.TempDir(), "gen-00000001")}); err == nil {
		t.Error("Verify took a directory outside the store")
	}
}

func truncate(t *testing.T, p string, n int64) {
	t.Helper()
	if err := os.Truncate(p, n); err != nil {
		t.Fatal(err)
	}
}

func rm(t *testing.T, p string) {
	t.Helper()
	if err := os.RemoveAll(p); err != nil {
		t.Fatal(err)
	}
}

// What interrupted commits, removals and writes leave is cleaned and
// reported; what this package did not make is left alone.
func TestPrepareCleansLeftovers(t *testing.T) {
	s, _ := newStore(t)
	r, _ := prepare(t, s, testKey)
	g := commit(t, s, r, genA, 2)
	dir := s.KeyDir(testKey)
	p := func(n string) string { return filepath.Join(dir, n) }

	os.WriteFile(p("gen-00000005"+manifestSuffix), []byte("{}"), 0o600)
	os.MkdirAll(p(".trash-0123456789abcdef/sub"), 0o700)
	os.WriteFile(p(".trash-0123456789abcdef/sub/f"), []byte("x"), 0o600)
	os.WriteFile(p(".state.json.tmp-12345"), []byte("{"), 0o600)
	os.WriteFile(p(".gen-00000003.manifest.json.tmp-777"), []byte("{"), 0o600)
	marked, unmarked, frozen := p("staging-aaaaaaaaaaaaaaaa"), p("staging-bbbbbbbbbbbbbbbb"), p("staging-cccccccccccccccc")
	for _, st := range []string{marked, unmarked, frozen} {
		os.Mkdir(st, 0o700)
		writeTree(t, st, content{"half": "ha"}, taskUID, taskGID)
	}
	os.Chown(unmarked, int(taskUID), int(taskGID))
	os.Chown(marked, int(taskUID), int(taskGID))
	writeTree(t, marked, content{CommitMarker: ""}, taskUID, taskGID)
	// A removal of a sibling key that died.
	removed := filepath.Join(filepath.Dir(dir), ".trash-fedcba9876543210")
	os.MkdirAll(filepath.Join(removed, "x"), 0o700)
	// Not this package's: left alone.
	os.WriteFile(p("README"), []byte("operator's"), 0o600)
	os.WriteFile(p("gen-1"), nil, 0o600)

	r2, d := prepare(t, s, testKey)
	for _, want := range []Discarded{
		{p("gen-00000005" + manifestSuffix), "before the commit point"},
		{p(".trash-0123456789abcdef"), "a removal was interrupted"},
		{removed, "a removal was interrupted"},
		{p(".state.json.tmp-12345"), "a write was interrupted"},
		{p(".gen-00000003.manifest.json.tmp-777"), "a write was interrupted"},
		{marked, "marked COMMIT that was never committed"},
		{unmarked, "never marked COMMIT"},
		{frozen, "its commit was interrupted"},
	} {
		if !hasDiscarded(d, want.Path, want.Reason) {
			t.Errorf("not discarded: %s (%s)", want.Path, want.Reason)
		}
		if _, err := os.Lstat(want.Path); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s is still there", want.Path)
		}
	}
	// r's staging directory, empty since its commit, is removed unreported.
	if _, err := os.Lstat(r.Staging); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s is still there", r.Staging)
	}
	if len(d) != 8 {
		t.Errorf("discarded %d: %v", len(d), d)
	}
	for _, n := range []string{"README", "gen-1"} {
		if _, err := os.Lstat(p(n)); err != nil {
			t.Errorf("%s was removed: %v", n, err)
		}
	}
	if r2.Restore == nil || r2.Restore.Seq != g.Seq {
		t.Fatalf("restore %+v", r2.Restore)
	}
	sameSums(t, "restored", sums(t, r2.Restore.Dir), genA.want())

	// A corrupt state.json counts resumes from 0 again, and says so.
	os.WriteFile(p(stateName), []byte("not json"), 0o600)
	r3, d := prepare(t, s, testKey)
	if !hasDiscarded(d, p(stateName), "counting resumes from 0") || r3.Resumes != 1 {
		t.Errorf("corrupt state: resumes %d, discarded %v", r3.Resumes, d)
	}
}

// A generation whose manifest is of a newer version stays, unused; the
// next commit does not take its number.
func TestNewerManifestLeftInPlace(t *testing.T) {
	s, _ := newStore(t)
	r, _ := prepare(t, s, testKey)
	commit(t, s, r, genA, 5)
	g := commit(t, s, r, genB, 5)
	b, _ := os.ReadFile(g.Dir + manifestSuffix)
	newer := strings.Replace(string(b), `"version": 1`, `"version": 2`, 1)
	os.WriteFile(g.Dir+manifestSuffix, []byte(newer), 0o600)
	os.Chmod(filepath.Join(g.Dir, "step"), 0o644) // not sealed again by this driver
	r2, d := prepare(t, s, testKey)
	if !hasDiscarded(d, g.Dir, "newer than this driver reads") {
		t.Errorf("discarded %v", d)
	}
	if r2.Restore == nil || r2.Restore.Seq != 1 {
		t.Fatalf("restore %+v, want 1", r2.Restore)
	}
	if got, _ := os.ReadFile(g.Dir + manifestSuffix); string(got) != newer {
		t.Error("the newer manifest was changed")
	}
	sameSums(t, "the newer generation", sums(t, g.Dir), genB.want())
	wantOwner(t, filepath.Join(g.Dir, "step"), taskUID, taskGID, 0o644)
	if g3 := commit(t, s, r2, content{"f": "3"}, 5); g3.Seq != 3 {
		t.Errorf("next seq %d, want 3", g3.Seq)
	}
}

// A generation committed by one uid is handed to the next run's.
func TestPrepareHandsGenerationToNewUID(t *testing.T) {
	s, _ := newStore(t)
	r, _ := prepare(t, s, testKey)
	commit(t, s, r, genA, 2)
	r2, _, err := s.Prepare(testKey, 2000, 2001)
	if err != nil {
		t.Fatal(err)
	}
	checkSealed(t, r2.Restore.Dir, 2000, 2001)
	m, err := readManifest(r2.Restore.Dir + manifestSuffix)
	if err != nil || m.UID != 2000 {
		t.Errorf("manifest uid %v, %v", m, err)
	}
	if err := s.Verify(r2.Restore); err != nil {
		t.Error(err)
	}
}

func TestSuperseded(t *testing.T) {
	s, _ := newStore(t)
	r0, _ := prepare(t, s, testKey)
	commit(t, s, r0, genA, 2)
	r1, _ := prepare(t, s, testKey)
	writeTree(t, r1.Staging, content{"mine": "1"}, taskUID, taskGID)
	mark(t, r1)
	r2, d := prepare(t, s, testKey)
	if !hasDiscarded(d, r1.Staging, "marked COMMIT that was never committed") {
		t.Errorf("discarded %v", d)
	}
	dir := s.KeyDir(testKey)
	before := names(t, dir)
	state, _ := os.ReadFile(filepath.Join(dir, stateName))
	if _, err := s.Commit(r1, "stop", 2); !errors.Is(err, ErrSuperseded) {
		t.Errorf("Commit of a superseded run: %v", err)
	}
	// Even with its staging directory back, marked.
	os.Mkdir(r1.Staging, 0o700)
	os.Chown(r1.Staging, int(taskUID), int(taskGID))
	mark(t, r1)
	if _, err := s.Commit(r1, "stop", 2); !errors.Is(err, ErrSuperseded) {
		t.Errorf("Commit of a superseded run: %v", err)
	}
	if _, err := s.Reattach(r1, taskUID, taskGID); !errors.Is(err, ErrSuperseded) {
		t.Errorf("Reattach of a superseded run: %v", err)
	}
	if !r1.CommitRequested() {
		t.Error("the superseded run's marker was taken")
	}
	os.RemoveAll(r1.Staging)
	if got := names(t, dir); fmt.Sprint(got) != fmt.Sprint(before) {
		t.Errorf("key dir %v, was %v", got, before)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, stateName)); string(got) != string(state) {
		t.Errorf("state %s, was %s", got, state)
	}
	if gs := gens(t, s, testKey); len(gs) != 1 {
		t.Errorf("generations %v", gs)
	}
	// The current run commits.
	if g := commit(t, s, r2, genB, 2); g.Seq != 2 {
		t.Errorf("seq %d", g.Seq)
	}
	// A run of another store, or none.
	other := *r2
	other.store = nil
	if _, err := s.Commit(&other, "x", 2); err == nil {
		t.Error("Commit took a run it did not prepare")
	}
	if _, err := s.Commit(nil, "x", 2); err == nil {
		t.Error("Commit took a nil run")
	}
}

func TestReattach(t *testing.T) {
	requireRoot(t)
	t.Run("keeps the staging directory", func(t *testing.T) {
		s, _ := newStore(t)
		r, _ := prepare(t, s, testKey)
		commit(t, s, r, genA, 2)
		r, _ = prepare(t, s, testKey)
		writeTree(t, r.Staging, genB, taskUID, taskGID)
		// The driver restarts: a new store, the run rebuilt from what it kept.
		s2, err := Open(s.Root())
		if err != nil {
			t.Fatal(err)
		}
		rebuilt := &Run{Key: r.Key, Staging: r.Staging, Restore: r.Restore, Resumes: r.Resumes}
		d, err := s2.Reattach(rebuilt, taskUID, taskGID)
		if err != nil || len(d) != 0 {
			t.Fatalf("Reattach: %v, discarded %v", err, d)
		}
		sameSums(t, "staging", sums(t, r.Staging), genB.want())
		wantOwner(t, r.Staging, taskUID, taskGID, 0o700)
		mark(t, rebuilt)
		g, err := s2.Commit(rebuilt, "stop", 1)
		if err != nil {
			t.Fatal(err)
		}
		sameSums(t, "generation", sums(t, g.Dir), genB.want())
		// keep 1, but the restored generation stays for the rebuilt run.
		if gs := gens(t, s2, testKey); len(gs) != 2 {
			t.Errorf("generations %v", gs)
		}
	})
	t.Run("empties after an interrupted commit", func(t *testing.T) {
		s, _ := newStore(t)
		r, _ := prepare(t, s, testKey)
		writeTree(t, r.Staging, genB, taskUID, taskGID)
		os.Chown(r.Staging, 0, 0) // frozen by a commit that died
		mark(t, r)
		if _, err := s.Commit(r, "stop", 1); err == nil || !strings.Contains(err.Error(), "must be reattached") {
			t.Errorf("Commit of a frozen staging directory: %v", err)
		}
		d, err := s.Reattach(r, taskUID, taskGID)
		if err != nil {
			t.Fatal(err)
		}
		if !hasDiscarded(d, r.Staging, "its commit was interrupted") {
			t.Errorf("discarded %v", d)
		}
		if n := names(t, r.Staging); len(n) != 0 {
			t.Errorf("staging holds %v", n)
		}
		wantOwner(t, r.Staging, taskUID, taskGID, 0o700)
	})
	t.Run("recreates a missing staging directory", func(t *testing.T) {
		s, _ := newStore(t)
		r, _ := prepare(t, s, testKey)
		os.Remove(r.Staging) // renamed by a commit that died after its commit point
		if d, err := s.Reattach(r, taskUID, taskGID); err != nil || len(d) != 0 {
			t.Fatalf("Reattach: %v, %v", err, d)
		}
		wantOwner(t, r.Staging, taskUID, taskGID, 0o700)
	})
	t.Run("refuses a path that is no staging directory", func(t *testing.T) {
		s, _ := newStore(t)
		r, _ := prepare(t, s, testKey)
		for _, p := range []string{"/tmp/staging-0123456789abcdef", filepath.Join(s.KeyDir(testKey), "gen-00000001"), filepath.Join(s.KeyDir(testKey), "staging-xyz")} {
			bad := *r
			bad.Staging = p
			if _, err := s.Reattach(&bad, taskUID, taskGID); err == nil || errors.Is(err, ErrSuperseded) {
				t.Errorf("Reattach of %s: %v", p, err)
			}
			bad.store = s
			mark(t, r)
			if _, err := s.Commit(&bad, "x", 1); err == nil {
				t.Errorf("Commit of %s succeeded", p)
			}
		}
	})
}

func TestRemove(t *testing.T) {
	s, _ := newStore(t)
	if err := s.Remove(testKey); err != nil {
		t.Errorf("Remove of a key never prepared: %v", err)
	}
	r, _ := prepare(t, s, testKey)
	commit(t, s, r, genA, 2)
	if err := s.Remove(testKey); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(s.KeyDir(testKey)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("key dir: %v", err)
	}
	if n := names(t, filepath.Dir(s.KeyDir(testKey))); len(n) != 0 {
		t.Errorf("left %v", n)
	}
	if _, err := s.Commit(r, "x", 1); err == nil {
		t.Error("Commit after Remove succeeded")
	}
	if _, err := os.Lstat(s.KeyDir(testKey)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Commit after Remove made the key dir: %v", err)
	}
	r, _ = prepare(t, s, testKey)
	if r.Restore != nil || r.Resumes != 0 {
		t.Errorf("after Remove: restore %+v, resumes %d", r.Restore, r.Resumes)
	}
}

// A generation number is never given twice: after the newest generation
// is discarded as broken, the next commit gets a new number, so that
// NOMAD_GPU_RESTORE_GENERATION always names one checkpoint.
func TestGenerationNumbersNotReused(t *testing.T) {
	s, _ := newStore(t)
	r, _ := prepare(t, s, testKey)
	commit(t, s, r, content{"n": "1"}, 3)
	g2 := commit(t, s, r, content{"n": "2"}, 3)
	if err := os.Remove(g2.Dir + manifestSuffix); err != nil {
		t.Fatal(err)
	}
	r2, ds := prepare(t, s, testKey)
	if r2.Restore == nil || r2.Restore.Seq != 1 || !hasDiscarded(ds, g2.Dir, "manifest is missing") {
		t.Fatalf("restore %+v, discarded %v: want generation 1, and 2 discarded", r2.Restore, ds)
	}
	if g := commit(t, s, r2, content{"n": "3"}, 3); g.Seq != 3 {
		t.Fatalf("the commit after generation 2 was discarded got number %d, want 3", g.Seq)
	}
}
