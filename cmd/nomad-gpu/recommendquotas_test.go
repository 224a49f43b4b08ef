package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nomad-gpu/nomad-gpu/controller/queues"
)

const quotaFile = `# the lab's queues
cohort "lab" {}
queue "vision" {
  namespaces    = ["vision"]
  nominal       = 6 # the team's share
  lending_limit = 4
  weight        = 2
  cohort        = "lab"
}
queue "nlp" {
  namespaces      = ["nlp"]
  node_pool       = "gpu"
  nominal         = 6
  borrowing_limit = 2
  cohort          = "lab"
}
queue "solo" {
  namespaces = ["solo"]
  nominal    = 8
}
queue "new" {
  namespaces = ["new"]
  nominal    = 2
}
`

// fakeQueueProm answers the instant queries of recommend-quotas with
// figures by kind (mean, quantile, max, starved) and queue.
func fakeQueueProm(t *testing.T, figures map[string]map[string]float64) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.FormValue("query")
		if r.URL.Path != "/api/v1/query" || !strings.Contains(q, "nomad_gpu_controller_leader == 1") {
			t.Errorf("unexpected request %s %q: want instant queries of the leader's series", r.URL.Path, q)
		}
		kind := "mean"
		switch {
		case strings.Contains(q, "waiting_allocations"):
			kind = "starved"
		case strings.HasPrefix(q, "quantile_over_time(0.9,"):
			kind = "quantile"
		case strings.HasPrefix(q, "max_over_time"):
			kind = "max"
		}
		var result []string
		for queue, v := range figures[kind] {
			result = append(result, fmt.Sprintf(`{"metric":{"queue":%q},"value":[1700000000,"%g"]}`, queue, v))
		}
		fmt.Fprintf(w, `{"status":"success","data":{"resultType":"vector","result":[%s]}}`, strings.Join(result, ","))
	}))
	t.Cleanup(srv.Close)
	return srv
}

var labUse = map[string]map[string]float64{
	"quantile": {"vision": 1, "nlp": 5, "solo": 3.2},
	"mean":     {"vision": 0.5, "nlp": 3, "solo": 2},
	"max":      {"vision": 2, "nlp": 8, "solo": 4},
	"starved":  {"vision": 0.25},
}

func writeQuotaFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "queues.hcl")
	if err := os.WriteFile(path, []byte(quotaFile), 0o640); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestRecommendQuotasTable(t *testing.T) {
	srv := fakeQueueProm(t, labUse)
	path := writeQuotaFile(t)
	var stdout, stderr bytes.Buffer
	if code := run([]string{"recommend-quotas", "-queues", path, "-prometheus", srv.URL}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{
		"QUEUE   COHORT  NOMINAL  P90 USED  MEAN  MAX  RECOMMENDED  CHANGE",
		"vision  lab     6        1         0.5   2    2            -4",
		"nlp     lab     6        5         3     8    10           +4",
		"solo    -       8        3.2       2     4    3.5          -4.5",
		"new     -       2        -         -     -    2            0",
		"vision: 17% of cohort \"lab\"'s use",
		"it had work waiting below its nominal 25% of the window",
		"lending_limit 4 is above the new nominal: lowered to it",
		"new: no history over the window: keeps its nominal",
		"nothing changed; -write rewrites",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if got, _ := os.ReadFile(path); string(got) != quotaFile {
		t.Errorf("the file changed without -write:\n%s", got)
	}
}

func TestRecommendQuotasWrite(t *testing.T) {
	srv := fakeQueueProm(t, labUse)
	path := writeQuotaFile(t)
	var stdout, stderr bytes.Buffer
	code := run([]string{"recommend-quotas", "-queues", path, "-prometheus", srv.URL, "-window", "2w", "-json", "-write"}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	var rep quotaReport
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("%v:\n%s", err, stdout.String())
	}
	if !rep.Written || rep.Window != "2w" || len(rep.Queues) != 4 || rep.Queues[0].Recommended != 2 || !rep.Queues[0].LendingLowered {
		t.Errorf("report %+v; want written, window 2w, vision at 2 with its lending limit lowered", rep)
	}
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := queues.Parse(path, src)
	if err != nil {
		t.Fatalf("the written file does not parse: %v\n%s", err, src)
	}
	want := map[string][2]float64{"vision": {2, 2}, "nlp": {10, 10}, "solo": {3.5, 0}, "new": {2, 0}}
	for _, q := range cfg.Queues {
		if w := want[q.Name]; q.Nominal != w[0] || q.LendingLimit != w[1] {
			t.Errorf("%s: nominal %g, lending limit %g; want %g, %g", q.Name, q.Nominal, q.LendingLimit, w[0], w[1])
		}
	}
	for _, kept := range []string{"# the lab's queues", "# the team's share", "weight        = 2", `node_pool       = "gpu"`, "borrowing_limit = 2"} {
		if !strings.Contains(string(src), kept) {
			t.Errorf("the written file lost %q:\n%s", kept, src)
		}
	}
	if info, err := os.Stat(path); err != nil || info.Mode().Perm() != 0o640 {
		t.Errorf("the written file's mode %v (%v); want 0640", info.Mode(), err)
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".queues.hcl.*")); len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

func TestRecommendQuotasRefuses(t *testing.T) {
	srv := fakeQueueProm(t, labUse)
	empty := fakeQueueProm(t, nil)
	path := writeQuotaFile(t)
	bad := filepath.Join(t.TempDir(), "bad.hcl")
	if err := os.WriteFile(bad, []byte("queue \"a\" {\n  namespaces = [\"a\"]\n  nominal = -1\n}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()
	base := []string{"recommend-quotas", "-queues", path, "-prometheus", srv.URL}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"recommend-quotas", "-prometheus", srv.URL}, 2, "-queues: not set"},
		{[]string{"recommend-quotas", "-queues", path}, 2, "-prometheus: not set"},
		{append(base, "-window", "30m"), 2, "-window 30m; allowed: at least 1h"},
		{append(base, "-window", "a week"), 2, `invalid value "a week" for flag -window`},
		{append(base, "-quantile", "0"), 2, "-quantile 0; allowed: more than 0, at most 1"},
		{append(base, "-quantile", "1.5"), 2, "-quantile 1.5; allowed"},
		{append(base, "-step", "0"), 2, "-step 0; allowed: more than 0"},
		{append(base, "-floor", "0.3"), 2, "-floor 0.3; allowed: a multiple of the step (0.5)"},
		{append(base, "-floor", "6.5"), 2, `-floor 6.5: cohort "lab"'s 2 queues would need 13`},
		{append(base, "train"), 2, `unexpected argument "train"`},
		{[]string{"recommend-quotas", "-queues", bad, "-prometheus", srv.URL}, 2, "nominal: -1; allowed: 0 or more"},
		{[]string{"recommend-quotas", "-queues", path, "-prometheus", down.URL}, 1, "-prometheus " + down.URL + ": query"},
		{[]string{"recommend-quotas", "-queues", path, "-prometheus", empty.URL}, 1, "does it scrape the controller?"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(c.args, &stdout, &stderr)
		if code != c.code || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("%q: exit %d, %q; want exit %d saying %q", c.args[1:], code, stderr.String(), c.code, c.want)
		}
	}
	if got, _ := os.ReadFile(path); string(got) != quotaFile {
		t.Errorf("a refused run changed the file:\n%s", got)
	}
}
