// Package gpuwatch measures the GPU memory each task uses, through NVML's
// per-process accounting, and acts on a task that goes over its slice's
// memory. Where its source also samples SM utilisation (UtilizationSource),
// it measures each task's utilisation of its slice in the same round.
//
// Neither MPS nor a whole process tree is bounded by the hardware: an MPS
// client's pinned-memory limit lives in its own environment and MIG
// instances cap memory per instance, not per task. The watchdog is the
// backstop that sees what was actually allocated. A task's processes are the
// host pids the driver gives it; NVML also reports host pids, so the two
// meet without translation.
package gpuwatch

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nomad-gpu/nomad-gpu/gpu"
)

// DefaultInterval is the watchdog's period when New is given none.
const DefaultInterval = 5 * time.Second

// Source lists the processes holding memory on a device;
// *gpu.Inventory is one.
type Source interface {
	Processes(uuid string) ([]gpu.Process, error)
}

// UtilizationSource is a Source that also samples SM utilisation;
// *gpu.Inventory is one. ProcessUtilization is each pid's SM percent of the
// device over the samples newer than since, failing with gpu.ErrNotSupported
// (wrapped) where the device does not sample it; Telemetry is then asked for
// the device's own utilisation. A Source that is not one measures memory
// only.
type UtilizationSource interface {
	Source
	ProcessUtilization(uuid string, since time.Time) (map[uint32]float64, error)
	Telemetry(uuid string) (gpu.Telemetry, error)
}

// Mode says what happens to a task over its limit.
type Mode string

const (
	// ModeKill reports the violation every round it lasts; the callback
	// kills the task (repeats let a kill that did not take be retried;
	// Violation.Repeat tells them apart).
	ModeKill Mode = "kill"
	// ModeWarn reports it once per episode: again only after usage has
	// come back within the limit and gone over once more.
	ModeWarn Mode = "warn"
	// ModeOff only measures.
	ModeOff Mode = "off"
)

// DefaultMode is what an empty mode means.
const DefaultMode = ModeKill

// ParseMode checks a configured mode; "" is DefaultMode.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case "":
		return DefaultMode, nil
	case ModeKill, ModeWarn, ModeOff:
		return m, nil
	}
	return "", fmt.Errorf("gpu memory watchdog mode %q: allowed: kill, warn, off", s)
}

// DeviceLimit is one device a task uses and its memory limit there. UUID is
// what NVML reports the task's processes on: the GPU- UUID for a whole GPU
// or an MPS share, the MIG- UUID for a MIG instance. LimitMiB 0 means
// measured only (a whole GPU is bounded by the hardware).
type DeviceLimit struct {
	UUID     string
	LimitMiB uint64
	// SharePercent is the slice's share of the device's SMs, what the
	// task's utilisation is measured against: an MPS client's
	// CUDA_MPS_ACTIVE_THREAD_PERCENTAGE (its shares' on that GPU, summed);
	// 100 for a whole GPU or a MIG instance, whose utilisation NVML reports
	// of the instance's own SMs. 0 is taken as 100.
	SharePercent float64
	// Shared says other tasks' processes may run on the device (MPS), so
	// the device's own utilisation is not the task's: where NVML samples no
	// per-process utilisation, the task's is then unknown.
	Shared bool
}

// share is SharePercent, 0 read as 100.
func (d DeviceLimit) share() float64 {
	if d.SharePercent <= 0 || d.SharePercent > 100 {
		return 100
	}
	return d.SharePercent
}

// Task is a task under watch.
type Task struct {
	ID      string
	Devices []DeviceLimit
	// Pids returns the task's host pids (its whole process tree); asked
	// once per round.
	Pids func() ([]int, error)
	Mode Mode
}

// Violation is a task over its limit on one device.
type Violation struct {
	TaskID   string
	UUID     string
	UsedMiB  uint64
	LimitMiB uint64
	Pids     []int // the task's pids holding memory on the device, sorted
	Mode     Mode
	// Repeat is set when the task was already over the limit on this
	// device in the previous round (kill mode reports every round).
	Repeat bool
}

