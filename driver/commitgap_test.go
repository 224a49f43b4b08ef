package driver

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nomad-gpu/nomad-gpu/wire/drivers"
)

// gapScript checkpoints when asked and notes, with bash's microsecond
// clock, when it is about to create its commit marker and when its
// kill_signal reaches it: the time in between is work the task does for
// nothing, since the stop throws it away. It waits in the `wait` builtin,
// which a trapped signal interrupts at once (a foreground sleep would hold
// the trap back until it ends).
const gapScript = `
trap 'echo x > "$NOMAD_GPU_CHECKPOINT_DIR/state"; t=$EPOCHREALTIME; echo $t > "$NOMAD_TASK_DIR/committing"; : > "$NOMAD_GPU_CHECKPOINT_COMMIT"' USR1
trap 'echo $EPOCHREALTIME > "$NOMAD_TASK_DIR/stopped"; exit 0' INT
: > "$NOMAD_TASK_DIR/ready"
while :; do sleep 5 & wait $!; done
`

// gapTask is a checkpointing task running gapScript under a key of its own.
func (e *env) gapTask(i int) *drivers.TaskConfig {
	cfg := e.checkpointTask(defaultCheckpoint())
	cfg.DriverConfig.(*TaskConfig).Command = "/bin/bash"
	cfg.DriverConfig.(*TaskConfig).Args = []string{"-c", gapScript}
	cfg.JobID = fmt.Sprintf("gap%d", i)
	return cfg
}

// readEpoch reads a time bash wrote as $EPOCHREALTIME (seconds.micros).
func readEpoch(tb testing.TB, path string) time.Time {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	sec, frac, ok := strings.Cut(strings.TrimSpace(string(b)), ".")
	s, err1 := strconv.ParseInt(sec, 10, 64)
	us, err2 := strconv.ParseInt(frac, 10, 64)
	if !ok || err1 != nil || err2 != nil || len(frac) != 6 {
		tb.Fatalf("%s: %q is no $EPOCHREALTIME", path, b)
	}
	return time.Unix(s, us*1000)
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
			dir := cfg.Env["NOMAD_TASK_DIR"]
			gaps = append(gaps, readEpoch(b, filepath.Join(dir, "stopped")).Sub(readEpoch(b, filepath.Join(dir, "committing"))))
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
