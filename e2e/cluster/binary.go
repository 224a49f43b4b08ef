package cluster

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/nomad-gpu/nomad-gpu/internal/testenv"
)

// NomadBinary returns the nomad binary to run: $NOMAD_BINARY if set, else
// `nomad` found on PATH. If there is none it skips the test with one line.
// A NOMAD_BINARY that is set but not executable fails the test, since that is
// a configuration mistake rather than an absent tool.
func NomadBinary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("NOMAD_BINARY"); p != "" {
		abs, err := exec.LookPath(p)
		if err != nil {
			t.Fatalf("e2e: NOMAD_BINARY=%q is not an executable: %v", p, err)
		}
		if abs, err = filepath.Abs(abs); err != nil {
			t.Fatalf("e2e: NOMAD_BINARY=%q: %v", p, err)
		}
		return abs
	}
	p, err := exec.LookPath("nomad")
	if err != nil {
		testenv.Skip(t, testenv.Nomad, "e2e: no nomad binary (set NOMAD_BINARY or put nomad on PATH)")
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		t.Fatalf("e2e: nomad binary %q: %v", p, err)
	}
	return abs
}

// RepoRoot returns the root of this repository (the directory holding
// go.mod), found by walking up from the test's working directory.
func RepoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatalf("e2e: getwd: %v", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatalf("e2e: no go.mod above the working directory")
		}
		dir = parent
	}
}

// BinDir returns the repository's bin/ directory, where `make build` puts
// the autoscaler plugins and the CLI. It does not check that any binary is
// there: use RequireBinary for that.
func BinDir(t testing.TB) string {
	t.Helper()
	return filepath.Join(RepoRoot(t), "bin")
}

// PluginDir returns bin/plugins, where `make build` puts the Nomad plugins
// and nothing else; pass it as ClientOptions.PluginDir.
func PluginDir(t testing.TB) string {
	t.Helper()
	return filepath.Join(BinDir(t), "plugins")
}

// RequirePlugin returns the path of the Nomad plugin binary name in
// PluginDir, and fails the test (it does not skip: e2e runs after `make
// build`) when it is missing.
func RequirePlugin(t testing.TB, name string) string {
	t.Helper()
	return requireExecutable(t, filepath.Join(PluginDir(t), name))
}

// RequireBinary is RequirePlugin for a binary at rel under BinDir:
// "nomad-gpu", "gpu-queue", "libexec/nomad-driver-gpu-supervisor".
func RequireBinary(t testing.TB, rel string) string {
	t.Helper()
	return requireExecutable(t, filepath.Join(BinDir(t), rel))
}

func requireExecutable(t testing.TB, p string) string {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
		t.Fatalf("e2e: binary %s is missing or not executable; run `make build` first", p)
	}
	return p
}
