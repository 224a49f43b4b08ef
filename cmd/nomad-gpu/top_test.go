package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/topview"
)

func TestParseTopFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		check   func(t *testing.T, o *topOptions)
		wantErr string
	}{
		{name: "defaults", check: func(t *testing.T, o *topOptions) {
			if o.interval != 2*time.Second || o.statsTimeout != topview.DefaultStatsTimeout || o.json || o.once ||
				o.filter.Pool != "" || o.filter.Nodes != nil || o.historyWindow != 24*time.Hour || o.width != 0 {
				t.Errorf("%+v", o)
			}
		}},
		{name: "history window", args: []string{"-history-window", "6h"}, check: func(t *testing.T, o *topOptions) {
			if o.historyWindow != 6*time.Hour {
				t.Errorf("history window %v", o.historyWindow)
			}
			r, err := o.source()
			if err != nil {
				t.Fatal(err)
			}
			defer r.Watcher.Close()
			if !r.History || r.Watcher.Config().FinishedWindow != 6*time.Hour {
				t.Errorf("source %+v, watcher %+v", r, r.Watcher.Config())
			}
		}},
		{name: "history off", args: []string{"-history-window", "0"}, check: func(t *testing.T, o *topOptions) {
			if o.historyWindow != 0 {
				t.Errorf("history window %v", o.historyWindow)
			}
		}},
		{name: "history window negative", args: []string{"-history-window", "-1h"}, wantErr: "-history-window -1h0m0s: must not be negative"},
		{name: "filters", args: []string{"-node-pool", "gpu", "-node", " a, b,,c "}, check: func(t *testing.T, o *topOptions) {
			if o.filter.Pool != "gpu" || !slices.Equal(o.filter.Nodes, []string{"a", "b", "c"}) {
				t.Errorf("%+v", o.filter)
			}
		}},
		{name: "connection", args: []string{"-address", "http://n:4646", "-token", "s", "-region", "eu", "-namespace", "ml"}, check: func(t *testing.T, o *topOptions) {
			if o.address != "http://n:4646" || o.token != "s" || o.region != "eu" || o.namespace != "ml" {
				t.Errorf("%+v", o)
			}
		}},
		{name: "width", args: []string{"-width", "120"}, check: func(t *testing.T, o *topOptions) {
			if o.width != 120 {
				t.Errorf("width %d", o.width)
			}
		}},
		{name: "width too narrow", args: []string{"-width", "69"}, wantErr: "-width 69: must be 0 (the terminal's width) or at least 70"},
		{name: "width negative", args: []string{"-width", "-1"}, wantErr: "-width -1: must be 0 (the terminal's width) or at least 70"},
		{name: "interval too short", args: []string{"-interval", "10ms"}, wantErr: "-interval 10ms: must be at least 100ms"},
		{name: "stats timeout", args: []string{"-stats-timeout", "0s"}, wantErr: "-stats-timeout 0s: must be positive"},
		{name: "stray argument", args: []string{"-json", "extra"}, wantErr: `unexpected argument "extra"`},
		{name: "unknown flag", args: []string{"-nope"}, wantErr: "flag provided but not defined: -nope"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o, err := parseTopFlags(tc.args, io.Discard)
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
	if _, err := parseTopFlags([]string{"-h"}, io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v", err)
	}
}

// topFakeNomad serves one GPU node, one allocation on it and no queue, and
// records the tokens it was sent.
type topFakeNomad struct {
	mu     sync.Mutex
	tokens []string
	ns     []string
	fail   atomic.Bool
}

func (f *topFakeNomad) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.tokens = append(f.tokens, r.Header.Get("X-Nomad-Token"))
	if ns := r.URL.Query().Get("namespace"); ns != "" {
		f.ns = append(f.ns, r.URL.Path+"="+ns)
	}
	f.mu.Unlock()
	if f.fail.Load() {
		http.Error(w, "no leader", 500)
		return
	}
	uuid := "GPU-aaaaaaaa-0000-0000-0000-000000000000"
	var v any
	switch r.URL.Path {
	case "/v1/nodes":
		v = []*api.NodeListStub{{
			ID: "11111111-0000", Name: "gpu-1", NodePool: "default", Status: "ready", SchedulingEligibility: "eligible",
			NodeResources: &api.NodeResources{Devices: []*api.NodeDeviceResource{{
				Vendor: "nvidia", Type: "gpu", Name: "NVIDIA H100 80GB HBM3",
				Instances: []*api.NodeDevice{{ID: uuid, Healthy: true}},
			}}},
		}}
	case "/v1/allocations":
		v = []*api.AllocationListStub{{
			ID: "a1b2c3d4-0000", Namespace: "default", JobID: "train", TaskGroup: "g", NodeID: "11111111-0000", ClientStatus: "running",
			AllocatedResources: &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{
				"t": {Devices: []*api.AllocatedDeviceResource{{Vendor: "nvidia", Type: "gpu", Name: "NVIDIA H100 80GB HBM3", DeviceIDs: []string{uuid}}}},
			}},
		}}
	case "/v1/evaluations":
		v = []*api.Evaluation{}
	case "/v1/jobs":
		v = []*api.JobListStub{}
	case "/v1/node/pools":
		v = []*api.NodePool{{Name: "all"}, {Name: "default"}, {Name: "empty"}}
	case "/v1/client/stats":
		u, idx, temp := 70.0, int64(3), int64(41)
		v = &api.HostStats{DeviceStats: []*api.DeviceGroupStats{{Vendor: "nvidia", Type: "gpu", Name: "NVIDIA H100 80GB HBM3",
			InstanceStats: map[string]*api.DeviceStats{uuid: {Stats: &api.StatObject{Attributes: map[string]*api.StatValue{
				"GPU utilization": {FloatNumeratorVal: &u, Unit: "%"},
				"GPU index":       {IntNumeratorVal: &idx},
				"Temperature":     {IntNumeratorVal: &temp, Unit: "C"},
			}}}}}}}
	default:
		http.NotFound(w, r)
		return
	}
	_ = json.NewEncoder(w).Encode(v)
}

