package checkpoint

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// The environment of a TestHelperCommitCrash child.
const (
	envRoot = "CHECKPOINT_CRASH_ROOT"
	envStep = "CHECKPOINT_CRASH_STEP"
	envNth  = "CHECKPOINT_CRASH_NTH"
)

// genZ is committed before genA, so that committing genB with keep 1
// prunes it (genA, restored from, stays while its run lives).
var genZ = content{"old": "zzz", "sub/old": "z"}

// TestCommitCrash kills a process committing B over A at each step of the
// commit, and checks that the next Prepare restores exactly A (killed
// before the commit point) or exactly B (at it or after).
func TestCommitCrash(t *testing.T) {
	requireRoot(t)
	bFiles := 0
	for p := range genB {
		if p[len(p)-1] != '/' {
			bFiles++
		}
	}
	// Sealing touches every file and directory of B, and its top.
	bEntries := len(genB.want()) + 1
	for _, tc := range []struct {
		step string
		nth  int
		// committed: B is what the next run restores.
		committed bool
	}{
		{"frozen", 1, false},
		{"marker-removed", 1, false},
		{"file-synced", 1, false},
		{"file-synced", bFiles / 2, false},
		{"file-synced", bFiles, false},
		{"collected", 1, false},
		{"manifest-written", 1, false},
		{"renamed", 1, true},
		{"synced", 1, true},
		{"entry-sealed", 1, true},
		{"entry-sealed", bEntries / 2, true},
		{"entry-sealed", bEntries - 1, true},
		{"sealed", 1, true},
		{"staging-created", 1, true},
		{"trash-renamed", 1, true},
		{"pruned", 1, true},
		// The task killed mid-write, before or after marking.
		{"mid-write", 1, false},
		{"mid-write-marked", 1, false},
	} {
		t.Run(fmt.Sprintf("%s#%d", tc.step, tc.nth), func(t *testing.T) {
			s, _ := newStore(t)
			r, _ := prepare(t, s, testKey)
			commit(t, s, r, genZ, 2)
			commit(t, s, r, genA, 2)

			cmd := exec.Command(os.Args[0], "-test.run=^TestHelperCommitCrash$", "-test.count=1")
			cmd.Env = append(os.Environ(), envRoot+"="+s.Root(), envStep+"="+tc.step, envNth+"="+strconv.Itoa(tc.nth))
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || !ee.Sys().(syscall.WaitStatus).Signaled() || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Fatalf("the child was to die of SIGKILL at %s #%d: %v\n%s", tc.step, tc.nth, err, out)
			}

			s2, err := Open(s.Root())
			if err != nil {
				t.Fatal(err)
			}
			r2, d, err := s2.Prepare(testKey, taskUID, taskGID)
			if err != nil {
				t.Fatal(err)
			}
			if r2.Restore == nil {
				t.Fatalf("nothing to restore; discarded %v", d)
			}
			want, seq := genA, 2
			if tc.committed {
				want, seq = genB, 3
			}
			if r2.Restore.Seq != seq {
				t.Errorf("restored generation %d, want %d; discarded %v", r2.Restore.Seq, seq, d)
			}
			sameSums(t, "the restored generation", sums(t, r2.Restore.Dir), want.want())
			if err := s2.Verify(r2.Restore); err != nil {
				t.Error(err)
			}
			checkSealed(t, r2.Restore.Dir, taskUID, taskGID)
			bytes, files := want.bytesAndFiles()
			if r2.Restore.Bytes != bytes || r2.Restore.Files != files {
				t.Errorf("restore %+v, want %d bytes in %d files", r2.Restore, bytes, files)
			}
			dir := s2.KeyDir(testKey)
			onlyCommittedState(t, dir, r2.Staging)
			// Every generation left is intact.
			for _, g := range gens(t, s2, testKey) {
				m, err := readManifest(filepath.Join(dir, g+manifestSuffix))
				if err != nil {
					t.Fatal(err)
				}
				if err := s2.Verify(m.generation(filepath.Join(dir, g))); err != nil {
					t.Error(err)
				}
			}
			if reason := map[string]string{"mid-write": "never marked", "mid-write-marked": "marked COMMIT that was never committed"}[tc.step]; reason != "" && !hasDiscarded(d, stagingOf(d), reason) {
				t.Errorf("discarded %v, want the half-written staging directory: %s", d, reason)
			}
			if !tc.committed && !strings.HasPrefix(tc.step, "mid-write") && !hasDiscarded(d, stagingOf(d), "its commit was interrupted") {
				t.Errorf("discarded %v, want the frozen staging directory", d)
			}
			for _, x := range d {
				if x.Path == filepath.Join(dir, genName(3)) {
					t.Errorf("generation 3 was discarded: %s", x.Reason)
				}
			}
			// And the store goes on: the new run commits.
			g := commit(t, s2, r2, content{"next": "n"}, 1)
			if g.Seq <= seq {
				t.Errorf("next seq %d after %d", g.Seq, seq)
			}
		})
	}
}

// stagingOf is the staging directory among d.
func stagingOf(d []Discarded) string {
	for _, x := range d {
		if isStagingName(filepath.Base(x.Path)) {
			return x.Path
		}
	}
	return ""
}

// TestHelperCommitCrash is the child of TestCommitCrash: it prepares the
// key (restoring A), writes B, marks it and commits, and SIGKILLs itself
// at the step it is told. It does nothing when not run as that child.
func TestHelperCommitCrash(t *testing.T) {
	root := os.Getenv(envRoot)
	if root == "" {
		t.Skip("the child of TestCommitCrash")
	}
	step := os.Getenv(envStep)
	nth, _ := strconv.Atoi(os.Getenv(envNth))
	die := func() { syscall.Kill(os.Getpid(), syscall.SIGKILL) }
	s, err := Open(root)
	if err != nil {
		t.Fatal(err)
	}
	r, _, err := s.Prepare(testKey, taskUID, taskGID)
	if err != nil {
		t.Fatal(err)
	}
	if r.Restore == nil || r.Restore.Seq != 2 {
		t.Fatalf("restore %+v", r.Restore)
	}
	switch step {
	case "mid-write", "mid-write-marked":
		writeTree(t, r.Staging, content{"step": "3000\n", "opt/adam.bin": "n"}, taskUID, taskGID)
		if step == "mid-write-marked" {
			mark(t, r)
		}
		f, err := os.Create(filepath.Join(r.Staging, "weights.bin"))
		if err != nil {
			t.Fatal(err)
		}
		f.Write([]byte(genB["weights.bin"][:1000]))
		die()
	}
	writeTree(t, r.Staging, genB, taskUID, taskGID)
	mark(t, r)
	n := 0
	s.step = func(at string) {
		if at == step {
			if n++; n == nth {
				die()
			}
		}
	}
	if _, err := s.Commit(r, "crash", 1); err != nil {
		t.Fatal(err)
	}
	t.Fatalf("the commit never reached %s #%d", step, nth)
}
