package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

func TestRequireEnvIsValid(t *testing.T) { CheckRequire(t) }

func TestRequired(t *testing.T) {
	for _, tc := range []struct {
		env, need string
		want      bool
	}{
		{"", Root, false},
		{"root", Root, true},
		{"cgroups, root", Root, true},
		{"rootless", Root, false},
		{"all", Nomad, true},
		{"nomad", Root, false},
	} {
		t.Setenv(RequireEnv, tc.env)
		if got := Required(tc.need); got != tc.want {
			t.Errorf("%s=%q: Required(%q) = %v, want %v", RequireEnv, tc.env, tc.need, got, tc.want)
		}
	}
}

// TestSkip runs this test binary again with a test that skips for want of
// root: it is skipped with the "needs root:" line, or fails when
// NOMAD_GPU_REQUIRE names root.
func TestSkip(t *testing.T) {
	if os.Getenv("TESTENV_CHILD") != "" {
		Skip(t, Root, "no", "root here")
		return
	}
	for _, tc := range []struct {
		require string
		fails   bool
		want    string
	}{
		{"", false, "needs root: no root here"},
		{"nomad", false, "needs root: no root here"},
		{"root", true, "NOMAD_GPU_REQUIRE=root: this machine should have root, but: no root here"},
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestSkip$", "-test.v")
		cmd.Env = append(os.Environ(), "TESTENV_CHILD=1", RequireEnv+"="+tc.require)
		out, err := cmd.CombinedOutput()
		if (err != nil) != tc.fails || !strings.Contains(string(out), tc.want) {
			t.Errorf("%s=%q: err %v, output:\n%s\nwant it to contain %q (fail: %v)", RequireEnv, tc.require, err, out, tc.want, tc.fails)
		}
	}
}

func TestCheckRequire(t *testing.T) {
	t.Setenv(RequireEnv, "root,nomda")
	ft := &fakeT{TB: t}
	CheckRequire(ft)
	if !strings.Contains(ft.msg, `unknown need "nomda"`) {
		t.Errorf("CheckRequire said %q", ft.msg)
	}
}

type fakeT struct {
	testing.TB
	msg string
}

func (f *fakeT) Helper()                           {}
func (f *fakeT) Errorf(format string, args ...any) { f.msg += fmt.Sprintf(format, args...) }
