//go:build !linux

package sim

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// prepareLoadDir makes the load directory mode 1777; without O_NOFOLLOW on
// directories it refuses a symlink by Lstat only.
func prepareLoadDir(path string) error {
	if err := os.Mkdir(path, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	fi, err := os.Lstat(path)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory (a symlink or a file is not used)", path)
	}
	if fi.Mode()&(fs.ModePerm|fs.ModeSticky) == fs.ModePerm|fs.ModeSticky {
		return nil
	}
	return os.Chmod(path, 0o777|fs.ModeSticky)
}

func openRegular(path string) (*os.File, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file", path)
	}
	return os.Open(path)
}

// Record locks that name their holder are Linux's here; elsewhere readers
// go by heartbeats alone.
func lockExclusive(*os.File) error { return nil }

func lockHolder(string) (lockState, uint32) { return lockUnknown, 0 }
