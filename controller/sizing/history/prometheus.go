package history

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
)

// The task metrics Prometheus reads, as contract/metrics.go names them, and
// their labels.
const (
	MetricTaskGPUUtilization = "nomad_gpu_task_gpu_utilization_percent"
	MetricTaskGPUMemoryUsed  = "nomad_gpu_task_gpu_memory_used_bytes"
	MetricTaskGPUMemoryLimit = "nomad_gpu_task_gpu_memory_limit_bytes"

	labelNamespace = "namespace"
	labelJob       = "job"
	labelTaskGroup = "task_group"
	labelTask      = "task"
	labelAllocID   = "alloc_id"
	labelUUID      = "uuid"
)

// Defaults for PromOptions.
const (
	DefaultPromStep          = 30 * time.Second
	DefaultPromTimeout       = 30 * time.Second
	DefaultPromMaxPoints     = 10000
	prometheusMaxPointsLimit = 11000 // what a Prometheus server refuses beyond
)

// PromOptions configure a Prometheus source; zero fields take the defaults.
type PromOptions struct {
	// Step is the query resolution: the sizer's sample interval.
	Step time.Duration
	// Timeout bounds each HTTP query.
	Timeout time.Duration
	// MaxPointsPerQuery bounds the steps of one query_range; longer ranges
	// are split (Prometheus refuses more than 11000 points a series).
	MaxPointsPerQuery int
	// Client makes the HTTP requests; http.DefaultClient's transport when nil.
	Client *http.Client
}

// Prometheus is a Source that reads samples from a Prometheus server and
// runs from a RunSource (a Store), since Prometheus has no run records.
type Prometheus struct {
	api  promv1.API
	runs RunSource
	opts PromOptions
}

var _ Source = (*Prometheus)(nil)

// NewPrometheus returns a Source reading samples from the Prometheus server
// at address (e.g. "http://127.0.0.1:9090") and runs from runs.
func NewPrometheus(address string, runs RunSource, opts PromOptions) (*Prometheus, error) {
	if runs == nil {
		return nil, fmt.Errorf("history: Prometheus source at %s needs a run store", address)
	}
	if opts.Step <= 0 {
		opts.Step = DefaultPromStep
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultPromTimeout
	}
	if opts.MaxPointsPerQuery <= 0 || opts.MaxPointsPerQuery > prometheusMaxPointsLimit {
		opts.MaxPointsPerQuery = DefaultPromMaxPoints
	}
	cfg := api.Config{Address: address}
	if opts.Client != nil {
		cfg.Client = opts.Client
	}
	c, err := api.NewClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("history: Prometheus address %q: %w", address, err)
	}
	return &Prometheus{api: promv1.NewAPI(c), runs: runs, opts: opts}, nil
}

// WithRuns is p reading its runs from runs: a sizer that keeps no file
// gives it, each round, the runs Nomad still remembers.
func (p *Prometheus) WithRuns(runs RunSource) *Prometheus {
	c := *p
	c.runs = runs
	return &c
}

// Runs reads the run store.
func (p *Prometheus) Runs(ctx context.Context, k Key, since time.Time) ([]Run, error) {
	return p.runs.Runs(ctx, k, since)
}

// AllRuns reads the run store.
func (p *Prometheus) AllRuns(ctx context.Context, since time.Time) ([]Run, error) {
	return p.runs.AllRuns(ctx, since)
}

// selector matches k's series of metric.
func selector(metric string, k Key) string {
	return fmt.Sprintf("%s{%s=%q,%s=%q,%s=%q,%s=%q}", metric,
		labelNamespace, k.Namespace, labelJob, k.Job, labelTaskGroup, k.Group, labelTask, k.Task)
}

// series is one device's values of one allocation: (alloc_id, uuid).
type series struct{ alloc, uuid string }

// points are one metric's values by series and time (Unix milliseconds).
type points map[series]map[int64]float64

