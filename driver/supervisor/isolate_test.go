package supervisor

import (
	"bytes"
	"context"
	"fmt"
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
	// READY is written before the shell execs sleep: under load the
	// session could list the shell still (a flake once).
	eventually(t, "task runs sleep", func() bool {
		comm, _ := os.ReadFile("/proc/" + strconv.Itoa(h.TaskPID()) + "/comm")
		return strings.TrimSpace(string(comm)) == "sleep"
	})
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

// A command Landlock will not let the task execute fails the start with an
// error that says Landlock refused it, names the file (the command, or the
// interpreter it needs) and the config that allows it; a plain permission
// problem under Landlock is not blamed on it.
func TestLandlockRefusalSaysSo(t *testing.T) {
	requireIsolation(t, true)
	hidden, allowed := t.TempDir(), t.TempDir()
	write := func(path, content string, mode os.FileMode) string {
		if err := os.WriteFile(path, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		return path
	}
	sh, err := os.ReadFile("/bin/sh")
	if err != nil {
		t.Fatal(err)
	}
	hiddenCmd := write(filepath.Join(hidden, "run"), "#!/bin/sh\nexit 0\n", 0o755)
	hiddenInterp := write(filepath.Join(hidden, "sh"), string(sh), 0o755)
	needsHidden := write(filepath.Join(allowed, "run"), "#!"+hiddenInterp+"\nexit 0\n", 0o755)
	// Executable by its owner, root, alone: lookPath passes it, and exec
	// as nobody is refused by the file's mode, not by Landlock.
	ownerOnly := write(filepath.Join(allowed, "root-only"), "#!/bin/sh\nexit 0\n", 0o744)
	// The task runs as nobody: the file modes let it reach and execute
	// everything but ownerOnly, so any other refusal is Landlock's.
	for _, d := range []string{hidden, allowed, filepath.Dir(allowed)} {
		os.Chmod(d, 0o755)
	}
	const how = ` in the plugin config's isolation.unveil_paths, or in the task's config.unveil where the plugin config sets isolation.unveil_by_task = true`
	for _, tc := range []struct {
		name, command, want string
	}{
		{"command not unveiled", hiddenCmd, fmt.Sprintf(`command %q: permission denied: Landlock refused it: no unveil rule lets the task read and execute %s; allow it with "rx:%s"`, hiddenCmd, hiddenCmd, hidden) + how},
		{"interpreter not unveiled", needsHidden, fmt.Sprintf(`command %q: permission denied: Landlock refused it: no unveil rule lets the task read and execute %s; allow it with "rx:%s"`, needsHidden, hiddenInterp, hidden)},
		{"not executable by the task's user", ownerOnly, fmt.Sprintf("command %q: permission denied", ownerOnly)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSpec(t, "")
			s.Command, s.Args = tc.command, nil
			s.SetUser, s.UID, s.GID = true, 65534, 65534
			for _, d := range []string{s.Dir, filepath.Dir(s.Dir)} {
				os.Chmod(d, 0o755)
			}
			s.Isolation.LandlockOn = true
			s.Isolation.Landlock = append(systemRules(s.Dir), landlock.Rule{Path: allowed, Access: landlock.Read | landlock.Exec})
			h, err := Start(s)
			if err == nil {
				h.Destroy()
				t.Fatal("Start succeeded")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q\nwant %q", err, tc.want)
			}
			if tc.command == ownerOnly && strings.Contains(err.Error(), "Landlock refused") {
				t.Fatalf("error %q blames Landlock for a file mode", err)
			}
		})
	}
}
