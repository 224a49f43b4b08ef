package supervisor

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/nomad-gpu/nomad-gpu/driver/procfs"
	"github.com/nomad-gpu/nomad-gpu/internal/testenv"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The test binary doubles as the plugin binary: the supervisor and the shim
// are this executable started with "supervise"/"shim", exactly as the real
// plugin's main dispatches them. "start-helper" starts a task and exits at
// once, standing in for a plugin that dies.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "supervise":
			os.Exit(RunSupervisor(os.Args[2:]))
		case "shim":
			os.Exit(RunShim(os.Args[2:]))
		case "exec-shim":
			os.Exit(RunExecShim(os.Args[2:]))
		case "probe-isolation":
			os.Exit(RunProbe(os.Args[2:]))
		case "start-helper":
			os.Exit(startHelper(os.Args[2:]))
		}
	}
	if _, ok := os.LookupEnv("GORACE"); !ok {
		// A -race supervisor otherwise sleeps 1 s at exit, delaying every Wait.
		os.Setenv("GORACE", "atexit_sleep_ms=0")
	}
	os.Exit(m.Run())
}

func startHelper(args []string) int {
	var spec Spec
	if err := readJSON(args[0], &spec); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	h, err := Start(spec)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(h.TaskPID())
	return 0
}

// marker tags every process and state dir of this test run, so leaks can be
// found in /proc (environ for tasks, cmdline for supervisors and shims).
var marker = "nomadgputest" + randHex(6)

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

const waitLimit = 20 * time.Second

func testExecutable(t testing.TB) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

// newSpec returns a spec running sh -c script with a minimal environment
// carrying the marker.
func newSpec(t testing.TB, script string) Spec {
	t.Helper()
	base := t.TempDir()
	return Spec{
		TaskID:     t.Name(),
		StateDir:   filepath.Join(base, marker+"-state"),
		Executable: testExecutable(t),
		Command:    "/bin/sh",
		Args:       []string{"-c", script},
		Env:        []string{"PATH=/usr/bin:/bin", "MARKER=" + marker, "GATE=" + filepath.Join(base, "gate"), "READY=" + filepath.Join(base, "ready")},
		Dir:        base,
	}
}

func gatePath(s Spec) string  { return envValue(s.Env, "GATE") }
func readyPath(s Spec) string { return envValue(s.Env, "READY") }

func openGate(t testing.TB, s Spec) {
	t.Helper()
	if err := os.WriteFile(gatePath(s), nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// gated waits for the test to open the gate, then runs tail.
func gated(tail string) string {
	return `while [ ! -e "$GATE" ]; do sleep 0.02; done; ` + tail
}

func start(t testing.TB, s Spec) *Handle {
	t.Helper()
	h, err := Start(s)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := h.Destroy(); err != nil {
			t.Errorf("Destroy: %v", err)
		}
	})
	return h
}

func wait(t testing.TB, h *Handle) ExitStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	st, err := h.Wait(ctx)
	if err != nil {
		t.Fatalf("Wait: %v", err)
	}
	return st
}

// eventually polls cond until it holds or the bound passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// markedProcs lists live processes whose cmdline or environ carries the marker.
func markedProcs() []string {
	ents, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		for _, f := range []string{"cmdline", "environ"} {
			b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, f))
			if bytes.Contains(b, []byte(marker)) {
				out = append(out, fmt.Sprintf("%d: %s", pid, bytes.ReplaceAll(mustRead(fmt.Sprintf("/proc/%d/cmdline", pid)), []byte{0}, []byte{' '})))
				break
			}
		}
	}
	return out
}

func mustRead(p string) []byte { b, _ := os.ReadFile(p); return b }

