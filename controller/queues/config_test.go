package queues

import (
	"strings"
	"testing"
	"time"
)

const goodFile = `
fair_share {
  half_life = "24h"
}
reclaim {
  within = "30s"
}
cohort "lab" {}
queue "a" {
  namespaces      = ["a"]
  nominal         = 6
  borrowing_limit = 4
  lending_limit   = 5
  weight          = 2
  cohort          = "lab"
}
queue "b" {
  namespaces = ["b", "b-batch"]
  node_pool  = "gpu"
  nominal    = 6
  cohort     = "lab"
}
queue "solo" {
  namespaces = ["solo"]
  nominal    = 1.5
}
`

func TestParse(t *testing.T) {
	cfg, err := Parse("queues.hcl", []byte(goodFile))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.HalfLife != 24*time.Hour || cfg.ReclaimWithin != 30*time.Second || len(cfg.Cohorts) != 1 || len(cfg.Queues) != 3 {
		t.Fatalf("config %+v", cfg)
	}
	want := []Queue{
		{Name: "a", Namespaces: []string{"a"}, Nominal: 6, BorrowingLimit: 4, LendingLimit: 5, Weight: 2, Cohort: "lab"},
		{Name: "b", Namespaces: []string{"b", "b-batch"}, NodePool: "gpu", Nominal: 6, BorrowingLimit: Unlimited, LendingLimit: 6, Weight: 1, Cohort: "lab"},
		{Name: "solo", Namespaces: []string{"solo"}, Nominal: 1.5, BorrowingLimit: 0, LendingLimit: 0, Weight: 1},
	}
	for i, q := range cfg.Queues {
		w := want[i]
		if q.Name != w.Name || strings.Join(q.Namespaces, ",") != strings.Join(w.Namespaces, ",") || q.NodePool != w.NodePool || q.Nominal != w.Nominal ||
			q.BorrowingLimit != w.BorrowingLimit || q.LendingLimit != w.LendingLimit || q.Weight != w.Weight || q.Cohort != w.Cohort {
			t.Errorf("queue %d: %+v, want %+v", i, q, w)
		}
	}
	// Defaults: no fair_share or reclaim block.
	cfg, err = Parse("q.hcl", []byte(`queue "x" {
  namespaces = ["x"]
  nominal = 2
}`))
	if err != nil || cfg.HalfLife != DefaultHalfLife || cfg.ReclaimWithin != DefaultReclaimWithin {
		t.Errorf("defaults: %+v, %v", cfg, err)
	}
}

// Every bad key, value or reference is an error naming the file, the
// key path and what is allowed; all of them at once.
func TestParseErrors(t *testing.T) {
	q := func(body string) string { return "cohort \"lab\" {}\nqueue \"a\" {\n" + body + "\n}\n" }
	for _, tc := range []struct {
		name, src string
		want      []string
	}{
		{"not HCL", `queue "a" {`, []string{"q.hcl:1"}},
		{"an unknown key", q(`namespaces = ["a"]
nominal = 1
nomnal = 2`), []string{`q.hcl:5`, `"nomnal" is not expected here`}},
		{"an unknown block", `queue "a" {
  namespaces = ["a"]
  nominal = 1
}
quota "x" {}`, []string{`q.hcl:5`, `"quota"`}},
		{"nominal missing", q(`namespaces = ["a"]`), []string{`"nominal" is required`}},
		{"a string for a number", q(`namespaces = ["a"]
nominal = "six"`), []string{"q.hcl:4", `(queue "a".nominal)`}},
		{"no queue", `cohort "lab" {}`, []string{"q.hcl: queue: none; allowed: one or more queue blocks"}},
		{"a negative quota", q(`namespaces = ["a"]
nominal = -1`), []string{`q.hcl: queue "a": nominal: -1; allowed: 0 or more GPU-equivalents`}},
		{"lending above nominal", q(`namespaces = ["a"]
nominal = 4
cohort = "lab"
lending_limit = 5`), []string{`queue "a": lending_limit: 5; allowed: 0 to nominal (4)`}},
		{"a negative borrowing limit", q(`namespaces = ["a"]
nominal = 4
cohort = "lab"
borrowing_limit = -2`), []string{`queue "a": borrowing_limit: -2; allowed: 0 or more GPU-equivalents, or unset for no limit`}},
		{"limits without a cohort", q(`namespaces = ["a"]
nominal = 4
borrowing_limit = 1
lending_limit = 1`), []string{`queue "a": borrowing_limit: set without a cohort`, `queue "a": lending_limit: set without a cohort`}},
		{"an unknown cohort", q(`namespaces = ["a"]
nominal = 4
cohort = "lba"`), []string{`queue "a": cohort: "lba" is no cohort block; allowed: "lab"`}},
		{"a zero weight", q(`namespaces = ["a"]
nominal = 4
weight = 0`), []string{`queue "a": weight: 0; allowed: more than 0`}},
		{"no namespaces", q(`namespaces = []
nominal = 4`), []string{`queue "a": namespaces: []; allowed: one or more namespace names`}},
		{"an empty node pool", q(`namespaces = ["a"]
nominal = 4
node_pool = ""`), []string{`queue "a": node_pool: empty`}},
		{"a queue twice", q(`namespaces = ["a"]
nominal = 1`) + `queue "a" {
  namespaces = ["z"]
  nominal = 1
}`, []string{`queue "a": declared twice`}},
		{"a cohort twice", q(`namespaces = ["a"]
nominal = 1`) + `cohort "lab" {}`, []string{`cohort "lab": declared twice`}},
		{"a namespace in two queues", q(`namespaces = ["a"]
nominal = 1`) + `queue "b" {
  namespaces = ["a"]
  node_pool = "gpu"
  nominal = 1
}`, []string{`queue "b": namespaces: "a" is queue "a"'s already`}},
		{"a bad half-life", `fair_share {
  half_life = "soon"
}
` + q(`namespaces = ["a"]
nominal = 1`), []string{`fair_share.half_life: "soon"; allowed: a duration from 1m0s to 8760h0m0s`}},
		{"a reclaim bound too short", `reclaim {
  within = "1s"
}
` + q(`namespaces = ["a"]
nominal = 1`), []string{`reclaim.within: "1s"; allowed: a duration from 10s to 1h0m0s`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("q.hcl", []byte(tc.src))
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}
