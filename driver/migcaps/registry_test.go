package migcaps

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nomad-gpu/nomad-gpu/internal/atomicfile"
	"github.com/nomad-gpu/nomad-gpu/internal/testenv"
)

// Stand-in nodes are regular files; the tests chown them, so they need root.

const (
	uidA, gidA = 1000, 1000
	uidB, gidB = 2000, 2000
)

// orig is the owner and mode stand-in nodes start with: root, a group no
// task is in, readable by neither.
var orig = attrs{UID: 0, GID: 5, Mode: 0o440}

type fixture struct {
	t     *testing.T
	caps  string
	state string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Skip(t, testenv.Root, "needs root to chown stand-in nodes")
	}
	dir := t.TempDir()
	f := &fixture{t: t, caps: filepath.Join(dir, "nvidia-caps"), state: filepath.Join(dir, "state", "migcaps.json")}
	if err := os.Mkdir(f.caps, 0o755); err != nil {
		t.Fatal(err)
	}
	return f
}

// node makes a stand-in node in the caps dir with the given owner and mode.
func (f *fixture) node(name string, a attrs) string {
	f.t.Helper()
	p := filepath.Join(f.caps, name)
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		f.t.Fatal(err)
	}
	setAttrs(f.t, p, a)
	return p
}

func setAttrs(t *testing.T, p string, a attrs) {
	t.Helper()
	if err := os.Chown(p, int(a.UID), int(a.GID)); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, os.FileMode(a.Mode)); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) open(opts ...option) *Registry {
	f.t.Helper()
	r, err := open(f.state, f.caps, append([]option{withRegularFiles()}, opts...)...)
	if err != nil {
		f.t.Fatal(err)
	}
	return r
}

func attrsAt(t *testing.T, p string) attrs {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	return attrsOf(&st)
}

func wantAttrs(t *testing.T, p string, want attrs) {
	t.Helper()
	if got := attrsAt(t, p); got != want {
		t.Fatalf("%s: uid %d gid %d mode %#o, want uid %d gid %d mode %#o",
			filepath.Base(p), got.UID, got.GID, got.Mode, want.UID, want.GID, want.Mode)
	}
}

// granted is orig given to uid/gid with u+r.
func granted(uid, gid uint32) attrs { return attrs{UID: uid, GID: gid, Mode: orig.Mode | 0o400} }

func wantHolders(t *testing.T, r *Registry, want map[string][]string) {
	t.Helper()
	got := r.Holders()
	if want == nil {
		want = map[string][]string{}
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("holders %v, want %v", got, want)
	}
}

func TestSharedNodeSameUser(t *testing.T) {
	f := newFixture(t)
	gi := f.node("nvidia-cap21", orig)  // GPU instance access: shared
	ci1 := f.node("nvidia-cap22", orig) // compute instance of task 1
	ci2 := f.node("nvidia-cap23", orig) // compute instance of task 2
	r := f.open()

	if err := r.Grant("t1", []string{gi, ci1}, uidA, gidA); err != nil {
		t.Fatal(err)
	}
	if err := r.Grant("t2", []string{gi, ci2}, uidA, gidA); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{gi, ci1, ci2} {
		wantAttrs(t, p, granted(uidA, gidA))
	}
	wantHolders(t, r, map[string][]string{"t1": {gi, ci1}, "t2": {gi, ci2}})

	if err := r.Release("t1"); err != nil {
		t.Fatal(err)
	}
	wantAttrs(t, gi, granted(uidA, gidA)) // t2 still needs it
	wantAttrs(t, ci1, orig)
	wantAttrs(t, ci2, granted(uidA, gidA))

	if err := r.Release("t2"); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{gi, ci1, ci2} {
		wantAttrs(t, p, orig)
	}
	wantHolders(t, r, nil)
	if err := r.Release("t2"); err != nil {
		t.Fatalf("second release: %v", err)
	}
	if err := r.Release("never-seen"); err != nil {
		t.Fatalf("unknown task: %v", err)
	}
}