func assertNoMarkedProcs(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		left := markedProcs()
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes left behind: %v", left)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestExitStatus(t *testing.T) {
	for _, tc := range []struct {
		name       string
		script     string
		wantCode   int
		wantSignal int
	}{
		{"exit 0", "exit 0", 0, 0},
		{"exit 7", "exit 7", 7, 0},
		{"killed by SIGTERM", "kill -TERM $$; sleep 5", 128 + 15, 15},
		// Also proves the task does not inherit SIGHUP/SIGINT ignored from
		// the plugin or supervisor (exec keeps SIG_IGN, and sh cannot undo a
		// signal ignored on entry).
		{"killed by SIGHUP", "kill -HUP $$; sleep 5", 128 + 1, 1},
		{"killed by SIGINT", "kill -INT $$; sleep 5", 128 + 2, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := start(t, newSpec(t, tc.script))
			st := wait(t, h)
			if st.ExitCode != tc.wantCode || st.Signal != tc.wantSignal || st.Err != "" {
				t.Fatalf("got %+v, want exit %d signal %d", st, tc.wantCode, tc.wantSignal)
			}
			if st.FinishedAt.IsZero() || h.StartedAt().IsZero() || st.FinishedAt.Before(h.StartedAt()) {
				t.Errorf("times: started %v finished %v", h.StartedAt(), st.FinishedAt)
			}
			if h.Running() {
				t.Error("Running after exit")
			}
			// Every later Wait returns the same result at once.
			again, err := h.Wait(context.Background())
			if err != nil || again != st {
				t.Errorf("second Wait: %+v %v", again, err)
			}
		})
	}
}

func TestConcurrentWait(t *testing.T) {
	s := newSpec(t, gated("exit 4"))
	h := start(t, s)
	var wg sync.WaitGroup
	results := make([]ExitStatus, 8)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], _ = h.Wait(context.Background())
		}()
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := h.Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Wait with cancelled ctx on a running task: %v", err)
	}
	openGate(t, s)
	wg.Wait()
	for i, r := range results {
		if r.ExitCode != 4 {
			t.Errorf("waiter %d: %+v", i, r)
		}
	}
}

// fifoReader makes a log FIFO at p, as Nomad's logmon does, and collects
// what is written to it until the writer closes.
func fifoReader(t *testing.T, p string) <-chan string {
	t.Helper()
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		t.Fatal(err)
	}
	ch := make(chan string, 1)
	go func() {
		f, err := os.Open(p) // blocks until the supervisor opens the write end
		if err != nil {
			ch <- err.Error()
			return
		}
		defer f.Close()
		b, _ := io.ReadAll(f)
		ch <- string(b)
	}()
	return ch
}

func TestLogFIFOs(t *testing.T) {
	s := newSpec(t, `echo to-stdout; echo to-stderr >&2`)
	dir := t.TempDir()
	s.StdoutPath, s.StderrPath = filepath.Join(dir, "stdout.fifo"), filepath.Join(dir, "stderr.fifo")
	out, errc := fifoReader(t, s.StdoutPath), fifoReader(t, s.StderrPath)
	h := start(t, s)
	if st := wait(t, h); st.ExitCode != 0 {
		t.Fatalf("exit: %+v", st)
	}
	for _, c := range []struct {
		ch   <-chan string
		want string
	}{{out, "to-stdout\n"}, {errc, "to-stderr\n"}} {
		select {
		case got := <-c.ch:
			if got != c.want {
				t.Errorf("got %q, want %q", got, c.want)
			}
		case <-time.After(waitLimit):
			t.Fatal("FIFO reader saw no EOF: someone still holds the write end")
		}
	}
}

