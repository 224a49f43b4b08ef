package driver

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nomad-gpu/nomad-gpu/driver/cgroups"
	"github.com/nomad-gpu/nomad-gpu/driver/supervisor"
	"github.com/nomad-gpu/nomad-gpu/wire/drivers"
)

// taskStateVersion is the layout of driverState; bump it when the layout
// changes incompatibly and keep reading the old one.
const taskStateVersion = 1

// driverState is what the client persists for us in the task handle: all
// RecoverTask needs when the plugin comes back with nothing but this.
type driverState struct {
	Version     int       `json:"version"`
	StateDir    string    `json:"state_dir"`
	CgroupPaths []string  `json:"cgroup_paths,omitempty"`
	StartedAt   time.Time `json:"started_at"`
	// MPSGPUs are the GPUs whose MPS daemon this task is a client of.
	MPSGPUs []string `json:"mps_gpus,omitempty"`
	// DeviceEnv is the device plugin's reservation, for the watchdog.
	DeviceEnv map[string]string `json:"device_env,omitempty"`
	User      string            `json:"user"`
	// MIGCaps are capability nodes given to the task's user, to take back.
	MIGCaps []capGrant `json:"mig_caps,omitempty"`
}

func (s *driverState) encode() []byte {
	b, _ := json.Marshal(s)
	return b
}

func decodeState(b []byte) (*driverState, error) {
	var s driverState
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("driver state is not readable: %w", err)
	}
	if s.Version != taskStateVersion || s.StateDir == "" {
		return nil, fmt.Errorf("driver state version %d (state dir %q) is not one this driver knows", s.Version, s.StateDir)
	}
	return &s, nil
}

// task is one running (or exited, not yet destroyed) task attempt.
type task struct {
	id    string
	cfg   *drivers.TaskConfig
	state *driverState
	proc  *supervisor.Handle
	group *cgroups.Group // nil without cgroups

	done chan struct{} // closed once result is set
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
// holds processes that left the session), else the supervisor's view.
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
