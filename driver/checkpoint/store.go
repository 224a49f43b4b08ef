package checkpoint

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nomad-gpu/nomad-gpu/internal/atomicfile"
	"github.com/nomad-gpu/nomad-gpu/internal/dirs"
)

// CommitMarker is the file a task creates in its staging directory, after
// the last byte of its checkpoint is written and closed, to ask for the
// checkpoint to be committed. It is never part of a generation.
const CommitMarker = "COMMIT"

const (
	rootMode  os.FileMode = 0o711
	stageMode os.FileMode = 0o700

	genPrefix      = "gen-"
	manifestSuffix = ".manifest.json"
	stagingPrefix  = "staging-"
	trashPrefix    = ".trash-"
	lockName       = "lock"
	stateName      = "state.json"
)

// Store keeps checkpoints below one root. It is safe for concurrent use by
// one process per node; nodes may share the root (over NFS, exported
// no_root_squash so that root can hand directories to task users, with
// the same uids on every node), because every change to a key happens
// under an exclusive lock on a file in its directory.
type Store struct {
	root string
	// step, in tests, is called as a commit reaches each step, to kill the
	// process there.
	step func(string)

	mu    sync.Mutex
	locks map[string]*keyLock
}

// keyLock serialises one key within this process. The file lock cannot
// alone: over NFS it is a POSIX lock, which a process holds once however
// many of its goroutines take it.
type keyLock struct {
	mu   sync.Mutex
	refs int
}

// Run is one run of a task that checkpoints: where it writes its next
// checkpoint and what it restores from.
type Run struct {
	Key Key
	// Staging is where the task writes its next checkpoint. The path stays
	// the same for the whole run, across commits.
	Staging string
	// Restore is the newest intact generation when the run was prepared,
	// nil when there was none.
	Restore *Generation
	// Resumes counts the runs of this key that restored a generation, this
	// one included.
	Resumes  int
	uid, gid uint32
	store    *Store
}

// Generation is one committed checkpoint.
type Generation struct {
	// Seq numbers the key's generations, from 1, in commit order.
	Seq int
	// Dir holds the checkpoint, read-only for the task and readable by
	// its user alone.
	Dir string
	// Bytes and Files sum its regular files.
	Bytes       int64
	Files       int
	CommittedAt time.Time
	// Trigger is why it was committed, as the caller of Commit said.
	Trigger string
	// Step is the training step the task named in its commit marker
	// (docs/checkpoints.md), nil where it named none.
	Step *int64
}

// Discarded is something Prepare or Reattach removed, or found unusable,
// and why.
type Discarded struct {
	Path, Reason string
}

// ErrNoMarker is returned by Commit when the staging directory holds no
// CommitMarker.
var ErrNoMarker = errors.New("checkpoint: no " + CommitMarker + " marker in the staging directory")

// Open opens the store at root, an absolute path, creating it if missing.
// Root is made mode 0711 and owned by root: users may pass through it to
// their own checkpoints but list nothing. Directories it creates above root
// are 0755 whatever the umask, for the same users to pass; existing ones
// are the operator's and left alone. The store needs root privileges.
func Open(root string) (*Store, error) {
	if !filepath.IsAbs(root) {
		return nil, fmt.Errorf("checkpoint: root %q is not an absolute path", root)
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("checkpoint: the store needs root: it hands directories to task users")
	}
	root = filepath.Clean(root)
	if err := dirs.MkdirAll(filepath.Dir(root), 0o755); err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	if err := os.Mkdir(root, rootMode); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	// Root itself may be a symlink the operator made (to a mount, say), so
	// it is followed, unlike anything below it.
	d, err := os.Open(root)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	defer d.Close()
	if err := ownDir(d, 0, 0, rootMode); err != nil {
		return nil, fmt.Errorf("checkpoint: root %s: %w", root, err)
	}
	return &Store{root: root, locks: map[string]*keyLock{}}, nil
}

// Root is the store's root directory.
func (s *Store) Root() string { return s.root }

