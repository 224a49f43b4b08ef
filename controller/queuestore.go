package controller

import (
	"context"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/controller/queues"
	"github.com/nomad-gpu/nomad-gpu/nomadview"
)

// QueuesVariable keeps the queues' decayed use across leaders, in the
// controller's namespace: item QueueUsageItem holds each queue's
// queues.Usage as JSON ({"vision": {"hours": 1.5, "at": "…"}}). A
// half-life is days long, far longer than Nomad keeps finished
// allocations, so a new leader cannot recompute it; it reads it here.
// The leader writes it every queueUsageEvery, so a new leader misses at
// most that much of each queue's use.
const (
	QueuesVariable  = "nomad-gpu/queues"
	QueueUsageItem  = "usage"
	queueUsageEvery = time.Minute
)

type storedUsage struct {
	Hours float64   `json:"hours"`
	At    time.Time `json:"at"`
}

// LoadQueueUsage reads the queues' decayed use; none when the variable
// is missing.
func LoadQueueUsage(ctx context.Context, c *api.Client, namespace string) (map[string]queues.Usage, error) {
	var stored map[string]storedUsage
	if _, err := readItems(ctx, c, namespace, QueuesVariable, map[string]any{QueueUsageItem: &stored}); err != nil {
		return nil, err
	}
	out := make(map[string]queues.Usage, len(stored))
	for q, u := range stored {
		out[q] = queues.Usage{Hours: u.Hours, At: u.At}
	}
	return out, nil
}

// putQueueUsage writes the queues' decayed use, whole (the leader is the
// one writer).
func putQueueUsage(ctx context.Context, c *api.Client, namespace string, usage map[string]queues.Usage) error {
	stored := make(map[string]storedUsage, len(usage))
	for q, u := range usage {
		stored[q] = storedUsage{Hours: u.Hours, At: u.At}
	}
	return writeItems(ctx, c, namespace, QueuesVariable, map[string]any{QueueUsageItem: stored})
}

// account brings the queues' accounts to now, exports them, and writes
// their use every queueUsageEvery.
func (c *Controller) account(ctx context.Context, now time.Time, snap *nomadview.Snapshot) {
	if c.queues == nil {
		return
	}
	c.metrics.queues(c.queues.Step(now, snap))
	if now.Sub(c.queuesSaved) < queueUsageEvery {
		return
	}
	if err := putQueueUsage(ctx, c.api, c.cfg.Namespace, c.queues.Usage()); err != nil {
		if ctx.Err() == nil {
			c.log.Warn("queue use not written; tried on the next tick", "error", err)
		}
		return
	}
	c.queuesSaved = now
}
