package mps

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nomad-gpu/nomad-gpu/driver/procfs"
)

const (
	gpuA = "GPU-aaaaaaaa-0000-0000-0000-000000000001"
	gpuB = "GPU-bbbbbbbb-0000-0000-0000-000000000002"
)

// fakeBinary is the fake nvidia-cuda-mps-control under testdata.
func fakeBinary(t *testing.T) string {
	t.Helper()
	p, err := filepath.Abs("testdata/fake-nvidia-cuda-mps-control")
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm()&0o111 == 0 {
		t.Fatalf("%s must be executable (git mode 100755)", p)
	}
	return p
}

// testRoot is a short directory (MPS socket paths are limited to 107 bytes)
// whose daemons are all killed when the test ends.
func testRoot(t *testing.T) string {
	t.Helper()
	root, err := os.MkdirTemp("", "mps")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, pid := range processesUnder(root) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		deadline := time.Now().Add(5 * time.Second)
		for len(processesUnder(root)) > 0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if left := processesUnder(root); len(left) > 0 {
			t.Errorf("processes left behind: %v", left)
		}
		os.RemoveAll(root)
	})
	return root
}

// procStart returns a process's start time and whether it is running; a
// zombie counts as gone (the daemon is not our child, so where nothing
// reaps, a dead one lingers).
func procStart(pid int) (uint64, bool) {
	id, err := procfs.Identify(pid)
	if err != nil || !id.Alive() {
		return 0, false
	}
	return id.StartTicks, true
}

// processesUnder lists live processes whose CUDA_MPS_PIPE_DIRECTORY is under
// root: the fake daemons and any client command still running.
func processesUnder(root string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if _, alive := procStart(pid); !alive {
			continue
		}
		if dir, ok := procEnv(pid, "CUDA_MPS_PIPE_DIRECTORY"); ok && strings.HasPrefix(dir, root+"/") {
			pids = append(pids, pid)
		}
	}
	return pids
}

// daemons lists the live fake daemons serving pipeDir.
func daemons(pipeDir string) []int {
	var out []int
	for _, pid := range processesUnder(filepath.Dir(pipeDir)) {
		dir, _ := procEnv(pid, "CUDA_MPS_PIPE_DIRECTORY")
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if dir == pipeDir && bytes.Contains(cmdline, []byte("__fake_daemon")) {
			out = append(out, pid)
		}
	}
	return out
}

// client is a task of the test's own user.
func client(task string, l Limits) Client {
	return Client{TaskID: task, UID: uint32(os.Getuid()), User: "tester", Limits: l}
}

func testConfig(t *testing.T, root string) Config {
	return Config{
		ControlBinary: fakeBinary(t),
		PipeRoot:      filepath.Join(root, "pipe"),
		LogRoot:       filepath.Join(root, "log"),
		StateDir:      filepath.Join(root, "state"),
		StopTimeout:   3 * time.Second,
		CheckInterval: 20 * time.Millisecond,
	}
}

