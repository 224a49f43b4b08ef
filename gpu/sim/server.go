// Package sim is the simulated NVML of nomad-gpu: go-nvml's own mock DGX
// servers (dgxa100, dgxh100, dgxh200, dgxb200) completed with what they lack
// (stable UUIDs, PCI bus ids, MIG device handles, telemetry, process lists,
// XID events) and driven from outside through a control file.
//
// New returns an nvml.Interface. The inventory (package gpu) runs the same
// code on it as on the real library; nothing here knows about the inventory.
// Whatever the inventory calls must be implemented here: an unimplemented
// method of the underlying mock panics.
package sim

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/hashicorp/go-hclog"
)

// DefaultControlPoll is how often a sim node looks at its control file.
const DefaultControlPoll = 250 * time.Millisecond

// Server is a simulated NVML library. Methods the inventory does not use
// fall through to the go-nvml mock server.
type Server struct {
	*server.Server
	sys     *system
	logger  hclog.Logger
	devices []*Device
	byUUID  map[string]nvml.Device // GPU- and MIG- UUIDs

	view atomic.Pointer[view]

	mu      sync.Mutex
	changed chan struct{} // closed (and replaced) whenever the view changes

	ctlPath  string
	ctlPoll  time.Duration
	ctlLast  []byte
	ctlStamp fileStamp
	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}
}

var _ nvml.Interface = (*Server)(nil)

// New builds a simulated node from a valid config (see Config.Validate).
// logger may be nil.
func New(cfg Config, logger hclog.Logger) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Seed == "" {
		h, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("sim: seed is empty and the host name is unknown: %w", err)
		}
		cfg.Seed = h
	}
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	sys := systems[cfg.System]
	mockSrv := sys.newServer()
	s := &Server{
		Server:  mockSrv,
		sys:     sys,
		logger:  logger,
		byUUID:  map[string]nvml.Device{},
		changed: make(chan struct{}),
		ctlPath: cfg.ControlFile,
		ctlPoll: cfg.ControlPoll,
	}
	if s.ctlPoll <= 0 {
		s.ctlPoll = DefaultControlPoll
	}
	for i, md := range mockSrv.Devices {
		d := newDevice(s, md.(*server.Device), i, cfg.Seed)
		s.devices = append(s.devices, d)
		s.byUUID[d.uuid] = d
	}
	for _, l := range cfg.MIG {
		for _, g := range l.GPUs {
			if err := s.devices[g].createMIG(l.Profiles, cfg.Seed); err != nil {
				return nil, fmt.Errorf("sim: GPU %d: %w", g, err)
			}
			for _, m := range s.devices[g].migs {
				s.byUUID[m.uuid] = m
			}
		}
	}
	s.view.Store(s.derive(ControlState{}))
	if s.ctlPath != "" {
		s.poll()
		s.stop, s.done = make(chan struct{}), make(chan struct{})
		go s.watch()
	}
	return s, nil
}

// Shutdown stops watching the control file. The sim has no library to
// unload, so unlike NVML it keeps answering afterwards.
func (s *Server) Shutdown() nvml.Return {
	if s.stop != nil {
		s.stopOnce.Do(func() { close(s.stop) })
		<-s.done
	}
	return nvml.SUCCESS
}

func (s *Server) DeviceGetCount() (int, nvml.Return) { return len(s.devices), nvml.SUCCESS }

func (s *Server) DeviceGetHandleByIndex(i int) (nvml.Device, nvml.Return) {
	if i < 0 || i >= len(s.devices) {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	return s.devices[i], nvml.SUCCESS
}

// DeviceGetHandleByUUID accepts GPU- and MIG- UUIDs, as NVML does.
func (s *Server) DeviceGetHandleByUUID(uuid string) (nvml.Device, nvml.Return) {
	if d, ok := s.byUUID[uuid]; ok {
		return d, nvml.SUCCESS
	}
	return nil, nvml.ERROR_NOT_FOUND
}

func (s *Server) DeviceGetHandleByPciBusId(busID string) (nvml.Device, nvml.Return) {
	for _, d := range s.devices {
		if busIDString(d.pci.BusId[:]) == busID || busIDString(d.pci.BusIdLegacy[:]) == busID {
			return d, nvml.SUCCESS
		}
	}
	return nil, nvml.ERROR_NOT_FOUND
}

func (s *Server) EventSetCreate() (nvml.EventSet, nvml.Return) {
	return newEventSet(s), nvml.SUCCESS
}

// current returns the view and a channel closed when it is replaced.
func (s *Server) current() (*view, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.view.Load(), s.changed
}

// fileStamp identifies a version of the control file cheaply.
type fileStamp struct {
	exists bool
	mtime  time.Time
	size   int64
	ino    uint64
}

func (s *Server) watch() {
	defer close(s.done)
	t := time.NewTicker(s.ctlPoll)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.poll()
		}
	}
}

