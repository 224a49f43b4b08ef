package gpuqueue

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/internal/metrics"
	"github.com/nomad-gpu/nomad-gpu/wire/autoscaler"
)

// MetricsPath is where the metrics are served on metrics_address.
const MetricsPath = "/metrics"

// maxLabel bounds a label value taken from a policy (pool, check, query).
const maxLabel = 200

// checkResults are the result label's values, in the order of runCounts.
var checkResults = [...]string{contract.CheckOK, contract.CheckRefused, contract.CheckError}

// checkKey is a check's series as contract.CheckLabels name it.
type checkKey struct{ pool, check, query string }

func newCheckKey(c autoscaler.Check) checkKey {
	return checkKey{pool: labelValue(strings.TrimSpace(c.Config[keyPool])), check: labelValue(c.Name), query: labelValue(c.Query)}
}

// labelValue is s as valid UTF-8 of at most maxLabel bytes.
func labelValue(s string) string {
	if len(s) > maxLabel {
		s = s[:maxLabel]
	}
	return strings.ToValidUTF8(s, "")
}

// runCounts are a check's runs by result (checkResults' order).
type runCounts struct {
	n       [len(checkResults)]uint64
	lastRun time.Time
}

// count adds a run of the check with the result.
func (s *Strategy) count(k checkKey, result string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.gc(now)
	c := s.checks[k]
	if c == nil {
		for len(s.checks) >= maxChecks {
			var oldest checkKey
			var at time.Time
			first := true
			for k, c := range s.checks {
				if first || c.lastRun.Before(at) {
					oldest, at, first = k, c.lastRun, false
				}
			}
			delete(s.checks, oldest)
		}
		c = &runCounts{}
		s.checks[k] = c
	}
	c.lastRun = now
	for i, r := range checkResults {
		if r == result {
			c.n[i]++
		}
	}
}

// runsCollector exports the run counts at scrape time; every check has a
// series of each result, from 0, so the first failure shows as a rise.
type runsCollector struct {
	s    *Strategy
	desc *prometheus.Desc
}

func newRunsCollector(s *Strategy) *runsCollector {
	return &runsCollector{s: s, desc: metrics.Descs(contract.StrategyMetrics())[contract.MetricStrategyCheckRuns]}
}

func (c *runsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *runsCollector) Collect(ch chan<- prometheus.Metric) {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	for k, r := range c.s.checks {
		for i, res := range checkResults {
			m, err := prometheus.NewConstMetric(c.desc, prometheus.CounterValue, float64(r.n[i]), k.pool, k.check, k.query, res)
			if err == nil {
				ch <- m
			}
		}
	}
}

// setMetricsAddress (s.cfgMu held) starts, moves or stops the exporter
// (metrics.Move).
func (s *Strategy) setMetricsAddress(addr string) error {
	mux := http.NewServeMux()
	mux.Handle(MetricsPath, promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{
		ErrorHandling:       promhttp.ContinueOnError,
		MaxRequestsInFlight: 2,
	}))
	var err error
	s.metrics, err = metrics.Move(s.metrics, addr, mux, s.logger)
	return err
}

// MetricsAddr is the address the metrics are served on, "" when off.
func (s *Strategy) MetricsAddr() string {
	s.cfgMu.Lock()
	defer s.cfgMu.Unlock()
	if s.metrics == nil {
		return ""
	}
	return s.metrics.Addr()
}

// Close stops serving the metrics; the agent kills the plugin process
// instead, so only tests and embedders need it.
func (s *Strategy) Close() {
	s.cfgMu.Lock()
	defer s.cfgMu.Unlock()
	if s.metrics != nil {
		s.metrics.Close()
		s.metrics = nil
	}
}

// CheckRuns are one check's runs by result, as gpu-queue's metrics
// endpoint serves them (contract.MetricStrategyCheckRuns): counts since the
// plugin process started.
type CheckRuns struct {
	Pool, Check, Query string
	OK, Refused, Error float64
}

// Failures are the runs that failed, refused or in error.
func (c CheckRuns) Failures() float64 { return c.Refused + c.Error }

// Failing says the check has failed and never returned an action since the
// plugin started: every evaluation of it fails. For a check that worked
// once, compare two reads: failures rising while OK stays is what the
// GPUScalingCheckFailing alert (jobs/monitoring/alerts.yml) fires on.
func (c CheckRuns) Failing() bool { return c.OK == 0 && c.Failures() > 0 }

// ReadCheckRuns reads every check's run counts from a gpu-queue metrics
// endpoint (url: "http://<metrics_address>/metrics"), sorted by pool, check
// and query. A test harness can ask it whether a running autoscaler's
// gpu-queue checks are failing.
func ReadCheckRuns(ctx context.Context, url string) ([]CheckRuns, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("%s: %s: %s", url, resp.Status, strings.TrimSpace(string(b)))
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", url, err)
	}
	return checkRunsOf(fams[contract.MetricStrategyCheckRuns]), nil
}

func checkRunsOf(f *dto.MetricFamily) []CheckRuns {
	if f == nil {
		return nil
	}
	byKey := map[checkKey]*CheckRuns{}
	for _, m := range f.GetMetric() {
		var k checkKey
		var result string
		for _, l := range m.GetLabel() {
			switch l.GetName() {
			case contract.LabelPool:
				k.pool = l.GetValue()
			case contract.LabelCheck:
				k.check = l.GetValue()
			case contract.LabelQuery:
				k.query = l.GetValue()
			case contract.LabelResult:
				result = l.GetValue()
			}
		}
		c := byKey[k]
		if c == nil {
			c = &CheckRuns{Pool: k.pool, Check: k.check, Query: k.query}
			byKey[k] = c
		}
		v := m.GetCounter().GetValue()
		switch result {
		case contract.CheckOK:
			c.OK += v
		case contract.CheckRefused:
			c.Refused += v
		case contract.CheckError:
			c.Error += v
		}
	}
	out := make([]CheckRuns, 0, len(byKey))
	for _, c := range byKey {
		out = append(out, *c)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Pool != b.Pool {
			return a.Pool < b.Pool
		}
		if a.Check != b.Check {
			return a.Check < b.Check
		}
		return a.Query < b.Query
	})
	return out
}
