package supervisor

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/nomad-gpu/nomad-gpu/driver/landlock"
)

// Isolation fences a task off the rest of the node. The zero value runs it
// in the host's namespaces with no Landlock domain (pid_mode = "host" with
// Landlock off).
type Isolation struct {
	// PrivatePID runs the task in a PID namespace of its own whose init is
	// the supervisor, and in a mount namespace that shows that namespace's
	// /proc: the task sees, signals and ptraces only its own processes, and
	// other tasks' /proc/<pid>/environ does not exist for it.
	PrivatePID bool `json:"private_pid,omitempty"`
	// TmpDir is bound over /tmp in the task's mount namespace, so /tmp is
	// the task's own (PrivatePID only).
	TmpDir string `json:"tmp_dir,omitempty"`
	// PrivateShm mounts a fresh tmpfs over /dev/shm (PrivatePID only). MPS
	// clients keep the host's: their MPS server shares memory with them there.
	PrivateShm bool `json:"private_shm,omitempty"`
	// Masks hide directories behind an empty tmpfs (PrivatePID only).
	Masks []Mask `json:"masks,omitempty"`
	// Landlock, when non-nil, confines the task's filesystem access to
	// these rules; an empty list denies everything.
	Landlock []landlock.Rule `json:"landlock,omitempty"`
	// LandlockOn distinguishes "no rules" from "no Landlock": JSON drops an
	// empty slice.
	LandlockOn bool `json:"landlock_on,omitempty"`
}

// Mask covers Dir with an empty tmpfs and binds back only the entries named
// in Keep, e.g. the MPS pipe root with only the task's own GPUs' pipes: a
// task that holds no MPS share then sees no MPS daemon at all, whatever its
// user may open on the host.
type Mask struct {
	Dir  string   `json:"dir"`
	Keep []string `json:"keep,omitempty"`
}

// setupMounts builds the task's mount namespace. It runs in the shim, as
// root, in the fresh mount namespace the supervisor cloned it into and in the
// task's PID namespace.
func setupMounts(iso Isolation) error {
	// Slave, not private: the host's unmounts (an alloc's secrets tmpfs
	// going away) still reach this copy, while nothing done here leaks out.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SLAVE, ""); err != nil {
		return fmt.Errorf("make the task's mounts its own: %w", err)
	}
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount the task's /proc: %w", err)
	}
	for _, m := range iso.Masks {
		if err := mask(m); err != nil {
			return err
		}
	}
	if iso.PrivateShm {
		if err := unix.Mount("tmpfs", "/dev/shm", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777"); err != nil {
			return fmt.Errorf("mount the task's /dev/shm: %w", err)
		}
	}
	if iso.TmpDir != "" {
		if err := unix.Mount(iso.TmpDir, "/tmp", "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("bind the task's tmp dir %s over /tmp: %w", iso.TmpDir, err)
		}
	}
	return nil
}

func mask(m Mask) error {
	if _, err := os.Stat(m.Dir); errors.Is(err, os.ErrNotExist) {
		return nil // nothing to hide
	}
	// The kept entries are opened before the tmpfs covers their paths.
	type kept struct {
		name string
		fd   int
	}
	var keep []kept
	defer func() {
		for _, k := range keep {
			unix.Close(k.fd)
		}
	}()
	for _, name := range m.Keep {
		if name == "" || name == "." || name == ".." || strings.ContainsRune(name, '/') {
			return fmt.Errorf("mask %s: %q is not an entry name", m.Dir, name)
		}
		fd, err := unix.Open(filepath.Join(m.Dir, name), unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOENT) {
			continue
		}
		if err != nil {
			return fmt.Errorf("mask %s: open %s: %w", m.Dir, name, err)
		}
		keep = append(keep, kept{name, fd})
	}
	if err := unix.Mount("tmpfs", m.Dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0755,size=64k"); err != nil {
		return fmt.Errorf("mask %s: %w", m.Dir, err)
	}
	for _, k := range keep {
		target := filepath.Join(m.Dir, k.name)
		if err := os.Mkdir(target, 0o700); err != nil {
			return fmt.Errorf("mask %s: %w", m.Dir, err)
		}
		src := "/proc/self/fd/" + strconv.Itoa(k.fd)
		if err := unix.Mount(src, target, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("mask %s: bind %s back: %w", m.Dir, k.name, err)
		}
	}
	return nil
}

// confine applies the Landlock domain to the calling thread, which then
// execs: only that thread's credentials pass to the new program.
func confine(iso Isolation) error {
	if !iso.LandlockOn {
		return nil
	}
	runtime.LockOSThread()
	if _, err := landlock.RestrictThread(iso.Landlock, landlock.Options{ScopeSignals: !iso.PrivatePID}); err != nil {
		return fmt.Errorf("landlock: %w", err)
	}
	return nil
}

// hostPID translates pid, as the supervisor sees it inside the task's PID
// namespace, to the host's pid: the kernel prints a pidfd's pid as seen by
// the procfs instance it is read through, and /proc here is the host's.
func hostPID(pid int) (int, error) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return 0, fmt.Errorf("pidfd of pid %d: %w", pid, err)
	}
	defer unix.Close(fd)
	f, err := os.Open("/proc/self/fdinfo/" + strconv.Itoa(fd))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "Pid:"); ok {
			host, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil || host <= 0 {
				return 0, fmt.Errorf("pidfd of pid %d: pid %q", pid, v)
			}
			return host, nil
		}
	}
	return 0, fmt.Errorf("pidfd of pid %d: no Pid line", pid)
}

// selfHostPID is our pid in the host's PID namespace: /proc is the host's
// in the supervisor, even when the supervisor is init of the task's namespace.
func selfHostPID() int {
	if s, err := os.Readlink("/proc/self"); err == nil {
		if pid, err := strconv.Atoi(s); err == nil {
			return pid
		}
	}
	return os.Getpid()
}

// joinTaskNamespaces moves the calling thread into the task's mount
// namespace and makes its children start in the task's PID namespace. The
// thread stays locked: it is no use to any other goroutine afterwards. A
// thread of a Go program shares its filesystem context with the others,
// which setns(CLONE_NEWNS) refuses, so it gets its own first.
func joinTaskNamespaces(task procRecord) error {
	if !task.Alive() {
		return errors.New("the task has exited")
	}
	dir := "/proc/" + strconv.Itoa(task.PID) + "/ns/"
	mnt, err := unix.Open(dir+"mnt", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open the task's mount namespace: %w", err)
	}
	defer unix.Close(mnt)
	pid, err := unix.Open(dir+"pid", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open the task's PID namespace: %w", err)
	}
	defer unix.Close(pid)
	// The pid may have been reused between the check and the opens.
	if !task.Alive() {
		return errors.New("the task has exited")
	}
	runtime.LockOSThread()
	if err := unix.Unshare(unix.CLONE_FS); err != nil {
		return fmt.Errorf("unshare filesystem context: %w", err)
	}
	if err := unix.Setns(mnt, unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("join the task's mount namespace: %w", err)
	}
	if err := unix.Setns(pid, unix.CLONE_NEWPID); err != nil {
		return fmt.Errorf("join the task's PID namespace: %w", err)
	}
	return nil
}
