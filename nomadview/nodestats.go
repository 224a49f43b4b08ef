package nomadview

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/nomad/api"
)

// NodeStats is one node's answer to GET /v1/client/stats: its host
// stats, whose DeviceStats carry the device plugin's figures under
// contract's names (contract/devicestats.go), or why there are none.
type NodeStats struct {
	Host *api.HostStats
	Err  error
}

// ReadNodeStats reads the stats of each node in nodeIDs, in order: at
// most workers calls at a time, each given timeout (0: as long as ctx
// lasts). The servers forward
// each call to the node's client, so a node that does not answer costs
// its timeout, never the others'. It is the one place the cluster side
// reads node stats (the APM, top, relief and the sizer); onCall, when
// set, counts each call.
func ReadNodeStats(ctx context.Context, cl *api.Client, nodeIDs []string, workers int, timeout time.Duration, onCall func()) []NodeStats {
	out := make([]NodeStats, len(nodeIDs))
	_ = Parallel(ctx, max(1, workers), len(nodeIDs), func(i int) error {
		sctx, cancel := ctx, context.CancelFunc(func() {})
		if timeout > 0 {
			sctx, cancel = context.WithTimeout(ctx, timeout)
		}
		defer cancel()
		if onCall != nil {
			onCall()
		}
		hs, err := cl.Nodes().Stats(nodeIDs[i], (&api.QueryOptions{}).WithContext(sctx))
		if err != nil && sctx.Err() != nil && ctx.Err() == nil {
			err = fmt.Errorf("no answer within %v", timeout)
		}
		out[i] = NodeStats{Host: hs, Err: err}
		return nil
	})
	for i := range out {
		if out[i].Host == nil && out[i].Err == nil {
			out[i].Err = errors.New("not read")
			if ctx.Err() != nil {
				out[i].Err = ctx.Err()
			}
		}
	}
	return out
}
