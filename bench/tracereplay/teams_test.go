package tracereplay

import (
	"fmt"
	"strings"
	"testing"
)

// -teams: team=weight pairs, "*" for every other team; errors name the
// flag and what is allowed.
func TestParseTeams(t *testing.T) {
	for _, tc := range []struct{ in, want, err string }{
		{"", "[]", ""},
		{"b436b2=3, *=1", "[{b436b2 3} {* 1}]", ""},
		{"a=1,b=2.5", "[{a 1} {b 2.5}]", ""},
		{"a=1", "", "names one queue"},
		{"a=1,b", "", `"b"; allowed: team=weight`},
		{"a=1,b=0", "", `"b=0"; allowed`},
		{"a=1,=2", "", `"=2"; allowed`},
		{"a=1,a=2", "", `"a" is listed twice`},
	} {
		got, err := ParseTeams(tc.in)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err) || !strings.HasPrefix(err.Error(), "teams: ")):
			t.Errorf("%q: error %v; want one with %q", tc.in, err, tc.err)
		case tc.err == "" && (err != nil || fmt.Sprint(got) != tc.want):
			t.Errorf("%q: %v, %v; want %s", tc.in, got, err, tc.want)
		}
	}
}

// A team's queue, and the queues' nominal nodes: a listed team is its
// own queue, any other is "others" where "*" is listed, none where not;
// weights must give whole nodes.
func TestTeamQueues(t *testing.T) {
	c := Cluster{Nodes: 4, GPUsPerNode: 8, Teams: []TeamWeight{{"b436b2", 3}, {"*", 1}}}
	for team, want := range map[string]string{"b436b2": "b436b2", "6c71a0": OthersQueue, "": OthersQueue} {
		if got := c.QueueOf(team); got != want {
			t.Errorf("queue of %q: %q, want %q", team, got, want)
		}
	}
	if got := (Cluster{Teams: []TeamWeight{{"a", 1}, {"b", 1}}}).QueueOf("c"); got != "" {
		t.Errorf("an unlisted team without *: queue %q, want none", got)
	}
	if n := c.NominalNodes(4); n["b436b2"] != 3 || n[OthersQueue] != 1 {
		t.Errorf("nominal nodes %v; want 3 and 1", n)
	}
	if err := c.validateTeams(4); err != nil {
		t.Errorf("3:1 of 4 nodes: %v", err)
	}
	if err := c.validateTeams(6); err == nil || !strings.Contains(err.Error(), "whole nodes") {
		t.Errorf("3:1 of 6 nodes: %v; want whole nodes asked for", err)
	}
}

// "alone" becomes one configuration a team queue: +preemption with the
// queue's jobs only (JobsOf), on its nominal quota in nodes, no queues;
// it needs -teams and a configuration beside it.
func TestAloneConfigs(t *testing.T) {
	p := Params{Jobs: 40, Compression: 360, Nodes: 4, MinNodes: 2, MaxNodes: 6, GPUsPerNode: 8, Configs: "+queues,alone", Strategy: AutoscaleGPUQueue, Teams: "b436b2=3,*=1"}
	s, err := p.Load()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range s.Configs {
		got = append(got, fmt.Sprintf("%s:%s:%d:%v:%v", c.Name, c.Alone, c.StartNodes(s.Cluster), c.Queues, c.Checkpoints))
	}
	if want := "[+queues::4:true:true alone: b436b2:b436b2:3:false:true alone: others:others:1:false:true]"; fmt.Sprint(got) != want {
		t.Errorf("configs %v; want %s", got, want)
	}
	n := 0
	for _, c := range s.Configs[1:] {
		jobs := s.Cluster.JobsOf(s.Trace, c).Jobs
		for _, j := range jobs {
			if s.Cluster.QueueOf(j.Team) != c.Alone {
				t.Errorf("%s runs job %s of team %q", c.Name, j.ID, j.Team)
			}
		}
		n += len(jobs)
	}
	if n != len(s.Trace.Jobs) || len(s.Cluster.JobsOf(s.Trace, s.Configs[0]).Jobs) != n {
		t.Errorf("the queues alone run %d jobs, +queues %d; want the sample's %d each", n, len(s.Cluster.JobsOf(s.Trace, s.Configs[0]).Jobs), len(s.Trace.Jobs))
	}
	for _, tc := range []struct{ configs, teams, want string }{
		{"alone", "a=1,b=1", `configs: "alone" with no other; allowed: alone beside`},
		{"+preemption,alone", "", "teams: none, with a configuration of queues or alone"},
	} {
		p.Configs, p.Teams = tc.configs, tc.teams
		if _, err := p.Load(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("-configs %s -teams %q: %v; want %q", tc.configs, tc.teams, err, tc.want)
		}
	}
}