func newManager(t *testing.T, cfg Config) *Manager {
	t.Helper()
	m, err := NewManager(cfg, hclog.New(&hclog.LoggerOptions{Level: hclog.Debug, Output: testWriter{t}}))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func commands(t *testing.T, pipeDir string) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(pipeDir, "commands.log"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(data)), "\n")
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestAcquireStartsOneDaemonPerGPU(t *testing.T) {
	root := testRoot(t)
	cfg := testConfig(t, root)
	m := newManager(t, cfg)
	ctx := context.Background()

	for _, c := range []struct{ gpu, task string }{{gpuA, "t1"}, {gpuB, "t2"}} {
		if err := m.Acquire(ctx, c.gpu, client(c.task, Limits{ThreadPercentage: 50, PinnedMemMiB: 1024})); err != nil {
			t.Fatal(err)
		}
	}
	st := m.Status()
	for _, c := range []struct{ gpu, task string }{{gpuA, "t1"}, {gpuB, "t2"}} {
		pipe := filepath.Join(cfg.PipeRoot, c.gpu)
		logd := filepath.Join(cfg.LogRoot, c.gpu)
		ds := daemons(pipe)
		if len(ds) != 1 {
			t.Fatalf("%s: %d daemons %v, want 1", c.gpu, len(ds), ds)
		}
		s := st[c.gpu]
		if s.PID != ds[0] || !s.Healthy || !slices.Equal(s.Clients, []string{c.task}) {
			t.Errorf("%s: status %+v, want pid %d, healthy, clients [%s]", c.gpu, s, ds[0], c.task)
		}
		if s.Ceiling != (Limits{ThreadPercentage: 50, PinnedMemMiB: 1024}) {
			t.Errorf("%s: ceiling %+v", c.gpu, s.Ceiling)
		}
		env, err := os.ReadFile(filepath.Join(pipe, "fake-daemon.env"))
		if err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("CUDA_VISIBLE_DEVICES=%s\nCUDA_MPS_PIPE_DIRECTORY=%s\nCUDA_MPS_LOG_DIRECTORY=%s\n", c.gpu, pipe, logd)
		if string(env) != want {
			t.Errorf("%s: daemon env\n%s\nwant\n%s", c.gpu, env, want)
		}
		if _, err := os.Stat(filepath.Join(logd, "control.log")); err != nil {
			t.Errorf("%s: daemon log: %v", c.gpu, err)
		}
		states, _ := loadStates(cfg.StateDir)
		var st *daemonState
		for _, x := range states {
			if x.GPU == c.gpu {
				st = x
			}
		}
		if st == nil {
			t.Fatalf("%s: no state file", c.gpu)
		}
		// The daemon by pid, start time and boot; the client with its user.
		if st.Version != stateVersion || st.PID != ds[0] || st.StartTicks == 0 || st.BootID != procfs.BootID() {
			t.Errorf("%s: recorded daemon %+v, want pid %d of this boot (%q)", c.gpu, st.Identity, ds[0], procfs.BootID())
		}
		if cs := st.Clients[c.task]; cs.UID == nil || *cs.UID != uint32(os.Getuid()) || cs.User != "tester" {
			t.Errorf("%s: recorded client %+v", c.gpu, cs)
		}
	}
}

