package driver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nomad-gpu/nomad-gpu/wire/drivers"
)

const (
	churnTasks       = 200
	churnConcurrency = 8
	churnEnvKey      = "NGD_CHURN"
	// A few goroutines may outlive the settle loop without leaking: the
	// runtime's and the testing package's own come and go (timers, the
	// signal loop). A leak costs at least one per task, 200 here.
	churnGoroutineSlack = 3
	// Likewise fds: the runtime may keep an epoll or pipe fd it opened
	// lazily (netpoller, signal forwarding) during the churn.
	churnFDSlack = 2
)

// churnState is what tasks may leave behind in and around this process.
type churnState struct {
	goroutines, fds, pidFDs    int
	supervisors, tasks, zombie int
	stateDirs, cgroups         int
}

func (s churnState) String() string {
	return fmt.Sprintf("goroutines=%d fds=%d (pidfd=%d) supervisors=%d task_processes=%d zombies=%d state_dirs=%d cgroups=%d",
		s.goroutines, s.fds, s.pidFDs, s.supervisors, s.tasks, s.zombie, s.stateDirs, s.cgroups)
}

// 200 tasks through StartTask → (half exit on their own, half StopTask while
// running) → WaitTask → DestroyTask, 8 at a time, leave nothing behind.
func TestChurnLeavesNothing(t *testing.T) {
	// Supervisors are this test binary; built with -race, each would linger
	// a second after its task unless told not to (Start passes GORACE on).
	if _, ok := os.LookupEnv("GORACE"); !ok {
		t.Setenv("GORACE", "atexit_sleep_ms=0")
	}
	e := newEnv(t)
	e.cfg.CgroupRoot = fmt.Sprintf("nomad-gpu-churn-%d", os.Getpid())
	cgroupRoots := func() []string {
		dirs, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", e.cfg.CgroupRoot))
		return dirs
	}
	t.Cleanup(func() {
		for _, d := range cgroupRoots() {
			ents, _ := os.ReadDir(d)
			for _, en := range ents {
				if en.IsDir() {
					syscall.Rmdir(filepath.Join(d, en.Name()))
				}
			}
			syscall.Rmdir(d)
		}
	})
	b := make([]byte, 6)
	rand.Read(b)
	marker := hex.EncodeToString(b)
	d := e.plugin()
	stateTasks := filepath.Join(e.cfg.StateDir, "tasks")

	measure := func() churnState {
		s := churnState{goroutines: runtime.NumGoroutine()}
		fds, _ := os.ReadDir("/proc/self/fd")
		s.fds = len(fds)
		for _, fd := range fds {
			if target, _ := os.Readlink("/proc/self/fd/" + fd.Name()); target == "anon_inode:[pidfd]" {
				s.pidFDs++
			}
		}
		self := os.Getpid()
		ents, _ := os.ReadDir("/proc")
		for _, en := range ents {
			pid, err := strconv.Atoi(en.Name())
			if err != nil {
				continue
			}
			if stat, err := os.ReadFile("/proc/" + en.Name() + "/stat"); err == nil {
				st := string(stat)
				if i := strings.LastIndexByte(st, ')'); i > 0 {
					if f := strings.Fields(st[i+1:]); len(f) > 1 && f[0] == "Z" && f[1] == strconv.Itoa(self) {
						s.zombie++
					}
				}
			}
			if cmd, err := os.ReadFile("/proc/" + en.Name() + "/cmdline"); err == nil {
				argv := strings.Split(string(cmd), "\x00")
				if len(argv) >= 3 && argv[1] == "supervise" && strings.HasPrefix(argv[2], e.dir+"/") {
					s.supervisors++
				}
			}
			if env, err := os.ReadFile("/proc/" + en.Name() + "/environ"); err == nil && pid != self &&
				strings.Contains("\x00"+string(env), "\x00"+churnEnvKey+"="+marker+"\x00") {
				s.tasks++
			}
		}
		dirs, _ := os.ReadDir(stateTasks)
		s.stateDirs = len(dirs)
		for _, root := range cgroupRoots() {
			ents, _ := os.ReadDir(root)
			for _, en := range ents {
				if en.IsDir() {
					s.cgroups++
				}
			}
		}
		return s
	}

	// One task, start to destroy, before the baseline: the first StartTask
	// starts the driver's runtime (MPS manager, watchdog), which stays.
	// It also proves the probe sees what it counts.
	warm := e.taskConfig(&TaskConfig{Command: "/bin/sleep", Args: []string{"300"}}, nil)
	warm.Env[churnEnvKey] = marker
	if _, _, err := d.StartTask(warm); err != nil {
		t.Fatal(err)
	}
	if s := measure(); s.supervisors != 1 || s.tasks != 1 || s.stateDirs != 1 || s.cgroups == 0 || s.pidFDs == 0 {
		t.Fatalf("with one task running the probe sees %v", s)
	}
	if err := churnOne(d, warm, false, true); err != nil {
		t.Fatal(err)
	}
	base := churnSettle(measure, func(s churnState) bool { return s.supervisors+s.tasks+s.stateDirs+s.cgroups == 0 }, 10*time.Second)
	if base.supervisors+base.tasks+base.stateDirs+base.cgroups+base.zombie != 0 {
		t.Fatalf("the warm-up task left %v", base)
	}

	// Configs are made here: taskConfig is not safe for concurrent use.
	type job struct {
		cfg   *drivers.TaskConfig
		exits bool
	}
	jobs := make(chan job)
	start := time.Now()
	var wg sync.WaitGroup
	var peak churnState
	for w := 0; w < churnConcurrency; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				if err := churnOne(d, j.cfg, j.exits, false); err != nil {
					t.Errorf("task %s: %v", j.cfg.ID, err)
				}
			}
		}()
	}
	for i := 0; i < churnTasks; i++ {
		exits := i%2 == 0
		tc := &TaskConfig{Command: "/bin/sleep", Args: []string{"300"}}
		if exits {
			tc = &TaskConfig{Command: "/bin/sh", Args: []string{"-c", "exit 3"}}
		}
		cfg := e.taskConfig(tc, nil)
		cfg.Env[churnEnvKey] = marker
		jobs <- job{cfg: cfg, exits: exits}
		if i == churnTasks/2 {
			peak = measure() // shown in the summary line only
		}
	}
	close(jobs)
	wg.Wait()
	elapsed := time.Since(start)

	after := churnSettle(measure, func(s churnState) bool {
		return s.goroutines <= base.goroutines+churnGoroutineSlack && s.fds <= base.fds+churnFDSlack && s.pidFDs <= base.pidFDs &&
			s.supervisors+s.tasks+s.zombie+s.stateDirs+s.cgroups == 0
	}, 15*time.Second)
	t.Logf("churn: %d tasks (%d exited on their own, %d stopped while running), %d at a time, in %v; baseline {%v} mid-churn {%v} after {%v}",
		churnTasks, churnTasks/2, churnTasks/2, churnConcurrency, elapsed.Round(time.Millisecond), base, peak, after)
	check := func(what string, got, limit int) {
		if got > limit {
			t.Errorf("%s: %d after %d tasks (baseline allows %d)", what, got, churnTasks, limit)
		}
	}
	check("goroutines", after.goroutines, base.goroutines+churnGoroutineSlack)
	check("open fds", after.fds, base.fds+churnFDSlack)
	check("pidfds", after.pidFDs, base.pidFDs)
	check("supervisor processes", after.supervisors, 0)
	check("task processes", after.tasks, 0)
	check("zombie children", after.zombie, 0)
	check("state dirs", after.stateDirs, 0)
	check("cgroups", after.cgroups, 0)
	if t.Failed() {
		buf := make([]byte, 1<<20)
		t.Logf("goroutines:\n%s", buf[:runtime.Stack(buf, true)])
	}
}

