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