// Watchdog measures tasks' GPU memory every interval. Its methods are safe
// for concurrent use.
type Watchdog struct {
	src         Source
	util        UtilizationSource // nil: src samples no utilisation
	interval    time.Duration
	log         hclog.Logger
	onViolation func(Violation)

	round sync.Mutex // one round at a time, so episodes are judged in order

	mu      sync.Mutex
	tasks   map[string]*watched
	gen     uint64
	devErrs map[string]string // last Processes error per device, to log changes only
	// utilErrs is the last utilisation sampling error per device, to log
	// changes only.
	utilErrs map[string]string
}

type watched struct {
	t     Task
	gen   uint64 // tells a re-added task from the one a round started with
	usage map[string]uint64
	over  map[string]bool
	util  map[string]float64 // of its slice, in percent; only devices measured in the last round
}

// New returns a watchdog over src. onViolation is called outside the
// watchdog's locks (it may call Remove) and may be nil. logger may be nil.
func New(src Source, interval time.Duration, logger hclog.Logger, onViolation func(Violation)) *Watchdog {
	if interval <= 0 {
		interval = DefaultInterval
	}
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	if onViolation == nil {
		onViolation = func(Violation) {}
	}
	us, _ := src.(UtilizationSource)
	return &Watchdog{
		src: src, util: us, interval: interval, log: logger, onViolation: onViolation,
		tasks: map[string]*watched{}, devErrs: map[string]string{}, utilErrs: map[string]string{},
	}
}

// Add starts watching a task, replacing any task with the same ID (and
// forgetting its figures). An empty Mode is DefaultMode; an unknown one
// warns and is logged.
func (w *Watchdog) Add(t Task) {
	if t.Mode == "" {
		t.Mode = DefaultMode
	}
	if _, err := ParseMode(string(t.Mode)); err != nil {
		w.log.Error("unknown watchdog mode; treating it as warn", "task", t.ID, "error", err)
		t.Mode = ModeWarn
	}
	t.Devices = slices.Clone(t.Devices)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.gen++
	w.tasks[t.ID] = &watched{t: t, gen: w.gen, usage: map[string]uint64{}, over: map[string]bool{}, util: map[string]float64{}}
}

// Remove stops watching a task.
func (w *Watchdog) Remove(taskID string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.tasks, taskID)
}

// Usage returns the task's last measured MiB per device UUID (0 for a
// device it holds no memory on), or nil before its first measurement.
func (w *Watchdog) Usage(taskID string) map[string]uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	t := w.tasks[taskID]
	if t == nil || len(t.usage) == 0 {
		return nil
	}
	out := make(map[string]uint64, len(t.usage))
	for k, v := range t.usage {
		out[k] = v
	}
	return out
}

// Utilization returns the task's utilisation of its slice on each device
// UUID, in percent (0 to 100), as the last round measured it: the SM
// percent of the device its own pids ran kernels on, over the slice's share
// of the device's SMs (DeviceLimit.SharePercent). A whole GPU or MIG
// instance whose NVML samples no per-process utilisation reports the
// device's own utilisation (the task holds it alone); an MPS share there,
// or a device that could not be sampled, is absent. Nil when nothing was
// measured (or the source samples no utilisation).
func (w *Watchdog) Utilization(taskID string) map[string]float64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	t := w.tasks[taskID]
	if t == nil || len(t.util) == 0 {
		return nil
	}
	out := make(map[string]float64, len(t.util))
	for k, v := range t.util {
		out[k] = v
	}
	return out
}

// Limits returns the task's memory limit in MiB per device UUID, for the
// devices that have one; nil for a task not watched.
func (w *Watchdog) Limits(taskID string) map[string]uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	t := w.tasks[taskID]
	if t == nil {
		return nil
	}
	out := map[string]uint64{}
	for _, d := range t.t.Devices {
		if d.LimitMiB > 0 {
			out[d.UUID] = d.LimitMiB
		}
	}
	return out
}

// Run checks every interval until ctx is done.
func (w *Watchdog) Run(ctx context.Context) {
	t := time.NewTicker(w.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			w.Check()
		}
	}
}

