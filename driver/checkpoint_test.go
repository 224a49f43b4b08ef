package driver

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/driver/cgroups"
	"github.com/nomad-gpu/nomad-gpu/internal/testenv"
	"github.com/nomad-gpu/nomad-gpu/wire/drivers"
)

// counterScript counts, resumes from its newest checkpoint, and on the
// checkpoint signal writes its count and commits; it records what it
// restored, its count so far and what it commits in its task dir (the
// last before it commits: the driver may stop it the moment it does).
const counterScript = `
n=0
if [ -n "$NOMAD_GPU_RESTORE_DIR" ]; then n=$(cat "$NOMAD_GPU_RESTORE_DIR/count"); fi
echo "restored=$n resumes=$NOMAD_GPU_RESUME_COUNT" > "$NOMAD_TASK_DIR/restored"
checkpoint() { echo $n > "$NOMAD_GPU_CHECKPOINT_DIR/count"; echo $n > "$NOMAD_TASK_DIR/committed"; : > "$NOMAD_GPU_CHECKPOINT_COMMIT"; }
trap 'checkpoint' USR1
trap 'exit 0' INT TERM
while :; do n=$((n+1)); echo $n > "$NOMAD_TASK_DIR/progress"; sleep 0.02; done
`

// checkpointTask is run i of the same task (same job, group, task and
// alloc index), as the replacement of a preempted allocation is.
func (e *env) checkpointTask(ck CheckpointConfig) *drivers.TaskConfig {
	cfg := e.taskConfig(&TaskConfig{Command: "/bin/sh", Args: []string{"-c", counterScript}, Checkpoint: []CheckpointConfig{ck}}, nil)
	cfg.Namespace, cfg.JobID, cfg.TaskGroupName = "default", "train", "g"
	cfg.Env["NOMAD_ALLOC_INDEX"] = "0"
	return cfg
}

func readInt(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("%s: %q", path, b)
	}
	return n
}

// startRestored starts the next run of the checkpointing task and returns
// what it says it restored: "restored=N resumes=M".
func (e *env) startRestored(t *testing.T, d *Driver, ck CheckpointConfig) string {
	t.Helper()
	next := e.checkpointTask(ck)
	if _, _, err := d.StartTask(next); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { destroyTask(t, d, next.ID) })
	restored := filepath.Join(next.Env["NOMAD_TASK_DIR"], "restored")
	// The script's `echo … > restored` creates the file before it writes.
	var b []byte
	eventually(t, "restore", func() bool { b, _ = os.ReadFile(restored); return strings.HasSuffix(string(b), "\n") })
	return strings.TrimSpace(string(b))
}

func restoredLine(count, resumes int) string {
	return fmt.Sprintf("restored=%d resumes=%d", count, resumes)
}

func defaultCheckpoint() CheckpointConfig {
	c := CheckpointConfig{}
	decodeDefaults(&c)
	return c
}

// A stop makes the task commit before it is killed, and the next run of
// the same task restores exactly what was committed.
func TestCheckpointOnStopThenRestore(t *testing.T) {
	e := newEnv(t)
	d := e.plugin()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	evs, _ := d.TaskEvents(ctx)

	first := e.checkpointTask(defaultCheckpoint())
	if _, _, err := d.StartTask(first); err != nil {
		t.Fatal(err)
	}
	progress := filepath.Join(first.Env["NOMAD_TASK_DIR"], "progress")
	eventually(t, "progress", func() bool { b, _ := os.ReadFile(progress); return len(b) > 0 && string(b) != "1\n" })
	if err := d.StopTask(first.ID, 10*time.Second, "SIGINT"); err != nil {
		t.Fatal(err)
	}
	if res := wait(t, d, first.ID, 20*time.Second); res.ExitCode != 0 && res.Signal == 0 {
		t.Fatalf("first run: %+v", res)
	}
	committed := readInt(t, filepath.Join(first.Env["NOMAD_TASK_DIR"], "committed"))
	destroyTask(t, d, first.ID)
	var msgs []string
	for len(evs) > 0 {
		msgs = append(msgs, (<-evs).Message)
	}
	if !strings.Contains(strings.Join(msgs, "\n"), "checkpoint committed: generation 1") {
		t.Errorf("events %q: want a committed generation 1", msgs)
	}

	if got, want := e.startRestored(t, d, defaultCheckpoint()), restoredLine(committed, 1); got != want {
		t.Errorf("second run %q, want %q", got, want)
	}
}

