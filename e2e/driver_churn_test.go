package e2e

// No leaks under churn: 200 short tasks started and stopped through the gpu
// driver on one client leave no processes, state dirs, cgroups, file
// descriptors (FIFOs, pidfds, sockets) or threads behind.

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/e2e/cluster"
	"github.com/nomad-gpu/nomad-gpu/e2e/harness"
	"github.com/nomad-gpu/nomad-gpu/internal/testenv"
)

const (
	churnRounds    = 2
	churnPerJob    = 50 // per job; each round runs one exiting and one stopped job
	churnMarkerEnv = "NGE2E_CHURN"
	// The plugin's fds must come back to the baseline but for a small
	// constant: gRPC may keep a buffer pipe or pooled connection more than
	// before. A leak grows with the number of tasks (200 here): a leaked
	// exit waiter holds a pidfd, a leaked log or notify pipe an fd.
	churnFDSlack = 5
	// Threads are the goroutine-leak proxy: a goroutine leaked inside a
	// blocking syscall (wait4 on a child nobody reaps, a read on a FIFO or a
	// cgroup file) pins an OS thread each. But the Go runtime never gives
	// back the threads it started while many goroutines sat in short
	// blocking syscalls at once (50 StartTasks forking supervisors and
	// writing cgroup files together), so the count is a high-water mark
	// that can step up in any burst without a leak: by at most one
	// thread per call blocked at once, and a round starts churnPerJob
	// tasks at once (a CI run saw 11 → 20 in the second round, no leak).
	// The warm-up burst raises it before the baseline; the slack is that
	// bound, so a leak that pins a thread in more than a quarter of the
	// 200 tasks still fails. Leaked goroutines that block in the
	// netpoller hold no thread and show up as fds (pidfds, pipes) instead.
	churnThreadSlack = churnPerJob
)

// churnJob is a job of n gpu tasks that either exit on their own after a
// moment (batch) or sleep until stopped (service).
func churnJob(id, marker string, n int, exits bool) string {
	typ, cmd, args := "service", "/bin/sleep", `"3600"`
	if exits {
		typ, cmd, args = "batch", "/bin/sh", `"-c", "sleep 1"`
	}
	return fmt.Sprintf(`
job %q {
  type = %q
  group "g" {
    count = %d
    restart {
      attempts = 0
      mode     = "fail"
    }
    reschedule {
      attempts  = 0
      unlimited = false
    }
    task "t" {
      driver       = "gpu"
      kill_timeout = "2s"
      env {
        %s = %q
      }
      config {
        command = %q
        args    = [%s]
      }
      resources {
        cpu    = 10
        memory = 32
      }
    }
  }
}`, id, typ, n, churnMarkerEnv, marker, cmd, args)
}

// churnCounts is what a task may leave behind, on the node and in the
// driver plugin process.
type churnCounts struct {
	supervisors, shims, tasks, zombies int // processes
	stateDirs                          int // entries under <state_dir>/tasks
	cgroups                            int // dirs under /sys/fs/cgroup/*/<cgroup_root>/
	fds, fifoFDs, pidFDs               int // open fds of the plugin; those on *.fifo; pidfds
	threads                            int // threads of the plugin (goroutine-leak proxy)
	logmons                            int // Nomad's logmon processes (not the driver's; shown only)
}

func (c churnCounts) String() string {
	return fmt.Sprintf("supervisors=%d shims=%d tasks=%d zombies=%d state_dirs=%d cgroups=%d plugin_fds=%d (fifo=%d pidfd=%d) plugin_threads=%d logmons=%d",
		c.supervisors, c.shims, c.tasks, c.zombies, c.stateDirs, c.cgroups, c.fds, c.fifoFDs, c.pidFDs, c.threads, c.logmons)
}

// settled: nothing of the driver's is left beyond the baseline. Threads
// are left out: they never go down (see churnThreadSlack).
func (c churnCounts) settled(base churnCounts) bool {
	return c.supervisors <= base.supervisors && c.shims <= base.shims && c.tasks <= base.tasks &&
		c.zombies <= base.zombies && c.stateDirs <= base.stateDirs && c.cgroups <= base.cgroups &&
		c.fifoFDs <= base.fifoFDs && c.pidFDs <= base.pidFDs && c.fds <= base.fds+churnFDSlack
}

type churnProbe struct {
	stateDir   string   // the driver's state_dir
	cgroupDirs []string // /sys/fs/cgroup/<ctrl>/<cgroup_root>
	marker     string   // value of churnMarkerEnv in every churn task
	clusterDir string
	plugin     int // pid of the driver plugin process
}