func TestCeilingFollowsClients(t *testing.T) {
	type step struct {
		release    bool
		task       string
		limits     Limits
		wantCmds   []string // appended to commands.log by this step
		wantClient []string
	}
	tests := []struct {
		name    string
		servers string // fake-server-list content, written after the daemon starts
		steps   []step
	}{
		{
			name: "raised by a bigger client, kept by a smaller, lowered when the biggest leaves",
			steps: []step{
				{task: "a", limits: Limits{25, 10240}, wantClient: []string{"a"}, wantCmds: []string{
					"set_default_active_thread_percentage 25", "set_default_device_pinned_mem_limit 0 10240M", "get_server_list"}},
				{task: "b", limits: Limits{50, 20480}, wantClient: []string{"a", "b"}, wantCmds: []string{
					"set_default_active_thread_percentage 50", "set_default_device_pinned_mem_limit 0 20480M", "get_server_list"}},
				{task: "c", limits: Limits{10, 5120}, wantClient: []string{"a", "b", "c"}},
				{task: "b", limits: Limits{50, 20480}, wantClient: []string{"a", "b", "c"}}, // idempotent
				{release: true, task: "b", wantClient: []string{"a", "c"}, wantCmds: []string{
					"set_default_active_thread_percentage 25", "set_default_device_pinned_mem_limit 0 10240M", "get_server_list"}},
				{release: true, task: "b", wantClient: []string{"a", "c"}}, // idempotent
			},
		},
		{
			name: "only memory differs",
			steps: []step{
				{task: "a", limits: Limits{50, 1024}, wantClient: []string{"a"}, wantCmds: []string{
					"set_default_active_thread_percentage 50", "set_default_device_pinned_mem_limit 0 1024M", "get_server_list"}},
				{task: "b", limits: Limits{50, 4096}, wantClient: []string{"a", "b"}, wantCmds: []string{
					"set_default_active_thread_percentage 50", "set_default_device_pinned_mem_limit 0 4096M", "get_server_list"}},
			},
		},
		{
			name:    "running servers get the new ceiling too",
			servers: "4242\n4343\n",
			steps: []step{
				{task: "a", limits: Limits{25, 1024}, wantClient: []string{"a"}, wantCmds: []string{
					"set_default_active_thread_percentage 25", "set_default_device_pinned_mem_limit 0 1024M", "get_server_list"}},
				{task: "b", limits: Limits{75, 2048}, wantClient: []string{"a", "b"}, wantCmds: []string{
					"set_default_active_thread_percentage 75", "set_default_device_pinned_mem_limit 0 2048M", "get_server_list",
					"set_active_thread_percentage 4242 75", "set_device_pinned_mem_limit 4242 0 2048M",
					"set_active_thread_percentage 4343 75", "set_device_pinned_mem_limit 4343 0 2048M"}},
			},
		},
		{
			name: "zero limits ask for no ceiling",
			steps: []step{
				{task: "a", limits: Limits{}, wantClient: []string{"a"}},
				{task: "b", limits: Limits{ThreadPercentage: 30}, wantClient: []string{"a", "b"}, wantCmds: []string{
					"set_default_active_thread_percentage 30", "get_server_list"}},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := testRoot(t)
			cfg := testConfig(t, root)
			m := newManager(t, cfg)
			pipe := filepath.Join(cfg.PipeRoot, gpuA)
			var want []string
			var pid int
			for i, s := range tc.steps {
				if s.release {
					if err := m.Release(gpuA, s.task); err != nil {
						t.Fatalf("step %d: %v", i, err)
					}
				} else if err := m.Acquire(context.Background(), gpuA, client(s.task, s.limits)); err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				if i == 0 && tc.servers != "" {
					if err := os.WriteFile(filepath.Join(pipe, "fake-server-list"), []byte(tc.servers), 0o644); err != nil {
						t.Fatal(err)
					}
				}
				want = append(want, s.wantCmds...)
				if got := commands(t, pipe); !slices.Equal(got, want) {
					t.Fatalf("step %d: commands\n%q\nwant\n%q", i, got, want)
				}
				if got := m.Clients(gpuA); !slices.Equal(got, s.wantClient) {
					t.Fatalf("step %d: clients %v, want %v", i, got, s.wantClient)
				}
				ds := daemons(pipe)
				if len(ds) != 1 || (pid != 0 && ds[0] != pid) {
					t.Fatalf("step %d: daemons %v, want the one daemon %d", i, ds, pid)
				}
				pid = ds[0]
			}
		})
	}
}

func TestReleaseOfLastClientQuitsDaemon(t *testing.T) {
	root := testRoot(t)
	cfg := testConfig(t, root)
	m := newManager(t, cfg)
	ctx := context.Background()
	pipe := filepath.Join(cfg.PipeRoot, gpuA)
	for _, task := range []string{"a", "b"} {
		if err := m.Acquire(ctx, gpuA, client(task, Limits{50, 1024})); err != nil {
			t.Fatal(err)
		}
	}
	pid := m.Status()[gpuA].PID
	if err := m.Release(gpuA, "a"); err != nil {
		t.Fatal(err)
	}
	if _, alive := procStart(pid); !alive {
		t.Fatal("daemon stopped while a client remains")
	}
	if err := m.Release(gpuA, "b"); err != nil {
		t.Fatal(err)
	}
	if _, alive := procStart(pid); alive {
		t.Fatalf("daemon %d still running after its last client left", pid)
	}
	if left := processesUnder(root); len(left) > 0 {
		t.Fatalf("processes left: %v", left)
	}
	if entries, err := os.ReadDir(pipe); err != nil || len(entries) != 0 {
		t.Errorf("pipe dir after stop: %v, %v; want it empty", entries, err)
	}
	if _, err := os.Stat(filepath.Join(cfg.StateDir, gpuA+".json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state file after stop: %v", err)
	}
	if st := m.Status(); len(st) != 0 {
		t.Errorf("status after stop: %+v", st)
	}
	for _, c := range []struct{ gpu, task string }{{gpuA, "b"}, {gpuA, "never"}, {gpuB, "x"}} {
		if err := m.Release(c.gpu, c.task); err != nil {
			t.Errorf("Release(%s, %s) again: %v", c.gpu, c.task, err)
		}
	}
	// A new first client starts a new daemon.
	if err := m.Acquire(ctx, gpuA, client("c", Limits{50, 1024})); err != nil {
		t.Fatal(err)
	}
	if ds := daemons(pipe); len(ds) != 1 {
		t.Fatalf("daemons after re-acquire: %v", ds)
	}
	if err := m.ReleaseTask("c"); err != nil {
		t.Fatal(err)
	}
	if ds := daemons(pipe); len(ds) != 0 {
		t.Fatalf("daemons after ReleaseTask: %v", ds)
	}
}

