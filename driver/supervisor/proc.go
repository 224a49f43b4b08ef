package supervisor

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nomad-gpu/nomad-gpu/driver/procfs"
)

// pidReused: /proc shows a different process under that number, or the node
// rebooted since, so any process group or session of the old one is
// certainly gone (the kernel does not hand out a pid while it is still in use
// as a pgid or sid).
func pidReused(id procfs.Identity) bool {
	if id.BootID != "" && id.BootID != procfs.BootID() {
		return true
	}
	s, err := procfs.ReadStat(id.PID)
	return err == nil && s.StartTicks != id.StartTicks
}

const procPollInterval = 200 * time.Millisecond

// waitGone blocks until the process (pid, startTicks) has exited, whether or
// not it is our child. A pidfd on the Go netpoller costs no thread per
// waiter; where pidfd_open is unavailable (old kernel, seccomp) it falls back
// to polling /proc.
func waitGone(ctx context.Context, id procfs.Identity) error {
	if !id.Alive() {
		return nil
	}
	fd, err := unix.PidfdOpen(id.PID, unix.PIDFD_NONBLOCK)
	if errors.Is(err, unix.ESRCH) {
		return nil
	}
	if err != nil {
		return pollGone(ctx, id)
	}
	f := os.NewFile(uintptr(fd), "pidfd")
	defer f.Close()
	// Checked after opening: from here on the pidfd pins this exact process.
	if !id.Alive() {
		return nil
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return pollGone(ctx, id)
	}
	stop := context.AfterFunc(ctx, func() { f.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	err = rc.Read(func(fd uintptr) bool {
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, perr := unix.Poll(pfd, 0)
		return n > 0 || (perr != nil && perr != unix.EINTR)
	})
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	// Not pollable through the netpoller on this kernel/runtime.
	return pollGone(ctx, id)
}

func pollGone(ctx context.Context, id procfs.Identity) error {
	t := time.NewTicker(procPollInterval)
	defer t.Stop()
	for id.Alive() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// sessionMembers lists live processes whose session id is sid.
func sessionMembers(sid int) []int {
	return procfs.Select(func(_ int, s procfs.Stat) bool { return s.Session == sid })
}

// cgroupMembers lists the live processes of a cgroup.procs file; a cgroup
// that is gone has none.
func cgroupMembers(procsFile string) ([]int, error) {
	b, err := os.ReadFile(procsFile)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, l := range strings.Fields(string(b)) {
		pid, err := strconv.Atoi(l)
		if err != nil {
			continue
		}
		if s, err := procfs.ReadStat(pid); err != nil || s.Dead() {
			continue
		}
		pids = append(pids, pid)
	}
	return pids, nil
}

func killIgnoringGone(pid int, sig syscall.Signal) error {
	err := syscall.Kill(pid, sig)
	if err == syscall.ESRCH {
		return nil
	}
	return err
}
