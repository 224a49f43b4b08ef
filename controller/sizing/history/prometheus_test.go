package history

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// promSeries is one fixture series: its labels and its value at a time, if
// any.
type promSeries struct {
	metric string
	labels map[string]string
	value  func(t time.Time) (float64, bool)
}

func constant(v float64) func(time.Time) (float64, bool) {
	return func(time.Time) (float64, bool) { return v, true }
}

// fakeProm answers /api/v1/query_range from fixture series, selecting by
// the metric name and the labels in the query's selector.
type fakeProm struct {
	series []promSeries
	fail   bool

	mu      sync.Mutex
	queries []string
}

func (f *fakeProm) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/api/v1/query_range" {
		http.NotFound(w, r)
		return
	}
	if err := r.ParseForm(); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	q := r.Form.Get("query")
	f.mu.Lock()
	f.queries = append(f.queries, q)
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if f.fail {
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(`{"status":"error","errorType":"bad_data","error":"parse error"}`))
		return
	}
	parse := func(name string) float64 {
		v, err := strconv.ParseFloat(r.Form.Get(name), 64)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
		}
		return v
	}
	start, end, step := parse("start"), parse("end"), parse("step")
	if step <= 0 || (end-start)/step > 11000 {
		http.Error(w, "bad range", http.StatusBadRequest)
		return
	}
	type result struct {
		Metric map[string]string `json:"metric"`
		Values [][2]any          `json:"values"`
	}
	results := []result{}
	for _, s := range f.series {
		if !strings.HasPrefix(q, s.metric+"{") || !selects(q, s.labels) {
			continue
		}
		res := result{Metric: map[string]string{"__name__": s.metric}}
		for k, v := range s.labels {
			res.Metric[k] = v
		}
		for ts := start; ts <= end+1e-9; ts += step {
			t := time.UnixMilli(int64(math.Round(ts * 1000)))
			if v, ok := s.value(t); ok {
				res.Values = append(res.Values, [2]any{float64(t.UnixMilli()) / 1000, strconv.FormatFloat(v, 'f', -1, 64)})
			}
		}
		if len(res.Values) > 0 {
			results = append(results, res)
		}
	}
	_ = json.NewEncoder(w).Encode(map[string]any{
		"status": "success",
		"data":   map[string]any{"resultType": "matrix", "result": results},
	})
}

// selects reports whether every label="value" matcher in q's selector
// matches labels.
func selects(q string, labels map[string]string) bool {
	sel := q[strings.Index(q, "{")+1 : strings.LastIndex(q, "}")]
	for _, m := range strings.Split(sel, ",") {
		name, val, ok := strings.Cut(m, "=")
		if !ok {
			return false
		}
		uq, err := strconv.Unquote(val)
		if err != nil || labels[name] != uq {
			return false
		}
	}
	return true
}

func taskLabels(k Key, alloc, uuid string, extra ...string) map[string]string {
	l := map[string]string{"namespace": k.Namespace, "job": k.Job, "task_group": k.Group, "task": k.Task,
		"alloc_id": alloc, "uuid": uuid, "instance": "node1:9100"}
	for i := 0; i+1 < len(extra); i += 2 {
		l[extra[i]] = extra[i+1]
	}
	return l
}

// device is the three task series of one alloc and device.
func device(k Key, alloc, uuid string, util, used, limit float64, extra ...string) []promSeries {
	return []promSeries{
		{MetricTaskGPUUtilization, taskLabels(k, alloc, uuid, extra...), constant(util)},
		{MetricTaskGPUMemoryUsed, taskLabels(k, alloc, uuid, extra...), constant(used)},
		{MetricTaskGPUMemoryLimit, taskLabels(k, alloc, uuid, extra...), constant(limit)},
	}
}

func concat(ss ...[]promSeries) []promSeries {
	var out []promSeries
	for _, s := range ss {
		out = append(out, s...)
	}
	return out
}