// TestTaskSees checks what the task's process observes: environment,
// working directory, PATH resolution, oom_score_adj, credentials.
func TestTaskSees(t *testing.T) {
	toolDir := t.TempDir()
	os.WriteFile(filepath.Join(toolDir, "mytool"), []byte("#!/bin/sh\necho tool-ran\n"), 0o755)
	adj := 321
	nobody := func(t *testing.T, s *Spec) {
		if os.Geteuid() != 0 {
			testenv.Skip(t, testenv.Root, "needs root")
		}
		uid, gid, groups, _, err := LookupUser("nobody")
		if err != nil {
			t.Skip(err)
		}
		s.SetUser, s.UID, s.GID, s.Groups = true, uid, gid, groups
		s.Dir = "/"
	}
	for _, tc := range []struct {
		name    string
		modify  func(t *testing.T, s *Spec)
		command string
		args    []string
		want    func(s Spec) string
	}{{
		name: "exactly the spec's environment",
		modify: func(t *testing.T, s *Spec) {
			s.Env = []string{"PATH=/usr/bin:/bin", "MARKER=" + marker, "WITH_SPACE=a b", "EMPTY="}
		},
		command: "env",
		want:    func(s Spec) string { return strings.Join(s.Env, "\n") + "\n" },
	}, {
		name:    "working directory",
		command: "/bin/pwd",
		want:    func(s Spec) string { return s.Dir + "\n" },
	}, {
		name: "command found through the task's PATH",
		modify: func(t *testing.T, s *Spec) {
			s.Env = []string{"PATH=" + toolDir + ":/usr/bin:/bin", "MARKER=" + marker}
		},
		command: "mytool",
		want:    func(Spec) string { return "tool-ran\n" },
	}, {
		name:    "oom_score_adj",
		modify:  func(t *testing.T, s *Spec) { s.OOMScoreAdj = adj },
		command: "cat", args: []string{"/proc/self/oom_score_adj"},
		want: func(Spec) string { return "321\n" },
	}, {
		name:    "runs as nobody",
		modify:  nobody,
		command: "/bin/sh", args: []string{"-c", "id -u; id -g; id -G"},
		want: func(s Spec) string {
			var gs []string
			for _, g := range s.Groups {
				gs = append(gs, strconv.Itoa(int(g)))
			}
			return fmt.Sprintf("%d\n%d\n%s\n", s.UID, s.GID, strings.Join(gs, " "))
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSpec(t, "")
			s.Command, s.Args = tc.command, tc.args
			if tc.modify != nil {
				tc.modify(t, &s)
			}
			s.StdoutPath = filepath.Join(t.TempDir(), "stdout")
			s.StderrPath = filepath.Join(t.TempDir(), "stderr")
			outc, errc := fifoReader(t, s.StdoutPath), fifoReader(t, s.StderrPath)
			h := start(t, s)
			st := wait(t, h)
			out, errOut := <-outc, <-errc
			if st.ExitCode != 0 {
				t.Fatalf("exit %+v, stderr %q", st, errOut)
			}
			if want := tc.want(s); string(out) != want {
				t.Errorf("stdout %q, want %q", out, want)
			}
		})
	}
}

func TestStartErrors(t *testing.T) {
	notExec := filepath.Join(t.TempDir(), "not-executable")
	os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644)
	private := t.TempDir()
	os.Chmod(private, 0o700)
	for _, tc := range []struct {
		name   string
		modify func(t *testing.T, s *Spec)
		want   string
	}{{
		name:   "missing absolute command",
		modify: func(t *testing.T, s *Spec) { s.Command = "/no/such" },
		want:   `command "/no/such": no such file or directory`,
	}, {
		name:   "command not in PATH",
		modify: func(t *testing.T, s *Spec) { s.Command = "no-such-command-" + marker },
		want:   `command "no-such-command-` + marker + `": executable file not found in $PATH`,
	}, {
		name:   "not executable",
		modify: func(t *testing.T, s *Spec) { s.Command = notExec },
		want:   fmt.Sprintf("command %q: permission denied", notExec),
	}, {
		name:   "missing working directory",
		modify: func(t *testing.T, s *Spec) { s.Dir = "/no/such/dir" },
		want:   `working directory "/no/such/dir": no such file or directory`,
	}, {
		name: "working directory the user cannot enter",
		modify: func(t *testing.T, s *Spec) {
			if os.Geteuid() != 0 {
				testenv.Skip(t, testenv.Root, "needs root")
			}
			s.SetUser, s.UID, s.GID, s.Dir = true, 65534, 65534, private
		},
		want: fmt.Sprintf("working directory %q: permission denied", private),
	}, {
		name:   "cgroup that does not exist",
		modify: func(t *testing.T, s *Spec) { s.CgroupProcsFiles = []string{"/no/such/cgroup/cgroup.procs"} },
		want:   "join cgroup /no/such/cgroup: open /no/such/cgroup/cgroup.procs: no such file or directory",
	}, {
		name:   "supervisor executable missing",
		modify: func(t *testing.T, s *Spec) { s.Executable = "/no/such/plugin" },
		want:   "start supervisor /no/such/plugin: fork/exec /no/such/plugin: no such file or directory",
	}, {
		name:   "supervisor exits without reporting",
		modify: func(t *testing.T, s *Spec) { s.Executable = "/bin/true" },
		want:   "supervisor did not report the task running: supervisor exited without reporting",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSpec(t, "exit 0")
			tc.modify(t, &s)
			h, err := Start(s)
			if err == nil {
				h.Destroy()
				t.Fatal("Start succeeded")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not contain %q", err, tc.want)
			}
			if _, err := os.Stat(s.StateDir); !os.IsNotExist(err) {
				t.Errorf("state dir left behind: %v", err)
			}
			assertNoMarkedProcs(t)
		})
	}
}