// A task without a checkpoint block is stopped as any task is: no signal
// but the kill signal.
func TestNoCheckpointBlockNoCheckpoint(t *testing.T) {
	e := newEnv(t)
	d := e.plugin()
	cfg := e.taskConfig(&TaskConfig{Command: "/bin/sh", Args: []string{"-c",
		`trap 'echo got-usr1 > "$NOMAD_TASK_DIR/usr1"' USR1; trap 'exit 0' INT; env | grep -c NOMAD_GPU_ > "$NOMAD_TASK_DIR/env.tmp"; mv "$NOMAD_TASK_DIR/env.tmp" "$NOMAD_TASK_DIR/env"; while :; do sleep 0.02; done`}}, nil)
	if _, _, err := d.StartTask(cfg); err != nil {
		t.Fatal(err)
	}
	eventually(t, "task up", func() bool { _, err := os.Stat(filepath.Join(cfg.Env["NOMAD_TASK_DIR"], "env")); return err == nil })
	start := time.Now()
	stopTask(t, d, cfg.ID, 5*time.Second, "SIGINT")
	wait(t, d, cfg.ID, 10*time.Second)
	destroyTask(t, d, cfg.ID)
	if _, err := os.Stat(filepath.Join(cfg.Env["NOMAD_TASK_DIR"], "usr1")); err == nil {
		t.Error("a task without a checkpoint block got the checkpoint signal")
	}
	if b, _ := os.ReadFile(filepath.Join(cfg.Env["NOMAD_TASK_DIR"], "env")); strings.TrimSpace(string(b)) != "0" {
		t.Errorf("checkpoint variables in a task without a checkpoint block: %s", b)
	}
	if took := time.Since(start); took > 4*time.Second {
		t.Errorf("stop took %s", took)
	}
}

// A task killed halfway through writing a checkpoint never committed it:
// the next run restores the previous complete generation, byte for byte.
func TestCheckpointInterruptedMidWrite(t *testing.T) {
	e := newEnv(t)
	d := e.plugin()
	ck := defaultCheckpoint()
	first := e.checkpointTask(ck)
	if _, _, err := d.StartTask(first); err != nil {
		t.Fatal(err)
	}
	eventually(t, "progress", func() bool {
		_, err := os.Stat(filepath.Join(first.Env["NOMAD_TASK_DIR"], "progress"))
		return err == nil
	})
	stopTask(t, d, first.ID, 10*time.Second, "SIGINT")
	wait(t, d, first.ID, 20*time.Second)
	committed := readInt(t, filepath.Join(first.Env["NOMAD_TASK_DIR"], "committed"))
	destroyTask(t, d, first.ID)

	// The second run writes half a checkpoint and is killed before COMMIT.
	half := e.taskConfig(&TaskConfig{Command: "/bin/sh", Args: []string{"-c",
		`echo 999999 > "$NOMAD_GPU_CHECKPOINT_DIR/count"; head -c 1000000 /dev/zero > "$NOMAD_GPU_CHECKPOINT_DIR/big"; touch "$NOMAD_TASK_DIR/half"; sleep 300`},
		Checkpoint: []CheckpointConfig{ck}}, nil)
	half.Namespace, half.JobID, half.TaskGroupName, half.Name = first.Namespace, first.JobID, first.TaskGroupName, first.Name
	half.Env["NOMAD_ALLOC_INDEX"] = "0"
	if _, _, err := d.StartTask(half); err != nil {
		t.Fatal(err)
	}
	eventually(t, "half a checkpoint", func() bool { _, err := os.Stat(filepath.Join(half.Env["NOMAD_TASK_DIR"], "half")); return err == nil })
	d.store.get(half.ID).proc.KillTree(context.Background(), 0, 9)
	wait(t, d, half.ID, 20*time.Second)
	destroyTask(t, d, half.ID)

	if got, want := e.startRestored(t, d, ck), restoredLine(committed, 2); got != want {
		t.Errorf("third run %q, want %q (the half-written checkpoint must not count)", got, want)
	}
}

