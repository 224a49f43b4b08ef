package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// Controller is a `nomad-gpu controller` replica of the cluster.
type Controller struct {
	*process
	// MetricsURL is its /metrics.
	MetricsURL string
}

// Name is the replica's name, its log's too.
func (p *Controller) Name() string { return p.name }

// Log is everything the replica has logged so far.
func (p *Controller) Log() string {
	b, _ := os.ReadFile(p.logPath)
	return string(b)
}

// Kill ends the replica at once (SIGKILL), as a crash would, and waits
// for it.
func (p *Controller) Kill() { p.stop() }

// Stop ends the replica as Nomad stops a task (SIGTERM: it lets go of its
// lock and files) and waits for it, killing it after 15 s.
func (p *Controller) Stop() {
	if p.cmd != nil && p.cmd.Process != nil {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
			return
		case <-time.After(15 * time.Second):
		}
	}
	p.stop()
}

// StartController starts a `nomad-gpu controller` replica named name
// against the cluster's server, with its metrics on a port of its own and
// debug logging, args added to its flags, and waits until it serves its
// metrics. It is stopped with the cluster, and its log's tail is printed
// when the test failed.
func (c *Cluster) StartController(t testing.TB, name string, args ...string) *Controller {
	t.Helper()
	bin := RequireBinary(t, "nomad-gpu")
	port, err := freePort()
	if err != nil {
		t.Fatalf("e2e: %v", err)
	}
	dir := filepath.Join(c.dir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("e2e: %v", err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	argv := append([]string{bin, "controller", "-address", c.server.HTTPAddr(), "-metrics-address", addr, "-log-level", "debug"}, args...)
	proc, err := c.startProcess(name, dir, argv...)
	if err != nil {
		t.Fatalf("e2e: %v", err)
	}
	p := &Controller{process: proc, MetricsURL: "http://" + addr + "/metrics"}
	if err := proc.waitHTTP(p.MetricsURL, agentServeTimeout); err != nil {
		t.Fatalf("e2e: %v", err)
	}
	return p
}