// Check runs one round: one Processes call per device any task uses (and,
// with a UtilizationSource, one ProcessUtilization call), then each task's
// sum over its own pids, then the callbacks.
func (w *Watchdog) Check() {
	w.round.Lock()
	defer w.round.Unlock()

	tasks := w.snapshotTasks()
	// NVML calls and the pid walks run without the lock: they can be slow
	// and Add/Remove must not wait on them.
	devices := devicesOf(tasks)
	procs := w.sampleDevices(devices)
	utils := w.sampleUtilization(devices, time.Now())
	results := make([]*measured, len(tasks))
	for i, s := range tasks {
		results[i] = w.measure(s.t, procs, utils)
	}
	w.report(w.judge(tasks, results))
}

// taskSnapshot is a task as a round started with it.
type taskSnapshot struct {
	t   Task
	gen uint64
}

// measured is one task's usage in a round, by device UUID, with the task's
// pids holding that memory.
type measured struct {
	used map[string]uint64
	pids map[string][]int
	util map[string]float64
}

// snapshotTasks copies the watched tasks, sorted by ID.
func (w *Watchdog) snapshotTasks() []taskSnapshot {
	w.mu.Lock()
	tasks := make([]taskSnapshot, 0, len(w.tasks))
	for _, t := range w.tasks {
		tasks = append(tasks, taskSnapshot{t.t, t.gen})
	}
	w.mu.Unlock()
	slices.SortFunc(tasks, func(a, b taskSnapshot) int { return cmp.Compare(a.t.ID, b.t.ID) })
	return tasks
}

// devicesOf lists each device the tasks use once, in order of first use.
func devicesOf(tasks []taskSnapshot) []string {
	var devices []string
	for _, s := range tasks {
		for _, d := range s.t.Devices {
			if !slices.Contains(devices, d.UUID) {
				devices = append(devices, d.UUID)
			}
		}
	}
	return devices
}

// sampleDevices asks the source once per device for the MiB each pid holds
// there. A device whose processes cannot be listed is left out.
func (w *Watchdog) sampleDevices(devices []string) map[string]map[int]uint64 {
	procs := make(map[string]map[int]uint64, len(devices))
	for _, uuid := range devices {
		ps, err := w.src.Processes(uuid)
		w.noteDeviceError(uuid, err)
		if err != nil {
			continue
		}
		m := make(map[int]uint64, len(ps))
		for _, p := range ps {
			m[int(p.PID)] += p.UsedMiB
		}
		procs[uuid] = m
	}
	return procs
}

// deviceUtil is one device's utilisation samples in a round: per pid where
// NVML samples it, else (perPID nil) the device's own, if known.
type deviceUtil struct {
	perPID map[int]float64
	device *float64
}

// sampleUtilization asks the source once per device for each pid's SM
// utilisation since one interval ago; where the device samples none, for
// the device's own. A device that cannot be sampled is left out.
func (w *Watchdog) sampleUtilization(devices []string, now time.Time) map[string]deviceUtil {
	if w.util == nil {
		return nil
	}
	out := make(map[string]deviceUtil, len(devices))
	for _, uuid := range devices {
		pu, err := w.util.ProcessUtilization(uuid, now.Add(-w.interval))
		if err == nil {
			m := make(map[int]float64, len(pu))
			for pid, pct := range pu {
				m[int(pid)] += pct
			}
			out[uuid] = deviceUtil{perPID: m}
			w.noteUtilError(uuid, nil)
			continue
		}
		if !errors.Is(err, gpu.ErrNotSupported) {
			w.noteUtilError(uuid, err)
			continue
		}
		t, terr := w.util.Telemetry(uuid)
		if terr != nil || t.GPUUtilPercent == nil {
			if terr == nil {
				terr = errors.New("the device reports no utilization either")
			}
			w.noteUtilError(uuid, fmt.Errorf("%w; %w", err, terr))
			continue
		}
		w.noteUtilError(uuid, nil)
		u := float64(*t.GPUUtilPercent)
		out[uuid] = deviceUtil{device: &u}
	}
	return out
}

// sliceUtil is a task's utilisation of its slice on d from the device's
// samples; false when it cannot be told.
func sliceUtil(d DeviceLimit, du deviceUtil, own map[int]bool) (float64, bool) {
	if du.perPID == nil {
		if du.device == nil || d.Shared {
			return 0, false
		}
		return min(100, max(0, *du.device)), true
	}
	var sum float64
	for pid, pct := range du.perPID {
		if own[pid] {
			sum += pct
		}
	}
	return min(100, max(0, sum/d.share()*100)), true
}