func clearTopNomadEnv(t *testing.T) {
	for _, k := range []string{"NOMAD_ADDR", "NOMAD_TOKEN", "NOMAD_REGION", "NOMAD_NAMESPACE", "NOMAD_CACERT", "NOMAD_CLIENT_CERT", "NOMAD_CLIENT_KEY"} {
		t.Setenv(k, "")
	}
}

func TestTopJSON(t *testing.T) {
	clearTopNomadEnv(t)
	f := &topFakeNomad{}
	srv := httptest.NewServer(f)
	defer srv.Close()

	tests := []struct {
		name      string
		env       map[string]string
		args      []string
		wantToken string
		wantNS    string
	}{
		{"flags", nil, []string{"-address", srv.URL, "-token", "flag-token"}, "flag-token", "*"},
		{"environment", map[string]string{"NOMAD_ADDR": srv.URL, "NOMAD_TOKEN": "env-token", "NOMAD_NAMESPACE": "ml"}, nil, "env-token", "ml"},
		{"flags beat the environment", map[string]string{"NOMAD_ADDR": "http://127.0.0.1:1", "NOMAD_TOKEN": "env-token"},
			[]string{"-address", srv.URL, "-token", "flag-token", "-namespace", "prod"}, "flag-token", "prod"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			f.mu.Lock()
			f.tokens, f.ns = nil, nil
			f.mu.Unlock()
			var out, errOut strings.Builder
			if rc := run(append([]string{"top", "-json"}, tc.args...), &out, &errOut); rc != 0 {
				t.Fatalf("rc %d: %s", rc, errOut.String())
			}
			var v topview.View
			if err := json.Unmarshal([]byte(out.String()), &v); err != nil {
				t.Fatalf("%v\n%s", err, out.String())
			}
			if len(v.Nodes) != 1 || len(v.Nodes[0].GPUs) != 1 {
				t.Fatalf("view %s", out.String())
			}
			g := v.Nodes[0].GPUs[0]
			if len(g.Allocations) != 1 || g.Allocations[0].Job != "train" || g.UtilizationPct == nil || *g.UtilizationPct != 70 {
				t.Errorf("GPU %+v", g)
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			for _, tok := range f.tokens {
				if tok != tc.wantToken {
					t.Errorf("token %q sent, want %q", tok, tc.wantToken)
				}
			}
			if !slices.Contains(f.ns, "/v1/allocations="+tc.wantNS) || !slices.Contains(f.ns, "/v1/evaluations="+tc.wantNS) {
				t.Errorf("namespaces asked %v, want %s", f.ns, tc.wantNS)
			}
		})
	}
}

