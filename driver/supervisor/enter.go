package supervisor

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// RunExecShim is the "exec-shim <statedir> -- argv…" sub-command behind
// `nomad alloc exec`: it runs argv as one more process of the task, in its
// cgroups, namespaces and Landlock domain, as its user, with its environment
// and working directory, and exits as argv did.
func RunExecShim(args []string) int {
	if len(args) < 3 || args[1] != "--" {
		fmt.Fprintln(os.Stderr, "usage: exec-shim <statedir> -- command [args…]")
		return 2
	}
	spec, err := readSpec(args[0])
	if err == nil {
		err = enter(args[0], spec, args[2:])
	}
	fmt.Fprintf(os.Stderr, "exec: %v\n", err)
	return 127
}

// enter returns only on failure.
func enter(dir string, spec Spec, argv []string) error {
	if len(argv) == 0 {
		return errors.New("no command given")
	}
	if err := joinAccounting(spec); err != nil {
		return err
	}
	private := spec.Isolation.PrivatePID
	if private {
		var task procRecord
		if err := readJSON(filepath.Join(dir, taskFile), &task); err != nil {
			return fmt.Errorf("the task is not running: %w", err)
		}
		if err := joinTaskNamespaces(task); err != nil {
			return err
		}
	}
	if err := confine(spec.Isolation); err != nil {
		return err
	}
	if err := becomeUser(spec); err != nil {
		return err
	}
	path, err := lookPath(argv[0], envValue(spec.Env, "PATH"))
	if err != nil {
		return err
	}
	if !private {
		err = syscall.Exec(path, argv, nonNil(spec.Env))
		return errors.New(execError(argv[0], path, err, spec.Isolation))
	}
	// Joining a PID namespace takes effect for children only: argv runs as
	// our child, started from this (locked, joined, confined) thread.
	os.Exit(runChild(path, argv, nonNil(spec.Env), spec.Isolation))
	return nil
}

// runChild starts the command, passes on the signals a terminal or the
// driver sends us, and returns an exit code that mirrors the child's; a
// child killed by a signal is mirrored by dying of the same signal.
func runChild(path string, argv, env []string, iso Isolation) int {
	sigs := make(chan os.Signal, 8)
	forwarded := []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}
	signal.Notify(sigs, forwarded...)
	// No Pdeathsig: Go's child checks getppid() against our pid, which is
	// 0 from inside the task's PID namespace, and would kill itself. The
	// driver stops a session by killing our process group, which the child
	// shares, or by closing its terminal, whose hangup reaches it.
	attr := &syscall.SysProcAttr{}
	if isTerminal(os.Stdin) {
		// A session of its own inside the task's PID namespace, with the
		// terminal as its controlling one: our session and process group
		// do not exist there, and a shell's job control needs its own.
		attr.Setsid, attr.Setctty, attr.Ctty = true, true, 0
	}
	p, err := os.StartProcess(path, argv, &os.ProcAttr{Env: env, Files: []*os.File{os.Stdin, os.Stdout, os.Stderr}, Sys: attr})
	if err != nil {
		fmt.Fprintf(os.Stderr, "exec: %s\n", execError(argv[0], path, err, iso))
		return 127
	}
	go func() {
		for s := range sigs {
			p.Signal(s)
		}
	}()
	st, err := p.Wait()
	if err != nil {
		fmt.Fprintf(os.Stderr, "exec: wait for %q: %v\n", argv[0], err)
		return 127
	}
	ws := st.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		signal.Reset(ws.Signal())
		syscall.Kill(os.Getpid(), ws.Signal())
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
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
	case "probe-isolation":
		return RunProbe(args[2:]), true
	}
	return 0, false
}
