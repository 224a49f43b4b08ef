package driver

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestSettled(t *testing.T) {
	now := time.Now()
	dir := t.TempDir()
	mk := func(name string, age time.Duration) string {
		p := filepath.Join(dir, name)
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, now.Add(-age), now.Add(-age)); err != nil {
			t.Fatal(err)
		}
		return p
	}
	old, young := mk("old", orphanCgroupGrace+time.Second), mk("young", time.Second)
	tests := []struct {
		name  string
		paths []string
		want  bool
	}{
		{"old", []string{old}, true},
		{"just created, maybe another client's", []string{young}, false},
		{"one controller young", []string{old, young}, false},
		{"gone", []string{filepath.Join(dir, "gone")}, false},
		{"none", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := settled(tt.paths, now); got != tt.want {
				t.Errorf("settled = %v, want %v", got, tt.want)
			}
		})
	}
}
