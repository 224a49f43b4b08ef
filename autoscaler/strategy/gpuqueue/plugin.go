package gpuqueue

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/internal/metrics"
	"github.com/nomad-gpu/nomad-gpu/wire/autoscaler"
)

// PluginName is the plugin's name: the agent's `driver` and the binary's
// file name.
const PluginName = "gpu-queue"

// Bounds on the state one process keeps across evaluations.
const (
	// maxPools bounds the pools (one per pool name, or per lone check);
	// the least recently used goes first.
	maxPools = 4096
	// poolTTL drops a pool no check has run for this long (its policy
	// was removed, or its target has not been ready).
	poolTTL = time.Hour
	// gcEvery is how often idle pools are looked for.
	gcEvery = time.Minute
	// maxChecks bounds the checks whose run counts are kept (and
	// exported); a check no evaluation has run for poolTTL is dropped.
	maxChecks = 4096
)

var _ autoscaler.Strategy = (*Strategy)(nil)

// Strategy is the gpu-queue strategy plugin. It is safe for concurrent
// use: the agent runs the policies that name it in parallel.
type Strategy struct {
	logger hclog.Logger
	now    func() time.Time
	reg    *prometheus.Registry

	// cfgMu serialises SetConfig and guards the exporter.
	cfgMu   sync.Mutex
	metrics *metrics.Server // nil: metrics_address unset

	mu       sync.Mutex
	defaults rules
	pools    map[string]*pool
	checks   map[checkKey]*runCounts
	lastGC   time.Time
}

// New returns the strategy with the documented defaults; logger may be nil.
func New(logger hclog.Logger) *Strategy {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	s := &Strategy{logger: logger, now: time.Now, defaults: defaultRules, pools: map[string]*pool{},
		checks: map[checkKey]*runCounts{}, reg: prometheus.NewRegistry()}
	s.reg.MustRegister(newRunsCollector(s))
	return s
}

// SetConfig takes the plugin block's config: defaults for the rule keys of
// every check, and metrics_address. An unknown key or a bad value is an
// error naming the key; the agent's nomad_* keys are ignored. With
// metrics_address set, the check run counts are served there (see
// MetricsPath); a changed address moves the listener. On error, an
// address it cannot listen on included, the previous config stays.
func (s *Strategy) SetConfig(config map[string]string) error {
	c, err := parsePluginConfig(config)
	if err != nil {
		return err
	}
	s.cfgMu.Lock()
	defer s.cfgMu.Unlock()
	if err := s.setMetricsAddress(c.MetricsAddress); err != nil {
		return configError(keyMetricsAddress, "%q: %v", c.MetricsAddress, err)
	}
	s.mu.Lock()
	s.defaults = c.Defaults
	s.mu.Unlock()
	return nil
}

// Run decides a check's action from its metrics and the target's count.
// A bad strategy block is an error naming the key (the agent reports it
// as the check's error and handles it by on_error). The plugin logs it at
// error level, since the check fails on every evaluation until the policy
// is fixed, and counts it (contract.MetricStrategyCheckRuns, result
// refused).
func (s *Strategy) Run(check autoscaler.Check, metrics []autoscaler.Metric, count int64) (autoscaler.Action, error) {
	a, err := s.run(check, metrics, count)
	key := newCheckKey(check)
	if err != nil {
		result := contract.CheckError
		if keys, refused := refusedKeys(err); refused {
			result = contract.CheckRefused
			s.logger.Error("check refused: it fails on every evaluation until its policy is fixed",
				"check_name", check.Name, "pool", key.pool, "query", check.Query,
				"key", strings.Join(keys, ","), "error", err)
		} else {
			s.logger.Warn("check failed", "check_name", check.Name, "pool", key.pool, "query", check.Query, "error", err)
		}
		s.count(key, result)
		return autoscaler.Action{Count: count, Direction: autoscaler.DirectionNone, Error: true, Reason: err.Error()}, err
	}
	s.count(key, contract.CheckOK)
	s.logger.Trace("calculated scaling strategy results", "check_name", check.Name,
		"current_count", count, "new_count", a.Count, "direction", a.Direction.String(), "reason", a.Reason)
	return a, nil
}

