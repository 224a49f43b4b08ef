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

	"github.com/nomad-gpu/nomad-gpu/driver/procfs"
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
// waits for the task and records its exit in exit.json. With a private PID
// namespace it is that namespace's init: when it exits, whatever the task
// left running there is killed with it.
func RunSupervisor(args []string) int {
	if len(args) != 1 {
		fmt.Fprintln(os.Stderr, "usage: supervise <statedir>")
		return 2
	}
	// The supervisor only sleeps in wait4; one P keeps its footprint small.
	runtime.GOMAXPROCS(1)
	// Stderr is supervisor.log (Start opens it), so Go runtime crashes land
	// there too; the cap keeps a chatty or long-lived supervisor bounded.
	logger := log.New(&capWriter{w: os.Stderr, left: logLimit}, "", log.LstdFlags|log.Lmicroseconds|log.LUTC)
	logger.SetPrefix(fmt.Sprintf("supervisor[%d] ", selfHostPID()))
	ignoreSignals(logger)
	s := &supervisorRun{dir: args[0], log: logger, notify: inheritedPipe()}
	return s.run()
}

// ignoreSignals handles, rather than ignores, the signals a terminal or a
// process group kill may send: SIG_IGN would be inherited across exec and the
// task could then never be stopped with SIGTERM/SIGINT, while a Go handler is
// reset to SIG_DFL by exec. Signals meant for the task go to its process
// group via the plugin, never via us.
func ignoreSignals(logger *log.Logger) {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGPIPE)
	go func() {
		for s := range sigs {
			logger.Printf("ignoring signal %v", s)
		}
	}()
}

type supervisorRun struct {
	dir    string
	log    *log.Logger
	notify *os.File // Start's notify pipe until the report is sent
}

func (s *supervisorRun) report(r startReport) {
	if s.notify == nil {
		return
	}
	b, _ := json.Marshal(r)
	// EPIPE (plugin died during Start) is fine: the task still runs.
	s.notify.Write(append(b, '\n'))
	s.notify.Close()
	s.notify = nil
}

func (s *supervisorRun) fail(err error) int {
	msg, permanent := err.Error(), false
	var se *StartError
	if errors.As(err, &se) {
		permanent = se.Permanent
	}
	s.log.Printf("task not started: %s", msg)
	writeJSONAtomic(filepath.Join(s.dir, exitFile), exitRecord{ExitStatus: ExitStatus{ExitCode: -1, FinishedAt: time.Now(), Err: msg}})
	s.report(startReport{Error: msg, Permanent: permanent})
	return 1
}

func (s *supervisorRun) run() int {
	// Orphans of the task (daemonised grandchildren) are re-parented to us
	// instead of init while we live; the wait loop below reaps them.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		s.log.Printf("cannot become child subreaper: %v", err)
	}
	// Holding no directory open keeps the task's mounts unmountable.
	os.Chdir("/")

	spec, err := readSpec(s.dir)
	if err != nil {
		return s.fail(err)
	}
	s.log.Printf("starting task %s: %q %q (private PID namespace: %v, landlock: %v)",
		spec.TaskID, spec.Command, spec.Args, spec.Isolation.PrivatePID, spec.Isolation.LandlockOn)
	if spec.Isolation.PrivatePID && os.Getpid() != 1 {
		return s.fail(errors.New("a private PID namespace was asked for, but the supervisor was not started as its init"))
	}
	self, err := procfs.Identify(selfHostPID())
	if err != nil {
		return s.fail(fmt.Errorf("read own identity: %w", err))
	}
	if err := writeJSONAtomic(filepath.Join(s.dir, supervisorFile), procRecord{Identity: self, StartedAt: time.Now()}); err != nil {
		return s.fail(fmt.Errorf("write %s: %w", supervisorFile, err))
	}

	shim, err := startShim(s.dir, spec, time.Now().Add(setupTimeout))
	if err != nil {
		if shim.pid > 0 {
			// The shim failed before exec; reap it so its status is not left to init.
			ws, _ := waitPid(shim.pid)
			s.log.Printf("shim exited with %s", describe(ws))
		}
		return s.fail(err)
	}
	// Without task.json a restarted plugin could not find the task again,
	// so a task we cannot record is a task we must not leave running.
	if err := writeJSONAtomic(filepath.Join(s.dir, taskFile), shim.rec); err != nil {
		syscall.Kill(-shim.pid, syscall.SIGKILL)
		waitPid(shim.pid)
		return s.fail(fmt.Errorf("record task pid %d: %w", shim.rec.PID, err))
	}
	s.log.Printf("task running as pid %d", shim.rec.PID)
	rec := shim.rec
	s.report(startReport{Task: &rec})

	st := exitStatus(waitPid(shim.pid))
	if err := writeJSONAtomic(filepath.Join(s.dir, exitFile), exitRecord{ExitStatus: st}); err != nil {
		s.log.Printf("write %s: %v", exitFile, err)
		return 1
	}
	s.log.Printf("task exited: exit code %d, signal %d", st.ExitCode, st.Signal)
	return 0
}