func TestPrometheusSamples(t *testing.T) {
	const gib = 1 << 30
	step := 30 * time.Second
	since, until := base, base.Add(5*time.Minute) // 10 steps: until is exclusive
	minutes := func(alloc string, steps ...int) []string {
		var out []string
		for _, s := range steps {
			out = append(out, fmt.Sprintf("%s@%d", alloc, s))
		}
		return out
	}
	allSteps := []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}
	type want struct {
		times            []string // alloc@step
		slice            map[string]Slice
		util             map[string]float64
		mem, limit       map[string]uint64
		queriesPerMetric int
		errContains      string
	}
	for _, tc := range []struct {
		name   string
		series []promSeries
		runs   []Run
		fail   bool
		opts   PromOptions
		want   want
	}{
		{
			name:   "one GPU",
			series: device(keyA, "a1", "GPU-1", 40, 1*gib, 2*gib),
			want: want{times: minutes("a1", allSteps...),
				slice: map[string]Slice{"a1": {Kind: SliceGPU, Count: 1}},
				util:  map[string]float64{"a1": 40}, mem: map[string]uint64{"a1": 1 * gib}, limit: map[string]uint64{"a1": 2 * gib}},
		},
		{
			name: "two MIG instances averaged and summed",
			series: concat(device(keyA, "a1", "MIG-1", 20, 1*gib, 5*gib),
				device(keyA, "a1", "MIG-2", 60, 3*gib, 5*gib),
				device(keyB, "b1", "GPU-9", 99, 9*gib, 9*gib)), // another task: not selected
			want: want{times: minutes("a1", allSteps...),
				slice: map[string]Slice{"a1": {Kind: SliceMIG, Count: 2}},
				util:  map[string]float64{"a1": 40}, mem: map[string]uint64{"a1": 4 * gib}, limit: map[string]uint64{"a1": 10 * gib}},
		},
		{
			name:   "slice from the run record",
			series: concat(device(keyA, "a1", "GPU-1", 10, 1*gib, 0), device(keyA, "a2", "GPU-2", 30, 2*gib, 4*gib)),
			runs:   []Run{{Key: keyA, AllocID: "a2", Slice: Slice{Kind: SliceMPS, Count: 2}, Created: base}},
			want: want{times: []string{"a1@0", "a2@0", "a1@1", "a2@1", "a1@2", "a2@2", "a1@3", "a2@3", "a1@4", "a2@4",
				"a1@5", "a2@5", "a1@6", "a2@6", "a1@7", "a2@7", "a1@8", "a2@8", "a1@9", "a2@9"},
				slice: map[string]Slice{"a1": {Kind: SliceGPU, Count: 1}, "a2": {Kind: SliceMPS, Count: 2}},
				util:  map[string]float64{"a1": 10, "a2": 30}, mem: map[string]uint64{"a1": 1 * gib, "a2": 2 * gib},
				limit: map[string]uint64{"a1": 0, "a2": 4 * gib}},
		},
		{
			name: "steps without utilisation or memory skipped",
			series: []promSeries{
				{MetricTaskGPUUtilization, taskLabels(keyA, "a1", "GPU-1"), func(t time.Time) (float64, bool) {
					return 50, t.Sub(base) < 2*time.Minute // steps 0-3
				}},
				{MetricTaskGPUMemoryUsed, taskLabels(keyA, "a1", "GPU-1"), func(t time.Time) (float64, bool) {
					return gib, t.Sub(base) >= time.Minute // steps 2-9
				}},
			},
			want: want{times: minutes("a1", 2, 3),
				slice: map[string]Slice{"a1": {Kind: SliceGPU, Count: 1}},
				util:  map[string]float64{"a1": 50}, mem: map[string]uint64{"a1": gib}, limit: map[string]uint64{"a1": 0}},
		},
		{
			name: "duplicate series of a device not double counted",
			series: concat(device(keyA, "a1", "GPU-1", 40, 1*gib, 2*gib),
				device(keyA, "a1", "GPU-1", 40, 1*gib, 2*gib, "instance", "node1:9200")),
			want: want{times: minutes("a1", allSteps...),
				slice: map[string]Slice{"a1": {Kind: SliceGPU, Count: 1}},
				util:  map[string]float64{"a1": 40}, mem: map[string]uint64{"a1": 1 * gib}, limit: map[string]uint64{"a1": 2 * gib}},
		},
		{
			name:   "long range split",
			series: device(keyA, "a1", "GPU-1", 40, 1*gib, 2*gib),
			opts:   PromOptions{MaxPointsPerQuery: 3},
			want: want{times: minutes("a1", allSteps...), queriesPerMetric: 4, // 11 points in pieces of 3
				slice: map[string]Slice{"a1": {Kind: SliceGPU, Count: 1}},
				util:  map[string]float64{"a1": 40}, mem: map[string]uint64{"a1": 1 * gib}, limit: map[string]uint64{"a1": 2 * gib}},
		},
		{
			name: "server error",
			fail: true,
			want: want{errContains: MetricTaskGPUUtilization},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := &fakeProm{series: tc.series, fail: tc.fail}
			srv := httptest.NewServer(fake)
			defer srv.Close()
			store := openTest(t, filepath.Join(t.TempDir(), "h.db"), Options{})
			ctx := context.Background()
			for _, r := range tc.runs {
				if err := store.PutRun(ctx, r); err != nil {
					t.Fatal(err)
				}
			}
			opts := tc.opts
			opts.Step = step
			p, err := NewPrometheus(srv.URL, store, opts)
			if err != nil {
				t.Fatal(err)
			}
			got, err := p.Samples(ctx, keyA, since, until)
			if tc.want.errContains != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want.errContains) {
					t.Fatalf("err %v, want one naming %q", err, tc.want.errContains)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var times []string
			for _, s := range got {
				times = append(times, fmt.Sprintf("%s@%d", s.AllocID, int(s.Time.Sub(base)/step)))
				if s.Key != keyA {
					t.Errorf("sample key %v", s.Key)
				}
				if s.Slice != tc.want.slice[s.AllocID] || s.UtilPct != tc.want.util[s.AllocID] ||
					s.MemBytes != tc.want.mem[s.AllocID] || s.MemLimitBytes != tc.want.limit[s.AllocID] {
					t.Errorf("sample %+v: want slice %+v, util %v, mem %d, limit %d", s, tc.want.slice[s.AllocID],
						tc.want.util[s.AllocID], tc.want.mem[s.AllocID], tc.want.limit[s.AllocID])
				}
			}
			if !reflect.DeepEqual(times, tc.want.times) {
				t.Errorf("samples %v, want %v", times, tc.want.times)
			}
			if n := tc.want.queriesPerMetric; n > 0 && len(fake.queries) != 3*n {
				t.Errorf("%d queries, want %d", len(fake.queries), 3*n)
			}
		})
	}
}

