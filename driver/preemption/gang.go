package preemption

import (
	"context"
	"fmt"
	"net"
	"strconv"

	"github.com/hashicorp/nomad/api"
)

// Gang reads what a member of a gang needs to find its peers
// (driver/rendezvous): the job, and its allocations that have not
// finished, listed with their resources (ports and devices).
func (c *Client) Gang(ctx context.Context, namespace, jobID string) (*api.Job, []*api.AllocationListStub, error) {
	q := (&api.QueryOptions{Namespace: namespace}).WithContext(ctx)
	job, _, err := c.api.Jobs().Info(jobID, q)
	if err != nil {
		return nil, nil, fmt.Errorf("reading job %s: %w", jobID, err)
	}
	lq := (&api.QueryOptions{
		Namespace: namespace,
		Params:    map[string]string{"resources": "true"},
		Filter:    "JobID == " + strconv.Quote(jobID) + ` and (ClientStatus == "pending" or ClientStatus == "running")`,
	}).WithContext(ctx)
	allocs, _, err := c.api.Allocations().List(lq)
	if err != nil {
		return nil, nil, fmt.Errorf("listing job %s's allocations: %w", jobID, err)
	}
	return job, allocs, nil
}

// NodeAddress is a node's address, as its peers reach it: its attribute
// unique.network.ip-address, else the host of its HTTP address.
func (c *Client) NodeAddress(ctx context.Context, nodeID string) (string, error) {
	n, _, err := c.api.Nodes().Info(nodeID, (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return "", fmt.Errorf("reading node %s: %w", nodeID, err)
	}
	if ip := n.Attributes["unique.network.ip-address"]; ip != "" {
		return ip, nil
	}
	if host, _, err := net.SplitHostPort(n.HTTPAddr); err == nil && host != "" {
		return host, nil
	}
	return "", fmt.Errorf("node %s has neither attribute unique.network.ip-address nor an HTTP address", nodeID)
}
