package mps

import "github.com/nomad-gpu/nomad-gpu/driver/procfs"

// procStart returns a process's start time and whether it is running. A
// zombie counts as gone: the control daemon is not our child (it
// daemonises), so where init does not reap, a dead daemon lingers.
func procStart(pid int) (uint64, bool) {
	if pid <= 0 {
		return 0, false
	}
	s, err := procfs.ReadStat(pid)
	if err != nil || s.Dead() {
		return 0, false
	}
	return s.StartTicks, true
}

// sameProcess says whether pid still is the process that had start time
// start, so a recycled pid is never mistaken for our daemon.
func sameProcess(pid int, start uint64) bool { return procfs.Alive(pid, start) }

func procEnv(pid int, name string) (string, bool) { return procfs.Env(pid, name) }