func (s *Store) at(step string) {
	if s.step != nil {
		s.step(step)
	}
}

// ownDir makes the open directory d uid:gid and mode, failing if it is no
// directory.
func ownDir(d *os.File, uid, gid uint32, mode os.FileMode) error {
	var st unix.Stat_t
	if err := unix.Fstat(int(d.Fd()), &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return fmt.Errorf("%s, not a directory", kindName(st.Mode))
	}
	if st.Uid != uid || st.Gid != gid {
		if err := unix.Fchown(int(d.Fd()), int(uid), int(gid)); err != nil {
			return err
		}
	}
	if os.FileMode(st.Mode&0o7777) != mode {
		return unix.Fchmod(int(d.Fd()), uint32(mode))
	}
	return nil
}

// mkdirOwned makes dir (or, without create or when it exists, takes it as
// it is) root-owned 0711. It refuses a symlink: every directory from root
// down is root's, and one that is not a directory was made by someone who
// should not have. Without create a missing dir is fs.ErrNotExist.
func mkdirOwned(dir string, create bool) (created bool, err error) {
	if create {
		err = os.Mkdir(dir, rootMode)
		created = err == nil
		if err != nil && !errors.Is(err, fs.ErrExist) {
			return false, err
		}
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, fmt.Errorf("%s: %w", dir, err)
	}
	d := os.NewFile(uintptr(fd), dir)
	defer d.Close()
	if err := ownDir(d, 0, 0, rootMode); err != nil {
		return false, fmt.Errorf("%s: %w", dir, err)
	}
	return created, nil
}

// ensureKeyDir creates the key's directory and those above it, each synced
// into its parent, so that a crash cannot lose a directory whose contents
// were made durable. Without create it creates nothing, and only checks
// that each is a directory, not a symlink, so that nothing below is looked
// up through a link to outside root.
func (s *Store) ensureKeyDir(k Key, create bool) (string, error) {
	dir := s.KeyDir(k)
	rel, err := filepath.Rel(s.root, dir)
	if err != nil {
		return "", err
	}
	p := s.root
	for _, c := range strings.Split(rel, string(filepath.Separator)) {
		parent := p
		p = filepath.Join(p, c)
		created, err := mkdirOwned(p, create)
		if err != nil {
			return "", err
		}
		if created {
			if err := syncDir(parent); err != nil {
				return "", err
			}
		}
	}
	return dir, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// lockKey holds the key against this process's other goroutines and other
// nodes' drivers until the returned func is called. With create it first
// makes the key's directory; without, a missing one is fs.ErrNotExist.
func (s *Store) lockKey(k Key, create bool) (dir string, unlock func(), err error) {
	dir = s.KeyDir(k)
	s.mu.Lock()
	kl := s.locks[dir]
	if kl == nil {
		kl = &keyLock{}
		s.locks[dir] = kl
	}
	kl.refs++
	s.mu.Unlock()
	kl.mu.Lock()
	release := func() {
		kl.mu.Unlock()
		s.mu.Lock()
		if kl.refs--; kl.refs == 0 {
			delete(s.locks, dir)
		}
		s.mu.Unlock()
	}
	for {
		// Without create too: the lock is opened by path, and a key's
		// directory (or one above it) swapped for a symlink would have it
		// created outside root.
		if _, err = s.ensureKeyDir(k, create); err != nil {
			release()
			return "", nil, fmt.Errorf("checkpoint: %w", err)
		}
		var f *os.File
		f, err = lockFile(filepath.Join(dir, lockName))
		if errors.Is(err, fs.ErrNotExist) && create {
			continue // removed by Remove between the two steps
		}
		if err != nil {
			release()
			return "", nil, err
		}
		if f == nil {
			continue
		}
		return dir, func() { f.Close(); release() }, nil
	}
}

// lockFile takes an exclusive lock on path; nil without an error when the
// file it locked is not at path any more (Remove moved the key's directory
// away while this waited), to be tried again.
func lockFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("checkpoint: locking %s: %w", path, err)
	}
	var held, now unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &held); err != nil {
		f.Close()
		return nil, err
	}
	if err := unix.Lstat(path, &now); err != nil || now.Ino != held.Ino || now.Dev != held.Dev {
		f.Close()
		if err != nil && !errors.Is(err, unix.ENOENT) {
			return nil, err
		}
		return nil, nil
	}
	return f, nil
}

