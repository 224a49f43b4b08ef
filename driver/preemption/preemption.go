// Package preemption is what the gpu driver asks of the Nomad API about the
// allocations it stops and starts: why one is stopped (preempted, by which
// allocation; drained; stopped), for its checkpoint's record; which
// allocations a replacement takes over from, to wait for their last
// checkpoint; and, for a gang's member, its gang's allocations and their
// nodes (package rendezvous decides what they mean). It only reads: protecting a preempted job from being
// preempted again at once is the controller's (nomad-gpu controller), the
// one part of nomad-gpu that changes jobs, so a node's token needs
// read-job only.
package preemption

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/hashicorp/nomad/api"
)

// Client reads allocations through one Nomad agent's HTTP API.
type Client struct {
	api *api.Client
}

// New is a client of the agent at address ("http://127.0.0.1:4646"), with
// token where ACLs are on ("" where they are off).
func New(address, token string) (*Client, error) {
	c, err := api.NewClient(&api.Config{
		Address:    address,
		SecretID:   token,
		HttpClient: &http.Client{Timeout: 10 * time.Second},
	})
	if err != nil {
		return nil, fmt.Errorf("nomad.address %q: %w", address, err)
	}
	return &Client{api: c}, nil
}

// Reason is why Nomad stops an allocation.
type Reason struct {
	// Trigger says it in a few words, to be recorded with a checkpoint:
	// "preempted by alloc 1a2b3c4d", "node drain", "stop: <description>".
	Trigger string
	// PreemptedBy is the preempting allocation's ID, "" when not preempted.
	PreemptedBy string
	// Alloc is the allocation as read.
	Alloc *api.Allocation
}

// StopReason reads the allocation being stopped and says why it is.
func (c *Client) StopReason(ctx context.Context, namespace, allocID string) (Reason, error) {
	a, _, err := c.api.Allocations().Info(allocID, (&api.QueryOptions{Namespace: namespace}).WithContext(ctx))
	if err != nil {
		return Reason{}, fmt.Errorf("reading allocation %s: %w", allocID, err)
	}
	r := Reason{Alloc: a, PreemptedBy: a.PreemptedByAllocation}
	switch {
	case a.PreemptedByAllocation != "":
		r.Trigger = "preempted by alloc " + short(a.PreemptedByAllocation)
	case a.DesiredTransition.ShouldMigrate():
		r.Trigger = "node drain"
	case a.DesiredStatus == api.AllocDesiredStatusStop || a.DesiredStatus == api.AllocDesiredStatusEvict:
		r.Trigger = a.DesiredStatus
		if a.DesiredDescription != "" {
			r.Trigger += ": " + a.DesiredDescription
		}
	default:
		r.Trigger = "stop"
	}
	return r, nil
}

func short(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

// Predecessors are the job's other allocations of the same name (the same
// group and index: "train.g[0]") whose tasks have not finished on their
// client: an allocation this one replaces that is still stopping, on this
// node or another, and still committing its last checkpoint.
func (c *Client) Predecessors(ctx context.Context, namespace, jobID, allocName, self string) ([]string, error) {
	stubs, _, err := c.api.Jobs().Allocations(jobID, true, (&api.QueryOptions{Namespace: namespace}).WithContext(ctx))
	if err != nil {
		return nil, fmt.Errorf("listing job %s's allocations: %w", jobID, err)
	}
	var ids []string
	for _, s := range stubs {
		if s.ID == self || s.Name != allocName {
			continue
		}
		switch s.ClientStatus {
		case api.AllocClientStatusComplete, api.AllocClientStatusFailed, api.AllocClientStatusLost:
			continue
		}
		if s.ClientStatus == api.AllocClientStatusPending && s.DesiredStatus == api.AllocDesiredStatusRun {
			continue // a newer replacement, not yet started: not ours to wait for
		}
		ids = append(ids, s.ID)
	}
	return ids, nil
}
