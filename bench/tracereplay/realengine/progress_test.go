package realengine

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nomad-gpu/nomad-gpu/bench/tracereplay"
	"github.com/nomad-gpu/nomad-gpu/bench/tracereplay/figures"
	"github.com/nomad-gpu/nomad-gpu/driver/procfs"
	"github.com/nomad-gpu/nomad-gpu/e2e/harness"
)

// These tests need no cluster: they read task logs as the replay's
// record collector does.

// philly-81917 in the committed nomad-gpu replay (docs/bench-trace): run 1
// on gpu-5 committed 72025 ms of work when preempted; run 2 on gpu-7 was
// preempted 57 ms (wall) after its start and logged nothing at all (the
// checkpoint signal's default action killed its shell before its first
// line); run 3 on gpu-8 restored those same 72025 ms. Nothing was lost:
// read as "restored=-1", run 2's silence would count the whole 72 s
// checkpoint lost, 0.02 GPU-hours.
func TestReplayProgressUntoldRestoreIsUnknown(t *testing.T) {
	const compression = 25
	trace := func(d time.Duration) time.Duration { return d * compression }
	ms := func(n int64) time.Duration { return time.Duration(n) * time.Millisecond }
	runs := []tracereplay.Run{
		{Start: 4598854072025, End: 4671846555975, Preempted: true, Node: "gpu-5"},
		{Start: 4707855912775, End: 4709276204750, Preempted: true, Node: "gpu-7"},
		{Start: 4889417096050, End: 5240367336875, Preempted: true, Node: "gpu-8"},
		{Start: 7294645745500, End: 8604000000000, Open: true, Node: "gpu-9"},
	}
	logs := []string{
		"restored=0\nsim-load: for 4m0s (record x)\ncommitted=2881\n",
		"", // killed by SIGUSR1 before its first line
		"restored=2881\ncommitted=16901\n",
		"restored=16901\n",
	}
	for i := range runs {
		readProgress(logs[i], &runs[i], trace)
	}
	if r := runs[1]; r.ProgressKnown {
		t.Errorf("run 2 logged no restored=, yet its progress is known: restored %s, reached %s", r.Restored, r.Reached)
	}
	if r := runs[2]; !r.ProgressKnown || r.Restored != trace(ms(2881)) || !r.Checkpointed || r.Saved != trace(ms(16901)) {
		t.Errorf("run 3 = %+v, want restored %s, saved %s", r, trace(ms(2881)), trace(ms(16901)))
	}
	res := tracereplay.Result{Horizon: 8604 * time.Second, Jobs: []tracereplay.JobRecord{{
		ID: "philly-81917", Slice: tracereplay.Slice{Kind: "gpu", Count: 1, GPUs: 1}, Requested: 1, Runs: runs,
	}}}
	// Hand-computed: the preemptions of runs 1 and 2 count nothing, run
	// 2's restore being unknown; run 3 kept 422525 ms and run 4 restored
	// all of it. (Run 3 restoring run 1's 72025 ms shows nothing was
	// lost there either.)
	if f := figures.Compute(res, figures.Options{}); f.LostGPUHours != 0 || f.Preemptions != 3 {
		t.Errorf("lost %v GPU-hours over %d preemptions, want 0 over 3", f.LostGPUHours, f.Preemptions)
	}
}

// A log without stopped= (the task ended before it could say) takes the
// run's length as the work done since its restore.
func TestReplayProgressUntoldStop(t *testing.T) {
	trace := func(d time.Duration) time.Duration { return d * 25 }
	run := tracereplay.Run{Start: 100 * time.Second, End: 110 * time.Second, Preempted: true}
	readProgress("restored=1000\ncommitted=1300\nfinished=1301\n", &run, trace)
	if !run.ProgressKnown || run.Restored != 25*time.Second || run.Reached != 35*time.Second || run.Saved != 32500*time.Millisecond || run.StopGap != 0 {
		t.Errorf("run = %+v, want restored 25s, reached 35s, saved 32.5s, no stop gap", run)
	}
	run = tracereplay.Run{Start: 100 * time.Second, End: 110 * time.Second, Preempted: true}
	readProgress("restored=1000\ncommitted=1300\nstopped=1340\n", &run, trace)
	if run.Reached != 33500*time.Millisecond || run.StopGap != 40*time.Millisecond {
		t.Errorf("run = %+v, want reached 33.5s, stop gap 40ms", run)
	}
}