func (p churnProbe) count() churnCounts {
	var c churnCounts
	for _, pr := range listProcesses() {
		if pr.ppid == p.plugin && pr.zombie {
			c.zombies++
		}
		if len(pr.argv) >= 3 && isSupervisorBinary(pr.argv[0]) && under(pr.argv[2], p.stateDir) {
			switch pr.argv[1] {
			case "supervise":
				c.supervisors++
			case "shim":
				c.shims++
			}
		}
		if pr.env[churnMarkerEnv] == p.marker {
			c.tasks++
		}
		if len(pr.argv) >= 2 && pr.argv[1] == "logmon" && strings.HasSuffix(pr.env["E2E_NOMAD_GPU_OWNER"], ":"+p.clusterDir) {
			c.logmons++
		}
	}
	ents, _ := os.ReadDir(filepath.Join(p.stateDir, "tasks"))
	c.stateDirs = len(ents)
	for _, d := range p.cgroupDirs {
		ents, _ := os.ReadDir(d)
		for _, e := range ents {
			if e.IsDir() {
				c.cgroups++
			}
		}
	}
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", p.plugin))
	c.fds = len(fds)
	for _, fd := range fds {
		target, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", p.plugin, fd.Name()))
		switch {
		case strings.HasSuffix(target, ".fifo"):
			c.fifoFDs++
		case target == "anon_inode:[pidfd]":
			c.pidFDs++
		}
	}
	threads, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", p.plugin))
	c.threads = len(threads)
	return c
}

