package checkpoint

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Stored is one key's checkpoints as List finds them on disk.
type Stored struct {
	Key Key
	// Exact is false where the key could only be read back from its
	// directory names and one of them was cut for length (see KeyDir):
	// Key then holds the names as cut, and does not name the key.
	Exact bool
	Dir   string
	// Generations counts its committed generations; Bytes sums their
	// files, as their manifests say.
	Generations int
	Bytes       int64
	// LastUsed is when a run last started (Prepare) or committed.
	LastUsed time.Time
}

// keyDepth is how many directories below root a key's directory is:
// namespace, job, group, task, alloc index.
const keyDepth = 5

// List finds every key with a directory below the store's root, in path
// order. It reads, and changes nothing: no lock is taken, since every file
// it reads is replaced whole. Directories the store did not make are
// skipped.
func (s *Store) List() ([]Stored, error) {
	var out []Stored
	err := s.walkKeys(s.root, 0, func(dir string) error {
		st, err := readStored(s.root, dir)
		if err != nil {
			return err
		}
		out = append(out, st)
		return nil
	})
	return out, err
}

// walkKeys calls found for every key directory below dir, depth levels
// below root.
func (s *Store) walkKeys(dir string, depth int, found func(string) error) error {
	if depth == keyDepth {
		return found(dir)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("checkpoint: listing %s: %w", dir, err)
	}
	for _, e := range entries {
		// ReadDir's type is lstat's: a symlink is no directory the store made.
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		if err := s.walkKeys(filepath.Join(dir, e.Name()), depth+1, found); err != nil {
			return err
		}
	}
	return nil
}

// readStored reads what the key directory dir holds.
func readStored(root, dir string) (Stored, error) {
	st := Stored{Dir: dir}
	state, err := readState(dir)
	if err == nil && state.Key != nil {
		st.Key, st.Exact = *state.Key, true
	} else {
		st.Key, st.Exact = keyFromDir(root, dir)
	}
	if fi, err := os.Stat(filepath.Join(dir, stateName)); err == nil {
		st.LastUsed = fi.ModTime()
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return st, fmt.Errorf("checkpoint: listing %s: %w", dir, err)
	}
	for _, e := range entries {
		if _, ok := parseGen(e.Name()); !ok || !e.IsDir() {
			continue
		}
		m, err := readManifest(filepath.Join(dir, e.Name()+manifestSuffix))
		if err != nil {
			continue // not committed, or broken: the next Prepare discards it
		}
		g := m.generation(filepath.Join(dir, e.Name()))
		st.Generations++
		st.Bytes += g.Bytes
		if g.CommittedAt.After(st.LastUsed) {
			st.LastUsed = g.CommittedAt
		}
	}
	return st, nil
}

// keyFromDir reads a key back from the names of its directory, for a key
// whose state.json does not record it (the key is optional there).
func keyFromDir(root, dir string) (Key, bool) {
	rel, _ := filepath.Rel(root, dir)
	parts := strings.Split(rel, string(filepath.Separator))
	names := make([]string, len(parts))
	exact := true
	for i, p := range parts {
		var ok bool
		names[i], ok = decodeName(p)
		exact = exact && ok
	}
	index, err := strconv.Atoi(names[4])
	exact = exact && err == nil
	return Key{Namespace: names[0], Job: names[1], Group: names[2], Task: names[3], AllocIndex: index}, exact
}

// decodeName undoes encodeName; false where the name was cut (it holds
// '~') or is no encoding encodeName makes.
func decodeName(c string) (string, bool) {
	if c == "%" {
		return "", true
	}
	if strings.Contains(c, "~") {
		return c, false
	}
	var b []byte
	for i := 0; i < len(c); i++ {
		if c[i] != '%' {
			b = append(b, c[i])
			continue
		}
		if i+3 > len(c) {
			return c, false
		}
		v, err := strconv.ParseUint(c[i+1:i+3], 16, 8)
		if err != nil {
			return c, false
		}
		b = append(b, byte(v))
		i += 2
	}
	return string(b), encodeName(string(b)) == c
}

// RemoveStored removes what List found, as Remove does: atomically, the
// key's directory renamed away under its lock, then deleted. It refuses an
// inexact key: the directory it names is not the one listed.
func (s *Store) RemoveStored(st Stored) error {
	if !st.Exact || s.KeyDir(st.Key) != st.Dir {
		return fmt.Errorf("checkpoint: %s: its key cannot be read back whole from its directory names; remove it by hand if it is not wanted", st.Dir)
	}
	return s.Remove(st.Key)
}

// OpenExisting opens the store at root for an operator's tool: unlike
// Open it creates and changes nothing, and refuses a root that is missing.
func OpenExisting(root string) (*Store, error) {
	if !filepath.IsAbs(root) {
		return nil, fmt.Errorf("%q is not an absolute path", root)
	}
	fi, err := os.Stat(root)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("%s is not a directory", root)
	}
	return &Store{root: filepath.Clean(root), locks: map[string]*keyLock{}}, nil
}
