package driver

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nomad-gpu/nomad-gpu/driver/checkpoint"
	"github.com/nomad-gpu/nomad-gpu/driver/supervisor"
	"github.com/nomad-gpu/nomad-gpu/wire/drivers"
)

// gapScript checkpoints when asked and notes, with bash's microsecond
// clock, when it is about to create its commit marker and when its
// kill_signal reaches it: the time in between is work the task does for
// nothing, since the stop throws it away. Both go into one file from the
// kill_signal's trap, so nothing is written between the two. It waits in
// the `wait` builtin, which a trapped signal interrupts at once (a
// foreground sleep would hold the trap back until it ends).
const gapScript = `
trap 'echo x > "$NOMAD_GPU_CHECKPOINT_DIR/state"; t=$EPOCHREALTIME; : > "$NOMAD_GPU_CHECKPOINT_COMMIT"' USR1
trap 'echo "$t $EPOCHREALTIME" > "$NOMAD_TASK_DIR/gap"; exit 0' INT
: > "$NOMAD_TASK_DIR/ready"
while :; do sleep 5 & wait $!; done
`

// gapTask is a checkpointing task running gapScript under a key of its own.
func (e *env) gapTask(i int) *drivers.TaskConfig {
	cfg := e.checkpointTask(defaultCheckpoint())
	cfg.DriverConfig.(*TaskConfig).Command = "/bin/bash"
	cfg.DriverConfig.(*TaskConfig).Args = []string{"-c", gapScript}
	cfg.JobID = fmt.Sprintf("gap%d", i)
	// An ordinary process's CPU weight, not the tests' usual 100: on a
	// busy machine a starved task would time its own scheduling.
	cfg.Resources.CPUShares = 1024
	return cfg
}

// epoch is a time bash wrote as $EPOCHREALTIME (seconds.micros).
func epoch(s string) (time.Time, bool) {
	sec, frac, ok := strings.Cut(s, ".")
	n, err1 := strconv.ParseInt(sec, 10, 64)
	us, err2 := strconv.ParseInt(frac, 10, 64)
	if !ok || err1 != nil || err2 != nil || len(frac) != 6 {
		return time.Time{}, false
	}
	return time.Unix(n, us*1000), true
}

// readGap reads what gapScript noted: from its commit to its kill_signal.
func readGap(tb testing.TB, path string) time.Duration {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		tb.Fatalf("%s: %q: want the commit's time and the kill_signal's", path, b)
	}
	committed, ok1 := epoch(f[0])
	stopped, ok2 := epoch(f[1])
	if !ok1 || !ok2 {
		tb.Fatalf("%s: %q is no pair of $EPOCHREALTIME", path, b)
	}
	return stopped.Sub(committed)
}

// BenchmarkCommitToStopGap stops checkpointing tasks one at a time and
// reports how long each went on after it created its commit marker before
// its kill_signal arrived (the driver commits in between): the median and
// the 95th percentile over every stop, in milliseconds.
func BenchmarkCommitToStopGap(b *testing.B) {
	e := newEnv(b)
	d := e.plugin()
	// Starting a task costs far more than stopping it, so each op starts a
	// batch first and then stops its tasks one by one, alone.
	const batch = 40
	var gaps []time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		cfgs := make([]*drivers.TaskConfig, batch)
		for j := range cfgs {
			cfgs[j] = e.gapTask(i*batch + j)
			if _, _, err := d.StartTask(cfgs[j]); err != nil {
				b.Fatal(err)
			}
			e.reapOnCleanup(cfgs[j].ID)
		}
		for _, cfg := range cfgs {
			eventually(b, "task ready", func() bool {
				_, err := os.Stat(filepath.Join(cfg.Env["NOMAD_TASK_DIR"], "ready"))
				return err == nil
			})
		}
		b.StartTimer()
		for _, cfg := range cfgs {
			stopTask(b, d, cfg.ID, 10*time.Second, "SIGINT")
			wait(b, d, cfg.ID, 20*time.Second)
			gaps = append(gaps, readGap(b, filepath.Join(cfg.Env["NOMAD_TASK_DIR"], "gap")))
			destroyTask(b, d, cfg.ID)
		}
	}
	slices.Sort(gaps)
	pct := func(p float64) float64 {
		return float64(gaps[int(p*float64(len(gaps)-1))]) / float64(time.Millisecond)
	}
	b.ReportMetric(pct(0.50), "gap-p50-ms")
	b.ReportMetric(pct(0.95), "gap-p95-ms")
	b.ReportMetric(float64(len(gaps)), "stops")
}

