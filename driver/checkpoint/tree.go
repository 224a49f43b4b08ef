package checkpoint

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// manifestVersion is the manifest format this package writes and reads.
// A manifest of a newer version (from a newer driver on a node sharing the
// root) is left alone rather than discarded: this driver cannot judge it.
const manifestVersion = 1

// maxDepth bounds how deeply a checkpoint may nest directories: the walk
// holds one descriptor per level.
const maxDepth = 256

const (
	fileMode os.FileMode = 0o400
	dirMode  os.FileMode = 0o500
)

type manifest struct {
	Version     int       `json:"version"`
	Seq         int       `json:"seq"`
	CommittedAt time.Time `json:"committed_at"`
	Trigger     string    `json:"trigger"`
	// Step is the training step the task named in its commit marker; nil
	// when it named none.
	Step *int64 `json:"step,omitempty"`
	// UID owns every file of the generation. Prepare hands a generation
	// only from this uid to another, never a file someone else owns.
	UID   uint32         `json:"uid"`
	Dirs  []string       `json:"dirs"`
	Files []manifestFile `json:"files"`
}

type manifestFile struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

func (m *manifest) generation(dir string) *Generation {
	g := &Generation{Seq: m.Seq, Dir: dir, Files: len(m.Files), CommittedAt: m.CommittedAt, Trigger: m.Trigger, Step: m.Step}
	for _, f := range m.Files {
		g.Bytes += f.Size
	}
	return g
}

func readManifest(path string) (*manifest, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var m manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("manifest %s is unreadable: %w", path, err)
	}
	return &m, nil
}

// entry is one directory entry met by walk, with the lstat-like stat of
// its name. Everything below the top of a tree is the task's to change at
// any moment, so nothing here ever follows a name again: entries are
// opened relative to their parent's descriptor with O_NOFOLLOW and checked
// to be the inode that was stat'ed.
type entry struct {
	rel    string
	parent *os.File
	name   string
	st     unix.Stat_t
	// dir is the entry opened, for directories only.
	dir *os.File
}

type walker struct {
	file  func(e *entry) error
	enter func(e *entry) error
	leave func(e *entry) error
}