// Prepare readies the key for one run of the task as uid:gid. Under the
// key's lock it
//
//   - creates the key's directory and those above it (root-owned, 0711);
//   - discards what interrupted checkpoints and commits left: every staging
//     directory (its run is over or superseded by this one), manifests
//     without their generation, half-removed directories, temporary files.
//     An empty staging directory, which every commit leaves, is removed
//     without being reported: no checkpoint is lost with it;
//   - checks every generation against its manifest (names, kinds, sizes
//     and owners; Verify also hashes) and discards those that do not match
//     or have no manifest, giving the reason;
//   - makes every intact generation read-only and the user's alone (files
//     0400, directories 0500, owned by uid:gid);
//   - creates a fresh, empty staging directory, mode 0700, owned by
//     uid:gid.
//
// It returns the run with the newest intact generation to restore (nil
// when there is none) and what it discarded. Restoring a generation counts
// one more resume of the key.
func (s *Store) Prepare(k Key, uid, gid uint32) (*Run, []Discarded, error) {
	return s.PrepareWith(k, uid, gid, RestoreNewest)
}

// PrepareWith is Prepare restoring the generation rule picks: a gang
// member's run restores its gang's consistent step (RestoreStep).
func (s *Store) PrepareWith(k Key, uid, gid uint32, rule RestoreRule) (*Run, []Discarded, error) {
	dir, unlock, err := s.lockKey(k, true)
	if err != nil {
		return nil, nil, err
	}
	defer unlock()
	gens, discarded, err := s.tidy(dir, uid, gid, "")
	if err != nil {
		return nil, discarded, err
	}
	staging, err := newStaging(dir, "", uid, gid)
	if err != nil {
		return nil, discarded, err
	}
	st, err := readState(dir)
	if err != nil {
		discarded = append(discarded, Discarded{filepath.Join(dir, stateName), err.Error() + "; counting resumes from 0"})
	}
	r := &Run{Key: k, Staging: staging, uid: uid, gid: gid, store: s}
	if r.Restore = rule(gens); r.Restore != nil {
		st.Resumes++
	}
	st.Run, st.Key = filepath.Base(staging), &k
	if err := writeState(dir, st); err != nil {
		return nil, discarded, err
	}
	r.Resumes = st.Resumes
	return r, discarded, nil
}

// Reattach takes up a run whose driver died while its task lived on: r is
// the run as Prepare returned it, rebuilt from what the driver kept, and
// uid:gid is the task's user, as given to Prepare. It tidies the key as
// Prepare does and keeps r's staging directory, unless a commit of it was
// interrupted: then its content is discarded and the task finds an empty
// staging directory at the same path, as after a commit. Restore and
// Resumes are taken as they are. A run superseded by a later Prepare of
// its key gets ErrSuperseded, and nothing is changed.
func (s *Store) Reattach(r *Run, uid, gid uint32) ([]Discarded, error) {
	name := filepath.Base(r.Staging)
	if filepath.Dir(r.Staging) != s.KeyDir(r.Key) || !isStagingName(name) {
		return nil, fmt.Errorf("checkpoint: %s is not a staging directory of key %+v", r.Staging, r.Key)
	}
	dir, unlock, err := s.lockKey(r.Key, true)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := current(dir, name); err != nil {
		return nil, err
	}
	_, discarded, err := s.tidy(dir, uid, gid, name)
	if err != nil {
		return discarded, err
	}
	usable, reason, err := usableStaging(r.Staging, uid, gid)
	if err != nil {
		return discarded, err
	}
	if !usable {
		if reason != "" {
			err := s.discard(dir, name)
			discarded = append(discarded, Discarded{r.Staging, reason + removeNote(err)})
		}
		if _, err := newStaging(dir, name, uid, gid); err != nil {
			return discarded, err
		}
	}
	r.uid, r.gid, r.store = uid, gid, s
	return discarded, nil
}

