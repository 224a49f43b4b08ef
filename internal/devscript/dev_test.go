package devscript

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// repoRoot is the repository's root, two levels above this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// The stand-ins record what they were asked and which signals reached them
// in $FAKE_LOG, one line each.
const fakeNomad = `#!/usr/bin/env bash
case "$1" in
version) echo "Nomad v0.0.0-fake" ;;
agent)
  trap 'echo "agent got INT" >>"$FAKE_LOG"; exit 1' INT
  echo "agent $$ $*" >>"$FAKE_LOG"
  while :; do sleep 0.05; done ;;
*) echo "nomad $*" >>"$FAKE_LOG" ;;
esac
`

const fakeController = `#!/usr/bin/env bash
trap 'echo "controller got TERM" >>"$FAKE_LOG"; exit 0' TERM
echo "controller $$ $*" >>"$FAKE_LOG"
while :; do sleep 0.05; done
`

// devTree is a copy of what make dev needs from the repository (the
// makefile, the script, the node pools) with stand-ins for the built
// binaries and nomad; it returns the tree's root and the stand-ins' log.
func devTree(t *testing.T) (root, log string) {
	t.Helper()
	src := repoRoot(t)
	root = t.TempDir()
	// Tasks of a dev agent run as nobody: the script refuses a tree they
	// cannot pass through. The test's own two levels of temporary
	// directory are made passable; what is above them is not the test's
	// to change.
	own := map[string]bool{root: true, filepath.Dir(root): true}
	for d := root; d != "/" && d != "."; d = filepath.Dir(d) {
		st, err := os.Stat(d)
		if err != nil || st.Mode().Perm()&0o001 != 0 {
			continue
		}
		if !own[d] {
			t.Skipf("%s is not passable by others (internal/devscript/dev.sh refuses that); set TMPDIR to a directory that is", d)
		}
		if err := os.Chmod(d, st.Mode().Perm()|0o011); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{
		"GNUmakefile":               "",
		"internal/devscript/dev.sh": "",
		"jobs/pools/training.hcl":   "",
		"jobs/pools/inference.hcl":  "",
		"jobs/pools/hpc.hcl":        "",
	}
	for rel := range files {
		b, err := os.ReadFile(filepath.Join(src, rel))
		if err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(root, rel), string(b), 0o755)
	}
	write(t, filepath.Join(root, "bin/plugins/nomad-device-gpu"), "#!/bin/sh\n", 0o755)
	write(t, filepath.Join(root, "bin/nomad-gpu"), fakeController, 0o755)
	write(t, filepath.Join(root, "fake/nomad"), fakeNomad, 0o755)
	return root, filepath.Join(root, "fake.log")
}

func write(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}

// startDev runs `make dev` in root (build taken as done) with env added
// to the environment and makeArgs to make's command line, in a process
// group of its own, with SIGINT and SIGHUP not ignored even where this
// test's were (as in a terminal).
func startDev(t *testing.T, root, log string, env []string, makeArgs ...string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make on PATH")
	}
	if exec.Command("env", "--default-signal=INT", "true").Run() != nil {
		t.Skip("env has no --default-signal (coreutils 8.31 or later)")
	}
	cmd := exec.Command("env", append([]string{"--default-signal=INT,HUP,TERM", "make", "-o", "build", "dev"}, makeArgs...)...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "NOMAD_BINARY="+filepath.Join(root, "fake/nomad"), "FAKE_LOG="+log)
	cmd.Env = append(cmd.Env, env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Whatever a failed test left: this group, and the agent's own.
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		if pid := agentPid(log); pid > 0 {
			syscall.Kill(-pid, syscall.SIGKILL)
		}
	})
	return cmd, &out
}

// waitExit waits for make dev to end, 20 seconds at most.
func waitExit(t *testing.T, cmd *exec.Cmd, out *bytes.Buffer) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(20 * time.Second):
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		t.Fatalf("make dev still ran 20s on; it said:\n%s", out)
		return nil
	}
}

// agentPid is the stand-in agent's pid from the log, or 0.
func agentPid(log string) int {
	b, _ := os.ReadFile(log)
	for _, l := range strings.Split(string(b), "\n") {
		var pid int
		if _, err := fmt.Sscanf(l, "agent %d", &pid); err == nil {
			return pid
		}
	}
	return 0
}

