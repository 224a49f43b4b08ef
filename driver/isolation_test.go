package driver

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nomad-gpu/nomad-gpu/driver/supervisor"
	"github.com/nomad-gpu/nomad-gpu/gpu"
	"github.com/nomad-gpu/nomad-gpu/internal/testenv"
	"github.com/nomad-gpu/nomad-gpu/wire/drivers"
)

// requireIsolation skips where the node cannot make the namespaces or
// Landlock domains these tests are about.
func requireIsolation(t *testing.T, d *Driver) {
	t.Helper()
	p := d.isolation()
	if !p.PIDNamespace {
		testenv.Skipf(t, testenv.PIDNS, "no private PID namespaces here: %s", p.PIDNamespaceError)
	}
	if p.LandlockABI == 0 {
		testenv.Skipf(t, testenv.Landlock, "no Landlock here: %s", p.LandlockError)
	}
}

// mpsShare is the device plugin's reservation of one MPS share of the
// node's GPU index i.
func (e *env) mpsShare(i int) (string, map[string]string) {
	e.t.Helper()
	inv, err := gpu.Open(e.cfg.gpuConfig(), nil)
	if err != nil {
		e.t.Fatal(err)
	}
	defer inv.Close()
	snap, err := inv.Snapshot()
	if err != nil {
		e.t.Fatal(err)
	}
	u := snap.GPUs[i].UUID
	return u, map[string]string{
		"CUDA_VISIBLE_DEVICES": u, "NOMAD_GPU_SLICE_TYPE": "mps", "NOMAD_GPU_DEVICE_IDS": u + "-mps-0",
		"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=20480M",
		"CUDA_MPS_PIPE_DIRECTORY": filepath.Join(e.cfg.MPS.PipeRoot, u),
	}
}

func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Two tasks of the same user: B finds nothing of A through /proc, signals,
// A's alloc dir or A's MPS daemon, and ps in B shows only B.
func TestTasksOfOneUserCannotReachEachOther(t *testing.T) {
	e := newEnv(t)
	d := e.plugin()
	requireIsolation(t, d)
	const secret = "ngd-secret-of-task-a"
	gpuUUID, share := e.mpsShare(2)

	a := e.taskConfig(&TaskConfig{Command: "/bin/sh", Args: []string{"-c",
		`echo "$SECRET" > "$NOMAD_SECRETS_DIR/token"; touch "$NOMAD_TASK_DIR/ready"; exec sleep 300`}}, share)
	a.Env["SECRET"] = secret
	if _, _, err := d.StartTask(a); err != nil {
		t.Fatal(err)
	}
	defer destroyTask(t, d, a.ID)
	eventually(t, "task A ready", func() bool { _, err := os.Stat(filepath.Join(a.Env["NOMAD_TASK_DIR"], "ready")); return err == nil })
	aPID := d.store.get(a.ID).proc.TaskPID()
	control := filepath.Join(e.cfg.MPS.PipeRoot, gpuUUID, "control")
	if _, err := os.Stat(control); err != nil {
		t.Fatalf("A's MPS daemon has no control pipe: %v", err)
	}

	probe := fmt.Sprintf(`
out="$NOMAD_TASK_DIR/probe.out"
{
grep -l %[1]q /proc/[0-9]*/environ 2>/dev/null && echo environ:found || echo environ:none
kill -0 %[2]d 2>/dev/null && echo signal:reached || echo signal:refused
ls %[3]q >/dev/null 2>&1 && echo allocdir:listed || echo allocdir:refused
cat %[4]q 2>/dev/null || echo secrets:refused
cat "$NOMAD_SECRETS_DIR/own" && echo own:read
ls %[5]q 2>/dev/null | wc -l | sed 's/^ */mpsroot:/'
(echo get_server_list > %[6]q) 2>/dev/null && echo mps:opened || echo mps:refused
for p in /proc/[0-9]*; do echo "proc:$(cat $p/comm)"; done
} > "$out" 2>&1
`, secret, aPID, a.AllocDir, filepath.Join(a.Env["NOMAD_SECRETS_DIR"], "token"), e.cfg.MPS.PipeRoot, control)
	b := e.taskConfig(&TaskConfig{Command: "/bin/sh", Args: []string{"-c", probe}}, nil)
	os.WriteFile(filepath.Join(b.Env["NOMAD_SECRETS_DIR"], "own"), []byte("own-secret\n"), 0o644)
	if _, _, err := d.StartTask(b); err != nil {
		t.Fatal(err)
	}
	if res := wait(t, d, b.ID, 30*time.Second); res.ExitCode != 0 {
		t.Fatalf("probe task: %+v", res)
	}
	destroyTask(t, d, b.ID)
	outB, _ := os.ReadFile(filepath.Join(b.Env["NOMAD_TASK_DIR"], "probe.out"))
	out := string(outB)
	if strings.Contains(out, secret) {
		t.Errorf("task B read task A's secret:\n%s", out)
	}
	for _, want := range []string{"environ:none", "signal:refused", "allocdir:refused", "secrets:refused", "own-secret\nown:read", "mpsroot:0", "mps:refused"} {
		if !strings.Contains(out, want) {
			t.Errorf("probe output lacks %q:\n%s", want, out)
		}
	}
	for _, l := range strings.Split(out, "\n") {
		if comm, ok := strings.CutPrefix(l, "proc:"); ok && comm != "sh" && comm != "cat" && !strings.HasPrefix(comm, "driver.test") {
			t.Errorf("task B sees a process that is not its own: %q", comm)
		}
	}
	if !d.store.get(a.ID).proc.Running() {
		t.Error("task A died")
	}
}

