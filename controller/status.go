package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/nomadview"
)

// Status is what an operator asks of the controller (nomad-gpu top): who
// leads, which jobs run, or will run, above their own priority, why and
// until when, what it moved, what its gangs are doing and its queues'
// accounts. It is read from Nomad, not from a replica.
type Status struct {
	// Leading says a replica holds the leader lock; Leader is the name it
	// gave itself ("" when none leads, or it gave none).
	Leading bool   `json:"leading"`
	Leader  string `json:"leader,omitempty"`
	// Raises are the raises of the priority ledger, in force or waiting,
	// by job.
	Raises []JobRaise `json:"raises"`
	// Layouts are the last layout change the leaders asked of each GPU,
	// by LayoutKey (node ID, GPU UUID).
	Layouts map[string]LayoutChange `json:"layouts,omitempty"`
	// Moves are the allocations moved in the last 24 hours, oldest first;
	// one not Resumed is still moving (its job has not run again).
	Moves []MoveRecord `json:"moves,omitempty"`
	// Hold is the node the leader made ineligible while work moved off
	// it is placed elsewhere; nil when none is.
	Hold *Hold `json:"hold,omitempty"`
	// Gangs are what each gang was doing at the leader's last change of
	// them, in the queue's order.
	Gangs []GangStatus `json:"gangs,omitempty"`
	// Queues are the queues' accounts at the leader's last write of them
	// (a minute old at most), in the queue file's order.
	Queues []QueueStatus `json:"queues,omitempty"`
}

// JobRaise is one raise of one job.
type JobRaise struct {
	Namespace string `json:"namespace"`
	Job       string `json:"job"`
	Own       int    `json:"own_priority"`
	Priority  int    `json:"priority"`
	Reason    string `json:"reason"`
	// InForce is false for a protection that waits for the job's
	// replacement to run.
	InForce bool       `json:"in_force"`
	Until   *time.Time `json:"until,omitempty"`
}

// ReadStatus reads the leader lock (in namespace) and the ledger.
func ReadStatus(ctx context.Context, c *api.Client, namespace string, now time.Time) (Status, error) {
	var st Status
	v, _, err := c.Variables().Read(LeaderVariable, (&api.QueryOptions{Namespace: namespace}).WithContext(ctx))
	switch {
	case nomadview.IsNotFound(err):
	case err != nil:
		return st, fmt.Errorf("reading %s: %w", LeaderVariable, err)
	default:
		st.Leading = v.Lock != nil && v.Lock.ID != ""
		if st.Leading {
			st.Leader = v.Items[holderItem]
		}
	}
	entries, err := NewStore(c).Load(ctx)
	if err != nil {
		return st, err
	}
	for _, e := range entries {
		for _, r := range e.Raises {
			jr := JobRaise{Namespace: e.Namespace, Job: e.JobID, Own: e.Own, Priority: r.Priority, Reason: r.Reason, InForce: r.InForce(now)}
			if !r.Until.IsZero() {
				until := r.Until
				jr.Until = &until
			}
			st.Raises = append(st.Raises, jr)
		}
	}
	slices.SortFunc(st.Raises, func(a, b JobRaise) int {
		return strings.Compare(a.Namespace+"/"+a.Job, b.Namespace+"/"+b.Job)
	})
	if st.Layouts, err = LoadLayoutHistory(ctx, c, namespace); err != nil {
		return st, err
	}
	if st.Moves, st.Hold, err = LoadMoves(ctx, c, namespace); err != nil {
		return st, err
	}
	if st.Gangs, err = LoadGangs(ctx, c, namespace); err != nil {
		return st, err
	}
	if _, st.Queues, err = LoadQueues(ctx, c, namespace); err != nil {
		return st, err
	}
	return st, nil
}
