package cgroups

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nomad-gpu/nomad-gpu/internal/testenv"
)

// Tests in this file use the real cgroup filesystem. They need root and a
// writable hierarchy, and skip with one line otherwise.

// The test binary doubles as a task shim: with helperEnv set it joins the
// group named by procsEnv through JoinSelf, as the driver's shim does, and
// then runs a shell command or allocates memory.
const (
	helperEnv = "NOMAD_GPU_CGROUPS_TEST_HELPER"
	procsEnv  = "NOMAD_GPU_CGROUPS_TEST_PROCS"
	cmdEnv    = "NOMAD_GPU_CGROUPS_TEST_CMD"
)

func TestMain(m *testing.M) {
	mode := os.Getenv(helperEnv)
	if mode == "" {
		os.Exit(m.Run())
	}
	if err := JoinSelf(strings.Split(os.Getenv(procsEnv), "\n")); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	switch mode {
	case "exec":
		err := syscall.Exec("/bin/sh", []string{"sh", "-c", os.Getenv(cmdEnv)}, os.Environ())
		fmt.Fprintln(os.Stderr, err)
		os.Exit(4)
	case "alloc":
		// Touch every page: an untouched allocation is never charged.
		b := make([]byte, 200<<20)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		runtime.KeepAlive(b)
		os.Exit(0)
	}
	os.Exit(5)
}

// kernelRoot skips unless this process can create cgroups, and returns a
// unique root name whose shared directories are removed when the test ends
// (after the groups' own cleanups, which run first).
func kernelRoot(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Skip(t, testenv.Root, "cgroups: kernel tests need root")
	}
	if v, desc := Describe(); v == None {
		testenv.Skip(t, testenv.Cgroups, "cgroups: no usable cgroups: "+desc)
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	root := "nomad-gpu-test-" + hex.EncodeToString(b)
	t.Cleanup(func() {
		l := probe()
		var dirs []string
		if l.version == V2 {
			dirs = []string{filepath.Join(fsRoot, root+".slice")}
		}
		for _, m := range l.mounts {
			if d := filepath.Join(m, root); !slices.Contains(dirs, d) {
				dirs = append(dirs, d)
			}
		}
		for _, d := range dirs {
			if err := removeTree(d); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		}
	})
	return root
}

func newGroup(t *testing.T, root, name string, limits Limits) *Group {
	t.Helper()
	g, err := Create(root, name, limits)
	if errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EROFS) {
		testenv.Skip(t, testenv.Cgroups, "cgroups: cannot create groups here: ", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := g.Destroy(); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return g
}

type proc struct {
	pid  int
	done chan struct{} // closed once the process is reaped
	err  error         // cmd.Wait's result, valid after done
}

// start runs cmd and reaps it in the background, so that a killed process
// does not linger as a zombie of the test.
func start(t *testing.T, cmd *exec.Cmd) *proc {
	t.Helper()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{pid: cmd.Process.Pid, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			t.Errorf("process %d did not exit", p.pid)
		}
	})
	return p
}

// startJoined starts the test binary as a shim that joins g with JoinSelf
// and then runs shell (mode "exec") or allocates 200 MiB (mode "alloc").
func startJoined(t *testing.T, g *Group, mode, shell string) *proc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+mode, procsEnv+"="+strings.Join(g.ProcsFiles(), "\n"), cmdEnv+"="+shell)
	return start(t, cmd)
}

func (p *proc) wait(t *testing.T, d time.Duration) error {
	t.Helper()
	select {
	case <-p.done:
		return p.err
	case <-time.After(d):
		t.Fatalf("process %d still running after %s", p.pid, d)
		return nil
	}
}

// eventually polls cond for up to 10s.
func eventually(t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ok, err := cond()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after 10s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func signalled(err error, sig syscall.Signal) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == sig
}

