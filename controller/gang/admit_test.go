package gang

import (
	"testing"

	"github.com/hashicorp/nomad/api"
)

func TestAdmit(t *testing.T) {
	cases := []struct {
		name   string
		plan   *api.JobPlanResponse
		ok     bool
		reason string
	}{
		{"no plan", nil, false, "no plan"},
		{"every member fits", &api.JobPlanResponse{}, true, ""},
		{"empty failures fit", &api.JobPlanResponse{FailedTGAllocs: map[string]*api.AllocationMetric{}}, true, ""},
		{"a dimension exhausted", &api.JobPlanResponse{FailedTGAllocs: map[string]*api.AllocationMetric{
			"worker": {NodesEvaluated: 3, NodesExhausted: 2, DimensionExhausted: map[string]int{"devices: nvidia/gpu": 2}},
		}}, false, `group "worker": resources (devices: nvidia/gpu on 2)`},
		{"nodes exhausted, no dimension", &api.JobPlanResponse{FailedTGAllocs: map[string]*api.AllocationMetric{
			"worker": {NodesEvaluated: 3, NodesExhausted: 3},
		}}, false, `group "worker": resources (exhausted on 3 nodes)`},
		{"filtered and exhausted waits for resources", &api.JobPlanResponse{FailedTGAllocs: map[string]*api.AllocationMetric{
			"worker": {NodesEvaluated: 3, NodesFiltered: 2, NodesExhausted: 1, ConstraintFiltered: map[string]int{"${meta.rack} = r1": 2},
				DimensionExhausted: map[string]int{"memory": 1}},
		}}, false, `group "worker": resources (memory on 1)`},
		{"every node filtered never fits", &api.JobPlanResponse{FailedTGAllocs: map[string]*api.AllocationMetric{
			"worker": {NodesEvaluated: 3, NodesFiltered: 3, ClassFiltered: map[string]int{"cpu": 1},
				ConstraintFiltered: map[string]int{"${attr.kernel.name} = windows": 2}},
		}}, false, `group "worker": never fits (3 of 3 nodes filtered: class "cpu" on 1, ${attr.kernel.name} = windows on 2)`},
		{"no node evaluated never fits", &api.JobPlanResponse{FailedTGAllocs: map[string]*api.AllocationMetric{
			"worker": {NodePool: "training"},
		}}, false, `group "worker": never fits (no node evaluated)`},
		{"quota", &api.JobPlanResponse{FailedTGAllocs: map[string]*api.AllocationMetric{
			"worker": {NodesEvaluated: 3, QuotaExhausted: []string{"devices exhausted (2 > 1)"}},
		}}, false, `group "worker": quota (devices exhausted (2 > 1))`},
		{"some filtered, none exhausted", &api.JobPlanResponse{FailedTGAllocs: map[string]*api.AllocationMetric{
			"worker": {NodesEvaluated: 3, NodesFiltered: 1},
		}}, false, `group "worker": blocked`},
		{"no metric", &api.JobPlanResponse{FailedTGAllocs: map[string]*api.AllocationMetric{"worker": nil}}, false, `group "worker": blocked`},
		{"every group named, in name order", &api.JobPlanResponse{FailedTGAllocs: map[string]*api.AllocationMetric{
			"worker":   {NodesEvaluated: 2, NodesExhausted: 2},
			"launcher": {NodesEvaluated: 2, NodesFiltered: 2, ConstraintFiltered: map[string]int{"${node.class} = mpi": 2}},
		}}, false, `group "launcher": never fits (2 of 2 nodes filtered: ${node.class} = mpi on 2); group "worker": resources (exhausted on 2 nodes)`},
	}
	for _, c := range cases {
		ok, reason := Admit(c.plan)
		if ok != c.ok || reason != c.reason {
			t.Errorf("%s: Admit = %v, %q; want %v, %q", c.name, ok, reason, c.ok, c.reason)
		}
	}
}