// waitLog waits until the log has every line that contains one of want.
func waitLog(t *testing.T, log string, out *bytes.Buffer, want ...string) string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		b, _ := os.ReadFile(log)
		missing := ""
		for _, w := range want {
			if !strings.Contains(string(b), w) {
				missing = w
				break
			}
		}
		if missing == "" {
			return string(b)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q in the stand-ins' log:\n%s\nmake dev said:\n%s", missing, b, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A signal to make itself, not to its process group, stops the agent
// (one SIGINT, so it cleans up), the controller and every helper the
// script started, and make ends. make forwards SIGTERM to its command but
// not SIGINT or SIGHUP.
func TestSignalToMakeStopsEverything(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP} {
		t.Run(sig.String(), func(t *testing.T) {
			root, log := devTree(t)
			cmd, out := startDev(t, root, log, nil)
			waitLog(t, log, out, "agent ", "controller ", "pool apply", "hpc.hcl", "inference.hcl", "training.hcl")
			agent := agentPid(log)
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			waitExit(t, cmd, out)
			got := waitLog(t, log, out, "agent got INT", "controller got TERM")
			if n := strings.Count(got, "agent got INT"); n != 1 {
				t.Errorf("the agent got %d SIGINTs, want 1 (a second one kills it mid-cleanup)", n)
			}
			// Nothing is left of either process group: the script's
			// helpers and the controller in make's, the agent in its own.
			deadline := time.Now().Add(5 * time.Second)
			for _, pg := range []int{cmd.Process.Pid, agent} {
				for syscall.Kill(-pg, 0) == nil {
					if time.Now().After(deadline) {
						ps, _ := exec.Command("ps", "-o", "pid,pgid,cmd", "-g", fmt.Sprint(pg)).CombinedOutput()
						t.Fatalf("processes of group %d outlive make dev:\n%s", pg, ps)
					}
					time.Sleep(50 * time.Millisecond)
				}
			}
		})
	}
}

// The ports and the node pool come from make's variables (or the
// environment); the agent config has the server's preemption and the
// client's pool, and the controller serves metrics on its port.
func TestPortsPoolAndPreemption(t *testing.T) {
	root, log := devTree(t)
	cmd, out := startDev(t, root, log, []string{"DEV_RPC_PORT=15647", "DEV_SERF_PORT=15648", "DEV_CONTROLLER_METRICS_PORT=19405", "DEV_NODE_POOL=inference"})
	got := waitLog(t, log, out, "controller ", "training.hcl")
	cmd.Process.Signal(syscall.SIGTERM)
	cmd.Wait()
	cfg, err := os.ReadFile(filepath.Join(root, ".dev", "agent.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"rpc  = 15647", "serf = 15648",
		"batch_scheduler_enabled   = true", "service_scheduler_enabled = true",
		`node_pool        = "inference"`,
	} {
		if !strings.Contains(string(cfg), want) {
			t.Errorf("agent.hcl lacks %q:\n%s", want, cfg)
		}
	}
	for _, want := range []string{"-metrics-address 127.0.0.1:19405", "node pool apply -address=http://127.0.0.1:"} {
		if !strings.Contains(got, want) {
			t.Errorf("no %q in the stand-ins' log:\n%s", want, got)
		}
	}
}

// A make variable on the command line reaches the script.
func TestMakeVariableSetsPort(t *testing.T) {
	root, log := devTree(t)
	cmd, out := startDev(t, root, log, nil, "DEV_HTTP_PORT=15646")
	got := waitLog(t, log, out, "controller ")
	cmd.Process.Signal(syscall.SIGTERM)
	cmd.Wait()
	if !strings.Contains(got, "-address http://127.0.0.1:15646") {
		t.Errorf("the controller was not pointed at port 15646:\n%s", got)
	}
	cfg, _ := os.ReadFile(filepath.Join(root, ".dev", "agent.hcl"))
	if !strings.Contains(string(cfg), "http = 15646") {
		t.Errorf("agent.hcl lacks http = 15646:\n%s", cfg)
	}
	// Both plugins reach the agent on that port: the device plugin reads
	// the node's metadata (layouts, pins), the driver its allocations.
	if n := strings.Count(string(cfg), `address = "http://127.0.0.1:15646"`); n != 2 {
		t.Errorf("agent.hcl points %d plugins at port 15646, want 2:\n%s", n, cfg)
	}
}

// Bad settings are refused before anything starts, naming the variable
// and what is allowed.
func TestBadSettingsRefused(t *testing.T) {
	cases := []struct{ env, want string }{
		{"DEV_HTTP_PORT=http", `DEV_HTTP_PORT="http" is not a port; allowed: 1 to 65535`},
		{"DEV_SERF_PORT=70000", `DEV_SERF_PORT="70000" is not a port; allowed: 1 to 65535`},
		{"DEV_CONTROLLER_METRICS_PORT=4646", "must differ; they are 4646 4647 4648 4646"},
		{"DEV_NODE_POOL=gpu", `DEV_NODE_POOL="gpu" is no pool make dev defines; allowed: default `},
	}
	for _, c := range cases {
		t.Run(c.env, func(t *testing.T) {
			root, log := devTree(t)
			cmd, out := startDev(t, root, log, []string{c.env})
			err := waitExit(t, cmd, out)
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() == 0 {
				t.Errorf("make dev with %s: %v, want a non-zero exit", c.env, err)
			}
			if !strings.Contains(out.String(), c.want) {
				t.Errorf("make dev with %s said:\n%s\nwant %q", c.env, out, c.want)
			}
			if b, _ := os.ReadFile(log); len(b) > 0 {
				t.Errorf("something started:\n%s", b)
			}
		})
	}
}
