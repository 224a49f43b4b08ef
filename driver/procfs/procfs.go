// Package procfs reads the few /proc facts the driver needs to follow
// processes that are not its children (supervisors, MPS daemons) across its
// own restarts: identity by pid, start time and boot, so a recycled pid is
// never mistaken for the process it replaced, not even after a reboot has
// brought the same pid back with the same start time.
package procfs

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

type Stat struct {
	State      byte
	PPID       int
	Pgrp       int
	Session    int
	StartTicks uint64 // field 22: clock ticks after boot
}

func ReadStat(pid int) (Stat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return Stat{}, err
	}
	// comm (field 2) may contain spaces and ')' itself; only the last ')' is reliable.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return Stat{}, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	f := strings.Fields(string(b[i+2:]))
	if len(f) < 20 {
		return Stat{}, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	var s Stat
	s.State = f[0][0]
	s.PPID, _ = strconv.Atoi(f[1])
	s.Pgrp, _ = strconv.Atoi(f[2])
	s.Session, _ = strconv.Atoi(f[3])
	if s.StartTicks, err = strconv.ParseUint(f[19], 10, 64); err != nil {
		return Stat{}, fmt.Errorf("/proc/%d/stat: start time: %w", pid, err)
	}
	return s, nil
}

// Dead: a zombie has finished running. Where nothing reaps orphans, a dead
// process lingers as one and signal 0 still reaches it.
func (s Stat) Dead() bool { return s.State == 'Z' || s.State == 'X' || s.State == 'x' }

// Identity names one process for good. Start ticks count from boot, so
// after a reboot (a state directory on persistent disk outlives one) the
// same pid and start time may well name another process; the boot ID tells
// the two apart.
type Identity struct {
	PID        int    `json:"pid"`
	StartTicks uint64 `json:"start_ticks"`
	BootID     string `json:"boot_id,omitempty"`
}

const bootIDPath = "/proc/sys/kernel/random/boot_id"

var bootID = sync.OnceValue(func() string {
	b, err := os.ReadFile(bootIDPath)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
})

// BootID is this boot's ID (/proc/sys/kernel/random/boot_id), read once;
// "" where the kernel does not offer it.
func BootID() string { return bootID() }

// Identify returns pid's identity: its start ticks and this boot's ID. It
// fails when no such process exists; a zombie has one (and is not Alive).
func Identify(pid int) (Identity, error) {
	if pid <= 0 {
		return Identity{}, fmt.Errorf("pid %d: no such process", pid)
	}
	s, err := ReadStat(pid)
	if err != nil {
		return Identity{}, err
	}
	return Identity{PID: pid, StartTicks: s.StartTicks, BootID: BootID()}, nil
}

// Alive reports whether the process still runs: same pid, same start ticks,
// same boot, and not a zombie. An empty BootID (a record written before
// identities carried one) counts as this boot, and so does any where this
// kernel offers no boot ID.
func (id Identity) Alive() bool {
	if b := BootID(); id.BootID != "" && b != "" && id.BootID != b {
		return false
	}
	return Alive(id.PID, id.StartTicks)
}

// Alive reports whether pid is still the process that started at startTicks
// (in this boot) and has not exited. Identity.Alive also checks the boot.
func Alive(pid int, startTicks uint64) bool {
	if pid <= 0 {
		return false
	}
	s, err := ReadStat(pid)
	return err == nil && s.StartTicks == startTicks && !s.Dead()
}

// Env returns one variable of a process's initial environment.
func Env(pid int, name string) (string, bool) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return "", false
	}
	prefix := []byte(name + "=")
	for _, kv := range bytes.Split(data, []byte{0}) {
		if bytes.HasPrefix(kv, prefix) {
			return string(kv[len(prefix):]), true
		}
	}
	return "", false
}

// Select lists the live processes (zombies left out) for which keep says
// yes.
func Select(keep func(pid int, s Stat) bool) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if s, err := ReadStat(pid); err == nil && !s.Dead() && keep(pid, s) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// Disposition is what a process does with a signal.
type Disposition int

const (
	// SignalDefault leaves it to the signal's default action: for most
	// signals (SIGUSR1 among them) to end the process.
	SignalDefault Disposition = iota
	// SignalIgnored ignores it.
	SignalIgnored
	// SignalCaught runs a handler.
	SignalCaught
)

func (d Disposition) String() string {
	switch d {
	case SignalIgnored:
		return "ignored"
	case SignalCaught:
		return "caught"
	}
	return "default"
}

// SignalDisposition reads what pid does with sig now, from the SigCgt and
// SigIgn masks of /proc/<pid>/status (bit sig-1 of each). A process that
// has just been exec'd has the default disposition for every signal it
// neither inherited ignored nor has installed a handler for yet.
func SignalDisposition(pid int, sig syscall.Signal) (Disposition, error) {
	if pid <= 0 || sig <= 0 || sig > 64 {
		return SignalDefault, fmt.Errorf("pid %d, signal %d: out of range", pid, sig)
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return SignalDefault, err
	}
	masks := map[string]uint64{}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || (k != "SigCgt" && k != "SigIgn") {
			continue
		}
		m, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		if err != nil {
			return SignalDefault, fmt.Errorf("/proc/%d/status: %s: %w", pid, k, err)
		}
		masks[k] = m
	}
	if len(masks) != 2 {
		return SignalDefault, fmt.Errorf("/proc/%d/status: no SigCgt and SigIgn", pid)
	}
	bit := uint64(1) << (sig - 1)
	switch {
	case masks["SigCgt"]&bit != 0:
		return SignalCaught, nil
	case masks["SigIgn"]&bit != 0:
		return SignalIgnored, nil
	}
	return SignalDefault, nil
}