func (w *walker) walk(d *os.File, rel string, depth int) error {
	// The same descriptor is walked more than once (collected, then
	// sealed), and a listing goes on from where the last one ended.
	if _, err := d.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("listing %s: %w", display(rel), err)
	}
	names, err := d.Readdirnames(-1)
	if err != nil {
		return fmt.Errorf("listing %s: %w", display(rel), err)
	}
	slices.Sort(names)
	for _, name := range names {
		e := &entry{rel: join(rel, name), parent: d, name: name}
		if err := unix.Fstatat(int(d.Fd()), name, &e.st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("%s: %w", e.rel, err)
		}
		if e.st.Mode&unix.S_IFMT != unix.S_IFDIR {
			if err := w.file(e); err != nil {
				return err
			}
			continue
		}
		if depth >= maxDepth {
			return fmt.Errorf("%s: directories nested deeper than %d levels", e.rel, maxDepth)
		}
		if err := w.enter(e); err != nil {
			return err
		}
		if e.dir, err = openDirAt(d, name, &e.st); err != nil {
			return fmt.Errorf("%s: %w", e.rel, err)
		}
		err = w.walk(e.dir, e.rel, depth+1)
		if err == nil {
			err = w.leave(e)
		}
		e.dir.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

func join(rel, name string) string {
	if rel == "" {
		return name
	}
	return rel + "/" + name
}

func display(rel string) string {
	if rel == "" {
		return "the top directory"
	}
	return rel
}

var errSwapped = errors.New("replaced while being read")

// openDirAt opens the directory name below d without following a
// symlink; want, when set, is what an earlier stat found, and a different
// inode now (the task swapped it) is an error.
func openDirAt(d *os.File, name string, want *unix.Stat_t) (*os.File, error) {
	fd, err := unix.Openat(int(d.Fd()), name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return checkOpened(fd, name, unix.S_IFDIR, want)
}

// openFileAt opens the regular file name below d for reading. O_NONBLOCK
// keeps a FIFO swapped in after the stat from blocking the open; the fstat
// then refuses it.
func openFileAt(d *os.File, name string, want *unix.Stat_t) (*os.File, error) {
	fd, err := unix.Openat(int(d.Fd()), name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f, err := checkOpened(fd, name, unix.S_IFREG, want)
	if err != nil {
		return nil, err
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

func checkOpened(fd int, name string, kind uint32, want *unix.Stat_t) (*os.File, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, err
	}
	if st.Mode&unix.S_IFMT != kind || want != nil && (st.Dev != want.Dev || st.Ino != want.Ino) {
		unix.Close(fd)
		return nil, errSwapped
	}
	return os.NewFile(uintptr(fd), name), nil
}

func kindName(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return "a regular file"
	case unix.S_IFDIR:
		return "a directory"
	case unix.S_IFLNK:
		return "a symbolic link"
	case unix.S_IFIFO:
		return "a FIFO"
	case unix.S_IFSOCK:
		return "a socket"
	case unix.S_IFCHR:
		return "a character device"
	case unix.S_IFBLK:
		return "a block device"
	}
	return fmt.Sprintf("of unknown type %#o", mode&unix.S_IFMT)
}

// hashFile reads all of f and checks that it is still the size its stat
// said: a file that changes while it is hashed would be recorded as
// neither its old content nor its new.
func hashFile(f *os.File, st *unix.Stat_t) (string, error) {
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", err
	}
	var after unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &after); err != nil {
		return "", err
	}
	if n != st.Size || after.Size != st.Size || after.Mtim != st.Mtim {
		return "", errors.New("changed while being committed (write the checkpoint, close it, then create " + CommitMarker + ")")
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// collect records the staging tree below top for its manifest and makes
// every file and directory durable, without changing anything: a refusal
// here leaves the task's checkpoint as it was, for it to fix.
func collect(top *os.File, uid uint32, step func(string)) (*manifest, error) {
	m := &manifest{Version: manifestVersion, UID: uid, Dirs: []string{}, Files: []manifestFile{}}
	check := func(e *entry) error {
		if !utf8.ValidString(e.name) {
			return fmt.Errorf("refusing %q: the name is not valid UTF-8", e.rel)
		}
		// Sealing chmods and chowns what it finds; a file of another
		// user (a hard link the task made to it) must never be among it.
		if e.st.Uid != uid {
			return fmt.Errorf("refusing %s: owned by uid %d, not the task's uid %d", e.rel, e.st.Uid, uid)
		}
		return nil
	}
	w := &walker{
		enter: func(e *entry) error {
			if err := check(e); err != nil {
				return err
			}
			m.Dirs = append(m.Dirs, e.rel)
			return nil
		},
		leave: func(e *entry) error {
			if err := e.dir.Sync(); err != nil {
				return fmt.Errorf("syncing %s: %w", e.rel, err)
			}
			return nil
		},
		file: func(e *entry) error {
			if e.st.Mode&unix.S_IFMT != unix.S_IFREG {
				return fmt.Errorf("refusing %s: %s; a checkpoint holds regular files and directories only", e.rel, kindName(e.st.Mode))
			}
			if err := check(e); err != nil {
				return err
			}
			f, err := openFileAt(e.parent, e.name, &e.st)
			if err != nil {
				return fmt.Errorf("%s: %w", e.rel, err)
			}
			defer f.Close()
			sum, err := hashFile(f, &e.st)
			if err != nil {
				return fmt.Errorf("%s: %w", e.rel, err)
			}
			// The task wrote through the page cache; only this makes its
			// bytes as durable as the rename that will commit them.
			if err := f.Sync(); err != nil {
				return fmt.Errorf("syncing %s: %w", e.rel, err)
			}
			m.Files = append(m.Files, manifestFile{Path: e.rel, Size: e.st.Size, SHA256: sum})
			step("file-synced")
			return nil
		},
	}
	if err := w.walk(top, "", 0); err != nil {
		return nil, err
	}
	if err := top.Sync(); err != nil {
		return nil, fmt.Errorf("syncing the staging directory: %w", err)
	}
	return m, nil
}

// checkOpts says what checkTree does beyond comparing names, kinds and
// sizes with the manifest.
type checkOpts struct {
	// hash re-reads every file against its SHA-256.
	hash bool
	// owners, when set, are the only uids a file or directory may have.
	owners []uint32
	// seal gives every entry to uid:gid with the generation's modes, and
	// the top last, so the task never sees it before it is read-only.
	seal     bool
	uid, gid uint32
	step     func(string)
}

// checkTree compares the tree below top with m and reports the first
// difference.
func checkTree(top *os.File, m *manifest, o checkOpts) error {
	type want struct {
		dir  bool
		file *manifestFile
		seen bool
	}
	wants := make(map[string]*want, len(m.Dirs)+len(m.Files))
	for _, d := range m.Dirs {
		wants[d] = &want{dir: true}
	}
	for i := range m.Files {
		wants[m.Files[i].Path] = &want{file: &m.Files[i]}
	}
	expect := func(e *entry) (*want, error) {
		w := wants[e.rel]
		if w == nil {
			return nil, fmt.Errorf("%s (%s) is not in the manifest", e.rel, kindName(e.st.Mode))
		}
		if kind := e.st.Mode & unix.S_IFMT; w.dir && kind != unix.S_IFDIR || !w.dir && kind != unix.S_IFREG {
			return nil, fmt.Errorf("%s is %s, the manifest says %s", e.rel, kindName(e.st.Mode), map[bool]string{true: "a directory", false: "a regular file"}[w.dir])
		}
		if o.owners != nil && !slices.Contains(o.owners, e.st.Uid) {
			return nil, fmt.Errorf("%s is owned by uid %d, the manifest says uid %d", e.rel, e.st.Uid, m.UID)
		}
		w.seen = true
		return w, nil
	}
	wk := &walker{
		enter: func(e *entry) error {
			_, err := expect(e)
			return err
		},
		leave: func(e *entry) error {
			if o.seal {
				return seal(e.dir, e.rel, &e.st, dirMode, o)
			}
			return nil
		},
		file: func(e *entry) error {
			w, err := expect(e)
			if err != nil {
				return err
			}
			if e.st.Size != w.file.Size {
				return fmt.Errorf("%s is %d bytes, the manifest says %d", e.rel, e.st.Size, w.file.Size)
			}
			if !o.hash && !(o.seal && needsSeal(&e.st, fileMode, o)) {
				return nil
			}
			f, err := openFileAt(e.parent, e.name, &e.st)
			if err != nil {
				return fmt.Errorf("%s: %w", e.rel, err)
			}
			defer f.Close()
			if o.hash {
				sum, err := hashFile(f, &e.st)
				if err != nil {
					return fmt.Errorf("%s: %w", e.rel, err)
				}
				if sum != w.file.SHA256 {
					return fmt.Errorf("%s has SHA-256 %s, the manifest says %s", e.rel, sum, w.file.SHA256)
				}
			}
			if o.seal {
				return seal(f, e.rel, &e.st, fileMode, o)
			}
			return nil
		},
	}
	if err := wk.walk(top, "", 0); err != nil {
		return err
	}
	for _, d := range m.Dirs {
		if !wants[d].seen {
			return fmt.Errorf("directory %s is missing", d)
		}
	}
	for _, f := range m.Files {
		if !wants[f.Path].seen {
			return fmt.Errorf("%s is missing", f.Path)
		}
	}
	if o.seal {
		var st unix.Stat_t
		if err := unix.Fstat(int(top.Fd()), &st); err != nil {
			return err
		}
		return seal(top, "", &st, dirMode, o)
	}
	return nil
}

func needsSeal(st *unix.Stat_t, mode os.FileMode, o checkOpts) bool {
	return st.Uid != o.uid || st.Gid != o.gid || os.FileMode(st.Mode&0o7777) != mode
}

// seal works on the open descriptor only: a path could be a symlink by
// now, and root would chown whatever it points to.
func seal(f *os.File, rel string, st *unix.Stat_t, mode os.FileMode, o checkOpts) error {
	if !needsSeal(st, mode, o) {
		return nil
	}
	if st.Uid != o.uid || st.Gid != o.gid {
		if err := unix.Fchown(int(f.Fd()), int(o.uid), int(o.gid)); err != nil {
			return fmt.Errorf("sealing %s: %w", display(rel), err)
		}
	}
	// After the chown: it clears set-id bits, and the mode must come last
	// to be exactly what is wanted.
	if err := unix.Fchmod(int(f.Fd()), uint32(mode)); err != nil {
		return fmt.Errorf("sealing %s: %w", display(rel), err)
	}
	if o.step != nil {
		o.step("entry-sealed")
	}
	return nil
}
