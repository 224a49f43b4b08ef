// Package atomicfile replaces files so that readers, and a crash at any
// moment, see either the old content or the new, never part of either: the
// state every plugin keeps on disk is written this way.
package atomicfile

import (
	"os"
	"path/filepath"
)

// Write replaces path with data, mode perm, and makes it durable before it
// returns: the file and its directory entry are synced, so a node crash
// right after cannot bring back the old content.
func Write(path string, data []byte, perm os.FileMode) error {
	return write(path, data, perm, true)
}

// Replace is Write without the syncs, for files rewritten every few seconds
// whose loss in a crash costs nothing (they are rewritten at once).
func Replace(path string, data []byte, perm os.FileMode) error {
	return write(path, data, perm, false)
}

// TempPattern matches the temporary files Write and Replace create next to
// path, which a crash mid-write leaves behind for the next start to remove.
func TempPattern(path string) string { return "." + filepath.Base(path) + ".tmp-*" }

func write(path string, data []byte, perm os.FileMode, durable bool) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, TempPattern(path))
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	// CreateTemp makes it 0600 whatever perm is: set it before any reader
	// can see the file under its real name.
	if err = f.Chmod(perm); err != nil {
		return err
	}
	if _, err = f.Write(data); err != nil {
		return err
	}
	if durable {
		if err = f.Sync(); err != nil {
			return err
		}
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp, path); err != nil {
		return err
	}
	if !durable {
		return nil
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
