package supervisor

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// Enter turns the calling process into one more process of the task: it
// joins the task's cgroups, drops to the task's user and execs argv with the
// task's environment and working directory. `nomad alloc exec` runs through
// it, so an exec'd shell is confined and accounted like the task. It returns
// only on failure.
func Enter(spec Spec, argv []string) error {
	if len(argv) == 0 {
		return fmt.Errorf("no command given")
	}
	pid := []byte(strconv.Itoa(syscall.Getpid()))
	for _, procs := range spec.CgroupProcsFiles {
		if err := writeExisting(procs, pid); err != nil {
			return fmt.Errorf("join cgroup %s: %v", filepath.Dir(procs), err)
		}
	}
	if spec.SetUser {
		if err := dropPrivileges(spec.UID, spec.GID, spec.Groups); err != nil {
			return err
		}
	}
	if spec.Dir != "" {
		if err := syscall.Chdir(spec.Dir); err != nil {
			return fmt.Errorf("working directory %q: %v", spec.Dir, errText(err))
		}
	}
	path, err := lookPath(argv[0], envValue(spec.Env, "PATH"))
	if err != nil {
		return err
	}
	env := spec.Env
	if env == nil {
		env = []string{}
	}
	err = syscall.Exec(path, argv, env)
	return fmt.Errorf("command %q: %v", argv[0], errText(err))
}

// RunExecShim is the "exec-shim <statedir> -- argv…" sub-command behind
// `nomad alloc exec`: it becomes one more process of the task (Enter).
func RunExecShim(args []string) int {
	if len(args) < 3 || args[1] != "--" {
		fmt.Fprintln(os.Stderr, "usage: exec-shim <statedir> -- command [args…]")
		return 2
	}
	spec, err := readSpec(args[0])
	if err != nil {
		fmt.Fprintf(os.Stderr, "exec: %v\n", err)
		return 127
	}
	err = Enter(spec, args[2:])
	fmt.Fprintf(os.Stderr, "exec: %v\n", err)
	return 127
}

// Dispatch runs the sub-command a driver binary was started for, if it is
// one of the supervisor's ("supervise", "shim", "exec-shim"); every binary
// that can supervise tasks calls it first thing in main.
func Dispatch(args []string) (code int, handled bool) {
	if len(args) < 2 {
		return 0, false
	}
	switch args[1] {
	case "supervise":
		return RunSupervisor(args[2:]), true
	case "shim":
		return RunShim(args[2:]), true
	case "exec-shim":
		return RunExecShim(args[2:]), true
	}
	return 0, false
}
