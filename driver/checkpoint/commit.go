package checkpoint

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// CommitRequested reports whether the task has asked for its checkpoint
// to be committed: CommitMarker is in its staging directory, as a regular
// file (a symlink or directory of that name does not count).
func (r *Run) CommitRequested() bool {
	var st unix.Stat_t
	return unix.Lstat(filepath.Join(r.Staging, CommitMarker), &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG
}

// Commit turns the run's staging directory into the key's next generation,
// keeps the newest keep generations (and the one the run restored from,
// which its task may still be reading), and gives the task a fresh, empty
// staging directory at the same path. trigger, why the checkpoint was
// taken ("stop", "interval", "preempted by alloc …"), is recorded with it.
//
// It refuses, with ErrNoMarker, a staging directory without CommitMarker.
// The checkpoint may hold regular files and directories only, all owned by
// the task's uid, with names in UTF-8: anything else (a symlink, a FIFO, a
// socket, a hard link the task made to someone else's file) is refused
// with an error naming it. Other users' files are refused rather than
// skipped because sealing the generation chmods and chowns what it holds.
//
// A refused or failed commit leaves the staging directory as the task
// wrote it, except that the marker is gone; the task sees its files still
// there and may fix them and mark again. A committed one leaves the
// staging directory empty. While Commit runs the staging directory is
// root's, so the task cannot open anything in it: a task that wants to
// know how its commit went waits for the marker to go and looks whether
// its files went with it.
//
// When the error is not nil but the generation is, the checkpoint was
// committed and only what follows the commit (sealing it, the fresh
// staging directory, pruning) failed; the next Prepare finishes sealing.
func (s *Store) Commit(r *Run, trigger string, keep int) (*Generation, error) {
	return s.CommitWith(r, keep, CommitHooks{Trigger: func() string { return trigger }})
}

// CommitHooks are what CommitWith tells its caller, and asks of it, on the
// way.
type CommitHooks struct {
	// Taken, if set, is called once the checkpoint is frozen and its
	// marker removed: nothing the task does from then on changes what is
	// committed, so a stop waiting for the commit may go on while the
	// checkpoint is checked and made durable. The commit may still fail
	// or be refused after it.
	Taken func()
	// Trigger says why the checkpoint was taken. It is called after
	// Taken, when the trigger is recorded, so a caller still learning it
	// (a stop's reason comes from the Nomad API) holds up nothing before.
	Trigger func() string
}

// CommitWith is Commit, with hooks.
func (s *Store) CommitWith(r *Run, keep int, h CommitHooks) (*Generation, error) {
	if r == nil || r.store != s {
		return nil, errors.New("checkpoint: the run was not prepared by this store")
	}
	if keep < 1 {
		return nil, fmt.Errorf("checkpoint: keep %d: at least one generation must be kept", keep)
	}
	dir, unlock, err := s.lockKey(r.Key, false)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	defer unlock()
	name := filepath.Base(r.Staging)
	if filepath.Dir(r.Staging) != dir || !isStagingName(name) {
		return nil, fmt.Errorf("checkpoint: %s is not a staging directory of key %+v", r.Staging, r.Key)
	}
	if err := current(dir, name); err != nil {
		return nil, err
	}
	top, err := openDir(r.Staging)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: staging directory: %w", err)
	}
	defer top.Close()
	var st, mark unix.Stat_t
	if err := unix.Fstat(int(top.Fd()), &st); err != nil {
		return nil, fmt.Errorf("checkpoint: %s: %w", r.Staging, err)
	}
	if st.Uid != r.uid {
		return nil, fmt.Errorf("checkpoint: %s is owned by uid %d, not the task's %d: a commit of it was interrupted, and the run must be reattached", r.Staging, st.Uid, r.uid)
	}
	if unix.Fstatat(int(top.Fd()), CommitMarker, &mark, unix.AT_SYMLINK_NOFOLLOW) != nil || mark.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, ErrNoMarker
	}

	// Freeze: with the directory root's and 0700 the task can resolve no
	// path in it. A file it opened before stays writable, though: a write
	// through it after this tears the generation, which the manifest's
	// sizes and hashes then refuse at restore. The driver asks for one
	// checkpoint at a time for that reason (docs/checkpoints.md).
	if err := ownDir(top, 0, 0, 0o700); err != nil {
		return nil, fmt.Errorf("checkpoint: %s: %w", r.Staging, err)
	}
	s.at("frozen")
	committed := false
	mpath := ""
	defer func() {
		if committed {
			return
		}
		if mpath != "" {
			os.Remove(mpath)
		}
		ownDir(top, r.uid, r.gid, stageMode)
	}()
	step, stepErr := readStep(top)
	if err := unix.Unlinkat(int(top.Fd()), CommitMarker, 0); err != nil {
		return nil, fmt.Errorf("checkpoint: removing %s: %w", CommitMarker, err)
	}
	s.at("marker-removed")
	if h.Taken != nil {
		h.Taken()
	}
	m, err := collect(top, r.uid, s.at)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %s not committed: %w", r.Staging, err)
	}
	s.at("collected")
	if m.Seq, err = nextSeq(dir); err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	if h.Trigger != nil {
		m.Trigger = h.Trigger()
	}
	m.Step = step
	m.CommittedAt = time.Now().UTC().Round(0)
	gdir := filepath.Join(dir, genName(m.Seq))
	mpath = gdir + manifestSuffix
	if err := writeManifest(mpath, m); err != nil {
		return nil, fmt.Errorf("checkpoint: writing the manifest: %w", err)
	}
	s.at("manifest-written")
	// The commit point.
	if err := os.Rename(r.Staging, gdir); err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	committed = true
	s.at("renamed")
	g := m.generation(gdir)

	var errs []error
	if err := syncDir(dir); err != nil {
		errs = append(errs, fmt.Errorf("syncing %s: %w", dir, err))
	}
	if st, err := readState(dir); err == nil && st.LastSeq < m.Seq {
		st.LastSeq = m.Seq
		if err := writeState(dir, st); err != nil {
			errs = append(errs, err)
		}
	}
	s.at("synced")
	sealErr := checkTree(top, m, checkOpts{owners: []uint32{r.uid}, seal: true, uid: r.uid, gid: r.gid, step: s.at})
	if sealErr != nil {
		errs = append(errs, fmt.Errorf("sealing: %w", sealErr))
	}
	s.at("sealed")
	if _, err := newStaging(dir, name, r.uid, r.gid); err != nil {
		errs = append(errs, err)
	}
	s.at("staging-created")
	// A generation that does not match its manifest (the task wrote on
	// through a descriptor it kept open) is one the next Prepare discards:
	// the generations before it must stay, or none would be left intact.
	if sealErr == nil {
		if err := s.prune(dir, keep, r); err != nil {
			errs = append(errs, fmt.Errorf("pruning: %w", err))
		}
	}
	s.at("pruned")
	if stepErr != nil {
		errs = append(errs, stepErr)
	}
	if len(errs) > 0 {
		return g, fmt.Errorf("checkpoint: generation %d is committed, but: %w", m.Seq, errors.Join(errs...))
	}
	return g, nil
}

