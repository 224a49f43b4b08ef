package main

import (
	"encoding/json"
	"errors"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/controller"
	"github.com/nomad-gpu/nomad-gpu/topview"
)

func TestParseQueueFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		check   func(t *testing.T, o *queueOptions)
		wantErr string
	}{
		{name: "defaults", check: func(t *testing.T, o *queueOptions) {
			if o.json || o.historyWindow != 24*time.Hour || o.controllerNamespace != "default" || o.namespace != "" {
				t.Errorf("%+v", o)
			}
		}},
		{name: "all", args: []string{"-json", "-history-window", "0", "-controller-namespace", "ops", "-namespace", "ml", "-address", "http://n:4646"},
			check: func(t *testing.T, o *queueOptions) {
				if !o.json || o.historyWindow != 0 || o.controllerNamespace != "ops" || o.namespace != "ml" || o.address != "http://n:4646" {
					t.Errorf("%+v", o)
				}
			}},
		{name: "history window negative", args: []string{"-history-window", "-1h"}, wantErr: "-history-window -1h0m0s: must not be negative"},
		{name: "history window not a duration", args: []string{"-history-window", "a day"}, wantErr: `invalid value "a day" for flag -history-window: parse error`},
		{name: "stray argument", args: []string{"-json", "extra"}, wantErr: `unexpected argument "extra"`},
		{name: "a flag of top only", args: []string{"-once"}, wantErr: "flag provided but not defined: -once"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o, err := parseQueueFlags(tc.args, io.Discard)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, o)
		})
	}
	if _, err := parseQueueFlags([]string{"-h"}, io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v", err)
	}
}

// queueFakeNomad is topFakeNomad with the controller's status in its
// variables, and a record of the paths asked.
type queueFakeNomad struct {
	topFakeNomad
	vars  map[string]api.VariableItems // by path, in namespace "default"
	mu    sync.Mutex
	paths []string
}

func (f *queueFakeNomad) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.paths = append(f.paths, r.URL.Path)
	f.mu.Unlock()
	if r.URL.Path == "/v1/vars" { // the ledger's and layouts' listings
		_ = json.NewEncoder(w).Encode([]*api.VariableMetadata{})
		return
	}
	path, ok := strings.CutPrefix(r.URL.Path, "/v1/var/")
	if !ok {
		f.topFakeNomad.ServeHTTP(w, r)
		return
	}
	items, ok := f.vars[path]
	if !ok || r.URL.Query().Get("namespace") != "default" {
		http.NotFound(w, r)
		return
	}
	v := &api.Variable{Namespace: "default", Path: path, Items: items}
	if path == controller.LeaderVariable {
		v.Lock = &api.VariableLock{ID: "lock-1"}
	}
	_ = json.NewEncoder(w).Encode(v)
}

