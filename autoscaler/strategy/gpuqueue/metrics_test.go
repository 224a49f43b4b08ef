package gpuqueue

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nomad-gpu/nomad-gpu/wire/autoscaler"
)

// syncBuffer is a log the plugin's goroutines may write while a test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func loggedStrategy(t *testing.T) (*Strategy, *syncBuffer) {
	t.Helper()
	var log syncBuffer
	s := New(hclog.New(&hclog.LoggerOptions{Level: hclog.Trace, Output: &log}))
	t.Cleanup(s.Close)
	return s, &log
}

// serve turns the strategy's metrics on at a free port and returns their URL.
func serve(t *testing.T, s *Strategy) string {
	t.Helper()
	if err := s.SetConfig(map[string]string{"metrics_address": "127.0.0.1:0", "nomad_address": "http://127.0.0.1:4646"}); err != nil {
		t.Fatal(err)
	}
	return "http://" + s.MetricsAddr() + MetricsPath
}

func readRuns(t *testing.T, url string) map[string]CheckRuns {
	t.Helper()
	runs, err := ReadCheckRuns(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]CheckRuns{}
	for _, r := range runs {
		out[r.Pool+"/"+r.Check] = r
	}
	return out
}

// The case: a check whose boot_time is refused fails every
// evaluation. Each run logs at error level with the key and what is
// allowed, and counts as refused; the pool's other checks count as ok.
func TestRefusedCheckIsLoggedAndCounted(t *testing.T) {
	s, log := loggedStrategy(t)
	s.now = func() time.Time { return t0 }
	url := serve(t, s)
	bad := autoscaler.Check{Name: "capacity", Query: "nodes_needed{node_pool=gpu}",
		Config: map[string]string{"signal": "nodes_needed", "pool": "gpu", "boot_time": "512ms", "nomad_address": "x"}}
	good := autoscaler.Check{Name: "queue", Query: "allocs_queued{node_pool=gpu}",
		Config: map[string]string{"signal": "queued", "pool": "gpu"}}
	for range 3 {
		if _, err := s.Run(bad, []autoscaler.Metric{{Time: t0, Value: 2}}, 0); err == nil {
			t.Fatal("boot_time 512ms accepted")
		}
		if _, err := s.Run(good, []autoscaler.Metric{{Time: t0, Value: 2}}, 0); err != nil {
			t.Fatal(err)
		}
	}

	var errLines []string
	for _, l := range strings.Split(log.String(), "\n") {
		if strings.Contains(l, "[ERROR]") {
			errLines = append(errLines, l)
		}
	}
	if len(errLines) != 3 {
		t.Fatalf("%d error lines, want one per run:\n%s", len(errLines), log)
	}
	for _, want := range []string{"check refused", "check_name=capacity", "pool=gpu", "key=boot_time",
		`\"512ms\" must be a duration of at least 1s such as \"5m\", or \"0\" to turn in-flight accounting off`} {
		if !strings.Contains(errLines[0], want) {
			t.Fatalf("error line lacks %s:\n%s", want, errLines[0])
		}
	}

	runs := readRuns(t, url)
	if got := runs["gpu/capacity"]; got.Refused != 3 || got.OK != 0 || got.Error != 0 || !got.Failing() ||
		got.Query != bad.Query {
		t.Errorf("capacity: %+v", got)
	}
	if got := runs["gpu/queue"]; got.OK != 3 || got.Failures() != 0 || got.Failing() {
		t.Errorf("queue: %+v", got)
	}

	// Every result has a series from the check's first run, so the
	// first failure after good runs is a rise.
	body := get(t, url)
	for _, want := range []string{
		`nomad_gpu_strategy_check_runs_total{check="queue",pool="gpu",query="allocs_queued{node_pool=gpu}",result="refused"} 0`,
		`nomad_gpu_strategy_check_runs_total{check="capacity",pool="gpu",query="nodes_needed{node_pool=gpu}",result="refused"} 3`,
		`nomad_gpu_strategy_check_runs_total{check="capacity",pool="gpu",query="nodes_needed{node_pool=gpu}",result="ok"} 0`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s:\n%s", want, body)
		}
	}
}

