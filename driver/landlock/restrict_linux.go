package landlock

import (
	"errors"
	"fmt"
	"runtime"
	"syscall"

	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

const (
	fsRead  = ll.AccessFSReadFile | ll.AccessFSReadDir
	fsWrite = ll.AccessFSWriteFile | ll.AccessFSRemoveDir | ll.AccessFSRemoveFile |
		ll.AccessFSMakeReg | ll.AccessFSMakeDir | ll.AccessFSMakeSock | ll.AccessFSMakeFifo |
		ll.AccessFSMakeSym | ll.AccessFSTruncate | ll.AccessFSRefer
	fsExec = ll.AccessFSExecute

	// The kernel rejects a rule on a non-directory that grants any other
	// right (EINVAL), so a file rule is cut down to these.
	fsFileOnly = ll.AccessFSExecute | ll.AccessFSWriteFile | ll.AccessFSReadFile |
		ll.AccessFSTruncate | ll.AccessFSIoctlDev

	// Erratum 2 of ABI 6 (this bit of LANDLOCK_CREATE_RULESET_ERRATA) lets
	// threads of one process signal each other whatever their domains.
	// Without it the confined thread, between restrict and exec, could not
	// signal its unconfined siblings, as the Go runtime does to preempt them.
	erratumSignalScope = 1 << 1
)

// handledFS is what a ruleset may handle on a kernel of this ABI: asking for
// a right the kernel does not know is EINVAL, so newer rights are added only
// where the ABI has them. It stops at ABI 7's rights (see the package doc).
func handledFS(abi int) uint64 {
	if abi < 1 {
		return 0
	}
	h := uint64(ll.AccessFSMakeSym<<1 - 1) // ABI 1: EXECUTE through MAKE_SYM.
	if abi >= 2 {
		h |= ll.AccessFSRefer
	}
	if abi >= 3 {
		h |= ll.AccessFSTruncate
	}
	if abi >= 5 {
		h |= ll.AccessFSIoctlDev
	}
	return h
}

// allowedFS maps a rule's modes onto the rights of the file type its path
// resolved to, within what the ABI handles. MAKE_CHAR and MAKE_BLOCK stay
// handled and never granted: a task does not create device nodes.
func allowedFS(a Access, fileType uint32, abi int) uint64 {
	var r uint64
	if a&Read != 0 {
		r |= fsRead
	}
	if a&Write != 0 {
		r |= fsWrite
	}
	if a&Exec != 0 {
		r |= fsExec
	}
	if fileType != unix.S_IFDIR {
		r &= fsFileOnly
	}
	// IOCTL_DEV is kept for explicit device rules: CUDA drives /dev/nvidia*
	// by ioctl, but a directory rule such as rw:/dev must not open every
	// driver's ioctl surface.
	if fileType == unix.S_IFCHR && a&(Read|Write) != 0 {
		r |= ll.AccessFSIoctlDev
	}
	// On ABI 1 an unhandled REFER is simply denied, which is what a ruleset
	// without it enforces; asking for it would be EINVAL.
	return r & handledFS(abi)
}

// unavailableError says why there is no Landlock; it matches
// errors.ErrUnsupported, so a caller can tell "cannot confine here" from a
// bad rule.
type unavailableError struct {
	why   string
	errno syscall.Errno
}

func (e *unavailableError) Error() string   { return "landlock unavailable: " + e.why }
func (e *unavailableError) Unwrap() []error { return []error{errors.ErrUnsupported, e.errno} }

// Status reports the kernel's Landlock ABI version, or 0 and an error that
// says why there is none; the error matches errors.ErrUnsupported.
func Status() (abi int, err error) {
	v, err := ll.LandlockGetABIVersion()
	if err == nil && v >= 1 {
		return v, nil
	}
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		errno = unix.EINVAL
	}
	why := fmt.Sprintf("landlock_create_ruleset: %v", errno)
	switch errno {
	case unix.ENOSYS:
		why = "the kernel has no Landlock system calls (ENOSYS): built without CONFIG_SECURITY_LANDLOCK, or a seccomp filter hides them"
	case unix.EOPNOTSUPP:
		why = "Landlock is built in but not enabled (EOPNOTSUPP): add landlock to the kernel's lsm= boot parameter"
	case unix.EPERM, unix.EACCES:
		why = fmt.Sprintf("landlock_create_ruleset is refused (%v), most likely by a seccomp filter", errno)
	}
	return 0, &unavailableError{why: why, errno: errno}
}