func TestTopOnceAndErrors(t *testing.T) {
	clearTopNomadEnv(t)
	f := &topFakeNomad{}
	srv := httptest.NewServer(f)
	defer srv.Close()

	var out, errOut strings.Builder
	if rc := run([]string{"top", "-once", "-address", srv.URL}, &out, &errOut); rc != 0 {
		t.Fatalf("rc %d: %s", rc, errOut.String())
	}
	for _, want := range []string{"NODE gpu-1", "  3    GPU-aaaaaaaa", "70%", "41C", "  3    -       train/g/t  a1b2c3d4", "QUEUE  no GPU work waiting"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("frame lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "\x1b[") {
		t.Error("-once frame has ANSI escapes")
	}

	tests := []struct {
		name           string
		args           []string
		rc             int
		stderr, stdout string
	}{
		{"unreachable", []string{"top", "-json", "-address", "http://127.0.0.1:1"}, 1, "nomad-gpu top: list nodes:", ""},
		{"bad flag", []string{"top", "-interval", "1ms"}, 2, "nomad-gpu top: -interval 1ms", ""},
		{"help", []string{"top", "-h"}, 0, "usage: nomad-gpu top [flags]", ""},
		{"no such pool", []string{"top", "-once", "-address", srv.URL, "-node-pool", "nosuchpool"}, 2,
			`nomad-gpu top: -node-pool "nosuchpool": no such node pool; the node pools are all, default, empty` + "\n", ""},
		{"no such pool, JSON", []string{"top", "-json", "-address", srv.URL, "-node-pool", "nosuchpool"}, 2, `-node-pool "nosuchpool": no such node pool`, ""},
		{"no such pool, watching", []string{"top", "-address", srv.URL, "-node-pool", "nosuchpool"}, 2, `-node-pool "nosuchpool": no such node pool`, ""},
		{"a pool without GPU nodes", []string{"top", "-once", "-address", srv.URL, "-node-pool", "empty"}, 0, "", "no GPU nodes"},
		{"no such node", []string{"top", "-once", "-address", srv.URL, "-node", "gpu-1,gpu-9"}, 2,
			`nomad-gpu top: -node: no node is named or has an ID starting "gpu-9"` + "\n", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut strings.Builder
			if rc := run(tc.args, &out, &errOut); rc != tc.rc || !strings.Contains(errOut.String(), tc.stderr) {
				t.Errorf("rc %d, stderr %q; want %d, %q", rc, errOut.String(), tc.rc, tc.stderr)
			}
			if !strings.Contains(out.String(), tc.stdout) || (tc.rc != 0 && out.Len() > 0) {
				t.Errorf("stdout %q, want %q", out.String(), tc.stdout)
			}
		})
	}
}

// topSyncBuffer is a writer the watch loop and the test share.
type topSyncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *topSyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *topSyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestWatchRedrawsAndSurvivesErrors(t *testing.T) {
	clearTopNomadEnv(t)
	f := &topFakeNomad{}
	srv := httptest.NewServer(f)
	defer srv.Close()
	o, err := parseTopFlags([]string{"-address", srv.URL, "-interval", "100ms"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	r, err := o.source()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Watcher.Close()
	ctx, cancel := context.WithCancel(context.Background())
	var out topSyncBuffer
	done := make(chan int)
	go func() { done <- top(ctx, o, r, topScreen{out: &out}, io.Discard) }()

	waitFor := func(what string, cond func(string) bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !cond(out.String()) {
			if time.Now().After(deadline) {
				t.Fatalf("no %s in\n%q", what, out.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitFor("two frames", func(s string) bool { return strings.Count(s, ansiClear+"nomad-gpu top") >= 2 })
	f.fail.Store(true)
	waitFor("an error frame", func(s string) bool { return strings.Contains(s, "error: list nodes:") })
	f.fail.Store(false)
	n := strings.Count(out.String(), ansiClear)
	waitFor("recovery", func(s string) bool {
		return strings.Count(s, ansiClear) > n+1 && strings.HasSuffix(strings.TrimRight(s[strings.LastIndex(s, ansiClear):], "\n"), "Ctrl-C quits") &&
			strings.Contains(s[strings.LastIndex(s, ansiClear):], "NODE gpu-1")
	})
	cancel()
	select {
	case rc := <-done:
		if rc != 0 {
			t.Errorf("rc %d after interrupt", rc)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("watch did not stop on interrupt")
	}
	if !strings.Contains(out.String(), "refresh every 100ms; Ctrl-C quits") {
		t.Errorf("no footer")
	}
}

// Not a terminal: 80 columns or -width, no keys, stdin left alone.
func TestOpenScreenWithoutTerminal(t *testing.T) {
	stdin, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	defer w.Close()
	tests := []struct {
		args  []string
		width int
	}{
		{nil, 80},
		{[]string{"-width", "132"}, 132},
		{[]string{"-once"}, 80},
	}
	for _, tc := range tests {
		o, err := parseTopFlags(tc.args, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		var out strings.Builder
		scr, restore, err := openScreen(o, stdin, &out)
		if err != nil {
			t.Fatal(err)
		}
		restore()
		if scr.lineWidth() != tc.width || scr.keys != nil || scr.out != io.Writer(&out) {
			t.Errorf("%v: width %d, keys %v, out %T; want %d, none, the writer", tc.args, scr.lineWidth(), scr.keys, scr.out, tc.width)
		}
	}
}

func TestCRLFWriter(t *testing.T) {
	var b strings.Builder
	n, err := crlfWriter{&b}.Write([]byte("a\nb\n\nc"))
	if n != 6 || err != nil || b.String() != "a\r\nb\r\n\r\nc" {
		t.Errorf("wrote %d, %v: %q", n, err, b.String())
	}
}

// Keys redraw the last frame at once, sorted or filtered, and q quits;
// the footer names the keys.
func TestWatchKeys(t *testing.T) {
	clearTopNomadEnv(t)
	f := &topFakeNomad{}
	srv := httptest.NewServer(f)
	defer srv.Close()
	o, err := parseTopFlags([]string{"-address", srv.URL, "-interval", "1h"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	r, err := o.source()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Watcher.Close()
	keys := make(chan []byte)
	var out topSyncBuffer
	done := make(chan int)
	go func() { done <- top(context.Background(), o, r, topScreen{out: &out, keys: keys}, io.Discard) }()
	frames := func() int { return strings.Count(out.String(), ansiClear) }
	waitFrames := func(n int) string {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for frames() < n {
			if time.Now().After(deadline) {
				t.Fatalf("%d frames, want %d:\n%s", frames(), n, out.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
		s := out.String()
		return s[strings.LastIndex(s, ansiClear):]
	}
	if last := waitFrames(1); !strings.HasSuffix(last, "\n[n]ode [u]til [m]em [w]ait: node  / filter  q quit\n") {
		t.Errorf("first frame's footer:\n%s", last)
	}
	steps := []struct {
		keys string
		want []string // in the frame drawn
	}{
		{"u", []string{"[w]ait: util"}},
		{"/tra", []string{`filter "tra"`, "train/g/t", "filter: tra_   Enter keeps it, Esc clears it"}},
		{"\r", []string{`filter "tra"`, "Esc unfilter"}},
		{"/x\r", []string{`filter "trax"`, "no GPU nodes"}},
		{"\x1b", []string{"NODE gpu-1", "[w]ait: util  / filter  q quit"}},
	}
	n := 1
	for _, st := range steps {
		keys <- []byte(st.keys)
		n++
		last := waitFrames(n)
		for _, w := range st.want {
			if !strings.Contains(last, w) {
				t.Errorf("after %q: no %q in\n%s", st.keys, w, last)
			}
		}
		n = frames()
	}
	keys <- []byte("q")
	select {
	case rc := <-done:
		if rc != 0 {
			t.Errorf("rc %d after q", rc)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("q did not quit")
	}
}

// A panic reading a frame reaches the goroutine that runs top, so that
// runTop's deferred restore of the terminal runs.
func TestWatchPanicReachesTheCaller(t *testing.T) {
	o, err := parseTopFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		p := recover()
		if s, _ := p.(string); !strings.Contains(s, "nil pointer") || !strings.Contains(s, "readFrames") {
			t.Errorf("recovered %v, want the reader's nil pointer panic with its stack", p)
		}
	}()
	top(context.Background(), o, &topview.Source{}, topScreen{out: io.Discard}, io.Discard)
	t.Error("no panic")
}
