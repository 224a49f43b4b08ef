package supervisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nomad-gpu/nomad-gpu/driver/procfs"
)

const (
	// startTimeout bounds Start; the supervisor's own bounds (FIFO open,
	// shim set-up) are shorter so that it normally reports the cause itself.
	startTimeout = 30 * time.Second
	// killPollInterval paces the SIGKILL sweep in KillTree.
	killPollInterval = 20 * time.Millisecond
	// destroyTimeout bounds Destroy, which has no context: DestroyTask's
	// error is ignored by the client, so it must not hang either.
	destroyTimeout = 15 * time.Second
)

// Handle is one supervised task, obtained from Start or Recover. Its methods
// are safe for concurrent use.
type Handle struct {
	spec      Spec
	dir       string
	sup       procfs.Identity
	task      procfs.Identity // PID 0 when the task never started (Recover of a failed start)
	startedAt time.Time

	done   chan struct{} // closed once the task has exited and result is set
	result ExitStatus

	destroyMu sync.Mutex
}

// Start creates spec.StateDir, starts a detached supervisor for the task and
// returns once the task is running. When the task cannot start (missing
// command, unknown user, unreadable working directory, no log reader…) it
// returns the reason, a *StartError when the supervisor or shim gave one,
// and leaves no process or state dir behind.
func Start(spec Spec) (*Handle, error) {
	if spec.StateDir == "" || !filepath.IsAbs(spec.StateDir) {
		return nil, fmt.Errorf("state dir must be an absolute path, got %q", spec.StateDir)
	}
	if spec.Executable == "" {
		return nil, errors.New("no supervisor executable given")
	}
	if spec.Command == "" {
		return nil, errors.New("no command given")
	}
	dir := spec.StateDir
	if err := prepareStateDir(dir); err != nil {
		return nil, err
	}
	if err := writeJSONAtomic(filepath.Join(dir, specFile), spec); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("write task spec: %w", err)
	}
	h, err := launch(spec)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return h, nil
}

// prepareStateDir creates dir, reusing a stale one only if no supervisor
// still lives there (reusing a live one would orphan its task's state).
func prepareStateDir(dir string) error {
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return fmt.Errorf("create state dir: %w", err)
	}
	err := os.Mkdir(dir, 0o700)
	if errors.Is(err, os.ErrExist) {
		var sup procRecord
		if readJSON(filepath.Join(dir, supervisorFile), &sup) == nil && sup.Alive() {
			return fmt.Errorf("state dir %s is in use by supervisor pid %d", dir, sup.PID)
		}
		if err := os.RemoveAll(dir); err != nil {
			return fmt.Errorf("remove stale state dir: %w", err)
		}
		err = os.Mkdir(dir, 0o700)
	}
	if err != nil {
		return fmt.Errorf("create state dir: %w", err)
	}
	// Mkdir's mode is subject to umask; the dir holds the task's environment.
	return os.Chmod(dir, 0o700)
}

func launch(spec Spec) (*Handle, error) {
	dir := spec.StateDir
	logf, err := os.OpenFile(filepath.Join(dir, logFile), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open supervisor log: %w", err)
	}
	defer logf.Close()
	devnull, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	defer devnull.Close()
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer pr.Close()

	cmd := exec.Command(spec.Executable, "supervise", dir)
	cmd.Dir = "/"
	// Empty, not nil (nil would inherit the plugin's environment). GORACE
	// only matters to -race builds (tests): without atexit_sleep_ms=0 every
	// supervisor would linger a second after its task.
	cmd.Env = []string{}
	if v, ok := os.LookupEnv("GORACE"); ok {
		cmd.Env = append(cmd.Env, "GORACE="+v)
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = devnull, devnull, logf
	cmd.ExtraFiles = []*os.File{pw}
	// Own session: no signal sent to the plugin's process group or
	// terminal reaches it. No Pdeathsig: it must outlive the plugin.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if spec.Isolation.PrivatePID {
		// The supervisor is the init of the task's PID namespace.
		cmd.SysProcAttr.Cloneflags = syscall.CLONE_NEWPID
	}
	err = cmd.Start()
	pw.Close()
	if err != nil {
		return nil, fmt.Errorf("start supervisor %s: %w", spec.Executable, err)
	}
	// Readable even if it already exited: it stays a zombie until cmd.Wait.
	sup, err := procfs.Identify(cmd.Process.Pid)
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, fmt.Errorf("supervisor pid %d: %w", cmd.Process.Pid, err)
	}

	pr.SetReadDeadline(time.Now().Add(startTimeout))
	rep, rerr := readReport(pr)
	if rerr != nil || rep.Error != "" || rep.Task == nil {
		return nil, abortStart(cmd, dir, rep, rerr)
	}
	h := &Handle{
		spec:      spec,
		dir:       dir,
		sup:       sup,
		task:      rep.Task.Identity,
		startedAt: rep.Task.StartedAt,
		done:      make(chan struct{}),
	}
	go h.watch(cmd)
	return h, nil
}

