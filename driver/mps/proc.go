package mps

import (
	"bufio"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/nomad-gpu/nomad-gpu/driver/procfs"
)

func procEnv(pid int, name string) (string, bool) { return procfs.Env(pid, name) }

// procUID is a process's effective uid, from /proc/<pid>/status.
func procUID(pid int) (int, bool) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "Uid:")
		if !ok {
			continue
		}
		f := strings.Fields(rest) // real, effective, saved, filesystem
		if len(f) < 2 {
			return 0, false
		}
		uid, err := strconv.Atoi(f[1])
		return uid, err == nil
	}
	return 0, false
}

func fileUID(fi fs.FileInfo) (int, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return int(st.Uid), true
}
