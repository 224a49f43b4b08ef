package controller

import (
	"context"
	"slices"
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
// Item QueueStatusItem holds the queues' accounts (QueueStatus) for
// people (nomad-gpu top -json). The leader writes it when a queue's
// holdings change (what it uses, borrows, lends or waits for) and at
// least every queueUsageEvery, so a new leader misses at most that much
// of each queue's use, and the standings are at most that old.
const (
	QueuesVariable  = "nomad-gpu/queues"
	QueueUsageItem  = "usage"
	QueueStatusItem = "status"
	queueUsageEvery = time.Minute
)

type storedUsage struct {
	Hours float64   `json:"hours"`
	At    time.Time `json:"at"`
}

// LoadQueues reads the queues' decayed use and their last accounts; none
// when the variable is missing.
func LoadQueues(ctx context.Context, c *api.Client, namespace string) (map[string]queues.Usage, []QueueStatus, error) {
	var stored map[string]storedUsage
	var status []QueueStatus
	if _, err := readItems(ctx, c, namespace, QueuesVariable, map[string]any{QueueUsageItem: &stored, QueueStatusItem: &status}); err != nil {
		return nil, nil, err
	}
	usage := make(map[string]queues.Usage, len(stored))
	for q, u := range stored {
		usage[q] = queues.Usage{Hours: u.Hours, At: u.At}
	}
	return usage, status, nil
}

// putQueues writes the queues' decayed use and accounts, whole (the
// leader is the one writer).
func putQueues(ctx context.Context, c *api.Client, namespace string, usage map[string]queues.Usage, status []QueueStatus) error {
	stored := make(map[string]storedUsage, len(usage))
	for q, u := range usage {
		stored[q] = storedUsage{Hours: u.Hours, At: u.At}
	}
	return writeItems(ctx, c, namespace, QueuesVariable, map[string]any{QueueUsageItem: stored, QueueStatusItem: status})
}

// account brings the queues' accounts to now, exports them, and writes
// them with their use when a queue's holdings change and at least every
// queueUsageEvery.
func (c *Controller) account(ctx context.Context, now time.Time, snap *nomadview.Snapshot) {
	if c.queues == nil {
		return
	}
	st := c.queues.Step(now, snap)
	c.metrics.queues(st)
	if now.Sub(c.queuesSaved) < queueUsageEvery && slices.EqualFunc(st, c.queuesWritten, sameHoldings) {
		return
	}
	if err := putQueues(ctx, c.api, c.cfg.Namespace, c.queues.Usage(), st); err != nil {
		if ctx.Err() == nil {
			c.log.Warn("queue use not written; tried on the next tick", "error", err)
		}
		return
	}
	c.queuesSaved, c.queuesWritten = now, st
}

// sameHoldings says whether two accounts of a queue hold the same: what
// it uses, borrows, lends and waits for (its decayed use and standing
// move every tick).
func sameHoldings(a, b QueueStatus) bool {
	return a.Name == b.Name && a.Use == b.Use && a.Borrowed == b.Borrowed && a.Lent == b.Lent && a.Waiting == b.Waiting && a.Active == b.Active
}