// Samples queries k's utilisation and memory at Step resolution over
// [since, until) (until now when zero) and makes one sample per allocation
// and step where both utilisation and memory used were reported: the
// utilisation averaged over the allocation's devices (uuid), the memory and
// its limit summed over them. The slice is the allocation's run record's
// when the run store has one; otherwise it is derived from the devices:
// MIG when they are MIG- UUIDs, else whole GPUs, counted.
func (p *Prometheus) Samples(ctx context.Context, k Key, since, until time.Time) ([]Sample, error) {
	if until.IsZero() {
		until = time.Now()
	}
	if !since.Before(until) {
		return nil, nil
	}
	util, err := p.queryRange(ctx, selector(MetricTaskGPUUtilization, k), since, until)
	if err != nil {
		return nil, err
	}
	used, err := p.queryRange(ctx, selector(MetricTaskGPUMemoryUsed, k), since, until)
	if err != nil {
		return nil, err
	}
	limit, err := p.queryRange(ctx, selector(MetricTaskGPUMemoryLimit, k), since, until)
	if err != nil {
		return nil, err
	}
	slices := map[string]Slice{}
	runs, err := p.runs.Runs(ctx, k, since)
	if err != nil {
		return nil, err
	}
	for _, r := range runs {
		if r.Slice.Kind != "" {
			slices[r.AllocID] = r.Slice
		}
	}
	devices := map[string]map[string]bool{} // alloc -> uuids
	type at struct {
		alloc string
		ms    int64
	}
	type acc struct {
		utilSum        float64
		utilN          int
		mem, lim       float64
		hasMem, hasLim bool
	}
	accs := map[at]*acc{}
	get := func(a at) *acc {
		if accs[a] == nil {
			accs[a] = &acc{}
		}
		return accs[a]
	}
	add := func(pts points, f func(*acc, float64)) {
		for s, byTime := range pts {
			if devices[s.alloc] == nil {
				devices[s.alloc] = map[string]bool{}
			}
			if s.uuid != "" {
				devices[s.alloc][s.uuid] = true
			}
			for ms, v := range byTime {
				f(get(at{s.alloc, ms}), v)
			}
		}
	}
	add(util, func(a *acc, v float64) { a.utilSum += v; a.utilN++ })
	add(used, func(a *acc, v float64) { a.mem += v; a.hasMem = true })
	add(limit, func(a *acc, v float64) { a.lim += v; a.hasLim = true })

	var out []Sample
	for a, v := range accs {
		if v.utilN == 0 || !v.hasMem {
			continue
		}
		t := time.UnixMilli(a.ms).UTC()
		if t.Before(since) || !t.Before(until) {
			continue
		}
		sl, ok := slices[a.alloc]
		if !ok {
			sl = deriveSlice(devices[a.alloc])
		}
		sm := Sample{
			Key: k, AllocID: a.alloc, Time: t, Slice: sl,
			UtilPct:  v.utilSum / float64(v.utilN),
			MemBytes: toBytes(v.mem),
		}
		if v.hasLim {
			sm.MemLimitBytes = toBytes(v.lim)
		}
		out = append(out, sm)
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Time.Equal(out[j].Time) {
			return out[i].Time.Before(out[j].Time)
		}
		return out[i].AllocID < out[j].AllocID
	})
	return out, nil
}

func toBytes(v float64) uint64 {
	if v <= 0 {
		return 0
	}
	return uint64(v + 0.5)
}

func deriveSlice(uuids map[string]bool) Slice {
	sl := Slice{Kind: SliceGPU, Count: len(uuids)}
	for u := range uuids {
		if strings.HasPrefix(u, "MIG-") {
			sl.Kind = SliceMIG
			break
		}
	}
	return sl
}

// queryRange runs query over [since, until] at Step, in pieces of at most
// MaxPointsPerQuery steps, and returns its values by (alloc_id, uuid).
// Series that differ in other labels (a re-scraped exporter, say) are
// merged, the larger value kept.
func (p *Prometheus) queryRange(ctx context.Context, query string, since, until time.Time) (points, error) {
	out := points{}
	span := p.opts.Step * time.Duration(p.opts.MaxPointsPerQuery-1)
	for start := since; !start.After(until); start = start.Add(span + p.opts.Step) {
		end := start.Add(span)
		if end.After(until) {
			end = until
		}
		qctx, cancel := context.WithTimeout(ctx, p.opts.Timeout)
		val, _, _, err := p.api.QueryRange(qctx, query, promv1.Range{Start: start, End: end, Step: p.opts.Step})
		cancel()
		if err != nil {
			return nil, fmt.Errorf("history: Prometheus query_range %s over %s..%s: %w",
				query, start.Format(time.RFC3339), end.Format(time.RFC3339), err)
		}
		m, ok := val.(model.Matrix)
		if !ok {
			return nil, fmt.Errorf("history: Prometheus query_range %s: got a %s, not a matrix", query, val.Type())
		}
		for _, ss := range m {
			s := series{alloc: string(ss.Metric[labelAllocID]), uuid: string(ss.Metric[labelUUID])}
			if s.alloc == "" {
				continue
			}
			if out[s] == nil {
				out[s] = map[int64]float64{}
			}
			for _, sp := range ss.Values {
				if math.IsNaN(float64(sp.Value)) {
					continue
				}
				ms := int64(sp.Timestamp)
				if v, seen := out[s][ms]; !seen || float64(sp.Value) > v {
					out[s][ms] = float64(sp.Value)
				}
			}
		}
	}
	return out, nil
}
