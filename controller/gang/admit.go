package gang

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/hashicorp/nomad/api"
)

// Admit reads Nomad's plan of the gang with every group at its members
// (POST /v1/job/:id/plan): the gang fits now only when no group has
// FailedTGAllocs. Otherwise reason names each failed group, in name
// order, and why in Nomad's metric:
//
//   - "resources": some node passed the group's constraints but lacked
//     room (NodesExhausted, DimensionExhausted): it may fit once work ends;
//   - "quota": the namespace's quota is spent (QuotaExhausted);
//   - "never fits": no node was evaluated, or every one evaluated was
//     filtered by class or constraint (ClassFiltered, ConstraintFiltered)
//     and none exhausted: waiting does not help until the nodes change;
//   - "blocked": Nomad said nothing more.
func Admit(plan *api.JobPlanResponse) (ok bool, reason string) {
	if plan == nil {
		return false, "no plan"
	}
	if len(plan.FailedTGAllocs) == 0 {
		return true, ""
	}
	var parts []string
	for _, g := range slices.Sorted(maps.Keys(plan.FailedTGAllocs)) {
		parts = append(parts, fmt.Sprintf("group %q: %s", g, failure(plan.FailedTGAllocs[g])))
	}
	return false, strings.Join(parts, "; ")
}

// failure is Admit's word for one group's metric, with its figures.
func failure(m *api.AllocationMetric) string {
	switch {
	case m == nil:
		return "blocked"
	case m.NodesExhausted > 0 || len(m.DimensionExhausted) > 0:
		var dims []string
		for _, d := range slices.Sorted(maps.Keys(m.DimensionExhausted)) {
			dims = append(dims, fmt.Sprintf("%s on %d", d, m.DimensionExhausted[d]))
		}
		if len(dims) == 0 {
			return fmt.Sprintf("resources (exhausted on %d nodes)", m.NodesExhausted)
		}
		return "resources (" + strings.Join(dims, ", ") + ")"
	case len(m.QuotaExhausted) > 0:
		return "quota (" + strings.Join(m.QuotaExhausted, ", ") + ")"
	case m.NodesEvaluated == 0:
		return "never fits (no node evaluated)"
	case m.NodesFiltered >= m.NodesEvaluated:
		var by []string
		for _, c := range slices.Sorted(maps.Keys(m.ClassFiltered)) {
			by = append(by, fmt.Sprintf("class %q on %d", c, m.ClassFiltered[c]))
		}
		for _, c := range slices.Sorted(maps.Keys(m.ConstraintFiltered)) {
			by = append(by, fmt.Sprintf("%s on %d", c, m.ConstraintFiltered[c]))
		}
		return fmt.Sprintf("never fits (%d of %d nodes filtered: %s)", m.NodesFiltered, m.NodesEvaluated, strings.Join(by, ", "))
	}
	return "blocked"
}