// A stop's wait for the task's checkpoint is part of its kill_timeout, not
// added to it: the grace left to the kill_signal is the kill_timeout less
// everything before it. The task takes at least commitDelay to commit, or
// never does, so the grace has a bound known in advance, and no clock is
// read against a limit.
func TestCheckpointWaitCountsAgainstKillTimeout(t *testing.T) {
	const (
		killTimeout = 3 * time.Second
		commitDelay = time.Second
	)
	cases := []struct {
		name          string
		commitTimeout time.Duration
		onSignal      string // the checkpoint signal's trap
		maxGrace      time.Duration
		wantEvent     string
		// byTrap: it exits 0 from its kill_signal trap. With no grace left
		// it is killed, or may just manage the trap first.
		byTrap bool
	}{
		{"commits after a while", 2 * time.Second,
			`sleep 1; echo 1 > "$NOMAD_GPU_CHECKPOINT_DIR/state"; : > "$NOMAD_GPU_CHECKPOINT_COMMIT"`,
			killTimeout - commitDelay, "checkpoint committed: generation 1", true},
		{"never commits", time.Hour, `:`,
			0, "checkpoint not committed within 3s", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			d := e.plugin()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			evs, _ := d.TaskEvents(ctx)

			graces := make(chan time.Duration, 1)
			saved := killTree
			t.Cleanup(func() { killTree = saved })
			killTree = func(h *supervisor.Handle, ctx context.Context, grace time.Duration, sig syscall.Signal) error {
				graces <- grace
				return saved(h, ctx, grace, sig)
			}

			cfg := e.checkpointTask(withCheckpoint(func(c *CheckpointConfig) { c.CommitTimeout = tc.commitTimeout }))
			cfg.DriverConfig.(*TaskConfig).Args = []string{"-c", `trap '` + tc.onSignal + `' USR1; trap 'exit 0' INT; : > "$NOMAD_TASK_DIR/ready"; while :; do sleep 0.02; done`}
			if _, _, err := d.StartTask(cfg); err != nil {
				t.Fatal(err)
			}
			defer destroyTask(t, d, cfg.ID)
			eventually(t, "task ready", func() bool { _, err := os.Stat(filepath.Join(cfg.Env["NOMAD_TASK_DIR"], "ready")); return err == nil })

			stopTask(t, d, cfg.ID, killTimeout, "SIGINT")
			if res := wait(t, d, cfg.ID, 20*time.Second); tc.byTrap && (res.ExitCode != 0 || res.Signal != 0) {
				t.Errorf("exit %+v: want 0, from its kill_signal trap", res)
			}
			if grace := <-graces; grace > tc.maxGrace {
				t.Errorf("kill_signal given %s before the kill, kill_timeout %s: the checkpoint's wait (at least %s) was added to the kill_timeout",
					grace, killTimeout, killTimeout-tc.maxGrace)
			}
			var msgs []string
			for len(evs) > 0 {
				msgs = append(msgs, (<-evs).Message)
			}
			if all := strings.Join(msgs, "\n"); !strings.Contains(all, tc.wantEvent) {
				t.Errorf("events:\n%s\nwant %q", all, tc.wantEvent)
			}
		})
	}
}

// Where the driver has no inotify it looks for the marker, and a stop
// still commits the task's checkpoint before its kill_signal.
func TestCheckpointStopWithoutInotify(t *testing.T) {
	saved := newMarkers
	t.Cleanup(func() { newMarkers = saved })
	newMarkers = func() (*checkpoint.Markers, error) { return nil, syscall.ENOSYS }

	e := newEnv(t)
	d := e.plugin()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	evs, _ := d.TaskEvents(ctx)
	cfg := e.checkpointTask(defaultCheckpoint())
	if _, _, err := d.StartTask(cfg); err != nil {
		t.Fatal(err)
	}
	progress := filepath.Join(cfg.Env["NOMAD_TASK_DIR"], "progress")
	eventually(t, "progress", func() bool { b, _ := os.ReadFile(progress); return len(b) > 0 && string(b) != "1\n" })
	stopTask(t, d, cfg.ID, 10*time.Second, "SIGINT")
	if res := wait(t, d, cfg.ID, 20*time.Second); res.ExitCode != 0 || res.Signal != 0 {
		t.Errorf("exit %+v: want 0, from its kill_signal trap", res)
	}
	committed := readInt(t, filepath.Join(cfg.Env["NOMAD_TASK_DIR"], "committed"))
	destroyTask(t, d, cfg.ID)
	var msgs []string
	for len(evs) > 0 {
		msgs = append(msgs, (<-evs).Message)
	}
	// Committed before the kill_signal, not found only when the task had
	// exited after its stop gave up waiting.
	if all := strings.Join(msgs, "\n"); !strings.Contains(all, "checkpoint committed: generation 1") || strings.Contains(all, "not committed") {
		t.Errorf("events:\n%s\nwant generation 1 committed within the stop's wait", all)
	}
	if got, want := e.startRestored(t, d, defaultCheckpoint()), restoredLine(committed, 1); got != want {
		t.Errorf("next run %q, want %q", got, want)
	}
}
