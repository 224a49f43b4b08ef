package supervisor

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nomad-gpu/nomad-gpu/driver/landlock"
	"github.com/nomad-gpu/nomad-gpu/internal/testenv"
)

func requireIsolation(t *testing.T, landlockToo bool) {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Skip(t, testenv.Root, "namespaces need root")
	}
	p := ProbeIsolation(context.Background(), testExecutable(t))
	if !p.PIDNamespace {
		testenv.Skipf(t, testenv.PIDNS, "no private PID namespaces here: %s", p.PIDNamespaceError)
	}
	if landlockToo && p.LandlockABI == 0 {
		testenv.Skipf(t, testenv.Landlock, "no Landlock here: %s", p.LandlockError)
	}
}

// runIsolated runs script in a private PID namespace and returns its
// stdout once it exits.
func runIsolated(t *testing.T, script string, modify func(*Spec)) (string, ExitStatus) {
	t.Helper()
	s := newSpec(t, script)
	s.Isolation.PrivatePID = true
	if modify != nil {
		modify(&s)
	}
	s.StdoutPath = filepath.Join(t.TempDir(), "stdout")
	s.StderrPath = filepath.Join(t.TempDir(), "stderr")
	outc, errc := fifoReader(t, s.StdoutPath), fifoReader(t, s.StderrPath)
	h := start(t, s)
	st := wait(t, h)
	out, errOut := <-outc, <-errc
	if errOut != "" {
		t.Logf("stderr: %s", errOut)
	}
	return out, st
}

