package supervisor

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

const (
	// notifyFD is where a child finds the pipe to its parent: Start's notify
	// pipe in the supervisor, the exec-status pipe in the shim.
	notifyFD = 3
	// setupTimeout bounds everything before the task runs (waiting for
	// logmon to open the log FIFOs, the shim's set-up). It is shorter than
	// Start's own bound so that the supervisor reports the cause itself.
	setupTimeout = 25 * time.Second
	logLimit     = 1 << 20
)

// RunSupervisor is the "supervise <statedir>" sub-command. It returns the
// process exit code. It starts the task through the shim, reports to Start,
// waits for the task and records its exit in exit.json.
func RunSupervisor(args []string) int {
	if len(args) != 1 {
		fmt.Fprintln(os.Stderr, "usage: supervise <statedir>")
		return 2
	}
	dir := args[0]
	// The supervisor only sleeps in wait4; one P keeps its footprint small.
	runtime.GOMAXPROCS(1)

	// Stderr is supervisor.log (Start opens it), so Go runtime crashes land
	// there too; the cap keeps a chatty or long-lived supervisor bounded.
	logger := log.New(&capWriter{w: os.Stderr, left: logLimit}, "", log.LstdFlags|log.Lmicroseconds|log.LUTC)
	logger.SetPrefix(fmt.Sprintf("supervisor[%d] ", os.Getpid()))

	// Handled, not ignored: SIG_IGN would be inherited across exec and the
	// task could then never be stopped with SIGTERM/SIGINT. A Go handler is
	// reset to SIG_DFL by exec. Signals meant for the task go to its process
	// group via the plugin, never via us.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGPIPE)
	go func() {
		for s := range sigs {
			logger.Printf("ignoring signal %v", s)
		}
	}()

	notify := inheritedPipe()
	report := func(r startReport) {
		if notify == nil {
			return
		}
		b, _ := json.Marshal(r)
		// EPIPE (plugin died during Start) is fine: the task still runs.
		notify.Write(append(b, '\n'))
		notify.Close()
		notify = nil
	}

	// Orphans of the task (daemonised grandchildren) are re-parented to us
	// instead of init while we live; the wait loop below reaps them.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		logger.Printf("cannot become child subreaper: %v", err)
	}
	// Holding no directory open keeps the task's mounts unmountable.
	os.Chdir("/")

	fail := func(format string, a ...any) int {
		msg := fmt.Sprintf(format, a...)
		logger.Printf("task not started: %s", msg)
		writeJSONAtomic(filepath.Join(dir, exitFile), exitRecord{ExitStatus: ExitStatus{ExitCode: -1, FinishedAt: time.Now(), Err: msg}})
		report(startReport{Error: msg})
		return 1
	}

	spec, err := readSpec(dir)
	if err != nil {
		return fail("%v", err)
	}
	logger.Printf("starting task %s: %q %q", spec.TaskID, spec.Command, spec.Args)

	self, err := procStartTicks(os.Getpid())
	if err != nil {
		return fail("read own start time: %v", err)
	}
	if err := writeJSONAtomic(filepath.Join(dir, supervisorFile), procRecord{PID: os.Getpid(), StartTicks: self, StartedAt: time.Now()}); err != nil {
		return fail("write %s: %v", supervisorFile, err)
	}

	task, shimErr, err := startShim(dir, spec, time.Now().Add(setupTimeout))
	if err != nil {
		return fail("%v", err)
	}
	if shimErr != "" {
		// The shim failed before exec; reap it so its status is not left to init.
		ws, _ := waitPid(task)
		logger.Printf("shim exited with %s", describe(ws))
		return fail("%s", shimErr)
	}

	// Without task.json a restarted plugin could not find the task again,
	// so a task we cannot record is a task we must not leave running.
	ticks, err := procStartTicks(task)
	rec := procRecord{PID: task, StartTicks: ticks, StartedAt: time.Now()}
	if err == nil {
		err = writeJSONAtomic(filepath.Join(dir, taskFile), rec)
	}
	if err != nil {
		syscall.Kill(-task, syscall.SIGKILL)
		waitPid(task)
		return fail("record task pid %d: %v", task, err)
	}
	logger.Printf("task running as pid %d", task)
	report(startReport{Task: &rec})

	ws, err := waitPid(task)
	st := ExitStatus{FinishedAt: time.Now()}
	switch {
	case err != nil:
		st.ExitCode, st.Err = -1, fmt.Sprintf("wait for task: %v", err)
	case ws.Signaled():
		// Nomad's executor convention: 128+signal, with the signal reported too.
		st.Signal = int(ws.Signal())
		st.ExitCode = 128 + st.Signal
	default:
		st.ExitCode = ws.ExitStatus()
	}
	if err := writeJSONAtomic(filepath.Join(dir, exitFile), exitRecord{ExitStatus: st}); err != nil {
		logger.Printf("write %s: %v", exitFile, err)
		return 1
	}
	logger.Printf("task exited: %s", describe(ws))
	return 0
}

