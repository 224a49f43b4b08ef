package checkpoint

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/nomad-gpu/nomad-gpu/internal/testenv"
)

// The task's user in most tests: nobody.
const (
	taskUID uint32 = 65534
	taskGID uint32 = 65534
)

func requireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Skip(t, testenv.Root, "needs root: the store chowns directories to task users")
	}
}

// newStore opens a store at <tmp>/root and returns it and <tmp>.
func newStore(t testing.TB) (*Store, string) {
	t.Helper()
	requireRoot(t)
	tmp := t.TempDir()
	s, err := Open(filepath.Join(tmp, "root"))
	if err != nil {
		t.Fatal(err)
	}
	return s, tmp
}

// content is a checkpoint as the task writes it: a path ending in "/" is
// a directory, anything else a file with that content.
type content map[string]string

// writeTree writes c below dir as the task would: every entry is created
// (by the test, as root) and then chowned to uid:gid.
func writeTree(t testing.TB, dir string, c content, uid, gid uint32) {
	t.Helper()
	paths := make([]string, 0, len(c))
	for p := range c {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	chown := func(p string) {
		if err := os.Lchown(p, int(uid), int(gid)); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range paths {
		full := filepath.Join(dir, p)
		// Parents the task made along the way.
		rel := filepath.Dir(strings.TrimSuffix(p, "/"))
		for parent := rel; parent != "."; parent = filepath.Dir(parent) {
			pp := filepath.Join(dir, parent)
			if _, err := os.Lstat(pp); errors.Is(err, fs.ErrNotExist) {
				if err := os.MkdirAll(pp, 0o755); err != nil {
					t.Fatal(err)
				}
			}
		}
		for parent := rel; parent != "."; parent = filepath.Dir(parent) {
			chown(filepath.Join(dir, parent))
		}
		if strings.HasSuffix(p, "/") {
			if err := os.MkdirAll(full, 0o755); err != nil {
				t.Fatal(err)
			}
		} else if err := os.WriteFile(full, []byte(c[p]), 0o644); err != nil {
			t.Fatal(err)
		}
		chown(full)
	}
}

// mark creates the task's COMMIT marker.
func mark(t testing.TB, r *Run) {
	t.Helper()
	p := filepath.Join(r.Staging, CommitMarker)
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(p, int(r.uid), int(r.gid)); err != nil {
		t.Fatal(err)
	}
}

// sums is what a tree holds: every file's SHA-256 and every directory
// (as "dir"), by path relative to the tree's top.
func sums(t testing.TB, dir string) map[string]string {
	t.Helper()
	got := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == dir {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		switch {
		case d.IsDir():
			got[rel+"/"] = "dir"
		case d.Type().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			got[rel] = sha(string(b))
		default:
			got[rel] = "type " + d.Type().String()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func sha(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// want is the sums a tree holding c has.
func (c content) want() map[string]string {
	w := map[string]string{}
	for p, v := range c {
		if strings.HasSuffix(p, "/") {
			w[p] = "dir"
		} else {
			w[p] = sha(v)
		}
		for parent := filepath.Dir(strings.TrimSuffix(p, "/")); parent != "."; parent = filepath.Dir(parent) {
			w[parent+"/"] = "dir"
		}
	}
	return w
}

func (c content) bytesAndFiles() (int64, int) {
	var b int64
	n := 0
	for p, v := range c {
		if !strings.HasSuffix(p, "/") {
			b += int64(len(v))
			n++
		}
	}
	return b, n
}

func sameSums(t testing.TB, what string, got, want map[string]string) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d entries %v, want %d %v", what, len(got), keys(got), len(want), keys(want))
		return
	}
	for p, w := range want {
		if got[p] != w {
			t.Errorf("%s: %s is %q, want %q", what, p, got[p], w)
		}
	}
}

func keys(m map[string]string) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// owner is path's (not followed) uid, gid and permission bits.
func owner(t testing.TB, p string) (uid, gid uint32, mode os.FileMode) {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return st.Uid, st.Gid, fi.Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
}

func wantOwner(t testing.TB, p string, uid, gid uint32, mode os.FileMode) {
	t.Helper()
	u, g, m := owner(t, p)
	if u != uid || g != gid || m != mode {
		t.Errorf("%s is %d:%d %o, want %d:%d %o", p, u, g, m, uid, gid, mode)
	}
}

// names lists dir.
func names(t testing.TB, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var n []string
	for _, e := range es {
		n = append(n, e.Name())
	}
	return n
}

// commit marks the run's staging directory holding c and commits it.
func commit(t testing.TB, s *Store, r *Run, c content, keep int) *Generation {
	t.Helper()
	writeTree(t, r.Staging, c, r.uid, r.gid)
	mark(t, r)
	g, err := s.Commit(r, "test", keep)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func prepare(t testing.TB, s *Store, k Key) (*Run, []Discarded) {
	t.Helper()
	r, d, err := s.Prepare(k, taskUID, taskGID)
	if err != nil {
		t.Fatal(err)
	}
	return r, d
}

// gens lists the key's generation directories, by seq.
func gens(t testing.TB, s *Store, k Key) []string {
	t.Helper()
	var g []string
	for _, n := range names(t, s.KeyDir(k)) {
		if _, ok := parseGen(n); ok {
			g = append(g, n)
		}
	}
	sort.Strings(g)
	return g
}

// onlyCommittedState fails unless the key's directory holds nothing but
// lock, state.json, generations with their manifests and at most the one
// staging directory given.
func onlyCommittedState(t testing.TB, dir, staging string) {
	t.Helper()
	all := map[string]bool{}
	for _, n := range names(t, dir) {
		all[n] = true
	}
	for n := range all {
		switch {
		case n == lockName || n == stateName:
		case n == filepath.Base(staging):
		case strings.HasSuffix(n, manifestSuffix):
			if _, ok := parseGen(strings.TrimSuffix(n, manifestSuffix)); !ok || !all[strings.TrimSuffix(n, manifestSuffix)] {
				t.Errorf("stray manifest %s", n)
			}
		default:
			if _, ok := parseGen(n); !ok {
				t.Errorf("stray entry %s in %s", n, dir)
			} else if !all[n+manifestSuffix] {
				t.Errorf("generation %s without its manifest", n)
			}
		}
	}
}

func hasDiscarded(ds []Discarded, path, reason string) bool {
	for _, d := range ds {
		if d.Path == path && strings.Contains(d.Reason, reason) {
			return true
		}
	}
	return false
}