func jsonItem(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestQueueCommand(t *testing.T) {
	clearTopNomadEnv(t)
	since := time.Now().Add(-10 * time.Minute)
	f := &queueFakeNomad{vars: map[string]api.VariableItems{
		controller.LeaderVariable: {},
		controller.GangsVariable: {controller.GangsItem: jsonItem(t, []controller.GangStatus{
			{Namespace: "vision", Job: "train", State: "waiting", Wanted: 2, Queue: "vision", Position: 1, Since: since,
				Reason: "quota: vision would use 8 of its nominal 6, and it is in no cohort to borrow from"},
			{Namespace: "nlp", Job: "ft", State: "running", Wanted: 1, Running: 1},
		})},
		controller.QueuesVariable: {controller.QueueStatusItem: jsonItem(t, []controller.QueueStatus{
			{Name: "vision", Use: 6, Nominal: 6, Active: true, Standing: 1.25, Waiting: 2}})},
	}}
	srv := httptest.NewServer(f)
	defer srv.Close()

	var out, errOut strings.Builder
	if rc := run([]string{"queue", "-address", srv.URL}, &out, &errOut); rc != 0 {
		t.Fatalf("rc %d: %s", rc, errOut.String())
	}
	for _, want := range []string{
		"1 job waiting (1 held), 2 allocations",
		"  1  vision  vision/train  -      10m0",
		"unknown          quota\n  quota: vision would use 8 of its nominal 6",
		"QUEUE   USED  NOMINAL  BORROWED  LENT  FAIR SHARE  WAITING\nvision     6        6         0     0        1.25        2\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "no controller leads") {
		t.Errorf("a leader holds the lock:\n%s", out.String())
	}
	f.mu.Lock()
	if slices.Contains(f.paths, "/v1/client/stats") {
		t.Errorf("queue read node stats: %v", f.paths)
	}
	f.mu.Unlock()

	out.Reset()
	if rc := run([]string{"queue", "-json", "-address", srv.URL, "-namespace", "nlp"}, &out, &errOut); rc != 0 {
		t.Fatalf("rc %d: %s", rc, errOut.String())
	}
	var r topview.WaitReport
	if err := json.Unmarshal([]byte(out.String()), &r); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if len(r.Jobs) != 0 || len(r.Queues) != 1 || r.Leading == nil || !*r.Leading {
		t.Errorf("-namespace nlp: %s", out.String())
	}
}

func TestQueueErrors(t *testing.T) {
	clearTopNomadEnv(t)
	tests := []struct {
		name   string
		args   []string
		rc     int
		stderr string
	}{
		{"unreachable", []string{"queue", "-address", "http://127.0.0.1:1"}, 1, "nomad-gpu queue: list nodes:"},
		{"bad flag", []string{"queue", "-history-window", "-5m"}, 2, "nomad-gpu queue: -history-window -5m0s: must not be negative"},
		{"unknown flag", []string{"queue", "-width", "100"}, 2, "flag provided but not defined: -width"},
		{"help", []string{"queue", "-h"}, 0, "usage: nomad-gpu queue [flags]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut strings.Builder
			if rc := run(tc.args, &out, &errOut); rc != tc.rc || !strings.Contains(errOut.String(), tc.stderr) || out.Len() > 0 {
				t.Errorf("rc %d, stdout %q, stderr %q; want %d, %q", rc, out.String(), errOut.String(), tc.rc, tc.stderr)
			}
		})
	}
}

func TestWriteQueueReport(t *testing.T) {
	at := time.Date(2026, 12, 5, 14, 0, 0, 0, time.UTC)
	wait := int64(12 * 60)
	start := at.Add(12 * time.Minute)
	r := topview.WaitReport{GeneratedAt: at, Jobs: []topview.WaitingJob{
		{Queue: "vision", Position: 1, Namespace: "vision", Job: "train", State: topview.StateHeld, Count: 2, WaitingSeconds: 3900,
			Asks:   []topview.GroupAsk{{Group: "w", Count: 2, Devices: []topview.DeviceAsk{{Name: "nvidia/gpu", Count: 4}}}},
			Reason: "cohort: lab lends 2 now, 8 needed", Kind: "cohort", PredictedWaitSeconds: &wait, PredictedStart: &start, PredictionBasis: "list_schedule"},
		{Namespace: "default", Job: "nb", State: topview.StateBlocked, Count: 1, WaitingSeconds: 5,
			Asks:   []topview.GroupAsk{{Group: "g", Count: 1, Devices: []topview.DeviceAsk{{Name: "nvidia/mig/1g.10gb", Count: 1}}}},
			Reason: `constraint "missing devices" filtered 1 node`, Kind: "other"},
	}}
	tests := []struct {
		name   string
		asJSON bool
		want   []string
	}{
		{"table", false, []string{
			"nomad-gpu queue  2026-12-05 14:00:00 UTC  2 jobs waiting (1 held), 3 allocations\n\n",
			"POS  QUEUE   JOB           ASKS                WAITING  PREDICTED START  KIND\n",
			"  1  vision  vision/train  2×(gpu x4)            1h05m  ~14:12 (in 12m)  cohort\n  cohort: lab lends 2 now, 8 needed\n",
			"  -  -       default/nb    1×(mig/1g.10gb x1)       5s  unknown          other\n  constraint \"missing devices\" filtered 1 node\n",
		}},
		{"JSON", true, []string{
			`"generated_at": "2026-12-05T14:00:00Z"`, `"position": 1`, `"queue": "vision"`, `"kind": "cohort"`,
			`"predicted_start": "2026-12-05T14:12:00Z"`, `"asks": [`, `"state": "held"`,
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			if err := writeQueueReport(&b, r, tc.asJSON, 80, time.UTC); err != nil {
				t.Fatal(err)
			}
			for _, want := range tc.want {
				if !strings.Contains(b.String(), want) {
					t.Errorf("report lacks %q:\n%s", want, b.String())
				}
			}
		})
	}
}
