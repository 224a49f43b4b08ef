package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/gpu/sim"
)

func init() {
	register("sim-load", command{
		summary: "put simulated work on a sim node's GPUs, MIG instances or MPS shares (a sleep that shows)",
		run:     runSimLoad,
	})
}

// simLoadUsage documents `nomad-gpu sim-load`.
//
// sim-load is for nodes whose device plugin and task driver use the "sim"
// GPU backend with a sim.control_file. It writes a load record (package
// gpu/sim, LoadRecord) into the node's load directory, <control_file>.load
// (made mode 1777 by the device plugin's Reserve, or by sim-load itself when
// given --load-dir and its parent exists),
// refreshes it every 2 seconds, and removes it when it ends: at --duration,
// or when it gets SIGINT, SIGTERM or SIGHUP (it then exits 0). A killed
// sim-load's load ends at once anyway: readers see that its lock file is no
// longer held. Every sim node process reading that directory (device plugin,
// task driver) then reports the work through NVML within its control poll
// period (250ms): utilisation, memory used, power, temperature, SM clock, and
// the process (by host pid) on each device.
//
// Inside a Nomad task the device plugin sets NOMAD_GPU_SIM_LOAD_DIR and
// CUDA_VISIBLE_DEVICES, and the gpu task driver lets the task write to the
// directory under Landlock, so `nomad-gpu sim-load --util 80 --memory 20GiB
// --duration 5m` loads exactly the task's devices. For an MPS client
// (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE = T) --util is of its share of the
// SMs, so the GPU sees util×T/100; --memory may not exceed its
// CUDA_MPS_PINNED_DEVICE_MEM_LIMIT, and a percentage is of that limit.
// Outside Nomad, e.g. for demos, pass --load-dir and --devices.
const simLoadUsage = `usage: nomad-gpu sim-load [flags]

Puts simulated work on the devices of a simulated GPU node (backend "sim"
with a sim.control_file), so that their utilisation, memory, power and
temperature follow it. Use it in jobs where a real workload would run,
instead of sleep. It runs until --duration is over or it is stopped
(SIGINT, SIGTERM, SIGHUP), and exits 0 either way.

Flags:
  --util PCT        SM utilisation, 0 to 100, of each device (default 100).
                    On a MIG instance its parent GPU sees PCT x slices/7; an
                    MPS client's is of its CUDA_MPS_ACTIVE_THREAD_PERCENTAGE.
  --mem-util PCT    memory bandwidth utilisation, 0 to 100 (default: half
                    of --util)
  --memory SIZE     GPU memory to hold on each device: K, M, G or T (powers
                    of 1024, optionally followed by B or iB, e.g. 20GiB,
                    512M, 1.5G), or a percent of each device's memory (50%;
                    of the pinned limit for an MPS client). Default 0.
  --duration D      how long, e.g. 90s, 5m, 1h30m, or seconds (120);
                    0 (default) runs until stopped
  --ramp D          utilisation rises linearly from 0 over D (memory is
                    held from the start); default 0
  --devices LIST    comma-separated GPU- and MIG- UUIDs; default: the
                    task's CUDA_VISIBLE_DEVICES, else NVIDIA_VISIBLE_DEVICES
  --load-dir DIR    the node's load directory, <sim.control_file>.load,
                    made if missing; default: $NOMAD_GPU_SIM_LOAD_DIR (set
                    in Nomad tasks)

Examples:
  nomad-gpu sim-load --util 90 --memory 60GiB --duration 10m --ramp 30s
  nomad-gpu sim-load --load-dir /var/lib/nomad-gpu/sim.json.load \
      --devices GPU-1c0d...,MIG-6a2f... --util 50 --memory 50%
`

// simLoadOpts are the parsed flags.
type simLoadOpts struct {
	util, memUtil float64
	memBytes      uint64
	memPercent    float64
	duration      time.Duration
	ramp          time.Duration
	devices       []string
	devicesFrom   string // the flag or variable the devices came from
	loadDir       string
	loadDirFlag   bool // given as --load-dir, not from the environment
}

// errUsage is a usage error already reported.
var errUsage = errors.New("usage")

func runSimLoad(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	return simLoad(ctx, args, os.Getenv, stdout, stderr)
}

