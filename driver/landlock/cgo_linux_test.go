package landlock

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The plugin binary links C and the supervisor does not; a cgo binary's
// threads come from pthread_create, which is what the whole-process
// enforcement of other libraries trips on. Confining one thread and exec'ing
// must work the same in both.
func TestCgoModes(t *testing.T) {
	requireLandlock(t)
	if testing.Short() {
		t.Skip("builds a helper binary twice")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool to build the helper with")
	}
	root := t.TempDir()
	for _, f := range []string{"ro/file", "none/secret"} {
		if err := os.MkdirAll(filepath.Join(root, filepath.Dir(f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct{ cgo, name string }{{"0", "false"}, {"1", "true"}} {
		t.Run("cgo="+tc.name, func(t *testing.T) {
			if tc.cgo == "1" {
				cc := "cc"
				if out, err := exec.Command(goTool, "env", "CC").Output(); err == nil && len(strings.Fields(string(out))) > 0 {
					cc = strings.Fields(string(out))[0]
				}
				if _, err := exec.LookPath(cc); err != nil {
					t.Skipf("no C compiler (%s) for a cgo build", cc)
				}
			}
			bin := filepath.Join(t.TempDir(), "cgohelper")
			build := exec.Command(goTool, "build", "-o", bin, "./testdata/cgohelper")
			build.Env = append(os.Environ(), "CGO_ENABLED="+tc.cgo)
			if out, err := build.CombinedOutput(); err != nil {
				t.Fatalf("go build: %v\n%s", err, out)
			}
			out, err := exec.Command(bin, "restrict", root).CombinedOutput()
			if err != nil {
				t.Fatalf("helper: %v\n%s", err, out)
			}
			want := "cgo=" + tc.name + " thread: allowed=ok denied=permission denied other-thread-denied=ok\n" +
				"exec: allowed=ok denied=permission denied\n"
			if string(out) != want {
				t.Errorf("helper said\n%s\nwant\n%s", out, want)
			}
		})
	}
}