// usableStaging says whether the staging directory at path can go on
// being the task's as it is, and if not, why ("" when it is missing).
func usableStaging(path string, uid, gid uint32) (bool, string, error) {
	d, err := openDir(path)
	if errors.Is(err, unix.ENOENT) {
		return false, "", nil
	}
	if err != nil {
		// A symlink or a file: Prepare made neither.
		return false, "not a directory: " + err.Error(), nil
	}
	defer d.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(d.Fd()), &st); err != nil {
		return false, "", fmt.Errorf("checkpoint: %s: %w", path, err)
	}
	if st.Uid != uid {
		// Commit hands the staging directory to root while it reads it:
		// a commit died there, before or after its commit point.
		return false, "its commit was interrupted", nil
	}
	if err := ownDir(d, uid, gid, stageMode); err != nil {
		return false, "", fmt.Errorf("checkpoint: %s: %w", path, err)
	}
	return true, "", nil
}

// openDir opens a directory of the key's directory, itself root's, by
// path: only the last component could be another's doing, and O_NOFOLLOW
// refuses it if it is a symlink.
func openDir(path string) (*os.File, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), path), nil
}

// Remove deletes all of the key's checkpoints and its directory. It is for
// operators and tests: no run of the key may be under way.
func (s *Store) Remove(k Key) error {
	dir, unlock, err := s.lockKey(k, false)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer unlock()
	parent := filepath.Dir(dir)
	trash := filepath.Join(parent, trashPrefix+randomHex())
	if err := os.Rename(dir, trash); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if err := syncDir(parent); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if err := os.RemoveAll(trash); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return nil
}

