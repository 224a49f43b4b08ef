package harness

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/e2e/cluster"
)

// SimPool is a group of simulated GPU nodes that a scaling target grows
// and shrinks, as a cloud node group would: the test's side of the e2e
// target plugin (e2e/autoscaletarget), which reaches it over HTTP.
// Growing starts Nomad clients with sim GPUs in a node pool; shrinking
// picks nodes that run no allocation, drains them, stops their agents and
// purges their nodes. A node that runs work is never picked.
type SimPool struct {
	t    testing.TB
	c    *cluster.Cluster
	pool string
	srv  *httptest.Server

	mu    sync.Mutex
	nodes map[string]*simNode // by node name
	seq   int
	busy  int // scale operations under way
	// removed lists each removed node and what ran on it, for the test to
	// check no node was removed under work.
	removed []RemovedNode
	errs    []error
	// scales counts the scale requests that changed the count.
	scales int
	// Configure, when set, shapes each new node before it starts (the
	// replay gives its nodes its layout and a shared checkpoint root).
	Configure func(*GPUNode)
	// boots are how long each node took to start.
	boots []time.Duration
}

type simNode struct {
	name  string
	agent *cluster.Agent
	state string // starting, ready, removing
}

// RemovedNode is a node the pool removed, and what ran on it.
type RemovedNode struct {
	Name    string
	Running []string // allocations not terminal when it was stopped
	// DataDir is its stopped agent's data_dir, kept until the test ends.
	DataDir string
}

// AllocLogs is what task wrote to its logType log ("stdout", "stderr")
// in allocation allocID on the removed node: its rotated files in the
// allocation's directory, oldest first. Nomad's API reads logs from the
// client, which is gone.
func (r RemovedNode) AllocLogs(allocID, task, logType string) (string, error) {
	dir := filepath.Join(r.DataDir, "alloc", allocID, "alloc", "logs")
	prefix := task + "." + logType + "."
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	type part struct {
		index int
		name  string
	}
	var parts []part
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), prefix)
		if i, err := strconv.Atoi(rest); ok && err == nil {
			parts = append(parts, part{i, e.Name()})
		}
	}
	if len(parts) == 0 {
		return "", fmt.Errorf("no %s log of task %s in %s", logType, task, dir)
	}
	slices.SortFunc(parts, func(a, b part) int { return a.index - b.index })
	var b strings.Builder
	for _, p := range parts {
		data, err := os.ReadFile(filepath.Join(dir, p.name))
		if err != nil {
			return "", err
		}
		b.Write(data)
	}
	return b.String(), nil
}

