package cluster

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	promdto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	promodel "github.com/prometheus/common/model"
)

// Controller is a `nomad-gpu controller` replica of the cluster.
type Controller struct {
	*process
	// MetricsURL is its /metrics.
	MetricsURL string
}

// Name is the replica's name, its log's too.
func (p *Controller) Name() string { return p.name }

// Log is everything the replica has logged so far.
func (p *Controller) Log() string {
	b, _ := os.ReadFile(p.logPath)
	return string(b)
}

// Kill ends the replica at once (SIGKILL), as a crash would, and waits
// for it.
func (p *Controller) Kill() { p.stop() }

// Stop ends the replica as Nomad stops a task (SIGTERM: it lets go of its
// lock and files) and waits for it, killing it after 15 s.
func (p *Controller) Stop() {
	if p.cmd != nil && p.cmd.Process != nil {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
			return
		case <-time.After(15 * time.Second):
		}
	}
	p.stop()
}

// StartController starts a `nomad-gpu controller` replica named name
// against the cluster's server, with its metrics on a port of its own and
// debug logging, args added to its flags, and waits until it serves its
// metrics. It is stopped with the cluster, and its log's tail is printed
// when the test failed.
func (c *Cluster) StartController(t testing.TB, name string, args ...string) *Controller {
	t.Helper()
	bin := RequireBinary(t, "nomad-gpu")
	port, err := freePort()
	if err != nil {
		t.Fatalf("e2e: %v", err)
	}
	dir := filepath.Join(c.dir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("e2e: %v", err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	argv := append([]string{bin, "controller", "-address", c.server.HTTPAddr(), "-metrics-address", addr, "-log-level", "debug"}, args...)
	proc, err := c.startProcess(name, dir, argv...)
	if err != nil {
		t.Fatalf("e2e: %v", err)
	}
	p := &Controller{process: proc, MetricsURL: "http://" + addr + "/metrics"}
	if err := proc.waitHTTP(p.MetricsURL, agentServeTimeout); err != nil {
		t.Fatalf("e2e: %v", err)
	}
	return p
}

// Metric is the value of an unlabelled series (or the sum over labels) of
// the replica's metrics; -1 when it has none.
func (p *Controller) Metric(t testing.TB, name string) float64 {
	t.Helper()
	v, ok := p.TryMetric(name)
	if !ok {
		t.Fatalf("%s: no metrics at %s", p.Name(), p.MetricsURL)
	}
	return v
}

// TryMetric is Metric, false when the metrics cannot be read. It needs
// MetricsURL alone: a Controller{MetricsURL: ...} reads a replica this
// cluster did not start (one Nomad runs as a job).
func (p *Controller) TryMetric(name string) (float64, bool) {
	resp, err := http.Get(p.MetricsURL)
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	sum, found := 0.0, false
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 1<<20))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+" ") && !strings.HasPrefix(line, name+"{") {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err == nil {
			sum, found = sum+v, true
		}
	}
	if !found {
		return -1, true
	}
	return sum, true
}

// families are the replica's metrics, parsed.
func (p *Controller) families(t testing.TB) map[string]*promdto.MetricFamily {
	t.Helper()
	resp, err := http.Get(p.MetricsURL)
	if err != nil {
		t.Fatalf("%s metrics: %v", p.Name(), err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(promodel.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("%s metrics: %v", p.Name(), err)
	}
	return families
}

// Histogram is the replica's unlabelled histogram name; nil if it has none.
func (p *Controller) Histogram(t testing.TB, name string) *promdto.Histogram {
	t.Helper()
	if f := p.families(t)[name]; f != nil && len(f.Metric) > 0 {
		return f.Metric[0].GetHistogram()
	}
	return nil
}

// MetricByLabel is the replica's series of a counter or gauge, summed by
// the value of one label.
func (p *Controller) MetricByLabel(t testing.TB, name, label string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	if f := p.families(t)[name]; f != nil {
		for _, m := range f.Metric {
			key := ""
			for _, l := range m.Label {
				if l.GetName() == label {
					key = l.GetValue()
				}
			}
			out[key] += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return out
}

// Command is a `nomad-gpu` command other than the controller that the
// test runs as a process of the cluster (reclaim-watch, standing for the
// system job that runs it on each spot node).
type Command struct{ *process }

// Log is everything the command has logged so far.
func (p *Command) Log() string {
	b, _ := os.ReadFile(p.logPath)
	return string(b)
}

// StartCommand starts `nomad-gpu <sub> -address <server> args...` named
// name; it is stopped with the cluster, and its log's tail is printed
// when the test failed.
func (c *Cluster) StartCommand(t testing.TB, name, sub string, args ...string) *Command {
	t.Helper()
	bin := RequireBinary(t, "nomad-gpu")
	dir := filepath.Join(c.dir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("e2e: %v", err)
	}
	proc, err := c.startProcess(name, dir, append([]string{bin, sub, "-address", c.server.HTTPAddr()}, args...)...)
	if err != nil {
		t.Fatalf("e2e: %v", err)
	}
	return &Command{process: proc}
}
