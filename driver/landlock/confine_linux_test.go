package landlock

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// The test binary plays four more parts, chosen by this variable: the shim
// (confine the thread, then exec the probe, as the real shim does), the
// confined probe, a no-op program the probe tries to exec, and an unconfined
// process of the probe's own user for it to signal.
const roleEnv = "NOMAD_GPU_LANDLOCK_TEST_ROLE"

// childConfig travels to the shim and the probe in configEnv.
const configEnv = "NOMAD_GPU_LANDLOCK_TEST_CONFIG"

type childConfig struct {
	Root     string // the tree the rules are about
	Rules    []Rule
	Probe    string // the probe binary, under Root/bin
	Abstract string // an abstract unix socket the parent listens on
	TCP      string // a TCP address the parent listens on
	Devices  bool   // the parent made Root/rw/nulldev
	Outside  int    // pid of an unconfined process of the probe's user
	Scope    bool   // scope signals
}

// shimReport is the shim's line on stdout, before it execs the probe.
type shimReport struct {
	Error   string   `json:",omitempty"`
	Skipped []string `json:",omitempty"`
	// The confined thread is denied; the process's other threads are not.
	SameThread, OtherThread string
}

func TestMain(m *testing.M) {
	switch os.Getenv(roleEnv) {
	case "shim":
		os.Exit(shimMain())
	case "probe":
		os.Exit(probeMain())
	case "noop":
		os.Exit(0)
	case "sit":
		io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func loadConfig() childConfig {
	var c childConfig
	if err := json.Unmarshal([]byte(os.Getenv(configEnv)), &c); err != nil {
		fmt.Fprintln(os.Stderr, "bad test config:", err)
		os.Exit(2)
	}
	return c
}

func shimMain() int {
	c := loadConfig()
	runtime.LockOSThread()
	skipped, err := RestrictThread(c.Rules, Options{ScopeSignals: c.Scope})
	rep := shimReport{Skipped: skipped}
	if err != nil {
		rep.Error = err.Error()
		json.NewEncoder(os.Stdout).Encode(rep)
		return 3
	}
	secret := filepath.Join(c.Root, "none", "secret")
	rep.SameThread = result(readFile(secret))
	other := make(chan string)
	go func() {
		runtime.LockOSThread() // A thread of its own, not the confined one.
		other <- result(readFile(secret))
	}()
	rep.OtherThread = <-other
	json.NewEncoder(os.Stdout).Encode(rep)

	err = syscall.Exec(c.Probe, []string{c.Probe}, withRole("probe"))
	fmt.Fprintln(os.Stderr, "exec probe:", err)
	return 4
}

// probeMain runs confined and reports each check's outcome on stdout.
func probeMain() int {
	c := loadConfig()
	p := func(rel ...string) string { return filepath.Join(append([]string{c.Root}, rel...)...) }
	res := map[string]string{}
	check := func(name string, err error) { res[name] = result(err) }

	check("read ro/file", readFile(p("ro", "file")))
	check("read ro/sub/deep", readFile(p("ro", "sub", "deep")))
	check("list ro", listDir(p("ro")))
	check("create ro/new", writeFile(p("ro", "new"), os.O_CREATE))
	check("write ro/file", writeFile(p("ro", "file"), 0))
	check("mkdir ro/d", os.Mkdir(p("ro", "d"), 0o755))
	check("read none/secret", readFile(p("none", "secret")))
	check("list none", listDir(p("none")))
	check("list root", listDir(c.Root))
	check("read /etc/passwd", readFile("/etc/passwd"))

	check("create rw/new", writeFile(p("rw", "new"), os.O_CREATE|os.O_EXCL))
	check("read rw/existing", readFile(p("rw", "existing")))
	check("truncate rw/existing", writeFile(p("rw", "existing"), os.O_TRUNC))
	check("list rw", listDir(p("rw")))
	check("mkdir rw/d", os.Mkdir(p("rw", "d"), 0o755))
	check("symlink rw/sym", os.Symlink("existing", p("rw", "sym")))
	check("mkfifo rw/fifo", unix.Mkfifo(p("rw", "fifo"), 0o644))
	check("rename rw/new to rw/d/new", os.Rename(p("rw", "new"), p("rw", "d", "new")))
	check("remove rw/d/new", os.Remove(p("rw", "d", "new")))
	check("rmdir rw/d", os.Remove(p("rw", "d")))
	check("mknod rw/chr", unix.Mknod(p("rw", "chr"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
	check("rename rw/existing to ro/moved", os.Rename(p("rw", "existing"), p("ro", "moved")))

	check("create wo/new", writeFile(p("wo", "new"), os.O_CREATE))
	check("read wo/existing", readFile(p("wo", "existing")))
	check("list wo", listDir(p("wo")))

	check("read fo/allowed", readFile(p("fo", "allowed")))
	check("write fo/allowed", writeFile(p("fo", "allowed"), 0))
	check("read fo/other", readFile(p("fo", "other")))
	check("list fo", listDir(p("fo")))

	check("read link/file", readFile(p("link", "file")))
	check("read target/file", readFile(p("target", "file")))

	check("exec bin/probe", run(p("bin", "probe")))
	check("exec ro/probe", run(p("ro", "probe")))

	check("rw /dev/null", writeFile("/dev/null", 0))
	check("ioctl /dev/null", ioctl("/dev/null"))
	check("read /dev/zero", readFile("/dev/zero"))
	if c.Devices {
		check("rw rw/nulldev", writeFile(p("rw", "nulldev"), 0))
		check("ioctl rw/nulldev", ioctl(p("rw", "nulldev")))
	}

	nnp, err := unix.PrctlRetInt(unix.PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0)
	res["no_new_privs"] = strconv.Itoa(nnp)
	if err != nil {
		res["no_new_privs"] = result(err)
	}
	check("signal outside the domain", unix.Kill(c.Outside, 0))
	check("signal self", unix.Kill(os.Getpid(), 0))
	check("connect abstract unix", dial("unix", c.Abstract))
	check("connect tcp", dial("tcp", c.TCP))

	if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
		return 5
	}
	return 0
}

// withRole is our environment with the role replaced: an exec'd program
// reads the first of duplicate variables. Under the race detector, each child
// would otherwise sleep a second on exit.
func withRole(role string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, roleEnv+"=") && !strings.HasPrefix(kv, "GORACE=") {
			env = append(env, kv)
		}
	}
	return append(env, strings.TrimSpace("GORACE="+os.Getenv("GORACE")+" atexit_sleep_ms=0"), roleEnv+"="+role)
}

// result names an outcome the way the expectations do: "ok" or the errno.
func result(err error) string {
	if err == nil {
		return "ok"
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return unix.ErrnoName(errno)
	}
	return err.Error()
}

func readFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.Read(make([]byte, 1))
	if err == io.EOF {
		err = nil
	}
	return err
}

func writeFile(path string, flag int) error {
	f, err := os.OpenFile(path, os.O_WRONLY|flag, 0o666)
	if err != nil {
		return err
	}
	_, err = f.Write([]byte("x"))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func listDir(path string) error {
	_, err := os.ReadDir(path)
	return err
}

func run(path string) error {
	cmd := exec.Command(path)
	cmd.Env = withRole("noop")
	return cmd.Run()
}

// ioctl sends TCGETS, which the null device does not implement: ENOTTY
// means the ioctl reached the driver, EACCES that Landlock stopped it.
func ioctl(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err
}

func dial(network, addr string) error {
	c, err := net.Dial(network, addr)
	if err != nil {
		return err
	}
	return c.Close()
}

func TestRestrictThread(t *testing.T) {
	abi := requireLandlock(t)
	if os.Geteuid() != 0 {
		t.Run("self", func(t *testing.T) { testConfinement(t, abi, nil, true) })
		return
	}
	t.Run("root, signals scoped", func(t *testing.T) { testConfinement(t, abi, nil, true) })
	// Unprivileged, restrict_self refuses a thread without no_new_privs.
	t.Run("nobody, signals not scoped", func(t *testing.T) {
		testConfinement(t, abi, &syscall.Credential{Uid: 65534, Gid: 65534, NoSetGroups: true}, false)
	})
}

func testConfinement(t *testing.T, abi int, cred *syscall.Credential, scope bool) {
	root := t.TempDir()
	// The temp dir's parent is private to us; an unprivileged child must
	// at least traverse it, and every denial below must be Landlock's.
	if err := os.Chmod(filepath.Dir(root), 0o755); err != nil {
		t.Fatal(err)
	}
	p := func(rel ...string) string { return filepath.Join(append([]string{root}, rel...)...) }
	for _, d := range []string{"ro/sub", "rw", "wo", "fo", "none", "target", "bin"} {
		mkdir(t, root, d)
	}
	for _, f := range []string{"ro/file", "ro/sub/deep", "rw/existing", "wo/existing", "fo/allowed", "fo/other", "none/secret", "target/file"} {
		if err := os.WriteFile(p(f), []byte("data"), 0o666); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p(f), 0o666); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(p("target"), p("link")); err != nil {
		t.Fatal(err)
	}
	copyExecutable(t, p("bin", "probe"))
	// The same file at a path without the exec right.
	if err := os.Link(p("bin", "probe"), p("ro", "probe")); err != nil {
		t.Fatal(err)
	}
	devices := os.Geteuid() == 0
	if devices {
		if err := unix.Mknod(p("rw", "nulldev"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p("rw", "nulldev"), 0o666); err != nil {
			t.Fatal(err)
		}
	}

	abstract := listen(t, "unix", fmt.Sprintf("@nomad-gpu-landlock-test-%d-%s", os.Getpid(), filepath.Base(filepath.Dir(root))))
	tcp := listen(t, "tcp", "127.0.0.1:0")

	cfg := childConfig{
		Root:     root,
		Probe:    p("bin", "probe"),
		Abstract: abstract,
		TCP:      tcp,
		Devices:  devices,
		Scope:    scope,
		Rules: []Rule{
			{p("ro"), Read},
			{p("rw"), Read | Write},
			{p("wo"), Write},
			{p("bin"), Read | Exec},
			{p("fo", "allowed"), Read},
			{p("link"), Read},
			{p("missing"), Read | Write},
			{p("fo", "allowed", "beneath-a-file"), Read},
			{"/dev/null", Read | Write},
		},
	}
	// What a dynamically linked program needs to start (the race runtime
	// also reads /proc), where this system has it: skipped rules must be
	// only the test's own.
	for _, r := range []Rule{
		{"/usr/lib", Read | Exec}, {"/usr/lib64", Read | Exec}, {"/lib", Read | Exec}, {"/lib64", Read | Exec},
		{"/etc/ld.so.cache", Read}, {"/proc", Read},
	} {
		if _, err := os.Stat(r.Path); err == nil {
			cfg.Rules = append(cfg.Rules, r)
		}
	}
	cfg.Outside = startOutside(t, cfg.Probe, cred)
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(cfg.Probe)
	cmd.Env = append(withRole("shim"), configEnv+"="+string(b))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("shim and probe: %v\nstdout:\n%s\nstderr:\n%s", err, out, stderr.Bytes())
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	var shim shimReport
	var probe map[string]string
	if !sc.Scan() || json.Unmarshal(sc.Bytes(), &shim) != nil || !sc.Scan() || json.Unmarshal(sc.Bytes(), &probe) != nil {
		t.Fatalf("cannot parse the children's reports:\n%s\nstderr:\n%s", out, stderr.Bytes())
	}

	wantSkipped := []string{p("missing"), p("fo", "allowed", "beneath-a-file")}
	if fmt.Sprint(shim.Skipped) != fmt.Sprint(wantSkipped) {
		t.Errorf("skipped %q, want %q", shim.Skipped, wantSkipped)
	}
	if shim.SameThread != "EACCES" || shim.OtherThread != "ok" {
		t.Errorf("reading a denied file from the confined thread: %s, from another thread: %s; want EACCES and ok", shim.SameThread, shim.OtherThread)
	}

	// Rights the running ABI cannot enforce are allowed, whatever the rule.
	ifABI := func(min int, enforced, otherwise string) string {
		if abi >= min {
			return enforced
		}
		return otherwise
	}
	signal := "ok"
	if scope && abi >= 6 && signalScopeFixed() {
		signal = "EPERM"
	}
	want := map[string]string{
		"read ro/file":                   "ok",
		"read ro/sub/deep":               "ok",
		"list ro":                        "ok",
		"create ro/new":                  "EACCES",
		"write ro/file":                  "EACCES",
		"mkdir ro/d":                     "EACCES",
		"read none/secret":               "EACCES",
		"list none":                      "EACCES",
		"list root":                      "EACCES",
		"read /etc/passwd":               "EACCES",
		"create rw/new":                  "ok",
		"read rw/existing":               "ok",
		"truncate rw/existing":           "ok",
		"list rw":                        "ok",
		"mkdir rw/d":                     "ok",
		"symlink rw/sym":                 "ok",
		"mkfifo rw/fifo":                 "ok",
		"rename rw/new to rw/d/new":      ifABI(2, "ok", "EXDEV"),
		"remove rw/d/new":                ifABI(2, "ok", "ENOENT"),
		"rmdir rw/d":                     "ok",
		"mknod rw/chr":                   "EACCES",
		"rename rw/existing to ro/moved": "EACCES",
		"create wo/new":                  "ok",
		"read wo/existing":               "EACCES",
		"list wo":                        "EACCES",
		"read fo/allowed":                "ok",
		"write fo/allowed":               "EACCES",
		"read fo/other":                  "EACCES",
		"list fo":                        "EACCES",
		"read link/file":                 "ok",
		"read target/file":               "ok",
		"exec bin/probe":                 "ok",
		"exec ro/probe":                  "EACCES",
		"rw /dev/null":                   "ok",
		"ioctl /dev/null":                "ENOTTY",
		"read /dev/zero":                 "EACCES",
		"no_new_privs":                   "1",
		"signal outside the domain":      signal,
		"signal self":                    "ok",
		"connect abstract unix":          "ok",
		"connect tcp":                    "ok",
	}
	if devices {
		want["rw rw/nulldev"] = "ok"
		want["ioctl rw/nulldev"] = ifABI(5, "EACCES", "ENOTTY")
	}
	for name, w := range want {
		if got, ok := probe[name]; !ok {
			t.Errorf("%s: not reported", name)
		} else if got != w {
			t.Errorf("%s: %s, want %s", name, got, w)
		}
	}
	for name, got := range probe {
		if _, ok := want[name]; !ok {
			t.Errorf("%s: %s, not expected", name, got)
		}
	}
}

// mkdir makes rel under root, each directory open to all: every denial the
// probe meets must be Landlock's, not the file mode's.
func mkdir(t *testing.T, root, rel string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(root, rel), 0o777); err != nil {
		t.Fatal(err)
	}
	for d := rel; d != "."; d = filepath.Dir(d) {
		if err := os.Chmod(filepath.Join(root, d), 0o777); err != nil {
			t.Fatal(err)
		}
	}
}

// copyExecutable copies the test binary where an unprivileged child can
// run it and where the rules can name it.
func copyExecutable(t *testing.T, dst string) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.Open(self)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, src); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// startOutside starts a process that the probe may signal as far as user
// ids go, so that only the domain's signal scope can stop it.
func startOutside(t *testing.T, bin string, cred *syscall.Credential) int {
	t.Helper()
	cmd := exec.Command(bin)
	cmd.Env = withRole("sit")
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		cmd.Wait()
	})
	return cmd.Process.Pid
}

func listen(t *testing.T, network, addr string) string {
	t.Helper()
	l, err := net.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return l.Addr().String()
}
