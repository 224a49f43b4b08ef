package cluster

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// Node statuses, for WaitForNodeStatus.
const (
	NodeReady = api.NodeStatusReady
	NodeDown  = api.NodeStatusDown
)

const pollInterval = 250 * time.Millisecond

// WaitForNode waits until the node named name is ready, registered by the
// client's current process (so it is safe right after Restart), and cond
// (nil: any) holds for it, and returns it. It fails the test at timeout with a summary
// of the node's last state, or as soon as that client's agent process exits.
func (c *Cluster) WaitForNode(t testing.TB, name string, cond func(*api.Node) bool, timeout time.Duration) *api.Node {
	t.Helper()
	var node *api.Node
	err := c.waitNodeInto(name, NodeReady, cond, timeout, &node)
	if err != nil {
		t.Fatalf("e2e: %v", err)
	}
	return node
}

// WaitForNodeStatus waits until the node named name has the given status
// (e.g. NodeDown after Kill) and returns it.
func (c *Cluster) WaitForNodeStatus(t testing.TB, name, status string, timeout time.Duration) *api.Node {
	t.Helper()
	var node *api.Node
	if err := c.waitNodeInto(name, status, nil, timeout, &node); err != nil {
		t.Fatalf("e2e: %v", err)
	}
	return node
}

func (c *Cluster) waitNode(name, status string, cond func(*api.Node) bool, timeout time.Duration) error {
	var node *api.Node
	return c.waitNodeInto(name, status, cond, timeout, &node)
}

func (c *Cluster) waitNodeInto(name, status string, cond func(*api.Node) bool, timeout time.Duration, out **api.Node) error {
	deadline := time.Now().Add(timeout)
	agent := c.client(name)
	var last *api.Node
	var lastErr error
	for {
		n, err := c.nodeByName(name)
		switch {
		case err != nil:
			lastErr = err
		case n != nil:
			last = n
			// For ready, the node must come from the running process (after
			// a Restart the server still shows the old one for a while).
			fresh := status != NodeReady || agent == nil || n.Meta[StartMeta] == agent.startID()
			if n.Status == status && fresh && (cond == nil || cond(n)) {
				*out = n
				return nil
			}
		}
		// A ready state needs a live agent; stop early if it died.
		if status == NodeReady && agent != nil {
			if st := agent.exitStatus(); st != "" {
				return fmt.Errorf("client %s exited (%s) while waiting for its node\n%s\n---- last 60 lines of %s ----\n%s",
					name, st, NodeSummary(last), agent.logPath, agent.LogTail(60))
			}
		}
		if time.Now().After(deadline) {
			cs := ""
			if cond != nil {
				cs = " and condition"
			}
			if last == nil {
				return fmt.Errorf("node %s not registered after %v (last error: %v)", name, timeout, lastErr)
			}
			return fmt.Errorf("node %s not %s%s after %v; last state:\n%s", name, status, cs, timeout, NodeSummary(last))
		}
		time.Sleep(pollInterval)
	}
}

// nodeByName returns the most recently updated node named name, or nil.
func (c *Cluster) nodeByName(name string) (*api.Node, error) {
	stubs, _, err := c.api.Nodes().List(nil)
	if err != nil {
		return nil, err
	}
	var best *api.NodeListStub
	for _, s := range stubs {
		if s.Name == name && (best == nil || s.ModifyIndex > best.ModifyIndex) {
			best = s
		}
	}
	if best == nil {
		return nil, nil
	}
	n, _, err := c.api.Nodes().Info(best.ID, nil)
	return n, err
}

