package cluster

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// Timeouts used by Start. Generous, because e2e runs on 2-core CI boxes.
const (
	agentServeTimeout  = 90 * time.Second // process start to HTTP API up
	serverReadyTimeout = 60 * time.Second // HTTP API up to leader elected
	clientReadyTimeout = 90 * time.Second // client HTTP API up to node ready
)

// DefaultClientOptions are the client options every client gets; entries in
// ClientOptions.Options are merged over them. The cloud fingerprinters probe
// metadata endpoints that do not exist here and stop the client from starting.
var DefaultClientOptions = map[string]string{
	"fingerprint.denylist": "env_aws,env_gce,env_azure,env_digitalocean",
}

// Options configures Start.
type Options struct {
	// Clients is how many client agents Start starts, named client-1 …
	// client-N, each configured from Client (whose Name is ignored).
	Clients int
	// Client is the template for the clients Start starts.
	Client ClientOptions
	// ServerHCL is extra HCL placed inside the server's `server { }` block.
	ServerHCL string
	// Dir is where the agents' data dirs go. Empty: a new short directory
	// under os.TempDir() (short because Nomad and plugins create unix sockets
	// inside alloc dirs), removed at cleanup.
	Dir string
	// Env is extra environment (KEY=VALUE) for every agent.
	Env []string
}

// ClientOptions configures one client agent.
type ClientOptions struct {
	// Name is the agent and node name. Empty: client-<n>.
	Name string
	// PluginDir is the agent's plugin_dir, normally PluginDir(t). Empty: Nomad's
	// default (<data_dir>/plugins).
	PluginDir string
	// ClientHCL is extra HCL placed inside the `client { }` block, e.g.
	// `node_class = "gpu"` or `node_pool = "gpu"`. It must not hold `options`
	// or `meta` blocks: use Options and Meta.
	ClientHCL string
	// Options are merged over DefaultClientOptions into `client { options }`.
	Options map[string]string
	// Meta is the node's `client { meta }`; the harness adds StartMeta.
	Meta map[string]string
	// ExtraHCL is extra top-level agent HCL, e.g. the
	// `plugin "nomad-device-gpu" { config { … } }` block.
	ExtraHCL string
	// Env is extra environment (KEY=VALUE) for this agent, added after
	// Options.Env.
	Env []string
}

// Cluster is a running server plus clients. Create it with Start.
type Cluster struct {
	bin     string
	dir     string // resolved (symlink-free) cluster directory
	ownDir  bool   // dir was created by Start and is removed at cleanup
	marker  string // value of markerEnv in every agent's environment
	env     []string
	server  *Agent
	api     *api.Client
	mu      sync.Mutex
	clients []*Agent
	// stoppers are the other processes the cluster started (autoscaler,
	// Prometheus), stopped before the agents.
	stoppers []stopper
	// afterTeardown run once the agents are gone (AfterTeardown).
	afterTeardown []func()
}

// stopper is a process of the cluster other than a Nomad agent.
type stopper struct {
	name, log string
	stop      func()
}

