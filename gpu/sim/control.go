package sim

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// ControlState is the content of a sim control file, the documented way for
// tests, demos and operators to drive a running sim node from outside. Every
// process that opens a sim node with the same control file (device plugin,
// task driver, each restarted at will) reads it, after recording its
// devices in it (which creates it); Control writes it.
//
// The file is JSON, always replaced whole and atomically (written to a
// temporary file in the same directory, then renamed over it). Writers hold
// an exclusive flock on "<path>.lock" around their read-modify-write so
// concurrent writers lose no update. A missing file is the empty state.
// Readers notice a change within the sim's poll period (250ms by default).
//
//	{
//	  "version": 1,
//	  "last_event_id": 2,
//	  "xid_events": [
//	    {"id": 1, "uuid": "GPU-1c0d…", "xid": 79, "time": "2025-06-01T10:00:00Z"},
//	    {"id": 2, "uuid": "MIG-6a2f…", "xid": 94, "time": "2025-06-01T10:00:05Z"}
//	  ],
//	  "utilization": {"GPU-1c0d…": {"gpu_percent": 90, "mem_percent": 35}},
//	  "processes": [{"pid": 4242, "uuid": "MIG-6a2f…", "used_mib": 2048}],
//	  "lost_gpus": ["GPU-77e1…"],
//	  "mig_geometry": {"GPU-2b7e…": ["3g.40gb", "1g.10gb", "1g.10gb"]},
//	  "nodes": {"dgxh100/node-1": {"system": "dgxh100", "seed": "node-1",
//	    "opened": "2025-06-01T09:59:00Z", "devices": ["GPU-1c0d…", "MIG-6a2f…", …]}}
//	}
//
// Keys:
//   - xid_events: XID errors, in id order. They are sticky: every event-set
//     (every Inventory.Events subscriber, including ones opened after the
//     write) receives each event once, so a restarted plugin still sees its
//     devices' past errors until the events are cleared. An event on a MIG-
//     UUID is reported by NVML as an event of the parent GPU carrying the
//     instance's GPU and compute instance IDs, as on real hardware.
//   - last_event_id: the id of the newest event ever written; it survives
//     Clear so ids only grow and readers deliver each id once.
//   - utilization: GPU and memory utilization in percent by GPU- or MIG-
//     UUID (absent: 0). A MIG-mode GPU without its own entry reports the
//     slice-weighted sum of its instances. Temperature, power and SM clock
//     follow the GPU's utilization. Loads in the node's load directory
//     (LoadDir, see LoadRecord) add to these values.
//   - processes: "process pid uses used_mib MiB on device uuid". A
//     device's used memory is the sum of its processes (and of its loads);
//     processes on a MIG instance also count toward (and are listed on) the
//     parent GPU.
//   - lost_gpus: GPU- UUIDs that have "fallen off the bus": every NVML query
//     on them and their MIG instances fails with ERROR_GPU_IS_LOST, except
//     GetUUID.
//   - mig_geometry: the GPU instances of GPUs in MIG mode, by GPU- UUID,
//     each with one compute instance spanning it; it overrides the config's
//     mig { } layout of that GPU ([] for none). Inventory.SetMIGGeometry
//     writes it (Server.ChangeMIG) after changing a GPU through NVML calls,
//     and every node with that GPU rebuilds the GPU's instances to match
//     when it polls or opens (placed as in a layout, so the same geometry
//     gets the same MIG UUIDs). A GPU not in MIG mode ignores it: MIG mode
//     is never toggled. Clear keeps it: it is the GPUs' state, not an
//     injected fault.
//   - nodes: the sim nodes that opened the file, by "<system>/<seed>", each
//     with its GPU- and MIG- UUIDs. A node records itself whenever it opens
//     (New), which creates the file; Clear keeps them. Nodes ignore the
//     key; the `nomad-device-gpu sim` command reads it to refuse UUIDs no
//     node has.
//
// UUIDs that name no device of a node are ignored by that node.
type ControlState struct {
	Version     int                    `json:"version"`
	LastEventID uint64                 `json:"last_event_id"`
	XIDEvents   []XIDEvent             `json:"xid_events,omitempty"`
	Utilization map[string]Utilization `json:"utilization,omitempty"`
	Processes   []ProcessMemory        `json:"processes,omitempty"`
	LostGPUs    []string               `json:"lost_gpus,omitempty"`
	MIGGeometry map[string][]string    `json:"mig_geometry,omitempty"`
	Nodes       map[string]NodeDevices `json:"nodes,omitempty"`
}