// A plugin that restarts while a checkpointing task runs takes its
// checkpoint run up again: the task's next commit, asked for by the new
// plugin's stop, is what the run after restores.
func TestCheckpointAfterPluginRestart(t *testing.T) {
	e := newEnv(t)
	first := e.plugin()
	cfg := e.checkpointTask(defaultCheckpoint())
	h, _, err := first.StartTask(cfg)
	if err != nil {
		t.Fatal(err)
	}
	progress := filepath.Join(cfg.Env["NOMAD_TASK_DIR"], "progress")
	eventually(t, "progress", func() bool { _, err := os.Stat(progress); return err == nil })
	first.Shutdown()

	second := e.plugin()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	evs, _ := second.TaskEvents(ctx)
	if err := second.RecoverTask(&drivers.TaskHandle{Version: h.Version, Config: cfg, DriverState: h.DriverState}); err != nil {
		t.Fatal(err)
	}
	if err := second.StopTask(cfg.ID, 10*time.Second, "SIGINT"); err != nil {
		t.Fatal(err)
	}
	wait(t, second, cfg.ID, 20*time.Second)
	destroyTask(t, second, cfg.ID)
	committed := readInt(t, filepath.Join(cfg.Env["NOMAD_TASK_DIR"], "committed"))
	var msgs []string
	for len(evs) > 0 {
		msgs = append(msgs, (<-evs).Message)
	}
	if !strings.Contains(strings.Join(msgs, "\n"), "checkpoint committed: generation 1") {
		t.Fatalf("events %q: want generation 1 committed by the recovering plugin", msgs)
	}

	if got, want := e.startRestored(t, second, defaultCheckpoint()), restoredLine(committed, 1); got != want {
		t.Errorf("next run %q, want %q", got, want)
	}
}

func withCheckpoint(edit func(*CheckpointConfig)) CheckpointConfig {
	c := defaultCheckpoint()
	edit(&c)
	return c
}

// A checkpoint root that root's group may reach but the task's user may
// not (so the agent started) fails the start in plain words, naming the
// directory and the fix.
func TestCheckpointRootUnreachable(t *testing.T) {
	e := newEnv(t)
	closed := filepath.Join(e.dir, "closed")
	if err := os.Mkdir(closed, 0o710); err != nil {
		t.Fatal(err)
	}
	os.Chmod(closed, 0o710)
	e.cfg.Checkpoint.Root = filepath.Join(closed, "checkpoints")
	d := e.plugin()
	_, _, err := d.StartTask(e.checkpointTask(defaultCheckpoint()))
	want := `config.checkpoint: user "nobody" cannot reach the plugin's checkpoint.root ` + e.cfg.Checkpoint.Root + ": " + closed + " is mode 0710"
	if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "chmod o+x "+closed) {
		t.Fatalf("error %v, want %q and the fix", err, want)
	}
}

