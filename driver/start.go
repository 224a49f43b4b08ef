package driver

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/driver/cgroups"
	"github.com/nomad-gpu/nomad-gpu/driver/checkpoint"
	"github.com/nomad-gpu/nomad-gpu/driver/gpuwatch"
	"github.com/nomad-gpu/nomad-gpu/driver/mps"
	"github.com/nomad-gpu/nomad-gpu/driver/supervisor"
	"github.com/nomad-gpu/nomad-gpu/wire/drivers"
)

// startPlan is everything StartTask decides before it takes anything: a
// task that fails here leaves nothing to clean up.
type startPlan struct {
	cfg       *drivers.TaskConfig
	tc        *TaskConfig
	user      taskUser
	mpsShares map[string]mps.Limits
	mpsGPUs   []string
	iso       isolationPlan
	// ckptKey names the task's checkpoints, when it has a checkpoint block.
	ckptKey *checkpoint.Key
	// gangEnv is a gang member's rendezvous (joinGang), gangKeys its
	// gang's checkpoint keys, every member's; nil for others.
	gangEnv  map[string]string
	gangKeys []checkpoint.Key
}

// errTaskDirExists: the start took nothing, so it has nothing to undo (the
// directory is another attempt's).
var errTaskDirExists = errors.New("task state dir already exists")

// startSteps are StartTask's steps, in order, by the names fault tests use.
var startSteps = []string{"journal", "cgroups", "mps", "mig", "gang", "checkpoint", "supervisor", "commit"}

func (d *Driver) StartTask(cfg *drivers.TaskConfig) (*drivers.TaskHandle, *drivers.NetworkOverride, error) {
	rt, err := d.runtime()
	if err != nil {
		return nil, nil, drivers.NewRecoverableError(err, true)
	}
	plan, err := d.planStart(rt, cfg)
	if err != nil {
		return nil, nil, startFailure(err)
	}
	t := &task{
		id: cfg.ID, cfg: cfg, dir: d.taskDir(cfg.ID), user: plan.user.name,
		mpsGPUs: plan.mpsGPUs, done: make(chan struct{}),
	}
	if !d.store.reserve(t.id) {
		return nil, nil, startFailure(badInput("task %s is already started", cfg.ID))
	}
	j := &journal{
		Version: journalVersion, TaskID: cfg.ID, AllocID: cfg.AllocID, TaskName: cfg.Name, AllocDir: cfg.AllocDir,
		CgroupRoot: d.config().CgroupRoot, CgroupName: cgroupName(cfg),
	}
	steps := map[string]func() error{
		"journal":    func() error { return createTaskDir(t.dir, j) },
		"cgroups":    func() error { return d.createCgroups(t, plan) },
		"mps":        func() error { return d.acquireMPS(rt, t, plan) },
		"mig":        func() error { return grantMIG(rt, t, plan) },
		"gang":       func() error { return d.joinGang(rt, t, plan) },
		"checkpoint": func() error { return d.prepareCheckpoints(rt, t, plan) },
		"supervisor": func() error { return d.startSupervisor(t, plan) },
		"commit": func() error {
			j.Committed, j.Checkpoint = true, t.ckpt.record()
			return j.write(t.dir)
		},
	}
	for _, name := range startSteps {
		err := d.injectFault(name)
		if err == nil {
			err = steps[name]()
		}
		if err != nil {
			d.store.release(t.id)
			if errors.Is(err, errTaskDirExists) {
				return nil, nil, startFailure(err)
			}
			if perr := d.purge(rt, t.id, cfg, nil); perr != nil {
				d.logger.Error("undoing a failed start", "task", t.id, "step", name, "error", perr)
			}
			return nil, nil, startFailure(err)
		}
	}
	d.store.add(t)
	d.track(rt, t)
	// The task's pid in its own namespace is 1; NVML, sim proc and ps on
	// the host know it by this one, which nomad alloc status shows nowhere else.
	d.emit(t, fmt.Sprintf("started as host pid %d (supervisor pid %d)", t.proc.TaskPID(), t.proc.SupervisorPID()),
		map[string]string{"pid": strconv.Itoa(t.proc.TaskPID())})
	for _, note := range plan.iso.notes {
		d.emit(t, note, nil)
	}
	st := &driverState{Version: taskStateVersion, StartedAt: t.startedAt, User: t.user}
	return &drivers.TaskHandle{Version: 1, Config: cfg, State: drivers.TaskStateRunning, DriverState: st.encode()}, nil, nil
}

