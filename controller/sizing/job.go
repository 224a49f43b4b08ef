package sizing

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/controller/sizing/history"
)

// TaskResult is what the sizer says of one GPU task of a job.
type TaskResult struct {
	Key            history.Key
	Policy         Policy
	Recommendation Recommendation
	Decision       Decision
	Checkpoints    bool
	Err            error // the task could not be sized: bad meta, no one GPU request, no history
}

// OfferFor is what the nodes of pool can give one request of a slice's
// kind: for MPS shares and whole GPUs the most instances of one device
// group on one node (Nomad fills a request from one group: MPS shares are
// grouped by GPU), for MIG the profiles offered. Nodes that are down or
// ineligible still count: they say what the pool's nodes are.
func OfferFor(nodes []*api.NodeListStub, pool string, kind string) Offer {
	var o Offer
	seen := map[string]bool{}
	for _, n := range nodes {
		if pool != "" && pool != "all" && n.NodePool != pool {
			continue
		}
		if n.NodeResources == nil {
			continue
		}
		for _, g := range n.NodeResources.Devices {
			if g == nil || g.Vendor != "nvidia" || g.Type != kind {
				continue
			}
			o.MaxCount = max(o.MaxCount, len(g.Instances))
			if kind == history.SliceMIG && !seen[g.Name] {
				seen[g.Name] = true
				o.Profiles = append(o.Profiles, g.Name)
			}
		}
	}
	return o
}

// SizeJob reads the history of each GPU task of job (samples of the last
// window, all its runs since then) and says what its slice should be and
// whether the policy lets the sizer apply it now. Tasks whose policy is
// off are left out unless all is set.
func SizeJob(ctx context.Context, job *api.Job, src history.Source, nodes []*api.NodeListStub, window time.Duration, th Thresholds, all bool, now time.Time) ([]TaskResult, error) {
	if job == nil || job.ID == nil {
		return nil, fmt.Errorf("no job")
	}
	ns := "default"
	if job.Namespace != nil && *job.Namespace != "" {
		ns = *job.Namespace
	}
	pool := ""
	if job.NodePool != nil {
		pool = *job.NodePool
	}
	var out []TaskResult
	for _, g := range job.TaskGroups {
		for _, t := range g.Tasks {
			res := TaskResult{Key: history.Key{Namespace: ns, Job: *job.ID, Group: deref(g.Name), Task: t.Name}, Checkpoints: Checkpoints(t)}
			meta := MergeMeta(job.Meta, g.Meta, t.Meta)
			res.Policy, res.Err = ParsePolicy(meta)
			if res.Err == nil && res.Policy.Mode == ModeOff && !all {
				continue
			}
			var cur history.Slice
			if res.Err == nil {
				_, cur, res.Err = RequestSlice(t)
			}
			if res.Err != nil {
				if _, _, reqErr := RequestSlice(t); reqErr == nil || all {
					out = append(out, res)
				}
				continue
			}
			samples, err := src.Samples(ctx, res.Key, now.Add(-window), now)
			if err != nil {
				return nil, fmt.Errorf("samples of %s: %w", res.Key, err)
			}
			runs, err := src.Runs(ctx, res.Key, now.Add(-window))
			if err != nil {
				return nil, fmt.Errorf("runs of %s: %w", res.Key, err)
			}
			res.Recommendation = Recommend(res.Key, res.Policy, cur, Summarise(cur, samples, runs), OfferFor(nodes, pool, cur.Kind), th)
			res.Decision = Decide(res.Policy, res.Recommendation, res.Checkpoints, LastResize(meta), now)
			out = append(out, res)
		}
	}
	return out, nil
}