// NodeSummary renders the parts of a node that explain why it is (not) what a
// test waits for: status, eligibility, drivers, devices and recent events.
func NodeSummary(n *api.Node) string {
	if n == nil {
		return "  (no node)"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "  node %s (%s): status=%s %s eligibility=%s\n", n.Name, n.ID, n.Status, n.StatusDescription, n.SchedulingEligibility)
	var drivers []string
	for name, d := range n.Drivers {
		if d == nil {
			continue
		}
		s := fmt.Sprintf("%s(detected=%t healthy=%t", name, d.Detected, d.Healthy)
		if d.HealthDescription != "" {
			s += " " + d.HealthDescription
		}
		drivers = append(drivers, s+")")
	}
	sort.Strings(drivers)
	fmt.Fprintf(&b, "  drivers: %s\n", strings.Join(drivers, ", "))
	if n.NodeResources != nil {
		for _, d := range n.NodeResources.Devices {
			healthy := 0
			for _, inst := range d.Instances {
				if inst.Healthy {
					healthy++
				}
			}
			fmt.Fprintf(&b, "  device %s/%s/%s: %d instances, %d healthy\n", d.Vendor, d.Type, d.Name, len(d.Instances), healthy)
		}
		if len(n.NodeResources.Devices) == 0 {
			b.WriteString("  devices: none\n")
		}
	}
	ev := n.Events
	if len(ev) > 5 {
		ev = ev[len(ev)-5:]
	}
	for _, e := range ev {
		fmt.Fprintf(&b, "  event %s [%s] %s %v\n", e.Timestamp.Format(time.RFC3339), e.Subsystem, e.Message, e.Details)
	}
	return strings.TrimRight(b.String(), "\n")
}

// RunJob parses jobHCL with the server (Jobs().ParseHCL) and registers it. It
// returns the parsed job; *job.ID names it.
func (c *Cluster) RunJob(t testing.TB, jobHCL string) *api.Job {
	t.Helper()
	return c.RunJobVars(t, jobHCL, "")
}

// RunJobVars is RunJob with the jobspec's variables set from vars, HCL as
// in a -var-file ("name = value" lines).
func (c *Cluster) RunJobVars(t testing.TB, jobHCL, vars string) *api.Job {
	t.Helper()
	job, err := c.api.Jobs().ParseHCLOpts(&api.JobsParseRequest{JobHCL: jobHCL, Variables: vars, Canonicalize: true})
	if err != nil {
		t.Fatalf("e2e: parse job: %v", err)
	}
	if _, _, err := c.api.Jobs().Register(job, nil); err != nil {
		t.Fatalf("e2e: register job %s: %v", *job.ID, err)
	}
	return job
}

// StopJob deregisters (stops) the job; with purge it is also removed.
func (c *Cluster) StopJob(t testing.TB, jobID string, purge bool) {
	t.Helper()
	if _, _, err := c.api.Jobs().Deregister(jobID, purge, nil); err != nil {
		t.Fatalf("e2e: stop job %s: %v", jobID, err)
	}
}

// WaitForAllocs waits until job jobID has at least n allocations and returns
// them (oldest first). At timeout it fails with the job's evaluations and
// their placement failures (why the scheduler did not place).
func (c *Cluster) WaitForAllocs(t testing.TB, jobID string, n int, timeout time.Duration) []*api.AllocationListStub {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var lastErr error
	for {
		stubs, _, err := c.api.Jobs().Allocations(jobID, true, nil)
		if err != nil {
			lastErr = err
		} else if len(stubs) >= n {
			sort.Slice(stubs, func(i, j int) bool { return stubs[i].CreateIndex < stubs[j].CreateIndex })
			return stubs
		}
		if time.Now().After(deadline) {
			t.Fatalf("e2e: job %s has fewer than %d allocations after %v (last error: %v)\n%s",
				jobID, n, timeout, lastErr, c.evalSummary(jobID))
		}
		time.Sleep(pollInterval)
	}
}

func (c *Cluster) evalSummary(jobID string) string {
	evals, _, err := c.api.Jobs().Evaluations(jobID, nil)
	if err != nil {
		return fmt.Sprintf("  (evaluations: %v)", err)
	}
	var b strings.Builder
	for _, e := range evals {
		fmt.Fprintf(&b, "  eval %s %s status=%s %s\n", e.ID[:8], e.TriggeredBy, e.Status, e.StatusDescription)
		for tg, m := range e.FailedTGAllocs {
			fmt.Fprintf(&b, "    group %s not placed: evaluated=%d filtered=%d exhausted=%d constraints=%v dimensions=%v classes=%v\n",
				tg, m.NodesEvaluated, m.NodesFiltered, m.NodesExhausted, m.ConstraintFiltered, m.DimensionExhausted, m.ClassExhausted)
		}
		if e.BlockedEval != "" {
			fmt.Fprintf(&b, "    blocked eval %s\n", e.BlockedEval[:8])
		}
	}
	if b.Len() == 0 {
		return "  (no evaluations)"
	}
	return strings.TrimRight(b.String(), "\n")
}

var terminalAlloc = map[string]bool{
	api.AllocClientStatusComplete: true,
	api.AllocClientStatusFailed:   true,
	api.AllocClientStatusLost:     true,
}

