package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// Agent is one `nomad agent` process of a cluster (the server or a client).
// Its data dir, config and ports stay the same across Stop/Kill and Restart.
type Agent struct {
	name    string
	server  bool
	bin     string
	dataDir string
	cfgPath string
	logPath string
	env     []string
	http    int
	rpc     int
	serf    int
	render  func() string // the agent's config file; called with mu held

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{} // closed when the current process has exited
	exitErr error
	starts  atomic.Int64 // how many times the agent was started
	logOff  int64        // size of the log when the current process started
}

// Name is the agent's node name (also its Nomad node name for clients).
func (a *Agent) Name() string { return a.name }

// DataDir is the agent's data_dir; it also holds agent.hcl and agent.log.
func (a *Agent) DataDir() string { return a.dataDir }

// LogPath is the file the agent's stdout and stderr go to (appended across
// restarts).
func (a *Agent) LogPath() string { return a.logPath }

// HTTPAddr is the agent's HTTP API address, e.g. "http://127.0.0.1:12345".
func (a *Agent) HTTPAddr() string { return fmt.Sprintf("http://127.0.0.1:%d", a.http) }

// RPCAddr is the agent's RPC address, e.g. "127.0.0.1:12346".
func (a *Agent) RPCAddr() string { return fmt.Sprintf("127.0.0.1:%d", a.rpc) }

// PID returns the pid of the running agent process, or 0.
func (a *Agent) PID() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cmd == nil || a.cmd.Process == nil || a.exited() {
		return 0
	}
	return a.cmd.Process.Pid
}

// Running reports whether the agent process is alive.
func (a *Agent) Running() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cmd != nil && !a.exited()
}

func (a *Agent) exited() bool {
	select {
	case <-a.done:
		return true
	default:
		return false
	}
}

// exitStatus describes how the last process ended ("" while running).
func (a *Agent) exitStatus() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cmd == nil || !a.exited() {
		return ""
	}
	if a.exitErr == nil {
		return "exited with status 0"
	}
	return a.exitErr.Error()
}

// start launches the agent process. It does not wait for readiness.
func (a *Agent) start() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cmd != nil && !a.exited() {
		return fmt.Errorf("agent %s is already running", a.name)
	}
	a.starts.Add(1)
	// render may read a.starts (clients put it in their node meta).
	if err := os.WriteFile(a.cfgPath, []byte(a.render()), 0o644); err != nil {
		return err
	}
	logf, err := os.OpenFile(a.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	if fi, err := logf.Stat(); err == nil {
		a.logOff = fi.Size()
	}
	fmt.Fprintf(logf, "==== e2e: start #%d of %s at %s ====\n", a.starts.Load(), a.name, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(a.bin, "agent", "-config", a.cfgPath)
	cmd.Dir = a.dataDir
	cmd.Env = a.env
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = sysProcAttr()
	if err := spawn(cmd); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", a.name, err)
	}
	done := make(chan struct{})
	a.cmd, a.done, a.exitErr = cmd, done, nil
	go func() {
		err := cmd.Wait()
		logf.Close()
		a.mu.Lock()
		a.exitErr = err
		a.mu.Unlock()
		close(done)
	}()
	return nil
}

// Stop sends SIGINT and waits (up to 30s) for the agent to exit; if it does
// not, it is killed with SIGKILL. A Nomad client stopped this way leaves its
// tasks running, as in production, and recovers them on Restart. Stopping a
// stopped agent is a no-op.
func (a *Agent) Stop(t testing.TB) {
	t.Helper()
	if err := a.Shutdown(); err != nil {
		t.Fatalf("e2e: %v", err)
	}
}

// Shutdown is Stop for callers without a testing.TB (a goroutine serving
// a test's plugin): it returns what went wrong instead of failing.
func (a *Agent) Shutdown() error {
	if !a.signal(syscall.SIGINT, false) {
		return nil
	}
	if a.waitExit(30 * time.Second) {
		return nil
	}
	a.signal(syscall.SIGKILL, false)
	if !a.waitExit(15 * time.Second) {
		return fmt.Errorf("agent %s did not exit after SIGKILL", a.name)
	}
	return nil
}