// churnOne runs one task through its whole life (from StartTask unless it
// is already started): a task that exits is waited for, one that does not
// is stopped with SIGTERM while it runs; then it is destroyed.
func churnOne(d *Driver, cfg *drivers.TaskConfig, exits, started bool) error {
	if !started {
		if _, _, err := d.StartTask(cfg); err != nil {
			return fmt.Errorf("start: %w", err)
		}
	}
	if !exits {
		if err := d.StopTask(cfg.ID, 5*time.Second, "SIGTERM"); err != nil {
			return fmt.Errorf("stop: %w", err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ch, err := d.WaitTask(ctx, cfg.ID)
	if err != nil {
		return fmt.Errorf("wait: %w", err)
	}
	res, ok := <-ch
	if !ok || res == nil {
		return fmt.Errorf("did not exit within 30s")
	}
	switch {
	case exits && (res.ExitCode != 3 || res.Err != nil):
		return fmt.Errorf("exit %+v, want code 3", res)
	case !exits && (res.Signal != int(syscall.SIGTERM) || res.Err != nil):
		return fmt.Errorf("exit %+v, want SIGTERM", res)
	}
	if err := d.DestroyTask(cfg.ID, false); err != nil {
		return fmt.Errorf("destroy: %w", err)
	}
	return nil
}

// churnSettle measures until done holds or within passes, and returns the
// last measurement.
func churnSettle(measure func() churnState, done func(churnState) bool, within time.Duration) churnState {
	deadline := time.Now().Add(within)
	for {
		s := measure()
		if done(s) || time.Now().After(deadline) {
			return s
		}
		time.Sleep(50 * time.Millisecond)
	}
}