// WaitForAllocStatus waits until the allocation's client status is status
// ("running", "complete", "failed", ...) and returns it. It fails at
// timeout, or at once if the allocation reaches a different terminal status,
// with the allocation's task states and events.
func (c *Cluster) WaitForAllocStatus(t testing.TB, allocID, status string, timeout time.Duration) *api.Allocation {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last *api.Allocation
	var lastErr error
	for {
		a, _, err := c.api.Allocations().Info(allocID, nil)
		if err != nil {
			lastErr = err
		} else {
			last = a
			if a.ClientStatus == status {
				return a
			}
			if terminalAlloc[a.ClientStatus] {
				t.Fatalf("e2e: alloc %s ended %s, want %s\n%s", allocID, a.ClientStatus, status, AllocSummary(a))
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("e2e: alloc %s not %s after %v (last error: %v)\n%s", allocID, status, timeout, lastErr, AllocSummary(last))
		}
		time.Sleep(pollInterval)
	}
}

// AllocSummary renders an allocation's status and its tasks' recent events.
func AllocSummary(a *api.Allocation) string {
	if a == nil {
		return "  (no allocation)"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "  alloc %s job=%s node=%s client=%s desired=%s %s\n",
		a.ID, a.JobID, a.NodeName, a.ClientStatus, a.DesiredStatus, a.ClientDescription)
	tasks := make([]string, 0, len(a.TaskStates))
	for name := range a.TaskStates {
		tasks = append(tasks, name)
	}
	sort.Strings(tasks)
	for _, name := range tasks {
		ts := a.TaskStates[name]
		fmt.Fprintf(&b, "  task %s: state=%s failed=%t restarts=%d\n", name, ts.State, ts.Failed, ts.Restarts)
		ev := ts.Events
		if len(ev) > 8 {
			ev = ev[len(ev)-8:]
		}
		for _, e := range ev {
			msg := e.DisplayMessage
			if msg == "" {
				msg = e.Message
			}
			fmt.Fprintf(&b, "    %s %s: %s\n", time.Unix(0, e.Time).Format("15:04:05.000"), e.Type, msg)
		}
	}
	return strings.TrimRight(b.String(), "\n")
}

// AllocLogs returns what task has written so far to logType ("stdout" or
// "stderr") in the allocation, through the logs API.
func (c *Cluster) AllocLogs(t testing.TB, allocID, task, logType string) string {
	t.Helper()
	s, err := c.allocLogs(allocID, task, logType, 30*time.Second)
	if err != nil {
		t.Fatalf("e2e: logs of %s/%s %s: %v", allocID, task, logType, err)
	}
	return s
}

// TryAllocLogs is AllocLogs returning the error: the logs of an
// allocation whose node is gone (scaled in) cannot be read.
func (c *Cluster) TryAllocLogs(allocID, task, logType string) (string, error) {
	return c.allocLogs(allocID, task, logType, 30*time.Second)
}

// WaitForAllocLogs waits until the task's logType log contains want and
// returns the whole log. It fails at timeout with what the log held.
func (c *Cluster) WaitForAllocLogs(t testing.TB, allocID, task, logType, want string, timeout time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	var lastErr error
	for {
		s, err := c.allocLogs(allocID, task, logType, 30*time.Second)
		if err == nil {
			last = s
			if strings.Contains(s, want) {
				return s
			}
		} else {
			lastErr = err
		}
		if time.Now().After(deadline) {
			t.Fatalf("e2e: %s of %s/%s lacks %q after %v (last error: %v); it holds:\n%s",
				logType, allocID, task, want, timeout, lastErr, last)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func (c *Cluster) allocLogs(allocID, task, logType string, timeout time.Duration) (string, error) {
	alloc, _, err := c.api.Allocations().Info(allocID, nil)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	stop := make(chan struct{})
	defer close(stop)
	frames, errs := c.api.AllocFS().Logs(alloc, false, task, logType, api.OriginStart, 0, stop, nil)
	var b strings.Builder
	for {
		select {
		case f, ok := <-frames:
			if !ok {
				return b.String(), nil
			}
			b.Write(f.Data)
		case err := <-errs:
			if err != nil {
				return b.String(), err
			}
		case <-ctx.Done():
			return b.String(), fmt.Errorf("reading logs: %w", ctx.Err())
		}
	}
}
