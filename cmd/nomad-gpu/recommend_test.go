package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/controller/sizing"
	"github.com/nomad-gpu/nomad-gpu/controller/sizing/history"
)

// fakeNomad answers the two reads recommend makes: the job and the nodes.
func fakeNomad(t *testing.T, job *api.Job, nodes []*api.NodeListStub) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/job/" + *job.ID:
			_ = json.NewEncoder(w).Encode(job)
		case "/v1/nodes":
			if r.URL.Query().Get("resources") != "true" {
				t.Errorf("nodes listed without resources=true")
			}
			_ = json.NewEncoder(w).Encode(nodes)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestRecommend(t *testing.T) {
	two := uint64(2)
	mpsTask := func(name string, checkpoint bool, meta map[string]string) *api.Task {
		cfg := map[string]any{"command": "train"}
		if checkpoint {
			cfg["checkpoint"] = []any{map[string]any{}}
		}
		return &api.Task{Name: name, Driver: "gpu", Config: cfg, Meta: meta,
			Resources: &api.Resources{Devices: []*api.RequestedDevice{{Name: "nvidia/mps", Count: &two}}}}
	}
	job := &api.Job{ID: ptrTo("train"), Namespace: ptrTo("default"), NodePool: ptrTo("gpu"),
		Meta: map[string]string{sizing.MetaMode: "auto"},
		TaskGroups: []*api.TaskGroup{{Name: ptrTo("g"), Tasks: []*api.Task{
			mpsTask("starved", true, nil),
			mpsTask("nockpt", false, nil),
			mpsTask("watched", true, map[string]string{sizing.MetaMode: "recommend"}),
			mpsTask("off", true, map[string]string{sizing.MetaMode: "off"}),
			mpsTask("bad", true, map[string]string{sizing.MetaMax: "lots"}),
		}}}}
	share := func(id string) *api.NodeDevice { return &api.NodeDevice{ID: id, Healthy: true} }
	nodes := []*api.NodeListStub{
		{ID: "n1", NodePool: "gpu", NodeResources: &api.NodeResources{Devices: []*api.NodeDeviceResource{
			{Vendor: "nvidia", Type: "mps", Name: "GPU-a", Instances: []*api.NodeDevice{share("a0"), share("a1"), share("a2"), share("a3")}}}}},
		{ID: "n2", NodePool: "other", NodeResources: &api.NodeResources{Devices: []*api.NodeDeviceResource{
			{Vendor: "nvidia", Type: "mps", Name: "GPU-b", Instances: make([]*api.NodeDevice, 16)}}}},
	}
	srv := fakeNomad(t, job, nodes)

	path := filepath.Join(t.TempDir(), "history.db")
	st, err := history.Open(path, history.Options{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	var samples []history.Sample
	for _, task := range []string{"starved", "nockpt", "watched", "off", "bad"} {
		for i := 0; i < 60; i++ {
			samples = append(samples, history.Sample{Key: history.Key{Namespace: "default", Job: "train", Group: "g", Task: task},
				AllocID: "a1", Time: now.Add(-time.Duration(i) * 15 * time.Second), Slice: history.Slice{Kind: "mps", Count: 2},
				UtilPct: 99, MemBytes: 1 << 30, MemLimitBytes: 10 << 30})
		}
	}
	if err := st.AddSamples(context.Background(), samples); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	var out bytes.Buffer
	o := &recommendOptions{nomadConn: nomadConn{address: srv.URL}, historyPath: path, window: time.Hour, job: "train"}
	if err := recommend(context.Background(), o, &out); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	for _, want := range []string{
		"g/starved (auto)\n  p95 utilisation 99 % (mean 99 %) of 2 MPS shares over 14m45s (60 samples); peak GPU memory 1.0 GiB of 10.0 GiB; → 4 MPS shares (grow shares)\n  the sizer would apply it now",
		"g/nockpt (auto)\n  p95", "not applied: the task does not checkpoint",
		"g/watched (recommend)\n  p95", "not applied: nomad_gpu_sizing is recommend: recommended only",
		"g/bad (auto)\n  cannot size: meta nomad_gpu_sizing_max: \"lots\"",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "g/off") {
		t.Errorf("a task whose policy is off is shown without -all:\n%s", text)
	}

	out.Reset()
	o.json = true
	if err := recommend(context.Background(), o, &out); err != nil {
		t.Fatal(err)
	}
	var tasks []recommendTask
	if err := json.Unmarshal(out.Bytes(), &tasks); err != nil {
		t.Fatalf("JSON %v:\n%s", err, out.String())
	}
	if len(tasks) != 4 || tasks[0].Task != "starved" || tasks[0].Recommended.Count != 4 || !tasks[0].Apply {
		t.Fatalf("JSON tasks %+v", tasks)
	}
}

func TestRecommendFlags(t *testing.T) {
	cases := []struct {
		args    []string
		wantErr string
	}{
		{[]string{"-history", "h.db"}, "name the job"},
		{[]string{"job"}, "give -history"},
		{[]string{"-history", "h.db", "-window", "0s", "job"}, "-window 0s: must be positive"},
		{[]string{"-history", "h.db", "a", "b"}, `unexpected argument "b"`},
	}
	for _, c := range cases {
		_, err := parseRecommendFlags(c.args, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), c.wantErr) {
			t.Errorf("%v: error %v, want %q", c.args, err, c.wantErr)
		}
	}
}

func ptrTo[T any](v T) *T { return &v }
