package checkpoint

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// awaitPoke fails the test if w reports nothing for far longer than
// inotify ever takes: a missed event, not a slow one.
func awaitPoke(t *testing.T, w *MarkerWatch, what string) {
	t.Helper()
	select {
	case <-w.C():
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: no event", what)
	}
}

// A watch reports the marker created in place or renamed into place, and,
// re-armed, the next run's marker in the fresh staging directory a commit
// leaves at the same path.
func TestMarkersReportTheCommitMarker(t *testing.T) {
	s, _ := newStore(t)
	r, _, err := s.Prepare(testKey, taskUID, taskGID)
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewMarkers()
	if err != nil {
		t.Skipf("no inotify here: %v", err)
	}
	defer m.Close()
	w := m.Watch(r)
	defer w.Close()
	if !w.Armed() {
		t.Fatal("the staging directory is not watched")
	}

	writeTree(t, r.Staging, content{"a": "1", CommitMarker: ""}, taskUID, taskGID)
	awaitPoke(t, w, "marker created")
	if _, err := s.Commit(r, "test", 2); err != nil {
		t.Fatal(err)
	}
	if !w.Rearm() {
		t.Fatal("the fresh staging directory is not watched")
	}

	writeTree(t, r.Staging, content{"a": "2", "marker.tmp": ""}, taskUID, taskGID)
	if err := os.Rename(filepath.Join(r.Staging, "marker.tmp"), filepath.Join(r.Staging, CommitMarker)); err != nil {
		t.Fatal(err)
	}
	awaitPoke(t, w, "marker renamed into place")
	if !r.CommitRequested() {
		t.Fatal("poked, but no marker")
	}

	m.Close()
	if w.Rearm() || w.Armed() {
		t.Error("a watch of closed Markers says it is armed")
	}
}

// Without Markers (no inotify), a watch is never armed and never reports:
// its caller looks for the marker instead.
func TestMarkerWatchWithoutMarkers(t *testing.T) {
	var m *Markers
	w := m.Watch(&Run{Staging: t.TempDir()})
	if w.Armed() || w.Rearm() || w.C() != nil {
		t.Error("a watch of no Markers claims to watch")
	}
	w.Close()
	if err := m.Close(); err != nil {
		t.Error(err)
	}
}

// CommitWith says the checkpoint is taken once the task cannot
// change it (its staging directory root's, its marker gone), and only then
// asks for the trigger it records.
func TestCommitWithHooks(t *testing.T) {
	s, _ := newStore(t)
	r, _, err := s.Prepare(testKey, taskUID, taskGID)
	if err != nil {
		t.Fatal(err)
	}
	writeTree(t, r.Staging, content{"a": "1", CommitMarker: ""}, taskUID, taskGID)
	var steps []string
	g, err := s.CommitWith(r, 2, CommitHooks{
		Taken: func() {
			steps = append(steps, "taken")
			var st syscall.Stat_t
			if err := syscall.Stat(r.Staging, &st); err != nil || st.Uid != 0 || st.Mode&0o077 != 0 {
				t.Errorf("taken while the staging directory is %v, uid %d, mode %o: the task could still change it", err, st.Uid, st.Mode&0o777)
			}
			if r.CommitRequested() {
				t.Error("taken with the marker still there")
			}
		},
		Trigger: func() string { steps = append(steps, "trigger"); return "preempted by alloc 1a2b3c4d" },
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(steps, ","); got != "taken,trigger" {
		t.Errorf("hooks called %q, want taken,trigger", got)
	}
	if g.Trigger != "preempted by alloc 1a2b3c4d" {
		t.Errorf("trigger %q recorded", g.Trigger)
	}
}
