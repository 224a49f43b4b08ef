package sizing

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/nomad-gpu/nomad-gpu/controller/sizing/history"
)

// A RunList answers as the file's runs do: a task's runs, or all, that
// had not finished before since, by creation then allocation ID.
func TestRunList(t *testing.T) {
	base := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	a := history.Key{Namespace: "default", Job: "a", Group: "g", Task: "t"}
	b := history.Key{Namespace: "default", Job: "b", Group: "g", Task: "t"}
	runs := RunList{
		{Key: a, AllocID: "a3", Created: base.Add(2 * time.Hour)},                                   // running
		{Key: a, AllocID: "a1", Created: base, Finished: base.Add(30 * time.Minute)},                // finished before since
		{Key: b, AllocID: "b1", Created: base.Add(time.Hour), Finished: base.Add(90 * time.Minute)}, // after since
		{Key: a, AllocID: "a2", Created: base.Add(time.Hour), Finished: base.Add(time.Hour + time.Minute)},
	}
	since := base.Add(time.Hour)
	ids := func(rs []history.Run) []string {
		var out []string
		for _, r := range rs {
			out = append(out, r.AllocID)
		}
		return out
	}
	cases := []struct {
		name string
		get  func() ([]history.Run, error)
		want []string
	}{
		{"one task", func() ([]history.Run, error) { return runs.Runs(context.Background(), a, since) }, []string{"a2", "a3"}},
		{"all", func() ([]history.Run, error) { return runs.AllRuns(context.Background(), since) }, []string{"a2", "b1", "a3"}},
		{"none of another task", func() ([]history.Run, error) {
			return runs.Runs(context.Background(), history.Key{Namespace: "x"}, since)
		}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := c.get()
			if err != nil || !slices.Equal(ids(got), c.want) {
				t.Fatalf("got %v, %v; want %v", ids(got), err, c.want)
			}
		})
	}
}
