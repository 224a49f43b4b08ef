package sizing

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/sizing/history"
)

// Sizer is one sizer: each Step records what the cluster's GPU tasks use
// and how their runs ended, then sizes the jobs that hold GPUs and resizes
// those the policy lets it.
type Sizer struct {
	Nomad      *api.Client
	Store      *history.Store // run records, and samples unless Samples is set
	Samples    history.Source // where samples are read from (Prometheus); nil: Store
	Window     time.Duration  // how far back Recommend reads
	Thresholds Thresholds
	Logger     hclog.Logger
	// Deadlines is how job deadlines are served; nil: DefaultDeadlines.
	Deadlines *DeadlineConfig
	// Forecast predicts queued jobs' waits and run times for deadlines;
	// nil: not predicted, and DeadlineConfig.Lead stands in.
	Forecast func(ctx context.Context, now time.Time) (Forecasts, error)

	// held is the last recommendation logged per task that was not
	// applied, so that one repeated every round is logged once.
	held map[history.Key]string
}

// logHeld logs a recommendation that is not applied: at info when the
// recommended slice or the reason it is held changed, else at debug.
func (s *Sizer) logHeld(r TaskResult) {
	if s.held == nil {
		s.held = map[history.Key]string{}
	}
	line := describe(r.Recommendation.Recommended) + "|" + r.Decision.Rule
	log := s.Logger.Debug
	if s.held[r.Key] != line {
		s.held[r.Key], log = line, s.Logger.Info
	}
	log("recommendation", "task", r.Key.String(), "summary", r.Recommendation.Summary(), "held", r.Decision.Hold)
}

// Resized is one resize a Step made.
type Resized struct {
	Key      history.Key
	From, To history.Slice
	Reason   string
}

// StepReport says what one Step did.
type StepReport struct {
	Samples   int
	Runs      int
	Results   []TaskResult
	Resized   []Resized
	Deadlines []DeadlineChange
}

