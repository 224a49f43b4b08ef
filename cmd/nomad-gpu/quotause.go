package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclwrite"
	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	"github.com/zclconf/go-cty/cty"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/controller/queues"
)

// leaderOnly keeps the leader's series: a follower exports stale queue
// figures (jobs/monitoring/dashboard.json does the same).
const leaderOnly = " and on (instance) (" + contract.MetricControllerLeader + " == 1)"

// queueFigure is one figure of every queue, the leader's, by queue.
func queueFigure(figure string) string {
	return fmt.Sprintf("max by (%s) (%s{%s=%q}%s)", contract.LabelQueue,
		contract.MetricControllerQueueGPUs, contract.LabelQueueFigure, figure, leaderOnly)
}

// queueUseQueries are the instant queries of each queue's use over
// window, evaluated by Prometheus as subqueries at resolution.
func queueUseQueries(window time.Duration, quantile float64) map[string]string {
	// At most 10000 points a series, and no finer than the minute a
	// controller's figures change at most by (one admission a tick).
	res := max(time.Minute, (window / 10000).Truncate(time.Second))
	over := fmt.Sprintf("[%ds:%ds]", int64(window.Seconds()), int64(res.Seconds()))
	used := queueFigure("used")
	waiting := fmt.Sprintf("max by (%s) (%s%s)", contract.LabelQueue, contract.MetricControllerQueueWaiting, leaderOnly)
	return map[string]string{
		"mean":     "avg_over_time((" + used + ")" + over + ")",
		"quantile": fmt.Sprintf("quantile_over_time(%g, (%s)%s)", quantile, used, over),
		"max":      "max_over_time((" + used + ")" + over + ")",
		"starved": fmt.Sprintf("avg_over_time(((%s > bool 0) * (%s < bool %s))%s)",
			waiting, used, queueFigure("nominal"), over),
	}
}

// queueUse is each queue's use over the window before now, from the
// Prometheus at address; a queue with no series is missing. No series at
// all is an error: Prometheus does not scrape a leader controller.
func queueUse(ctx context.Context, address string, window time.Duration, quantile float64, now time.Time) (map[string]queues.Use, error) {
	c, err := api.NewClient(api.Config{Address: address})
	if err != nil {
		return nil, fmt.Errorf("-prometheus %q: %w", address, err)
	}
	papi := promv1.NewAPI(c)
	figures := map[string]map[string]float64{}
	for name, q := range queueUseQueries(window, quantile) {
		qctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		val, _, _, err := papi.Query(qctx, q, now)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("-prometheus %s: query %s: %w", address, q, err)
		}
		vec, ok := val.(model.Vector)
		if !ok {
			return nil, fmt.Errorf("-prometheus %s: query %s: got a %s, not a vector", address, q, val.Type())
		}
		figures[name] = map[string]float64{}
		for _, s := range vec {
			if v := float64(s.Value); !math.IsNaN(v) {
				figures[name][string(s.Metric[contract.LabelQueue])] = v
			}
		}
	}
	if len(figures["quantile"]) == 0 {
		return nil, fmt.Errorf("-prometheus %s: no %s{%s=\"used\"} of a leader (%s == 1) over the last %s: does it scrape the controller?",
			address, contract.MetricControllerQueueGPUs, contract.LabelQueueFigure, contract.MetricControllerLeader, model.Duration(window))
	}
	use := map[string]queues.Use{}
	for q, p := range figures["quantile"] {
		use[q] = queues.Use{Quantile: p, Mean: figures["mean"][q], Max: figures["max"][q], Starved: figures["starved"][q]}
	}
	return use, nil
}

// writeQuotas rewrites the queue file at path (src as read) with the
// recommended nominals and lowered lending limits, all else of it as
// written, checked by queues.Parse, and atomically: a temporary file in
// its directory with its mode, renamed over it.
func writeQuotas(path string, src []byte, recs []queues.Recommendation) error {
	f, diags := hclwrite.ParseConfig(src, path, hcl.InitialPos)
	if diags.HasErrors() {
		return fmt.Errorf("-write: %w", diags)
	}
	byName := map[string]queues.Recommendation{}
	for _, r := range recs {
		byName[r.Queue] = r
	}
	for _, b := range f.Body().Blocks() {
		r, ok := byName[firstLabel(b)]
		if b.Type() != "queue" || !ok {
			continue
		}
		if r.Change() != 0 {
			b.Body().SetAttributeValue("nominal", cty.NumberFloatVal(r.Recommended))
		}
		if r.LendingLowered && b.Body().GetAttribute("lending_limit") != nil {
			b.Body().SetAttributeValue("lending_limit", cty.NumberFloatVal(r.LendingLimit))
		}
	}
	out := f.Bytes()
	if _, err := queues.Parse(path, out); err != nil {
		return fmt.Errorf("-write: the rewritten file does not parse, %s is left as it was: %w", path, err)
	}
	return writeAtomic(path, out)
}

func firstLabel(b *hclwrite.Block) string {
	if l := b.Labels(); len(l) > 0 {
		return l[0]
	}
	return ""
}

// writeAtomic replaces path with data so that a reader (the controller
// at its start) sees the old file or the new one, never a part.
func writeAtomic(path string, data []byte) error {
	info, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("-write: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("-write: %w", err)
	}
	defer os.Remove(tmp.Name()) // after the rename there is nothing to remove
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("-write: %w", err)
	}
	if err := tmp.Chmod(info.Mode().Perm()); err != nil {
		tmp.Close()
		return fmt.Errorf("-write: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("-write: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("-write: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("-write: %w", err)
	}
	return nil
}