// The agent refuses, when it loads the plugin, a checkpoint.root below an
// existing directory no task user may pass through, rather than failing
// every checkpointing job later; what the store makes or fixes itself (a
// missing directory, the root's own mode) and what some users may pass are
// no reason to refuse.
func TestSetConfigRefusesUnreachableCheckpointRoot(t *testing.T) {
	cases := []struct {
		name       string
		above      os.FileMode // the directory above the root
		root       os.FileMode // 0: the root does not exist
		refuseMode string
	}{
		{"above 0700", 0o700, 0, "0700"},
		{"above 0701 (others may pass)", 0o701, 0, ""},
		{"above 0710 (root's group may pass)", 0o710, 0, ""},
		{"above 0711", 0o711, 0, ""},
		{"root itself 0700", 0o755, 0o700, ""},
		{"above missing", 0, 0, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			above := filepath.Join(e.dir, "x")
			if c.above != 0 {
				mkdirMode(t, above, c.above)
			}
			e.cfg.Checkpoint.Root = filepath.Join(above, "checkpoints")
			if c.root != 0 {
				mkdirMode(t, e.cfg.Checkpoint.Root, c.root)
			}
			cfg := *e.cfg
			d := New(nil)
			defer d.Shutdown()
			err := d.SetConfig(&cfg, nil)
			if c.refuseMode == "" {
				if err != nil {
					t.Fatalf("SetConfig: %v", err)
				}
				return
			}
			want := "checkpoint.root: " + e.cfg.Checkpoint.Root + ": " + above + " is mode " + c.refuseMode + ", owner uid 0; task users cannot reach it; make it traversable (chmod 0711 " + above + ")"
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("error %v, want %q", err, want)
			}
		})
	}
}

func mkdirMode(t *testing.T, dir string, mode os.FileMode) {
	t.Helper()
	if err := os.Mkdir(dir, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, mode); err != nil {
		t.Fatal(err)
	}
}

