package supervisor

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/nomad-gpu/nomad-gpu/driver/landlock"
	"github.com/nomad-gpu/nomad-gpu/internal/quantile"
	"github.com/nomad-gpu/nomad-gpu/internal/testenv"
)

// BenchmarkStartIsolation is Start, from the call until it returns with the
// task running, for a trivial task under each isolation step the driver can
// take, without Nomad's scheduling and hooks around it:
//
//	none          host namespaces, no Landlock (pid_mode = "host", landlock = "off")
//	pidns         private PID namespace: new mount namespace and /proc
//	pidns-mounts  that, plus what the driver mounts for a task holding no
//	              MPS share: MPS pipe root masked, private /dev/shm, /tmp bound
//	landlock      Landlock domain with rules shaped like the driver's, host namespaces
//	all           pidns-mounts and landlock (the driver's defaults)
//
// The starts run in rounds, each starting every variant once in an order
// that rotates round by round, so that load drifting on the box (other
// builds and tests) hits all variants alike; a variant the node cannot
// give is left out and said so. There are at least minRounds rounds
// whatever b.N is, more with a larger -benchtime: a second of starts is
// some 15 rounds, whose medians a busy box moves by as much as the steps
// cost. An op is one Start, so ns/op, B/op and allocs/op are a Start's
// mean over all variants (in this process: the plugin's side); the
// per-variant figures are medians over rounds, and "-minus-none" the
// median over rounds of the difference to none in the same round. The
// supervisor and shim are this test binary, larger than the real
// supervisor, which adds the same exec cost to every variant.
//
//	go test -run '^$' -bench StartIsolation ./driver/supervisor/
func BenchmarkStartIsolation(b *testing.B) {
	const minRounds = 40
	if os.Geteuid() != 0 {
		testenv.Skip(b, testenv.Root, "namespaces, mounts and Landlock need root")
	}
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	// Outside /tmp, as a production data_dir is: binding the task's tmp
	// dir over /tmp would otherwise hide the task's own directories.
	base, err := os.MkdirTemp("/var/tmp", "ngbench")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(base) })
	// A pipe root like an 8-GPU MPS node's, so the mask has entries to hide.
	pipeRoot := filepath.Join(base, "mps")
	for i := 0; i < 8; i++ {
		if err := os.MkdirAll(filepath.Join(pipeRoot, fmt.Sprintf("GPU-%08d", i)), 0o755); err != nil {
			b.Fatal(err)
		}
	}
	probe := ProbeIsolation(context.Background(), exe)

	type variant struct {
		name string
		iso  func(taskDir, allocDir string) Isolation
		ok   bool
	}
	mounts := func(taskDir string) Isolation {
		return Isolation{PrivatePID: true, Masks: []Mask{{Dir: pipeRoot}}, PrivateShm: true, TmpDir: filepath.Join(taskDir, "tmp")}
	}
	variants := []variant{
		{"none", func(string, string) Isolation { return Isolation{} }, true},
		{"pidns", func(string, string) Isolation { return Isolation{PrivatePID: true} }, probe.PIDNamespace},
		{"pidns-mounts", func(t, _ string) Isolation { return mounts(t) }, probe.PIDNamespace},
		{"landlock", func(t, a string) Isolation {
			return Isolation{Landlock: benchRules(t, a, false), LandlockOn: true}
		}, probe.LandlockABI > 0},
		{"all", func(t, a string) Isolation {
			iso := mounts(t)
			iso.Landlock, iso.LandlockOn = benchRules(t, a, true), true
			return iso
		}, probe.PIDNamespace && probe.LandlockABI > 0},
	}
	var run []variant
	var left []string
	for _, v := range variants {
		if v.ok {
			run = append(run, v)
		} else {
			left = append(left, v.name)
		}
	}
	if len(left) > 0 {
		b.Logf("left out (PID namespace: %q, Landlock: %q): %s", probe.PIDNamespaceError, probe.LandlockError, strings.Join(left, ", "))
	}

	specs := make([]Spec, len(run))
	for k, v := range run {
		taskDir, allocDir := filepath.Join(base, v.name, "task"), filepath.Join(base, v.name, "alloc")
		for _, d := range []string{filepath.Join(taskDir, "tmp"), allocDir} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				b.Fatal(err)
			}
		}
		specs[k] = Spec{
			TaskID:     "bench-" + v.name,
			Executable: exe,
			Command:    "/bin/sh",
			Args:       []string{"-c", "exit 0"},
			Env:        []string{"PATH=/usr/bin:/bin", "MARKER=" + marker},
			Dir:        taskDir,
			Isolation:  v.iso(taskDir, allocDir),
		}
	}

	lat := make([][]float64, len(run)) // ms, per variant, per round
	var total time.Duration
	var mallocs, bytes uint64
	var m0, m1 runtime.MemStats
	rounds := max(b.N, minRounds)
	b.ResetTimer()
	for i := 0; i < rounds; i++ {
		for j := range run {
			k := (i + j) % len(run)
			s := specs[k]
			s.StateDir = filepath.Join(base, "state", fmt.Sprintf("%s-%s-%d", marker, run[k].name, i))
			runtime.ReadMemStats(&m0)
			t0 := time.Now()
			h, err := Start(s)
			d := time.Since(t0)
			runtime.ReadMemStats(&m1)
			if err != nil {
				b.Fatalf("%s: Start: %v", run[k].name, err)
			}
			total += d
			mallocs += m1.Mallocs - m0.Mallocs
			bytes += m1.TotalAlloc - m0.TotalAlloc
			lat[k] = append(lat[k], float64(d)/float64(time.Millisecond))
			wctx, cancel := context.WithTimeout(context.Background(), waitLimit)
			st, err := h.Wait(wctx)
			cancel()
			if err != nil || !st.Successful() {
				b.Fatalf("%s: task ended %+v (%v)", run[k].name, st, err)
			}
			if err := h.Destroy(); err != nil {
				b.Fatalf("%s: Destroy: %v", run[k].name, err)
			}
		}
	}
	b.StopTimer()
	starts := float64(rounds * len(run))
	b.ReportMetric(float64(total.Nanoseconds())/starts, "ns/op")
	b.ReportMetric(float64(bytes)/starts, "B/op")
	b.ReportMetric(float64(mallocs)/starts, "allocs/op")

	var none []float64
	for k, v := range run {
		if v.name == "none" {
			none = lat[k]
		}
	}
	// One line per run: benchmark output is cut after ten lines, and Go
	// runs the function again for each b.N it tries.
	var line []string
	for k, v := range run {
		med := quantile.Of(lat[k], 0.5)
		b.ReportMetric(med, v.name+"-median-ms")
		b.ReportMetric(quantile.Of(lat[k], 0.9), v.name+"-p90-ms")
		if v.name == "none" || len(none) != len(lat[k]) {
			line = append(line, fmt.Sprintf("%s %.2f", v.name, med))
			continue
		}
		d := make([]float64, len(none))
		for i := range d {
			d[i] = lat[k][i] - none[i]
		}
		dm := quantile.Of(d, 0.5)
		b.ReportMetric(dm, v.name+"-minus-none-ms")
		line = append(line, fmt.Sprintf("%s %.2f (%+.2f)", v.name, med, dm))
	}
	b.Logf("%d rounds, Start → running, median ms (paired Δ vs none; load on the box may vary): %s", rounds, strings.Join(line, " | "))
}

// benchRules are shaped like the driver's for a task without GPUs: system
// directories, configuration and kernel views, device nodes, the task's own
// directories. Their number is what Landlock's cost grows with; paths this
// node lacks are skipped, as the driver's are.
func benchRules(taskDir, allocDir string, tmp bool) []landlock.Rule {
	var rules []landlock.Rule
	add := func(a landlock.Access, paths ...string) {
		for _, p := range paths {
			rules = append(rules, landlock.Rule{Path: p, Access: a})
		}
	}
	rw, rwx := landlock.Read|landlock.Write, landlock.Read|landlock.Write|landlock.Exec
	add(landlock.Read|landlock.Exec, "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
	add(landlock.Read, "/etc", "/proc", "/sys", "/run/systemd/resolve")
	add(rw, "/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty", "/dev/ptmx", "/dev/pts", "/dev/shm")
	add(rwx, taskDir, allocDir)
	if tmp {
		add(rwx, "/tmp")
	}
	return rules
}