func TestOtherUserRefused(t *testing.T) {
	for _, tc := range []struct {
		name     string
		held     attrs // the shared node's attrs before task A
		heldByA  attrs // ... and while A holds it
		holders2 bool  // a second task of A's user holds it too
	}{
		{name: "granted", held: orig, heldByA: granted(uidA, gidA)},
		{name: "granted, two holders", held: orig, heldByA: granted(uidA, gidA), holders2: true},
		{name: "owner-readable without grant", held: attrs{UID: uidA, GID: 5, Mode: 0o400}, heldByA: attrs{UID: uidA, GID: 5, Mode: 0o400}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			shared := f.node("nvidia-cap21", tc.held)
			free := f.node("nvidia-cap30", orig)
			r := f.open()
			if err := r.Grant("task-a", []string{shared}, uidA, gidA); err != nil {
				t.Fatal(err)
			}
			want := map[string][]string{"task-a": {shared}}
			if tc.holders2 {
				if err := r.Grant("task-a2", []string{shared}, uidA, gidA); err != nil {
					t.Fatal(err)
				}
				want["task-a2"] = []string{shared}
			}
			wantAttrs(t, shared, tc.heldByA)

			// free first, so the refusal also has to undo it.
			err := r.Grant("task-b", []string{free, shared}, uidB, gidB)
			if !errors.Is(err, ErrHeldByOtherUser) {
				t.Fatalf("err %v, want ErrHeldByOtherUser", err)
			}
			msg := err.Error()
			for _, s := range []string{shared, "uid 1000", "task-a", "task-b", "uid 2000", "must run as one user"} {
				if !strings.Contains(msg, s) {
					t.Errorf("error %q does not mention %q", msg, s)
				}
			}
			if tc.holders2 && !strings.Contains(msg, "tasks task-a, task-a2") {
				t.Errorf("error %q does not list both holders", msg)
			}
			wantAttrs(t, shared, tc.heldByA)
			wantAttrs(t, free, orig)
			wantHolders(t, r, want)
			wantHolders(t, f.open(), want) // and on disk
		})
	}
}

func TestAllOrNothing(t *testing.T) {
	for _, tc := range []struct {
		name string
		bad  func(f *fixture) string
		is   error
	}{
		{name: "missing", bad: func(f *fixture) string { return filepath.Join(f.caps, "nvidia-cap99") }, is: os.ErrNotExist},
		{name: "outside caps dir", bad: func(f *fixture) string { return filepath.Join(f.caps, "..", "x") }},
		{name: "directory", bad: func(f *fixture) string {
			p := filepath.Join(f.caps, "sub")
			os.Mkdir(p, 0o755)
			return p
		}},
		{name: "symlink", bad: func(f *fixture) string {
			p := filepath.Join(f.caps, "nvidia-cap98")
			os.Symlink(f.node("nvidia-cap97", orig), p)
			return p
		}},
		{name: "held by other user", is: ErrHeldByOtherUser, bad: func(f *fixture) string {
			p := f.node("nvidia-cap96", orig)
			r := f.open()
			if err := r.Grant("other", []string{p}, uidB, gidB); err != nil {
				f.t.Fatal(err)
			}
			return p
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			pre := f.node("nvidia-cap1", orig)   // held by the task before the call
			fresh := f.node("nvidia-cap2", orig) // granted by the call, then undone
			public := f.node("nvidia-cap3", attrs{UID: 0, GID: 0, Mode: 0o444})
			bad := tc.bad(f)
			r := f.open()
			if err := r.Grant("t", []string{pre}, uidA, gidA); err != nil {
				t.Fatal(err)
			}
			before := r.Holders()

			err := r.Grant("t", []string{pre, fresh, public, bad}, uidA, gidA)
			if err == nil {
				t.Fatal("grant succeeded")
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Fatalf("err %v, want %v", err, tc.is)
			}
			if !strings.Contains(err.Error(), filepath.Base(bad)) {
				t.Errorf("error %q does not name %s", err, bad)
			}
			wantAttrs(t, pre, granted(uidA, gidA))
			wantAttrs(t, fresh, orig)
			wantAttrs(t, public, attrs{UID: 0, GID: 0, Mode: 0o444})
			if got := r.Holders()["t"]; !reflect.DeepEqual(got, before["t"]) {
				t.Fatalf("t holds %v after failed grant, want %v", got, before["t"])
			}
			if got := f.open().Holders()["t"]; !reflect.DeepEqual(got, before["t"]) {
				t.Fatalf("on disk t holds %v after failed grant, want %v", got, before["t"])
			}
		})
	}
}

