package driver

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nomad-gpu/nomad-gpu/driver/preemption"
)

// stopReasonTimeout bounds the Nomad API read of why a task is stopped; it
// runs beside the checkpoint signal and never holds the stop up longer.
const stopReasonTimeout = 3 * time.Second

// cooldownProbeTTL is how long the fingerprint trusts its last check that
// the Nomad API takes the driver's token.
const cooldownProbeTTL = 30 * time.Second

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

// probeCache remembers whether the Nomad API takes the driver's token.
type probeCache struct {
	mu  sync.Mutex
	at  time.Time
	err error
}

// cooldownState is driver.gpu.preemption_cooldown: the cooldown, or "off"
// and why.
func (d *Driver) cooldownState(rt *runtimeState) string {
	cd := d.config().Preemption.Cooldown
	if cd == 0 {
		return "off"
	}
	if err := d.cooldownUsable(rt); err != nil {
		return "off: " + err.Error()
	}
	return cd.String()
}

func (d *Driver) cooldownUsable(rt *runtimeState) error {
	p := &rt.probe
	p.mu.Lock()
	defer p.mu.Unlock()
	if time.Since(p.at) > cooldownProbeTTL {
		ctx, cancel := context.WithTimeout(d.ctx, 2*time.Second)
		p.err = rt.nomad.Probe(ctx)
		cancel()
		p.at = time.Now()
	}
	return p.err
}

// protectPreempted starts the cooldown of a preempted task's job.
func (d *Driver) protectPreempted(rt *runtimeState, t *task, r preemption.Reason) {
	if r.PreemptedBy != "" {
		d.metrics.preempted(t)
	}
	cooldown := d.config().Preemption.Cooldown
	if cooldown == 0 || r.PreemptedBy == "" {
		return
	}
	if err := d.cooldownUsable(rt); err != nil {
		d.emit(t, "preemption cooldown is off: "+err.Error(), map[string]string{"cooldown": "off"})
		return
	}
	ctx, cancel := context.WithTimeout(d.ctx, 30*time.Second)
	defer cancel()
	cd, err := rt.nomad.Protect(ctx, r, cooldown)
	switch {
	case errors.Is(err, preemption.ErrNotRaised):
		d.emit(t, fmt.Sprintf("preemption cooldown: job %s keeps priority %d: %v", cd.JobID, cd.Original, err), map[string]string{"cooldown": "none"})
	case err != nil:
		d.emit(t, "preemption cooldown failed: "+err.Error(), map[string]string{"cooldown": "failed"})
	default:
		d.emit(t, fmt.Sprintf("preemption cooldown: job %s runs at priority %d, its preemptor's, until %s; then back to %d",
			cd.JobID, cd.Raised, cd.Until.UTC().Format(time.RFC3339), cd.Original),
			map[string]string{"cooldown": "raised", "until": cd.Until.UTC().Format(time.RFC3339)})
	}
}

// endCooldowns restores the priority of every job whose cooldown is over,
// whichever node's driver raised it, for as long as the plugin runs.
func (d *Driver) endCooldowns(rt *runtimeState, cooldown time.Duration) {
	every := min(max(cooldown/10, 2*time.Second), 30*time.Second)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		if d.cooldownUsable(rt) == nil {
			ctx, cancel := context.WithTimeout(d.ctx, 30*time.Second)
			done, err := rt.nomad.Restore(ctx)
			cancel()
			for _, r := range done {
				d.logger.Info("preemption cooldown over", "namespace", r.Namespace, "job", r.JobID, "result", r.Note)
			}
			if err != nil && d.ctx.Err() == nil {
				d.logger.Warn("ending preemption cooldowns", "error", err)
			}
		}
		select {
		case <-d.ctx.Done():
			return
		case <-tick.C:
		}
	}
}