// RestrictThread confines the calling OS thread, and so the program it execs
// next, to rules. The caller holds runtime.LockOSThread and execs from the
// same thread right after; the thread stays locked once RestrictThread has
// changed it, even on error, so it can never run another goroutine. A rule
// whose path does not exist is skipped and returned in skipped, for the
// caller to log. Any other error leaves nothing enforced; one matching
// errors.ErrUnsupported means the kernel has no Landlock (see Status).
func RestrictThread(rules []Rule, opts Options) (skipped []string, err error) {
	for _, r := range rules {
		if err := r.validate(); err != nil {
			return nil, err
		}
	}
	abi, err := Status()
	if err != nil {
		return nil, err
	}

	attr := ll.RulesetAttr{HandledAccessFS: handledFS(abi)}
	if opts.ScopeSignals && abi >= 6 && signalScopeFixed() {
		attr.Scoped = ll.ScopeSignal
	}
	ruleset, err := ll.LandlockCreateRuleset(&attr, 0)
	if err != nil {
		return nil, fmt.Errorf("landlock: create ruleset (ABI %d): %w", abi, err)
	}
	defer unix.Close(ruleset)

	for _, r := range rules {
		found, err := addRule(ruleset, r, abi)
		if err != nil {
			return nil, err
		}
		if !found {
			skipped = append(skipped, r.Path)
		}
	}

	var flags uint32
	if abi >= 7 {
		// Domains do not audit denials after exec by default, and those
		// of the exec'd task are the ones an operator needs to see.
		flags |= ll.FlagRestrictSelfLogNewExecOn
	}

	// Ours on top of the caller's: should the caller unlock, the thread
	// still dies with the goroutine instead of serving others.
	runtime.LockOSThread()
	// Required of an unprivileged caller, and what stops the exec'd task
	// from regaining privileges through setuid binaries or file caps.
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("landlock: set no_new_privs: %w", err)
	}
	if err := ll.LandlockRestrictSelf(ruleset, flags); err != nil {
		if errors.Is(err, unix.E2BIG) {
			return nil, fmt.Errorf("landlock: restrict: the thread already has the maximum of 16 stacked domains: %w", err)
		}
		return nil, fmt.Errorf("landlock: restrict (ABI %d): %w", abi, err)
	}
	return skipped, nil
}

func signalScopeFixed() bool {
	errata, err := ll.LandlockGetErrata()
	return err == nil && errata&erratumSignalScope != 0
}

// addRule adds r's path-beneath rule and reports whether its path exists.
// The rights are chosen from the file type of the very descriptor added, so a
// path swapped between a stat and the open cannot get directory rights on a
// file. Symlinks are followed: the rule binds the target.
func addRule(ruleset int, r Rule, abi int) (found bool, err error) {
	fd, err := unix.Open(r.Path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("landlock: rule %q: open: %w", r.String(), err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return false, fmt.Errorf("landlock: rule %q: stat: %w", r.String(), err)
	}
	attr := ll.PathBeneathAttr{
		AllowedAccess: allowedFS(r.Access, st.Mode&unix.S_IFMT, abi),
		ParentFd:      fd,
	}
	if err := ll.LandlockAddPathBeneathRule(ruleset, &attr, 0); err != nil {
		return false, fmt.Errorf("landlock: rule %q: add (rights %#x, ABI %d): %w", r.String(), attr.AllowedAccess, abi, err)
	}
	return true, nil
}