func TestReopenAfterRestart(t *testing.T) {
	f := newFixture(t)
	gi := f.node("nvidia-cap21", orig)
	ci := f.node("nvidia-cap22", orig)
	r := f.open()
	if err := r.Grant("t1", []string{gi, ci}, uidA, gidA); err != nil {
		t.Fatal(err)
	}
	if err := r.Grant("t2", []string{gi}, uidA, gidA); err != nil {
		t.Fatal(err)
	}

	// The file: private, versioned, and naming the original.
	fi, err := os.Stat(f.state)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("table mode %#o, want 0600", fi.Mode().Perm())
	}
	data, _ := os.ReadFile(f.state)
	var onDisk table
	if err := json.Unmarshal(data, &onDisk); err != nil {
		t.Fatal(err)
	}
	if onDisk.Version != tableVersion || onDisk.Nodes[gi].Grant == nil || onDisk.Nodes[gi].Grant.Orig != orig {
		t.Fatalf("table on disk:\n%s", data)
	}
	if tmps, _ := filepath.Glob(filepath.Join(filepath.Dir(f.state), atomicfile.TempPattern(f.state))); len(tmps) > 0 {
		t.Errorf("temp files left: %v", tmps)
	}

	r2 := f.open() // the restarted plugin
	wantHolders(t, r2, map[string][]string{"t1": {gi, ci}, "t2": {gi}})
	if err := r2.Release("t1"); err != nil {
		t.Fatal(err)
	}
	wantAttrs(t, gi, granted(uidA, gidA))
	wantAttrs(t, ci, orig)
	if err := f.open().Release("t2"); err != nil { // and again
		t.Fatal(err)
	}
	wantAttrs(t, gi, orig)
	wantHolders(t, f.open(), nil)
}

var errKilled = errors.New("killed")

// killAt returns a step hook that panics, as if the process died, at the
// n-th occurrence of step name.
func killAt(name string, n int) option {
	var mu sync.Mutex
	seen := 0
	return withStepHook(func(s string) {
		mu.Lock()
		defer mu.Unlock()
		if s == name {
			if seen++; seen == n {
				panic(errKilled)
			}
		}
	})
}

// survive runs fn, recovering the simulated kill.
func survive(t *testing.T, fn func() error) {
	t.Helper()
	defer func() {
		if v := recover(); v != nil && v != errKilled {
			panic(v)
		}
	}()
	if err := fn(); err != nil {
		t.Fatalf("before the kill: %v", err)
	}
	t.Fatal("not killed")
}