func TestKernelLimits(t *testing.T) {
	root := kernelRoot(t)
	newGroup(t, root, "limits", Limits{})
	const unlimitedV1 = "9223372036854771712" // LONG_MAX rounded down to a page
	// The cases run in order against one group: each is a re-Create of the
	// same name, which must reuse the group and replace every limit.
	for _, tc := range []struct {
		name   string
		limits Limits
		v1, v2 map[string]string // file -> expected content; "<parent>" is the parent's value
	}{
		{"full", Limits{CPUShares: 500, MemoryLimitBytes: 64 << 20, MemorySoftBytes: 32 << 20, CpusetCpus: "0", PidsMax: 100},
			map[string]string{"cpu.shares": "500", "memory.limit_in_bytes": "67108864", "memory.soft_limit_in_bytes": "33554432", "memory.swappiness": "0", "cpuset.cpus": "0", "pids.max": "100"},
			map[string]string{"cpu.weight": "19", "memory.max": "67108864", "memory.low": "33554432", "cpuset.cpus": "0", "pids.max": "100"}},
		{"reused with no limits", Limits{},
			map[string]string{"cpu.shares": "1024", "memory.limit_in_bytes": unlimitedV1, "memory.soft_limit_in_bytes": unlimitedV1, "memory.swappiness": "60", "cpuset.cpus": "<parent>", "pids.max": "max"},
			map[string]string{"cpu.weight": "100", "memory.max": "max", "memory.low": "0", "cpuset.cpus": "", "pids.max": "max"}},
		{"shares clamped", Limits{CPUShares: 1, MemoryLimitBytes: 1 << 30},
			map[string]string{"cpu.shares": "2", "memory.limit_in_bytes": "1073741824"},
			map[string]string{"cpu.weight": "1", "memory.max": "1073741824"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := Create(root, "limits", tc.limits)
			if err != nil {
				t.Fatal(err)
			}
			want := tc.v1
			if g.Version() == V2 {
				want = tc.v2
			}
			for file, v := range want {
				ctrl := strings.Split(file, ".")[0]
				d := g.dir(ctrl)
				if d == "" {
					t.Logf("no %s controller, not checking %s", ctrl, file)
					continue
				}
				if v == "<parent>" {
					v = readT(t, filepath.Join(filepath.Dir(d), file))
				}
				if got := readT(t, filepath.Join(d, file)); got != v {
					t.Errorf("%s = %q, want %q", filepath.Join(d, file), got, v)
				}
			}
			o, err := Open(g.Paths())
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(o.Paths(), g.Paths()) || !slices.Equal(o.ProcsFiles(), g.ProcsFiles()) || o.Version() != g.Version() {
				t.Errorf("Open(Paths()) = %v %v, want %v %v", o.Version(), o.Paths(), g.Version(), g.Paths())
			}
		})
	}
}

func TestKernelJoinPidsStats(t *testing.T) {
	root := kernelRoot(t)
	g := newGroup(t, root, "stats", Limits{CPUShares: 512, MemoryLimitBytes: 256 << 20})

	// One member joins through JoinSelf and spins until the group is
	// destroyed, the other joins the way a shell shim would and sleeps.
	joined := startJoined(t, g, "exec", "while :; do :; done")
	args := append([]string{"-c", `for f in "$@"; do echo $$ > "$f" || exit 3; done; exec sleep 30`, "sh"}, g.ProcsFiles()...)
	shell := start(t, exec.Command("/bin/sh", args...))

	eventually(t, "both processes in Pids", func() (bool, error) {
		pids, err := g.Pids()
		return slices.Contains(pids, joined.pid) && slices.Contains(pids, shell.pid), err
	})
	o, err := Open(g.Paths())
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "Pids of the reopened group", func() (bool, error) {
		pids, err := o.Pids()
		return slices.Contains(pids, joined.pid), err
	})

	var s Stats
	eventually(t, "CPU time charged", func() (bool, error) {
		s, err = g.Stats()
		return s.CPUTotalNanos > 0 && s.CPUUserNanos > 0, err
	})
	t.Logf("stats: %+v", s)
	if s.MemoryUsage == 0 || s.MemoryRSS == 0 {
		t.Errorf("memory usage %d, rss %d; want non-zero for two running processes", s.MemoryUsage, s.MemoryRSS)
	}
	for _, m := range []string{MeasuredRSS, MeasuredCache, MeasuredUsage} {
		if !slices.Contains(s.Measured, m) {
			t.Errorf("Measured = %v, lacks %q", s.Measured, m)
		}
	}
	if killed, err := g.OOMKilled(); err != nil || killed {
		t.Errorf("OOMKilled() = %v, %v; want false", killed, err)
	}
}

func TestKernelOOMKilled(t *testing.T) {
	root := kernelRoot(t)
	g := newGroup(t, root, "oom", Limits{MemoryLimitBytes: 32 << 20})
	// With swap available the allocation would be swapped out instead of
	// killed; keep the test about the OOM path on hosts that have swap.
	if g.Version() == V1 {
		_ = writeFile(filepath.Join(g.dir("memory"), "memory.swappiness"), "0")
	} else {
		_ = writeFile(filepath.Join(g.dir("memory"), "memory.swap.max"), "0")
	}
	if killed, err := g.OOMKilled(); err != nil || killed {
		t.Fatalf("OOMKilled() before = %v, %v; want false", killed, err)
	}
	p := startJoined(t, g, "alloc", "")
	err := p.wait(t, 30*time.Second)
	if !signalled(err, syscall.SIGKILL) {
		t.Fatalf("allocating 200 MiB under a 32 MiB limit ended with %v, want SIGKILL", err)
	}
	killed, err := g.OOMKilled()
	if err != nil || !killed {
		t.Errorf("OOMKilled() = %v, %v; want true", killed, err)
	}
	s, err := g.Stats()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("after OOM: usage %d, max usage %d", s.MemoryUsage, s.MemoryMaxUsage)
}