// Start starts a server and opts.Clients clients, and waits until the server
// has a leader and every client's node is ready (bounded; failure is fatal).
// Without a nomad binary it skips the test. Everything is torn down by
// t.Cleanup.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	bin := NomadBinary(t)
	sweepStale(t)

	c := &Cluster{bin: bin, env: opts.Env}
	dir := opts.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "nge2e-")
		if err != nil {
			t.Fatalf("e2e: %v", err)
		}
		dir, c.ownDir = d, true
	}
	// Traversable, as a production data_dir's parents are: tasks run as
	// unprivileged users must reach their task directories.
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("e2e: %v", err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatalf("e2e: %v", err)
	}
	resolved, err := filepath.EvalSymlinks(dir)
	if err != nil {
		t.Fatalf("e2e: %v", err)
	}
	abs, err := filepath.Abs(resolved)
	if err != nil {
		t.Fatalf("e2e: %v", err)
	}
	c.dir = abs
	c.marker = newMarker(c.dir)
	t.Cleanup(func() { c.cleanup(t) })

	srv, err := c.newAgent("server", true, nil)
	if err != nil {
		t.Fatalf("e2e: %v", err)
	}
	c.server = srv
	srv.render = func() string { return c.serverHCL(srv, opts.ServerHCL) }
	if err := srv.launch(agentServeTimeout, true); err != nil {
		t.Fatalf("e2e: server: %v", err)
	}
	c.api, err = api.NewClient(&api.Config{
		Address:    srv.HTTPAddr(),
		HttpClient: &http.Client{Timeout: 60 * time.Second},
	})
	if err != nil {
		t.Fatalf("e2e: api client: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), serverReadyTimeout)
	defer cancel()
	if err := c.waitLeader(ctx); err != nil {
		t.Fatalf("e2e: server: %v\n%s", err, srv.LogTail(60))
	}

	if opts.Clients > 0 {
		cos := make([]ClientOptions, opts.Clients)
		for i := range cos {
			cos[i] = opts.Client
			cos[i].Name = fmt.Sprintf("client-%d", i+1)
		}
		c.StartClients(t, cos...)
	}
	return c
}

// StartClients adds client agents, starting them in parallel (most of their
// startup is fingerprinting), and waits until every one's node is ready. Use
// it for clients that differ (e.g. each its own simulated GPU seed). It
// fails the test if any does not come up within the bounded wait.
func (c *Cluster) StartClients(t testing.TB, opts ...ClientOptions) []*Agent {
	t.Helper()
	var agents []*Agent
	for _, o := range opts {
		a, err := c.prepareClient(o)
		if err != nil {
			t.Fatalf("e2e: %v", err)
		}
		agents = append(agents, a)
	}
	errs := make([]error, len(agents))
	var wg sync.WaitGroup
	for i, a := range agents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := a.launch(agentServeTimeout, true); err != nil {
				errs[i] = fmt.Errorf("client %s: %w", a.name, err)
				return
			}
			errs[i] = c.waitNode(a.name, NodeReady, nil, clientReadyTimeout)
		}()
	}
	wg.Wait()
	failed := false
	for _, err := range errs {
		if err != nil {
			t.Errorf("e2e: %v", err)
			failed = true
		}
	}
	if failed {
		t.FailNow()
	}
	return agents
}

// AddClient starts one more client agent joined to the server and waits
// until it serves its HTTP API (not until its node is ready: use
// WaitForNode). It fails the test if the agent does not come up.
func (c *Cluster) AddClient(t testing.TB, o ClientOptions) *Agent {
	t.Helper()
	a, err := c.TryAddClient(o)
	if err != nil {
		t.Fatalf("e2e: %v", err)
	}
	return a
}

// TryAddClient is AddClient returning the error (which includes the end of
// the agent's log) instead of failing, for tests that expect a client to
// refuse to start, e.g. on a bad plugin config. The agent is returned, and
// cleaned up, even on error.
func (c *Cluster) TryAddClient(o ClientOptions) (*Agent, error) {
	a, err := c.prepareClient(o)
	if err != nil {
		return nil, err
	}
	if err := a.launch(agentServeTimeout, true); err != nil {
		return a, fmt.Errorf("client %s: %w", a.name, err)
	}
	return a, nil
}

// prepareClient creates (but does not start) a client agent and adds it to
// the cluster.
func (c *Cluster) prepareClient(o ClientOptions) (*Agent, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if o.Name == "" {
		o.Name = fmt.Sprintf("client-%d", len(c.clients)+1)
	}
	for _, a := range c.clients {
		if a.name == o.Name {
			return nil, fmt.Errorf("a client named %q already exists", o.Name)
		}
	}
	a, err := c.newAgent(o.Name, false, o.Env)
	if err != nil {
		return nil, err
	}
	a.render = func() string { return c.clientHCL(a, o) }
	c.clients = append(c.clients, a)
	return a, nil
}

// API returns an API client for the server.
func (c *Cluster) API() *api.Client { return c.api }

// Server returns the server agent.
func (c *Cluster) Server() *Agent { return c.server }

// Clients returns the client agents in the order they were added.
func (c *Cluster) Clients() []*Agent {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*Agent(nil), c.clients...)
}

// Client returns the client agent named name; it fails the test if there is
// none.
func (c *Cluster) Client(t testing.TB, name string) *Agent {
	t.Helper()
	if a := c.client(name); a != nil {
		return a
	}
	t.Fatalf("e2e: no client named %q", name)
	return nil
}

func (c *Cluster) client(name string) *Agent {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, a := range c.clients {
		if a.name == name {
			return a
		}
	}
	return nil
}

// Dir is the cluster directory holding every agent's data dir.
func (c *Cluster) Dir() string { return c.dir }

