package driver

import (
	"context"
	"sync"
	"time"

	"github.com/nomad-gpu/nomad-gpu/wire/drivers"
)

// broadcaster fans task events out to every TaskEvents stream (the client
// opens one per plugin instance, but may reopen it).
type broadcaster struct {
	mu   sync.Mutex
	subs map[chan *drivers.TaskEvent]struct{}
}

func newBroadcaster() *broadcaster {
	return &broadcaster{subs: map[chan *drivers.TaskEvent]struct{}{}}
}

func (b *broadcaster) subscribe(ctx context.Context) <-chan *drivers.TaskEvent {
	ch := make(chan *drivers.TaskEvent, 64)
	b.mu.Lock()
	b.subs[ch] = struct{}{}
	b.mu.Unlock()
	go func() {
		<-ctx.Done()
		b.mu.Lock()
		delete(b.subs, ch)
		b.mu.Unlock()
		close(ch)
	}()
	return ch
}

func (b *broadcaster) publish(ev *drivers.TaskEvent) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for ch := range b.subs {
		select {
		case ch <- ev:
		default:
			// A stalled stream must not block the driver; the event is
			// also in the plugin log.
		}
	}
}

func (d *Driver) TaskEvents(ctx context.Context) (<-chan *drivers.TaskEvent, error) {
	return d.events.subscribe(ctx), nil
}

// emit sends a task event (shown by `nomad alloc status`) and logs it.
func (d *Driver) emit(t *task, msg string, annotations map[string]string) {
	d.logger.Info(msg, "task", t.id)
	d.events.publish(&drivers.TaskEvent{
		TaskID: t.id, AllocID: t.cfg.AllocID, TaskName: t.cfg.Name,
		Timestamp: time.Now(), Message: msg, Annotations: annotations,
	})
}
