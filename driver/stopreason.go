package driver

import (
	"context"
	"time"

	"github.com/nomad-gpu/nomad-gpu/driver/preemption"
)

// stopReasonTimeout bounds the Nomad API read of why a task is stopped; it
// runs beside the checkpoint signal and never holds the stop up longer.
const stopReasonTimeout = 3 * time.Second

// stopReason reads, in the background, why Nomad stops the task. The
// channel yields the reason once (a zero Reason if it could not be read)
// and is then closed.
func (d *Driver) stopReason(rt *runtimeState, t *task) <-chan preemption.Reason {
	out := make(chan preemption.Reason, 1)
	go func() {
		defer close(out)
		ctx, cancel := context.WithTimeout(d.ctx, stopReasonTimeout)
		defer cancel()
		r, err := rt.nomad.StopReason(ctx, t.cfg.Namespace, t.cfg.AllocID)
		if err != nil {
			d.logger.Warn("why the task is stopped is not known", "task", t.id, "error", err)
		}
		out <- r
	}()
	return out
}

// countPreempted counts a stop that was a preemption. Protecting the
// preempted job is the controller's (nomad-gpu controller): the driver
// writes nothing to Nomad.
func (d *Driver) countPreempted(t *task, r preemption.Reason) {
	if r.PreemptedBy != "" {
		d.metrics.preempted(t)
	}
}