// The MPS client itself sees its own GPU's daemon, and no other GPU's.
func TestMPSTaskSeesOnlyItsOwnPipes(t *testing.T) {
	e := newEnv(t)
	d := e.plugin()
	requireIsolation(t, d)
	mine, share := e.mpsShare(1)
	other, otherShare := e.mpsShare(5)
	holder := e.taskConfig(&TaskConfig{Command: "/bin/sleep", Args: []string{"300"}}, otherShare)
	if _, _, err := d.StartTask(holder); err != nil {
		t.Fatal(err)
	}
	defer destroyTask(t, d, holder.ID)
	script := fmt.Sprintf(`exec 2>"$NOMAD_TASK_DIR/err"; ls %q %q > "$NOMAD_TASK_DIR/out"; (echo get_server_list > %q) && echo own:opened >> "$NOMAD_TASK_DIR/out"`,
		filepath.Join(e.cfg.MPS.PipeRoot, mine), filepath.Join(e.cfg.MPS.PipeRoot, other), filepath.Join(e.cfg.MPS.PipeRoot, mine, "control"))
	cfg := e.taskConfig(&TaskConfig{Command: "/bin/sh", Args: []string{"-c", script}}, share)
	if _, _, err := d.StartTask(cfg); err != nil {
		t.Fatal(err)
	}
	wait(t, d, cfg.ID, 30*time.Second)
	destroyTask(t, d, cfg.ID)
	out, _ := os.ReadFile(filepath.Join(cfg.Env["NOMAD_TASK_DIR"], "out"))
	errOut, _ := os.ReadFile(filepath.Join(cfg.Env["NOMAD_TASK_DIR"], "err"))
	if !strings.Contains(string(out), "control") || !strings.Contains(string(out), "own:opened") {
		t.Errorf("the MPS task cannot use its own GPU's daemon: %q (stderr %q)", out, errOut)
	}
	if !strings.Contains(string(errOut), other) {
		t.Errorf("the MPS task could list another GPU's pipe dir %s: %q", other, out)
	}
}