// recentWrite is how long after a write the file is re-read even if its
// stat looks unchanged: file times are only as fine as the kernel's clock
// tick and inode numbers are reused, so two quick same-size writes can look
// identical to stat.
const recentWrite = 2 * time.Second

func (s *Server) poll() {
	fi, err := os.Stat(s.ctlPath)
	var st fileStamp
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		s.logger.Warn("cannot stat sim control file", "path", s.ctlPath, "error", err)
		return
	default:
		st = fileStamp{exists: true, mtime: fi.ModTime(), size: fi.Size(), ino: inode(fi)}
	}
	if st == s.ctlStamp && (!st.exists || time.Since(st.mtime) > recentWrite) {
		return
	}
	s.ctlStamp = st
	var data []byte
	if st.exists {
		data, err = os.ReadFile(s.ctlPath)
		if errors.Is(err, fs.ErrNotExist) {
			data = nil
		} else if err != nil {
			s.logger.Warn("cannot read sim control file", "path", s.ctlPath, "error", err)
			return
		}
	}
	if bytes.Equal(data, s.ctlLast) && s.ctlLast != nil {
		return
	}
	state, err := parseControl(s.ctlPath, data)
	if err != nil {
		s.logger.Warn("ignoring unreadable sim control file; keeping the previous state", "error", err)
		return
	}
	s.ctlLast = append(s.ctlLast[:0:0], data...)
	if s.ctlLast == nil {
		s.ctlLast = []byte{}
	}
	v := s.derive(state)
	s.mu.Lock()
	s.view.Store(v)
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
}

// view is the control state resolved against this node's devices; it is
// immutable once stored so readers need no lock.
type view struct {
	events   []XIDEvent
	util     map[string]nvml.Utilization
	procs    map[string][]nvml.ProcessInfo
	usedMiB  map[string]uint64
	lostGPUs map[string]bool
}

func (s *Server) derive(st ControlState) *view {
	v := &view{
		events:   st.XIDEvents,
		util:     map[string]nvml.Utilization{},
		procs:    map[string][]nvml.ProcessInfo{},
		usedMiB:  map[string]uint64{},
		lostGPUs: map[string]bool{},
	}
	for uuid, u := range st.Utilization {
		if _, ok := s.byUUID[uuid]; ok {
			v.util[uuid] = nvml.Utilization{Gpu: min(u.GPUPercent, 100), Memory: min(u.MemPercent, 100)}
		}
	}
	// A MIG-mode GPU is as busy as its instances, weighted by their share of
	// the GPU's slices, unless the file says otherwise.
	for _, d := range s.devices {
		if _, ok := v.util[d.uuid]; ok || len(d.migs) == 0 {
			continue
		}
		var g, m uint32
		for _, mg := range d.migs {
			if u, ok := v.util[mg.uuid]; ok {
				g += u.Gpu * mg.giProfile.SliceCount / maxSlices
				m += u.Memory * mg.giProfile.SliceCount / maxSlices
			}
		}
		if g > 0 || m > 0 {
			v.util[d.uuid] = nvml.Utilization{Gpu: min(g, 100), Memory: min(m, 100)}
		}
	}
	for _, p := range st.Processes {
		switch d := s.byUUID[p.UUID].(type) {
		case *Device:
			pi := nvml.ProcessInfo{Pid: p.PID, UsedGpuMemory: p.UsedMiB << 20, GpuInstanceId: noInstance, ComputeInstanceId: noInstance}
			v.procs[d.uuid] = append(v.procs[d.uuid], pi)
			v.usedMiB[d.uuid] += p.UsedMiB
		case *MigDevice:
			pi := nvml.ProcessInfo{Pid: p.PID, UsedGpuMemory: p.UsedMiB << 20, GpuInstanceId: d.gi, ComputeInstanceId: d.ci}
			v.procs[d.uuid] = append(v.procs[d.uuid], pi)
			v.procs[d.parent.uuid] = append(v.procs[d.parent.uuid], pi)
			v.usedMiB[d.uuid] += p.UsedMiB
			v.usedMiB[d.parent.uuid] += p.UsedMiB
		}
	}
	for _, u := range st.LostGPUs {
		if _, ok := s.byUUID[u].(*Device); ok {
			v.lostGPUs[u] = true
		}
	}
	return v
}

// noInstance is NVML's GPU/compute instance id for "not a MIG instance".
const noInstance = 0xFFFFFFFF

// maxSlices is the number of compute slices of every simulated GPU.
const maxSlices = 7