// The replay's task, asked for a checkpoint at any moment once it handles
// the signal (the driver asks no sooner; a preemption may follow its
// placement at once), commits and goes on working until it is stopped,
// and logs restored=, committed= and stopped=: the signal neither kills
// it, nor a child whose output it needs, nor ends its work.
func TestReplayTaskCheckpointsWhenAskedEarly(t *testing.T) {
	for _, after := range []time.Duration{0, time.Millisecond, 3 * time.Millisecond, 10 * time.Millisecond, 300 * time.Millisecond} {
		t.Run(after.String(), func(t *testing.T) {
			dir := t.TempDir()
			restore, staging := filepath.Join(dir, "restore"), filepath.Join(dir, "staging")
			for _, d := range []string{restore, staging} {
				if err := os.Mkdir(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.WriteFile(filepath.Join(restore, "done"), []byte("2881\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			commit := filepath.Join(staging, "COMMIT")
			cmd := exec.Command("/bin/sh", "-c", harness.ReplayTask(time.Minute, 50, "/bin/true"))
			cmd.Env = append(os.Environ(), "NOMAD_GPU_RESTORE_DIR="+restore, "NOMAD_GPU_CHECKPOINT_DIR="+staging, "NOMAD_GPU_CHECKPOINT_COMMIT="+commit)
			// A file, not a pipe: Wait must not wait for the children
			// left holding it (the driver kills those after the task).
			logf, err := os.Create(filepath.Join(dir, "log"))
			if err != nil {
				t.Fatal(err)
			}
			defer logf.Close()
			out := fileText(logf.Name())
			cmd.Stdout, cmd.Stderr = logf, logf
			// As the driver does: the task leads its own process group,
			// and signals go to the group.
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			group := -cmd.Process.Pid
			defer syscall.Kill(group, syscall.SIGKILL)
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Microsecond) {
				if d, _ := procfs.SignalDisposition(cmd.Process.Pid, syscall.SIGUSR1); d != procfs.SignalDefault {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the task does not handle SIGUSR1 10s after its start; it logged:\n%s", out.String())
				}
			}
			time.Sleep(after)
			syscall.Kill(group, syscall.SIGUSR1)
			deadline := time.Now().Add(10 * time.Second)
			for {
				if _, err := os.Stat(commit); err == nil {
					break
				}
				select {
				case err := <-exited:
					t.Fatalf("asked for a checkpoint %s after its start, the task exited (%v) without committing; it logged:\n%s", after, err, out.String())
				default:
				}
				if time.Now().After(deadline) {
					t.Fatalf("no commit 10s after the checkpoint signal; the task logged:\n%s", out.String())
				}
				time.Sleep(5 * time.Millisecond)
			}
			// The driver stops it once committed (kill_signal SIGINT).
			time.Sleep(50 * time.Millisecond)
			select {
			case err := <-exited:
				t.Fatalf("the task ended on its own (%v) after its commit, as if done; it logged:\n%s", err, out.String())
			default:
			}
			syscall.Kill(group, syscall.SIGINT)
			select {
			case err := <-exited:
				if err != nil {
					t.Errorf("stopped, the task exited with %v, want 0", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("the task did not stop within 10s of SIGINT; it logged:\n%s", out.String())
			}
			var run tracereplay.Run
			if !readProgress(out.String(), &run, func(d time.Duration) time.Duration { return d }) {
				t.Fatalf("the task logged no restore:\n%s", out.String())
			}
			if run.Restored != 2881*time.Millisecond || !run.Checkpointed || run.Saved < run.Restored || run.Reached < run.Saved {
				t.Errorf("restored %s, saved %s (%v), reached %s; want restored 2.881s <= saved <= reached; it logged:\n%s",
					run.Restored, run.Saved, run.Checkpointed, run.Reached, out.String())
			}
			if _, ok := harness.LogValue(out.String(), "stopped"); !ok {
				t.Errorf("no stopped= logged:\n%s", out.String())
			}
		})
	}
}

// fileText reads a file on each String.
type fileText string

func (f fileText) String() string {
	b, _ := os.ReadFile(string(f))
	return string(b)
}

// The replay's task, its work done, commits the whole count before it
// exits, as a training job saves its final weights: a replacement placed
// for it after all (Nomad may evict an allocation whose task has just
// exited) restores the end instead of redoing the job.
func TestReplayTaskCommitsItsEnd(t *testing.T) {
	dir := t.TempDir()
	staging := filepath.Join(dir, "staging")
	if err := os.Mkdir(staging, 0o755); err != nil {
		t.Fatal(err)
	}
	commit := filepath.Join(staging, "COMMIT")
	cmd := exec.Command("/bin/sh", "-c", harness.ReplayTask(300*time.Millisecond, 50, "/bin/true"))
	cmd.Env = append(os.Environ(), "NOMAD_GPU_CHECKPOINT_DIR="+staging, "NOMAD_GPU_CHECKPOINT_COMMIT="+commit)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the task failed: %v; it logged:\n%s", err, out)
	}
	done, err := os.ReadFile(filepath.Join(staging, "done"))
	if _, serr := os.Stat(commit); err != nil || serr != nil {
		t.Fatalf("no final commit (%v, %v); the task logged:\n%s", err, serr, out)
	}
	if n, _ := strconv.Atoi(strings.TrimSpace(string(done))); n < 300 || !strings.Contains(string(out), "committed=") {
		t.Errorf("committed %q; want the whole 300 ms; the task logged:\n%s", done, out)
	}
	// Without a checkpoint block (no checkpoint directory) it commits
	// nothing and exits 0.
	if out, err := exec.Command("/bin/sh", "-c", harness.ReplayTask(100*time.Millisecond, 50, "/bin/true")).CombinedOutput(); err != nil ||
		strings.Contains(string(out), "committed=") || !strings.Contains(string(out), "finished=") {
		t.Errorf("without checkpoints: %v; it logged:\n%s", err, out)
	}
}