func TestPrivatePIDNamespace(t *testing.T) {
	requireIsolation(t, false)
	self := strconv.Itoa(os.Getpid())
	cases := []struct {
		name, script string
		check        func(t *testing.T, out string)
	}{
		{"sees only its own processes", `for p in /proc/[0-9]*; do cat $p/comm; done`, func(t *testing.T, out string) {
			for _, comm := range strings.Fields(out) {
				switch comm {
				case "sh", "cat", filepath.Base(testExecutable(t))[:min(15, len(filepath.Base(testExecutable(t))))]:
				default:
					t.Errorf("task sees process %q outside its namespace", comm)
				}
			}
		}},
		{"cannot signal the host's processes", `kill -0 ` + self + ` 2>/dev/null && echo reached || echo refused`, func(t *testing.T, out string) {
			if strings.TrimSpace(out) != "refused" {
				t.Errorf("signal to host pid %s: %s", self, out)
			}
		}},
		{"cannot read the host's environ", `cat /proc/` + self + `/environ 2>/dev/null && echo read || echo refused`, func(t *testing.T, out string) {
			if strings.Contains(out, marker) || !strings.Contains(out, "refused") {
				t.Errorf("task read the test's environment: %q", out)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, st := runIsolated(t, tc.script, nil)
			if st.ExitCode != 0 {
				t.Fatalf("exit %+v", st)
			}
			tc.check(t, out)
		})
	}
}

// The plugin sees host pids, signals reach a task with default handlers
// (it is not its namespace's init), and the namespace dies with its init.
func TestPrivatePIDNamespaceFromOutside(t *testing.T) {
	requireIsolation(t, false)
	s := newSpec(t, `touch "$READY"; sleep 1000`)
	s.Isolation.PrivatePID = true
	h := start(t, s)
	eventually(t, "task ready", func() bool { _, err := os.Stat(readyPath(s)); return err == nil })
	cmd, _ := os.ReadFile("/proc/" + strconv.Itoa(h.TaskPID()) + "/cmdline")
	if !bytes.Contains(cmd, []byte("READY")) {
		t.Fatalf("task pid %d is not a host pid of the task: %q", h.TaskPID(), cmd)
	}
	if err := h.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if st := wait(t, h); st.Signal != int(syscall.SIGTERM) {
		t.Fatalf("got %+v, want killed by SIGTERM", st)
	}

	s2 := newSpec(t, `sleep 1000 & touch "$READY"; wait`)
	s2.Isolation.PrivatePID = true
	h2 := start(t, s2)
	eventually(t, "task ready", func() bool { _, err := os.Stat(readyPath(s2)); return err == nil })
	syscall.Kill(h2.SupervisorPID(), syscall.SIGKILL)
	if st := wait(t, h2); !strings.Contains(st.Err, "supervisor lost") {
		t.Fatalf("got %+v", st)
	}
	assertNoMarkedProcs(t)
}

func TestExecJoinsTheNamespace(t *testing.T) {
	requireIsolation(t, true)
	s := newSpec(t, `touch "$READY"; exec sleep 1000`)
	s.Isolation.PrivatePID = true
	s.Isolation.LandlockOn = true
	s.Isolation.Landlock = systemRules(s.Dir)
	h := start(t, s)
	eventually(t, "task ready", func() bool { _, err := os.Stat(readyPath(s)); return err == nil })
	out, err := exec.Command(testExecutable(t), "exec-shim", s.StateDir, "--", "/bin/sh", "-c", `for p in /proc/[0-9]*; do cat $p/comm; done; exit 3`).CombinedOutput()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 3 {
		t.Fatalf("exec: %v: %s", err, out)
	}
	if !strings.Contains(string(out), "sleep") {
		t.Errorf("exec does not see the task's processes: %s", out)
	}
	if strings.Count(string(out), "\n") > 8 {
		t.Errorf("exec sees more than the task's namespace: %s", out)
	}
	// An exec session has a Landlock domain of its own, and may still
	// signal the task: the namespace, not a signal scope, fences the task.
	out, err = exec.Command(testExecutable(t), "exec-shim", s.StateDir, "--", "/bin/sh", "-c",
		// The loop's status is its last test's, which depends on how the
		// pids sort: the kill's own status is what counts.
		`for p in /proc/[0-9]*; do if [ "$(cat $p/comm 2>/dev/null)" = sleep ]; then kill -TERM ${p#/proc/} || exit 1; fi; done`).CombinedOutput()
	// The task is the namespace's init: once it dies the kernel kills the
	// session too, which may happen before the session's shell exits.
	if ee, ok := err.(*exec.ExitError); err != nil && !(ok && ee.ProcessState.Sys().(syscall.WaitStatus).Signal() == syscall.SIGKILL) {
		t.Fatalf("exec kill: %v: %s", err, out)
	}
	if st := wait(t, h); st.Signal != int(syscall.SIGTERM) {
		t.Fatalf("task after exec's kill: %+v", st)
	}
}

// systemRules let a shell script run and use dir.
func systemRules(dir string) []landlock.Rule {
	return []landlock.Rule{
		{Path: "/usr", Access: landlock.Read | landlock.Exec},
		{Path: "/bin", Access: landlock.Read | landlock.Exec},
		{Path: "/lib", Access: landlock.Read | landlock.Exec},
		{Path: "/lib64", Access: landlock.Read | landlock.Exec},
		{Path: "/etc", Access: landlock.Read},
		{Path: "/proc", Access: landlock.Read},
		{Path: "/dev/null", Access: landlock.Read | landlock.Write},
		{Path: dir, Access: landlock.Read | landlock.Write},
	}
}

func TestMaskKeepsOnlyNamedEntries(t *testing.T) {
	requireIsolation(t, false)
	root := t.TempDir()
	for _, d := range []string{"GPU-a", "GPU-b"} {
		os.MkdirAll(filepath.Join(root, d), 0o755)
		os.WriteFile(filepath.Join(root, d, "control"), []byte(d), 0o644)
	}
	out, st := runIsolated(t, `ls `+root+`; cat `+root+`/GPU-a/control; echo; cat `+root+`/GPU-b/control 2>/dev/null || echo hidden`,
		func(s *Spec) { s.Isolation.Masks = []Mask{{Dir: root, Keep: []string{"GPU-a"}}} })
	if st.ExitCode != 0 {
		t.Fatalf("exit %+v", st)
	}
	if want := "GPU-a\nGPU-a\nhidden\n"; out != want {
		t.Errorf("got %q, want %q", out, want)
	}
	if _, err := os.Stat(filepath.Join(root, "GPU-b", "control")); err != nil {
		t.Errorf("the host lost what the task's mask hid: %v", err)
	}
}

func TestLandlockConfinesTheTask(t *testing.T) {
	requireIsolation(t, true)
	allowed, denied := t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(allowed, "ok"), []byte("ok"), 0o644)
	os.WriteFile(filepath.Join(denied, "secret"), []byte("secret"), 0o644)
	out, st := runIsolated(t, `cat `+allowed+`/ok; echo; cat `+denied+`/secret 2>/dev/null || echo denied; ls `+denied+` 2>/dev/null || echo unlistable`,
		func(s *Spec) {
			s.Dir = allowed
			s.Isolation.LandlockOn = true
			s.Isolation.Landlock = systemRules(allowed)
		})
	if st.ExitCode != 0 {
		t.Fatalf("exit %+v", st)
	}
	if want := "ok\ndenied\nunlistable\n"; out != want {
		t.Errorf("got %q, want %q", out, want)
	}
}

func TestProbe(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Skip(t, testenv.Root, "needs root")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p := ProbeIsolation(ctx, testExecutable(t))
	abi, lerr := landlock.Status()
	if p.LandlockABI != abi || (lerr == nil) != (p.LandlockError == "") {
		t.Errorf("probe says Landlock ABI %d (%q), Status says %d (%v)", p.LandlockABI, p.LandlockError, abi, lerr)
	}
	if !p.PIDNamespace && p.PIDNamespaceError == "" {
		t.Error("probe says no PID namespace without saying why")
	}
}
