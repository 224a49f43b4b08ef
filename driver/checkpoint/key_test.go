package checkpoint

import (
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const testRoot = "/srv/ckpt"

// keyDirOK checks the invariants KeyDir promises for one key.
func keyDirOK(t testing.TB, s *Store, k Key) string {
	t.Helper()
	dir := s.KeyDir(k)
	if !strings.HasPrefix(dir, s.root+"/") {
		t.Fatalf("%+v: %q is not below %q", k, dir, s.root)
	}
	if filepath.Clean(dir) != dir {
		t.Fatalf("%+v: %q is not clean", k, dir)
	}
	rel := strings.TrimPrefix(dir, s.root+"/")
	parts := strings.Split(rel, "/")
	if len(parts) != 5 {
		t.Fatalf("%+v: %q has %d components below root, want 5", k, rel, len(parts))
	}
	for i, c := range parts {
		switch {
		case c == "" || c == "." || c == "..":
			t.Fatalf("%+v: component %d is %q", k, i, c)
		case strings.ContainsAny(c, "/\x00"):
			t.Fatalf("%+v: component %d %q holds '/' or NUL", k, i, c)
		case len(c) > maxComponent:
			t.Fatalf("%+v: component %d is %d bytes", k, i, len(c))
		case strings.HasPrefix(c, "."):
			// Would shadow .trash-* and the atomicfile temporaries.
			t.Fatalf("%+v: component %d %q starts with '.'", k, i, c)
		}
	}
	return dir
}

var long = strings.Repeat("x", 300)

var awkwardNames = []string{
	"", ".", "..", "...", "/", "//", "../../etc", "../..", "a/../../b", "./x",
	"\x00", "a\x00b", "%", "%2E", "%%", "~", "a~b", "with space", " ", "\t\n",
	"tâche", "日本語", "\xff\xfe", "-", "_", ".hidden", ".trash-0123456789abcdef",
	"gen-00000001", "staging-0123456789abcdef", "lock", "state.json",
	long, long + "a", long + "b", strings.Repeat("/", 300), strings.Repeat("..", 200),
	strings.Repeat("é", 100), strings.Repeat("%", 100),
	// Encodings just at and around the 80-byte limit.
	strings.Repeat("y", 80), strings.Repeat("y", 81), strings.Repeat("y", 79) + "/",
	strings.Repeat("y", 26) + strings.Repeat("/", 18), strings.Repeat("y", 46) + "/" + long,
}

func TestKeyDirInvariants(t *testing.T) {
	s := &Store{root: testRoot}
	seen := map[string]Key{}
	var ks []Key
	for _, n := range awkwardNames {
		for field := 0; field < 4; field++ {
			k := Key{Namespace: "ns", Job: "job", Group: "g", Task: "t"}
			switch field {
			case 0:
				k.Namespace = n
			case 1:
				k.Job = n
			case 2:
				k.Group = n
			case 3:
				k.Task = n
			}
			ks = append(ks, k)
		}
		ks = append(ks, Key{Namespace: n, Job: n, Group: n, Task: n, AllocIndex: len(n)})
	}
	ks = append(ks, Key{AllocIndex: -1}, Key{AllocIndex: 1 << 40}, Key{})
	for _, k := range ks {
		dir := keyDirOK(t, s, k)
		if other, ok := seen[dir]; ok && other != k {
			t.Errorf("%+v and %+v share %s", k, other, dir)
		}
		seen[dir] = k
	}
}

func TestEncodeName(t *testing.T) {
	for _, tc := range []struct{ name, want string }{
		{"", "%"},
		{"web", "web"},
		{"A-z_0.9", "A-z_0.9"},
		{".", "%2E"},
		{"..", "%2E."},
		{"../../etc", "%2E.%2F..%2Fetc"},
		{"/", "%2F"},
		{"a\x00b", "a%00b"},
		{"%", "%25"},
		{"a b", "a%20b"},
		{"~", "%7E"},
		{"é", "%C3%A9"},
		{"\xff", "%FF"},
	} {
		if got := encodeName(tc.name); got != tc.want {
			t.Errorf("encodeName(%q) = %q, want %q", tc.name, got, tc.want)
		}
	}
	// Cut names: at most 80 bytes, '~' and 32 hex digits, never a %XX cut.
	for _, n := range []string{long, long + "a", strings.Repeat("é", 100), strings.Repeat("y", 46) + "/" + long, strings.Repeat("y", 81)} {
		e := encodeName(n)
		pre, hash, ok := strings.Cut(e, "~")
		if !ok || len(e) > maxComponent || len(hash) != hashDigits || strings.Trim(hash, "0123456789abcdef") != "" {
			t.Errorf("encodeName(%q...) = %q", n[:10], e)
			continue
		}
		if i := strings.LastIndex(pre, "%"); i >= 0 && i+3 > len(pre) {
			t.Errorf("encodeName cut %q inside an escape", pre)
		}
		if len(pre) > maxComponent-1-hashDigits {
			t.Errorf("prefix %q is %d bytes", pre, len(pre))
		}
		// The prefix is the longest run of whole escapes of at most 47 bytes.
		full, best := "", ""
		for i := 0; i < len(n); i++ {
			if len(full) <= maxComponent-1-hashDigits {
				best = full
			}
			c := n[i]
			if plain(c) || c == '.' && i > 0 {
				full += string(c)
			} else {
				full += "%" + strings.ToUpper(strconv.FormatUint(uint64(c)|0x100, 16)[1:])
			}
		}
		if pre != best {
			t.Errorf("cut prefix %q, want %q", pre, best)
		}
		if want := sha(n)[:hashDigits]; hash != want {
			t.Errorf("cut hash %s, want %s", hash, want)
		}
	}
	if encodeName(long+"a") == encodeName(long+"b") {
		t.Error("two long names that differ past the cut encode alike")
	}
	if e := encodeName(strings.Repeat("y", 80)); e != strings.Repeat("y", 80) {
		t.Errorf("an 80-byte name was changed to %q", e)
	}
	// Uncut encodings decode back, which makes the encoding injective; a
	// cut one is known for cut.
	for _, n := range awkwardNames {
		e := encodeName(n)
		d, ok := decodeName(e)
		if cut := strings.Contains(e, "~"); ok == cut || ok && d != n {
			t.Errorf("encodeName(%q) = %q decodes to %q, %v", n, e, d, ok)
		}
	}
	// What encodeName never makes is no name.
	for _, bad := range []string{"%2", "%zz", "%2e", "a%", "%41"} {
		if d, ok := decodeName(bad); ok {
			t.Errorf("decodeName(%q) = %q, true; want false", bad, d)
		}
	}
}

// FuzzKeyDir checks KeyDir's invariants on two keys and that they share a
// directory only if they are equal.
func FuzzKeyDir(f *testing.F) {
	for i, n := range awkwardNames {
		m := awkwardNames[(i+1)%len(awkwardNames)]
		f.Add(n, "job", "g", "t", 0, m, "job", "g", "t", 0)
		f.Add("ns", n, n, n, i, "ns", n, n, n, i+1)
		f.Add(n, n, n, n, 0, n, n, n, m, 0)
	}
	f.Add(long+"a", "j", "g", "t", 0, long+"b", "j", "g", "t", 0)
	f.Add("a/b", "c", "g", "t", 0, "a", "b/c", "g", "t", 0)
	f.Add("a", "", "g", "t", 0, "a%", "", "g", "t", 0)
	f.Add("%", "j", "g", "t", 0, "", "j", "g", "t", 0)
	f.Fuzz(func(t *testing.T, ns, job, group, task string, idx int, ns2, job2, group2, task2 string, idx2 int) {
		s := &Store{root: testRoot}
		k1 := Key{ns, job, group, task, idx}
		k2 := Key{ns2, job2, group2, task2, idx2}
		d1, d2 := keyDirOK(t, s, k1), keyDirOK(t, s, k2)
		if (d1 == d2) != (k1 == k2) {
			t.Fatalf("%+v -> %s, %+v -> %s", k1, d1, k2, d2)
		}
		for _, n := range []string{ns, job, group, task} {
			if d, ok := decodeName(encodeName(n)); ok && d != n {
				t.Fatalf("%q encodes to %q, which decodes to %q", n, encodeName(n), d)
			}
		}
	})
}

// Prepare on awkward keys creates nothing outside root.
func TestPrepareStaysBelowRoot(t *testing.T) {
	s, tmp := newStore(t)
	var ks []Key
	for i, n := range awkwardNames {
		ks = append(ks, Key{Namespace: n, Job: "../" + n, Group: n + "/..", Task: n, AllocIndex: i})
	}
	dirs := map[string]bool{}
	for _, k := range ks {
		r, _ := prepare(t, s, k)
		if filepath.Dir(r.Staging) != s.KeyDir(k) {
			t.Fatalf("staging %s is not in %s", r.Staging, s.KeyDir(k))
		}
		if dirs[s.KeyDir(k)] {
			t.Fatalf("%s used twice", s.KeyDir(k))
		}
		dirs[s.KeyDir(k)] = true
		wantOwner(t, s.KeyDir(k), 0, 0, 0o711)
	}
	err := filepath.WalkDir(tmp, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != tmp && p != s.root && !strings.HasPrefix(p, s.root+"/") {
			t.Errorf("%s was created outside root", p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := names(t, tmp); len(n) != 1 || n[0] != "root" {
		t.Errorf("the directory above root holds %v", n)
	}
	for _, k := range ks {
		if err := s.Remove(k); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Lstat(s.KeyDir(k)); !os.IsNotExist(err) {
			t.Errorf("Remove left %s: %v", s.KeyDir(k), err)
		}
	}
}