// Every relaxation is the plugin config's to make, and every refusal names
// the key that would allow it.
func TestIsolationPolicy(t *testing.T) {
	e := newEnv(t)
	requireIsolation(t, e.plugin())
	extra := filepath.Join(e.dir, "models")
	os.MkdirAll(extra, 0o755)
	os.WriteFile(filepath.Join(extra, "m"), []byte("weights\n"), 0o644)
	cases := []struct {
		name    string
		plugin  func(*Config)
		task    TaskConfig
		user    string
		wantErr string
		wantOut string
	}{
		{name: "host pid refused", task: TaskConfig{PIDMode: "host"}, wantErr: "isolation.allow_host_pid = true"},
		{name: "host pid allowed", plugin: func(c *Config) { c.Isolation.AllowHostPID = true }, task: TaskConfig{PIDMode: "host"},
			wantOut: "host-pid"},
		{name: "unveil refused", task: TaskConfig{Unveil: []string{"r:" + extra}}, wantErr: "isolation.unveil_by_task = true"},
		{name: "unveil allowed", plugin: func(c *Config) { c.Isolation.UnveilByTask = true }, task: TaskConfig{Unveil: []string{"r:" + extra}},
			wantOut: "weights"},
		{name: "unveiled by the plugin for all", plugin: func(c *Config) { c.Isolation.UnveilPaths = []string{"r:" + extra} },
			wantOut: "weights"},
		{name: "not unveiled", wantOut: "denied"},
		// The task names its user: a denied default_user stops the plugin
		// config itself (TestConfigKeyValidation).
		{name: "denied group", user: "nobody", plugin: func(c *Config) { c.DefaultUser, c.DeniedHostUIDs, c.DeniedHostGIDs = "root", "", "65534" },
			wantErr: `denied_host_gids = "65534"`},
		{name: "denied uid range", user: "nobody", plugin: func(c *Config) { c.DefaultUser, c.DeniedHostUIDs, c.DeniedHostGIDs = "root", "60000-65535", "" },
			wantErr: `"nobody" (uid 65534) is denied`},
		{name: "work_dir outside", task: TaskConfig{WorkDir: "/var"}, wantErr: "config.work_dir"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			saved := *e.cfg
			defer func() { *e.cfg = saved }()
			if tc.plugin != nil {
				tc.plugin(e.cfg)
			}
			d := e.plugin()
			task := tc.task
			task.Command = "/bin/sh"
			task.Args = []string{"-c", fmt.Sprintf(`{ test "$(cat /proc/1/comm)" != driver.test && echo host-pid; cat %q/m 2>/dev/null || echo denied; } > "$NOMAD_TASK_DIR/out"`, extra)}
			cfg := e.taskConfig(&task, nil)
			cfg.User = tc.user
			_, _, err := d.StartTask(cfg)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			wait(t, d, cfg.ID, 30*time.Second)
			destroyTask(t, d, cfg.ID)
			out, _ := os.ReadFile(filepath.Join(cfg.Env["NOMAD_TASK_DIR"], "out"))
			if !strings.Contains(string(out), tc.wantOut) {
				t.Errorf("task printed %q, want %q", out, tc.wantOut)
			}
		})
	}
}

// userUIDNotGID is a user whose uid differs from its primary gid and is
// none of its groups, and neither is 0: one of the node's users, or else
// one made for the test and removed after it. Its IDs are read from
// /etc/passwd and os/user, not from what the driver looks up.
func userUIDNotGID(t *testing.T) (name string, uid, gid uint32) {
	t.Helper()
	find := func() (string, uint32, uint32, bool) {
		b, err := os.ReadFile("/etc/passwd")
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Split(line, ":")
			if len(f) < 4 {
				continue
			}
			uid, err1 := strconv.ParseUint(f[2], 10, 32)
			gid, err2 := strconv.ParseUint(f[3], 10, 32)
			if err1 != nil || err2 != nil || uid == gid || uid == 0 || gid == 0 {
				continue
			}
			u, err := user.Lookup(f[0])
			if err != nil {
				continue
			}
			if groups, err := u.GroupIds(); err == nil && !slices.Contains(groups, f[2]) {
				return f[0], uint32(uid), uint32(gid), true
			}
		}
		return "", 0, 0, false
	}
	if name, uid, gid, ok := find(); ok {
		return name, uid, gid
	}
	name = fmt.Sprintf("ngd-uidgid-%d", os.Getpid())
	if out, err := exec.Command("useradd", "--system", "--no-create-home", "--gid", "nogroup", "--shell", "/usr/sbin/nologin", name).CombinedOutput(); err != nil {
		t.Fatalf("no user here has a uid other than its gid, and useradd failed: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("userdel", name).CombinedOutput(); err != nil {
			t.Errorf("userdel %s: %v: %s", name, err, out)
		}
	})
	if name, uid, gid, ok := find(); ok {
		return name, uid, gid
	}
	t.Fatalf("made user %s, but it has no uid other than its gid", name)
	return "", 0, 0
}