// measure sums t's own pids' memory on each of its sampled devices, and
// their utilisation of its slice. It returns nil when t's pids cannot be
// listed.
func (w *Watchdog) measure(t Task, procs map[string]map[int]uint64, utils map[string]deviceUtil) *measured {
	var pids []int
	if t.Pids != nil {
		var err error
		if pids, err = t.Pids(); err != nil {
			// The task may be exiting; its figures stay as they were.
			w.log.Debug("listing task pids", "task", t.ID, "error", err)
			return nil
		}
	}
	own := make(map[int]bool, len(pids))
	for _, p := range pids {
		own[p] = true
	}
	r := &measured{used: map[string]uint64{}, pids: map[string][]int{}, util: map[string]float64{}}
	for _, d := range t.Devices {
		if du, ok := utils[d.UUID]; ok {
			if u, ok := sliceUtil(d, du, own); ok {
				r.util[d.UUID] = u
			}
		}
		m, ok := procs[d.UUID]
		if !ok {
			continue
		}
		var used uint64
		var on []int
		for pid, mib := range m {
			if own[pid] {
				used += mib
				on = append(on, pid)
			}
		}
		slices.Sort(on)
		r.used[d.UUID] = used
		r.pids[d.UUID] = on
	}
	return r
}

// judge records the round's figures on the tasks still watched as they were
// when the round started, and returns the violations to report.
func (w *Watchdog) judge(tasks []taskSnapshot, results []*measured) []Violation {
	var fire []Violation
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, s := range tasks {
		r := results[i]
		cur := w.tasks[s.t.ID]
		if r == nil || cur == nil || cur.gen != s.gen {
			continue
		}
		cur.util = r.util
		for _, d := range s.t.Devices {
			used, ok := r.used[d.UUID]
			if !ok {
				continue
			}
			cur.usage[d.UUID] = used
			over := d.LimitMiB > 0 && used > d.LimitMiB
			was := cur.over[d.UUID]
			cur.over[d.UUID] = over
			if over && shouldReport(s.t.Mode, was) {
				fire = append(fire, Violation{
					TaskID: s.t.ID, UUID: d.UUID, UsedMiB: used, LimitMiB: d.LimitMiB,
					Pids: r.pids[d.UUID], Mode: s.t.Mode, Repeat: was,
				})
			}
		}
	}
	return fire
}

// shouldReport says whether a violation in mode is passed on; repeat is
// whether the task was already over the limit in the previous round.
func shouldReport(mode Mode, repeat bool) bool {
	switch mode {
	case ModeKill:
		return true
	case ModeWarn:
		return !repeat
	}
	return false
}

// report logs each violation and calls onViolation, outside the locks.
func (w *Watchdog) report(fire []Violation) {
	for _, v := range fire {
		w.log.Warn("task over its GPU memory limit", "task", v.TaskID, "device", v.UUID,
			"used_mib", v.UsedMiB, "limit_mib", v.LimitMiB, "pids", v.Pids, "mode", v.Mode)
		w.onViolation(v)
	}
}

func (w *Watchdog) noteDeviceError(uuid string, err error) {
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	w.mu.Lock()
	prev := w.devErrs[uuid]
	if msg == "" {
		delete(w.devErrs, uuid)
	} else {
		w.devErrs[uuid] = msg
	}
	w.mu.Unlock()
	switch {
	case msg != "" && msg != prev:
		w.log.Warn("cannot list GPU processes; tasks on this device are not measured", "device", uuid, "error", err)
	case msg == "" && prev != "":
		w.log.Info("GPU processes readable again", "device", uuid)
	}
}

func (w *Watchdog) noteUtilError(uuid string, err error) {
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	w.mu.Lock()
	prev := w.utilErrs[uuid]
	if msg == "" {
		delete(w.utilErrs, uuid)
	} else {
		w.utilErrs[uuid] = msg
	}
	w.mu.Unlock()
	switch {
	case msg != "" && msg != prev:
		w.log.Warn("cannot sample GPU utilization; tasks' utilization on this device is not measured", "device", uuid, "error", err)
	case msg == "" && prev != "":
		w.log.Info("GPU utilization readable again", "device", uuid)
	}
}
