package driver

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/nomad-gpu/nomad-gpu/driver/cgroups"
	"github.com/nomad-gpu/nomad-gpu/driver/gpuwatch"
	"github.com/nomad-gpu/nomad-gpu/driver/landlock"
	"github.com/nomad-gpu/nomad-gpu/driver/supervisor"
	"github.com/nomad-gpu/nomad-gpu/gpu"
	"github.com/nomad-gpu/nomad-gpu/internal/metrics"
	"github.com/nomad-gpu/nomad-gpu/internal/nomadaddr"
	"github.com/nomad-gpu/nomad-gpu/wire/schema"
)

// Config is the `plugin "nomad-driver-gpu" { config { … } }` block.
type Config struct {
	// StateDir keeps each task's supervisor state and the MPS bookkeeping;
	// it must survive plugin and client restarts.
	StateDir string `hcl:"state_dir" default:"/var/lib/nomad-gpu/driver"`
	// DefaultUser runs tasks whose jobspec sets no `user`.
	DefaultUser string `hcl:"default_user" default:"nobody"`
	// DeniedHostUIDs and DeniedHostGIDs are users a task may not run as and
	// groups it may not have, primary or supplementary ("0,10-20"); "" denies
	// none. Root is denied by default, as by Nomad's exec and raw_exec.
	DeniedHostUIDs string `hcl:"denied_host_uids" default:"0"`
	DeniedHostGIDs string `hcl:"denied_host_gids" default:"0"`
	// SupervisorBinary is the per-task supervisor executable. "" looks for
	// it in ../libexec/ beside the driver's directory, outside plugin_dir,
	// which Nomad scans and where every non-plugin file draws a warning.
	SupervisorBinary string `hcl:"supervisor_binary"`
	// CgroupRoot is the parent cgroup of every task's cgroup.
	CgroupRoot string `hcl:"cgroup_root" default:"nomad-gpu"`
	// GPUMemoryWatchdog acts on a task over its slice's GPU memory:
	// "kill", "warn" or "off".
	GPUMemoryWatchdog string           `hcl:"gpu_memory_watchdog" default:"kill"`
	WatchdogInterval  time.Duration    `hcl:"watchdog_interval" default:"5s"`
	MPS               MPSConfig        `hcl:"mps,block"`
	GPU               GPUConfig        `hcl:"gpu,block"`
	Isolation         IsolationConfig  `hcl:"isolation,block"`
	Checkpoint        CheckpointStore  `hcl:"checkpoint,block"`
	Nomad             NomadAPIConfig   `hcl:"nomad,block"`
	Preemption        PreemptionConfig `hcl:"preemption,block"`
	Metrics           MetricsConfig    `hcl:"metrics,block"`
	Gang              GangConfig       `hcl:"gang,block"`
}

// GangConfig is how a gang's member (job meta nomad_gpu_gang = "true")
// waits for its peers before its task starts.
type GangConfig struct {
	// Wait bounds the wait for every member to be placed, after which the
	// member's task fails. The controller admits a gang whole and rolls
	// back a partial one after its -gang-admit-timeout (30s), which stops
	// the member first; the default, twice that, ends the wait where no
	// controller does. Where gangs run without the controller's admission
	// (members placed one at a time, as a torchrun job of count N on stock
	// Nomad), raise it to the rendezvous timeout the job would have.
	Wait time.Duration `hcl:"wait" default:"1m"`
}

// MetricsConfig serves Prometheus metrics of every task (off by default).
type MetricsConfig struct {
	// Address and NodeName are as in package metrics: where /metrics is
	// served ("" is off) and the host label.
	Address  string `hcl:"address"`
	NodeName string `hcl:"node_name"`
	// TaskRetention keeps a destroyed task's series this long, so that the
	// next scrape still sees how the task ended (its checkpoint on stop,
	// its preemption, its kill).
	TaskRetention time.Duration `hcl:"task_retention" default:"5m"`
}

func (c MetricsConfig) exporter() metrics.Config {
	return metrics.Config{Address: c.Address, NodeName: c.NodeName}
}

// NomadAPIConfig is how the driver reaches the Nomad API: the local client
// agent, to learn why a task is stopped (preempted, and by which
// allocation; drained) and, for a gang's member, where its peers are. The
// driver only reads.
type NomadAPIConfig struct {
	Address string `hcl:"address" default:"http://127.0.0.1:4646"`
	// Token is an ACL token, where ACLs are on: read-job, and node:read
	// for gangs (a member's peers' node addresses).
	Token string `hcl:"token"`
}

