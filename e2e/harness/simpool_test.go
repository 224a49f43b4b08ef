package harness

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRemovedNodeAllocLogs: a removed node's task log is its rotated
// files in index order (2 before 10), the task's and the kind's only; a
// log it never wrote is an error naming where it looked.
func TestRemovedNodeAllocLogs(t *testing.T) {
	r := RemovedNode{Name: "gpu-3", DataDir: t.TempDir()}
	dir := filepath.Join(r.DataDir, "alloc", "a1", "alloc", "logs")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string]string{
		"t.stdout.10": "committed=30\n", "t.stdout.2": "restored=10\n", "t.stdout.0": "started\n",
		"t.stderr.0": "noise\n", "u.stdout.0": "another task\n", "t.stdout.x": "not a part\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := r.AllocLogs("a1", "t", "stdout")
	if want := "started\nrestored=10\ncommitted=30\n"; err != nil || got != want {
		t.Errorf("logs %q, %v; want %q", got, err, want)
	}
	if _, err := r.AllocLogs("a1", "v", "stdout"); err == nil || !strings.Contains(err.Error(), "no stdout log of task v in "+dir) {
		t.Errorf("a task without a log: %v", err)
	}
	if _, err := r.AllocLogs("a2", "t", "stdout"); err == nil {
		t.Error("an allocation without a directory was read")
	}
}