func TestDriverChurn(t *testing.T) {
	cluster.RequirePlugin(t, "nomad-device-gpu")
	cluster.RequirePlugin(t, "nomad-driver-gpu")
	cluster.RequireBinary(t, "libexec/nomad-driver-gpu-supervisor")
	if os.Geteuid() != 0 {
		testenv.Skip(t, testenv.Root, "e2e: the gpu driver needs a root Nomad client")
	}
	start := time.Now()
	node := harness.NewGPUNode(t)
	cgroupRoot := "nomad-gpu-e2e-" + randHex(t, 4)
	// Registered before the cluster, so it runs after the cluster's own
	// cleanup has killed everything: only the (then empty) roots remain.
	t.Cleanup(func() {
		dirs, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", cgroupRoot))
		for _, d := range dirs {
			removeCgroupDirs(d)
		}
	})
	hcl := node.HCL(t)
	const anchor = `watchdog_interval = "500ms"`
	if !strings.Contains(hcl, anchor) {
		t.Fatalf("GPUNode.HCL lacks %q to place cgroup_root after", anchor)
	}
	hcl = strings.Replace(hcl, anchor, fmt.Sprintf("%s\n    cgroup_root       = %q", anchor, cgroupRoot), 1)
	c := cluster.Start(t, cluster.Options{
		Clients: 1,
		Client:  cluster.ClientOptions{PluginDir: cluster.PluginDir(t), ExtraHCL: hcl},
	})
	c.WaitForNode(t, "client-1", func(n *api.Node) bool { return n.Drivers["gpu"] != nil && n.Drivers["gpu"].Healthy }, 2*time.Minute)
	marker := randHex(t, 8)

	// Warm-up, not counted: the plugin opens its runtime (MPS manager,
	// watchdog, GPU inventory) on the first task, and that stays; a burst
	// of starts also grows the Go runtime's thread pool to about its
	// high-water mark. The baseline is taken after it.
	c.RunJob(t, churnJob("churn-warm", marker, churnPerJob, true))
	waitJobTerminal(t, c, "churn-warm", churnPerJob, 2*time.Minute)

	probe := churnProbe{
		stateDir:   filepath.Join(node.Dir, "state"),
		marker:     marker,
		clusterDir: c.Dir(),
		plugin:     clusterPluginPID(t, c, "nomad-driver-gpu"),
	}
	probe.cgroupDirs, _ = filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", cgroupRoot))
	if len(probe.cgroupDirs) == 0 {
		t.Fatalf("the warm-up task made no cgroup under /sys/fs/cgroup/*/%s", cgroupRoot)
	}
	// The warm-up task is destroyed shortly after its alloc is terminal.
	settle(probe, func(c churnCounts) bool { return c.supervisors+c.shims+c.tasks+c.stateDirs+c.cgroups == 0 }, 30*time.Second)
	base := probe.count()
	t.Logf("baseline: %v", base)

	var perRound []churnCounts
	total := 0
	for r := 1; r <= churnRounds; r++ {
		exitID, stopID := fmt.Sprintf("churn-exit-%d", r), fmt.Sprintf("churn-stop-%d", r)
		c.RunJob(t, churnJob(exitID, marker, churnPerJob, true))
		c.RunJob(t, churnJob(stopID, marker, churnPerJob, false))
		// Stop the service job's tasks while they run: all of them, once
		// all are running (the batch tasks come and go meanwhile).
		waitJobRunning(t, c, stopID, churnPerJob, 2*time.Minute)
		peak := probe.count()
		// The probe must see what it counts, or the test proves nothing.
		if peak.supervisors < churnPerJob || peak.tasks < churnPerJob || peak.stateDirs < churnPerJob || peak.cgroups < churnPerJob || peak.pidFDs == 0 {
			t.Fatalf("round %d: with %d tasks running the probe sees only %v", r, churnPerJob, peak)
		}
		c.StopJob(t, stopID, false)
		// Every task really ran: exited 0 on its own, or was stopped.
		for _, id := range []string{exitID, stopID} {
			for _, a := range waitJobTerminal(t, c, id, churnPerJob, 2*time.Minute) {
				if a.ClientStatus != api.AllocClientStatusComplete {
					full, _, _ := c.API().Allocations().Info(a.ID, nil)
					t.Fatalf("job %s: alloc %s", id, cluster.AllocSummary(full))
				}
			}
		}
		total += 2 * churnPerJob
		after := settle(probe, func(c churnCounts) bool { return c.settled(base) }, 60*time.Second)
		perRound = append(perRound, after)
		t.Logf("round %d (%d tasks so far, %v): while running %v; after %v", r, total, time.Since(start).Round(time.Second), peak, after)
	}
	if pid := clusterPluginPID(t, c, "nomad-driver-gpu"); pid != probe.plugin {
		t.Fatalf("the driver plugin restarted during the churn (pid %d → %d): fd and thread counts are meaningless; see the client log", probe.plugin, pid)
	}

	final := perRound[len(perRound)-1]
	t.Logf("churn: %d gpu tasks (%d exited on their own, %d stopped while running) in %v; baseline {%v} → after {%v}",
		total, total/2, total/2, time.Since(start).Round(time.Second), base, final)
	check := func(what string, got, want int) {
		if got > want {
			t.Errorf("%s: %d after %d tasks, baseline allows %d", what, got, total, want)
		}
	}
	check("supervisor processes", final.supervisors, base.supervisors)
	check("shim processes", final.shims, base.shims)
	check("task processes", final.tasks, base.tasks)
	check("zombie children of the plugin", final.zombies, base.zombies)
	check("task state dirs", final.stateDirs, base.stateDirs)
	check("task cgroups", final.cgroups, base.cgroups)
	check("plugin fds on FIFOs", final.fifoFDs, base.fifoFDs)
	check("plugin pidfds", final.pidFDs, base.pidFDs)
	check("plugin fds", final.fds, base.fds+churnFDSlack)
	check("plugin threads", final.threads, base.threads+churnThreadSlack)
	if t.Failed() {
		t.Logf("left in %s: %v", filepath.Join(probe.stateDir, "tasks"), dirNames(filepath.Join(probe.stateDir, "tasks")))
		t.Logf("plugin fds: %v", fdTargets(probe.plugin))
	}
}

