// Package testenv lets a test skip when the machine lacks something it
// needs (root, cgroups, a nomad binary, …), while a run that is known to
// have it can forbid the skip: NOMAD_GPU_REQUIRE names what the machine has,
// and a test skipping for want of one of those fails instead. CI sets it
// (.ci/run), so a test that quietly stops running there is caught; a plain
// `make test` on a fresh machine still passes, with its skips listed.
//
//	NOMAD_GPU_REQUIRE=root,cgroups,nomad make test
//	NOMAD_GPU_REQUIRE=all make test
package testenv

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
)

// RequireEnv names the environment variable listing what must not be
// skipped for.
const RequireEnv = "NOMAD_GPU_REQUIRE"

// What a test may need. Each is one word in NOMAD_GPU_REQUIRE.
const (
	Root       = "root"             // euid 0
	Cgroups    = "cgroups"          // a cgroup hierarchy the tests can create groups in
	PIDNS      = "pidns"            // private PID namespaces
	Landlock   = "landlock"         // a Landlock LSM
	Mknod      = "mknod"            // making device nodes
	Python3    = "python3"          // a python3 on PATH
	Nomad      = "nomad"            // a nomad binary ($NOMAD_BINARY or PATH)
	Autoscaler = "nomad-autoscaler" // a nomad-autoscaler binary
	Prometheus = "prometheus"       // prometheus and promtool
	Build      = "build"            // the binaries of `make build` in bin/
	Consul     = "consul"           // a consul binary
)

// Needs are every need, in the order the skip summary lists them.
var Needs = []string{Root, Cgroups, PIDNS, Landlock, Mknod, Python3, Nomad, Autoscaler, Prometheus, Build, Consul}

// Required reports whether NOMAD_GPU_REQUIRE forbids skipping for want of
// need ("all" forbids every need).
func Required(need string) bool {
	for _, w := range strings.Split(os.Getenv(RequireEnv), ",") {
		w = strings.TrimSpace(w)
		if w == need || w == "all" {
			return true
		}
	}
	return false
}

// Skip skips t because the machine lacks need, saying why; or, when
// NOMAD_GPU_REQUIRE names need, fails it: that run was meant to have it.
// The skip line starts with "needs <need>:", which the skip summary of
// `make test` groups by.
func Skip(t testing.TB, need string, why ...any) {
	t.Helper()
	msg := strings.TrimSuffix(fmt.Sprintln(why...), "\n")
	if Required(need) {
		t.Fatalf("%s=%s: this machine should have %s, but: %s", RequireEnv, os.Getenv(RequireEnv), need, msg)
	}
	t.Skipf("needs %s: %s", need, msg)
}

// Skipf is Skip with a format.
func Skipf(t testing.TB, need, format string, args ...any) {
	t.Helper()
	Skip(t, need, fmt.Sprintf(format, args...))
}

// CheckRequire fails t when NOMAD_GPU_REQUIRE names a need this package
// does not know: a typo there would otherwise forbid nothing.
func CheckRequire(t testing.TB) {
	t.Helper()
	for _, w := range strings.Split(os.Getenv(RequireEnv), ",") {
		if w = strings.TrimSpace(w); w != "" && w != "all" && !slices.Contains(Needs, w) {
			t.Errorf("%s: unknown need %q; allowed: all or %s", RequireEnv, w, strings.Join(Needs, ", "))
		}
	}
}
