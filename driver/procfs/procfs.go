// Package procfs reads the few /proc facts the driver needs to follow
// processes that are not its children (supervisors, MPS daemons) across its
// own restarts: identity by start time, so a recycled pid is never mistaken
// for the process it replaced.
package procfs

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
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

// Alive reports whether pid is still the process that started at startTicks
// and has not exited.
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
