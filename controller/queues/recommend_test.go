package queues

import (
	"math"
	"strings"
	"testing"
)

func mustParse(t *testing.T, src string) Config {
	t.Helper()
	cfg, err := Parse("queues.hcl", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestRecommend(t *testing.T) {
	p90 := func(x float64) Use { return Use{Mean: x / 2, Quantile: x, Max: x + 1} }
	type want struct {
		rec, lending float64
		lowered      bool
		reason       string // a part of it
	}
	cases := []struct {
		name string
		file string
		use  map[string]Use
		opt  RecommendOptions
		want map[string]want
	}{{
		name: "proportional split keeps the cohort's total",
		file: `cohort "lab" {}
queue "a" {
 namespaces = ["a"]
 nominal = 6
 cohort = "lab"
}
queue "b" {
 namespaces = ["b"]
 nominal = 6
 cohort = "lab"
}`,
		use: map[string]Use{"a": p90(9), "b": p90(3)},
		want: map[string]want{
			"a": {rec: 9, lending: 9, reason: `75% of cohort "lab"'s use`},
			"b": {rec: 3, lending: 3, reason: `25% of cohort "lab"'s use`},
		},
	}, {
		name: "thirds of 10 round to steps by largest remainder",
		file: `cohort "lab" {}
queue "a" {
 namespaces = ["a"]
 nominal = 2
 cohort = "lab"
}
queue "b" {
 namespaces = ["b"]
 nominal = 3
 cohort = "lab"
}
queue "c" {
 namespaces = ["c"]
 nominal = 5
 cohort = "lab"
}`,
		use: map[string]Use{"a": p90(1), "b": p90(1), "c": p90(1)},
		want: map[string]want{
			"a": {rec: 3.5, lending: 3.5}, "b": {rec: 3.5, lending: 3.5}, "c": {rec: 3, lending: 3},
		},
	}, {
		name: "a total off the step gives the part of a step to the largest",
		file: `cohort "lab" {}
queue "a" {
 namespaces = ["a"]
 nominal = 3.3
 cohort = "lab"
}
queue "b" {
 namespaces = ["b"]
 nominal = 4
 cohort = "lab"
}`,
		use: map[string]Use{"a": p90(1), "b": p90(2)},
		// 7.3 × 1/3 = 2.433 = 4.87 steps; 7.3 × 2/3 = 4.867 = 9.73 steps.
		// Rounded down 4 + 9 of the 14 whole steps; the one left goes to
		// a, the larger fraction (2.5); the 0.3 left to b, the larger (4.8).
		want: map[string]want{"a": {rec: 2.5, lending: 2.5}, "b": {rec: 4.8, lending: 4.8}},
	}, {
		name: "a queue in no cohort is lowered to its use rounded up, never raised",
		file: `queue "idle" {
 namespaces = ["i"]
 nominal = 8
}
queue "busy" {
 namespaces = ["b"]
 nominal = 4
}`,
		use: map[string]Use{"idle": p90(3.2), "busy": p90(5)},
		want: map[string]want{
			"idle": {rec: 3.5, reason: "stood idle"},
			"busy": {rec: 4, reason: "cannot borrow"},
		},
	}, {
		name: "a queue with no use gets none",
		file: `cohort "lab" {}
queue "a" {
 namespaces = ["a"]
 nominal = 4
 cohort = "lab"
}
queue "b" {
 namespaces = ["b"]
 nominal = 4
 cohort = "lab"
}`,
		use:  map[string]Use{"a": p90(4), "b": p90(0)},
		want: map[string]want{"a": {rec: 8, lending: 8}, "b": {rec: 0, lending: 0, reason: "no use over the window"}},
	}, {
		name: "a floor keeps some for a queue with no use",
		file: `cohort "lab" {}
queue "a" {
 namespaces = ["a"]
 nominal = 4
 cohort = "lab"
}
queue "b" {
 namespaces = ["b"]
 nominal = 4
 cohort = "lab"
}`,
		use:  map[string]Use{"a": p90(4), "b": p90(0)},
		opt:  RecommendOptions{Floor: 1},
		want: map[string]want{"a": {rec: 7, lending: 7}, "b": {rec: 1, lending: 1, reason: "the floor"}},
	}, {
		name: "a lending limit above the new nominal is lowered to it",
		file: `cohort "lab" {}
queue "a" {
 namespaces = ["a"]
 nominal = 6
 lending_limit = 4
 cohort = "lab"
}
queue "b" {
 namespaces = ["b"]
 nominal = 6
 cohort = "lab"
}`,
		use: map[string]Use{"a": Use{Quantile: 1, Starved: 0.25}, "b": p90(5)},
		want: map[string]want{
			"a": {rec: 2, lending: 2, lowered: true, reason: "lending_limit 4 is above the new nominal: lowered to it"},
			"b": {rec: 10, lending: 10},
		},
	}, {
		name: "no history keeps its nominal; the rest of the cohort shares the rest",
		file: `cohort "lab" {}
queue "new" {
 namespaces = ["n"]
 nominal = 4
 cohort = "lab"
}
queue "b" {
 namespaces = ["b"]
 nominal = 4
 cohort = "lab"
}
queue "c" {
 namespaces = ["c"]
 nominal = 4
 cohort = "lab"
}`,
		use: map[string]Use{"b": p90(2), "c": p90(6)},
		want: map[string]want{
			"new": {rec: 4, lending: 4, reason: "no history"}, "b": {rec: 2, lending: 2}, "c": {rec: 6, lending: 6},
		},
	}, {
		name: "a cohort with no use keeps its nominals",
		file: `cohort "lab" {}
queue "a" {
 namespaces = ["a"]
 nominal = 3
 cohort = "lab"
}`,
		use:  map[string]Use{"a": p90(0)},
		want: map[string]want{"a": {rec: 3, lending: 3, reason: "had no use"}},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.opt.Step == 0 {
				c.opt.Step = DefaultStep
			}
			cfg := mustParse(t, c.file)
			recs, err := Recommend(cfg, c.use, c.opt)
			if err != nil {
				t.Fatal(err)
			}
			before, after := map[string]float64{}, map[string]float64{}
			for _, r := range recs {
				w := c.want[r.Queue]
				if math.Abs(r.Recommended-w.rec) > 1e-9 || math.Abs(r.LendingLimit-w.lending) > 1e-9 || r.LendingLowered != w.lowered {
					t.Errorf("%s: recommended %g, lending %g (lowered %v); want %g, %g (%v)",
						r.Queue, r.Recommended, r.LendingLimit, r.LendingLowered, w.rec, w.lending, w.lowered)
				}
				if !strings.Contains(r.Reason, w.reason) {
					t.Errorf("%s: reason %q; want it to say %q", r.Queue, r.Reason, w.reason)
				}
				before[r.Cohort] += r.Nominal
				after[r.Cohort] += r.Recommended
			}
			for cohort, total := range before {
				if cohort != "" && math.Abs(after[cohort]-total) > 1e-9 {
					t.Errorf("cohort %q: recommended total %g; want its nominal total %g", cohort, after[cohort], total)
				}
			}
		})
	}
}

func TestRecommendRefuses(t *testing.T) {
	cfg := mustParse(t, `cohort "lab" {}
queue "a" {
 namespaces = ["a"]
 nominal = 2
 cohort = "lab"
}
queue "b" {
 namespaces = ["b"]
 nominal = 1
 cohort = "lab"
}`)
	use := map[string]Use{"a": {Quantile: 1}, "b": {Quantile: 1}}
	for _, c := range []struct {
		opt  RecommendOptions
		want string
	}{
		{RecommendOptions{Step: 0}, "step 0; allowed: more than 0"},
		{RecommendOptions{Step: 0.5, Floor: -1}, "floor -1; allowed: 0 or more"},
		{RecommendOptions{Step: 0.5, Floor: 0.3}, "floor 0.3; allowed: a multiple of the step (0.5)"},
		{RecommendOptions{Step: 0.5, Floor: 2}, `floor 2: cohort "lab"'s 2 queues would need 4, its nominal total is 3; allowed: a floor up to 1.5`},
	} {
		_, err := Recommend(cfg, use, c.opt)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v; want %q", c.opt, err, c.want)
		}
	}
}