// PreemptionConfig is the driver's preemption block. The preemption
// cooldown is the controller's: a config that sets it here is refused
// with a message naming the controller, rather than silently left without
// protection.
type PreemptionConfig struct {
	Cooldown time.Duration `hcl:"cooldown"`
}

// CheckpointStore is where tasks' checkpoints live. On a filesystem the
// nodes share (NFS), a task's replacement on another node restores from the
// checkpoint its predecessor committed; uids must then agree across nodes.
type CheckpointStore struct {
	Root string `hcl:"root" default:"/var/lib/nomad-gpu/checkpoints"`
}

// IsolationConfig is how tasks are fenced off each other. Each guard is on
// by default and can be relaxed only here, never by a jobspec.
type IsolationConfig struct {
	// PIDMode is the default for tasks that set no pid_mode: "private" (a
	// PID namespace of their own) or "host".
	PIDMode string `hcl:"pid_mode" default:"private"`
	// AllowHostPID lets a jobspec ask for pid_mode = "host".
	AllowHostPID bool `hcl:"allow_host_pid" default:"false"`
	// Landlock is "required" (where the kernel cannot confine a task, the
	// task does not start), "best_effort" (it starts unconfined there, and
	// says so in a task event) or "off".
	Landlock string `hcl:"landlock" default:"required"`
	// UnveilByTask lets a jobspec add paths with config.unveil.
	UnveilByTask bool `hcl:"unveil_by_task" default:"false"`
	// UnveilPaths are extra paths every task may use ("r:/data/models").
	UnveilPaths []string `hcl:"unveil_paths"`
}

const (
	PIDModePrivate = "private"
	PIDModeHost    = "host"

	LandlockRequired   = "required"
	LandlockBestEffort = "best_effort"
	LandlockOff        = "off"
)

type MPSConfig struct {
	ControlBinary string `hcl:"control_binary" default:"nvidia-cuda-mps-control"`
	// PipeRoot must equal the device plugin's mps_pipe_root: a task
	// whose share's pipe directory is elsewhere is refused, naming both.
	PipeRoot string `hcl:"pipe_root" default:"/run/nomad-gpu/mps"`
	LogRoot  string `hcl:"log_root" default:"/var/log/nomad-gpu/mps"`
}

// GPUConfig says where NVML's per-process accounting comes from; it must
// match the device plugin's backend (and sim block, on a simulated node).
type GPUConfig struct {
	Backend string        `hcl:"backend" default:"nvml"`
	Sim     gpu.SimConfig `hcl:"sim,block"`
}