// abortStart cleans up after a start that did not reach "running" and builds
// the error Start returns.
func abortStart(cmd *exec.Cmd, dir string, rep startReport, rerr error) error {
	reaped := make(chan struct{})
	go func() { cmd.Wait(); close(reaped) }()
	failed := &StartError{Msg: rep.Error, Permanent: rep.Permanent}
	if rep.Error != "" {
		// The supervisor exits right after reporting; give it a moment.
		select {
		case <-reaped:
			return failed
		case <-time.After(5 * time.Second):
		}
	}
	cmd.Process.Kill()
	var task procRecord
	if readJSON(filepath.Join(dir, taskFile), &task) == nil && task.Alive() {
		syscall.Kill(-task.PID, syscall.SIGKILL)
	}
	<-reaped
	if rep.Error != "" {
		return failed
	}
	msg := fmt.Sprintf("supervisor did not report the task running: %v", rerr)
	if tail := logTail(filepath.Join(dir, logFile), 2048); tail != "" {
		msg += "; supervisor log: " + tail
	}
	return errors.New(msg)
}

func logTail(path string, n int64) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	if int64(len(b)) > n {
		b = b[int64(len(b))-n:]
	}
	return strings.TrimSpace(string(b))
}

// Recover re-attaches to the supervisor of a task from its state dir alone,
// as a restarted plugin must. The supervisor may be running or already gone;
// pids are checked against their recorded start times, so a recycled pid is
// never mistaken for the task.
func Recover(stateDir string) (*Handle, error) {
	spec, err := readSpec(stateDir)
	if err != nil {
		return nil, err
	}
	var sup procRecord
	if err := readJSON(filepath.Join(stateDir, supervisorFile), &sup); err != nil {
		return nil, fmt.Errorf("read supervisor state: %w", err)
	}
	h := &Handle{
		spec: spec,
		dir:  stateDir,
		sup:  sup.Identity,
		done: make(chan struct{}),
	}
	var task procRecord
	terr := readJSON(filepath.Join(stateDir, taskFile), &task)
	if terr != nil && !errors.Is(terr, os.ErrNotExist) {
		return nil, fmt.Errorf("read task state: %w", terr)
	}
	if terr == nil {
		h.task, h.startedAt = task.Identity, task.StartedAt
	} else if _, exited, _ := readExit(stateDir); !exited {
		// Start has not returned for this dir, so no TaskHandle can exist for it.
		if sup.Alive() {
			return nil, errors.New("task is still being started")
		}
		return nil, errors.New("supervisor died before starting the task")
	}
	go h.watch(nil)
	return h, nil
}

// watch waits for the supervisor to go away, then publishes the exit status.
// cmd is set when the supervisor is our child and must be reaped.
func (h *Handle) watch(cmd *exec.Cmd) {
	waitGone(context.Background(), h.sup)
	if cmd != nil {
		cmd.Wait()
	}
	st, ok, err := readExit(h.dir)
	if !ok {
		// The supervisor was killed (e.g. kill -9, OOM killer) before it
		// could record anything. The task may well still be running as an
		// orphan: report its end, not the supervisor's, so Nomad does not
		// start a second copy next to it.
		if h.task.Alive() {
			waitGone(context.Background(), h.task)
		}
		why := "supervisor lost"
		if err != nil {
			why = fmt.Sprintf("unreadable exit record (%v)", err)
		}
		st = ExitStatus{
			ExitCode:   -1,
			FinishedAt: time.Now(),
			Err:        fmt.Sprintf("%s (pid %d gone without recording the task's exit): exit status unknown", why, h.sup.PID),
		}
	}
	h.result = st
	close(h.done)
}

// Wait blocks until the task has exited and returns its exit status; once
// it has, every call returns at once. It returns ctx.Err() when ctx ends
// first.
func (h *Handle) Wait(ctx context.Context) (ExitStatus, error) {
	select {
	case <-h.done:
		return h.result, nil
	case <-ctx.Done():
		return ExitStatus{}, ctx.Err()
	}
}

// Running reports whether the task has not yet been seen to exit.
func (h *Handle) Running() bool {
	select {
	case <-h.done:
		return false
	default:
		return true
	}
}

// TaskPID is the pid of the task's main process, which is also its process
// group and session id. It is 0 for a task that never started.
func (h *Handle) TaskPID() int { return h.task.PID }

// SupervisorPID is the pid of the task's supervisor.
func (h *Handle) SupervisorPID() int { return h.sup.PID }

