// Package drivers is the Nomad task driver protocol in plain Go: the
// interface a task driver implements, its messages, and (server.go) the gRPC
// adapter that keeps the client's rules: streams that never end on their
// own, idempotent lifecycle calls, messages never nil where the client
// dereferences them.
package drivers

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/nomad-gpu/nomad-gpu/wire/base"
	"github.com/nomad-gpu/nomad-gpu/wire/structs"
)

// Plugin is a Nomad task driver.
type Plugin interface {
	base.Plugin
	// NewTaskConfig returns a pointer to a zero task config struct whose
	// `hcl` tags declare the jobspec `config { }` schema (package schema).
	NewTaskConfig() any
	Capabilities() *Capabilities
	// Fingerprint sends the driver's health and attributes at once, then on
	// every change, until ctx is done.
	Fingerprint(ctx context.Context) (<-chan *Fingerprint, error)
	// TaskEvents streams driver events for all tasks until ctx is done.
	TaskEvents(ctx context.Context) (<-chan *TaskEvent, error)

	// StartTask starts a task. cfg.DriverConfig holds the decoded task config
	// (NewTaskConfig's type). Return a *RecoverableError to let the client
	// restart the task under its restart policy; any other error fails it.
	StartTask(cfg *TaskConfig) (*TaskHandle, *NetworkOverride, error)
	// RecoverTask re-attaches to a task after a client or plugin restart
	// from the handle StartTask returned. handle.Config.DriverConfig is nil
	// after a client restart: everything needed must be in DriverState.
	// Idempotent: a task already tracked is a success.
	RecoverTask(handle *TaskHandle) error
	// WaitTask delivers the task's exit result once it exits; it may be
	// called many times, concurrently, and after exit returns at once until
	// DestroyTask.
	WaitTask(ctx context.Context, taskID string) (<-chan *ExitResult, error)
	// StopTask signals the task (signal may be empty: use SIGINT), waits up to
	// timeout, then kills it. A task already gone is a success.
	StopTask(taskID string, timeout time.Duration, signal string) error
	// DestroyTask frees everything the task holds; force kills a running
	// task first. Idempotent.
	DestroyTask(taskID string, force bool) error
	InspectTask(taskID string) (*TaskStatus, error)
	// TaskStats sends one sample per interval until the task exits or ctx
	// is done, then closes the channel.
	TaskStats(ctx context.Context, taskID string, interval time.Duration) (<-chan *TaskResourceUsage, error)
	SignalTask(taskID string, signal string) error
	ExecTask(taskID string, cmd []string, timeout time.Duration) (*ExecTaskResult, error)
	// ExecTaskStreaming runs cmd in the task's context wired to the given
	// streams (`nomad alloc exec`) and returns its exit result.
	ExecTaskStreaming(ctx context.Context, taskID string, opts *ExecOptions) (*ExitResult, error)
	// Shutdown is the client's graceful stop (2 s budget): tasks keep running.
	Shutdown() error
}

// HealthState of a driver fingerprint.
type HealthState int

const (
	HealthUndetected HealthState = 0
	HealthUnhealthy  HealthState = 1
	HealthHealthy    HealthState = 2
)

type Fingerprint struct {
	// Attributes become node attributes under these exact keys; prefix them
	// "driver.<name>.". A later "" value deletes one.
	Attributes        map[string]structs.Attribute
	Health            HealthState
	HealthDescription string
	// Err, when set, makes the client ignore this message and mark the
	// driver unhealthy.
	Err error
}

type FSIsolation int

const (
	FSIsolationNone   FSIsolation = 0
	FSIsolationChroot FSIsolation = 1
	FSIsolationImage  FSIsolation = 2
	FSIsolationUnveil FSIsolation = 3
)

type NetIsolationMode int

const (
	NetIsolationHost  NetIsolationMode = 0
	NetIsolationGroup NetIsolationMode = 1
	NetIsolationTask  NetIsolationMode = 2
	NetIsolationNone  NetIsolationMode = 3
)

type MountConfigs int

const (
	MountConfigsAll  MountConfigs = 0
	MountConfigsNone MountConfigs = 1
)

type Capabilities struct {
	SendSignals          bool
	Exec                 bool
	FSIsolation          FSIsolation
	NetIsolationModes    []NetIsolationMode
	MustInitiateNetwork  bool
	MountConfigs         MountConfigs
	DisableLogCollection bool
	DynamicWorkloadUsers bool
}

// TaskConfig is one start attempt of a task. ID is "<alloc>/<task>/<random>"
// and is new on every attempt.
type TaskConfig struct {
	ID            string
	Name          string
	JobName       string
	JobID         string
	TaskGroupName string
	Namespace     string
	AllocID       string
	NodeName      string
	NodeID        string
	// DriverConfig is the decoded task config (NewTaskConfig's type); nil
	// when the client sent none (RecoverTask after a client restart).
	DriverConfig any
	// RawDriverConfig is the msgpack DriverConfig was decoded from. It rides
	// along so a handle that echoes this config gives the client back the
	// same bytes; drivers never need to read it.
	RawDriverConfig  []byte
	Env              map[string]string
	DeviceEnv        map[string]string
	Resources        *Resources
	Mounts           []Mount
	Devices          []DeviceConfig
	User             string
	AllocDir         string
	StdoutPath       string
	StderrPath       string
	NetworkIsolation *NetworkIsolationSpec
	DNS              *DNSConfig
}

