package checkpoint

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// Goroutines preparing and committing different keys, and the same key,
// corrupt nothing: every commit that succeeds is a whole generation, and
// the run after them all restores an intact one.
func TestConcurrent(t *testing.T) {
	s, _ := newStore(t)
	shared := Key{Namespace: "ns", Job: "j", Group: "g", Task: "shared"}
	const rounds = 4
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	worker := func(k Key, id int) {
		defer wg.Done()
		for i := 0; i < rounds; i++ {
			r, _, err := s.Prepare(k, taskUID, taskGID)
			if err != nil {
				errs <- err
				return
			}
			c := content{"who": fmt.Sprint(id, "/", i), "sub/data": fmt.Sprint(id, i, "xxxxxxxxxx")}
			// On the shared key another worker's Prepare may discard this
			// run's staging directory at any moment: writes may fail, and
			// the commit is then superseded.
			if !writeLoose(r, c) {
				continue
			}
			g, err := s.Commit(r, "interval", 2)
			switch {
			case err == nil:
				// On the shared key another worker may have pruned it.
				b, rerr := os.ReadFile(filepath.Join(g.Dir, "who"))
				if k != shared && rerr != nil || rerr == nil && string(b) != c["who"] || g.Files != 2 {
					errs <- fmt.Errorf("generation %d: %+v, who %q, %v", g.Seq, g, b, rerr)
				}
			case k == shared && (errors.Is(err, ErrSuperseded) || errors.Is(err, ErrNoMarker) || errors.Is(err, os.ErrNotExist)):
			default:
				errs <- fmt.Errorf("%+v: %w", k, err)
			}
		}
	}
	for id := 0; id < 2; id++ {
		wg.Add(2)
		go worker(Key{Namespace: "ns", Job: "j", Group: "g", Task: "own", AllocIndex: id}, id)
		go worker(shared, 10+id)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for _, k := range []Key{shared, {Namespace: "ns", Job: "j", Group: "g", Task: "own", AllocIndex: 0}, {Namespace: "ns", Job: "j", Group: "g", Task: "own", AllocIndex: 1}} {
		r, d, err := s.Prepare(k, taskUID, taskGID)
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range d {
			if _, ok := parseGen(filepath.Base(x.Path)); ok {
				t.Errorf("%+v: a generation was discarded: %v", k, x)
			}
		}
		if k != shared && (r.Restore == nil || r.Restore.Seq != rounds) {
			t.Errorf("%+v: restore %+v, want generation %d", k, r.Restore, rounds)
		}
		if r.Restore != nil {
			if err := s.Verify(r.Restore); err != nil {
				t.Error(err)
			}
		}
		onlyCommittedState(t, s.KeyDir(k), r.Staging)
	}
}

// writeLoose is writeTree and mark that report failure instead of failing.
func writeLoose(r *Run, c content) bool {
	if err := os.Mkdir(filepath.Join(r.Staging, "sub"), 0o755); err != nil {
		return false
	}
	for p, v := range c {
		if err := os.WriteFile(filepath.Join(r.Staging, p), []byte(v), 0o644); err != nil {
			return false
		}
	}
	for _, p := range []string{"sub", "sub/data", "who"} {
		if err := os.Lchown(filepath.Join(r.Staging, p), int(taskUID), int(taskGID)); err != nil {
			return false
		}
	}
	if err := os.WriteFile(filepath.Join(r.Staging, CommitMarker), nil, 0o644); err != nil {
		return false
	}
	return os.Chown(filepath.Join(r.Staging, CommitMarker), int(taskUID), int(taskGID)) == nil
}