// settle waits (bounded) until done holds for the counts, then returns
// them; at the deadline it returns what it has.
func settle(p churnProbe, done func(churnCounts) bool, within time.Duration) churnCounts {
	deadline := time.Now().Add(within)
	for {
		c := p.count()
		if done(c) || time.Now().After(deadline) {
			return c
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// waitJobRunning waits until n allocations of the job have their task running.
func waitJobRunning(t *testing.T, c *cluster.Cluster, jobID string, n int, timeout time.Duration) {
	t.Helper()
	_ = waitJobAllocs(t, c, jobID, n, timeout, "running", func(a *api.AllocationListStub) bool {
		ts := a.TaskStates["t"]
		return ts != nil && ts.State == "running"
	})
}

// waitJobTerminal waits until n allocations of the job are terminal and
// returns them.
func waitJobTerminal(t *testing.T, c *cluster.Cluster, jobID string, n int, timeout time.Duration) []*api.AllocationListStub {
	t.Helper()
	return waitJobAllocs(t, c, jobID, n, timeout, "terminal", func(a *api.AllocationListStub) bool {
		return terminalStatus(a.ClientStatus)
	})
}

func waitJobAllocs(t *testing.T, c *cluster.Cluster, jobID string, n int, timeout time.Duration, what string, ok func(*api.AllocationListStub) bool) []*api.AllocationListStub {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var idx uint64
	for {
		stubs, meta, err := c.API().Jobs().Allocations(jobID, true, &api.QueryOptions{WaitIndex: idx, WaitTime: 5 * time.Second})
		good, statuses := 0, map[string]int{}
		if err == nil {
			idx = meta.LastIndex
			for _, a := range stubs {
				statuses[a.ClientStatus]++
				if ok(a) {
					good++
				}
			}
			if good >= n {
				return stubs
			}
		} else {
			time.Sleep(250 * time.Millisecond)
		}
		if time.Now().After(deadline) {
			var sample string
			for _, a := range stubs {
				if !ok(a) {
					full, _, _ := c.API().Allocations().Info(a.ID, nil)
					sample = cluster.AllocSummary(full)
					break
				}
			}
			t.Fatalf("job %s: %d of %d allocations %s after %v (client statuses %v, last error %v)\n%s",
				jobID, good, n, what, timeout, statuses, err, sample)
		}
	}
}

// proc is one /proc entry, read best effort.
type proc struct {
	pid, ppid int
	zombie    bool
	argv      []string
	env       map[string]string
}

func listProcesses() []proc {
	ents, _ := os.ReadDir("/proc")
	var out []proc
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		base := "/proc/" + e.Name()
		stat, err := os.ReadFile(base + "/stat")
		if err != nil {
			continue
		}
		p := proc{pid: pid}
		s := string(stat)
		if i := strings.LastIndexByte(s, ')'); i > 0 {
			if f := strings.Fields(s[i+1:]); len(f) > 2 {
				p.zombie = f[0] == "Z"
				p.ppid, _ = strconv.Atoi(f[1])
			}
		}
		if b, err := os.ReadFile(base + "/cmdline"); err == nil && len(b) > 0 {
			p.argv = strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		}
		if b, err := os.ReadFile(base + "/environ"); err == nil {
			p.env = map[string]string{}
			for _, kv := range strings.Split(string(b), "\x00") {
				if k, v, ok := strings.Cut(kv, "="); ok {
					p.env[k] = v
				}
			}
		}
		out = append(out, p)
	}
	return out
}

// isSupervisorBinary: tasks are supervised by the small supervisor binary
// when it is installed next to the plugin, else by the plugin binary.
func isSupervisorBinary(path string) bool {
	b := filepath.Base(path)
	return b == "nomad-driver-gpu-supervisor" || b == "nomad-driver-gpu"
}

// supervisorPIDs lists the live `nomad-driver-gpu supervise <dir>` processes
// whose dir is under stateDir.
func supervisorPIDs(stateDir string) []int {
	var pids []int
	for _, p := range listProcesses() {
		if !p.zombie && len(p.argv) >= 3 && isSupervisorBinary(p.argv[0]) && p.argv[1] == "supervise" && under(p.argv[2], stateDir) {
			pids = append(pids, p.pid)
		}
	}
	return pids
}

// clusterPluginPID is the pid of the plugin process the cluster's (only)
// client runs.
func clusterPluginPID(t testing.TB, c *cluster.Cluster, name string) int {
	t.Helper()
	found := c.PluginPIDs(name)
	if len(found) != 1 {
		t.Fatalf("want one %s plugin process of this cluster, found %v", name, found)
	}
	return found[0]
}

// procStatusKB reads a "<field>: N kB" line of /proc/<pid>/status.
func procStatusKB(pid int, field string) int { return procFieldKB(pid, "status", field) }

// procFieldKB reads a "<field>: N kB" line of /proc/<pid>/<file>.
func procFieldKB(pid int, file, field string) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, file))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return n
		}
	}
	return 0
}

func under(path, dir string) bool {
	return path == dir || strings.HasPrefix(path, dir+string(filepath.Separator))
}

func randHex(t testing.TB, n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// removeCgroupDirs removes a cgroup directory and the groups below it
// (rmdir, deepest first; cgroupfs refuses anything else).
func removeCgroupDirs(dir string) {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.IsDir() {
			removeCgroupDirs(filepath.Join(dir, e.Name()))
		}
	}
	_ = syscall.Rmdir(dir)
}

func dirNames(dir string) []string {
	ents, _ := os.ReadDir(dir)
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

func fdTargets(pid int) map[string]int {
	out := map[string]int{}
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	for _, fd := range fds {
		target, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if i := strings.IndexByte(target, ':'); i > 0 && !strings.HasPrefix(target, "/") {
			target = target[:i]
		}
		out[target]++
	}
	return out
}