// Supervisor identifies the task's supervisor process.
func (h *Handle) Supervisor() procfs.Identity { return h.sup }

// StartedAt is when the task's command was exec'd.
func (h *Handle) StartedAt() time.Time { return h.startedAt }

// StateDir is the task's state dir.
func (h *Handle) StateDir() string { return h.dir }

// Spec returns a copy of the task's spec.
func (h *Handle) Spec() Spec {
	s := h.spec
	s.Args = slices.Clone(s.Args)
	s.Env = slices.Clone(s.Env)
	s.Groups = slices.Clone(s.Groups)
	s.CgroupProcsFiles = slices.Clone(s.CgroupProcsFiles)
	s.Isolation.Masks = slices.Clone(s.Isolation.Masks)
	s.Isolation.Landlock = slices.Clone(s.Isolation.Landlock)
	return s
}

// groupAlive reports whether the task's process group may still exist and
// so can be signalled without hitting a stranger.
func (h *Handle) groupAlive() bool {
	return h.task.PID > 0 && !pidReused(h.task)
}

// Signal sends sig to the task's process group. A task that is gone is not
// an error: StopTask and SignalTask must succeed for exited tasks.
func (h *Handle) Signal(sig syscall.Signal) error {
	if !h.groupAlive() {
		return nil
	}
	if err := killIgnoringGone(-h.task.PID, sig); err != nil {
		return fmt.Errorf("signal %v to task %d: %w", sig, h.task.PID, err)
	}
	return nil
}

// SignalDisposition is what the task's main process does with sig now.
func (h *Handle) SignalDisposition(sig syscall.Signal) (procfs.Disposition, error) {
	if !h.groupAlive() {
		return procfs.SignalDefault, fmt.Errorf("task %d: gone", h.task.PID)
	}
	return procfs.SignalDisposition(h.task.PID, sig)
}

// Pids lists the task's live processes: every process of its cgroup when it
// has one (which catches processes that left its session), else the members
// of its session.
func (h *Handle) Pids() ([]int, error) {
	if len(h.spec.CgroupProcsFiles) > 0 {
		return cgroupMembers(h.spec.CgroupProcsFiles[0])
	}
	if !h.groupAlive() {
		return nil, nil
	}
	return sessionMembers(h.task.PID), nil
}

// KillTree stops the whole task: sig to the process group and every pid of
// Pids, up to grace for the main process to exit, then SIGKILL to whatever
// is left, repeated until nothing is (processes can fork while we kill).
// sig 0 skips straight to SIGKILL. It returns an error only if processes
// survive until ctx ends.
func (h *Handle) KillTree(ctx context.Context, grace time.Duration, sig syscall.Signal) error {
	if sig != 0 && sig != syscall.SIGKILL {
		h.signalTree(sig)
		if grace > 0 {
			t := time.NewTimer(grace)
			select {
			case <-h.done:
			case <-t.C:
			case <-ctx.Done():
			}
			t.Stop()
		}
	}
	for {
		left := h.signalTree(syscall.SIGKILL)
		if len(left) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("task processes still alive after kill: %v: %w", left, ctx.Err())
		case <-time.After(killPollInterval):
		}
	}
}

// signalTree signals the group and every known pid; it returns the pids it
// found alive.
func (h *Handle) signalTree(sig syscall.Signal) []int {
	if h.groupAlive() {
		killIgnoringGone(-h.task.PID, sig)
	}
	pids, _ := h.Pids()
	for _, p := range pids {
		if p == h.sup.PID {
			continue
		}
		killIgnoringGone(p, sig)
	}
	return pids
}

// Destroy kills whatever remains of the task, waits for its supervisor to
// go and removes the state dir. It is idempotent.
func (h *Handle) Destroy() error {
	h.destroyMu.Lock()
	defer h.destroyMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), destroyTimeout)
	defer cancel()
	kerr := h.KillTree(ctx, 0, syscall.SIGKILL)

	// The supervisor exits on its own once the task is dead; kill it only if
	// it is stuck (the task might be unkillable, in D state).
	if err := h.waitDone(ctx, 5*time.Second); err != nil && h.sup.Alive() {
		syscall.Kill(h.sup.PID, syscall.SIGKILL)
	}
	if err := h.waitDone(ctx, destroyTimeout); err != nil {
		// Keep the state: a later Destroy or Recover still needs it.
		return fmt.Errorf("destroy task: supervisor pid %d did not exit: %v", h.sup.PID, errors.Join(kerr, err))
	}
	if err := os.RemoveAll(h.dir); err != nil {
		return fmt.Errorf("remove state dir: %w", err)
	}
	return kerr
}

func (h *Handle) waitDone(ctx context.Context, d time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	_, err := h.Wait(ctx)
	return err
}