func (c *Config) Validate() error {
	if err := c.Metrics.exporter().Validate("metrics"); err != nil {
		return err
	}
	if r := c.Metrics.TaskRetention; r < 0 || r > 24*time.Hour {
		return fmt.Errorf("metrics.task_retention: %s is out of range; allowed: 0 (at once) to 24h", r)
	}
	if c.Preemption.Cooldown != 0 {
		return fmt.Errorf("preemption.cooldown: %s; the preemption cooldown moved to the controller: run `nomad-gpu controller -preemption-cooldown %s` (jobs/controller/controller.nomad.hcl) and remove this block, whose only allowed value is 0", c.Preemption.Cooldown, c.Preemption.Cooldown)
	}
	if err := nomadaddr.Check(c.Nomad.Address); err != nil {
		return fmt.Errorf("nomad.address: %v", err)
	}
	for key, p := range map[string]string{"state_dir": c.StateDir, "mps.pipe_root": c.MPS.PipeRoot, "mps.log_root": c.MPS.LogRoot, "checkpoint.root": c.Checkpoint.Root} {
		if !filepath.IsAbs(p) {
			return fmt.Errorf("%s: %q must be an absolute path", key, p)
		}
	}
	if within(c.Checkpoint.Root, c.StateDir) || within(c.StateDir, c.Checkpoint.Root) {
		// state_dir is 0700 (it holds task environments), so no task user
		// could reach a root inside it; and the store would take a state_dir
		// inside its root for a namespace.
		return fmt.Errorf("checkpoint.root: %q and state_dir %q must not contain one another; allowed: separate directories, as the defaults /var/lib/nomad-gpu/checkpoints and /var/lib/nomad-gpu/driver", c.Checkpoint.Root, c.StateDir)
	}
	if b := c.MPS.ControlBinary; b == "" || (strings.Contains(b, "/") && !filepath.IsAbs(b)) {
		return fmt.Errorf("mps.control_binary: %q must be a command name found in PATH or an absolute path", b)
	}
	if c.DefaultUser == "" {
		return fmt.Errorf("default_user: must name a user (e.g. \"nobody\")")
	}
	if _, err := parseIDRanges(c.DeniedHostUIDs); err != nil {
		return fmt.Errorf("denied_host_uids: %v", err)
	}
	if _, err := parseIDRanges(c.DeniedHostGIDs); err != nil {
		return fmt.Errorf("denied_host_gids: %v", err)
	}
	// A user that does not exist yet may be made before the first task;
	// one that exists and is denied would fail every task without a user.
	if uid, gid, groups, _, err := supervisor.LookupUser(c.DefaultUser); err == nil {
		if err := checkUser(c, taskUser{name: c.DefaultUser, uid: uid, gid: gid, groups: groups}); err != nil {
			return fmt.Errorf("default_user: %q would fail every task without a user: %v", c.DefaultUser, err)
		}
	}
	if err := c.Isolation.validate(); err != nil {
		return err
	}
	if c.SupervisorBinary != "" && !filepath.IsAbs(c.SupervisorBinary) {
		return fmt.Errorf("supervisor_binary: %q must be an absolute path to the nomad-driver-gpu-supervisor executable", c.SupervisorBinary)
	}
	if err := cgroups.ValidName(c.CgroupRoot); err != nil {
		return fmt.Errorf("cgroup_root: %q is not a cgroup name (%v); allowed: one directory name such as \"nomad-gpu\", created under each cgroup hierarchy's root", c.CgroupRoot, err)
	}
	if _, err := gpuwatch.ParseMode(c.GPUMemoryWatchdog); err != nil {
		return fmt.Errorf("gpu_memory_watchdog: %q is not a mode; allowed: \"kill\", \"warn\", \"off\"", c.GPUMemoryWatchdog)
	}
	if c.WatchdogInterval < 100*time.Millisecond {
		return fmt.Errorf("watchdog_interval: %s is too short; use at least 100ms", c.WatchdogInterval)
	}
	if c.Gang.Wait < time.Second || c.Gang.Wait > 30*24*time.Hour {
		return fmt.Errorf("gang.wait: %s; allowed: 1s to 720h", c.Gang.Wait)
	}
	switch c.GPU.Backend {
	case "nvml", "sim":
		if err := c.gpuConfig().Validate(); err != nil {
			// Every line names its key from the plugin config's root.
			return errors.New("gpu." + strings.ReplaceAll(err.Error(), "\n", "\ngpu."))
		}
	default:
		return fmt.Errorf("gpu.backend: %q is not a backend; allowed: \"nvml\", \"sim\"", c.GPU.Backend)
	}
	return nil
}

func (c IsolationConfig) validate() error {
	switch c.PIDMode {
	case PIDModePrivate, PIDModeHost:
	default:
		return fmt.Errorf("isolation.pid_mode: %q is not a mode; allowed: %q, %q", c.PIDMode, PIDModePrivate, PIDModeHost)
	}
	switch c.Landlock {
	case LandlockRequired, LandlockBestEffort, LandlockOff:
	default:
		return fmt.Errorf("isolation.landlock: %q is not a setting; allowed: %q, %q, %q", c.Landlock, LandlockRequired, LandlockBestEffort, LandlockOff)
	}
	for i, u := range c.UnveilPaths {
		if _, err := landlock.ParseRule(u); err != nil {
			return fmt.Errorf("isolation.unveil_paths[%d]: %v", i, err)
		}
	}
	return nil
}

func (c *Config) gpuConfig() gpu.Config {
	return gpu.Config{Backend: c.GPU.Backend, Sim: c.GPU.Sim}
}

// TaskConfig is a task's `config { }` block in the jobspec.
type TaskConfig struct {
	Command string   `hcl:"command,required"`
	Args    []string `hcl:"args"`
	// WorkDir defaults to the task directory.
	WorkDir   string `hcl:"work_dir"`
	PidsLimit int64  `hcl:"pids_limit"`
	// OOMScoreAdj makes the kernel pick this task earlier when the host
	// runs out of memory (0 to 1000).
	OOMScoreAdj int `hcl:"oom_score_adj"`
	// PIDMode is "private" or "host"; unset takes the plugin's isolation.pid_mode.
	PIDMode string `hcl:"pid_mode"`
	// Unveil lists extra paths the task may use ("rw:/scratch"), where the
	// plugin config sets isolation.unveil_by_task.
	Unveil []string `hcl:"unveil"`
	// Checkpoint opts the task into checkpointing; at most one block.
	Checkpoint []CheckpointConfig `hcl:"checkpoint,blocks"` // contract.DriverCheckpointBlock
}