func TestRunRestartsKilledDaemon(t *testing.T) {
	root := testRoot(t)
	cfg := testConfig(t, root)
	m := newManager(t, cfg)
	pipe := filepath.Join(cfg.PipeRoot, gpuA)
	if err := m.Acquire(context.Background(), gpuA, client("a", Limits{40, 2048})); err != nil {
		t.Fatal(err)
	}
	old := m.Status()[gpuA].PID

	var mu sync.Mutex
	var events []string
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.Run(ctx, func(gpu, msg string) {
			mu.Lock()
			defer mu.Unlock()
			events = append(events, gpu+": "+msg)
		})
	}()
	t.Cleanup(func() { cancel(); <-done })

	if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a restart event", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(events) > 0
	})
	mu.Lock()
	ev := events[0]
	mu.Unlock()
	if !strings.Contains(ev, gpuA) || !strings.Contains(ev, fmt.Sprintf("(pid %d) exited; restarted", old)) {
		t.Errorf("event %q", ev)
	}
	s := m.Status()[gpuA]
	ds := daemons(pipe)
	if len(ds) != 1 || s.PID != ds[0] || s.PID == old || !s.Healthy || s.Restarts != 1 {
		t.Fatalf("after restart: status %+v, daemons %v (old %d)", s, ds, old)
	}
	want := []string{"set_default_active_thread_percentage 40", "set_default_device_pinned_mem_limit 0 2048M", "get_server_list"}
	if got := commands(t, pipe); !slices.Equal(got, want) {
		t.Errorf("restarted daemon's commands %q, want %q", got, want)
	}
	cancel()
	<-done
	if err := m.Release(gpuA, "a"); err != nil {
		t.Fatal(err)
	}
	if ds := daemons(pipe); len(ds) != 0 {
		t.Fatalf("daemons after release: %v", ds)
	}
}