func TestLookupUser(t *testing.T) {
	_, _, _, _, err := LookupUser("nobodyx")
	if err == nil || err.Error() != `user "nobodyx" does not exist on this node` {
		t.Errorf("unknown user: %v", err)
	}
	uid, gid, groups, _, err := LookupUser("root")
	if err != nil || uid != 0 || gid != 0 || len(groups) == 0 {
		t.Errorf("root: %d %d %v %v", uid, gid, groups, err)
	}
	if uid, _, _, _, err := LookupUser("0"); err != nil || uid != 0 {
		t.Errorf("numeric 0: %d %v", uid, err)
	}
}

// TestRecover simulates a plugin restart: the original Handle is dropped
// and a new one is built from the state dir alone.
func TestRecover(t *testing.T) {
	t.Run("task still running", func(t *testing.T) {
		s := newSpec(t, gated("exit 3"))
		orig := start(t, s)
		taskPID, supPID, startedAt := orig.TaskPID(), orig.SupervisorPID(), orig.StartedAt()
		orig = nil

		h, err := Recover(s.StateDir)
		if err != nil {
			t.Fatal(err)
		}
		if h.TaskPID() != taskPID || h.SupervisorPID() != supPID || !h.StartedAt().Equal(startedAt) {
			t.Errorf("recovered %d/%d/%v, want %d/%d/%v", h.TaskPID(), h.SupervisorPID(), h.StartedAt(), taskPID, supPID, startedAt)
		}
		if !h.Running() {
			t.Error("recovered handle not running")
		}
		if got := h.Spec(); got.Command != s.Command || got.TaskID != s.TaskID {
			t.Errorf("spec %+v", got)
		}
		openGate(t, s)
		if st := wait(t, h); st.ExitCode != 3 || st.Err != "" {
			t.Fatalf("got %+v", st)
		}
	})
	t.Run("task exited while nobody watched", func(t *testing.T) {
		s := newSpec(t, "exit 5")
		orig := start(t, s)
		eventually(t, "exit.json", func() bool {
			_, ok, _ := readExit(s.StateDir)
			return ok
		})
		_ = orig
		h, err := Recover(s.StateDir)
		if err != nil {
			t.Fatal(err)
		}
		if st := wait(t, h); st.ExitCode != 5 || st.Err != "" {
			t.Fatalf("got %+v", st)
		}
		if h.Running() {
			t.Error("Running after exit")
		}
		// Signalling an exited task is not an error (StopTask must succeed).
		if err := h.Signal(syscall.SIGTERM); err != nil {
			t.Error(err)
		}
	})
	t.Run("no state", func(t *testing.T) {
		if _, err := Recover(filepath.Join(t.TempDir(), "missing")); err == nil {
			t.Fatal("Recover of a missing dir succeeded")
		}
	})
}