func (d *Driver) injectFault(step string) error {
	if d.faults == nil {
		return nil
	}
	return d.faults(step)
}

// planStart validates the task and decides how it runs.
func (d *Driver) planStart(rt *runtimeState, cfg *drivers.TaskConfig) (*startPlan, error) {
	if cfg == nil || cfg.ID == "" {
		return nil, badInput("the task has no ID")
	}
	if !validName(stateDirName(cfg.ID)) || !validName(cgroupName(cfg)) {
		return nil, badInput("task ID %q or name %q cannot name a directory", cfg.ID, cfg.Name)
	}
	tc, ok := cfg.DriverConfig.(*TaskConfig)
	if !ok || tc == nil {
		return nil, badInput("task has no config block; config.command is required")
	}
	if err := tc.validate(); err != nil {
		return nil, badInput("%v", err)
	}
	dcfg := d.config()
	p := &startPlan{cfg: cfg, tc: tc}
	p.user.name = cfg.User
	if p.user.name == "" {
		p.user.name = dcfg.DefaultUser
	}
	var err error
	if p.user.uid, p.user.gid, p.user.groups, _, err = supervisor.LookupUser(p.user.name); err != nil {
		return nil, badInput("user: %v", err)
	}
	if err := checkUser(dcfg, p.user); err != nil {
		return nil, err
	}
	d.noteDataDir(dirsOf(cfg).task)
	if err := checkTaskDirReachable(dirsOf(cfg).task, p.user); err != nil {
		return nil, err
	}
	if p.mpsShares, err = mpsShares(cfg.DeviceEnv); err != nil {
		return nil, badInput("%v", err)
	}
	p.mpsGPUs = slices.Sorted(maps.Keys(p.mpsShares))
	if err := checkPipeDirectory(cfg.DeviceEnv, dcfg.MPS.PipeRoot); err != nil {
		return nil, err
	}
	var ownDirs []string
	if tc.checkpoint() != nil {
		if err := checkCheckpointRootReachable(rt.ckpt.Root(), p.user); err != nil {
			return nil, err
		}
		k := checkpointKey(cfg)
		p.ckptKey = &k
		ownDirs = append(ownDirs, rt.ckpt.KeyDir(k))
	}
	if p.iso, err = d.planIsolation(cfg, tc, p.mpsGPUs, ownDirs); err != nil {
		return nil, err
	}
	return p, nil
}

// createTaskDir makes the task's state dir and its journal, before the task
// takes anything, so that whatever it takes can be found again.
func createTaskDir(dir string, j *journal) error {
	if err := os.Mkdir(dir, 0o700); err != nil {
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("%w: %s: another start of task %s is (or was) under way", errTaskDirExists, dir, j.TaskID)
		}
		return fmt.Errorf("state dir: %w", err)
	}
	return j.write(dir)
}

func (d *Driver) createCgroups(t *task, p *startPlan) error {
	if cgroups.Detect() == cgroups.None {
		return nil
	}
	limits := cgroups.Limits{PidsMax: p.tc.PidsLimit, DeviceDeny: gpuDeviceDeny(p.cfg.Devices)}
	if r := p.cfg.Resources; r != nil {
		limits.CPUShares = r.CPUShares
		if r.Linux != nil {
			limits.MemoryLimitBytes = r.Linux.MemoryLimitBytes
			limits.CpusetCpus = r.Linux.CpusetCpus
			if r.Linux.CPUShares > 0 {
				limits.CPUShares = r.Linux.CPUShares
			}
		}
		// memory_max oversubscription: the reservation is the soft limit.
		if r.MemoryMaxMB > r.MemoryMB && r.MemoryMB > 0 {
			limits.MemorySoftBytes = r.MemoryMB << 20
		}
	}
	g, err := cgroups.Create(d.config().CgroupRoot, cgroupName(p.cfg), limits)
	if err != nil {
		return err // already says "cgroups: …"
	}
	t.group = g
	return nil
}