// maxStepBytes bounds what is read of the commit marker.
const maxStepBytes = 32

// readStep reads the step the task wrote into its commit marker (decimal,
// surrounding white space ignored): nil for an empty marker, and for one
// that holds something else, with an error saying so. The directory is
// frozen, so the task can no longer open the marker by name.
func readStep(top *os.File) (*int64, error) {
	fd, err := unix.Openat(int(top.Fd()), CommitMarker, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", CommitMarker, err)
	}
	f := os.NewFile(uintptr(fd), CommitMarker)
	defer f.Close()
	buf := make([]byte, maxStepBytes+1)
	n, err := io.ReadFull(f, buf)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("reading %s: %w", CommitMarker, err)
	}
	text := strings.TrimSpace(string(buf[:n]))
	if text == "" {
		return nil, nil
	}
	v, perr := strconv.ParseInt(text, 10, 64)
	if n > maxStepBytes || perr != nil || v < 0 {
		return nil, fmt.Errorf("%s holds %q, not a step; allowed: nothing, or the training step the checkpoint is of (a decimal integer ≥ 0), which a gang's members restore in common", CommitMarker, clip(text, maxStepBytes))
	}
	return &v, nil
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// nextSeq counts manifests too: one without its directory is what a
// commit dying on another node left, and its number is not to be reused
// while that manifest exists.
func nextSeq(dir string) (int, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	st, _ := readState(dir)
	newest := st.LastSeq
	for _, e := range entries {
		name := e.Name()
		if g, ok := strings.CutSuffix(name, manifestSuffix); ok {
			name = g
		}
		if seq, ok := parseGen(name); ok && seq > newest {
			newest = seq
		}
	}
	return newest + 1, nil
}

// prune removes all but the newest keep generations, and never the one r
// restored from.
func (s *Store) prune(dir string, keep int, r *Run) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var seqs []int
	for _, e := range entries {
		if seq, ok := parseGen(e.Name()); ok {
			seqs = append(seqs, seq)
		}
	}
	slices.Sort(seqs)
	slices.Reverse(seqs)
	var errs []error
	for i, seq := range seqs {
		if i < keep || r.Restore != nil && seq == r.Restore.Seq {
			continue
		}
		if err := s.discard(dir, genName(seq)); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Verify re-reads the generation against its manifest: every file's size
// and SHA-256, and no entry more or less than it lists. Prepare checks
// names and sizes only, to stay cheap on checkpoints of hundreds of
// gigabytes; Verify is for tests and operators.
func (s *Store) Verify(g *Generation) error {
	rel, err := filepath.Rel(s.root, g.Dir)
	seq, ok := parseGen(filepath.Base(g.Dir))
	if err != nil || !ok || strings.HasPrefix(rel, "..") {
		return fmt.Errorf("checkpoint: %s is no generation of this store", g.Dir)
	}
	m, err := readManifest(g.Dir + manifestSuffix)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if m.Version != manifestVersion || m.Seq != seq {
		return fmt.Errorf("checkpoint: %s: manifest version %d for generation %d", g.Dir, m.Version, m.Seq)
	}
	d, err := openDir(g.Dir)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	defer d.Close()
	if err := checkTree(d, m, checkOpts{hash: true}); err != nil {
		return fmt.Errorf("checkpoint: %s: %w", g.Dir, err)
	}
	return nil
}