// TestSurvivesStarterDeath starts the supervisor from a helper process that
// exits at once, as a crashing plugin would; the task must keep running and
// its exit code must still be collected by a stranger (not the parent).
func TestSurvivesStarterDeath(t *testing.T) {
	s := newSpec(t, gated("exit 9"))
	specPath := filepath.Join(t.TempDir(), "spec.json")
	b, _ := json.Marshal(s)
	os.WriteFile(specPath, b, 0o600)
	out, err := exec.Command(testExecutable(t), "start-helper", specPath).CombinedOutput()
	if err != nil {
		t.Fatalf("helper: %v: %s", err, out)
	}
	h, err := Recover(s.StateDir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Destroy() })
	if want := strings.TrimSpace(string(out)); strconv.Itoa(h.TaskPID()) != want {
		t.Fatalf("task pid %d, helper said %s", h.TaskPID(), want)
	}
	st, err := procfs.ReadStat(h.SupervisorPID())
	if err != nil {
		t.Fatal(err)
	}
	if st.PPID == os.Getpid() {
		t.Fatal("supervisor is our child; the test proves nothing")
	}
	if !h.Running() {
		t.Fatal("task not running after its starter died")
	}
	openGate(t, s)
	if st := wait(t, h); st.ExitCode != 9 || st.Err != "" {
		t.Fatalf("got %+v", st)
	}
}

func TestSupervisorIgnoresSignals(t *testing.T) {
	s := newSpec(t, gated("exit 6"))
	h := start(t, s)
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGPIPE} {
		if err := syscall.Kill(h.SupervisorPID(), sig); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "supervisor to log 4 ignored signals", func() bool {
		b, _ := os.ReadFile(filepath.Join(s.StateDir, logFile))
		return bytes.Count(b, []byte("ignoring signal")) == 4
	})
	openGate(t, s)
	if st := wait(t, h); st.ExitCode != 6 || st.Err != "" {
		t.Fatalf("got %+v", st)
	}
}

func TestSignal(t *testing.T) {
	s := newSpec(t, `trap 'exit 42' USR1; touch "$READY"; while :; do sleep 0.02; done`)
	h := start(t, s)
	eventually(t, "trap installed", func() bool { _, err := os.Stat(readyPath(s)); return err == nil })
	if err := h.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	if st := wait(t, h); st.ExitCode != 42 {
		t.Fatalf("got %+v", st)
	}
	if err := h.Signal(syscall.SIGUSR1); err != nil {
		t.Errorf("signal after exit: %v", err)
	}
}