// Kill sends SIGKILL to the agent process only (not to the plugins and
// executors it started), like a crash of the agent, and waits for it to
// exit. Use Restart to bring it back with the same data dir.
func (a *Agent) Kill(t testing.TB) {
	t.Helper()
	if !a.signal(syscall.SIGKILL, false) {
		return
	}
	if !a.waitExit(15 * time.Second) {
		t.Fatalf("e2e: %s did not exit after SIGKILL", a.name)
	}
}

// Restart starts the agent again with the same config, ports and data dir,
// stopping it first (Stop) if it is running, and waits until it serves its
// HTTP API. For a client, use Cluster.WaitForNode to wait for its node.
func (a *Agent) Restart(t testing.TB) {
	t.Helper()
	a.Stop(t)
	if err := a.launch(agentServeTimeout, false); err != nil {
		t.Fatalf("e2e: restart: %v", err)
	}
}

// signal sends sig to the agent (or to its whole process group) and reports
// whether a running process was signalled.
func (a *Agent) signal(sig syscall.Signal, group bool) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cmd == nil || a.cmd.Process == nil || a.exited() {
		return false
	}
	pid := a.cmd.Process.Pid
	if group {
		_ = syscall.Kill(-pid, sig)
	}
	_ = syscall.Kill(pid, sig)
	return true
}

