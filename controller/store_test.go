package controller

import (
	"regexp"
	"strings"
	"testing"
)

// Nomad's own rule for variable paths (nomad/structs/variables.go).
var validVariablePath = regexp.MustCompile(`^[a-zA-Z0-9-_~/]{1,128}$`)

func TestLedgerPath(t *testing.T) {
	long := strings.Repeat("j", 100)
	cases := []struct {
		job, want string
	}{
		{"train", LedgerPrefix + "train"},
		{"train-2_a~b", LedgerPrefix + "train-2_a~b"},
		{"a.b", LedgerPrefix + "x612e62"},
		{"x1", LedgerPrefix + "x7831"}, // never taken for an encoded ID
		{"../etc", LedgerPrefix + "x2e2e2f657463"},
		{"a/b", LedgerPrefix + "x612f62"},
	}
	for _, c := range cases {
		if got := LedgerPath(c.job); got != c.want {
			t.Errorf("LedgerPath(%q) = %q, want %q", c.job, got, c.want)
		}
	}
	seen := map[string]string{}
	for _, job := range []string{"train", "a.b", "x612e62", "x1", "x7831", "../etc", "a/b", long, long + "k", "é"} {
		p := LedgerPath(job)
		if other, dup := seen[p]; dup {
			t.Errorf("jobs %q and %q share %s", job, other, p)
		}
		seen[p] = job
		if len(p) <= 128 && !validVariablePath.MatchString(p) {
			t.Errorf("LedgerPath(%q) = %q is no valid variable path", job, p)
		}
	}
}
