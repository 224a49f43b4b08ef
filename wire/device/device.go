// Package device is the Nomad device plugin protocol in plain Go: the
// interface a device plugin implements, its messages, and the gRPC adapter
// that keeps the agent's rules (complete snapshots, streams that never close,
// a reservation that is never nil).
package device

import (
	"context"
	"time"

	"github.com/nomad-gpu/nomad-gpu/wire/base"
	"github.com/nomad-gpu/nomad-gpu/wire/structs"
)

// Plugin is a Nomad device plugin.
type Plugin interface {
	base.Plugin
	// Fingerprint sends a complete snapshot of every device group at once,
	// then again whenever health or membership changes, until ctx is done.
	Fingerprint(ctx context.Context) (<-chan *Fingerprint, error)
	// Stats sends one sample per interval until ctx is done.
	Stats(ctx context.Context, interval time.Duration) (<-chan *Stats, error)
	// Reserve prepares the given device IDs for a task.
	Reserve(ids []string) (*Reservation, error)
}

type Fingerprint struct {
	Groups []*Group
}

// Group is a set of identical devices: the scheduler's unit of choice
// ("vendor/type/name").
type Group struct {
	Vendor, Type, Name string
	Devices            []*Device
	Attributes         map[string]structs.Attribute
}

type Device struct {
	ID                string
	Healthy           bool
	HealthDescription string
	// PCIBusID ("0000:03:00.0") lets Nomad place tasks near the device.
	PCIBusID string
}

type Reservation struct {
	Envs    map[string]string
	Mounts  []Mount
	Devices []DeviceSpec
}

type Mount struct {
	TaskPath, HostPath string
	ReadOnly           bool
}

// DeviceSpec is a device node for container drivers; Permissions is a subset
// of "rwm".
type DeviceSpec struct {
	TaskPath, HostPath, Permissions string
}

type Stats struct {
	Groups []*GroupStats
}

type GroupStats struct {
	Vendor, Type, Name string
	// Instances is keyed by device ID, as fingerprinted.
	Instances map[string]*DeviceStats
}

type DeviceStats struct {
	Summary   *structs.StatValue
	Stats     *structs.StatObject
	Timestamp time.Time
}
