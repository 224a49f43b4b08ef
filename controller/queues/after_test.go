package queues

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseAfter(t *testing.T) {
	for _, tc := range []struct {
		value string
		want  []Dep
		err   string
	}{
		{"prep", []Dep{{"team", "prep"}}, ""},
		{" prep , data/etl ", []Dep{{"team", "prep"}, {"data", "etl"}}, ""},
		{"", nil, `meta nomad_gpu_after: ""; allowed: job IDs, comma-separated, each <job> or <namespace>/<job>`},
		{"prep,", nil, `meta nomad_gpu_after: "prep,"; allowed: job IDs`},
		{"a/b/c", nil, `meta nomad_gpu_after: "a/b/c"; allowed: job IDs`},
		{"/prep", nil, `meta nomad_gpu_after: "/prep"; allowed: job IDs`},
		{"train", nil, `meta nomad_gpu_after: "train" names the job itself; allowed: other jobs`},
		{"team/train", nil, `names the job itself`},
		{"prep,team/prep", nil, `meta nomad_gpu_after: "prep,team/prep" names team/prep twice; allowed: each job once`},
	} {
		got, err := ParseAfter("team", "train", tc.value)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: error %v, want %q", tc.value, err, tc.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%q: %v, %v; want %v", tc.value, got, err, tc.want)
		}
	}
}

// A job waits for the first dependency, in the order written, that has
// not completed; a failed or missing one says so.
func TestHeldBy(t *testing.T) {
	deps := []Dep{{"team", "prep"}, {"data", "etl"}}
	for _, tc := range []struct {
		name string
		runs map[Dep]DepRun
		want string
	}{
		{"both complete", map[Dep]DepRun{deps[0]: DepComplete, deps[1]: DepComplete}, ""},
		{"the first running", map[Dep]DepRun{deps[0]: DepUnfinished, deps[1]: DepFailed}, "dependency: after team/prep, which has not completed yet"},
		{"the second failed", map[Dep]DepRun{deps[0]: DepComplete, deps[1]: DepFailed}, "dependency: after data/etl, whose latest run failed; it waits until data/etl runs again and completes"},
		{"the second missing", map[Dep]DepRun{deps[0]: DepComplete}, "dependency: after data/etl, which does not exist (never submitted, or garbage-collected); run it, or change meta nomad_gpu_after"},
	} {
		if got := HeldBy(deps, func(d Dep) DepRun { return tc.runs[d] }); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
	if got := HeldBy(nil, nil); got != "" {
		t.Errorf("no dependencies: %q", got)
	}
}