func TestKilledBetweenSteps(t *testing.T) {
	type kill struct {
		op   string // "grant" or "release"
		step string
		n    int
	}
	kills := []kill{
		{"grant", "grant:recorded", 1}, // first node recorded, not chowned
		{"grant", "grant:applied", 1},  // first node done, second not started
		{"grant", "grant:recorded", 2}, // second node recorded, not chowned
		{"grant", "grant:applied", 2},  // both done, call not returned
		{"release", "release:restored", 1},
		{"release", "release:restored", 2},
	}
	for _, k := range kills {
		for _, recovery := range []string{"release", "grant again"} {
			t.Run(fmt.Sprintf("%s %s#%d then %s", k.op, k.step, k.n, recovery), func(t *testing.T) {
				f := newFixture(t)
				n1 := f.node("nvidia-cap1", orig)
				n2 := f.node("nvidia-cap2", orig)
				paths := []string{n1, n2}
				if k.op == "release" {
					if err := f.open().Grant("t", paths, uidA, gidA); err != nil {
						t.Fatal(err)
					}
				}
				r := f.open(killAt(k.step, k.n))
				survive(t, func() error {
					if k.op == "grant" {
						return r.Grant("t", paths, uidA, gidA)
					}
					return r.Release("t")
				})

				r2 := f.open() // restarted
				if len(r2.Holders()["t"]) == 0 {
					t.Fatalf("after the kill the table lost task t: %v", r2.Holders())
				}
				if recovery == "grant again" {
					if err := r2.Grant("t", paths, uidA, gidA); err != nil {
						t.Fatal(err)
					}
					wantAttrs(t, n1, granted(uidA, gidA))
					wantAttrs(t, n2, granted(uidA, gidA))
					wantHolders(t, f.open(), map[string][]string{"t": paths})
				}
				if err := r2.Release("t"); err != nil {
					t.Fatal(err)
				}
				wantAttrs(t, n1, orig)
				wantAttrs(t, n2, orig)
				wantHolders(t, f.open(), nil)
			})
		}
	}
}

func TestGrantIdempotent(t *testing.T) {
	f := newFixture(t)
	n := f.node("nvidia-cap1", orig)
	public := f.node("nvidia-cap2", attrs{UID: 0, GID: 0, Mode: 0o444})
	r := f.open()
	for i := 0; i < 3; i++ {
		if err := r.Grant("t", []string{n, public, n + "/", filepath.Join(f.caps, ".", "nvidia-cap1")}, uidA, gidA); err != nil {
			t.Fatal(err)
		}
	}
	wantAttrs(t, n, granted(uidA, gidA))
	wantHolders(t, r, map[string][]string{"t": {n, public}})

	// Someone put the node back under the running task: granting again
	// (recovery) re-applies, and still records the true original.
	setAttrs(t, n, orig)
	if err := f.open().Grant("t", []string{n}, uidA, gidA); err != nil {
		t.Fatal(err)
	}
	wantAttrs(t, n, granted(uidA, gidA))

	if err := r.Release("t"); err != nil {
		t.Fatal(err)
	}
	wantAttrs(t, n, orig)
	wantAttrs(t, public, attrs{UID: 0, GID: 0, Mode: 0o444})
	wantHolders(t, r, nil)
}

func TestNoGrantNeeded(t *testing.T) {
	for _, tc := range []struct {
		name  string
		a     attrs
		uid   uint32
		other bool // a task of another user may share it
	}{
		{name: "world-readable", a: attrs{UID: 0, GID: 0, Mode: 0o444}, uid: uidA, other: true},
		{name: "owned by the user", a: attrs{UID: uidA, GID: 5, Mode: 0o400}, uid: uidA},
		{name: "group of the user", a: attrs{UID: 0, GID: gidA, Mode: 0o440}, uid: uidA},
		{name: "root", a: orig, uid: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			n := f.node("nvidia-cap1", tc.a)
			r := f.open()
			if err := r.Grant("t", []string{n}, tc.uid, gidA); err != nil {
				t.Fatal(err)
			}
			wantAttrs(t, n, tc.a)
			err := r.Grant("u", []string{n}, uidB, gidB)
			if tc.other || tc.uid == 0 {
				if err != nil {
					t.Fatalf("other user: %v", err)
				}
			} else if !errors.Is(err, ErrHeldByOtherUser) {
				t.Fatalf("other user: err %v, want ErrHeldByOtherUser", err)
			}
			if err := r.Release("t"); err != nil {
				t.Fatal(err)
			}
			if err := r.Release("u"); err != nil {
				t.Fatal(err)
			}
			// For root, t needed nothing and u got an ordinary grant, now undone.
			wantAttrs(t, n, tc.a)
			wantHolders(t, r, nil)
		})
	}
}

