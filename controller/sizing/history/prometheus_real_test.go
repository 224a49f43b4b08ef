package history

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nomad-gpu/nomad-gpu/internal/testenv"
)

// TestPrometheusReal backfills a Prometheus TSDB with promtool and queries a
// real prometheus server over it.
func TestPrometheusReal(t *testing.T) {
	promtool, err1 := exec.LookPath("promtool")
	prom, err2 := exec.LookPath("prometheus")
	switch {
	case testing.Short():
		t.Skip("-short: starts a prometheus server")
	case err1 != nil || err2 != nil:
		testenv.Skip(t, testenv.Prometheus, "no prometheus and promtool binaries on PATH (apt-get install prometheus)")
	}
	dir := t.TempDir()
	t0 := time.Now().Add(-time.Hour).Truncate(time.Minute).UTC()
	const gib = 1 << 30
	var om strings.Builder
	for _, m := range []struct {
		metric string
		vals   map[string]float64 // uuid -> value
	}{
		{MetricTaskGPUUtilization, map[string]float64{"MIG-1": 20, "MIG-2": 60}},
		{MetricTaskGPUMemoryUsed, map[string]float64{"MIG-1": 1 * gib, "MIG-2": 3 * gib}},
		{MetricTaskGPUMemoryLimit, map[string]float64{"MIG-1": 5 * gib, "MIG-2": 5 * gib}},
	} {
		fmt.Fprintf(&om, "# TYPE %s gauge\n", m.metric)
		for _, uuid := range []string{"MIG-1", "MIG-2"} {
			for i := 0; i < 4; i++ {
				fmt.Fprintf(&om, "%s{namespace=%q,job=%q,task_group=%q,task=%q,alloc_id=\"a1\",uuid=%q} %g %d\n",
					m.metric, keyA.Namespace, keyA.Job, keyA.Group, keyA.Task, uuid, m.vals[uuid], t0.Add(time.Duration(i)*30*time.Second).Unix())
			}
		}
	}
	om.WriteString("# EOF\n")
	data, tsdb := filepath.Join(dir, "data.om"), filepath.Join(dir, "tsdb")
	if err := os.WriteFile(data, []byte(om.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "tsdb", "create-blocks-from", "openmetrics", data, tsdb).CombinedOutput(); err != nil {
		t.Fatalf("promtool: %v\n%s", err, out)
	}
	cfg := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfg, []byte("global: {}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, prom, "--config.file="+cfg, "--storage.tsdb.path="+tsdb,
		"--web.listen-address="+addr, "--storage.tsdb.retention.time=10y")
	var logs strings.Builder
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); _ = cmd.Wait() }()
	url := "http://" + addr
	for {
		resp, err := http.Get(url + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("prometheus not ready: %v\n%s", err, logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	store := openTest(t, filepath.Join(dir, "h.db"), Options{})
	p, err := NewPrometheus(url, store, PromOptions{Step: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	got, err := p.Samples(ctx, keyA, t0, t0.Add(2*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 4 {
		t.Fatalf("got %d samples, want 4: %+v", len(got), got)
	}
	for i, s := range got {
		want := Sample{Key: keyA, AllocID: "a1", Time: t0.Add(time.Duration(i) * 30 * time.Second),
			Slice: Slice{Kind: SliceMIG, Count: 2}, UtilPct: 40, MemBytes: 4 * gib, MemLimitBytes: 10 * gib}
		if !s.Time.Equal(want.Time) {
			t.Errorf("sample %d time %v, want %v", i, s.Time, want.Time)
		}
		s.Time = want.Time
		if s != want {
			t.Errorf("sample %d = %+v, want %+v", i, s, want)
		}
	}
}