// NodeDevices is what a sim node records of itself in its control file.
type NodeDevices struct {
	System string    `json:"system"`
	Seed   string    `json:"seed"`
	Opened time.Time `json:"opened"`
	// Devices are its GPU- UUIDs in index order, each followed by the
	// MIG- UUIDs of its instances.
	Devices []string `json:"devices"`
}

// XIDEvent is an injected XID error.
type XIDEvent struct {
	ID   uint64    `json:"id"`
	UUID string    `json:"uuid"`
	XID  uint64    `json:"xid"`
	Time time.Time `json:"time"`
}

// Utilization is a device's utilization in percent.
type Utilization struct {
	GPUPercent uint32 `json:"gpu_percent"`
	MemPercent uint32 `json:"mem_percent"`
}

// ProcessMemory says that a process uses GPU memory on a device.
type ProcessMemory struct {
	PID     uint32 `json:"pid"`
	UUID    string `json:"uuid"`
	UsedMiB uint64 `json:"used_mib"`
}

// ControlVersion is the format version Control writes.
const ControlVersion = 1

// ReadControl reads a control file. A missing file is the empty state, not
// an error.
func ReadControl(path string) (ControlState, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return ControlState{}, nil
	}
	if err != nil {
		return ControlState{}, fmt.Errorf("sim control: %w", err)
	}
	return parseControl(path, data)
}

func parseControl(path string, data []byte) (ControlState, error) {
	var st ControlState
	if len(data) == 0 {
		return st, nil
	}
	if err := json.Unmarshal(data, &st); err != nil {
		return ControlState{}, fmt.Errorf("sim control %s: %w", path, err)
	}
	if st.Version > ControlVersion {
		return ControlState{}, fmt.Errorf("sim control %s: version %d is newer than this build understands (%d)", path, st.Version, ControlVersion)
	}
	return st, nil
}

// Control writes a sim control file. It validates no UUID: a node ignores
// what is not its own, so one file can drive several nodes.
type Control struct {
	path string
}

// OpenControl returns a writer for the control file at path. Nothing is
// touched until the first write, which creates the file.
func OpenControl(path string) *Control { return &Control{path: path} }

// Path is the control file's path.
func (c *Control) Path() string { return c.path }

// InjectXID appends an XID error on a GPU- or MIG- device. It stays in the
// file (and is delivered to every new event subscriber) until Clear or
// ClearXIDs.
func (c *Control) InjectXID(uuid string, xid uint64) error {
	return c.update(func(st *ControlState) error {
		st.LastEventID++
		st.XIDEvents = append(st.XIDEvents, XIDEvent{ID: st.LastEventID, UUID: uuid, XID: xid, Time: time.Now().UTC()})
		return nil
	})
}

// ClearXIDs removes every injected XID error, leaving the rest of the state.
func (c *Control) ClearXIDs() error {
	return c.update(func(st *ControlState) error {
		st.XIDEvents = nil
		return nil
	})
}

// SetUtilization sets a device's GPU and memory utilization (percent).
func (c *Control) SetUtilization(uuid string, gpuPercent, memPercent uint32) error {
	if gpuPercent > 100 || memPercent > 100 {
		return fmt.Errorf("sim control: utilization %d%%/%d%% out of range 0-100", gpuPercent, memPercent)
	}
	return c.update(func(st *ControlState) error {
		if st.Utilization == nil {
			st.Utilization = map[string]Utilization{}
		}
		st.Utilization[uuid] = Utilization{GPUPercent: gpuPercent, MemPercent: memPercent}
		return nil
	})
}

