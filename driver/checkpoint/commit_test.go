package checkpoint

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A commit refused for one entry of the staging directory hands it back
// to the task as it was, less the marker, and commits nothing.
func TestCommitRefuses(t *testing.T) {
	requireRoot(t)
	for _, tc := range []struct {
		name  string
		plant func(t *testing.T, staging, outside string)
		want  string
	}{
		{"symlink", func(t *testing.T, st, out string) {
			os.Symlink(filepath.Join(out, "victim"), filepath.Join(st, "opt", "link"))
			os.Lchown(filepath.Join(st, "opt", "link"), int(taskUID), int(taskGID))
		}, "refusing opt/link: a symbolic link"},
		{"symlink to a directory", func(t *testing.T, st, out string) {
			os.Symlink(out, filepath.Join(st, "dirlink"))
			os.Lchown(filepath.Join(st, "dirlink"), int(taskUID), int(taskGID))
		}, "refusing dirlink: a symbolic link"},
		{"FIFO", func(t *testing.T, st, out string) {
			if err := syscall.Mkfifo(filepath.Join(st, "fifo"), 0o644); err != nil {
				t.Fatal(err)
			}
			os.Chown(filepath.Join(st, "fifo"), int(taskUID), int(taskGID))
		}, "refusing fifo: a FIFO"},
		{"socket", func(t *testing.T, st, out string) {
			fd, _ := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
			defer syscall.Close(fd)
			if err := syscall.Bind(fd, &syscall.SockaddrUnix{Name: filepath.Join(st, "sock")}); err != nil {
				t.Fatal(err)
			}
			os.Chown(filepath.Join(st, "sock"), int(taskUID), int(taskGID))
		}, "refusing sock: a socket"},
		{"hard link to another user's file", func(t *testing.T, st, out string) {
			if err := os.Link(filepath.Join(out, "victim"), filepath.Join(st, "opt", "hard")); err != nil {
				t.Fatal(err)
			}
		}, "refusing opt/hard: owned by uid 1234, not the task's uid 65534"},
		{"directory of another user", func(t *testing.T, st, out string) {
			os.Mkdir(filepath.Join(st, "theirs"), 0o755)
			os.Chown(filepath.Join(st, "theirs"), 1234, 1234)
		}, "refusing theirs: owned by uid 1234"},
		{"root's file", func(t *testing.T, st, out string) {
			os.WriteFile(filepath.Join(st, "opt", "roots"), nil, 0o644)
		}, "refusing opt/roots: owned by uid 0"},
		{"invalid UTF-8 name", func(t *testing.T, st, out string) {
			writeTree(t, st, content{"opt/bad\xff\xfe": "x"}, taskUID, taskGID)
		}, `refusing "opt/bad\xff\xfe": the name is not valid UTF-8`},
		{"nested too deep", func(t *testing.T, st, out string) {
			writeTree(t, st, content{strings.Repeat("d/", maxDepth+1) + "f": "deep"}, taskUID, taskGID)
		}, "directories nested deeper than 256 levels"},
		{"invalid UTF-8 directory", func(t *testing.T, st, out string) {
			writeTree(t, st, content{"\xc3(/": ""}, taskUID, taskGID)
		}, `refusing "\xc3(": the name is not valid UTF-8`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, tmp := newStore(t)
			out := filepath.Join(tmp, "outside")
			os.Mkdir(out, 0o755)
			victim := filepath.Join(out, "victim")
			os.WriteFile(victim, []byte("not the task's"), 0o644)
			os.Chown(victim, 1234, 1234)

			r, _ := prepare(t, s, testKey)
			commit(t, s, r, genA, 2)
			writeTree(t, r.Staging, genB, taskUID, taskGID)
			tc.plant(t, r.Staging, out)
			planted := sums(t, r.Staging)
			dir := s.KeyDir(testKey)
			before := names(t, dir)
			mark(t, r)
			g, err := s.Commit(r, "stop", 1)
			if err == nil || g != nil {
				t.Fatalf("Commit: %v, %v", g, err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
			if r.CommitRequested() {
				t.Error("the marker is still there")
			}
			wantOwner(t, r.Staging, taskUID, taskGID, 0o700)
			sameSums(t, "the task's files", sums(t, r.Staging), planted)
			if got := names(t, dir); fmt.Sprint(got) != fmt.Sprint(before) {
				t.Errorf("key dir %v, was %v", got, before)
			}
			wantOwner(t, victim, 1234, 1234, 0o644)
			wantOwner(t, out, 0, 0, 0o755)
			if b, _ := os.ReadFile(victim); string(b) != "not the task's" {
				t.Errorf("victim now %q", b)
			}
			// The task fixes it and marks again.
			os.RemoveAll(r.Staging)
			os.Mkdir(r.Staging, 0o700)
			os.Chown(r.Staging, int(taskUID), int(taskGID))
			g = commit(t, s, r, genB, 1)
			sameSums(t, "the generation", sums(t, g.Dir), genB.want())
		})
	}
}

func TestCommitMarker(t *testing.T) {
	requireRoot(t)
	for _, tc := range []struct {
		name  string
		plant func(t *testing.T, p string)
	}{
		{"none", func(t *testing.T, p string) {}},
		{"a directory", func(t *testing.T, p string) { os.Mkdir(p, 0o755) }},
		{"a symlink to a file", func(t *testing.T, p string) {
			os.WriteFile(p+".real", nil, 0o644)
			os.Symlink(p+".real", p)
		}},
		{"a dangling symlink", func(t *testing.T, p string) { os.Symlink("/nonexistent", p) }},
		{"a FIFO", func(t *testing.T, p string) { syscall.Mkfifo(p, 0o644) }},
		{"in a subdirectory", func(t *testing.T, p string) {
			os.Mkdir(filepath.Join(filepath.Dir(p), "sub"), 0o755)
			os.WriteFile(filepath.Join(filepath.Dir(p), "sub", CommitMarker), nil, 0o644)
		}},
		{"lower case", func(t *testing.T, p string) { os.WriteFile(filepath.Join(filepath.Dir(p), "commit"), nil, 0o644) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := newStore(t)
			r, _ := prepare(t, s, testKey)
			writeTree(t, r.Staging, genA, taskUID, taskGID)
			tc.plant(t, filepath.Join(r.Staging, CommitMarker))
			before := sums(t, r.Staging)
			if r.CommitRequested() {
				t.Error("CommitRequested")
			}
			if _, err := s.Commit(r, "stop", 2); !errors.Is(err, ErrNoMarker) {
				t.Errorf("Commit: %v, want ErrNoMarker", err)
			}
			sameSums(t, "staging", sums(t, r.Staging), before)
			wantOwner(t, r.Staging, taskUID, taskGID, 0o700)
			if gs := gens(t, s, testKey); len(gs) != 0 {
				t.Errorf("generations %v", gs)
			}
		})
	}
}

// A file that changes between its stat and the end of its hashing is
// refused: the manifest would record neither its old content nor its new.
func TestHashFileRefusesChange(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	os.WriteFile(p, []byte("data"), 0o644)
	for _, change := range []func(){
		func() { os.WriteFile(p, []byte("more data"), 0o644) },
		func() { os.Truncate(p, 1) },
		func() {
			// Same size, new mtime.
			later := time.Now().Add(time.Hour)
			os.Chtimes(p, later, later)
		},
	} {
		os.WriteFile(p, []byte("data"), 0o644)
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			t.Fatal(err)
		}
		change()
		f, _ := os.Open(p)
		if _, err := hashFile(f, &st); err == nil || !strings.Contains(err.Error(), "changed while being committed") {
			t.Errorf("hashFile: %v", err)
		}
		f.Close()
	}
}