// Other refusals count as refused too (unknown keys, pool conflicts); bad
// input counts as error and is a warning.
func TestCheckResults(t *testing.T) {
	s, log := loggedStrategy(t)
	s.now = func() time.Time { return t0 }
	url := serve(t, s)
	run := func(name string, cfg map[string]string, count int64) {
		t.Helper()
		if _, err := s.Run(autoscaler.Check{Name: name, Config: cfg}, []autoscaler.Metric{{Time: t0, Value: 1}}, count); err == nil {
			t.Fatalf("%s: no error", name)
		}
	}
	run("typo", map[string]string{"max_step": "1", "floor": "x"}, 1)
	if !strings.Contains(log.String(), `key="floor,max_step"`) {
		t.Errorf("the keys of a joined refusal:\n%s", log)
	}
	if _, err := s.Run(autoscaler.Check{Name: "a", Config: map[string]string{"pool": "p", "max_wait": "30m"}}, nil, 1); err != nil {
		t.Fatal(err)
	}
	run("b", map[string]string{"pool": "p", "signal": "queued", "max_wait": "45m"}, 1)
	run("negative", nil, -1)
	if !strings.Contains(log.String(), "[WARN]  check failed: check_name=negative") {
		t.Errorf("bad input is a warning:\n%s", log)
	}

	runs := readRuns(t, url)
	for k, want := range map[string]CheckRuns{
		"/typo":     {Check: "typo", Refused: 1},
		"p/a":       {Pool: "p", Check: "a", OK: 1},
		"p/b":       {Pool: "p", Check: "b", Refused: 1},
		"/negative": {Check: "negative", Error: 1},
	} {
		if runs[k] != want {
			t.Errorf("%s: %+v, want %+v", k, runs[k], want)
		}
	}
}

// A check no evaluation ran for poolTTL loses its series; at most
// maxChecks are kept, the least recently run going first.
func TestCheckRunsBounded(t *testing.T) {
	s := New(nil)
	now := t0
	s.now = func() time.Time { return now }
	s.count(checkKey{check: "old"}, "ok")
	now = now.Add(poolTTL + 2*gcEvery)
	s.count(checkKey{check: "new"}, "ok")
	if _, ok := s.checks[checkKey{check: "old"}]; ok || len(s.checks) != 1 {
		t.Fatalf("idle check kept: %d checks", len(s.checks))
	}
	for i := range maxChecks + 10 {
		now = now.Add(time.Millisecond)
		s.count(checkKey{check: fmt.Sprint(i)}, "ok")
	}
	if len(s.checks) != maxChecks {
		t.Fatalf("%d checks kept", len(s.checks))
	}
	if _, ok := s.checks[checkKey{check: "new"}]; ok {
		t.Fatal("the least recently run check was kept")
	}
	long := strings.Repeat("é", maxLabel)
	if k := newCheckKey(autoscaler.Check{Name: long, Config: map[string]string{"pool": " gpu "}}); len(k.check) > maxLabel || k.pool != "gpu" ||
		!strings.HasPrefix(long, k.check) {
		t.Fatalf("%q", k)
	}
}

func TestMetricsAddress(t *testing.T) {
	s, _ := loggedStrategy(t)
	if err := s.SetConfig(map[string]string{"metrics_address": "nine"}); err == nil ||
		!strings.Contains(err.Error(), `gpu-queue: metrics_address: "nine" must be host:port`) {
		t.Fatalf("got %v", err)
	}
	if err := s.SetConfig(map[string]string{"metrics": "x"}); err == nil ||
		!strings.Contains(err.Error(), "lookahead, metrics_address") {
		t.Fatalf("the allowed keys: %v", err)
	}
	if s.MetricsAddr() != "" {
		t.Fatal("serving without metrics_address")
	}
	url := serve(t, s)
	first := s.MetricsAddr()
	// The same map again keeps the listener.
	serve(t, s)
	if s.MetricsAddr() != first {
		t.Fatalf("moved to %s", s.MetricsAddr())
	}
	if get(t, url) != "" {
		t.Fatal("metrics before any check ran")
	}

	// A port taken: an error naming the key, the old listener and the
	// defaults stay.
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	err = s.SetConfig(map[string]string{"metrics_address": taken.Addr().String(), "floor": "50"})
	if err == nil || !strings.Contains(err.Error(), "gpu-queue: metrics_address: \""+taken.Addr().String()) {
		t.Fatalf("got %v", err)
	}
	if s.MetricsAddr() != first || s.defaults.Floor != defaultRules.Floor {
		t.Fatalf("after a failed SetConfig: %s, floor %v", s.MetricsAddr(), s.defaults.Floor)
	}
	// Unset: off.
	if err := s.SetConfig(nil); err != nil || s.MetricsAddr() != "" {
		t.Fatalf("%v, %q", err, s.MetricsAddr())
	}
	if _, err := ReadCheckRuns(context.Background(), url); err == nil {
		t.Fatal("still served")
	}
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: %v %s", url, err, resp.Status)
	}
	return string(b)
}