func TestRunLeavesDaemonWithoutClientsDown(t *testing.T) {
	root := testRoot(t)
	cfg := testConfig(t, root)
	m := newManager(t, cfg)
	if err := m.Acquire(context.Background(), gpuA, client("a", Limits{40, 2048})); err != nil {
		t.Fatal(err)
	}
	if err := m.Release(gpuA, "a"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var events []string
	go func() { time.Sleep(200 * time.Millisecond); cancel() }()
	m.Run(ctx, func(gpu, msg string) { events = append(events, msg) })
	if len(events) != 0 || len(daemons(filepath.Join(cfg.PipeRoot, gpuA))) != 0 {
		t.Fatalf("events %q, daemons %v; want none", events, daemons(filepath.Join(cfg.PipeRoot, gpuA)))
	}
}

func TestNewManagerReadopts(t *testing.T) {
	tests := []struct {
		name string
		// between runs between the first Manager and the second
		between     func(t *testing.T, m *Manager, pid int)
		wantSamePID bool
		wantClients []string
	}{
		{
			name:        "live daemon is re-adopted",
			between:     func(*testing.T, *Manager, int) {},
			wantSamePID: true,
			wantClients: []string{"a", "b"},
		},
		{
			name: "dead daemon is forgotten, its clients kept and a new daemon started by Run",
			between: func(t *testing.T, _ *Manager, pid int) {
				if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
				waitFor(t, "the daemon to die", func() bool { _, alive := procStart(pid); return !alive })
			},
			wantClients: []string{"a", "b"},
		},
		{
			name: "daemon running but not on record is adopted, not doubled",
			between: func(t *testing.T, m *Manager, pid int) {
				// As if the plugin crashed between starting it and saving.
				st, _ := loadStates(m.cfg.StateDir)
				st[0].PID, st[0].StartTicks = 0, 0
				if err := saveState(m.cfg.StateDir, st[0]); err != nil {
					t.Fatal(err)
				}
			},
			wantSamePID: true,
			wantClients: []string{"a", "b"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := testRoot(t)
			cfg := testConfig(t, root)
			pipe := filepath.Join(cfg.PipeRoot, gpuA)
			m1 := newManager(t, cfg)
			ctx := context.Background()
			if err := m1.Acquire(ctx, gpuA, client("a", Limits{30, 1024})); err != nil {
				t.Fatal(err)
			}
			if err := m1.Acquire(ctx, gpuA, client("b", Limits{60, 2048})); err != nil {
				t.Fatal(err)
			}
			pid := m1.Status()[gpuA].PID
			tc.between(t, m1, pid)

			m2 := newManager(t, cfg)
			if got := m2.Clients(gpuA); !slices.Equal(got, tc.wantClients) {
				t.Fatalf("clients after restart %v, want %v", got, tc.wantClients)
			}
			if tc.wantSamePID {
				s := m2.Status()[gpuA]
				if s.PID != pid || !s.Healthy {
					t.Fatalf("status after restart %+v, want healthy pid %d", s, pid)
				}
			} else {
				if s := m2.Status()[gpuA]; s.Healthy || s.PID != 0 {
					t.Fatalf("status with dead daemon %+v, want unhealthy, no pid", s)
				}
				rctx, cancel := context.WithCancel(ctx)
				done := make(chan struct{})
				go func() { defer close(done); m2.Run(rctx, nil) }()
				waitFor(t, "the daemon restarted", func() bool { return m2.Status()[gpuA].Healthy })
				cancel()
				<-done
				if got := commands(t, pipe); !slices.Contains(got, "set_default_device_pinned_mem_limit 0 2048M") {
					t.Errorf("restarted daemon commands %q lack the ceiling", got)
				}
			}
			if ds := daemons(pipe); len(ds) != 1 {
				t.Fatalf("daemons %v, want exactly one", ds)
			}
			// A client arriving through the new Manager joins the same daemon.
			if err := m2.Acquire(ctx, gpuA, client("c", Limits{30, 1024})); err != nil {
				t.Fatal(err)
			}
			if ds := daemons(pipe); len(ds) != 1 {
				t.Fatalf("daemons after acquire %v, want exactly one", ds)
			}
			for _, task := range []string{"a", "b", "c"} {
				if err := m2.Release(gpuA, task); err != nil {
					t.Fatal(err)
				}
			}
			if left := processesUnder(root); len(left) > 0 {
				t.Fatalf("processes left after the last release: %v", left)
			}
		})
	}
}

func TestNewManagerStopsDaemonWithoutClients(t *testing.T) {
	root := testRoot(t)
	cfg := testConfig(t, root)
	m1 := newManager(t, cfg)
	if err := m1.Acquire(context.Background(), gpuA, client("a", Limits{30, 1024})); err != nil {
		t.Fatal(err)
	}
	// As if the plugin crashed inside Release, after saving.
	st, _ := loadStates(cfg.StateDir)
	st[0].Clients = map[string]clientState{}
	if err := saveState(cfg.StateDir, st[0]); err != nil {
		t.Fatal(err)
	}
	m2 := newManager(t, cfg)
	if ds := daemons(filepath.Join(cfg.PipeRoot, gpuA)); len(ds) != 0 {
		t.Fatalf("daemons %v; want the clientless daemon stopped", ds)
	}
	if s := m2.Status(); len(s) != 0 {
		t.Fatalf("status %+v, want empty", s)
	}
	if _, err := os.Stat(filepath.Join(cfg.StateDir, gpuA+".json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state file: %v", err)
	}
}

func TestUnavailableBinary(t *testing.T) {
	dir := t.TempDir()
	notExec := filepath.Join(dir, "nvidia-cuda-mps-control")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, binary, path, want string
	}{
		{"not in PATH", "nvidia-cuda-mps-control", dir,
			"nvidia-cuda-mps-control not found in PATH; install the CUDA MPS binaries or set mps.control_binary in the driver's plugin config"},
		{"absolute path missing", "/nonexistent/nvidia-cuda-mps-control", dir,
			"/nonexistent/nvidia-cuda-mps-control not found; install the CUDA MPS binaries or set mps.control_binary in the driver's plugin config"},
		{"not executable", notExec, dir,
			notExec + " is not executable; install the CUDA MPS binaries or set mps.control_binary in the driver's plugin config"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("PATH", tc.path)
			root := testRoot(t)
			cfg := testConfig(t, root)
			cfg.ControlBinary = tc.binary
			m := newManager(t, cfg)
			ok, reason := m.Available()
			if ok || reason != tc.want {
				t.Errorf("Available() = %v, %q; want false, %q", ok, reason, tc.want)
			}
			err := m.Acquire(context.Background(), gpuA, client("a", Limits{50, 1024}))
			if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Acquire error %v; want ErrUnavailable saying %q", err, tc.want)
			}
			if c := m.Clients(gpuA); len(c) != 0 {
				t.Errorf("clients %v after failed acquire", c)
			}
			if entries, _ := os.ReadDir(cfg.StateDir); len(entries) != 0 {
				t.Errorf("state files after failed acquire: %v", entries)
			}
		})
	}
	t.Run("found in PATH", func(t *testing.T) {
		bin := filepath.Dir(fakeBinary(t))
		link := filepath.Join(t.TempDir(), "nvidia-cuda-mps-control")
		if err := os.Symlink(filepath.Join(bin, "fake-nvidia-cuda-mps-control"), link); err != nil {
			t.Fatal(err)
		}
		t.Setenv("PATH", filepath.Dir(link))
		root := testRoot(t)
		cfg := testConfig(t, root)
		cfg.ControlBinary = ""
		m := newManager(t, cfg)
		if ok, reason := m.Available(); !ok {
			t.Fatalf("Available() = false, %q", reason)
		}
	})
}