// Step runs one round at now.
func (s *Sizer) Step(ctx context.Context, now time.Time) (StepReport, error) {
	var rep StepReport
	q := (&api.QueryOptions{Namespace: "*", Params: map[string]string{"resources": "true"}}).WithContext(ctx)
	allocs, _, err := s.Nomad.Allocations().List(q)
	if err != nil {
		return rep, fmt.Errorf("list allocations: %w", err)
	}
	nodes, _, err := s.Nomad.Nodes().List((&api.QueryOptions{Params: map[string]string{"resources": "true"}}).WithContext(ctx))
	if err != nil {
		return rep, fmt.Errorf("list nodes: %w", err)
	}
	// meta=true: the list carries job meta, where deadlines are.
	jobList, _, err := s.Nomad.Jobs().List((&api.QueryOptions{Namespace: "*", Params: map[string]string{"meta": "true"}}).WithContext(ctx))
	if err != nil {
		return rep, fmt.Errorf("list jobs: %w", err)
	}
	priority := map[[2]string]int{}
	for _, j := range jobList {
		priority[[2]string{j.Namespace, j.ID}] = j.Priority
	}
	pools := map[string]string{}
	for _, n := range nodes {
		pools[n.ID] = n.NodePool
	}
	byID := map[string]*api.AllocationListStub{}
	for _, a := range allocs {
		byID[a.ID] = a
	}
	started := map[[2]string]bool{}
	for _, a := range allocs {
		if a.ClientStatus == api.AllocClientStatusRunning || a.ClientStatus == api.AllocClientStatusComplete {
			started[[2]string{a.Namespace, a.JobID}] = true
		}
	}
	if rep.Deadlines, err = s.stepDeadlines(ctx, jobList, started, s.queuedWaits(ctx, now), now); err != nil {
		return rep, err
	}
	tasks := GPUTasks(allocs)
	var running []TaskDevices
	stats := map[string][]*api.DeviceGroupStats{}
	jobs := map[[2]string]bool{}
	var runs []history.Run
	for _, t := range tasks {
		a := byID[t.AllocID]
		runs = append(runs, RunOf(a, t, pools[t.NodeID], priority[[2]string{a.Namespace, a.JobID}]))
		if a.ClientStatus != api.AllocClientStatusRunning {
			continue
		}
		running = append(running, t)
		jobs[[2]string{a.Namespace, a.JobID}] = true
		if _, ok := stats[t.NodeID]; !ok {
			hs, err := s.Nomad.Nodes().Stats(t.NodeID, (&api.QueryOptions{}).WithContext(ctx))
			if err != nil {
				s.Logger.Warn("no device stats of a node holding GPU tasks; its tasks get no sample this round", "node_id", t.NodeID, "error", err)
			}
			if hs != nil {
				stats[t.NodeID] = hs.DeviceStats
			} else {
				stats[t.NodeID] = nil
			}
		}
	}
	for _, r := range runs {
		if err := s.Store.PutRun(ctx, r); err != nil {
			return rep, err
		}
	}
	rep.Runs = len(runs)
	if s.Samples == nil {
		samples := SampleTasks(running, stats, now)
		if err := s.Store.AddSamples(ctx, samples); err != nil {
			return rep, err
		}
		rep.Samples = len(samples)
	}
	src := s.Samples
	if src == nil {
		src = s.Store
	}
	keys := make([][2]string, 0, len(jobs))
	for k := range jobs {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i][0]+"/"+keys[i][1] < keys[j][0]+"/"+keys[j][1] })
	for _, k := range keys {
		wq := (&api.QueryOptions{Namespace: k[0]}).WithContext(ctx)
		job, _, err := s.Nomad.Jobs().Info(k[1], wq)
		if err != nil {
			s.Logger.Warn("cannot read a job holding GPUs", "namespace", k[0], "job", k[1], "error", err)
			continue
		}
		res, err := SizeJob(ctx, job, src, nodes, s.Window, s.Thresholds, false, now)
		if err != nil {
			return rep, err
		}
		rep.Results = append(rep.Results, res...)
		changed := false
		var resized []Resized
		for _, r := range res {
			if r.Err != nil {
				s.Logger.Warn("cannot size a task", "task", r.Key.String(), "error", r.Err)
				continue
			}
			if !r.Decision.Apply {
				if r.Recommendation.Change != Keep {
					s.logHeld(r)
				}
				continue
			}
			rec := r.Recommendation
			if err := Resize(job, r.Key.Group, r.Key.Task, rec.Recommended, rec.Reason, now); err != nil {
				return rep, err
			}
			changed = true
			resized = append(resized, Resized{Key: r.Key, From: rec.Current, To: rec.Recommended, Reason: rec.Summary()})
		}
		if !changed {
			continue
		}
		// EnforceIndex: a job changed since it was read is not overwritten;
		// the next round reads it again.
		if _, _, err := s.Nomad.Jobs().EnforceRegister(job, *job.JobModifyIndex, (&api.WriteOptions{Namespace: k[0]}).WithContext(ctx)); err != nil {
			s.Logger.Warn("resize not registered; the next round tries again", "namespace", k[0], "job", k[1], "error", err)
			continue
		}
		for _, r := range resized {
			s.Logger.Info("resized", "task", r.Key.String(), "from", describe(r.From), "to", describe(r.To), "reason", r.Reason)
		}
		rep.Resized = append(rep.Resized, resized...)
	}
	return rep, nil
}

// queuedWaits are the predicted waits of queued jobs (the longest of their
// groups), from Forecast when set.
func (s *Sizer) queuedWaits(ctx context.Context, now time.Time) queuedWait {
	unknown := func(string, string) (time.Duration, time.Duration, bool) { return 0, 0, false }
	if s.Forecast == nil {
		return unknown
	}
	f, err := s.Forecast(ctx, now)
	if err != nil {
		s.Logger.Warn("no wait forecast this round; deadlines use the lead", "error", err)
		return unknown
	}
	type est struct{ wait, runtime time.Duration }
	waits := map[[2]string]est{}
	for _, q := range f.Queued {
		if !q.Wait.Known {
			continue
		}
		k := [2]string{q.Namespace, q.Job}
		e := waits[k]
		e.wait = max(e.wait, q.Wait.Duration())
		if q.Runtime.Known {
			e.runtime = max(e.runtime, q.Runtime.Duration())
		}
		waits[k] = e
	}
	return func(ns, job string) (time.Duration, time.Duration, bool) {
		e, ok := waits[[2]string{ns, job}]
		return e.wait, e.runtime, ok
	}
}