// mpsShares reads the MPS limits a task holds on each of its GPUs from the
// device plugin's reservation.
func mpsShares(env map[string]string) (map[string]mps.Limits, error) {
	if env[contract.EnvSliceType] != contract.SliceMPS {
		return nil, nil
	}
	mem, err := contract.ParsePinnedMemLimit(env[contract.EnvMPSPinnedMemLimit])
	if err != nil {
		return nil, err
	}
	threads, _ := strconv.Atoi(env[contract.EnvMPSThreadPercentage])
	out := map[string]mps.Limits{}
	for i, uuid := range strings.Split(env[contract.EnvCUDAVisibleDevices], ",") {
		if uuid != "" {
			out[uuid] = mps.Limits{ThreadPercentage: threads, PinnedMemMiB: mem[i]}
		}
	}
	return out, nil
}

// checkPipeDirectory refuses an MPS share whose pipe directory the device
// plugin put outside this driver's mps.pipe_root: the two plugins' roots
// are two settings, and the task would reach no MPS daemon (or another
// GPU's). The error names both keys.
func checkPipeDirectory(env map[string]string, pipeRoot string) error {
	if env[contract.EnvSliceType] != contract.SliceMPS {
		return nil
	}
	first, _, _ := strings.Cut(env[contract.EnvCUDAVisibleDevices], ",")
	got, set := env[contract.EnvMPSPipeDirectory]
	if want := contract.MPSPipeDir(pipeRoot, first); set && got != want {
		return fmt.Errorf("MPS: the device plugin gave the task %s=%q, but this driver's MPS daemons listen in %q: set the device plugin's mps_pipe_root and the driver's mps.pipe_root to the same directory (the driver's is %q)",
			contract.EnvMPSPipeDirectory, got, want, pipeRoot)
	}
	return nil
}

// acquireMPS makes each GPU whose shares the task holds run its MPS daemon,
// with a ceiling at least as high as this task's limits.
func (d *Driver) acquireMPS(rt *runtimeState, t *task, p *startPlan) error {
	if len(p.mpsGPUs) == 0 {
		return nil
	}
	if ok, why := rt.mps.Available(); !ok {
		return fmt.Errorf("MPS: the task holds MPS shares but %s: %w", why, mps.ErrUnavailable)
	}
	ctx, cancel := context.WithTimeout(d.ctx, waitTimeout)
	defer cancel()
	for _, uuid := range p.mpsGPUs {
		c := mps.Client{TaskID: t.id, UID: p.user.uid, User: p.user.name, Limits: p.mpsShares[uuid]}
		if err := rt.mps.Acquire(ctx, uuid, c); err != nil {
			return fmt.Errorf("MPS daemon for %s: %w", uuid, err)
		}
	}
	return nil
}

// migCapPaths are the MIG capability nodes among a task's devices.
func migCapPaths(devices []drivers.DeviceConfig) []string {
	var out []string
	for _, dev := range devices {
		if p := filepath.Clean(dev.HostPath); filepath.Dir(p) == filepath.Clean(capsDir) {
			out = append(out, p)
		}
	}
	return out
}

// grantMIG lets a non-root task open the capability nodes of the MIG
// instance it holds.
func grantMIG(rt *runtimeState, t *task, p *startPlan) error {
	paths := migCapPaths(p.cfg.Devices)
	if len(paths) == 0 {
		return nil
	}
	if err := rt.caps.Grant(t.id, paths, p.user.uid, p.user.gid); err != nil {
		return fmt.Errorf("MIG capabilities: %w", err)
	}
	return nil
}

