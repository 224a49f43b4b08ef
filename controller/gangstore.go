package controller

import (
	"context"
	"slices"
	"time"

	"github.com/hashicorp/nomad/api"
)

// GangsVariable is where the gang module tells people (`nomad-gpu top`)
// what each gang is doing, in the controller's namespace: item GangsItem
// holds the GangStatus of every gang the leader saw at its last tick, as
// JSON. The leader writes it when it changes, not every tick; nothing
// reads it back to decide (a new leader plans from Nomad's state).
const (
	GangsVariable  = "nomad-gpu/gangs"
	GangsItem      = "gangs"
	maxGangRecords = 200
)

// GangStatus is what one gang is doing.
type GangStatus struct {
	Namespace string `json:"namespace"`
	Job       string `json:"job"`
	// State is waiting (at count 0), placing (admitted, a member not
	// running), running (every member running) or invalid (its spec
	// breaks a rule, or a member never fits).
	State string `json:"state"`
	// Wanted are its members; Placed those holding GPUs (running or
	// not); Running those running.
	Wanted  int `json:"wanted"`
	Placed  int `json:"placed"`
	Running int `json:"running"`
	// Reason is why it waits or is invalid ("" otherwise).
	Reason string `json:"reason,omitempty"`
	// Queue is its team queue ("" without a queue file, or in none);
	// Position its place among the waiting in the queues' order (1
	// first; 0 when not ordered: not waiting, or held by a dependency).
	Queue    string `json:"queue,omitempty"`
	Position int    `json:"position,omitempty"`
	// Kind is the kind of Reason (WaitKind), "" with none.
	Kind string `json:"kind,omitempty"`
	// Since is when it reached State, as this leader saw it.
	Since time.Time `json:"since"`
}

// LoadGangs reads the gangs' status; none when the variable is missing.
func LoadGangs(ctx context.Context, c *api.Client, namespace string) ([]GangStatus, error) {
	var out []GangStatus
	_, err := readItems(ctx, c, namespace, GangsVariable, map[string]any{GangsItem: &out})
	return out, err
}

// putGangs writes the gangs' status, whole (the leader is the one
// writer); past maxGangRecords, the waiting gangs last in the queue are
// left out.
func putGangs(ctx context.Context, c *api.Client, namespace string, gangs []GangStatus) error {
	return writeItems(ctx, c, namespace, GangsVariable, map[string]any{GangsItem: gangs[:min(len(gangs), maxGangRecords)]})
}

// writeGangs writes the gang module's statuses when they changed since
// the last write.
func (c *Controller) writeGangs(ctx context.Context) {
	st := c.gangs.Statuses()
	if c.gangsWrote && slices.Equal(st, c.gangsWritten) {
		return
	}
	if err := putGangs(ctx, c.api, c.cfg.Namespace, st); err != nil {
		if ctx.Err() == nil {
			c.log.Warn("gang status not written; tried on the next tick", "error", err)
		}
		return
	}
	c.gangsWritten, c.gangsWrote = slices.Clone(st), true
}