func simLoad(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	opts, err := parseSimLoad(args, getenv, stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	case err != nil:
		fmt.Fprintf(stderr, "nomad-gpu sim-load: %v\n", err)
		return 2
	}
	rec, lines, err := planSimLoad(opts, getenv)
	if err != nil {
		fmt.Fprintf(stderr, "nomad-gpu sim-load: %v\n", err)
		return 2
	}
	if opts.loadDirFlag {
		// Outside Nomad nobody may have made it yet (the device plugin does
		// when it reserves devices for a task); its parent must exist.
		if _, err := os.Stat(opts.loadDir); errors.Is(err, fs.ErrNotExist) {
			if err := sim.PrepareLoadDir(opts.loadDir); err != nil {
				fmt.Fprintf(stderr, "nomad-gpu sim-load: --load-dir: %v%s\n", err, loadDirHint(err, opts.loadDir))
				return 1
			}
			fmt.Fprintf(stdout, "sim-load: made the load directory %s\n", opts.loadDir)
		}
	}
	start := time.Now()
	rec.Start = start
	if opts.duration > 0 {
		rec.Until = start.Add(opts.duration)
	}
	w, err := sim.StartLoad(opts.loadDir, rec)
	if err != nil {
		fmt.Fprintf(stderr, "nomad-gpu sim-load: %v%s\n", err, loadDirHint(err, opts.loadDir))
		return 1
	}
	defer w.Close()
	how := "until stopped"
	if opts.duration > 0 {
		how = "for " + opts.duration.String()
	}
	if opts.ramp > 0 {
		how += ", ramping up over " + opts.ramp.String()
	}
	fmt.Fprintf(stdout, "sim-load: %s (record %s)\n", how, w.Path())
	for _, l := range lines {
		fmt.Fprintf(stdout, "sim-load:   %s\n", l)
	}

	var end <-chan time.Time
	if opts.duration > 0 {
		t := time.NewTimer(time.Until(rec.Until))
		defer t.Stop()
		end = t.C
	}
	beat := time.NewTicker(sim.DefaultLoadHeartbeat)
	defer beat.Stop()
	for {
		select {
		case <-ctx.Done():
			fmt.Fprintf(stdout, "sim-load: stopped after %s\n", time.Since(start).Round(time.Millisecond))
			return closeLoad(w, stderr)
		case <-end:
			fmt.Fprintf(stdout, "sim-load: done after %s\n", opts.duration)
			return closeLoad(w, stderr)
		case now := <-beat.C:
			if err := w.Refresh(now); err != nil {
				fmt.Fprintf(stderr, "nomad-gpu sim-load: cannot refresh the load record, so the node drops the load: %v\n", err)
				return 1
			}
		}
	}
}

func closeLoad(w *sim.LoadWriter, stderr io.Writer) int {
	if err := w.Close(); err != nil {
		fmt.Fprintf(stderr, "nomad-gpu sim-load: %v\n", err)
		return 1
	}
	return 0
}

// loadDirHint says what usually causes a load directory error.
func loadDirHint(err error, dir string) string {
	ctl := strings.TrimSuffix(dir, ".load")
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Sprintf(" (the load directory is <sim.control_file>.load: is %s the node's control file, and, in a Nomad task, is the directory visible in the task's mount namespace?)", ctl)
	case errors.Is(err, fs.ErrPermission):
		return fmt.Sprintf(" (the directory should be mode 1777; in a Nomad task the gpu driver unveils it only if its own gpu.sim.control_file is %s, as the device plugin's)", ctl)
	}
	return ""
}

func parseSimLoad(args []string, getenv func(string) string, stderr io.Writer) (simLoadOpts, error) {
	fset := flag.NewFlagSet("sim-load", flag.ContinueOnError)
	fset.SetOutput(stderr)
	fset.Usage = func() { fmt.Fprint(stderr, simLoadUsage) }
	util := fset.String("util", "100", "")
	memUtil := fset.String("mem-util", "", "")
	memory := fset.String("memory", "0", "")
	duration := fset.String("duration", "0", "")
	ramp := fset.String("ramp", "0", "")
	devices := fset.String("devices", "", "")
	loadDir := fset.String("load-dir", "", "")
	if err := fset.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return simLoadOpts{}, err
		}
		return simLoadOpts{}, errUsage
	}
	if fset.NArg() > 0 {
		return simLoadOpts{}, fmt.Errorf("unexpected argument %q; sim-load takes flags only (e.g. --duration %s)", fset.Arg(0), fset.Arg(0))
	}
	var opts simLoadOpts
	var err error
	if opts.util, err = parsePercent("--util", *util); err != nil {
		return opts, err
	}
	opts.memUtil = opts.util / 2
	if *memUtil != "" {
		if opts.memUtil, err = parsePercent("--mem-util", *memUtil); err != nil {
			return opts, err
		}
	}
	if opts.memBytes, opts.memPercent, err = parseMemory(*memory); err != nil {
		return opts, err
	}
	if opts.duration, err = parseDuration("--duration", *duration); err != nil {
		return opts, err
	}
	if opts.ramp, err = parseDuration("--ramp", *ramp); err != nil {
		return opts, err
	}
	if opts.duration > 0 && opts.ramp > opts.duration {
		return opts, fmt.Errorf("--ramp: %s is longer than --duration %s", opts.ramp, opts.duration)
	}
	if opts.devices, opts.devicesFrom, err = targetDevices(*devices, getenv); err != nil {
		return opts, err
	}
	opts.loadDir, opts.loadDirFlag = *loadDir, *loadDir != ""
	if opts.loadDir == "" {
		opts.loadDir = getenv(sim.EnvLoadDir)
	}
	if opts.loadDir == "" {
		return opts, fmt.Errorf("--load-dir: not given and %s is not set; in a Nomad task the device plugin sets it on a sim node with a sim.control_file, elsewhere pass the node's <control_file>.load", sim.EnvLoadDir)
	}
	opts.loadDir = filepath.Clean(opts.loadDir)
	return opts, nil
}