// tidy brings the key's directory to its committed state, keeping the
// staging directory keep (when set) and discarding every other. It returns
// the intact generations, oldest first.
func (s *Store) tidy(dir string, uid, gid uint32, keep string) ([]*Generation, []Discarded, error) {
	var discarded []Discarded
	note := func(name, reason string) {
		if err := s.discard(dir, name); !errors.Is(err, fs.ErrNotExist) {
			discarded = append(discarded, Discarded{filepath.Join(dir, name), reason + removeNote(err)})
		}
	}
	// A Remove that died leaves its trash next to the key's directory.
	parent := filepath.Dir(dir)
	if siblings, err := os.ReadDir(parent); err == nil {
		for _, e := range siblings {
			if strings.HasPrefix(e.Name(), trashPrefix) {
				p := filepath.Join(parent, e.Name())
				discarded = append(discarded, Discarded{p, "a removal was interrupted" + removeNote(os.RemoveAll(p))})
			}
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, discarded, fmt.Errorf("checkpoint: %w", err)
	}
	names := map[string]bool{}
	for _, e := range entries {
		names[e.Name()] = true
	}
	var seqs []int
	for _, e := range entries {
		name := e.Name()
		switch {
		case name == lockName || name == stateName:
		case strings.HasPrefix(name, trashPrefix):
			note(name, "a removal was interrupted")
		case isTemp(name):
			note(name, "a write was interrupted")
		case isStagingName(name) && name != keep:
			p := filepath.Join(dir, name)
			if !emptyDir(p) {
				note(name, stagingReason(p, uid))
			} else if err := s.discard(dir, name); err != nil && !errors.Is(err, fs.ErrNotExist) {
				// The run before left it empty, as every commit does:
				// nothing is lost, so only a failure to remove it is told.
				discarded = append(discarded, Discarded{p, "an empty staging directory" + removeNote(err)})
			}
		case isStagingName(name):
		case strings.HasSuffix(name, manifestSuffix):
			g := strings.TrimSuffix(name, manifestSuffix)
			if _, ok := parseGen(g); ok && !names[g] {
				note(name, "its commit was interrupted before the commit point")
			}
		default:
			if seq, ok := parseGen(name); ok {
				seqs = append(seqs, seq)
			}
			// Anything else is no name this package makes: left alone.
		}
	}
	slices.Sort(seqs)
	var gens []*Generation
	for _, seq := range seqs {
		name := genName(seq)
		g, err := s.checkGeneration(dir, name, uid, gid)
		var newer *newerError
		switch {
		case errors.As(err, &newer):
			discarded = append(discarded, Discarded{filepath.Join(dir, name), err.Error()})
		case err != nil:
			note(name, err.Error())
		default:
			gens = append(gens, g)
		}
	}
	return gens, discarded, nil
}

// emptyDir: path is a directory, not a symlink, with nothing in it.
func emptyDir(path string) bool {
	d, err := openDir(path)
	if err != nil {
		return false
	}
	defer d.Close()
	names, err := d.Readdirnames(1)
	return len(names) == 0 && errors.Is(err, io.EOF)
}

func stagingReason(path string, uid uint32) string {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR && st.Uid != uid {
		return "its commit was interrupted before the commit point"
	}
	var m unix.Stat_t
	if unix.Lstat(filepath.Join(path, CommitMarker), &m) == nil {
		// The marker may have outlived the data it vouches for: only a
		// commit makes the task's writes durable.
		return "a checkpoint marked " + CommitMarker + " that was never committed"
	}
	return "a checkpoint never marked " + CommitMarker
}

// newerError is a generation whose manifest this package does not know:
// it stays, for the driver that wrote it.
type newerError struct{ version int }

func (e *newerError) Error() string {
	return fmt.Sprintf("manifest version %d is newer than this driver reads (%d); left in place, not restored", e.version, manifestVersion)
}

// checkGeneration checks the generation name against its manifest and
// seals it for uid:gid.
func (s *Store) checkGeneration(dir, name string, uid, gid uint32) (*Generation, error) {
	seq, _ := parseGen(name)
	mpath := filepath.Join(dir, name+manifestSuffix)
	m, err := readManifest(mpath)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, errors.New("its manifest is missing")
	}
	if err != nil {
		return nil, err
	}
	if m.Version > manifestVersion {
		return nil, &newerError{m.Version}
	}
	if m.Version != manifestVersion || m.Seq != seq {
		return nil, fmt.Errorf("its manifest is version %d for generation %d", m.Version, m.Seq)
	}
	d, err := openDir(filepath.Join(dir, name))
	if err != nil {
		return nil, fmt.Errorf("opening it: %v", err)
	}
	defer d.Close()
	// The files are the committing uid's; a file of anyone else was put
	// there since, and must not be handed to uid.
	err = checkTree(d, m, checkOpts{owners: []uint32{m.UID, uid}, seal: true, uid: uid, gid: gid})
	if err != nil {
		return nil, err
	}
	if m.UID != uid {
		m.UID = uid
		if err := writeManifest(mpath, m); err != nil {
			return nil, fmt.Errorf("recording its new owner: %v", err)
		}
	}
	return m.generation(filepath.Join(dir, name)), nil
}