// CheckpointConfig is a task's `checkpoint { }` block.
type CheckpointConfig struct {
	// Signal asks the task for a checkpoint.
	Signal string `hcl:"signal" default:"SIGUSR1"`
	// CommitTimeout is how long the task has to commit after the signal
	// before a stop goes on; it is cut to the job's kill_timeout.
	CommitTimeout time.Duration `hcl:"commit_timeout" default:"30s"`
	// Interval, when set, asks for a checkpoint that often while the task
	// runs, not only when it is stopped.
	Interval time.Duration `hcl:"interval"`
	// Keep is how many committed generations are kept.
	Keep int `hcl:"keep" default:"2"`
}

func (c CheckpointConfig) validate() error {
	if _, err := parseSignal(c.Signal); err != nil {
		return fmt.Errorf("config.checkpoint.signal: %v", err)
	}
	if c.CommitTimeout <= 0 {
		return fmt.Errorf("config.checkpoint.commit_timeout: %s must be positive", c.CommitTimeout)
	}
	if c.Interval != 0 && c.Interval < time.Second {
		return fmt.Errorf("config.checkpoint.interval: %s is too short; use at least 1s (or leave it unset for checkpoints on stop only)", c.Interval)
	}
	if c.Keep < 1 || c.Keep > 100 {
		return fmt.Errorf("config.checkpoint.keep: %d is out of range; allowed: 1 to 100", c.Keep)
	}
	return nil
}

// checkpoint is the task's checkpoint config, nil without one.
func (t *TaskConfig) checkpoint() *CheckpointConfig {
	if len(t.Checkpoint) == 0 {
		return nil
	}
	return &t.Checkpoint[0]
}

func (t *TaskConfig) validate() error {
	if t.Command == "" {
		return fmt.Errorf("config.command: must not be empty")
	}
	if t.WorkDir != "" && !filepath.IsAbs(t.WorkDir) {
		return fmt.Errorf("config.work_dir: %q must be an absolute path", t.WorkDir)
	}
	if t.PidsLimit < 0 {
		return fmt.Errorf("config.pids_limit: %d must not be negative", t.PidsLimit)
	}
	// Negative values would shield the task from the OOM killer at the
	// expense of the node: that is the operator's call, not a job's.
	if t.OOMScoreAdj < 0 || t.OOMScoreAdj > 1000 {
		return fmt.Errorf("config.oom_score_adj: %d is out of range; allowed: 0 to 1000", t.OOMScoreAdj)
	}
	switch t.PIDMode {
	case "", PIDModePrivate, PIDModeHost:
	default:
		return fmt.Errorf("config.pid_mode: %q is not a mode; allowed: %q, %q", t.PIDMode, PIDModePrivate, PIDModeHost)
	}
	for i, u := range t.Unveil {
		if _, err := landlock.ParseRule(u); err != nil {
			return fmt.Errorf("config.unveil[%d]: %v", i, err)
		}
	}
	switch len(t.Checkpoint) {
	case 0:
	case 1:
		return t.Checkpoint[0].validate()
	default:
		return fmt.Errorf("config.checkpoint: %d blocks; a task has at most one", len(t.Checkpoint))
	}
	return nil
}

// ValidateTaskConfig checks a task's `config` block as the jobspec has
// it (the task's Config of a parsed job: maps, and lists of maps for
// blocks) against the driver's schema and its rules: a key it does not
// declare, a value of the wrong type and a value out of range are each
// an error naming the key path (`config.checkpoint[0].keep`) and what is
// allowed. It is what `nomad-gpu validate` checks before a job is
// submitted; the agent itself reports such errors only once the task is
// placed on a node.
func ValidateTaskConfig(raw map[string]any) error {
	if err := schema.CheckKeys(raw, &TaskConfig{}, "config"); err != nil {
		return err
	}
	var tc TaskConfig
	if err := schema.FromValueAt(raw, &tc, "config"); err != nil {
		return err
	}
	return tc.validate()
}