func TestKernelKillAllForkingTree(t *testing.T) {
	root := kernelRoot(t)
	g := newGroup(t, root, "killall", Limits{PidsMax: 1000})
	// Keeps forking short-lived and long-lived children; the long-lived ones
	// are orphaned (re-parented outside the test) when their shell dies.
	p := startJoined(t, g, "exec", `while :; do sh -c 'sleep 300' & sh -c 'sleep 300 & exec sleep 0.01' ; done`)
	eventually(t, "a tree of processes", func() (bool, error) {
		pids, err := g.Pids()
		return len(pids) >= 10, err
	})

	t.Run("freeze", func(t *testing.T) {
		if err := g.Freeze(); errors.Is(err, ErrFreezerUnavailable) {
			t.Skip(err)
		} else if err != nil {
			t.Fatal(err)
		}
		file, state := filepath.Join(g.dir("freezer"), "freezer.state"), "FROZEN"
		if g.Version() == V2 {
			file, state = filepath.Join(g.paths[0], "cgroup.events"), "frozen 1"
		}
		if got := readT(t, file); !strings.Contains(got, state) {
			t.Errorf("%s = %q after Freeze, want %q", file, got, state)
		}
		if err := g.Thaw(); err != nil {
			t.Fatal(err)
		}
		if got := readT(t, file); strings.Contains(got, state) {
			t.Errorf("%s = %q after Thaw", file, got)
		}
	})

	before, _ := g.Pids()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := g.KillAll(ctx); err != nil {
		t.Fatal(err)
	}
	pids, err := g.Pids()
	if err != nil || len(pids) != 0 {
		t.Fatalf("after KillAll (%d processes before): Pids() = %v, %v; want none", len(before), pids, err)
	}
	if err := p.wait(t, 5*time.Second); !signalled(err, syscall.SIGKILL) {
		t.Errorf("shim ended with %v, want SIGKILL", err)
	}
	for _, pid := range before {
		if err := syscall.Kill(pid, 0); err == nil {
			if b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat"); !strings.Contains(string(b), ") Z ") {
				t.Errorf("pid %d (%s) survived KillAll", pid, strings.TrimSpace(string(b)))
			}
		}
	}
}

func TestKernelDestroy(t *testing.T) {
	root := kernelRoot(t)
	g, err := Create(root, "destroy", Limits{MemoryLimitBytes: 128 << 20})
	if errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EROFS) {
		testenv.Skip(t, testenv.Cgroups, "cgroups: cannot create groups here: ", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	paths := g.Paths()
	t.Cleanup(func() { _ = g.Destroy() })
	// A sub-group, as a task running as root might make, must not keep the
	// group's directory alive.
	sub := filepath.Join(g.dir("memory"), "inner")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	p := startJoined(t, g, "exec", `sh -c 'sleep 300' & exec sleep 300`)
	eventually(t, "process in group", func() (bool, error) {
		pids, err := g.Pids()
		return len(pids) >= 2, err
	})

	for i := range 2 { // idempotent
		if err := g.Destroy(); err != nil {
			t.Fatalf("Destroy #%d: %v", i+1, err)
		}
	}
	for _, d := range paths {
		if _, err := os.Stat(d); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s after Destroy: %v, want gone", d, err)
		}
	}
	if err := p.wait(t, 5*time.Second); !signalled(err, syscall.SIGKILL) {
		t.Errorf("member ended with %v, want SIGKILL", err)
	}
	if _, err := Open(paths); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Open after Destroy: %v, want ErrNotExist", err)
	}
	if pids, err := g.Pids(); err != nil || len(pids) != 0 {
		t.Errorf("Pids after Destroy = %v, %v", pids, err)
	}
}

func TestJoinSelfError(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "gone", "cgroup.procs")
	err := JoinSelf([]string{missing})
	if !errors.Is(err, fs.ErrNotExist) || err.Error() != "cgroups: write "+missing+": no such file or directory" {
		t.Errorf("JoinSelf(missing) = %v", err)
	}
}

func TestKernelCreateErrorNamesFile(t *testing.T) {
	root := kernelRoot(t)
	newGroup(t, root, "probe", Limits{}) // skips where groups cannot be made
	_, err := Create(root, "bad", Limits{CpusetCpus: "4095"})
	if err == nil || !strings.Contains(err.Error(), "cgroups: write ") || !strings.Contains(err.Error(), "/bad/cpuset.cpus: ") {
		t.Fatalf("Create with a CPU that does not exist: %v, want a write error naming cpuset.cpus", err)
	}
	t.Log(err)
	for _, d := range createdDirs(probe(), root, "bad") {
		if _, err := os.Stat(d); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("failed Create left %s behind (%v)", d, err)
		}
	}
}