// On a fresh node the shipped layout (state_dir and checkpoint.root side
// by side under /var/lib/nomad-gpu, neither there yet) works for a task
// run as nobody, even under an agent started with umask 077: the directory
// above both is traversable, state_dir stays private, and the task
// commits and restores.
func TestCheckpointFreshNodeDefaultLayout(t *testing.T) {
	e := newEnv(t)
	base := filepath.Join(e.dir, "var", "lib", "nomad-gpu")
	e.cfg.StateDir = filepath.Join(base, "driver")
	e.cfg.Checkpoint.Root = filepath.Join(base, "checkpoints")
	d := e.plugin()
	old := syscall.Umask(0o077)
	_, err := d.runtime()
	syscall.Umask(old)
	if err != nil {
		t.Fatal(err)
	}
	for dir, want := range map[string]os.FileMode{base: 0o755, e.cfg.StateDir: 0o700, e.cfg.Checkpoint.Root: 0o711} {
		if st, err := os.Stat(dir); err != nil || st.Mode().Perm() != want {
			t.Fatalf("%s: %v, mode %v; want mode %04o", dir, err, st.Mode(), want)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	evs, _ := d.TaskEvents(ctx)
	first := e.checkpointTask(defaultCheckpoint())
	if _, _, err := d.StartTask(first); err != nil {
		t.Fatal(err)
	}
	progress := filepath.Join(first.Env["NOMAD_TASK_DIR"], "progress")
	eventually(t, "progress", func() bool { b, _ := os.ReadFile(progress); return len(b) > 0 && string(b) != "1\n" })
	stopTask(t, d, first.ID, 10*time.Second, "SIGINT")
	wait(t, d, first.ID, 20*time.Second)
	committed := readInt(t, filepath.Join(first.Env["NOMAD_TASK_DIR"], "committed"))
	destroyTask(t, d, first.ID)
	if got, want := e.startRestored(t, d, defaultCheckpoint()), restoredLine(committed, 1); got != want {
		t.Errorf("second run %q, want %q", got, want)
	}
	// The first run's staging directory, empty since its commit, is no
	// lost checkpoint: a normal resume reports nothing discarded.
	for len(evs) > 0 {
		if ev := <-evs; strings.Contains(ev.Message, "discarded") {
			t.Errorf("a normal resume says %q", ev.Message)
		}
	}
}

// With an interval the task is asked for checkpoints while it runs, and
// each commit says so.
func TestCheckpointInterval(t *testing.T) {
	e := newEnv(t)
	d := e.plugin()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	evs, _ := d.TaskEvents(ctx)
	cfg := e.checkpointTask(withCheckpoint(func(c *CheckpointConfig) { c.Interval = time.Second }))
	if _, _, err := d.StartTask(cfg); err != nil {
		t.Fatal(err)
	}
	defer destroyTask(t, d, cfg.ID)
	deadline := time.After(20 * time.Second)
	for commits := 0; commits < 2; {
		select {
		case ev := <-evs:
			if ev.Annotations[contract.EventDetailCheckpoint] == contract.CheckpointCommitted {
				if ev.Annotations["trigger"] != "interval" {
					t.Fatalf("commit %q: want trigger interval", ev.Message)
				}
				commits++
			}
		case <-deadline:
			t.Fatal("no two interval commits in 20s")
		}
	}
	stopTask(t, d, cfg.ID, 5*time.Second, "SIGINT")
	wait(t, d, cfg.ID, 20*time.Second)
}

// A stop that comes while the task answers an interval's request does not
// ask again: a second request would have the task write its next
// checkpoint into the staging directory while the driver takes the first,
// tearing it. That first checkpoint ends the stop.
func TestCheckpointOneRequestAtATime(t *testing.T) {
	e := newEnv(t)
	d := e.plugin()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	evs, _ := d.TaskEvents(ctx)
	cfg := e.checkpointTask(withCheckpoint(func(c *CheckpointConfig) { c.Interval = time.Second }))
	// It answers each request two seconds after it, and notes each.
	cfg.DriverConfig.(*TaskConfig).Args = []string{"-c", `trap 'echo x >> "$NOMAD_TASK_DIR/asked"; sleep 2; echo 7 > "$NOMAD_GPU_CHECKPOINT_DIR/count"; : > "$NOMAD_GPU_CHECKPOINT_COMMIT"' USR1
trap 'exit 0' INT TERM
while :; do sleep 0.02; done`}
	if _, _, err := d.StartTask(cfg); err != nil {
		t.Fatal(err)
	}
	defer destroyTask(t, d, cfg.ID)
	asked := filepath.Join(cfg.Env["NOMAD_TASK_DIR"], "asked")
	eventually(t, "the interval's request", func() bool { _, err := os.Stat(asked); return err == nil })
	stopTask(t, d, cfg.ID, 10*time.Second, "SIGINT")
	wait(t, d, cfg.ID, 20*time.Second)
	if b, _ := os.ReadFile(asked); string(b) != "x\n" {
		t.Errorf("the task was asked %d times, want once (the interval's)", strings.Count(string(b), "x"))
	}
	var pending, committed bool
	for timeout := time.After(10 * time.Second); !pending || !committed; {
		select {
		case ev := <-evs:
			pending = pending || ev.Annotations[contract.EventDetailCheckpoint] == contract.CheckpointPending
			committed = committed || ev.Annotations[contract.EventDetailCheckpoint] == contract.CheckpointCommitted
			continue
		case <-timeout:
		}
		break
	}
	if !pending || !committed {
		t.Errorf("events: the stop waited for the earlier request %v, a commit %v; want both", pending, committed)
	}
}

// A commit_timeout longer than the stop's kill_timeout gives a task that
// never commits the kill_timeout only, and the task's events say so.
func TestCheckpointCommitTimeoutCappedByKillTimeout(t *testing.T) {
	e := newEnv(t)
	d := e.plugin()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	evs, _ := d.TaskEvents(ctx)

	// Asked for a checkpoint, it carries on and never commits.
	cfg := e.checkpointTask(withCheckpoint(func(c *CheckpointConfig) { c.CommitTimeout = time.Hour }))
	cfg.DriverConfig.(*TaskConfig).Args = []string{"-c", `trap '' USR1; : > "$NOMAD_TASK_DIR/ready"; while :; do sleep 0.02; done`}
	if _, _, err := d.StartTask(cfg); err != nil {
		t.Fatal(err)
	}
	defer destroyTask(t, d, cfg.ID)
	eventually(t, "task ready", func() bool { _, err := os.Stat(filepath.Join(cfg.Env["NOMAD_TASK_DIR"], "ready")); return err == nil })

	stopped := make(chan error, 1)
	go func() { stopped <- d.StopTask(cfg.ID, time.Second, "SIGINT") }()
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("StopTask with kill_timeout 1s still waiting after 30s: it waits out commit_timeout 1h")
	}
	wait(t, d, cfg.ID, 20*time.Second)

	var msgs []string
	var notCommitted *drivers.TaskEvent
	for len(evs) > 0 {
		ev := <-evs
		msgs = append(msgs, ev.Message)
		if strings.HasPrefix(ev.Message, "checkpoint not committed") {
			notCommitted = ev
		}
	}
	all := strings.Join(msgs, "\n")
	for _, want := range []string{
		"checkpoint: commit_timeout 1h0m0s is longer than the task's kill_timeout 1s, so the task gets 1s to commit; set kill_timeout above commit_timeout",
		"checkpoint requested (stop): SIGUSR1, 1s to commit",
		"checkpoint not committed within 1s; stopping the task",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("events:\n%s\nwant %q", all, want)
		}
	}
	if notCommitted == nil || notCommitted.Annotations[contract.EventDetailCheckpoint] != contract.CheckpointTimeout || notCommitted.Annotations[contract.EventDetailTrigger] != "stop" {
		t.Errorf("not-committed event %+v: want annotations checkpoint=failed trigger=stop", notCommitted)
	}
}

