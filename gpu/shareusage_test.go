package gpu

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestShareUsageFile(t *testing.T) {
	root := t.TempDir()
	const g = "GPU-a"
	path := ShareUsagePath(root, g)
	if path != filepath.Join(root, g, "nomad-gpu-share-usage.json") {
		t.Fatalf("path %q", path)
	}
	if u, err := ReadShareUsage(path); err != nil || u.Shares != nil {
		t.Fatalf("missing file: %+v, %v; want no usage, no error", u, err)
	}
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	want := ShareUsage{UpdatedAt: now, Shares: map[string]uint64{g + "-mps-0": 1000, g + "-mps-1": 0}}
	if err := WriteShareUsage(path, want); err != nil {
		t.Fatal(err)
	}
	got, err := ReadShareUsage(path)
	if err != nil || !got.UpdatedAt.Equal(now) || len(got.Shares) != 2 || got.Shares[g+"-mps-0"] != 1000 {
		t.Fatalf("read back %+v, %v", got, err)
	}

	// The pipe directory belongs to the tasks' user: what they may put
	// there is refused, never followed, never blocks the reader.
	other := t.TempDir()
	secret := filepath.Join(other, "secret")
	if err := os.WriteFile(secret, []byte(`{"shares":{"x":1}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		setup func(t *testing.T, path string)
		want  string
	}{
		{"symlink", func(t *testing.T, p string) {
			if err := os.Symlink(secret, p); err != nil {
				t.Fatal(err)
			}
		}, "symbolic link"},
		{"fifo", func(t *testing.T, p string) {
			if err := syscall.Mkfifo(p, 0o666); err != nil {
				t.Skip(err)
			}
		}, "not a regular file"},
		{"directory", func(t *testing.T, p string) {
			if err := os.Mkdir(p, 0o755); err != nil {
				t.Fatal(err)
			}
		}, "not a regular file"},
		{"too large", func(t *testing.T, p string) {
			if err := os.WriteFile(p, make([]byte, maxShareUsageSize+1), 0o644); err != nil {
				t.Fatal(err)
			}
		}, "too large"},
		{"not JSON", func(t *testing.T, p string) {
			if err := os.WriteFile(p, []byte("nope"), 0o644); err != nil {
				t.Fatal(err)
			}
		}, "invalid character"},
		{"another user's file", func(t *testing.T, p string) {
			if os.Geteuid() != 0 {
				t.Skip("needs root to chown")
			}
			if err := os.WriteFile(p, []byte(`{"shares":{"x":1}}`), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(p, 65534, 65534); err != nil {
				t.Fatal(err)
			}
		}, "owned by uid 65534"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := ShareUsagePath(t.TempDir(), g)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			tc.setup(t, p)
			done := make(chan struct{})
			var u ShareUsage
			var err error
			go func() { defer close(done); u, err = ReadShareUsage(p) }()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("ReadShareUsage blocked")
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || u.Shares != nil {
				t.Errorf("ReadShareUsage = %+v, %v; want an error saying %q", u, err, tc.want)
			}
		})
	}
}