func (a *Agent) waitExit(d time.Duration) bool {
	a.mu.Lock()
	done := a.done
	a.mu.Unlock()
	if done == nil {
		return true
	}
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// LogTail returns the last n lines of the agent's log, leaving out the
// agent's debug lines for HTTP requests (the harness polls a lot).
func (a *Agent) LogTail(n int) string {
	return tailFile(a.logPath, n)
}

// CurrentLog returns what the current (or last) process has logged, at most
// its last MiB.
func (a *Agent) CurrentLog() string {
	a.mu.Lock()
	off := a.logOff
	a.mu.Unlock()
	f, err := os.Open(a.logPath)
	if err != nil {
		return ""
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size()-off > 1<<20 {
		off = fi.Size() - 1<<20
	}
	_, _ = f.Seek(off, io.SeekStart)
	b, _ := io.ReadAll(f)
	return string(b)
}

func tailFile(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	defer f.Close()
	// Read at most the last 256 KiB; plenty for n lines.
	const max = 256 << 10
	if fi, err := f.Stat(); err == nil && fi.Size() > max {
		_, _ = f.Seek(fi.Size()-max, io.SeekStart)
	}
	b, _ := io.ReadAll(f)
	var lines []string
	for _, l := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		if !strings.Contains(l, "[DEBUG] http: request complete") {
			lines = append(lines, l)
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// waitServing waits until this agent process serves its HTTP API (checked
// by asking /v1/agent/self for its name, so another process on the port does
// not count), or it exits, or ctx ends.
func (a *Agent) waitServing(ctx context.Context) error {
	hc := &http.Client{Timeout: 5 * time.Second}
	url := fmt.Sprintf("http://127.0.0.1:%d/v1/agent/self", a.http)
	var last error
	for {
		if err := a.selfIs(hc, url); err == nil {
			return nil
		} else {
			last = err
		}
		if st := a.exitStatus(); st != "" {
			return fmt.Errorf("agent %s exited during startup (%s)", a.name, st)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("agent %s not serving on %s: %w (last: %v)", a.name, a.HTTPAddr(), ctx.Err(), last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (a *Agent) selfIs(hc *http.Client, url string) error {
	resp, err := hc.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	var self struct {
		Config struct{ NodeName string }
	}
	if err := json.NewDecoder(resp.Body).Decode(&self); err != nil {
		return fmt.Errorf("%s: %w", url, err)
	}
	if self.Config.NodeName != a.name {
		return fmt.Errorf("%s is agent %q, not %q", url, self.Config.NodeName, a.name)
	}
	return nil
}

// launch starts the agent (start writes its config), waiting until it serves
// its API. If it lost a race for one of its ports it tries again on new ones
// (allowed only for a first launch: clients know the server's rpc port).
func (a *Agent) launch(timeout time.Duration, repick bool) error {
	var err error
	for attempt := 1; ; attempt++ {
		if err = a.start(); err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		err = a.waitServing(ctx)
		cancel()
		if err == nil {
			return nil
		}
		cur := a.CurrentLog()
		if !repick || attempt == 3 || a.Running() || !strings.Contains(cur, "address already in use") {
			var errs []string
			for _, l := range strings.Split(cur, "\n") {
				if strings.HasPrefix(l, "==> Error") {
					errs = append(errs, l)
				}
			}
			return fmt.Errorf("%w\n%s\n---- last 60 lines of %s ----\n%s", err, strings.Join(errs, "\n"), a.logPath, a.LogTail(60))
		}
		for _, p := range []*int{&a.http, &a.rpc, &a.serf} {
			if *p, err = freePort(); err != nil {
				return err
			}
		}
	}
}

// ---- the spawner: all agent processes are started from one locked thread ----

type spawnReq struct {
	cmd *exec.Cmd
	res chan error
}

var (
	spawnOnce sync.Once
	spawnCh   chan spawnReq
)

func spawn(cmd *exec.Cmd) error {
	spawnOnce.Do(func() {
		spawnCh = make(chan spawnReq)
		go func() {
			// Never unlocked and never returns: the thread lives as long as
			// the test binary, so Pdeathsig only fires when the binary dies.
			runtime.LockOSThread()
			for r := range spawnCh {
				r.res <- r.cmd.Start()
			}
		}()
	})
	res := make(chan error, 1)
	spawnCh <- spawnReq{cmd: cmd, res: res}
	return <-res
}

// ---- free ports ----

var (
	portMu     sync.Mutex
	portUsed   = map[int]bool{}
	portCursor = -1
)

// freePort returns a loopback port free for TCP and UDP (serf uses both) that
// this process has not handed out before. Ports come from 10000-19999:
// below Nomad's dynamic port range (20000-32000) and the kernel's ephemeral
// range (so outgoing connections never take them between the pick and the
// agent's bind), starting at an offset derived from the pid (so test
// binaries running in parallel rarely pick the same ones; a lost race is
// retried by launch). Where that leaves no room, the kernel picks.
func freePort() (int, error) {
	portMu.Lock()
	defer portMu.Unlock()
	// Stay below 20000 too: Nomad's default dynamic port range for
	// allocations is 20000-32000.
	lo, hi := 10000, min(20000, ephemeralLow())
	if hi-lo < 2000 {
		return kernelPort()
	}
	if portCursor < 0 {
		portCursor = lo + (os.Getpid()*7919)%(hi-lo)
	}
	for i := 0; i < hi-lo; i++ {
		port := portCursor
		portCursor++
		if portCursor >= hi {
			portCursor = lo
		}
		if portUsed[port] || !portFree(port) {
			continue
		}
		portUsed[port] = true
		return port, nil
	}
	return kernelPort()
}

func portFree(port int) bool {
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return false
	}
	defer l.Close()
	u, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return false
	}
	u.Close()
	return true
}

// kernelPort asks the kernel for a free port (caller holds portMu).
func kernelPort() (int, error) {
	var errs []error
	for i := 0; i < 50; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			errs = append(errs, err)
			continue
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if portUsed[port] || !portFree(port) {
			continue
		}
		portUsed[port] = true
		return port, nil
	}
	return 0, fmt.Errorf("no free loopback port: %w", errors.Join(errs...))
}

// ephemeralLow is the low end of the kernel's ephemeral port range.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 32768
	}
	n, err := strconv.Atoi(f[0])
	if err != nil {
		return 32768
	}
	return n
}

// hclString quotes s for HCL.
func hclString(s string) string {
	var b bytes.Buffer
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"', '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case '\n':
			b.WriteString(`\n`)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}