func (c *Cluster) newAgent(name string, server bool, env []string) (*Agent, error) {
	a := &Agent{name: name, server: server, bin: c.bin}
	var err error
	for _, p := range []*int{&a.http, &a.rpc, &a.serf} {
		if *p, err = freePort(); err != nil {
			return nil, err
		}
	}
	a.dataDir = filepath.Join(c.dir, name)
	if err := os.MkdirAll(a.dataDir, 0o755); err != nil {
		return nil, err
	}
	a.cfgPath = filepath.Join(a.dataDir, "agent.hcl")
	a.logPath = filepath.Join(a.dataDir, "agent.log")
	a.env = append(os.Environ(), markerEnv+"="+c.marker)
	a.env = append(a.env, c.env...)
	a.env = append(a.env, env...)
	return a, nil
}

func (c *Cluster) commonHCL(a *Agent) string {
	return fmt.Sprintf(`name                 = %s
data_dir             = %s
bind_addr            = "127.0.0.1"
log_level            = "DEBUG"
disable_update_check = true

ports {
  http = %d
  rpc  = %d
  serf = %d
}

advertise {
  http = "127.0.0.1:%d"
  rpc  = "127.0.0.1:%d"
  serf = "127.0.0.1:%d"
}

consul {
  auto_advertise   = false
  server_auto_join = false
  client_auto_join = false
}
`, hclString(a.name), hclString(a.dataDir), a.http, a.rpc, a.serf, a.http, a.rpc, a.serf)
}

func (c *Cluster) serverHCL(a *Agent, extra string) string {
	// Short heartbeats so a killed client is marked down in seconds (the
	// server allows TTL+grace, TTL being 2-4s here), with enough grace that
	// a busy 2-core box does not flap nodes.
	return c.commonHCL(a) + fmt.Sprintf(`
server {
  enabled           = true
  bootstrap_expect  = 1
  min_heartbeat_ttl = "2s"
  heartbeat_grace   = "6s"
%s
}
`, indent(extra))
}

func (c *Cluster) clientHCL(a *Agent, o ClientOptions) string {
	var b strings.Builder
	b.WriteString(c.commonHCL(a))
	if o.PluginDir != "" {
		fmt.Fprintf(&b, "plugin_dir = %s\n", hclString(o.PluginDir))
	}
	opts := map[string]string{}
	for k, v := range DefaultClientOptions {
		opts[k] = v
	}
	for k, v := range o.Options {
		opts[k] = v
	}
	fmt.Fprintf(&b, `
client {
  enabled           = true
  servers           = [%s]
  network_interface = "lo"
  alloc_mounts_dir  = %s

  options {
`, hclString(c.server.RPCAddr()), hclString(filepath.Join(a.dataDir, "alloc_mounts")))
	writeMap(&b, opts)
	b.WriteString("  }\n\n  meta {\n")
	meta := map[string]string{StartMeta: a.startID()}
	for k, v := range o.Meta {
		if k != StartMeta {
			meta[k] = v
		}
	}
	writeMap(&b, meta)
	fmt.Fprintf(&b, "  }\n%s\n}\n", indent(o.ClientHCL))
	b.WriteString(`
plugin "raw_exec" {
  config {
    enabled = true
  }
}
`)
	if o.ExtraHCL != "" {
		b.WriteString("\n" + strings.ReplaceAll(o.ExtraHCL, SelfHTTPAddr, a.HTTPAddr()) + "\n")
	}
	return b.String()
}

// SelfHTTPAddr, in a client's ExtraHCL, stands for that client agent's own
// HTTP API address (its port is picked when it is made): a plugin that
// reaches "the local agent" must reach this one, not whatever serves the
// default 127.0.0.1:4646 on the host (a make dev agent, say).
const SelfHTTPAddr = "@E2E_SELF_HTTP@"

// StartMeta is the node meta key in which each client records which start
// of its agent registered the node, so waits after a Restart see the new
// process's node, not the old one the server still holds.
const StartMeta = "e2e_start"

// startID identifies the current (or next) start of the agent; called from
// render with mu held, or by waiters.
func (a *Agent) startID() string { return strconv.FormatInt(a.starts.Load(), 10) }

func writeMap(b *strings.Builder, m map[string]string) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(b, "    %s = %s\n", hclString(k), hclString(m[k]))
	}
}

func indent(s string) string {
	if strings.TrimSpace(s) == "" {
		return ""
	}
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = "  " + l
	}
	return strings.Join(lines, "\n")
}