// NewSimPool registers the node pool and serves its control URL (URL)
// until the test ends; the pool starts with no node.
func NewSimPool(t testing.TB, c *cluster.Cluster, pool string) *SimPool {
	t.Helper()
	if _, err := c.API().NodePools().Register(&api.NodePool{Name: pool, Description: "simulated GPU nodes, scaled by the e2e target"}, nil); err != nil {
		t.Fatalf("node pool %s: %v", pool, err)
	}
	p := &SimPool{t: t, c: c, pool: pool, nodes: map[string]*simNode{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /status", p.status)
	mux.HandleFunc("POST /scale", p.scale)
	p.srv = httptest.NewServer(mux)
	t.Cleanup(p.srv.Close)
	return p
}

// URL is what the target plugin's control_url is set to.
func (p *SimPool) URL() string { return p.srv.URL }

// count is the nodes the pool has or is starting, less those going.
func (p *SimPool) count() int {
	n := 0
	for _, s := range p.nodes {
		if s.state != "removing" {
			n++
		}
	}
	return n
}

func (p *SimPool) status(w http.ResponseWriter, _ *http.Request) {
	p.mu.Lock()
	defer p.mu.Unlock()
	json.NewEncoder(w).Encode(map[string]any{"count": p.count(), "ready": p.busy == 0})
}

func (p *SimPool) scale(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Count  int    `json:"count"`
		Reason string `json:"reason"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Count < 0 {
		http.Error(w, fmt.Sprintf("bad scale request: %v", err), http.StatusBadRequest)
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.busy > 0 {
		http.Error(w, "a scale operation is under way", http.StatusConflict)
		return
	}
	p.t.Logf("simPool: scale %d → %d (%s)", p.count(), req.Count, req.Reason)
	if req.Count != p.count() {
		p.scales++
	}
	switch cur := p.count(); {
	case req.Count > cur:
		for i := cur; i < req.Count; i++ {
			p.seq++
			s := &simNode{name: fmt.Sprintf("%s-%d", p.pool, p.seq), state: "starting"}
			p.nodes[s.name] = s
			p.busy++
			go p.start(s)
		}
	case req.Count < cur:
		for _, s := range p.idle(cur - req.Count) {
			s.state = "removing"
			p.busy++
			go p.remove(s)
		}
	}
	w.WriteHeader(http.StatusOK)
}

func (p *SimPool) fail(err error) {
	p.mu.Lock()
	p.errs = append(p.errs, err)
	p.mu.Unlock()
}

func (p *SimPool) start(s *simNode) {
	defer func() { p.mu.Lock(); p.busy--; p.mu.Unlock() }()
	n := NewGPUNode(p.t)
	// The node's own cleanup runs before the cluster's, while its agent
	// still writes there.
	p.c.AfterTeardown(func() { os.RemoveAll(n.Dir) })
	if p.Configure != nil {
		p.Configure(&n)
	}
	begun := time.Now()
	a, err := p.c.TryAddClient(cluster.ClientOptions{
		Name: s.name, PluginDir: cluster.PluginDir(p.t), ExtraHCL: n.HCL(p.t),
		// gc_max_allocs: a replay's preempted allocations keep their logs.
		ClientHCL: fmt.Sprintf("node_pool = %q\ngc_max_allocs = 5000", p.pool),
	})
	if err != nil {
		p.fail(fmt.Errorf("starting %s: %w", s.name, err))
		return
	}
	p.mu.Lock()
	s.agent, s.state = a, "ready"
	p.boots = append(p.boots, time.Since(begun))
	p.mu.Unlock()
}

// idle picks up to n ready nodes running no allocation. Asked for more
// than are idle, it gives fewer: a node with work stays.
func (p *SimPool) idle(n int) []*simNode {
	var out []*simNode
	for _, s := range p.nodes {
		if len(out) == n {
			break
		}
		if s.state != "ready" {
			continue
		}
		if running, err := p.nonTerminal(s.name); err == nil && len(running) == 0 {
			out = append(out, s)
		}
	}
	return out
}

// nonTerminal lists the allocations on the named node that its client has
// not finished.
func (p *SimPool) nonTerminal(name string) ([]string, error) {
	node, err := p.node(name)
	if err != nil {
		return nil, err
	}
	allocs, _, err := p.c.API().Nodes().Allocations(node.ID, nil)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, a := range allocs {
		if !a.ClientTerminalStatus() {
			ids = append(ids, a.ID)
		}
	}
	return ids, nil
}

func (p *SimPool) node(name string) (*api.NodeListStub, error) {
	nodes, _, err := p.c.API().Nodes().List(&api.QueryOptions{Filter: fmt.Sprintf("Name == %q", name)})
	if err != nil {
		return nil, err
	}
	for _, n := range nodes {
		if n.Name == name {
			return n, nil
		}
	}
	return nil, fmt.Errorf("no node %s", name)
}

// remove drains the node (long enough for a checkpoint), then stops its
// agent and purges it, as a cloud target terminates an instance.
func (p *SimPool) remove(s *simNode) {
	defer func() { p.mu.Lock(); p.busy--; p.mu.Unlock() }()
	node, err := p.node(s.name)
	if err != nil {
		p.fail(err)
		return
	}
	if _, err := p.c.API().Nodes().UpdateDrain(node.ID, &api.DrainSpec{Deadline: 2 * time.Minute, IgnoreSystemJobs: true}, false, nil); err != nil {
		p.fail(fmt.Errorf("draining %s: %w", s.name, err))
		return
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		n, _, err := p.c.API().Nodes().Info(node.ID, nil)
		if err == nil && n.DrainStrategy == nil {
			break
		}
		if time.Now().After(deadline) {
			p.fail(fmt.Errorf("%s not drained in 3m", s.name))
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
	running, _ := p.nonTerminal(s.name)
	if err := s.agent.Shutdown(); err != nil {
		p.fail(err)
	}
	if _, _, err := p.c.API().Nodes().Purge(node.ID, nil); err != nil {
		p.fail(fmt.Errorf("purging %s: %w", s.name, err))
	}
	p.mu.Lock()
	delete(p.nodes, s.name)
	p.removed = append(p.removed, RemovedNode{Name: s.name, Running: running, DataDir: s.agent.DataDir()})
	p.mu.Unlock()
}

// ScaleTo asks the pool for n nodes, as the target plugin does, and waits
// until n are ready.
func (p *SimPool) ScaleTo(t testing.TB, n int, timeout time.Duration) {
	t.Helper()
	resp, err := http.Post(p.URL()+"/scale", "application/json", strings.NewReader(fmt.Sprintf(`{"count":%d,"reason":"test"}`, n)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scaling the pool to %d: %s", n, resp.Status)
	}
	deadline := time.Now().Add(timeout)
	for {
		ready, _, _, errs := p.Snapshot()
		if len(errs) > 0 {
			t.Fatalf("scaling the pool to %d: %v", n, errs)
		}
		if ready >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pool has %d of %d nodes ready after %v", ready, n, timeout)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// Up is the nodes the pool has in any state: starting, ready or being
// removed, each of which a cloud would bill.
func (p *SimPool) Up() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.nodes)
}

// ReadyNodes are the names of the nodes that have started and are not
// being removed.
func (p *SimPool) ReadyNodes() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var names []string
	for name, n := range p.nodes {
		if n.state == "ready" {
			names = append(names, name)
		}
	}
	return names
}

// BootTimes are how long the pool's nodes took to start.
func (p *SimPool) BootTimes() []time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]time.Duration(nil), p.boots...)
}

// Scalings is how many scale requests changed the pool's count.
func (p *SimPool) Scalings() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.scales
}

// Started is how many nodes the pool has started in all.
func (p *SimPool) Started() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seq
}

// Snapshot is the pool's nodes by state, what it removed, and its errors.
func (p *SimPool) Snapshot() (ready, starting int, removed []RemovedNode, errs []error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range p.nodes {
		switch s.state {
		case "ready":
			ready++
		case "starting":
			starting++
		}
	}
	return ready, starting, append([]RemovedNode(nil), p.removed...), append([]error(nil), p.errs...)
}