// denied_host_uids reads the user's uid and denied_host_gids its groups,
// never the one for the other: for a task's user and for default_user.
// (nobody, whose uid and gid are the same, cannot tell them apart.)
func TestDeniedIDsTellUIDFromGID(t *testing.T) {
	e := newEnv(t)
	name, uid, gid := userUIDNotGID(t)
	id := func(v uint32) string { return strconv.FormatUint(uint64(v), 10) }
	cases := []struct {
		name       string
		uids, gids string // denied_host_uids and denied_host_gids
		wantErr    string // "" for allowed
	}{
		{name: "uid denied", uids: id(uid), wantErr: fmt.Sprintf("user: %q (uid %d) is denied by the plugin config (denied_host_uids = \"%d\")", name, uid, uid)},
		{name: "gid in denied_host_uids", uids: id(gid)},
		{name: "gid denied", gids: id(gid), wantErr: fmt.Sprintf("user: %q is in group %d", name, gid)},
		{name: "uid in denied_host_gids", gids: id(uid)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			saved := *e.cfg
			defer func() { *e.cfg = saved }()
			e.cfg.DeniedHostUIDs, e.cfg.DeniedHostGIDs = tc.uids, tc.gids

			// As default_user: the plugin config itself.
			asDefault := *e.cfg
			asDefault.DefaultUser = name
			err := asDefault.Validate()
			if tc.wantErr == "" && err != nil {
				t.Errorf("default_user %q: %v; want it allowed", name, err)
			}
			if want := fmt.Sprintf("default_user: %q would fail every task without a user: %s", name, tc.wantErr); tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), want)) {
				t.Errorf("default_user %q: error %v; want %q", name, err, want)
			}

			// As the task's user.
			e.cfg.DefaultUser = "root"
			d := e.plugin()
			cfg := e.taskConfig(&TaskConfig{Command: "/bin/true"}, nil)
			cfg.User = name
			_, _, err = d.StartTask(cfg)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("task user %q: error %v; want %q", name, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("task user %q: %v; want it allowed", name, err)
			}
			if res := wait(t, d, cfg.ID, 30*time.Second); res.ExitCode != 0 {
				t.Errorf("task as %q: %+v", name, res)
			}
			destroyTask(t, d, cfg.ID)
		})
	}
}

// A command outside every unveiled path fails the start with an error
// (the task's start failure event) that says Landlock refused it, names
// the command and the keys that allow it; unveiling it lets it start.
func TestLandlockRefusedCommandSaysHowToAllowIt(t *testing.T) {
	e := newEnv(t)
	requireIsolation(t, e.plugin())
	opt := filepath.Join(e.dir, "opt")
	os.Mkdir(opt, 0o755)
	run := filepath.Join(opt, "run")
	if err := os.WriteFile(run, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		unveil  []string
		wantErr string
	}{
		{"not unveiled", nil, fmt.Sprintf(`command %q: permission denied: Landlock refused it: no unveil rule lets the task read and execute %s; allow it with "rx:%s" in the plugin config's isolation.unveil_paths, or in the task's config.unveil where the plugin config sets isolation.unveil_by_task = true`, run, run, opt)},
		{"unveiled by the plugin", []string{"rx:" + opt}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.cfg.Isolation.UnveilPaths = tc.unveil
			d := e.plugin()
			cfg := e.taskConfig(&TaskConfig{Command: run}, nil)
			_, _, err := d.StartTask(cfg)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				wait(t, d, cfg.ID, 30*time.Second)
				destroyTask(t, d, cfg.ID)
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %v\nwant %q", err, tc.wantErr)
			}
		})
	}
}