// A task that writes on through a descriptor it kept open past COMMIT
// breaks only the generation being committed: Commit says so, prunes
// nothing, and the next run restores the one before.
func TestCommitTaskWritesOnAfterCollect(t *testing.T) {
	s, _ := newStore(t)
	r, _ := prepare(t, s, testKey)
	commit(t, s, r, genA, 1)
	writeTree(t, r.Staging, genB, taskUID, taskGID)
	mark(t, r)
	f, err := os.OpenFile(filepath.Join(r.Staging, "weights.bin"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s.step = func(step string) {
		if step == "collected" {
			f.Write([]byte("more"))
			// Frozen: the task can open nothing in it.
			wantOwner(t, r.Staging, 0, 0, 0o700)
		}
	}
	g, err := s.Commit(r, "stop", 1)
	s.step = nil
	if g == nil || err == nil || !strings.Contains(err.Error(), "weights.bin is 80004 bytes, the manifest says 80000") {
		t.Fatalf("Commit: %v, %v", g, err)
	}
	wantOwner(t, r.Staging, taskUID, taskGID, 0o700)
	if gs := gens(t, s, testKey); fmt.Sprint(gs) != fmt.Sprint([]string{genName(1), genName(2)}) {
		t.Errorf("generations %v", gs)
	}
	r2, d := prepare(t, s, testKey)
	if !hasDiscarded(d, g.Dir, "weights.bin is 80004 bytes") {
		t.Errorf("discarded %v", d)
	}
	if r2.Restore == nil || r2.Restore.Seq != 1 {
		t.Fatalf("restore %+v", r2.Restore)
	}
	sameSums(t, "restored", sums(t, r2.Restore.Dir), genA.want())
}

// A commit that fails at its commit point (the rename) removes the
// manifest it wrote and hands the staging directory back.
func TestCommitRenameFails(t *testing.T) {
	s, _ := newStore(t)
	r, _ := prepare(t, s, testKey)
	commit(t, s, r, genA, 2)
	writeTree(t, r.Staging, genB, taskUID, taskGID)
	mark(t, r)
	block := filepath.Join(s.KeyDir(testKey), genName(2))
	s.step = func(step string) {
		if step == "manifest-written" {
			if _, err := os.Stat(block + manifestSuffix); err != nil {
				t.Errorf("no manifest at %s: %v", step, err)
			}
			os.MkdirAll(filepath.Join(block, "in-the-way"), 0o700)
		}
	}
	g, err := s.Commit(r, "stop", 1)
	s.step = nil
	if g != nil || err == nil {
		t.Fatalf("Commit: %v, %v", g, err)
	}
	os.RemoveAll(block)
	onlyCommittedState(t, s.KeyDir(testKey), r.Staging)
	wantOwner(t, r.Staging, taskUID, taskGID, 0o700)
	sameSums(t, "staging", sums(t, r.Staging), genB.want())
	if gs := gens(t, s, testKey); len(gs) != 1 {
		t.Errorf("generations %v", gs)
	}
}

// A manifest without its generation, left by a commit on another node
// that died after Prepare tidied, keeps its number from being reused.
func TestCommitSkipsOrphanManifestNumber(t *testing.T) {
	s, _ := newStore(t)
	r, _ := prepare(t, s, testKey)
	commit(t, s, r, genA, 2)
	orphan := filepath.Join(s.KeyDir(testKey), genName(7)+manifestSuffix)
	os.WriteFile(orphan, []byte("{}"), 0o600)
	if g := commit(t, s, r, genB, 2); g.Seq != 8 {
		t.Errorf("seq %d, want 8", g.Seq)
	}
}

// A symlink where the store expects one of its own directories is never
// followed: nothing outside root is created, chowned or chmodded.
func TestPlantedSymlinks(t *testing.T) {
	requireRoot(t)
	for _, tc := range []struct {
		name string
		// plant replaces a path of the key with a symlink to out.
		plant func(t *testing.T, s *Store, r *Run, out string) (replaced string)
		// then is what the store is asked to do.
		then    func(s *Store, r *Run) error
		wantErr bool
	}{
		{"staging, Commit", plantAt(func(s *Store, r *Run) string { return r.Staging }), func(s *Store, r *Run) error {
			_, err := s.Commit(r, "stop", 1)
			return err
		}, true},
		{"staging, Reattach", plantAt(func(s *Store, r *Run) string { return r.Staging }), func(s *Store, r *Run) error {
			_, err := s.Reattach(r, taskUID, taskGID)
			return err
		}, false},
		{"staging, Prepare", plantAt(func(s *Store, r *Run) string { return r.Staging }), func(s *Store, r *Run) error {
			_, _, err := s.Prepare(testKey, taskUID, taskGID)
			return err
		}, false},
		{"generation, Prepare", plantAt(func(s *Store, r *Run) string { return filepath.Join(s.KeyDir(testKey), genName(1)) }), func(s *Store, r *Run) error {
			_, _, err := s.Prepare(testKey, taskUID, taskGID)
			return err
		}, false},
		{"key dir, Prepare", plantAt(func(s *Store, r *Run) string { return s.KeyDir(testKey) }), func(s *Store, r *Run) error {
			_, _, err := s.Prepare(testKey, taskUID, taskGID)
			return err
		}, true},
		{"key dir, Commit", plantAt(func(s *Store, r *Run) string { return s.KeyDir(testKey) }), func(s *Store, r *Run) error {
			_, err := s.Commit(r, "stop", 1)
			return err
		}, true},
		{"key dir, Reattach", plantAt(func(s *Store, r *Run) string { return s.KeyDir(testKey) }), func(s *Store, r *Run) error {
			_, err := s.Reattach(r, taskUID, taskGID)
			return err
		}, true},
		{"key dir, Remove", plantAt(func(s *Store, r *Run) string { return s.KeyDir(testKey) }), func(s *Store, r *Run) error {
			return s.Remove(testKey)
		}, true},
		{"job dir, Prepare", plantAt(func(s *Store, r *Run) string {
			return filepath.Join(s.Root(), encodeName(testKey.Namespace), encodeName(testKey.Job))
		}), func(s *Store, r *Run) error {
			_, _, err := s.Prepare(testKey, taskUID, taskGID)
			return err
		}, true},
		{"job dir, Commit", plantAt(func(s *Store, r *Run) string {
			return filepath.Join(s.Root(), encodeName(testKey.Namespace), encodeName(testKey.Job))
		}), func(s *Store, r *Run) error {
			_, err := s.Commit(r, "stop", 1)
			return err
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, tmp := newStore(t)
			r, _ := prepare(t, s, testKey)
			commit(t, s, r, genA, 2)
			writeTree(t, r.Staging, genB, taskUID, taskGID)
			mark(t, r)

			out := filepath.Join(tmp, "outside")
			os.Mkdir(out, 0o755)
			os.Chown(out, 1234, 1234)
			victim := filepath.Join(out, "victim")
			os.WriteFile(victim, []byte("v"), 0o644)
			os.Chown(victim, 1234, 1234)
			os.WriteFile(filepath.Join(out, CommitMarker), nil, 0o644)
			replaced := tc.plant(t, s, r, out)

			err := tc.then(s, r)
			if tc.wantErr != (err != nil) {
				t.Errorf("error %v, want one: %v", err, tc.wantErr)
			}
			wantOwner(t, out, 1234, 1234, 0o755)
			wantOwner(t, victim, 1234, 1234, 0o644)
			if n := names(t, out); fmt.Sprint(n) != fmt.Sprint([]string{CommitMarker, "victim"}) {
				t.Errorf("outside root now holds %v", n)
			}
			if fi, err := os.Lstat(replaced); err == nil && fi.Mode()&fs.ModeSymlink == 0 && tc.wantErr {
				t.Errorf("%s was replaced", replaced)
			}
		})
	}
}

func plantAt(path func(s *Store, r *Run) string) func(t *testing.T, s *Store, r *Run, out string) string {
	return func(t *testing.T, s *Store, r *Run, out string) string {
		p := path(s, r)
		moved := p + ".moved"
		if err := os.Rename(p, moved); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(out, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
}
