package migcaps

import (
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// nodeHandle is an O_PATH descriptor of a capability node. Changing the node
// through it, rather than by name, means the inode that was checked is the
// inode that is changed, and a symlink is never followed. O_PATH does not
// open the device itself, so no driver code runs.
type nodeHandle struct{ fd int }

// notNodeError is a path that exists but is not an acceptable node.
type notNodeError struct {
	path string
	what string
}

func (e *notNodeError) Error() string {
	return fmt.Sprintf("migcaps: %s is %s, not a character device", e.path, e.what)
}

// openNode opens p without following a symlink and checks it is a character
// device (or, in tests, a regular file).
func (r *Registry) openNode(p string) (nodeHandle, *unix.Stat_t, error) {
	fd, err := unix.Open(p, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nodeHandle{-1}, nil, fmt.Errorf("migcaps: MIG capability %w", &os.PathError{Op: "open", Path: p, Err: err})
	}
	h := nodeHandle{fd}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		h.close()
		return nodeHandle{-1}, nil, fmt.Errorf("migcaps: MIG capability %w", &os.PathError{Op: "stat", Path: p, Err: err})
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFCHR:
	case unix.S_IFREG:
		if !r.allowRegular {
			h.close()
			return nodeHandle{-1}, nil, &notNodeError{p, "a regular file"}
		}
	case unix.S_IFLNK:
		h.close()
		return nodeHandle{-1}, nil, &notNodeError{p, "a symlink"}
	case unix.S_IFDIR:
		h.close()
		return nodeHandle{-1}, nil, &notNodeError{p, "a directory"}
	default:
		h.close()
		return nodeHandle{-1}, nil, &notNodeError{p, fmt.Sprintf("of type %#o", st.Mode&unix.S_IFMT)}
	}
	return h, &st, nil
}

func (h nodeHandle) close() {
	if h.fd >= 0 {
		_ = unix.Close(h.fd)
	}
}

// set chowns, then chmods (a chown may clear set-id bits, so the mode goes
// last).
func (h nodeHandle) set(a attrs) error {
	if err := unix.Fchownat(h.fd, "", int(a.UID), int(a.GID), unix.AT_EMPTY_PATH); err != nil {
		return fmt.Errorf("chown: %w", err)
	}
	if err := h.chmod(a.Mode); err != nil {
		return fmt.Errorf("chmod: %w", err)
	}
	return nil
}

// chmod changes the mode through the descriptor: fchmodat2 with AT_EMPTY_PATH
// where the kernel has it (6.6+), else the descriptor's /proc/self/fd link,
// which resolves to the same inode.
func (h nodeHandle) chmod(mode uint32) error {
	if err := unix.Fchmodat(h.fd, "", mode, unix.AT_EMPTY_PATH); err == nil {
		return nil
	}
	return chmodViaProc(h.fd, mode)
}

func chmodViaProc(fd int, mode uint32) error {
	return unix.Chmod("/proc/self/fd/"+strconv.Itoa(fd), mode)
}
