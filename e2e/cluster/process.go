package cluster

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// process is a process of the cluster other than a Nomad agent (the
// autoscaler, Prometheus): started like the agents (own process group,
// killed with the test binary, carrying the cluster's marker), logging to
// <dir>/<name>.log, stopped with the cluster.
type process struct {
	name, logPath string
	cmd           *exec.Cmd
	done          chan struct{}
}

func (c *Cluster) startProcess(name, dir string, argv ...string) (*process, error) {
	p := &process{name: name, logPath: filepath.Join(dir, name+".log"), done: make(chan struct{})}
	logf, err := os.Create(p.logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), markerEnv+"="+c.marker), c.env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = sysProcAttr()
	if err := spawn(cmd); err != nil {
		logf.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p.cmd = cmd
	go func() { cmd.Wait(); logf.Close(); close(p.done) }()
	c.mu.Lock()
	c.stoppers = append(c.stoppers, stopper{name: name, log: p.logPath, stop: p.stop})
	c.mu.Unlock()
	return p, nil
}

// stop kills the process and what it launched (its process group). It
// may be called again: the group is not reused while a member lives, but
// the pid of a process already reaped may be another's.
func (p *process) stop() {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	pid := p.cmd.Process.Pid
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	select {
	case <-p.done:
	default:
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
	}
}

// waitHTTP waits until url answers 200, the process exits, or timeout.
func (p *process) waitHTTP(url string, timeout time.Duration) error {
	hc := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(timeout)
	for {
		if resp, err := hc.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s exited at start:\n%s", p.name, tailFile(p.logPath, 40))
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %s:\n%s", p.name, timeout, tailFile(p.logPath, 40))
		}
	}
}