func TestPrometheusQuery(t *testing.T) {
	fake := &fakeProm{}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	store := openTest(t, filepath.Join(t.TempDir(), "h.db"), Options{})
	p, err := NewPrometheus(srv.URL, store, PromOptions{})
	if err != nil {
		t.Fatal(err)
	}
	k := Key{Namespace: "ns", Job: `we"ird`, Group: "g", Task: "t"}
	if _, err := p.Samples(context.Background(), k, base, base.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	want := []string{
		`nomad_gpu_task_gpu_utilization_percent{namespace="ns",job="we\"ird",task_group="g",task="t"}`,
		`nomad_gpu_task_gpu_memory_used_bytes{namespace="ns",job="we\"ird",task_group="g",task="t"}`,
		`nomad_gpu_task_gpu_memory_limit_bytes{namespace="ns",job="we\"ird",task_group="g",task="t"}`,
	}
	if !reflect.DeepEqual(fake.queries, want) {
		t.Errorf("queries %q, want %q", fake.queries, want)
	}
	for _, tc := range []struct {
		name         string
		since, until time.Time
	}{
		{"empty range", base, base},
		{"reversed range", base.Add(time.Minute), base},
	} {
		fake.queries = nil
		got, err := p.Samples(context.Background(), k, tc.since, tc.until)
		if err != nil || got != nil || fake.queries != nil {
			t.Errorf("%s: %v, %v, %d queries; want nothing asked", tc.name, got, err, len(fake.queries))
		}
	}
}

func TestPrometheusRuns(t *testing.T) {
	store := openTest(t, filepath.Join(t.TempDir(), "h.db"), Options{})
	ctx := context.Background()
	for _, r := range []Run{{Key: keyA, AllocID: "a1", Created: at(1)}, {Key: keyB, AllocID: "b1", Created: at(2)}} {
		if err := store.PutRun(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	p, err := NewPrometheus("http://127.0.0.1:1", store, PromOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		get  func() ([]Run, error)
		want []string
	}{
		{"Runs", func() ([]Run, error) { return p.Runs(ctx, keyA, time.Time{}) }, []string{"a1"}},
		{"AllRuns", func() ([]Run, error) { return p.AllRuns(ctx, time.Time{}) }, []string{"a1", "b1"}},
	} {
		got, err := tc.get()
		if err != nil {
			t.Fatal(err)
		}
		if g := runAllocs(got); !reflect.DeepEqual(g, tc.want) {
			t.Errorf("%s = %v, want %v", tc.name, g, tc.want)
		}
	}
	for _, bad := range []struct {
		addr string
		runs RunSource
	}{{"http://127.0.0.1:1", nil}, {"://bad", store}} {
		if _, err := NewPrometheus(bad.addr, bad.runs, PromOptions{}); err == nil {
			t.Errorf("NewPrometheus(%q, %v) took it", bad.addr, bad.runs)
		}
	}
}