// SetProcessMemory records that process pid uses usedMiB MiB on the device;
// 0 removes the process from that device.
func (c *Control) SetProcessMemory(pid uint32, uuid string, usedMiB uint64) error {
	return c.update(func(st *ControlState) error {
		st.Processes = slices.DeleteFunc(st.Processes, func(p ProcessMemory) bool { return p.PID == pid && p.UUID == uuid })
		if usedMiB > 0 {
			st.Processes = append(st.Processes, ProcessMemory{PID: pid, UUID: uuid, UsedMiB: usedMiB})
		}
		return nil
	})
}

// SetGPULost makes a GPU fall off the bus (lost = true) or come back.
func (c *Control) SetGPULost(uuid string, lost bool) error {
	return c.update(func(st *ControlState) error {
		st.LostGPUs = slices.DeleteFunc(st.LostGPUs, func(u string) bool { return u == uuid })
		if lost {
			st.LostGPUs = append(st.LostGPUs, uuid)
		}
		return nil
	})
}

// Clear returns the node to its idle state: no events, utilization,
// processes or lost GPUs. Event ids keep growing, and the nodes' records of
// their devices and the MIG geometries stay: they are no injected state.
func (c *Control) Clear() error {
	return c.update(func(st *ControlState) error {
		*st = ControlState{LastEventID: st.LastEventID, Nodes: st.Nodes, MIGGeometry: st.MIGGeometry}
		return nil
	})
}

func (c *Control) update(fn func(*ControlState) error) error {
	unlock, err := lockFile(c.path + ".lock")
	if err != nil {
		return fmt.Errorf("sim control: lock %s.lock: %w", c.path, err)
	}
	defer unlock()
	st, err := ReadControl(c.path)
	if err != nil {
		return err
	}
	if err := fn(&st); err != nil {
		return err
	}
	st.Version = ControlVersion
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return fmt.Errorf("sim control: %w", err)
	}
	return writeAtomic(c.path, append(data, '\n'))
}

// writeAtomic replaces path so that a reader sees the old or the new content,
// never a mix: readers do not take the lock.
func writeAtomic(path string, data []byte) error {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return fmt.Errorf("sim control: %w", err)
	}
	defer os.Remove(tmp.Name()) // no-op after a successful rename
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("sim control: %w", err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return fmt.Errorf("sim control: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("sim control: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("sim control: %w", err)
	}
	return nil
}

// Devices are the UUIDs the nodes of the file recorded, node by node (in
// key order), each node's in its order.
func (st ControlState) Devices() []string {
	keys := make([]string, 0, len(st.Nodes))
	for k := range st.Nodes {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var all []string
	for _, k := range keys {
		for _, u := range st.Nodes[k].Devices {
			if !slices.Contains(all, u) {
				all = append(all, u)
			}
		}
	}
	return all
}

// listed is how many UUIDs an error lists before it says how many more.
const listed = 8

// ResolveDevice is the device of the file's nodes that id names: its whole
// GPU- or MIG- UUID, or a prefix of it that names no other device, such as
// the short form `nomad-gpu top` shows (GPU-1c0d2a3b). Case does not
// matter. An error says which devices there are, or which ones a prefix
// matches.
func (st ControlState) ResolveDevice(id string) (string, error) {
	all := st.Devices()
	if len(all) == 0 {
		return "", errors.New("the control file lists no node's devices: a sim node records them when it starts (the device plugin or the driver with backend \"sim\" and this control_file); start it first")
	}
	var matches []string
	for _, u := range all {
		if strings.EqualFold(u, id) {
			return u, nil
		}
		if len(id) <= len(u) && strings.EqualFold(u[:len(id)], id) {
			matches = append(matches, u)
		}
	}
	switch len(matches) {
	case 1:
		return matches[0], nil
	case 0:
		return "", fmt.Errorf("%q is no device of the sim node(s) of this control file; allowed: a GPU- or MIG- UUID, or a unique prefix of one, of %s", id, listUUIDs(all))
	}
	return "", fmt.Errorf("%q is a prefix of %d devices (%s); give more of the UUID", id, len(matches), listUUIDs(matches))
}

func listUUIDs(uuids []string) string {
	if len(uuids) <= listed {
		return strings.Join(uuids, ", ")
	}
	return fmt.Sprintf("%s and %d more (`sim show` lists them all)", strings.Join(uuids[:listed], ", "), len(uuids)-listed)
}
