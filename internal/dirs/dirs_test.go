package dirs

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestMkdirAll(t *testing.T) {
	for _, tc := range []struct {
		name     string
		existing os.FileMode // 0: none made beforehand
		perm     os.FileMode
	}{
		{"fresh tree, traversable", 0, 0o755},
		{"fresh tree, search only", 0, 0o711},
		{"existing parent kept as it is", 0o700, 0o755},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The umask is the process's: no test here runs in parallel.
			old := syscall.Umask(0o077)
			defer syscall.Umask(old)
			top := filepath.Join(t.TempDir(), "a")
			if tc.existing != 0 {
				if err := os.Mkdir(top, tc.existing); err != nil {
					t.Fatal(err)
				}
				os.Chmod(top, tc.existing)
			}
			leaf := filepath.Join(top, "b", "c")
			if err := MkdirAll(leaf, tc.perm); err != nil {
				t.Fatal(err)
			}
			wantTop := tc.perm
			if tc.existing != 0 {
				wantTop = tc.existing
			}
			for path, want := range map[string]os.FileMode{top: wantTop, filepath.Dir(leaf): tc.perm, leaf: tc.perm} {
				st, err := os.Stat(path)
				if err != nil {
					t.Fatal(err)
				}
				if st.Mode().Perm() != want {
					t.Errorf("%s is mode %04o, want %04o", path, st.Mode().Perm(), want)
				}
			}
		})
	}
}

func TestMkdirAllRefusesAFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	err := MkdirAll(file, 0o755)
	if err == nil || !strings.Contains(err.Error(), file+" is not a directory") {
		t.Fatalf("error %v, want %s is not a directory", err, file)
	}
}
