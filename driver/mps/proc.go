package mps

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

const procRoot = "/proc"

// procStart returns a process's start time (clock ticks after boot, field 22
// of /proc/<pid>/stat) and whether it is running. A zombie counts as gone:
// the control daemon is not our child (it daemonises), so where init does
// not reap, a dead daemon lingers as a zombie that signal 0 still reaches.
func procStart(pid int) (uint64, bool) {
	if pid <= 0 {
		return 0, false
	}
	data, err := os.ReadFile(fmt.Sprintf("%s/%d/stat", procRoot, pid))
	if err != nil {
		return 0, false
	}
	// comm may hold spaces and parentheses; it ends at the last ')'.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(data[i+1:]))
	// f[0] is field 3 (state), so field 22 (starttime) is f[19].
	if len(f) < 20 {
		return 0, false
	}
	if f[0] == "Z" || f[0] == "X" || f[0] == "x" {
		return 0, false
	}
	start, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return 0, false
	}
	return start, true
}

// sameProcess says whether pid still is the process that had start time
// start, so a recycled pid is never mistaken for our daemon.
func sameProcess(pid int, start uint64) bool {
	s, ok := procStart(pid)
	return ok && s == start
}

// procEnv returns one variable of a process's initial environment.
func procEnv(pid int, name string) (string, bool) {
	data, err := os.ReadFile(fmt.Sprintf("%s/%d/environ", procRoot, pid))
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