// Where the kernel has no Landlock, a task starts only if the plugin config
// says so, and then says it runs unconfined.
func TestLandlockUnavailable(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		setting string
		wantErr string
	}{
		{LandlockRequired, `isolation.landlock = "required"`},
		{LandlockBestEffort, ""},
	} {
		t.Run(tc.setting, func(t *testing.T) {
			e.cfg.Isolation.Landlock = tc.setting
			d := e.plugin()
			real := d.isolation()
			d.probe = &isolationProbe{Probe: supervisor.Probe{PIDNamespace: real.PIDNamespace, PIDNamespaceError: real.PIDNamespaceError,
				LandlockError: "landlock unavailable: ENOSYS (test)"}, at: time.Now().Add(time.Hour)}
			fp := d.fingerprint()
			if got := *fp.Attributes["driver.gpu.landlock"].Bool; got {
				t.Error("fingerprint says Landlock is in force")
			}
			if tc.wantErr != "" && fp.Health != drivers.HealthUnhealthy {
				t.Errorf("health %v %q: want unhealthy where tasks cannot start", fp.Health, fp.HealthDescription)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			evs, _ := d.TaskEvents(ctx)
			cfg := e.taskConfig(&TaskConfig{Command: "/bin/true"}, nil)
			_, _, err := d.StartTask(cfg)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer destroyTask(t, d, cfg.ID)
			var seen []string
			deadline := time.After(5 * time.Second)
			for {
				select {
				case ev := <-evs:
					if strings.Contains(ev.Message, "without filesystem confinement") {
						return
					}
					seen = append(seen, ev.Message)
					continue
				case <-deadline:
					t.Errorf("no task event saying the task runs unconfined; events %q", seen)
				}
				break
			}
		})
	}
}

// A data_dir Nomad made 0700 keeps non-root tasks out of their task dirs:
// the start error says which directory and what to do, and so does the
// fingerprint afterwards.
func TestDataDirNotTraversable(t *testing.T) {
	e := newEnv(t)
	d := e.plugin()
	cfg := e.taskConfig(&TaskConfig{Command: "/bin/true"}, nil)
	dataDir := filepath.Join(e.dir, "data")
	os.Chmod(dataDir, 0o700)
	defer os.Chmod(dataDir, 0o755)
	_, _, err := d.StartTask(cfg)
	if err == nil || !strings.Contains(err.Error(), "This is the Nomad data_dir") || !strings.Contains(err.Error(), "chmod 0755 "+dataDir) {
		t.Fatalf("error %v: want one naming the data_dir and the fix", err)
	}
	if fp := d.fingerprint(); !strings.Contains(fp.HealthDescription, "data_dir "+dataDir+" is mode 0700") {
		t.Errorf("fingerprint health %q does not name the data_dir", fp.HealthDescription)
	}
}