// A task that does not handle the checkpoint signal (yet: a preemption may
// come while it is still starting) is not sent it, since its default
// action would kill it there and then, before its kill_signal and with
// nothing committed: it is stopped by its kill_signal, and an event says
// why there was no checkpoint.
func TestCheckpointSignalNotSentToTaskNotHandlingIt(t *testing.T) {
	e := newEnv(t)
	d := e.plugin()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	evs, _ := d.TaskEvents(ctx)
	cfg := e.checkpointTask(withCheckpoint(func(c *CheckpointConfig) { c.CommitTimeout = time.Hour }))
	cfg.DriverConfig.(*TaskConfig).Args = []string{"-c", `trap 'echo stopped > "$NOMAD_TASK_DIR/stopped"; exit 0' INT; : > "$NOMAD_TASK_DIR/ready"; while :; do sleep 0.02; done`}
	if _, _, err := d.StartTask(cfg); err != nil {
		t.Fatal(err)
	}
	defer destroyTask(t, d, cfg.ID)
	eventually(t, "task ready", func() bool { _, err := os.Stat(filepath.Join(cfg.Env["NOMAD_TASK_DIR"], "ready")); return err == nil })

	start := time.Now()
	stopTask(t, d, cfg.ID, 10*time.Second, "SIGINT")
	res := wait(t, d, cfg.ID, 20*time.Second)
	if res.Signal != 0 || res.ExitCode != 0 {
		t.Errorf("exit %+v: want 0 from its SIGINT trap, not killed by the checkpoint signal", res)
	}
	if _, err := os.Stat(filepath.Join(cfg.Env["NOMAD_TASK_DIR"], "stopped")); err != nil {
		t.Errorf("its kill_signal trap did not run: %v", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("stop took %s: it waited for a commit nobody was asked for", took)
	}
	var msgs []string
	for len(evs) > 0 {
		msgs = append(msgs, (<-evs).Message)
	}
	all := strings.Join(msgs, "\n")
	if !strings.Contains(all, "checkpoint not requested (stop): the task does not handle SIGUSR1") || strings.Contains(all, "checkpoint requested") {
		t.Errorf("events %q: want the checkpoint not requested, and why", msgs)
	}
}

// A stopping task's CPU weight is raised to the kernel's default while it
// commits: asked for 10 MHz, its handler would share that sliver with its
// own work on a busy host and could miss the commit timeout.
func TestCheckpointStopRaisesCPUWeight(t *testing.T) {
	if cgroups.Detect() == cgroups.None {
		testenv.Skip(t, testenv.Cgroups, "driver: no cgroup hierarchy to create the task's group in")
	}
	e := newEnv(t)
	d := e.plugin()
	// The handler says it was asked, then commits once the test lets it.
	cfg, dir := e.startHandler(t, d, `touch "$NOMAD_TASK_DIR/asked"; while [ ! -e "$NOMAD_TASK_DIR/go" ]; do sleep 0.02; done; : > "$NOMAD_GPU_CHECKPOINT_COMMIT"`,
		func(cfg *drivers.TaskConfig) { cfg.Resources.CPUShares, cfg.Resources.Linux.CPUShares = 10, 10 })
	weight := func() string {
		for _, dir := range d.store.get(cfg.ID).group.Paths() {
			for _, file := range []string{"cpu.shares", "cpu.weight"} {
				if b, err := os.ReadFile(filepath.Join(dir, file)); err == nil {
					return strings.TrimSpace(string(b))
				}
			}
		}
		t.Fatal("the task's group has no cpu.shares or cpu.weight")
		return ""
	}
	if w := weight(); w != "10" && w != "1" {
		t.Fatalf("the task's weight before its stop: %s, want its ask (10 shares)", w)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- d.StopTask(cfg.ID, 10*time.Second, "SIGINT") }()
	eventually(t, "asked", func() bool { _, err := os.Stat(filepath.Join(dir, "asked")); return err == nil })
	if w := weight(); w != "1024" && w != "100" {
		t.Errorf("the task's weight while it commits: %s, want the default (1024 shares, or weight 100)", w)
	}
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
}

// Two requests racing (an interval's tick and a stop's, each past its own
// check) signal the task once: the second finds the first claimed and
// waits for its checkpoint. Twice, the handler would run again while the
// driver takes the first checkpoint.
func TestCheckpointRacingRequestsSignalOnce(t *testing.T) {
	e := newEnv(t)
	d := e.plugin()
	cfg, dir := e.startHandler(t, d, `echo x >> "$NOMAD_TASK_DIR/asked"; sleep 1; echo 7 > "$NOMAD_GPU_CHECKPOINT_DIR/count"; : > "$NOMAD_GPU_CHECKPOINT_COMMIT"`, nil)
	ck := d.store.get(cfg.ID).ckpt
	start := make(chan struct{})
	done := make(chan bool, 2)
	for _, trigger := range []string{"interval", "stop"} {
		go func() { <-start; done <- ck.request(trigger, 10*time.Second) }()
	}
	close(start)
	for range 2 {
		if !<-done {
			t.Error("a request was not asked")
		}
	}
	eventually(t, "the commit", func() bool { return ckCommits(ck) > 0 })
	time.Sleep(1500 * time.Millisecond) // a second handler would have begun by now
	if b, _ := os.ReadFile(filepath.Join(dir, "asked")); string(b) != "x\n" {
		t.Errorf("the task was signalled %d times, want once", strings.Count(string(b), "x"))
	}
}

// ckCommits is how many checkpoints ck committed.
func ckCommits(ck *checkpointer) int {
	ck.mu.Lock()
	defer ck.mu.Unlock()
	return ck.commits
}

// startHandler starts a checkpointing task (checkpointTask's job, the
// default checkpoint block, changed by adjust where not nil) whose shell
// runs handler on SIGUSR1 and exits on SIGINT or SIGTERM, and waits until
// it runs; it returns the task's config and task dir.
func (e *env) startHandler(t *testing.T, d *Driver, handler string, adjust func(*drivers.TaskConfig)) (*drivers.TaskConfig, string) {
	t.Helper()
	cfg := e.checkpointTask(defaultCheckpoint())
	cfg.DriverConfig.(*TaskConfig).Args = []string{"-c", "trap '" + handler + `' USR1
trap 'exit 0' INT TERM
touch "$NOMAD_TASK_DIR/ready"
while :; do sleep 0.02; done`}
	if adjust != nil {
		adjust(cfg)
	}
	if _, _, err := d.StartTask(cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { destroyTask(t, d, cfg.ID) })
	dir := cfg.Env["NOMAD_TASK_DIR"]
	eventually(t, "ready", func() bool { _, err := os.Stat(filepath.Join(dir, "ready")); return err == nil })
	return cfg, dir
}