func (s *Strategy) run(check autoscaler.Check, metrics []autoscaler.Metric, count int64) (autoscaler.Action, error) {
	cc, err := parseCheckConfig(check.Config)
	if err != nil {
		return autoscaler.Action{}, err
	}
	if count < 0 {
		return autoscaler.Action{}, fmt.Errorf("%s: check %q: current count %d is negative", PluginName, check.Name, count)
	}
	for _, m := range metrics {
		if math.IsNaN(m.Value) || math.IsInf(m.Value, 0) {
			return autoscaler.Action{}, fmt.Errorf("%s: check %q: metric value %v is not a number", PluginName, check.Name, m.Value)
		}
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.gc(now)

	key := poolKey(check, cc)
	p := s.pools[key]
	if p == nil {
		s.evictFor(1)
		p = newPool(cc.Pool)
		s.pools[key] = p
	}
	p.lastUsed = now
	m, err := p.join(check, cc, now)
	if err != nil {
		return autoscaler.Action{}, err
	}
	staleAfter := p.staleAfter()
	r, err := p.rules(s.defaults, now, staleAfter)
	if err != nil {
		return autoscaler.Action{}, err
	}

	p.observeCount(count, now, r.BootTime)
	pts := append([]autoscaler.Metric(nil), metrics...)
	sort.SliceStable(pts, func(i, j int) bool { return pts[i].Time.Before(pts[j].Time) })
	for _, pt := range pts {
		t := pt.Time
		if t.IsZero() || t.Unix() == 0 {
			t = now // a point without a timestamp is taken as now
		}
		// A nodes check tells joins exactly; without one, a fall of
		// nodes_needed is taken for capacity that joined.
		if fell := m.observe(t, pt.Value, r); fell > 0 && m.signal == SignalNodesNeeded && p.bySignal[SignalNodes] == nil {
			p.consume(fell)
		}
	}
	if len(metrics) == 0 {
		return autoscaler.Action{Count: count, Direction: autoscaler.DirectionNone,
			Reason: fmt.Sprintf("hold at %d: check %q got no metrics", count, check.Name)}, nil
	}
	if p.name != "" && p.maxRuns < 2 {
		return autoscaler.Action{Count: count, Direction: autoscaler.DirectionNone,
			Reason: fmt.Sprintf("hold at %d: %s is learning its checks (first evaluation)", count, p.label())}, nil
	}
	return p.decide(m, r, count, now, staleAfter), nil
}

// poolKey is a named pool's name, or for a check alone its name, source,
// query and strategy block (a process serves many policies, and check
// names repeat across them).
func poolKey(check autoscaler.Check, cc checkConfig) string {
	if cc.Pool != "" {
		return "pool\x00" + cc.Pool
	}
	var b strings.Builder
	b.WriteString("check\x00" + check.Name + "\x00" + check.Source + "\x00" + check.Query)
	for _, k := range sortedKeys(check.Config) {
		if !injected(k) {
			b.WriteString("\x00" + k + "=" + check.Config[k])
		}
	}
	return b.String()
}

// gc drops idle pools, idle members and idle checks' run counts, at
// most once a gcEvery.
func (s *Strategy) gc(now time.Time) {
	if now.Sub(s.lastGC) < gcEvery {
		return
	}
	s.lastGC = now
	for k, c := range s.checks {
		if now.Sub(c.lastRun) > poolTTL {
			delete(s.checks, k)
		}
	}
	for k, p := range s.pools {
		if now.Sub(p.lastUsed) > poolTTL {
			delete(s.pools, k)
			continue
		}
		for _, m := range p.members {
			if now.Sub(m.lastRun) > poolTTL {
				p.remove(m)
			}
		}
	}
}

// evictFor makes room for n more pools, dropping the least recently used.
func (s *Strategy) evictFor(n int) {
	for len(s.pools)+n > maxPools {
		var oldest string
		var at time.Time
		for k, p := range s.pools {
			if oldest == "" || p.lastUsed.Before(at) {
				oldest, at = k, p.lastUsed
			}
		}
		delete(s.pools, oldest)
	}
}