// discard removes the entry name of the key's directory, first renaming
// it out of every name this package reads, so that a crash part-way
// leaves trash and never a half-removed generation. A generation's
// manifest goes after its directory: a manifest alone is garbage to the
// next tidy, a generation alone would be reported broken.
func (s *Store) discard(dir, name string) error {
	p := filepath.Join(dir, name)
	if strings.HasPrefix(name, trashPrefix) || isTemp(name) || strings.HasSuffix(name, manifestSuffix) {
		if _, err := os.Lstat(p); err != nil {
			return err
		}
		return os.RemoveAll(p)
	}
	trash := filepath.Join(dir, trashPrefix+randomHex())
	if err := os.Rename(p, trash); err != nil {
		return err
	}
	s.at("trash-renamed")
	if strings.HasPrefix(name, genPrefix) {
		if err := os.Remove(p + manifestSuffix); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	if err := syncDir(dir); err != nil {
		return err
	}
	return os.RemoveAll(trash)
}

func removeNote(err error) string {
	if err == nil {
		return ""
	}
	return "; not all removed: " + err.Error()
}

// newStaging creates the staging directory name (a new one when "") for
// uid:gid and returns its path.
func newStaging(dir, name string, uid, gid uint32) (string, error) {
	if name == "" {
		name = stagingPrefix + randomHex()
	}
	p := filepath.Join(dir, name)
	// Made root's first and handed over through its descriptor, so the
	// task never meets it half-made.
	if err := os.Mkdir(p, 0o700); err != nil {
		return "", fmt.Errorf("checkpoint: %w", err)
	}
	d, err := openDir(filepath.Join(dir, name))
	if err == nil {
		err = ownDir(d, uid, gid, stageMode)
		d.Close()
	}
	if err == nil {
		err = syncDir(dir)
	}
	if err != nil {
		return "", fmt.Errorf("checkpoint: staging directory %s: %w", p, err)
	}
	return p, nil
}

func randomHex() string {
	b := make([]byte, 8)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func genName(seq int) string { return fmt.Sprintf("%s%08d", genPrefix, seq) }

// parseGen takes only the names genName makes, so that "gen-1" and
// "gen-00000001" can never both count as generation 1.
func parseGen(name string) (int, bool) {
	digits, ok := strings.CutPrefix(name, genPrefix)
	if !ok || digits == "" || strings.Trim(digits, "0123456789") != "" {
		return 0, false
	}
	seq, err := strconv.Atoi(digits)
	if err != nil || seq < 1 || genName(seq) != name {
		return 0, false
	}
	return seq, true
}

func isStagingName(name string) bool {
	h, ok := strings.CutPrefix(name, stagingPrefix)
	if !ok || len(h) != 16 {
		return false
	}
	_, err := hex.DecodeString(h)
	return err == nil
}

func isTemp(name string) bool {
	for _, target := range []string{stateName, genPrefix + "*" + manifestSuffix} {
		if ok, _ := filepath.Match(atomicfile.TempPattern(target), name); ok {
			return true
		}
	}
	return false
}

type state struct {
	Version int `json:"version"`
	Resumes int `json:"resumes"`
	// Run is the staging directory of the key's current run, the one
	// Prepare made last: no other may commit.
	Run string `json:"run"`
	// LastSeq is the newest generation number ever committed, so that a
	// number is never given twice, even after its generation is discarded.
	LastSeq int `json:"last_seq,omitempty"`
	// Key is the key whose directory this is, so that List reads it whole
	// where its directory names were cut for length (see KeyDir).
	Key *Key `json:"key,omitempty"`
}

// ErrSuperseded is returned by Commit and Reattach for a run that is no
// longer its key's current one: a later Prepare of the key, on this node
// or another, made a new run, and discarded this one's staging directory.
var ErrSuperseded = errors.New("checkpoint: the run was superseded by a later run of its key")

func current(dir, staging string) error {
	st, err := readState(dir)
	if err != nil {
		return fmt.Errorf("checkpoint: %s: %w", filepath.Join(dir, stateName), err)
	}
	if st.Run != staging {
		return ErrSuperseded
	}
	return nil
}

func readState(dir string) (state, error) {
	b, err := os.ReadFile(filepath.Join(dir, stateName))
	if errors.Is(err, fs.ErrNotExist) {
		return state{Version: 1}, nil
	}
	var st state
	if err == nil {
		err = json.Unmarshal(b, &st)
	}
	if err != nil {
		return state{Version: 1}, fmt.Errorf("unreadable: %v", err)
	}
	return st, nil
}

func writeState(dir string, st state) error {
	st.Version = 1
	b, _ := json.Marshal(st)
	if err := atomicfile.Write(filepath.Join(dir, stateName), b, 0o600); err != nil {
		return fmt.Errorf("checkpoint: recording the key's state: %w", err)
	}
	return nil
}

func writeManifest(path string, m *manifest) error {
	b, err := json.MarshalIndent(m, "", " ")
	if err != nil {
		return err
	}
	return atomicfile.Write(path, append(b, '\n'), 0o600)
}