func parsePercent(flagName, s string) (float64, error) {
	v, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(s), "%"), 64)
	if err != nil || math.IsNaN(v) {
		return 0, fmt.Errorf("%s: %q is not a number; allowed: 0 to 100 (percent)", flagName, s)
	}
	if v < 0 || v > 100 {
		return 0, fmt.Errorf("%s: %v is out of range; allowed: 0 to 100 (percent)", flagName, v)
	}
	return v, nil
}

// parseDuration takes Go durations and, like sleep, bare seconds.
func parseDuration(flagName, s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	var d time.Duration
	if secs, err := strconv.ParseFloat(s, 64); err == nil && !math.IsNaN(secs) && !math.IsInf(secs, 0) {
		if math.Abs(secs) > math.MaxInt64/float64(time.Second) {
			return 0, fmt.Errorf("%s: %q is too long", flagName, s)
		}
		d = time.Duration(secs * float64(time.Second))
	} else if d, err = time.ParseDuration(s); err != nil {
		return 0, fmt.Errorf("%s: %q is not a duration; use e.g. 90s, 5m, 1h30m or a number of seconds", flagName, s)
	}
	if d < 0 {
		return 0, fmt.Errorf("%s: %s is negative; use 0 for none", flagName, d)
	}
	return d, nil
}

const memoryHelp = "use K, M, G or T (powers of 1024, e.g. 20GiB, 512M, 1.5G) or a percent of each device's memory (e.g. 50%)"