func TestNodeGoneOrReplaced(t *testing.T) {
	f := newFixture(t)
	gone := f.node("nvidia-cap1", orig)
	replaced := f.node("nvidia-cap2", orig)
	r := f.open()
	if err := r.Grant("t", []string{gone, replaced}, uidA, gidA); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(gone); err != nil {
		t.Fatal(err)
	}
	// A new node in place of the old: made before the old goes, so it
	// cannot reuse the inode.
	fresh := attrs{UID: 0, GID: 0, Mode: 0o600}
	tmp := filepath.Join(f.caps, "new")
	if err := os.WriteFile(tmp, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	setAttrs(t, tmp, fresh)
	if err := os.Rename(tmp, replaced); err != nil {
		t.Fatal(err)
	}
	if err := r.Release("t"); err != nil {
		t.Fatal(err)
	}
	wantAttrs(t, replaced, fresh) // never ours: untouched
	wantHolders(t, r, nil)
	wantHolders(t, f.open(), nil)
}

func TestPathsRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		path func(f *fixture, outside string) string
	}{
		{"dot-dot", func(f *fixture, outside string) string {
			return filepath.Join(f.caps, "..", filepath.Base(outside))
		}},
		{"dot-dot unclean", func(f *fixture, outside string) string {
			return f.caps + "/nvidia-cap1/../../" + filepath.Base(outside)
		}},
		{"absolute elsewhere", func(f *fixture, outside string) string { return outside }},
		{"relative", func(f *fixture, outside string) string { return "nvidia-cap1" }},
		{"caps dir itself", func(f *fixture, outside string) string { return f.caps }},
		{"nested", func(f *fixture, outside string) string {
			os.Mkdir(filepath.Join(f.caps, "d"), 0o755)
			return filepath.Join(f.caps, "d", "x")
		}},
		{"symlink out", func(f *fixture, outside string) string {
			p := filepath.Join(f.caps, "nvidia-cap9")
			os.Symlink(outside, p)
			return p
		}},
		{"symlink in", func(f *fixture, outside string) string {
			p := filepath.Join(f.caps, "nvidia-cap8")
			os.Symlink("nvidia-cap1", p)
			return p
		}},
		{"symlinked dir", func(f *fixture, outside string) string {
			p := filepath.Join(f.caps, "sub")
			os.Symlink(filepath.Dir(outside), p)
			return filepath.Join(p, filepath.Base(outside))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.node("nvidia-cap1", orig)
			outside := filepath.Join(filepath.Dir(f.caps), "secret")
			if err := os.WriteFile(outside, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			setAttrs(t, outside, orig)
			p := tc.path(f, outside)
			r := f.open()
			err := r.Grant("t", []string{p}, uidA, gidA)
			if err == nil {
				t.Fatalf("%s granted", p)
			}
			if !strings.Contains(err.Error(), p) && !strings.Contains(err.Error(), filepath.Clean(p)) {
				t.Errorf("error %q does not name %s", err, p)
			}
			wantAttrs(t, outside, orig)
			wantAttrs(t, filepath.Join(f.caps, "nvidia-cap1"), orig)
			wantHolders(t, r, nil)
		})
	}

	t.Run("regular file without test option", func(t *testing.T) {
		f := newFixture(t)
		n := f.node("nvidia-cap1", orig)
		r, err := Open(f.state, f.caps)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Grant("t", []string{n}, uidA, gidA); err == nil || !strings.Contains(err.Error(), "not a character device") {
			t.Fatalf("err %v, want refusal of a regular file", err)
		}
		wantAttrs(t, n, orig)
	})

	t.Run("caps dir is a symlink", func(t *testing.T) {
		f := newFixture(t)
		f.node("nvidia-cap1", orig)
		link := filepath.Join(filepath.Dir(f.caps), "caps-link")
		if err := os.Symlink(f.caps, link); err != nil {
			t.Fatal(err)
		}
		r, err := open(f.state, link, withRegularFiles())
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Grant("t", []string{filepath.Join(link, "nvidia-cap1")}, uidA, gidA); err == nil {
			t.Fatal("granted through a symlinked caps dir")
		}
		wantAttrs(t, filepath.Join(f.caps, "nvidia-cap1"), orig)
	})
}

