package gpu

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nomad-gpu/nomad-gpu/internal/testenv"
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
				testenv.Skip(t, testenv.Root, "needs root to chown")
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

// A reader that does not know the per-share utilisation reads a file
// with it, and a file without it reads with no utilisation (nil, told
// apart from the driver's empty map).
func TestShareUsageUtilCompat(t *testing.T) {
	root := t.TempDir()
	const g = "GPU-a"
	path := ShareUsagePath(root, g)
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	u := ShareUsage{UpdatedAt: now, Shares: map[string]uint64{g + "-mps-0": 1000}, Util: map[string]float64{g + "-mps-0": 87.5}}
	if err := WriteShareUsage(path, u); err != nil {
		t.Fatal(err)
	}
	got, err := ReadShareUsage(path)
	if err != nil || got.Util[g+"-mps-0"] != 87.5 || got.Shares[g+"-mps-0"] != 1000 {
		t.Fatalf("read back %+v, %v", got, err)
	}
	// A reader that does not know Util: the struct without it, strict about
	// nothing else.
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var old struct {
		UpdatedAt time.Time         `json:"updated_at"`
		Shares    map[string]uint64 `json:"shares"`
	}
	if err := json.Unmarshal(b, &old); err != nil || !old.UpdatedAt.Equal(now) || old.Shares[g+"-mps-0"] != 1000 {
		t.Errorf("an older reader: %+v, %v", old, err)
	}
	// Nothing measured: the key is still written.
	if err := WriteShareUsage(path, ShareUsage{UpdatedAt: now, Shares: map[string]uint64{}, Util: map[string]float64{}}); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadShareUsage(path); err != nil || got.Util == nil {
		t.Errorf("empty util: %+v, %v", got, err)
	}
	// An older driver's file.
	if err := os.WriteFile(path, []byte(`{"updated_at":"2026-12-02T10:00:00Z","shares":{"GPU-a-mps-0":1000}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadShareUsage(path); err != nil || got.Util != nil || got.Shares[g+"-mps-0"] != 1000 {
		t.Errorf("an older driver's file: %+v, %v", got, err)
	}
}