func (c *Cluster) waitLeader(ctx context.Context) error {
	var last string
	for {
		l, err := c.api.Status().Leader()
		if err == nil && l != "" {
			return nil
		}
		if err != nil {
			last = err.Error()
		}
		if st := c.server.exitStatus(); st != "" {
			return fmt.Errorf("server exited (%s)", st)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no leader elected: %v (last error: %s)", ctx.Err(), last)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// cleanup tears the cluster down. It runs once, from t.Cleanup.
func (c *Cluster) cleanup(t testing.TB) {
	agents := c.Clients()
	if c.server != nil {
		agents = append(agents, c.server)
	}
	if t.Failed() {
		for _, a := range agents {
			t.Logf("e2e: ---- last 60 lines of %s (%s) ----\n%s", a.name, a.logPath, a.LogTail(60))
		}
	}
	c.mu.Lock()
	stoppers := c.stoppers
	c.mu.Unlock()
	for _, s := range stoppers {
		if t.Failed() {
			t.Logf("e2e: ---- last 60 lines of %s (%s) ----\n%s", s.name, s.log, tailFile(s.log, 60))
		}
		s.stop()
	}
	allocIDs, dead := c.allocs()
	for _, a := range agents {
		if a.signal(syscall.SIGKILL, true) && !a.waitExit(15*time.Second) {
			t.Errorf("e2e: %s (pid %d) did not exit after SIGKILL", a.name, a.PID())
		}
	}
	// What the driver should have freed is checked before the harness
	// frees anything itself, so its forced cleanup cannot hide a leak.
	for _, l := range taskLeaks(dead) {
		t.Errorf("e2e: leak: %s", l)
	}
	thawAllocCgroups(allocIDs)
	if left := killLeftovers(c.marker, c.dir, 15*time.Second); len(left) > 0 {
		t.Errorf("e2e: processes left after cleanup: %v", left)
	}
	if left := unmountUnder(c.dir, 15*time.Second); len(left) > 0 {
		t.Errorf("e2e: mounts left under %s: %v", c.dir, left)
	}
	removeAllocCgroups(allocIDs)
	c.mu.Lock()
	after := c.afterTeardown
	c.mu.Unlock()
	for _, f := range after {
		f()
	}
	switch {
	case os.Getenv("NOMAD_E2E_KEEP") != "":
		t.Logf("e2e: NOMAD_E2E_KEEP set; keeping %s", c.dir)
	case c.ownDir:
		if err := os.RemoveAll(c.dir); err != nil {
			t.Logf("e2e: remove %s: %v", c.dir, err)
		}
	}
}

// EnablePreemption turns on preemption for every scheduler; Nomad has it
// on for system jobs only by default.
func (c *Cluster) EnablePreemption(t testing.TB) {
	t.Helper()
	cfg := &api.SchedulerConfiguration{PreemptionConfig: api.PreemptionConfig{
		SystemSchedulerEnabled: true, SysBatchSchedulerEnabled: true, BatchSchedulerEnabled: true, ServiceSchedulerEnabled: true,
	}}
	if _, _, err := c.api.Operator().SchedulerSetConfiguration(cfg, nil); err != nil {
		t.Fatalf("enabling preemption: %v", err)
	}
}

// AfterTeardown runs f once the cluster's agents and what they left are
// gone: for what a test made after Start that the agents write into (a
// node's plugin dirs), which a t.Cleanup of its own would remove while
// they still run.
func (c *Cluster) AfterTeardown(f func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.afterTeardown = append(c.afterTeardown, f)
}

// allocs lists the IDs of every allocation the cluster knows, to find
// their cgroups after the agents are gone, and the tasks Nomad reports dead:
// their driver has been told to destroy them (Nomad destroys a task's
// handle before it marks it dead), so nothing of theirs may be left. Best
// effort, bounded.
func (c *Cluster) allocs() (ids []string, dead []TaskRef) {
	if c.api == nil || c.server == nil || !c.server.Running() {
		return nil, nil
	}
	type result struct {
		ids  []string
		dead []TaskRef
	}
	ch := make(chan result, 1)
	go func() {
		stubs, _, err := c.api.Allocations().List(nil)
		var r result
		if err == nil {
			for _, s := range stubs {
				r.ids = append(r.ids, s.ID)
				for name, ts := range s.TaskStates {
					if ts != nil && ts.State == "dead" {
						r.dead = append(r.dead, TaskRef{AllocID: s.ID, Task: name})
					}
				}
			}
		}
		ch <- r
	}()
	select {
	case r := <-ch:
		return r.ids, r.dead
	case <-time.After(5 * time.Second):
		return nil, nil
	}
}

// TaskRef names one task of an allocation.
type TaskRef struct{ AllocID, Task string }

func (r TaskRef) String() string { return r.AllocID + "/" + r.Task }
