package checkpoint

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// List finds every key with what it holds, reads keys whole from
// state.json (and, for stores written before it recorded them, from
// directory names where they were not cut), and skips what the store did
// not make; RemoveStored removes exactly one listed key.
func TestListAndRemoveStored(t *testing.T) {
	s, _ := newStore(t)
	long := Key{Namespace: "default", Job: strings.Repeat("j", 100), Group: "g", Task: "t"}
	odd := Key{Namespace: "ml", Job: "a/b c", Group: "g", Task: "t", AllocIndex: 3}
	empty := Key{Namespace: "default", Job: "fresh", Group: "g", Task: "t"}
	longKept := Key{Namespace: "default", Job: strings.Repeat("k", 100), Group: "g", Task: "t"}
	r, _ := prepare(t, s, testKey)
	before := time.Now()
	commit(t, s, r, genA, 2)
	commit(t, s, r, genZ, 2)
	for _, k := range []Key{long, odd, empty, longKept} {
		prepare(t, s, k)
	}
	// A state.json may lack the key: then odd's names decode, long's were
	// cut.
	for _, k := range []Key{long, odd} {
		forgetKey(t, s.KeyDir(k))
	}
	os.MkdirAll(filepath.Join(s.Root(), "default", ".trash-0123456789abcdef", "g", "t", "0"), 0o700)
	os.WriteFile(filepath.Join(s.Root(), "README"), nil, 0o600)

	got, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	bytes, _ := genZ.bytesAndFiles()
	abytes, _ := genA.bytesAndFiles()
	want := map[string]Stored{
		s.KeyDir(testKey): {Key: testKey, Exact: true, Generations: 2, Bytes: bytes + abytes},
		s.KeyDir(long):    {Key: Key{Namespace: "default", Job: encodeName(long.Job), Group: "g", Task: "t"}, Exact: false},
		s.KeyDir(odd):     {Key: odd, Exact: true},
		s.KeyDir(empty):   {Key: empty, Exact: true},
		// Cut names, but state.json has the key whole.
		s.KeyDir(longKept): {Key: longKept, Exact: true},
	}
	if len(got) != len(want) {
		t.Fatalf("listed %+v, want %d keys", got, len(want))
	}
	for _, st := range got {
		w, ok := want[st.Dir]
		if !ok || st.Key != w.Key || st.Exact != w.Exact || st.Generations != w.Generations || st.Bytes != w.Bytes {
			t.Errorf("listed %+v, want %+v", st, w)
		}
		if st.LastUsed.Before(before.Add(-time.Minute)) || st.LastUsed.After(time.Now()) {
			t.Errorf("%s last used %v", st.Dir, st.LastUsed)
		}
	}

	for _, st := range got {
		err := s.RemoveStored(st)
		if st.Exact != (err == nil) {
			t.Errorf("RemoveStored(%s): %v; exact %v", st.Dir, err, st.Exact)
		}
		_, statErr := os.Stat(st.Dir)
		if st.Exact != os.IsNotExist(statErr) {
			t.Errorf("after RemoveStored(%s): %v", st.Dir, statErr)
		}
	}
}

// forgetKey makes the key's state.json one written before it recorded
// the key.
func forgetKey(t *testing.T, dir string) {
	t.Helper()
	p := filepath.Join(dir, stateName)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var st map[string]any
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	delete(st, "key")
	b, _ = json.Marshal(st)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestOpenExisting(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	os.WriteFile(file, nil, 0o600)
	for _, c := range []struct{ root, want string }{
		{"relative", `"relative" is not an absolute path`},
		{filepath.Join(dir, "missing"), "no such file or directory"},
		{file, file + " is not a directory"},
		{dir, ""},
	} {
		s, err := OpenExisting(c.root)
		if c.want == "" {
			if err != nil || s.Root() != dir {
				t.Errorf("OpenExisting(%s) = %v", c.root, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("OpenExisting(%s) = %v, want %q", c.root, err, c.want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "missing")); !os.IsNotExist(err) {
		t.Error("OpenExisting created the missing root")
	}
}
