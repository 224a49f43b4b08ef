package mps

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nomad-gpu/nomad-gpu/driver/procfs"
	"github.com/nomad-gpu/nomad-gpu/gpu"
	"github.com/nomad-gpu/nomad-gpu/internal/testenv"
)

// Users the tests run tasks as; chowning to them needs root.
const (
	uidAlice = 64001
	uidBob   = 64002
)

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Skip(t, testenv.Root, "needs root: the pipe directory is given to the clients' user")
	}
}

func alice(task string) Client {
	return Client{TaskID: task, UID: uidAlice, User: "alice", Limits: Limits{25, 1024}}
}

func bob(task string) Client {
	return Client{TaskID: task, UID: uidBob, User: "bob", Limits: Limits{25, 1024}}
}

func envKeys(env []string) []string {
	var keys []string
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func TestControlEnv(t *testing.T) {
	tests := []struct {
		name        string
		path, ldLib *string
		visible     string
		want        []string
	}{
		{
			name: "daemon", path: ptr("/opt/bin:/usr/bin"), ldLib: ptr("/opt/nvidia/lib"), visible: gpuA,
			want: []string{"PATH=/opt/bin:/usr/bin", "HOME=/", "LD_LIBRARY_PATH=/opt/nvidia/lib",
				"CUDA_MPS_PIPE_DIRECTORY=/p/" + gpuA, "CUDA_MPS_LOG_DIRECTORY=/l/" + gpuA, "CUDA_VISIBLE_DEVICES=" + gpuA},
		},
		{
			name: "control command: no visible devices", path: ptr("/usr/bin"),
			want: []string{"PATH=/usr/bin", "HOME=/", "CUDA_MPS_PIPE_DIRECTORY=/p/" + gpuA, "CUDA_MPS_LOG_DIRECTORY=/l/" + gpuA},
		},
		{
			name: "plugin without PATH gets the safe default", ldLib: ptr(""), visible: gpuA,
			want: []string{"PATH=" + defaultPath, "HOME=/",
				"CUDA_MPS_PIPE_DIRECTORY=/p/" + gpuA, "CUDA_MPS_LOG_DIRECTORY=/l/" + gpuA, "CUDA_VISIBLE_DEVICES=" + gpuA},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			setOrUnset(t, "PATH", tc.path)
			setOrUnset(t, "LD_LIBRARY_PATH", tc.ldLib)
			// What the plugin's environment may carry, and the MPS
			// variables of a shell that uses MPS itself.
			for k, v := range map[string]string{
				"NOMAD_TOKEN": "n-secret", "VAULT_TOKEN": "v-secret", "CONSUL_HTTP_TOKEN": "c-secret",
				"AWS_SECRET_ACCESS_KEY": "a-secret", "HOME": "/root",
				"CUDA_MPS_PIPE_DIRECTORY": "/elsewhere", "CUDA_VISIBLE_DEVICES": "GPU-other", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "1",
			} {
				t.Setenv(k, v)
			}
			got := controlEnv("/p/"+gpuA, "/l/"+gpuA, tc.visible)
			if !slices.Equal(got, tc.want) {
				t.Errorf("controlEnv\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
}

func ptr(s string) *string { return &s }

func setOrUnset(t *testing.T, k string, v *string) {
	t.Helper()
	t.Setenv(k, "") // restores the old value when the test ends
	if v == nil {
		os.Unsetenv(k)
	} else {
		os.Setenv(k, *v)
	}
}

// A secret in the plugin's environment reaches neither the daemon nor any
// control command.
func TestSecretsNeverReachTheDaemon(t *testing.T) {
	secrets := map[string]string{
		"NOMAD_TOKEN": "nomad-s3cret", "VAULT_TOKEN": "vault-s3cret", "CONSUL_HTTP_TOKEN": "consul-s3cret",
	}
	for k, v := range secrets {
		t.Setenv(k, v)
	}
	t.Setenv("LD_LIBRARY_PATH", "/opt/nvidia/lib")
	root := testRoot(t)
	cfg := testConfig(t, root)
	m := newManager(t, cfg)
	if err := m.Acquire(context.Background(), gpuA, client("a", Limits{50, 1024})); err != nil {
		t.Fatal(err)
	}
	pipe := filepath.Join(cfg.PipeRoot, gpuA)
	pid := m.Status()[gpuA].PID
	procEnv, err := os.ReadFile("/proc/" + itoa(pid) + "/environ")
	if err != nil {
		t.Fatal(err)
	}
	allowed := []string{"CUDA_MPS_LOG_DIRECTORY", "CUDA_MPS_PIPE_DIRECTORY", "CUDA_VISIBLE_DEVICES", "HOME", "LD_LIBRARY_PATH", "PATH",
		"PWD"} // PWD: the fake is a shell script, and dash exports it to the daemon it forks
	for _, src := range []struct{ name, env string }{
		{"daemon (/proc)", strings.ReplaceAll(string(procEnv), "\x00", "\n")},
		{"daemon (its dump)", readFile(t, filepath.Join(pipe, "fake-daemon.environ"))},
		{"control command", readFile(t, filepath.Join(pipe, "fake-client.environ"))},
	} {
		env := strings.Split(strings.TrimSpace(src.env), "\n")
		for _, kv := range env {
			for _, v := range secrets {
				if strings.Contains(kv, v) {
					t.Errorf("%s: secret in %q", src.name, kv)
				}
			}
		}
		for _, k := range envKeys(env) {
			if !slices.Contains(allowed, k) {
				t.Errorf("%s: %s is not on the allowlist", src.name, k)
			}
		}
		if !slices.Contains(env, "HOME=/") || !slices.Contains(env, "LD_LIBRARY_PATH=/opt/nvidia/lib") || !slices.Contains(env, "CUDA_MPS_PIPE_DIRECTORY="+pipe) {
			t.Errorf("%s: env %q lacks HOME=/, LD_LIBRARY_PATH or the pipe directory", src.name, env)
		}
	}
	if err := m.Release(gpuA, "a"); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func itoa(i int) string { return strconv.Itoa(i) }

func strconvUitoa(u uint64) string { return strconv.FormatUint(u, 10) }

func TestOneUserPerGPU(t *testing.T) {
	needRoot(t)
	type step struct {
		release  bool
		gpu      string // gpuA when empty
		client   Client
		conflict bool // want ErrUserConflict
		want     []string
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"a second user is refused while the first holds the GPU", []step{
			{client: alice("a1"), want: []string{"a1"}},
			{client: alice("a2"), want: []string{"a1", "a2"}},
			{client: bob("b1"), conflict: true, want: []string{"a1", "a2"}},
			{release: true, client: alice("a1"), want: []string{"a2"}},
			{client: bob("b1"), conflict: true, want: []string{"a2"}},
			{release: true, client: alice("a2")},
			{client: bob("b1"), want: []string{"b1"}},
			{client: alice("a3"), conflict: true, want: []string{"b1"}},
		}},
		{"other GPUs are other pools", []step{
			{client: alice("a1"), want: []string{"a1"}},
			{gpu: gpuB, client: bob("b1"), want: []string{"b1"}},
		}},
		{"re-acquire by the same task (recovery) keeps working", []step{
			{client: alice("a1"), want: []string{"a1"}},
			{client: alice("a1"), want: []string{"a1"}},
			{client: Client{TaskID: "a1", UID: uidAlice, User: "alice", Limits: Limits{50, 2048}}, want: []string{"a1"}},
		}},
		{"the only client may come back as another user", []step{
			{client: alice("x"), want: []string{"x"}},
			{client: Client{TaskID: "x", UID: uidBob, User: "bob"}, want: []string{"x"}},
			{client: alice("a1"), conflict: true, want: []string{"x"}},
			{client: bob("b1"), want: []string{"b1", "x"}},
		}},
		{"root is a user like any other", []step{
			{client: Client{TaskID: "r", UID: 0, User: "root"}, want: []string{"r"}},
			{client: alice("a1"), conflict: true, want: []string{"r"}},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := testRoot(t)
			m := newManager(t, testConfig(t, root))
			for i, s := range tc.steps {
				gpu := s.gpu
				if gpu == "" {
					gpu = gpuA
				}
				var err error
				if s.release {
					err = m.Release(gpu, s.client.TaskID)
				} else {
					err = m.Acquire(context.Background(), gpu, s.client)
				}
				if s.conflict != errors.Is(err, ErrUserConflict) || (!s.conflict && err != nil) {
					t.Fatalf("step %d (%s as %s): error %v, want conflict %v", i, s.client.TaskID, s.client.User, err, s.conflict)
				}
				if got := m.Clients(gpu); !slices.Equal(got, s.want) {
					t.Fatalf("step %d: clients %v, want %v", i, got, s.want)
				}
			}
			for _, task := range m.Tasks() {
				if err := m.ReleaseTask(task); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

func TestUserConflictError(t *testing.T) {
	needRoot(t)
	root := testRoot(t)
	m := newManager(t, testConfig(t, root))
	ctx := context.Background()
	for _, c := range []Client{alice("t-a1"), alice("t-a2")} {
		if err := m.Acquire(ctx, gpuA, c); err != nil {
			t.Fatal(err)
		}
	}
	pid := m.Status()[gpuA].PID
	err := m.Acquire(ctx, gpuA, bob("t-b1"))
	var ue *UserConflictError
	if !errors.As(err, &ue) || !errors.Is(err, ErrUserConflict) {
		t.Fatalf("error %v (%T); want a *UserConflictError wrapping ErrUserConflict", err, err)
	}
	want := `MPS on ` + gpuA + `: user "alice" (tasks t-a1, t-a2) holds this GPU's MPS server; MPS runs one user's clients at a time, ` +
		`so a task of user "bob" would hang in CUDA init until alice's tasks end. ` +
		`Run the tasks that share this GPU's MPS shares as one user (jobspec user), or give them separate GPUs`
	if err.Error() != want {
		t.Errorf("error\n%s\nwant\n%s", err, want)
	}
	if ue.GPU != gpuA || ue.HolderUID != uidAlice || !slices.Equal(ue.HolderTasks, []string{"t-a1", "t-a2"}) || ue.UID != uidBob || ue.TaskID != "t-b1" {
		t.Errorf("error fields %+v", ue)
	}
	// Refused at once: the daemon and its clients are untouched.
	if s := m.Status()[gpuA]; s.PID != pid || !s.Healthy || s.User != "alice" || !slices.Equal(s.Clients, []string{"t-a1", "t-a2"}) {
		t.Errorf("status after the refusal %+v", s)
	}
	for _, tc := range []struct {
		e    UserConflictError
		want []string
	}{
		{UserConflictError{GPU: gpuA, HolderUID: 1001, HolderTasks: []string{"x"}, UID: 1002},
			[]string{`uid 1001 (task x) holds`, `a task of uid 1002 would hang`, `until uid 1001's tasks end`}},
		{UserConflictError{GPU: gpuA, HolderUser: "a", HolderTasks: []string{"1", "2", "3", "4", "5"}, User: "b"},
			[]string{`user "a" (tasks 1, 2, 3 and 2 more) holds`}},
	} {
		for _, w := range tc.want {
			if !strings.Contains(tc.e.Error(), w) {
				t.Errorf("%q lacks %q", tc.e.Error(), w)
			}
		}
	}
}

func TestPipeDirectoryBelongsToTheClientsUser(t *testing.T) {
	needRoot(t)
	root := testRoot(t)
	cfg := testConfig(t, root)
	// An old driver made the root 0755: it is tightened.
	if err := os.MkdirAll(cfg.PipeRoot, 0o755); err != nil {
		t.Fatal(err)
	}
	m := newManager(t, cfg)
	ctx := context.Background()
	pipe := filepath.Join(cfg.PipeRoot, gpuA)
	check := func(step string, wantUID int) {
		t.Helper()
		fi, err := os.Lstat(pipe)
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		if uid, _ := fileUID(fi); uid != wantUID || fi.Mode().Perm() != 0o700 || !fi.IsDir() {
			t.Errorf("%s: pipe dir uid %d mode %v; want uid %d, 0700", step, uid, fi.Mode(), wantUID)
		}
		ri, err := os.Stat(cfg.PipeRoot)
		if err != nil || ri.Mode().Perm() != 0o711 {
			t.Errorf("%s: pipe root mode %v, %v; want 0711", step, ri.Mode(), err)
		}
	}
	if err := m.Acquire(ctx, gpuA, alice("a1")); err != nil {
		t.Fatal(err)
	}
	check("first client", uidAlice)
	if err := m.Acquire(ctx, gpuA, alice("a2")); err != nil {
		t.Fatal(err)
	}
	if err := m.Release(gpuA, "a1"); err != nil {
		t.Fatal(err)
	}
	check("a client left, one remains", uidAlice)

	// A restarted daemon's directory is its clients' user's again.
	old := m.Status()[gpuA].PID
	if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the daemon to die", func() bool { _, alive := procStart(old); return !alive })
	m.supervise(ctx, nil)
	if s := m.Status()[gpuA]; !s.Healthy || s.PID == old {
		t.Fatalf("after restart %+v", s)
	}
	check("restarted daemon", uidAlice)

	// The device plugin's stats file, written by the driver (root), stays
	// readable by root in the user's directory.
	usage := gpu.ShareUsagePath(cfg.PipeRoot, gpuA)
	if err := gpu.WriteShareUsage(usage, gpu.ShareUsage{Shares: map[string]uint64{gpuA + "-mps-0": 100}}); err != nil {
		t.Fatal(err)
	}
	if u, err := gpu.ReadShareUsage(usage); err != nil || u.Shares[gpuA+"-mps-0"] != 100 {
		t.Fatalf("share usage in the user's pipe directory: %+v, %v", u, err)
	}
	check("share usage published", uidAlice)

	if err := m.Release(gpuA, "a2"); err != nil {
		t.Fatal(err)
	}
	check("last client left", 0)

	// The next user gets it, and a stop by NewManager (no clients on
	// record) gives it back to root.
	if err := m.Acquire(ctx, gpuA, bob("b1")); err != nil {
		t.Fatal(err)
	}
	check("next user", uidBob)
	st, _ := loadStates(cfg.StateDir)
	st[0].Clients = map[string]clientState{}
	if err := saveState(cfg.StateDir, st[0]); err != nil {
		t.Fatal(err)
	}
	newManager(t, cfg)
	check("daemon stopped", 0)
}

func TestPipeRootShared(t *testing.T) {
	needRoot(t)
	root := testRoot(t)
	cfg := testConfig(t, root)
	if err := os.MkdirAll(cfg.PipeRoot, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(cfg.PipeRoot, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	m := newManager(t, cfg)
	if err := m.Acquire(context.Background(), gpuA, alice("a")); err != nil {
		t.Fatal(err)
	}
	// A shared root such as /tmp is not the manager's to change; the
	// GPU's own directory still is the user's alone.
	if fi, _ := os.Stat(cfg.PipeRoot); fi.Mode().Perm() != 0o777 || fi.Mode()&os.ModeSticky == 0 {
		t.Errorf("shared pipe root mode changed to %v", fi.Mode())
	}
	if fi, _ := os.Stat(filepath.Join(cfg.PipeRoot, gpuA)); fi.Mode().Perm() != 0o700 {
		t.Errorf("pipe dir mode %v", fi.Mode())
	}
	if err := m.Release(gpuA, "a"); err != nil {
		t.Fatal(err)
	}
}

// Version 1 state files: clients without uid, daemon without boot ID.
func TestVersion1State(t *testing.T) {
	needRoot(t)
	root := testRoot(t)
	cfg := testConfig(t, root)
	m1 := newManager(t, cfg)
	ctx := context.Background()
	if err := m1.Acquire(ctx, gpuA, alice("old")); err != nil {
		t.Fatal(err)
	}
	pid := m1.Status()[gpuA].PID
	start, _ := procStart(pid)
	pipe := filepath.Join(cfg.PipeRoot, gpuA)
	// As a version 1 driver leaves it: root's 0755 directory.
	v1 := `{"version":1,"gpu_uuid":"` + gpuA + `","pid":` + itoa(pid) + `,"start_ticks":` + strconvUitoa(start) +
		`,"pipe_dir":"` + pipe + `","log_dir":"` + filepath.Join(cfg.LogRoot, gpuA) +
		`","clients":{"old":{"thread_percentage":25,"pinned_mem_mib":1024}},"ceiling":{"thread_percentage":25,"pinned_mem_mib":1024}}`
	if err := os.WriteFile(filepath.Join(cfg.StateDir, gpuA+".json"), []byte(v1), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(pipe, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(pipe, 0o755); err != nil {
		t.Fatal(err)
	}

	m2 := newManager(t, cfg)
	s := m2.Status()[gpuA]
	if s.PID != pid || !s.Healthy || !slices.Equal(s.Clients, []string{"old"}) || s.User != "" {
		t.Fatalf("v1 state: status %+v; want daemon %d re-adopted, client old of unknown user", s, pid)
	}
	var st daemonState
	if err := json.Unmarshal([]byte(readFile(t, filepath.Join(cfg.StateDir, gpuA+".json"))), &st); err != nil {
		t.Fatal(err)
	}
	if st.Version != stateVersion || st.BootID != procfs.BootID() || st.Clients["old"].UID != nil {
		t.Errorf("saved after adoption: %+v; want version %d, this boot's ID, client of unknown uid", st, stateVersion)
	}
	if fi, _ := os.Stat(pipe); fi.Mode().Perm() != 0o755 {
		t.Errorf("pipe dir of unknown-user clients changed to %v; want it left as it was", fi.Mode())
	}
	// A client of unknown user conflicts with nobody; the first known user
	// gets the directory.
	if err := m2.Acquire(ctx, gpuA, bob("b1")); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(pipe); fi.Mode().Perm() != 0o700 {
		t.Errorf("pipe dir mode %v after a known client", fi.Mode())
	}
	// The old task recovering records its user: now alice conflicts.
	err := m2.Acquire(ctx, gpuA, alice("old"))
	if !errors.Is(err, ErrUserConflict) {
		t.Fatalf("re-acquire of old as alice beside bob: %v; want a conflict", err)
	}
	if err := m2.Acquire(ctx, gpuA, Client{TaskID: "old", UID: uidBob, User: "bob", Limits: Limits{25, 1024}}); err != nil {
		t.Fatal(err)
	}
	if err := m2.Acquire(ctx, gpuA, alice("a1")); !errors.Is(err, ErrUserConflict) {
		t.Fatalf("alice beside bob's tasks: %v", err)
	}
	for _, task := range []string{"old", "b1"} {
		if err := m2.Release(gpuA, task); err != nil {
			t.Fatal(err)
		}
	}
}

// A daemon on record is believed only while pid, start time and boot match;
// a record without boot ID only when the process serves the pipe directory.
func TestAdoptChecksIdentity(t *testing.T) {
	bootID := procfs.BootID()
	if bootID == "" {
		t.Skip("no boot ID on this kernel")
	}
	tests := []struct {
		name       string
		bootID     string
		servesPipe bool
		want       bool
	}{
		{"this boot", bootID, false, true},
		{"another boot, same pid and start time", "00000000-0000-4000-8000-000000000000", true, false},
		{"no boot ID, serves the pipe directory", "", true, true},
		{"no boot ID, another process", "", false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := testRoot(t)
			cfg := testConfig(t, root)
			pipe := filepath.Join(cfg.PipeRoot, gpuA)
			if err := os.MkdirAll(pipe, 0o700); err != nil {
				t.Fatal(err)
			}
			// A stand-in for the recorded daemon; it must survive whatever
			// the manager makes of it.
			cmd := exec.Command("sleep", "60")
			if tc.servesPipe {
				cmd.Env = []string{"CUDA_MPS_PIPE_DIRECTORY=" + pipe}
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
			waitExeced(t, cmd.Process.Pid, "sleep")
			id, err := procfs.Identify(cmd.Process.Pid)
			if err != nil {
				t.Fatal(err)
			}
			id.BootID = tc.bootID
			uid := uint32(os.Getuid())
			st := &daemonState{GPU: gpuA, Identity: id, PipeDir: pipe, LogDir: filepath.Join(cfg.LogRoot, gpuA),
				Clients: map[string]clientState{"a": {UID: &uid}}, Ceiling: &Limits{}}
			if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := saveState(cfg.StateDir, st); err != nil {
				t.Fatal(err)
			}
			m := newManager(t, cfg)
			got := m.Status()[gpuA].PID == cmd.Process.Pid
			if got != tc.want {
				t.Errorf("adopted = %v, want %v (status %+v)", got, tc.want, m.Status()[gpuA])
			}
			if _, alive := procStart(cmd.Process.Pid); !alive {
				t.Errorf("the recorded process was killed")
			}
		})
	}
}

// The pipe directory is the clients' user's, so its pid file may name any
// process: only one of the manager's own user that serves the directory is
// taken for the daemon.
func TestFindDaemonTrustsNoPidFile(t *testing.T) {
	needRoot(t)
	tests := []struct {
		name       string
		uid        uint32
		servesPipe bool
		want       bool
	}{
		{"the manager's own process serving the directory", 0, true, true},
		{"a process of the clients' user", uidAlice, true, false},
		{"a process serving another directory", 0, false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := testRoot(t)
			cfg := testConfig(t, root)
			m := newManager(t, cfg)
			pipe := filepath.Join(cfg.PipeRoot, gpuA)
			if err := os.MkdirAll(pipe, 0o700); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command("sleep", "60")
			dir := pipe
			if !tc.servesPipe {
				dir = filepath.Join(cfg.PipeRoot, gpuB)
			}
			cmd.Env = []string{"CUDA_MPS_PIPE_DIRECTORY=" + dir}
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: tc.uid, Gid: tc.uid}}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
			// Until the child has exec'd sleep, its environ is still ours.
			waitExeced(t, cmd.Process.Pid, "sleep")
			if err := os.WriteFile(filepath.Join(pipe, pidFileName), []byte(itoa(cmd.Process.Pid)+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			id, ok := m.findDaemon(pipe)
			if ok != tc.want || (ok && id.PID != cmd.Process.Pid) {
				t.Errorf("findDaemon = %+v, %v; want %v", id, ok, tc.want)
			}
		})
	}
}

func TestTasks(t *testing.T) {
	root := testRoot(t)
	m := newManager(t, testConfig(t, root))
	ctx := context.Background()
	if got := m.Tasks(); len(got) != 0 {
		t.Fatalf("Tasks() of a new manager = %v", got)
	}
	for _, c := range []struct{ gpu, task string }{{gpuB, "t3"}, {gpuA, "t1"}, {gpuA, "t2"}, {gpuB, "t1"}} {
		if err := m.Acquire(ctx, c.gpu, client(c.task, Limits{10, 1024})); err != nil {
			t.Fatal(err)
		}
	}
	if got := m.Tasks(); !slices.Equal(got, []string{"t1", "t2", "t3"}) {
		t.Errorf("Tasks() = %v, want [t1 t2 t3]", got)
	}
	if err := m.Release(gpuA, "t1"); err != nil {
		t.Fatal(err)
	}
	if got := m.Tasks(); !slices.Equal(got, []string{"t1", "t2", "t3"}) {
		t.Errorf("Tasks() after t1 left one GPU = %v", got)
	}
	for _, task := range []string{"t1", "t2", "t3"} {
		if err := m.ReleaseTask(task); err != nil {
			t.Fatal(err)
		}
	}
	if got := m.Tasks(); len(got) != 0 {
		t.Errorf("Tasks() after all left = %v", got)
	}
	// A new manager knows them from the bookkeeping.
	if err := m.Acquire(ctx, gpuA, client("t9", Limits{})); err != nil {
		t.Fatal(err)
	}
	if got := newManager(t, testConfig(t, root)).Tasks(); !slices.Equal(got, []string{"t9"}) {
		t.Errorf("Tasks() after restart = %v", got)
	}
}

// waitExeced waits until process pid runs the program named name: between
// fork and exec a child still has its parent's command line and environment.
func waitExeced(t *testing.T, pid int, name string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		argv, _ := os.ReadFile("/proc/" + itoa(pid) + "/cmdline")
		if arg0, _, _ := strings.Cut(string(argv), "\x00"); filepath.Base(arg0) == name {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d did not exec %s within 10s (cmdline %q)", pid, name, argv)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