func (d *Driver) startSupervisor(t *task, p *startPlan) error {
	cfg, tc := p.cfg, p.tc
	dir := tc.WorkDir
	if dir == "" {
		dir = cfg.Env["NOMAD_TASK_DIR"]
	}
	env := maps.Clone(cfg.Env)
	if env == nil {
		env = map[string]string{}
	}
	if cfg.DeviceEnv[contract.EnvCUDAVisibleDevices] == "" {
		// A task without a GPU reservation must not see the node's GPUs:
		// CUDA and container runtimes default to all of them.
		env[contract.EnvCUDAVisibleDevices] = ""
		env[contract.EnvNvidiaVisibleDevices] = contract.NvidiaVisibleDevicesNone
	}
	maps.Copy(env, p.gangEnv)
	if t.ckpt != nil {
		maps.Copy(env, t.ckpt.env())
	}
	// Temporary files go to the task's own tmp dir, which Landlock lets it
	// write, whether or not it is also bound over /tmp.
	if tmp := filepath.Join(dirsOf(cfg).task, "tmp"); env["TMPDIR"] == "" && dirsOf(cfg).task != "" && isDir(tmp) {
		env["TMPDIR"] = tmp
	}
	spec := supervisor.Spec{
		TaskID:      cfg.ID,
		StateDir:    filepath.Join(t.dir, supervisorDir),
		Executable:  d.supervisor(),
		Command:     tc.Command,
		Args:        tc.Args,
		Env:         envList(env),
		Dir:         dir,
		UID:         p.user.uid,
		GID:         p.user.gid,
		Groups:      p.user.groups,
		SetUser:     true,
		StdoutPath:  cfg.StdoutPath,
		StderrPath:  cfg.StderrPath,
		OOMScoreAdj: tc.OOMScoreAdj,
		Isolation:   p.iso.spec,
	}
	if t.group != nil {
		spec.CgroupProcsFiles = t.group.ProcsFiles()
	}
	proc, err := supervisor.Start(spec)
	if err != nil {
		return err
	}
	t.proc = proc
	t.startedAt = proc.StartedAt()
	return nil
}

// track registers a started or recovered task with the watchdog and its
// exit waiter.
func (d *Driver) track(rt *runtimeState, t *task) {
	d.metrics.started(t)
	d.watchTask(rt, t)
	if t.ckpt != nil {
		go t.ckpt.watch(d.ctx, rt.markers)
	}
	go d.waitExit(rt, t)
}

// prepareCheckpoints readies the task's checkpoint store: what an earlier
// run left half-done is discarded, and the newest committed generation is
// handed to the task to restore.
func (d *Driver) prepareCheckpoints(rt *runtimeState, t *task, p *startPlan) error {
	if p.ckptKey == nil {
		return nil
	}
	d.awaitPredecessors(rt, t, p.tc.checkpoint().CommitTimeout+predecessorSlack)
	rule, step := checkpoint.RestoreRule(checkpoint.RestoreNewest), (*int64)(nil)
	if p.gangEnv != nil {
		var what string
		var err error
		if rule, step, what, err = gangRestore(rt.ckpt, p.gangKeys); err != nil {
			return fmt.Errorf("checkpoint: %w", err)
		}
		if what != "" {
			p.iso.notes = append(p.iso.notes, what)
		}
	}
	run, discarded, err := rt.ckpt.PrepareWith(*p.ckptKey, p.user.uid, p.user.gid, rule)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if step != nil && run.Restore == nil {
		// Its generation of the step was discarded (not intact): the gang
		// fails this start, and its next one finds the step gone.
		return fmt.Errorf("checkpoint: this member holds no intact generation of step %d, the gang's newest common one; the gang is restarted without it", *step)
	}
	t.ckpt = newCheckpointer(d, t, *p.tc.checkpoint(), rt.ckpt, run)
	for _, x := range discarded {
		p.iso.notes = append(p.iso.notes, fmt.Sprintf("checkpoint: discarded %s: %s", x.Path, x.Reason))
	}
	if g := run.Restore; g != nil {
		of := ""
		if g.Step != nil {
			of = fmt.Sprintf(" of step %d", *g.Step)
		}
		p.iso.notes = append(p.iso.notes, fmt.Sprintf("restoring checkpoint generation %d%s (%s, committed %s, %s); resume %d",
			g.Seq, of, byteSize(g.Bytes), g.CommittedAt.UTC().Format(time.RFC3339), g.Trigger, run.Resumes))
	}
	return nil
}

func (d *Driver) watchTask(rt *runtimeState, t *task) {
	limits, err := gpuwatch.DeviceLimits(t.cfg.DeviceEnv, d.migMemoryMiB)
	if err != nil {
		d.logger.Warn("GPU memory of this task cannot be watched", "task", t.id, "error", err)
		return
	}
	if len(limits) == 0 {
		return
	}
	mode, _ := gpuwatch.ParseMode(d.config().GPUMemoryWatchdog)
	rt.watch.Add(gpuwatch.Task{ID: t.id, Devices: limits, Pids: t.pids, Mode: mode})
}
