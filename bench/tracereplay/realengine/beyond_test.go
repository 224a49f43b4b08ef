package realengine

import (
	"regexp"
	"testing"
	"time"

	"github.com/hashicorp/hcl/v2/hclparse"

	"github.com/nomad-gpu/nomad-gpu/autoscaler/apm"
	"github.com/nomad-gpu/nomad-gpu/bench/tracereplay"
	"github.com/nomad-gpu/nomad-gpu/e2e/harness"
)

// TestBeyondPolicy: with -beyond the replay's gpu-queue policy asks
// nodes_needed with beyond, wall clock as the flag gives it (the model
// compresses it as the other policy times), and the APM reads the query
// so; without, the query has none.
func TestBeyondPolicy(t *testing.T) {
	nodesNeeded := regexp.MustCompile(`query += "(nodes_needed\{[^"]*\})"`)
	for _, c := range []struct {
		beyond    time.Duration
		anyDevice bool
		want      string
	}{
		{0, false, "nodes_needed{node_pool=gpu,gpus_per_node=8}"},
		{8 * time.Second, false, "nodes_needed{node_pool=gpu,gpus_per_node=8,beyond=8s}"},
		{48 * time.Second, true, "nodes_needed{node_pool=gpu,device=any,gpus_per_node=8,beyond=48s}"},
	} {
		p := tracereplay.DefaultPolicy()
		p.Beyond = c.beyond
		policy := harness.GPUQueuePolicy("http://127.0.0.1:1", 2, 6, 8, p, 8*time.Second, c.anyDevice)
		if _, diags := hclparse.NewParser().ParseHCL([]byte(policy), "gpu-pool.hcl"); diags.HasErrors() {
			t.Errorf("beyond %s: policy does not parse: %v\n%s", c.beyond, diags, policy)
		}
		m := nodesNeeded.FindStringSubmatch(policy)
		if m == nil || m[1] != c.want {
			t.Errorf("beyond %s: nodes_needed query %q, want %q", c.beyond, m, c.want)
			continue
		}
		q, err := apm.ParseQuery(m[1])
		if err != nil || q.Beyond != c.beyond {
			t.Errorf("beyond %s: the APM reads %q as %+v, %v; want beyond %s", c.beyond, m[1], q, err, c.beyond)
		}
	}
}
