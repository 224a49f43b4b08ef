package gpu

import (
	"context"
	"fmt"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// eventWait bounds each blocking NVML wait, and so how long Close or a
// cancelled context waits for an event loop to end.
var eventWait = 500 * time.Millisecond

// eventRetry is the pause after an NVML wait failure other than a timeout.
var eventRetry = time.Second

// Events streams XID errors of every GPU present at the call (and their MIG
// instances) until ctx is done or the Inventory is closed; the channel is
// closed then. GPUs that cannot report events are logged and skipped; Events
// fails only when NVML cannot create an event set at all.
//
// Real NVML reports only errors that happen after the call. The sim also
// replays the XIDs still in its control file to each new subscriber, so a
// restarted plugin sees its devices' earlier errors until they are cleared.
func (i *Inventory) Events(ctx context.Context) (<-chan Event, error) {
	i.life.RLock()
	defer i.life.RUnlock()
	if i.closed {
		return nil, ErrClosed
	}
	set, ret := i.lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("gpu: %w", nvmlErr("event set", ret))
	}
	n, ret := i.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		set.Free()
		return nil, fmt.Errorf("gpu: %w", nvmlErr("device count", ret))
	}
	for idx := range n {
		i.register(set, idx)
	}
	// Prime the MIG instance map so the first event can be attributed.
	if _, err := i.snapshot(); err != nil {
		i.logger.Warn("cannot enumerate devices for XID attribution", "error", err)
	}
	ch := make(chan Event, 64)
	i.loops.Add(1)
	go i.eventLoop(ctx, set, ch)
	return ch, nil
}

func (i *Inventory) register(set nvml.EventSet, idx int) {
	dev, ret := i.lib.DeviceGetHandleByIndex(idx)
	if ret != nvml.SUCCESS {
		i.logger.Warn("no XID events for GPU", "index", idx, "error", nvmlErr("device handle", ret))
		return
	}
	supported, ret := dev.GetSupportedEventTypes()
	if ret != nvml.SUCCESS {
		i.logger.Warn("no XID events for GPU", "index", idx, "error", nvmlErr("supported event types", ret))
		return
	}
	if supported&nvml.EventTypeXidCriticalError == 0 {
		i.logger.Warn("no XID events for GPU: not supported by this device", "index", idx)
		return
	}
	if ret := dev.RegisterEvents(nvml.EventTypeXidCriticalError, set); ret != nvml.SUCCESS {
		i.logger.Warn("no XID events for GPU", "index", idx, "error", nvmlErr("register events", ret))
	}
}

func (i *Inventory) eventLoop(ctx context.Context, set nvml.EventSet, ch chan<- Event) {
	defer i.loops.Done()
	defer close(ch)
	defer set.Free()
	waitMs := uint32(eventWait / time.Millisecond)
	var lastErr nvml.Return
	for {
		select {
		case <-ctx.Done():
			return
		case <-i.ctx.Done():
			return
		default:
		}
		e, ret := set.Wait(waitMs)
		switch {
		case ret == nvml.ERROR_TIMEOUT:
			continue
		case ret != nvml.SUCCESS:
			if ret != lastErr {
				i.logger.Warn("waiting for XID events failed; retrying", "error", nvmlErr("event wait", ret))
				lastErr = ret
			}
			select {
			case <-ctx.Done():
				return
			case <-i.ctx.Done():
				return
			case <-time.After(eventRetry):
			}
			continue
		}
		lastErr = nvml.SUCCESS
		if e.EventType != nvml.EventTypeXidCriticalError {
			continue
		}
		ev := Event{UUID: i.eventUUID(e), XID: e.EventData, Time: time.Now()}
		if ev.UUID == "" {
			i.logger.Warn("XID event from a device without a UUID", "xid", e.EventData)
			continue
		}
		select {
		case ch <- ev:
		case <-ctx.Done():
			return
		case <-i.ctx.Done():
			return
		}
	}
}

// eventUUID names the device an event is about: NVML reports a MIG
// instance's error on the parent GPU's handle with the instance's GPU and
// compute instance ids (0xFFFFFFFF when it concerns the whole GPU).
func (i *Inventory) eventUUID(e nvml.EventData) string {
	if e.Device == nil {
		return ""
	}
	uuid, ret := e.Device.GetUUID()
	if ret != nvml.SUCCESS {
		return ""
	}
	const whole = 0xFFFFFFFF
	if e.GpuInstanceId == whole || e.ComputeInstanceId == whole {
		return uuid
	}
	k := migKey{uuid, e.GpuInstanceId, e.ComputeInstanceId}
	if m := i.migUUID(k); m != "" {
		return m
	}
	// The instance may be newer than the last Snapshot.
	i.life.RLock()
	if !i.closed {
		_, _ = i.snapshot()
	}
	i.life.RUnlock()
	if m := i.migUUID(k); m != "" {
		return m
	}
	return uuid
}

func (i *Inventory) migUUID(k migKey) string {
	i.refMu.RLock()
	defer i.refMu.RUnlock()
	if r := i.migKeys[k]; r != nil {
		return r.uuid
	}
	return ""
}