func TestTableRefused(t *testing.T) {
	for _, tc := range []struct {
		name, content, want string
	}{
		{"newer version", `{"version": 99, "nodes": {}}`, "version 99 is newer"},
		{"version zero", `{"version": 0, "nodes": {}}`, "unknown version 0"},
		{"no version", `{"nodes": {}}`, `no "version"`},
		{"garbage", `{"version": 1,`, "unreadable"},
		{"empty", ``, "unreadable"},
		{"unknown field", `{"version": 1, "nodes": {}, "extra": 1}`, "unreadable"},
		{"node outside caps dir", `{"version": 1, "nodes": {"/etc/shadow": {"holders": {"t": 1000}}}}`, "/etc/shadow"},
		{"node without holders", `{"version": 1, "nodes": {"CAPS/nvidia-cap1": {"holders": {}}}}`, "no holders"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			content := strings.ReplaceAll(tc.content, "CAPS", f.caps)
			os.MkdirAll(filepath.Dir(f.state), 0o700)
			if err := os.WriteFile(f.state, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := open(f.state, f.caps, withRegularFiles())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one saying %q", err, tc.want)
			}
			if !strings.Contains(err.Error(), f.state) {
				t.Errorf("error %q does not name the table", err)
			}
			if got, _ := os.ReadFile(f.state); string(got) != content {
				t.Fatalf("refused table was rewritten: %s", got)
			}
		})
	}
}

func TestOpenCreates(t *testing.T) {
	f := newFixture(t)
	stale := filepath.Join(filepath.Dir(f.state), "."+filepath.Base(f.state)+".tmp-123")
	os.MkdirAll(filepath.Dir(f.state), 0o700)
	os.WriteFile(stale, []byte("half"), 0o600)
	f.open()
	data, err := os.ReadFile(f.state)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal(data, &v); err != nil || v["version"] != float64(tableVersion) {
		t.Fatalf("new table %s (%v)", data, err)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("stale temp file kept: %v", err)
	}
}

func TestChmodViaProc(t *testing.T) {
	f := newFixture(t)
	n := f.node("nvidia-cap1", orig)
	r := f.open()
	h, _, err := r.openNode(n)
	if err != nil {
		t.Fatal(err)
	}
	defer h.close()
	if err := chmodViaProc(h.fd, 0o604); err != nil {
		t.Fatal(err)
	}
	wantAttrs(t, n, attrs{UID: orig.UID, GID: orig.GID, Mode: 0o604})
}

func TestConcurrent(t *testing.T) {
	f := newFixture(t)
	var nodes []string
	for i := 0; i < 5; i++ {
		nodes = append(nodes, f.node(fmt.Sprintf("nvidia-cap%d", i), orig))
	}
	r := f.open()
	users := []uint32{uidA, uidA, uidA, uidA, uidA, uidB, uidB}
	const rounds = 25
	var wg sync.WaitGroup
	errs := make(chan error, len(users)*rounds)
	for g, uid := range users {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < rounds; i++ {
				id := fmt.Sprintf("g%d-%d", g, i)
				// Two nodes per task, overlapping between tasks.
				ps := []string{nodes[(g+i)%len(nodes)], nodes[(g*3+i*2+1)%len(nodes)]}
				err := r.Grant(id, ps, uid, uid)
				if errors.Is(err, ErrHeldByOtherUser) {
					continue
				}
				if err != nil {
					errs <- err
					return
				}
				_ = r.Holders()
				// While held, nobody may take the node from this user.
				for _, p := range ps {
					var st unix.Stat_t
					if err := unix.Stat(p, &st); err != nil {
						errs <- err
						return
					}
					if st.Uid != uid || st.Mode&0o400 == 0 {
						errs <- fmt.Errorf("%s held by %s: uid %d mode %#o", p, id, st.Uid, st.Mode&0o7777)
						return
					}
				}
				if err := r.Release(id); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for _, p := range nodes {
		wantAttrs(t, p, orig)
	}
	wantHolders(t, r, nil)
	wantHolders(t, f.open(), nil)
}