func TestCommandFailure(t *testing.T) {
	t.Run("raising the ceiling fails: the new client is refused, the others keep their daemon", func(t *testing.T) {
		root := testRoot(t)
		cfg := testConfig(t, root)
		m := newManager(t, cfg)
		ctx := context.Background()
		pipe := filepath.Join(cfg.PipeRoot, gpuA)
		if err := m.Acquire(ctx, gpuA, client("a", Limits{30, 1024})); err != nil {
			t.Fatal(err)
		}
		pid := m.Status()[gpuA].PID
		if err := os.WriteFile(filepath.Join(pipe, "fake-fail-commands"), []byte("set_default_device_pinned_mem_limit\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		err := m.Acquire(ctx, gpuA, client("b", Limits{30, 4096}))
		for _, want := range []string{`"set_default_device_pinned_mem_limit 0 4096M"`, "fake: set_default_device_pinned_mem_limit refused", "task b"} {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("error %v; want it to contain %s", err, want)
			}
		}
		if c := m.Clients(gpuA); !slices.Equal(c, []string{"a"}) {
			t.Errorf("clients %v, want [a]", c)
		}
		if s := m.Status()[gpuA]; s.PID != pid || s.Healthy || s.Error == "" {
			t.Errorf("status %+v; want pid %d, unhealthy with the error", s, pid)
		}
		// Part of the raise may have landed, so supervision sets the whole
		// ceiling again once the daemon takes commands.
		if err := os.Remove(filepath.Join(pipe, "fake-fail-commands")); err != nil {
			t.Fatal(err)
		}
		n := len(commands(t, pipe))
		m.supervise(ctx, nil)
		if s := m.Status()[gpuA]; s.PID != pid || !s.Healthy || s.Error != "" || s.Ceiling != (Limits{30, 1024}) {
			t.Errorf("status after supervision %+v; want healthy, ceiling of a", s)
		}
		want := []string{"set_default_active_thread_percentage 30", "set_default_device_pinned_mem_limit 0 1024M", "get_server_list"}
		if got := commands(t, pipe)[n:]; !slices.Equal(got, want) {
			t.Errorf("commands after supervision %q, want %q", got, want)
		}
	})
	t.Run("first client's ceiling fails: the daemon is stopped again", func(t *testing.T) {
		root := testRoot(t)
		cfg := testConfig(t, root)
		wrapper := filepath.Join(root, "mps-control")
		script := fmt.Sprintf("#!/bin/sh\nif [ \"${1:-}\" = -d ]; then %q -d || exit; echo set_default_active_thread_percentage > \"$CUDA_MPS_PIPE_DIRECTORY/fake-fail-commands\"; exit 0; fi\nexec %q \"$@\"\n", cfg.ControlBinary, cfg.ControlBinary)
		if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		cfg.ControlBinary = wrapper
		m := newManager(t, cfg)
		err := m.Acquire(context.Background(), gpuA, client("a", Limits{30, 1024}))
		if err == nil || !strings.Contains(err.Error(), "set_default_active_thread_percentage 30") {
			t.Fatalf("error %v; want the failed command", err)
		}
		if ds := daemons(filepath.Join(cfg.PipeRoot, gpuA)); len(ds) != 0 {
			t.Errorf("daemons %v after failed first acquire", ds)
		}
		if st := m.Status(); len(st) != 0 {
			t.Errorf("status %+v", st)
		}
	})
}

func TestConcurrentClients(t *testing.T) {
	root := testRoot(t)
	cfg := testConfig(t, root)
	m := newManager(t, cfg)
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 16 {
		wg.Go(func() {
			gpu := []string{gpuA, gpuB}[i%2]
			if err := m.Acquire(ctx, gpu, client(fmt.Sprintf("t%02d", i), Limits{ThreadPercentage: 10 + i, PinnedMemMiB: uint64(1024 * (i + 1))})); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for _, c := range []struct {
		gpu  string
		want Limits
	}{{gpuA, Limits{24, 15 * 1024}}, {gpuB, Limits{25, 16 * 1024}}} {
		if ds := daemons(filepath.Join(cfg.PipeRoot, c.gpu)); len(ds) != 1 {
			t.Fatalf("%s: daemons %v, want one", c.gpu, ds)
		}
		s := m.Status()[c.gpu]
		if len(s.Clients) != 8 || s.Ceiling != c.want || !s.Healthy {
			t.Fatalf("%s: status %+v; want 8 clients, ceiling %+v", c.gpu, s, c.want)
		}
	}
	for i := range 16 {
		wg.Go(func() {
			if err := m.ReleaseTask(fmt.Sprintf("t%02d", i)); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if left := processesUnder(root); len(left) > 0 {
		t.Fatalf("processes left: %v", left)
	}
}

func TestInvalidInput(t *testing.T) {
	root := testRoot(t)
	m := newManager(t, testConfig(t, root))
	ctx := context.Background()
	for _, c := range []struct {
		gpu, task string
		l         Limits
		want      string
	}{
		{"", "a", Limits{}, "not a device UUID"},
		{"../etc", "a", Limits{}, "not a device UUID"},
		{".hidden", "a", Limits{}, "not a device UUID"},
		{gpuA, "", Limits{}, "empty task ID"},
		{gpuA, "a", Limits{ThreadPercentage: 101}, "outside 0-100"},
	} {
		if err := m.Acquire(ctx, c.gpu, client(c.task, c.l)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Acquire(%q, %q, %+v) = %v; want %q", c.gpu, c.task, c.l, err, c.want)
		}
	}
	// Errors name the driver's config key.
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{PipeRoot: "/p", LogRoot: "/l", StateDir: ""}, `state_dir: "" must be an absolute path`},
		{Config{PipeRoot: "/p", LogRoot: "/l", StateDir: "relative"}, `state_dir: "relative" must be an absolute path`},
		{Config{PipeRoot: "relative", LogRoot: "/l", StateDir: "/x"}, `mps.pipe_root: "relative" must be an absolute path`},
		{Config{PipeRoot: "/p", LogRoot: "log", StateDir: "/x"}, `mps.log_root: "log" must be an absolute path`},
		{Config{PipeRoot: "/p", LogRoot: "/l", StateDir: "/x", ControlBinary: "bin/nvidia-cuda-mps-control"},
			`mps.control_binary: "bin/nvidia-cuda-mps-control" must be a bare name (looked up in PATH) or an absolute path`},
	} {
		if _, err := NewManager(c.cfg, nil); err == nil || err.Error() != c.want {
			t.Errorf("NewManager(%+v) = %v, want %q", c.cfg, err, c.want)
		}
	}
}