// parseMemory reads --memory: a size or a percentage.
func parseMemory(s string) (bytes uint64, percent float64, err error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "0" {
		return 0, 0, nil
	}
	if p, ok := strings.CutSuffix(s, "%"); ok {
		v, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
		if err != nil || math.IsNaN(v) || v <= 0 || v > 100 {
			return 0, 0, fmt.Errorf("--memory: %q: a percentage must be above 0 and at most 100", s)
		}
		return 0, v, nil
	}
	i := 0
	for i < len(s) && (s[i] >= '0' && s[i] <= '9' || s[i] == '.') {
		i++
	}
	num, unit := s[:i], strings.ToUpper(strings.TrimSpace(s[i:]))
	v, perr := strconv.ParseFloat(num, 64)
	if i == 0 || perr != nil {
		return 0, 0, fmt.Errorf("--memory: %q is not a size; %s", s, memoryHelp)
	}
	if unit == "" {
		return 0, 0, fmt.Errorf("--memory: %q has no unit; %s", s, memoryHelp)
	}
	mult := map[string]float64{"B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
	u := unit
	if u != "B" {
		u = strings.TrimSuffix(strings.TrimSuffix(u, "B"), "I")
	}
	m, ok := mult[u]
	if !ok {
		return 0, 0, fmt.Errorf("--memory: %q: unknown unit %q; %s", s, unit, memoryHelp)
	}
	b := v * m
	if b >= 1<<60 {
		return 0, 0, fmt.Errorf("--memory: %q is larger than any GPU", s)
	}
	return uint64(b), 0, nil
}

// targetDevices is --devices, or the task's visible devices.
func targetDevices(flagValue string, getenv func(string) string) ([]string, string, error) {
	from, list := "--devices", flagValue
	if strings.TrimSpace(list) == "" {
		for _, env := range []string{contract.EnvCUDAVisibleDevices, contract.EnvNvidiaVisibleDevices} {
			if v := getenv(env); strings.TrimSpace(v) != "" {
				from, list = env, v
				break
			}
		}
	}
	devices := contract.SplitList(list)
	if len(devices) == 0 {
		return nil, "", fmt.Errorf("--devices: none given, and neither %s nor %s names a device; run in a Nomad task that holds GPUs, or pass --devices GPU-…,MIG-…",
			contract.EnvCUDAVisibleDevices, contract.EnvNvidiaVisibleDevices)
	}
	seen := map[string]bool{}
	for _, d := range devices {
		if !strings.HasPrefix(d, "GPU-") && !strings.HasPrefix(d, "MIG-") {
			hint := ""
			if from != "--devices" {
				hint = "; pass --devices"
			}
			return nil, "", fmt.Errorf("%s: %q is not a GPU- or MIG- UUID (sim-load needs UUIDs, as the device plugin sets them)%s", from, d, hint)
		}
		if seen[d] {
			return nil, "", fmt.Errorf("%s: %s is listed twice", from, d)
		}
		seen[d] = true
	}
	return devices, from, nil
}

// planSimLoad turns the options into a record, applying an MPS client's
// limits to the devices CUDA sees, and describes each device's load.
func planSimLoad(opts simLoadOpts, getenv func(string) string) (sim.LoadRecord, []string, error) {
	rec := sim.LoadRecord{RampMS: opts.ramp.Milliseconds()}
	visible := contract.SplitList(getenv(contract.EnvCUDAVisibleDevices))
	if len(visible) == 0 {
		visible = contract.SplitList(getenv(contract.EnvNvidiaVisibleDevices))
	}
	threads := 0.0
	if v := strings.TrimSpace(getenv(contract.EnvMPSThreadPercentage)); v != "" {
		t, err := strconv.ParseFloat(v, 64)
		if err != nil || math.IsNaN(t) || t <= 0 || t > 100 {
			return rec, nil, fmt.Errorf("%s: %q is not a percentage above 0 and at most 100", contract.EnvMPSThreadPercentage, v)
		}
		threads = t
	}
	pinned, err := contract.ParsePinnedMemLimit(getenv(contract.EnvMPSPinnedMemLimit))
	if err != nil {
		return rec, nil, err
	}
	var lines []string
	for _, uuid := range opts.devices {
		e := sim.DeviceLoad{UUID: uuid, UtilPercent: opts.util, MemUtilPercent: opts.memUtil, MemoryBytes: opts.memBytes, MemoryPercent: opts.memPercent}
		ord := indexOf(visible, uuid)
		line := fmt.Sprintf("%s: %s%% SMs, %s%% memory bandwidth", uuid, fmtPct(e.UtilPercent), fmtPct(e.MemUtilPercent))
		if threads > 0 && ord >= 0 {
			e.UtilPercent = opts.util * threads / 100
			e.MemUtilPercent = opts.memUtil * threads / 100
			line = fmt.Sprintf("%s: %s%% of an MPS client's %s%% of the SMs (%s%% of the GPU), %s%% memory bandwidth",
				uuid, fmtPct(opts.util), fmtPct(threads), fmtPct(e.UtilPercent), fmtPct(e.MemUtilPercent))
		}
		if limitMiB, ok := pinned[ord]; ok && ord >= 0 {
			limit := limitMiB << 20
			if e.MemoryPercent > 0 {
				e.MemoryBytes, e.MemoryPercent = uint64(e.MemoryPercent/100*float64(limit)), 0
			}
			if e.MemoryBytes > limit {
				return rec, nil, fmt.Errorf("--memory: %s is more than this MPS client may allocate on %s (%s gives CUDA device %d %d MiB)",
					fmtBytes(e.MemoryBytes), uuid, contract.EnvMPSPinnedMemLimit, ord, limitMiB)
			}
		}
		switch {
		case e.MemoryBytes > 0:
			line += ", " + fmtBytes(e.MemoryBytes)
		case e.MemoryPercent > 0:
			line += fmt.Sprintf(", %s%% of its memory", fmtPct(e.MemoryPercent))
		}
		rec.Devices = append(rec.Devices, e)
		lines = append(lines, line)
	}
	return rec, lines, nil
}

func indexOf(list []string, s string) int {
	for i, x := range list {
		if x == s {
			return i
		}
	}
	return -1
}

func fmtPct(v float64) string { return strconv.FormatFloat(math.Round(v*10)/10, 'f', -1, 64) }

func fmtBytes(b uint64) string {
	f := func(v float64, unit string) string {
		return strconv.FormatFloat(math.Round(v*100)/100, 'f', -1, 64) + " " + unit
	}
	switch {
	case b >= 1<<30:
		return f(float64(b)/(1<<30), "GiB")
	case b >= 1<<20:
		return f(float64(b)/(1<<20), "MiB")
	}
	return strconv.FormatUint(b, 10) + " B"
}