// The fingerprint publishes the isolation in force.
func TestFingerprintShowsIsolation(t *testing.T) {
	e := newEnv(t)
	d := e.plugin()
	requireIsolation(t, d)
	fp := d.fingerprint()
	for key, want := range map[string]string{
		"driver.gpu.pid_namespace": "true", "driver.gpu.landlock": "true", "driver.gpu.mps_pipes_masked": "true",
		"driver.gpu.allow_host_pid": "false", "driver.gpu.unveil_by_task": "false", "driver.gpu.denied_host_uids": "0",
		"driver.gpu.denied_host_gids": "0",
	} {
		a, ok := fp.Attributes[key]
		var got string
		switch {
		case !ok:
		case a.Bool != nil:
			got = strconv.FormatBool(*a.Bool)
		case a.String != nil:
			got = *a.String
		}
		if got != want {
			t.Errorf("%s = %q, want %q", key, got, want)
		}
	}
	if a := fp.Attributes["driver.gpu.landlock_abi"]; a.Int == nil || *a.Int < 1 {
		t.Errorf("landlock_abi %+v", a)
	}
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// An interactive `nomad alloc exec -t` shell in the task's namespaces: it has
// a terminal, job control works (the shell runs a foreground job), and it
// sees the task's processes only.
func TestExecWithTerminalInTheNamespace(t *testing.T) {
	e := newEnv(t)
	d := e.plugin()
	requireIsolation(t, d)
	cfg := e.taskConfig(&TaskConfig{Command: "/bin/sleep", Args: []string{"300"}}, nil)
	if _, _, err := d.StartTask(cfg); err != nil {
		t.Fatal(err)
	}
	defer destroyTask(t, d, cfg.ID)
	var out bytes.Buffer
	stdinR, stdinW := io.Pipe()
	go func() {
		io.WriteString(stdinW, "tty >/dev/null && echo has-tty; sleep 0.1; for p in /proc/[0-9]*; do cat $p/comm; done | sort -u | tr '\\n' ' '; echo; exit 5\n")
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := d.ExecTaskStreaming(ctx, cfg.ID, &drivers.ExecOptions{
		Command: []string{"/bin/sh", "-i"}, Tty: true, Stdin: stdinR, Stdout: nopCloser{&out}, Stderr: nopCloser{&out},
	})
	stdinW.Close()
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 5 {
		t.Fatalf("exit %+v, output %q", res, out.String())
	}
	if !strings.Contains(out.String(), "has-tty") {
		t.Errorf("no terminal in the exec session: %q", out.String())
	}
	for _, comm := range []string{"sleep", "sh"} {
		if !strings.Contains(out.String(), comm) {
			t.Errorf("exec session does not see %q: %q", comm, out.String())
		}
	}
	if strings.Contains(out.String(), "nomad") || strings.Contains(out.String(), "systemd") {
		t.Errorf("exec session sees host processes: %q", out.String())
	}
}

// NVIDIA's MPS runs one user's clients at a time per GPU: a task of a
// second user on a GPU another user's tasks hold fails at once, naming who
// holds it, instead of hanging in CUDA init.
func TestMPSOneUserPerGPU(t *testing.T) {
	e := newEnv(t)
	d := e.plugin()
	_, share := e.mpsShare(3)
	first := e.taskConfig(&TaskConfig{Command: "/bin/sleep", Args: []string{"300"}}, share)
	if _, _, err := d.StartTask(first); err != nil {
		t.Fatal(err)
	}
	defer destroyTask(t, d, first.ID)
	second := e.taskConfig(&TaskConfig{Command: "/bin/sleep", Args: []string{"300"}}, share)
	second.User = "daemon"
	_, _, err := d.StartTask(second)
	if err == nil {
		destroyTask(t, d, second.ID)
		t.Fatal("a second user's MPS task started on the same GPU")
	}
	for _, want := range []string{`user "nobody"`, `"daemon"`, "one user"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %s", err, want)
		}
	}
	if left := e.leftovers(d, second); len(left) > 0 {
		t.Errorf("the refused task left %v", left)
	}
	same := e.taskConfig(&TaskConfig{Command: "/bin/sleep", Args: []string{"300"}}, share)
	if _, _, err := d.StartTask(same); err != nil {
		t.Fatalf("a second task of the same user: %v", err)
	}
	destroyTask(t, d, same.ID)
}

// Landlock alone keeps a task off another GPU's device node, whatever the
// cgroup version.
func TestLandlockFencesOtherGPUs(t *testing.T) {
	e := newEnv(t)
	// No devices cgroup: the refusal below must be Landlock's.
	d := e.plugin()
	requireIsolation(t, d)
	dir := filepath.Join(e.dir, "dev")
	os.MkdirAll(dir, 0o755)
	mine, other := filepath.Join(dir, "nvidia1"), filepath.Join(dir, "nvidia0")
	for _, p := range []string{mine, other} {
		if err := unix.Mknod(p, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
			testenv.Skipf(t, testenv.Mknod, "mknod: %v", err)
		}
		os.Chmod(p, 0o666)
	}
	script := fmt.Sprintf(`{ echo x > %s && echo mine:ok; echo x > %s 2>/dev/null && echo other:opened || echo other:refused; } > "$NOMAD_TASK_DIR/out"`, mine, other)
	cfg := e.taskConfig(&TaskConfig{Command: "/bin/sh", Args: []string{"-c", script}}, nil)
	cfg.Devices = []drivers.DeviceConfig{{TaskPath: "/dev/nvidia1", HostPath: mine, Permissions: "rw"}}
	if _, _, err := d.StartTask(cfg); err != nil {
		t.Fatal(err)
	}
	wait(t, d, cfg.ID, 30*time.Second)
	destroyTask(t, d, cfg.ID)
	out, _ := os.ReadFile(filepath.Join(cfg.Env["NOMAD_TASK_DIR"], "out"))
	if string(out) != "mine:ok\nother:refused\n" {
		t.Errorf("task wrote %q, want its own node open and the other refused", out)
	}
	if fp := d.fingerprint(); !*fp.Attributes["driver.gpu.device_fence"].Bool {
		t.Error("fingerprint says device nodes are not fenced")
	}
}
