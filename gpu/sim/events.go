package sim

import (
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

// EventSet delivers the control file's XID events to the devices registered
// on it. Each set keeps its own position in the event list, so every set
// sees every event once, including events written before it was created.
type EventSet struct {
	*mock.EventSet
	srv *Server

	mu      sync.Mutex
	masks   map[*Device]uint64
	lastID  uint64
	freed   bool
	freedCh chan struct{}
}

var _ nvml.EventSet = (*EventSet)(nil)

func newEventSet(s *Server) *EventSet {
	return &EventSet{EventSet: &mock.EventSet{}, srv: s, masks: map[*Device]uint64{}, freedCh: make(chan struct{})}
}

func (e *EventSet) register(d *Device, mask uint64) nvml.Return {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.freed {
		return nvml.ERROR_UNINITIALIZED
	}
	e.masks[d] |= mask
	return nvml.SUCCESS
}

// Wait blocks up to timeoutms for the next event, like nvmlEventSetWait.
func (e *EventSet) Wait(timeoutms uint32) (nvml.EventData, nvml.Return) {
	var timeout <-chan time.Time
	if timeoutms > 0 {
		t := time.NewTimer(time.Duration(timeoutms) * time.Millisecond)
		defer t.Stop()
		timeout = t.C
	}
	for {
		v, changed := e.srv.current()
		ed, ret, ok := e.next(v)
		if ok {
			return ed, ret
		}
		if timeout == nil {
			return nvml.EventData{}, nvml.ERROR_TIMEOUT
		}
		select {
		case <-changed:
		case <-timeout:
			return nvml.EventData{}, nvml.ERROR_TIMEOUT
		case <-e.freedCh:
			return nvml.EventData{}, nvml.ERROR_UNINITIALIZED
		}
	}
}

// next consumes the view's events past this set's position and returns the
// first that belongs to a registered device.
func (e *EventSet) next(v *view) (nvml.EventData, nvml.Return, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.freed {
		return nvml.EventData{}, nvml.ERROR_UNINITIALIZED, true
	}
	for _, ev := range v.events {
		if ev.ID <= e.lastID {
			continue
		}
		e.lastID = ev.ID
		ed := nvml.EventData{EventType: nvml.EventTypeXidCriticalError, EventData: ev.XID, GpuInstanceId: noInstance, ComputeInstanceId: noInstance}
		var gpu *Device
		e.srv.migMu.RLock()
		dev := e.srv.byUUID[ev.UUID]
		e.srv.migMu.RUnlock()
		switch d := dev.(type) {
		case *Device:
			gpu = d
		case *MigDevice:
			// NVML reports an instance's XID on the parent GPU's handle.
			gpu, ed.GpuInstanceId, ed.ComputeInstanceId = d.parent, d.gi, d.ci
		default:
			continue
		}
		if e.masks[gpu]&nvml.EventTypeXidCriticalError == 0 {
			continue
		}
		ed.Device = gpu
		return ed, nvml.SUCCESS, true
	}
	return nvml.EventData{}, 0, false
}

func (e *EventSet) Free() nvml.Return {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.freed {
		e.freed = true
		close(e.freedCh)
	}
	return nvml.SUCCESS
}
