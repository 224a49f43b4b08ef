//go:build linux

package sim

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// prepareLoadDir makes the load directory, or takes the one there, mode
// 1777. It never follows a symlink: the control file's directory may be
// writable by others (e.g. /tmp), and a planted link must not get some other
// directory chmodded.
func prepareLoadDir(path string) error {
	if err := os.Mkdir(path, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
			return fmt.Errorf("%s is not a directory (a symlink or a file is not used)", path)
		}
		return err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Mode&0o7777 == 0o1777 {
		return nil
	}
	if err := unix.Fchmod(fd, 0o1777); err != nil {
		return fmt.Errorf("make it mode 1777 (it is %04o, owner uid %d): %w", st.Mode&0o7777, st.Uid, err)
	}
	return nil
}

// openRegular opens a file for reading without following a symlink or
// blocking on a FIFO, and only if it is a regular file with one link.
func openRegular(path string) (*os.File, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "stat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Nlink != 1 {
		unix.Close(fd)
		return nil, fmt.Errorf("%s: not a regular file with a single link", path)
	}
	return os.NewFile(uintptr(fd), path), nil
}

// lockExclusive takes a POSIX write lock on the whole file, held until the
// file is closed or the process ends. Not an OFD lock: only a classic
// record lock tells F_GETLK the holder's pid.
func lockExclusive(f *os.File) error {
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: 0, Len: 0}
	for {
		err := unix.FcntlFlock(f.Fd(), unix.F_SETLK, &lk)
		if err != unix.EINTR {
			return err
		}
	}
}

// lockHolder asks the kernel who holds a lock file. The pid comes in this
// process's PID namespace (0 when the holder is not visible from it). A
// process's own locks never conflict with it, so a lock held by this very
// process reads as free.
func lockHolder(path string) (lockState, uint32) {
	f, err := openRegular(path)
	if err != nil {
		return lockUnknown, 0
	}
	defer f.Close()
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: 0, Len: 0}
	for {
		err = unix.FcntlFlock(f.Fd(), unix.F_GETLK, &lk)
		if err != unix.EINTR {
			break
		}
	}
	switch {
	case err != nil:
		return lockUnknown, 0
	case lk.Type == unix.F_UNLCK:
		return lockFree, 0
	case lk.Pid > 0:
		return lockHeld, uint32(lk.Pid)
	default:
		return lockHeld, 0
	}
}
