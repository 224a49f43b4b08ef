// Package dirs creates directories whose modes do not depend on the
// process's umask.
package dirs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// MkdirAll is os.MkdirAll, except that every directory it creates gets
// exactly perm: os.MkdirAll's modes pass through the umask, and an agent
// started with umask 077 would make directories that task users cannot
// pass through. Directories that exist are left as they are: they are the
// operator's.
func MkdirAll(path string, perm os.FileMode) error {
	path = filepath.Clean(path)
	st, err := os.Stat(path)
	if err == nil {
		if !st.IsDir() {
			return fmt.Errorf("%s is not a directory", path)
		}
		return nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if parent := filepath.Dir(path); parent != path {
		if err := MkdirAll(parent, perm); err != nil {
			return err
		}
	}
	if err := os.Mkdir(path, perm); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return MkdirAll(path, perm) // made by someone else meanwhile
		}
		return err
	}
	return os.Chmod(path, perm)
}