// startShim starts "<Executable> shim <dir>" in a new session with the log
// FIFOs as stdout/stderr. It returns the task pid and, if the shim failed
// before exec, its error message.
func startShim(dir string, spec Spec, deadline time.Time) (int, string, error) {
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return 0, "", err
	}
	defer devnull.Close()
	stdout, err := openLogSink(spec.StdoutPath, deadline)
	if err != nil {
		return 0, "", fmt.Errorf("open stdout %s: %w", spec.StdoutPath, err)
	}
	defer stdout.Close()
	stderr, err := openLogSink(spec.StderrPath, deadline)
	if err != nil {
		return 0, "", fmt.Errorf("open stderr %s: %w", spec.StderrPath, err)
	}
	defer stderr.Close()

	// Close-on-exec in the shim: EOF with no data means exec succeeded, so
	// "running" is reported only once the task's own code is in place.
	execR, execW, err := os.Pipe()
	if err != nil {
		return 0, "", err
	}
	defer execR.Close()
	// /proc/self/exe, not spec.Executable: the shim must be this very
	// binary even if the plugin was upgraded on disk meanwhile.
	p, err := os.StartProcess("/proc/self/exe", []string{spec.Executable, "shim", dir}, &os.ProcAttr{
		Dir: "/",
		// The shim is the plugin binary running as root: it must not see
		// task-controlled variables such as LD_PRELOAD or GODEBUG. It reads
		// spec.Env from spec.json and hands it to exec.
		Env:   []string{},
		Files: []*os.File{devnull, stdout, stderr, execW},
		Sys:   &syscall.SysProcAttr{Setsid: true},
	})
	execW.Close()
	if err != nil {
		return 0, "", fmt.Errorf("start shim: %w", err)
	}
	pid := p.Pid
	// We reap with wait4 ourselves (see waitPid); os.Process must not.
	p.Release()

	execR.SetReadDeadline(deadline)
	msg, err := io.ReadAll(io.LimitReader(execR, 64<<10))
	if err != nil {
		syscall.Kill(pid, syscall.SIGKILL)
		return pid, fmt.Sprintf("task set-up did not finish within %v: %v", setupTimeout, err), nil
	}
	return pid, string(msg), nil
}

// openLogSink opens a log FIFO for writing without blocking forever: a FIFO
// open blocks until a reader exists, and if logmon died we must fail, not hang.
// O_NONBLOCK fails with ENXIO while there is no reader, so retry until the
// deadline, then make the fd blocking again for the task.
func openLogSink(path string, deadline time.Time) (*os.File, error) {
	if path == "" {
		path = os.DevNull
	}
	for {
		// The log directory is writable by tasks: never follow a link or
		// create a file there (as root, that would write wherever a task
		// points), and accept only a FIFO or a character device.
		fd, err := unix.Open(path, unix.O_WRONLY|unix.O_APPEND|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err == nil {
			var st unix.Stat_t
			if err := unix.Fstat(fd, &st); err != nil {
				unix.Close(fd)
				return nil, err
			}
			if t := st.Mode & unix.S_IFMT; t != unix.S_IFIFO && t != unix.S_IFCHR {
				unix.Close(fd)
				return nil, fmt.Errorf("log sink %s is not a FIFO", path)
			}
			if err := unix.SetNonblock(fd, false); err != nil {
				unix.Close(fd)
				return nil, err
			}
			return os.NewFile(uintptr(fd), path), nil
		}
		if err != unix.ENXIO {
			return nil, err
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("no reader on the log FIFO after %v (is logmon running?)", setupTimeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitPid waits for pid while reaping every other child: as subreaper we
// inherit the task's orphans, and they must not pile up as zombies.
func waitPid(pid int) (syscall.WaitStatus, error) {
	for {
		var ws syscall.WaitStatus
		got, err := syscall.Wait4(-1, &ws, 0, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return 0, err
		}
		if got == pid {
			return ws, nil
		}
	}
}

func describe(ws syscall.WaitStatus) string {
	if ws.Signaled() {
		return fmt.Sprintf("signal %v", ws.Signal())
	}
	return fmt.Sprintf("exit code %d", ws.ExitStatus())
}

// inheritedPipe returns fd 3 if the parent passed a pipe there. It is made
// close-on-exec so it never leaks into a child.
func inheritedPipe() *os.File {
	var st unix.Stat_t
	if err := unix.Fstat(notifyFD, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFIFO {
		return nil
	}
	syscall.CloseOnExec(notifyFD)
	return os.NewFile(notifyFD, "notify")
}

// readReport reads the supervisor's one-line start report.
func readReport(r io.Reader) (startReport, error) {
	line, err := bufio.NewReader(io.LimitReader(r, 64<<10)).ReadBytes('\n')
	if len(line) == 0 {
		if err == nil || errors.Is(err, io.EOF) {
			err = errors.New("supervisor exited without reporting")
		}
		return startReport{}, err
	}
	var rep startReport
	if err := json.Unmarshal(line, &rep); err != nil {
		return startReport{}, fmt.Errorf("bad start report %q: %w", line, err)
	}
	return rep, nil
}
