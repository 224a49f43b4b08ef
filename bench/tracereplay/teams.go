package tracereplay

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Team queues in a replay (Features.Queues, issue 38): the trace's teams
// (JobRecord.Team: Philly's virtual cluster) share the cluster through
// the controller's queues, one queue a listed team, and one queue,
// "others", for every team not listed where "*" is. Each queue's nominal
// quota is its weight's share of the cluster's GPUs, all in one cohort
// that lends every GPU a queue does not use: the weights set both the
// quotas and the fair shares.

// TeamWeight is one queue of Cluster.Teams: a team's name ("*": every
// team not listed, together) and its weight.
type TeamWeight struct {
	Team   string
	Weight float64
}

// OthersQueue is the queue of the teams "*" stands for.
const OthersQueue = "others"

// ParseTeams reads "team=weight,…" (flag -teams); "" is none.
func ParseTeams(s string) ([]TeamWeight, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []TeamWeight
	seen := map[string]bool{}
	for _, part := range strings.Split(s, ",") {
		name, w, ok := strings.Cut(strings.TrimSpace(part), "=")
		weight, err := strconv.ParseFloat(strings.TrimSpace(w), 64)
		name = strings.TrimSpace(name)
		switch {
		case !ok || name == "" || err != nil || weight <= 0 || math.IsInf(weight, 0):
			return nil, fmt.Errorf("teams: %q; allowed: team=weight, comma-separated, each weight above 0 (\"*\" for every other team)", part)
		case seen[name]:
			return nil, fmt.Errorf("teams: %q is listed twice", name)
		}
		seen[name] = true
		out = append(out, TeamWeight{Team: name, Weight: weight})
	}
	if len(out) < 2 {
		return nil, fmt.Errorf("teams: %q names one queue; allowed: two or more (a team and \"*\", say)", s)
	}
	return out, nil
}

// QueueOf is the queue of a job of team: the team where listed, else
// OthersQueue where "*" is listed, else "" (no queue: not governed).
func (c Cluster) QueueOf(team string) string {
	others := false
	for _, t := range c.Teams {
		switch t.Team {
		case team:
			return team
		case "*":
			others = true
		}
	}
	if others {
		return OthersQueue
	}
	return ""
}

// Queues are the team queues' names, in Teams' order ("*" as
// OthersQueue), with their weights' shares of the whole.
func (c Cluster) Queues() (names []string, shares []float64) {
	total := 0.0
	for _, t := range c.Teams {
		total += t.Weight
	}
	for _, t := range c.Teams {
		name := t.Team
		if name == "*" {
			name = OthersQueue
		}
		names = append(names, name)
		shares = append(shares, t.Weight/total)
	}
	return names, shares
}

// validateTeams says what is wrong with c's teams for a fixed cluster of
// nodes: every queue's nominal (its share of the GPUs) must be whole
// nodes, so that "alone on its nominal quota" is a cluster the engines
// can run.
func (c Cluster) validateTeams(nodes int) error {
	names, shares := c.Queues()
	for i, sh := range shares {
		n := sh * float64(nodes)
		if math.Abs(n-math.Round(n)) > 1e-9 || math.Round(n) < 1 {
			return fmt.Errorf("teams: queue %q's weight share %.3g of %d nodes is %.3g nodes; allowed: weights that give each queue whole nodes", names[i], sh, nodes, n)
		}
	}
	return nil
}

// NominalNodes is each queue's nominal quota in nodes of a fixed cluster
// of nodes, by name.
func (c Cluster) NominalNodes(nodes int) map[string]int {
	names, shares := c.Queues()
	out := map[string]int{}
	for i, sh := range shares {
		out[names[i]] = int(math.Round(sh * float64(nodes)))
	}
	return out
}

// AloneConfigs are base less its queues once per team queue, each
// running that queue's jobs alone (Config.Alone) on its nominal quota in
// nodes of base's fixed cluster, named "alone: <queue>": what the queue's
// wait would be on a cluster of its own.
func (c Cluster) AloneConfigs(base Config) []Config {
	names, _ := c.Queues()
	nominal := c.NominalNodes(base.StartNodes(c))
	out := make([]Config, 0, len(names))
	for _, q := range names {
		cfg := base
		cfg.Name, cfg.Queues, cfg.Alone, cfg.Nodes, cfg.NodesLike, cfg.Reference = "alone: "+q, false, q, nominal[q], "", true
		out = append(out, cfg)
	}
	return out
}

// JobsOf is tr as cfg replays it: the jobs of queue cfg.Alone only, or
// every job.
func (c Cluster) JobsOf(tr Trace, cfg Config) Trace {
	if cfg.Alone == "" {
		return tr
	}
	tr.Jobs = slices.DeleteFunc(slices.Clone(tr.Jobs), func(j Job) bool { return c.QueueOf(j.Team) != cfg.Alone })
	return tr
}
