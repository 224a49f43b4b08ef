package wiretest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/hashicorp/go-plugin"

	"github.com/nomad-gpu/nomad-gpu/wire/base"
)

// BuildBinary builds the main package in the current directory (a test's
// own cmd/ folder) into a temporary directory, for TestMain; call the
// returned function to remove it.
func BuildBinary(name string) (path string, cleanup func(), err error) {
	dir, err := os.MkdirTemp("", name+"-wire")
	if err != nil {
		return "", nil, err
	}
	path = filepath.Join(dir, name)
	build := exec.Command("go", "build", "-o", path, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	return path, func() { os.RemoveAll(dir) }, nil
}

// Start launches the binary as the Nomad client does and returns the client
// and a dispenser for the plugin-set keys ("base", "device", "driver"); the
// plugin is killed when the test ends.
func Start(t testing.TB, binary string, set map[string]plugin.Plugin) (*plugin.Client, plugin.ClientProtocol) {
	t.Helper()
	c, err := base.Launch(binary, nil, set, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Kill)
	rpc, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	return c, rpc
}
