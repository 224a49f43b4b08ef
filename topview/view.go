package topview

import (
	"time"

	"github.com/nomad-gpu/nomad-gpu/controller"
)

// View is the cluster's GPUs and GPU queue at one instant. Its JSON form is
// the stable output of `nomad-gpu top -json` (see the package doc).
type View struct {
	GeneratedAt time.Time    `json:"generated_at"`
	Nodes       []Node       `json:"nodes"`
	Queue       []QueueEntry `json:"queue"`
	// HistoryError says why the finished allocations could not be read;
	// every forecast is then unknown.
	HistoryError string `json:"history_error,omitempty"`
	// Controller is who leads the controller and which jobs it raised
	// (nil when not read); ControllerError why it could not be read.
	Controller      *controller.Status `json:"controller,omitempty"`
	ControllerError string             `json:"controller_error,omitempty"`
}

// Node is one Nomad client and its GPUs.
type Node struct {
	Name       string `json:"name"`
	ID         string `json:"id"`
	Datacenter string `json:"datacenter"`
	Pool       string `json:"pool"`
	Class      string `json:"class"`
	Status     string `json:"status"`
	Eligible   bool   `json:"eligible"`
	Drain      bool   `json:"drain"`
	// StatsError says why the node's device stats are missing ("" when
	// they were read).
	StatsError string `json:"stats_error,omitempty"`
	GPUs       []GPU  `json:"gpus"`
	// StrayPins are the node's pins (nomad_gpu.pin.<GPU-UUID>) that name
	// no GPU of it, each with the GPUs it has, as its device plugin says.
	StrayPins []string `json:"stray_pins,omitempty"`
}

// GPU modes: how a physical GPU is offered to Nomad.
const (
	ModeWhole = "whole" // one nvidia/gpu device
	ModeMIG   = "mig"   // MIG instances only
	ModeMPS   = "mps"   // MPS shares only
)

// GPU is one physical GPU and the slices Nomad schedules on it.
type GPU struct {
	// UUID is the GPU- UUID; for a GPU in MIG mode (Nomad sees only its
	// instances) from its instances' stats, "" when they have none.
	UUID  string `json:"uuid"`
	Model string `json:"model"`
	// Index is the NVML index where the device stats (or an MPS GPU's
	// attributes) give it.
	Index             *int     `json:"index,omitempty"`
	PCIBusID          string   `json:"pci_bus_id"`
	Mode              string   `json:"mode"`
	Healthy           bool     `json:"healthy"`
	HealthDescription string   `json:"health_description,omitempty"`
	MemoryTotalMiB    *int64   `json:"memory_total_mib"`
	MemoryUsedMiB     *int64   `json:"memory_used_mib"`
	UtilizationPct    *float64 `json:"utilization_pct"`
	TemperatureC      *float64 `json:"temperature_c"`
	PowerW            *float64 `json:"power_w"`
	Slices            []Slice  `json:"slices"`
	// Layout is what the device plugin publishes of the GPU's layout (nil
	// when it publishes nothing).
	Layout *GPULayout `json:"layout,omitempty"`
	// Allocations hold the GPU or any of its slices, one entry per
	// allocation and task.
	Allocations []AllocRef `json:"allocations"`
}

// GPULayout is a GPU's layout: what it offers, what it is asked to
// offer, how far along that is, and the controller's last change of it.
type GPULayout struct {
	Current string `json:"current"`
	Desired string `json:"desired,omitempty"`
	Pinned  bool   `json:"pinned,omitempty"`
	State   string `json:"state"`
	Error   string `json:"error,omitempty"`
	// Changed and Reason are the controller's last change, when the
	// controller's status was read and it made one.
	Changed *time.Time `json:"changed,omitempty"`
	Reason  string     `json:"reason,omitempty"`
}

// Slice is a MIG instance or an MPS share.
type Slice struct {
	Type string `json:"type"` // "mig" or "mps"
	ID   string `json:"id"`
	// Profile is the MIG profile, or for an MPS share "1/<shares>".
	Profile           string    `json:"profile"`
	Healthy           bool      `json:"healthy"`
	HealthDescription string    `json:"health_description,omitempty"`
	MemoryTotalMiB    *int64    `json:"memory_total_mib"`
	MemoryUsedMiB     *int64    `json:"memory_used_mib"`
	UtilizationPct    *float64  `json:"utilization_pct"`
	Alloc             *AllocRef `json:"alloc"`
}

// AllocRef names the task of an allocation holding a device.
type AllocRef struct {
	AllocID   string `json:"alloc_id"`
	Job       string `json:"job"`
	Group     string `json:"group"`
	Task      string `json:"task"`
	Namespace string `json:"namespace"`
	// MemoryUsedMiB is the GPU memory the task uses of the GPU or slice
	// it is listed under, where the device stats say (see the package
	// doc); nil when they do not.
	MemoryUsedMiB *int64 `json:"memory_used_mib"`
	// Prediction is the task's forecast: its predicted remaining and
	// whole run time (sizing.Forecast); left out for a task not forecast.
	Prediction *Prediction `json:"prediction,omitempty"`
}

// Queue states.
const (
	StateBlocked = "blocked" // not placed: a blocked evaluation
	StatePending = "pending" // placed, not running yet
)

// QueueEntry is a set of identical allocations waiting for GPUs.
type QueueEntry struct {
	Job       string `json:"job"`
	Namespace string `json:"namespace"`
	Group     string `json:"group"`
	Pool      string `json:"pool"`
	State     string `json:"state"`
	// Devices are what one allocation asks for.
	Devices        []DeviceAsk `json:"devices"`
	Count          int         `json:"count"`
	WaitingSeconds int64       `json:"waiting_seconds"`
	Since          time.Time   `json:"since"`
	Reason         string      `json:"reason"`
	// Gang: a member group of a held job (a gang, of one member or more)
	// waiting at count 0 for the controller to admit it; the controller's
	// status says why it waits (Controller.Gangs).
	Gang bool `json:"gang,omitempty"`
	// NeverFits: no node of the pool could ever take one allocation
	// (nomadview's NeverFits rule); Reason begins with why.
	NeverFits bool `json:"never_fits,omitempty"`
	// Node is where a pending allocation was placed.
	Node string `json:"node,omitempty"`
	// PredictedWaitSeconds is, for blocked work, the predicted time until
	// its last allocation is placed; PredictedRuntimeSeconds the predicted
	// run time of one allocation; PredictionBasis what the wait rests on
	// (a sizing.Basis* kind: "fits_now", "list_schedule", "none"). Nil
	// when not known; all left out for pending work.
	PredictedWaitSeconds    *int64 `json:"predicted_wait_seconds,omitempty"`
	PredictedRuntimeSeconds *int64 `json:"predicted_runtime_seconds,omitempty"`
	PredictionBasis         string `json:"prediction_basis,omitempty"`
}

// DeviceAsk is one device request: a jobspec's device name and count.
type DeviceAsk struct {
	Name  string `json:"name"`
	Count int    `json:"count"`
}
