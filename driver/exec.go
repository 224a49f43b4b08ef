package driver

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os/exec"
	"syscall"
	"time"

	"github.com/creack/pty"

	"github.com/nomad-gpu/nomad-gpu/wire/drivers"
)

// execCommand prepares cmd to run like the task: its user, environment,
// working directory and cgroups.
func (d *Driver) execCommand(ctx context.Context, t *task, argv []string) (*exec.Cmd, error) {
	if len(argv) == 0 {
		return nil, fmt.Errorf("exec: no command given")
	}
	if t.exited() {
		return nil, fmt.Errorf("exec: task %s has exited", t.id)
	}
	spec := t.proc.Spec()
	// The shim joins the task's cgroups and drops to its user before exec,
	// exactly as for the task itself.
	cmd := exec.CommandContext(ctx, d.supervisor(), append([]string{"exec-shim", spec.StateDir, "--"}, argv...)...)
	// The shim runs as root until it drops to the task's user: it must not
	// see the task's environment (LD_PRELOAD…) or start in its directory.
	// Enter hands both to the command from the task's spec.
	cmd.Env = []string{}
	cmd.Dir = "/"
	// Kill the whole exec'd tree on timeout or cancel, and stop waiting for
	// output pipes that a forked child keeps open.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 2 * time.Second
	return cmd, nil
}

func (d *Driver) ExecTask(id string, argv []string, timeout time.Duration) (*drivers.ExecTaskResult, error) {
	t := d.store.get(id)
	if t == nil {
		return nil, fmt.Errorf("task %s: %w", id, drivers.ErrTaskNotFound)
	}
	if timeout <= 0 {
		timeout = time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd, err := d.execCommand(ctx, t, argv)
	if err != nil {
		return nil, err
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	res := &drivers.ExecTaskResult{Stdout: stdout.Bytes(), Stderr: stderr.Bytes(), ExitResult: exitResultOf(cmd, err)}
	if ctx.Err() != nil {
		res.ExitResult.Err = fmt.Errorf("exec timed out after %s", timeout)
	}
	return res, nil
}

func (d *Driver) ExecTaskStreaming(ctx context.Context, id string, opts *drivers.ExecOptions) (*drivers.ExitResult, error) {
	t := d.store.get(id)
	if t == nil {
		return nil, fmt.Errorf("task %s: %w", id, drivers.ErrTaskNotFound)
	}
	cmd, err := d.execCommand(ctx, t, opts.Command)
	if err != nil {
		return nil, err
	}
	if !opts.Tty {
		cmd.Stdout, cmd.Stderr = opts.Stdout, opts.Stderr
		// Our own stdin copier: with cmd.Stdin set to a reader, Wait would
		// also wait for the client to close stdin, after the command exited.
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return nil, fmt.Errorf("exec: %w", err)
		}
		if err := cmd.Start(); err != nil {
			return nil, fmt.Errorf("exec: %w", err)
		}
		go func() {
			_, _ = io.Copy(stdin, opts.Stdin)
			stdin.Close()
		}()
		return exitResultOf(cmd, cmd.Wait()), nil
	}
	// In the host's PID namespace the exec shim becomes the command and
	// must hold the terminal itself; in the task's own, the command is its
	// child and takes the terminal in a session of its own there.
	private := t.proc.Spec().Isolation.PrivatePID
	tty, err := pty.StartWithAttrs(cmd, nil, &syscall.SysProcAttr{Setsid: true, Setctty: !private})
	if err != nil {
		return nil, fmt.Errorf("exec: %w", err)
	}
	defer tty.Close()
	go func() {
		for sz := range opts.ResizeCh {
			_ = pty.Setsize(tty, &pty.Winsize{Rows: uint16(sz.Height), Cols: uint16(sz.Width)})
		}
	}()
	go func() { _, _ = io.Copy(tty, opts.Stdin) }()
	copied := make(chan struct{})
	go func() {
		_, _ = io.Copy(opts.Stdout, tty)
		close(copied)
	}()
	err = cmd.Wait()
	select {
	case <-copied:
	case <-time.After(time.Second):
	}
	return exitResultOf(cmd, err), nil
}

func exitResultOf(cmd *exec.Cmd, err error) *drivers.ExitResult {
	res := &drivers.ExitResult{}
	// The process state is the truth when the command ran, even when Wait
	// also reports a pipe a forked child kept open (exec.ErrWaitDelay).
	if ps := cmd.ProcessState; ps != nil {
		if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			res.Signal = int(ws.Signal())
			res.ExitCode = 128 + int(ws.Signal())
		} else {
			res.ExitCode = ps.ExitCode()
		}
		return res
	}
	if err != nil {
		res.ExitCode = 127
		res.Err = err
	}
	return res
}
