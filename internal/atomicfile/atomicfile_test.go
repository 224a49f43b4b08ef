package atomicfile

import (
	"os"
	"path/filepath"
	"testing"
)

func TestWrite(t *testing.T) {
	for _, tc := range []struct {
		name  string
		write func(string, []byte, os.FileMode) error
		perm  os.FileMode
	}{
		{"durable", Write, 0o600},
		{"replace", Replace, 0o644},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			p := filepath.Join(dir, "state.json")
			for _, content := range []string{"first", "second, longer than the first"} {
				if err := tc.write(p, []byte(content), tc.perm); err != nil {
					t.Fatal(err)
				}
				got, err := os.ReadFile(p)
				if err != nil || string(got) != content {
					t.Fatalf("read %q, %v; want %q", got, err, content)
				}
			}
			st, _ := os.Stat(p)
			if st.Mode().Perm() != tc.perm {
				t.Errorf("mode %o, want %o", st.Mode().Perm(), tc.perm)
			}
			if left, _ := filepath.Glob(filepath.Join(dir, TempPattern(p))); len(left) > 0 {
				t.Errorf("temporary files left: %v", left)
			}
		})
	}
}

// A write that cannot finish leaves the old content and no temporary file.
func TestWriteFailureKeepsOld(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "state.json")
	if err := Write(p, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A directory in the way of the rename.
	blocked := filepath.Join(dir, "blocked")
	os.MkdirAll(filepath.Join(blocked, "child"), 0o755)
	if err := Write(blocked, []byte("new"), 0o600); err == nil {
		t.Fatal("replacing a non-empty directory succeeded")
	}
	if left, _ := filepath.Glob(filepath.Join(dir, TempPattern(blocked))); len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
	if got, _ := os.ReadFile(p); string(got) != "old" {
		t.Errorf("old file now %q", got)
	}
}
