package driver

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/nomad-gpu/nomad-gpu/driver/cgroups"
	"github.com/nomad-gpu/nomad-gpu/driver/supervisor"
	"github.com/nomad-gpu/nomad-gpu/internal/atomicfile"
	"github.com/nomad-gpu/nomad-gpu/wire/drivers"
)

// taskStateVersion is the layout of driverState; bump it when the layout
// changes incompatibly and keep reading the old one.
//
//	1: state dir, cgroup paths, MPS GPUs, device env and MIG grants, all
//	   trusted as recorded.
//	2: only what cannot be derived; everything else is derived again from
//	   the task's config and the plugin's, so a tampered or corrupt record
//	   cannot point the plugin at paths outside its own.
const taskStateVersion = 2

// driverState is what the client persists for us in the task handle.
type driverState struct {
	Version   int       `json:"version"`
	StartedAt time.Time `json:"started_at"`
	User      string    `json:"user"`

	// Version 1 only.
	StateDir    string            `json:"state_dir,omitempty"`
	CgroupPaths []string          `json:"cgroup_paths,omitempty"`
	MPSGPUs     []string          `json:"mps_gpus,omitempty"`
	DeviceEnv   map[string]string `json:"device_env,omitempty"`
	MIGCaps     []capGrant        `json:"mig_caps,omitempty"`
}

func (s *driverState) encode() []byte {
	b, _ := json.Marshal(s)
	return b
}

// maxStateBytes bounds what decodeState reads: a real state is a few
// hundred bytes.
const maxStateBytes = 1 << 20

func decodeState(b []byte) (*driverState, error) {
	if len(b) > maxStateBytes {
		return nil, fmt.Errorf("driver state is %d bytes; a real one is under %d", len(b), maxStateBytes)
	}
	var s driverState
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("driver state is not readable: %w", err)
	}
	switch s.Version {
	case 1:
		if s.StateDir == "" {
			return nil, errors.New("driver state version 1 names no state dir")
		}
	case taskStateVersion:
	default:
		return nil, fmt.Errorf("driver state version %d is not one this driver knows (1 to %d)", s.Version, taskStateVersion)
	}
	return &s, nil
}

// capGrant is a version 1 record of a MIG capability node handed to a
// task's user, restored when that task goes.
type capGrant struct {
	Path string `json:"path"`
	UID  uint32 `json:"uid"`
	GID  uint32 `json:"gid"`
	Mode uint32 `json:"mode"`
}

// journal is the plugin's own record of a task, <task dir>/driver.json. It
// is written before the task takes anything and marked committed just before
// StartTask hands Nomad the handle, so a plugin that starts after a crash
// knows which tasks no handle can exist for.
type journal struct {
	Version    int    `json:"version"`
	TaskID     string `json:"task_id"`
	AllocID    string `json:"alloc_id"`
	TaskName   string `json:"task_name"`
	AllocDir   string `json:"alloc_dir,omitempty"`
	CgroupRoot string `json:"cgroup_root"`
	CgroupName string `json:"cgroup_name"`
	Committed  bool   `json:"committed"`
	// Checkpoint is the run's place in the checkpoint store, for a task
	// with a checkpoint block: a plugin that restarts takes the run up
	// again from it. Its key and paths are derived from the task's config.
	Checkpoint *journalCheckpoint `json:"checkpoint,omitempty"`
}

type journalCheckpoint struct {
	// Staging is the name of the run's staging directory in its key's.
	Staging    string `json:"staging"`
	RestoreSeq int    `json:"restore_seq,omitempty"`
	Resumes    int    `json:"resumes"`
}

const (
	journalFile    = "driver.json"
	supervisorDir  = "supervisor"
	journalVersion = 1
)

func readJournal(taskDir string) (*journal, error) {
	b, err := os.ReadFile(filepath.Join(taskDir, journalFile))
	if err != nil {
		return nil, err
	}
	return decodeJournal(b, filepath.Base(taskDir))
}

// decodeJournal reads a journal found in the task dir named dirName; a
// journal that names another task, or cgroups that are not one path
// component, is refused.
func decodeJournal(b []byte, dirName string) (*journal, error) {
	if len(b) > maxStateBytes {
		return nil, fmt.Errorf("%s: %d bytes is not a journal", journalFile, len(b))
	}
	var j journal
	if err := json.Unmarshal(b, &j); err != nil {
		return nil, fmt.Errorf("%s: %w", journalFile, err)
	}
	if j.Version != journalVersion {
		return nil, fmt.Errorf("%s: version %d is not one this driver knows", journalFile, j.Version)
	}
	if stateDirName(j.TaskID) != dirName {
		return nil, fmt.Errorf("%s: names task %q, not this directory's", journalFile, j.TaskID)
	}
	if !validName(j.CgroupRoot) || !validName(j.CgroupName) {
		return nil, fmt.Errorf("%s: cgroup %q/%q is not a cgroup name", journalFile, j.CgroupRoot, j.CgroupName)
	}
	return &j, nil
}

func (j *journal) write(taskDir string) error {
	b, _ := json.Marshal(j)
	return atomicfile.Write(filepath.Join(taskDir, journalFile), b, 0o600)
}

// validName: one path component, usable as a cgroup or directory name.
func validName(s string) bool {
	return s != "" && s != "." && s != ".." && !strings.ContainsAny(s, "/\x00")
}

// task is one running (or exited, not yet destroyed) task attempt. Fields
// above mu are set before the task is stored and never change.
type task struct {
	id        string
	cfg       *drivers.TaskConfig
	dir       string // the task's state dir: journal and supervisor dir
	user      string
	startedAt time.Time
	// mpsGPUs are the GPUs whose MPS daemon the task is a client of.
	mpsGPUs []string
	// legacyCaps are version 1 MIG grants, restored when the task goes.
	legacyCaps []capGrant
	proc       *supervisor.Handle
	group      *cgroups.Group // nil without cgroups
	ckpt       *checkpointer  // nil for a task without a checkpoint block

	done chan struct{} // closed once res is set
	mu   sync.Mutex
	res  *drivers.ExitResult
	// killReason explains a kill the driver itself decided (watchdog).
	killReason string
	completed  time.Time
}

func (t *task) result() *drivers.ExitResult {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.res
}

func (t *task) exited() bool {
	select {
	case <-t.done:
		return true
	default:
		return false
	}
}

func (t *task) setKillReason(r string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.killReason == "" {
		t.killReason = r
	}
}

// pids is the task's process tree: the cgroup when there is one (it also
// holds processes that left the session), else the supervisor's view. Both
// give host pids, which is what NVML's process accounting reports.
func (t *task) pids() ([]int, error) {
	if t.group != nil {
		return t.group.Pids()
	}
	return t.proc.Pids()
}

// stateDirName makes a task ID ("<alloc>/<task>/<random>") a directory name.
func stateDirName(id string) string {
	return strings.NewReplacer("/", ".", "\x00", "").Replace(id)
}

// taskDir is where a task's journal and supervisor state live: derived from
// its ID alone, so cleaning up never needs a record that may be lost.
func (d *Driver) taskDir(id string) string {
	return filepath.Join(d.config().StateDir, "tasks", stateDirName(id))
}