type Resources struct {
	CPUShares   int64 // MHz
	MemoryMB    int64
	MemoryMaxMB int64
	Linux       *LinuxResources
	Ports       []PortMapping
}

type LinuxResources struct {
	CPUPeriod        int64
	CPUQuota         int64
	CPUShares        int64
	MemoryLimitBytes int64
	OOMScoreAdj      int64
	CpusetCpus       string
	PercentTicks     float64
	// CpusetCgroupPath is the cgroup the client made for the task.
	CpusetCgroupPath string
}

type PortMapping struct {
	Label  string
	Value  int32
	To     int32
	HostIP string
}

type Mount struct {
	TaskPath, HostPath string
	Readonly           bool
	PropagationMode    string
	SELinuxLabel       string
}

type DeviceConfig struct {
	TaskPath, HostPath, Permissions string
}

type NetworkIsolationSpec struct {
	Mode     NetIsolationMode
	Path     string
	Labels   map[string]string
	Hostname string
	Address  string
}

type DNSConfig struct {
	Servers, Searches, Options []string
}

type TaskState int

const (
	TaskStateUnknown TaskState = 0
	TaskStateRunning TaskState = 1
	TaskStateExited  TaskState = 2
)

// TaskHandle is what the client persists for a task; DriverState is opaque
// to it and comes back in RecoverTask.
type TaskHandle struct {
	Version     int32
	Config      *TaskConfig
	State       TaskState
	DriverState []byte
}

type NetworkOverride struct {
	PortMap       map[string]int32
	Addr          string
	AutoAdvertise bool
}

type ExitResult struct {
	ExitCode  int
	Signal    int
	OOMKilled bool
	// Err becomes the client's exit message.
	Err error
}

type TaskStatus struct {
	ID          string
	Name        string
	State       TaskState
	StartedAt   time.Time
	CompletedAt time.Time
	ExitResult  *ExitResult
	Attributes  map[string]string
}

// TaskResourceUsage is one stats sample; Pids breaks it down per process.
type TaskResourceUsage struct {
	Timestamp time.Time
	Usage     ResourceUsage
	Pids      map[string]*ResourceUsage
}

type ResourceUsage struct {
	CPU    CPUStats
	Memory MemoryStats
}

// CPU stat fields that were really measured (measured_fields on the wire).
const (
	CPUSystemMode       = "System Mode"
	CPUUserMode         = "User Mode"
	CPUTotalTicks       = "Total Ticks"
	CPUThrottledPeriods = "Throttled Periods"
	CPUThrottledTime    = "Throttled Time"
	CPUPercent          = "Percent"
)

type CPUStats struct {
	SystemMode, UserMode, TotalTicks float64
	ThrottledPeriods, ThrottledTime  uint64
	Percent                          float64
	Measured                         []string
}

// Memory stat fields that were really measured.
const (
	MemRSS            = "RSS"
	MemCache          = "Cache"
	MemMaxUsage       = "Max Usage"
	MemKernelUsage    = "Kernel Usage"
	MemKernelMaxUsage = "Kernel Max Usage"
	MemUsage          = "Usage"
	MemSwap           = "Swap"
)

type MemoryStats struct {
	RSS, Cache, MaxUsage, KernelUsage, KernelMaxUsage, Usage, Swap uint64
	Measured                                                       []string
}

type TaskEvent struct {
	TaskID      string
	AllocID     string
	TaskName    string
	Timestamp   time.Time
	Message     string
	Annotations map[string]string
}

type ExecTaskResult struct {
	Stdout, Stderr []byte
	ExitResult     *ExitResult
}

type TerminalSize struct {
	Height, Width int
}

// ExecOptions wires a streaming exec to the client's terminal.
type ExecOptions struct {
	Command []string
	Tty     bool
	Stdin   io.ReadCloser
	Stdout  io.WriteCloser
	Stderr  io.WriteCloser
	// ResizeCh delivers terminal size changes when Tty is set.
	ResizeCh <-chan TerminalSize
}

// RecoverableError marks a StartTask failure the client may retry under the
// task's restart policy.
type RecoverableError struct {
	Err         error
	Recoverable bool
}

func (e *RecoverableError) Error() string { return e.Err.Error() }
func (e *RecoverableError) Unwrap() error { return e.Err }

// ErrTaskNotFound, wrapped or returned as is, makes the adapter answer with
// codes.NotFound. The Nomad client does not turn that code back into its own
// ErrTaskNotFound, so to it an unknown task is an ordinary error: StopTask
// and DestroyTask should still succeed for unknown tasks.
var ErrTaskNotFound = errors.New("task not found")

// NewRecoverableError wraps err; recoverable says whether a restart may help.
func NewRecoverableError(err error, recoverable bool) error {
	if err == nil {
		return nil
	}
	return &RecoverableError{Err: err, Recoverable: recoverable}
}
