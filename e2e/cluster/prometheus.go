package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	promapi "github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	"github.com/nomad-gpu/nomad-gpu/internal/testenv"
)

// PrometheusBinary returns the prometheus server to run ($PROMETHEUS_BINARY
// or prometheus on PATH: Debian's prometheus package); without one it skips
// the test with one line.
func PrometheusBinary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("PROMETHEUS_BINARY"); p != "" {
		return p
	}
	p, err := exec.LookPath("prometheus")
	if err != nil {
		testenv.Skip(t, testenv.Prometheus, "e2e: no prometheus binary (apt-get install prometheus, or set PROMETHEUS_BINARY)")
	}
	return p
}

// Prometheus is a real Prometheus server scraping the test's endpoints.
type Prometheus struct {
	*process
	URL string
	API promv1.API
}

// PrometheusOptions configures StartPrometheus.
type PrometheusOptions struct {
	// Targets are scrape jobs: job name → host:port addresses.
	Targets map[string][]string
	// Rules are rule files (name → YAML) loaded by the server.
	Rules map[string]string
	// Interval is the scrape and rule evaluation interval; 0: 1s.
	Interval time.Duration
}

// StartPrometheus starts a Prometheus server in the cluster dir and waits
// until it is ready. It is stopped with the cluster.
func (c *Cluster) StartPrometheus(t testing.TB, o PrometheusOptions) *Prometheus {
	t.Helper()
	bin := PrometheusBinary(t)
	port, err := freePort()
	if err != nil {
		t.Fatalf("e2e: %v", err)
	}
	dir := filepath.Join(c.dir, "prometheus")
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o755); err != nil {
		t.Fatalf("e2e: %v", err)
	}
	every := o.Interval
	if every == 0 {
		every = time.Second
	}
	var cfg strings.Builder
	fmt.Fprintf(&cfg, "global:\n  scrape_interval: %s\n  evaluation_interval: %s\n", every, every)
	if len(o.Rules) > 0 {
		cfg.WriteString("rule_files:\n")
		for name, body := range o.Rules {
			p := filepath.Join(dir, name)
			if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
				t.Fatalf("e2e: %v", err)
			}
			fmt.Fprintf(&cfg, "  - %q\n", p)
		}
	}
	cfg.WriteString("scrape_configs:\n")
	for job, addrs := range o.Targets {
		fmt.Fprintf(&cfg, "  - job_name: %q\n    static_configs:\n      - targets: [", job)
		for i, a := range addrs {
			if i > 0 {
				cfg.WriteString(", ")
			}
			fmt.Fprintf(&cfg, "%q", a)
		}
		cfg.WriteString("]\n")
	}
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg.String()), 0o644); err != nil {
		t.Fatalf("e2e: %v", err)
	}
	proc, err := c.startProcess("prometheus", dir, bin, "--config.file="+cfgPath, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		fmt.Sprintf("--web.listen-address=127.0.0.1:%d", port), "--web.enable-lifecycle")
	if err != nil {
		t.Fatalf("e2e: %v", err)
	}
	p := &Prometheus{URL: fmt.Sprintf("http://127.0.0.1:%d", port), process: proc}
	client, err := promapi.NewClient(promapi.Config{Address: p.URL})
	if err != nil {
		t.Fatalf("e2e: %v", err)
	}
	p.API = promv1.NewAPI(client)
	if err := proc.waitHTTP(p.URL+"/-/ready", agentServeTimeout); err != nil {
		t.Fatalf("e2e: %v", err)
	}
	return p
}

// Query evaluates expr now.
func (p *Prometheus) Query(t testing.TB, expr string) model.Vector {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v, _, _, err := p.API.Query(ctx, expr, time.Now())
	if err != nil {
		t.Fatalf("e2e: prometheus query %q: %v", expr, err)
	}
	vec, _ := v.(model.Vector)
	return vec
}

// AlertState is the state of the named alert ("inactive", "pending",
// "firing"), the most advanced of its instances whose device_id is device
// (any, when "").
func (p *Prometheus) AlertState(t testing.TB, name, device string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := p.API.Alerts(ctx)
	if err != nil {
		t.Fatalf("e2e: prometheus alerts: %v", err)
	}
	state := "inactive"
	for _, a := range res.Alerts {
		if string(a.Labels["alertname"]) != name || device != "" && string(a.Labels["device_id"]) != device {
			continue
		}
		switch a.State {
		case promv1.AlertStateFiring:
			state = "firing"
		case promv1.AlertStatePending:
			if state != "firing" {
				state = "pending"
			}
		}
	}
	return state
}