func exitStatus(ws syscall.WaitStatus, err error) ExitStatus {
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
	return st
}

// startedShim is the task's first process: pid as the supervisor sees it
// (to wait for it), rec as the host sees it (for the plugin).
type startedShim struct {
	pid int
	rec procRecord
}

// startShim starts "<Executable> shim <dir>" in a new session with the log
// FIFOs as stdout/stderr, in a mount namespace of its own when the task's PID
// namespace is private. The error is a *StartError when the shim reported
// why it could not exec the task; pid is then set and the shim must be reaped.
func startShim(dir string, spec Spec, deadline time.Time) (startedShim, error) {
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return startedShim{}, err
	}
	defer devnull.Close()
	stdout, err := openLogSink(spec.StdoutPath, deadline)
	if err != nil {
		return startedShim{}, fmt.Errorf("open stdout %s: %w", spec.StdoutPath, err)
	}
	defer stdout.Close()
	stderr, err := openLogSink(spec.StderrPath, deadline)
	if err != nil {
		return startedShim{}, fmt.Errorf("open stderr %s: %w", spec.StderrPath, err)
	}
	defer stderr.Close()

	// Close-on-exec in the shim: EOF with no data means exec succeeded, so
	// "running" is reported only once the task's own code is in place.
	execR, execW, err := os.Pipe()
	if err != nil {
		return startedShim{}, err
	}
	defer execR.Close()
	attr := &syscall.SysProcAttr{Setsid: true}
	if spec.Isolation.PrivatePID {
		attr.Cloneflags = syscall.CLONE_NEWNS
	}
	// /proc/self/exe, not spec.Executable: the shim must be this very
	// binary even if the plugin was upgraded on disk meanwhile.
	p, err := os.StartProcess("/proc/self/exe", []string{spec.Executable, "shim", dir}, &os.ProcAttr{
		Dir: "/",
		// The shim is the plugin binary running as root: it must not see
		// task-controlled variables such as LD_PRELOAD or GODEBUG. It reads
		// spec.Env from spec.json and hands it to exec.
		Env:   []string{},
		Files: []*os.File{devnull, stdout, stderr, execW},
		Sys:   attr,
	})
	execW.Close()
	if err != nil {
		return startedShim{}, fmt.Errorf("start shim: %w", err)
	}
	shim := startedShim{pid: p.Pid}
	// We reap with wait4 ourselves (see waitPid); os.Process must not.
	p.Release()

	execR.SetReadDeadline(deadline)
	msg, err := io.ReadAll(io.LimitReader(execR, 64<<10))
	if err != nil {
		syscall.Kill(shim.pid, syscall.SIGKILL)
		return shim, fmt.Errorf("task set-up did not finish within %v: %v", setupTimeout, err)
	}
	if len(msg) > 0 {
		var se StartError
		if jerr := json.Unmarshal(msg, &shimStatus{&se}); jerr != nil || se.Msg == "" {
			se = StartError{Msg: string(msg)}
		}
		return shim, &se
	}
	host := shim.pid
	if spec.Isolation.PrivatePID {
		if host, err = hostPID(shim.pid); err != nil {
			syscall.Kill(shim.pid, syscall.SIGKILL)
			waitPid(shim.pid)
			return startedShim{}, fmt.Errorf("find the task's host pid: %w", err)
		}
	}
	id, err := procfs.Identify(host)
	if err != nil {
		syscall.Kill(shim.pid, syscall.SIGKILL)
		waitPid(shim.pid)
		return startedShim{}, fmt.Errorf("read task pid %d: %w", host, err)
	}
	shim.rec = procRecord{Identity: id, StartedAt: time.Now()}
	return shim, nil
}

// shimStatus is what the shim writes to the exec-status pipe when it cannot
// exec the task.
type shimStatus struct{ *StartError }

func (s shimStatus) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Error     string `json:"error"`
		Permanent bool   `json:"permanent,omitempty"`
	}{s.Msg, s.Permanent})
}

func (s *shimStatus) UnmarshalJSON(b []byte) error {
	var v struct {
		Error     string `json:"error"`
		Permanent bool   `json:"permanent"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	s.Msg, s.Permanent = v.Error, v.Permanent
	return nil
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