func TestSupervisorLost(t *testing.T) {
	s := newSpec(t, gated("exit 0"))
	h := start(t, s)
	if err := syscall.Kill(h.SupervisorPID(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// The orphaned task is still running: Wait must not report it ended.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	_, err := h.Wait(ctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait returned while the orphaned task runs: %v", err)
	}
	if err := h.KillTree(context.Background(), 0, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	st := wait(t, h)
	if st.ExitCode != -1 || !strings.Contains(st.Err, "supervisor lost") || !strings.Contains(st.Err, "exit status unknown") {
		t.Fatalf("got %+v", st)
	}
	// A fresh plugin sees the same.
	h2, err := Recover(s.StateDir)
	if err != nil {
		t.Fatal(err)
	}
	if st := wait(t, h2); !strings.Contains(st.Err, "supervisor lost") {
		t.Fatalf("recovered: %+v", st)
	}
}

// testCgroup creates a cgroup v1 pids cgroup for one test, or skips.
func testCgroup(t *testing.T) string {
	t.Helper()
	const root = "/sys/fs/cgroup/pids"
	if _, err := os.Stat(filepath.Join(root, "cgroup.procs")); err != nil {
		testenv.Skip(t, testenv.Cgroups, "no cgroup v1 pids hierarchy")
	}
	dir := filepath.Join(root, "nomad-gpu-test-"+randHex(4))
	if err := os.Mkdir(dir, 0o755); err != nil {
		testenv.Skipf(t, testenv.Cgroups, "cannot create a cgroup: %v", err)
	}
	t.Cleanup(func() {
		deadline := time.Now().Add(10 * time.Second)
		for {
			pids, _ := cgroupMembers(filepath.Join(dir, "cgroup.procs"))
			for _, p := range pids {
				syscall.Kill(p, syscall.SIGKILL)
			}
			err := syscall.Rmdir(dir)
			if err == nil || os.IsNotExist(err) {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("remove cgroup %s: %v", dir, err)
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	return dir
}

func TestKillTree(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cgroup bool
		script string
	}{{
		name:   "main ignores SIGTERM",
		script: `trap '' TERM; sleep 1000 & touch "$READY"; while :; do sleep 0.02; done`,
	}, {
		name:   "grandchild escaped with setsid, cgroup",
		cgroup: true,
		script: `trap '' TERM; setsid sh -c 'trap "" TERM; sleep 1000' & touch "$READY"; while :; do sleep 0.02; done`,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSpec(t, tc.script)
			var cg string
			if tc.cgroup {
				cg = testCgroup(t)
				s.CgroupProcsFiles = []string{filepath.Join(cg, "cgroup.procs")}
			}
			h := start(t, s)
			eventually(t, "task ready", func() bool { _, err := os.Stat(readyPath(s)); return err == nil })
			if tc.cgroup {
				b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", h.TaskPID()))
				if !strings.Contains(string(b), filepath.Base(cg)) {
					t.Fatalf("task not in its cgroup: %s", b)
				}
				b, _ = os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", h.SupervisorPID()))
				if strings.Contains(string(b), filepath.Base(cg)) {
					t.Fatalf("supervisor is in the task cgroup: %s", b)
				}
				eventually(t, "a process outside the task's session", func() bool {
					pids, _ := h.Pids()
					for _, p := range pids {
						if st, err := procfs.ReadStat(p); err == nil && st.Session != h.TaskPID() {
							return true
						}
					}
					return false
				})
			}
			pids, err := h.Pids()
			if err != nil || len(pids) < 2 {
				t.Fatalf("Pids: %v %v", pids, err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
			defer cancel()
			if err := h.KillTree(ctx, 200*time.Millisecond, syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			if st := wait(t, h); st.Signal != int(syscall.SIGKILL) {
				t.Errorf("main process: %+v, want killed by SIGKILL after grace", st)
			}
			if left, _ := h.Pids(); len(left) != 0 {
				t.Errorf("Pids after KillTree: %v", left)
			}
			assertNoMarkedProcs(t)
		})
	}
}

func TestDestroy(t *testing.T) {
	s := newSpec(t, `sleep 1000 & sleep 1000`)
	h, err := Start(s)
	if err != nil {
		t.Fatal(err)
	}
	var procs []procfs.Identity
	pids, _ := h.Pids()
	for _, p := range append(pids, h.SupervisorPID()) {
		id, _ := procfs.Identify(p)
		procs = append(procs, id)
	}
	if err := h.Destroy(); err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		if p.Alive() {
			t.Errorf("pid %d still alive after Destroy", p.PID)
		}
	}
	if _, err := os.Stat(s.StateDir); !os.IsNotExist(err) {
		t.Errorf("state dir after Destroy: %v", err)
	}
	if err := h.Destroy(); err != nil {
		t.Errorf("second Destroy: %v", err)
	}
	if st := wait(t, h); st.Signal != int(syscall.SIGKILL) {
		t.Errorf("Wait after Destroy: %+v", st)
	}
	assertNoMarkedProcs(t)
}

func TestStartStopCycles(t *testing.T) {
	n := 50
	if testing.Short() {
		n = 5
	}
	base := newSpec(t, `sleep 1000 & wait`)
	for i := range n {
		s := base
		s.StateDir = filepath.Join(filepath.Dir(base.StateDir), fmt.Sprintf("%s-%d", marker, i))
		h, err := Start(s)
		if err != nil {
			t.Fatalf("cycle %d: %v", i, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		if err := h.KillTree(ctx, 2*time.Second, syscall.SIGTERM); err != nil {
			t.Fatalf("cycle %d: KillTree: %v", i, err)
		}
		if _, err := h.Wait(ctx); err != nil {
			t.Fatalf("cycle %d: Wait: %v", i, err)
		}
		cancel()
		if err := h.Destroy(); err != nil {
			t.Fatalf("cycle %d: Destroy: %v", i, err)
		}
	}
	assertNoMarkedProcs(t)
}

// BenchmarkSupervisorRSS measures what an idle supervisor holds: one op
// starts a supervisor on a gated task and reads its /proc status. VmRSS
// counts the binary's text, shared with the plugin and every other
// supervisor; RssAnon is what each supervisor really costs. The supervisor
// is this test binary (bigger than the real one, much bigger under -race).
//
//	go test -run '^$' -bench SupervisorRSS ./driver/supervisor/
func BenchmarkSupervisorRSS(b *testing.B) {
	var rss, anon, threads float64
	n := 0
	for b.Loop() {
		s := newSpec(b, gated("exit 0"))
		h := start(b, s)
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", h.SupervisorPID()))
		if err != nil {
			b.Fatal(err)
		}
		for _, l := range strings.Split(string(st), "\n") {
			f := strings.Fields(l)
			if len(f) < 2 {
				continue
			}
			v, _ := strconv.ParseFloat(f[1], 64)
			switch f[0] {
			case "VmRSS:":
				rss += v
			case "RssAnon:":
				anon += v
			case "Threads:":
				threads += v
			}
		}
		openGate(b, s)
		wait(b, h)
		n++
	}
	b.ReportMetric(rss/float64(n), "vmrss_kib")
	b.ReportMetric(anon/float64(n), "rss_anon_kib")
	b.ReportMetric(threads/float64(n), "threads")
}

func TestPollGoneFallback(t *testing.T) {
	cmd := exec.Command("/bin/sh", "-c", "read x")
	w, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	id, err := procfs.Identify(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	if err := pollGone(ctx, id); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("pollGone on a live process: %v", err)
	}
	cancel()
	w.Close()
	// Not reaped yet: a zombie must count as gone.
	ctx, cancel = context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := pollGone(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := waitGone(ctx, id); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	short, cancelShort := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancelShort()
	self := mustIdentify(t, os.Getpid())
	if err := waitGone(short, self); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("waitGone on a live process: %v", err)
	}
	// A wrong start time means another process: gone at once; so does
	// another boot's record of the very same pid and start time.
	for _, other := range []procfs.Identity{{PID: self.PID, StartTicks: self.StartTicks + 1, BootID: self.BootID}, {PID: self.PID, StartTicks: self.StartTicks, BootID: "another-boot"}} {
		if err := waitGone(ctx, other); err != nil {
			t.Fatal(err)
		}
	}
}

// TestOrphansReaped: a daemonised grandchild is re-parented to the
// supervisor (child subreaper), which reaps it so no zombie is left.
func TestOrphansReaped(t *testing.T) {
	s := newSpec(t, `sh -c 'sleep 1000 &'; touch "$READY"; `+gated("exit 0"))
	h := start(t, s)
	eventually(t, "task ready", func() bool { _, err := os.Stat(readyPath(s)); return err == nil })
	var orphan int
	eventually(t, "orphan re-parented to the supervisor", func() bool {
		pids, _ := h.Pids()
		for _, p := range pids {
			if st, err := procfs.ReadStat(p); err == nil && st.PPID == h.SupervisorPID() && p != h.TaskPID() {
				orphan = p
				return true
			}
		}
		return false
	})
	if err := syscall.Kill(orphan, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	eventually(t, "orphan reaped", func() bool {
		_, err := os.Stat(fmt.Sprintf("/proc/%d", orphan))
		return os.IsNotExist(err)
	})
	openGate(t, s)
	if st := wait(t, h); st.ExitCode != 0 {
		t.Fatalf("got %+v", st)
	}
}

func mustIdentify(t *testing.T, pid int) procfs.Identity {
	t.Helper()
	id, err := procfs.Identify(pid)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// The log directory is writable by tasks: a link planted in place of the FIFO
// must not make the root supervisor write where it points.
func TestLogSinkRefusesLinksAndFiles(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "target")
	if err := os.WriteFile(target, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.fifo")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{link, target, filepath.Join(dir, "missing.fifo")} {
		f, err := openLogSink(p, time.Now().Add(time.Second))
		if err == nil {
			f.Close()
			t.Errorf("%s accepted as a log sink", p)
		}
	}
	if b, _ := os.ReadFile(target); string(b) != "keep" {
		t.Fatalf("target changed: %q", b)
	}
}
