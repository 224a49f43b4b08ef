package sizing

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/controller/sizing/history"
	"github.com/nomad-gpu/nomad-gpu/nomadview"
)

// Cluster is what a sizing round asks Nomad beyond the snapshot.
type Cluster interface {
	// DeviceStats are a node's device stats (GET /v1/client/stats).
	DeviceStats(ctx context.Context, nodeID string) ([]*api.DeviceGroupStats, error)
	// Job is a job's spec as registered now, with its modify index.
	Job(ctx context.Context, namespace, id string) (*api.Job, error)
}

// Sizer is one round of right-sizing, run on a snapshot of the cluster:
// it records what the GPU tasks use and how their runs end, sizes the jobs
// that hold GPUs, and says which to resize. It writes no job: its caller
// (the controller's leader) registers the resizes.
type Sizer struct {
	Cluster Cluster
	// Store keeps the run records, and the samples unless Samples is set;
	// nil: the runs are those Nomad remembers (SnapshotRuns), and Samples
	// must be set.
	Store *history.Store
	// Samples reads the samples from Prometheus instead of the nodes.
	Samples *history.Prometheus
	// DryRun records nothing: the history is only read.
	DryRun     bool
	Window     time.Duration // how far back Recommend reads
	Thresholds Thresholds
	Logger     hclog.Logger

	// held is the last recommendation logged per task that was not
	// applied, so that one repeated every round is logged once.
	held map[history.Key]string
}

// Resized is one task's resize.
type Resized struct {
	Key      history.Key
	From, To history.Slice
	Reason   string
}

// String is the resize in words: "ns/job/group/task: 1 MPS share → 2 MPS
// shares: <evidence>".
func (r Resized) String() string {
	return fmt.Sprintf("%s: %s → %s: %s", r.Key, describe(r.From), describe(r.To), r.Reason)
}

// JobResize is a job with its resized tasks' device requests changed, to
// be registered at its JobModifyIndex.
type JobResize struct {
	Job     *api.Job
	Resized []Resized
}

// StepReport says what one round found.
type StepReport struct {
	Samples, Runs int
	Results       []TaskResult
	Resizes       []JobResize
}

// Step runs one round on snap at now.
func (s *Sizer) Step(ctx context.Context, snap *nomadview.Snapshot, now time.Time) (StepReport, error) {
	if s.Store == nil && s.Samples == nil {
		return StepReport{}, errors.New("sizer: no history: neither a store nor Prometheus")
	}
	runs := SnapshotRuns(snap)
	running := runningTasks(snap.Allocs)
	rep := StepReport{Runs: len(runs)}
	if err := s.record(ctx, runs, running, now, &rep); err != nil {
		return rep, err
	}
	src := s.source(runs)
	for _, k := range jobsOf(running) {
		job, err := s.Cluster.Job(ctx, k.Namespace, k.ID)
		if err != nil {
			s.Logger.Warn("cannot read a job holding GPUs", "namespace", k.Namespace, "job", k.ID, "error", err)
			continue
		}
		res, resize, err := s.sizeJob(ctx, job, src, snap.Nodes, now)
		if err != nil {
			return rep, err
		}
		rep.Results = append(rep.Results, res...)
		if resize != nil {
			rep.Resizes = append(rep.Resizes, *resize)
		}
	}
	return rep, nil
}

// record keeps the runs, and the samples of the running tasks read from
// their nodes' device stats, in the store.
func (s *Sizer) record(ctx context.Context, runs []history.Run, running []TaskDevices, now time.Time, rep *StepReport) error {
	if s.DryRun || s.Store == nil {
		return nil
	}
	for _, r := range runs {
		if err := s.Store.PutRun(ctx, r); err != nil {
			return err
		}
	}
	if s.Samples != nil {
		return nil
	}
	samples := SampleTasks(running, s.deviceStats(ctx, running), now)
	rep.Samples = len(samples)
	return s.Store.AddSamples(ctx, samples)
}

// deviceStats are the device stats of the nodes running tasks, by node.
func (s *Sizer) deviceStats(ctx context.Context, running []TaskDevices) map[string][]*api.DeviceGroupStats {
	stats := map[string][]*api.DeviceGroupStats{}
	for _, t := range running {
		if _, done := stats[t.NodeID]; done {
			continue
		}
		ds, err := s.Cluster.DeviceStats(ctx, t.NodeID)
		if err != nil {
			s.Logger.Warn("no device stats of a node holding GPU tasks; its tasks get no sample this round", "node_id", t.NodeID, "error", err)
		}
		stats[t.NodeID] = ds
	}
	return stats
}

// source is where the round reads the history.
func (s *Sizer) source(runs []history.Run) history.Source {
	switch {
	case s.Samples == nil:
		return s.Store
	case s.Store != nil:
		return s.Samples.WithRuns(s.Store)
	}
	return s.Samples.WithRuns(RunList(runs))
}

// sizeJob sizes job's tasks and, where the policy lets it, changes their
// device requests; the JobResize is nil when none changed.
func (s *Sizer) sizeJob(ctx context.Context, job *api.Job, src history.Source, nodes []*api.NodeListStub, now time.Time) ([]TaskResult, *JobResize, error) {
	res, err := SizeJob(ctx, job, src, nodes, s.Window, s.Thresholds, false, now)
	if err != nil {
		return nil, nil, err
	}
	var resized []Resized
	for _, r := range res {
		switch {
		case r.Err != nil:
			s.Logger.Warn("cannot size a task", "task", r.Key.String(), "error", r.Err)
			continue
		case !r.Decision.Apply:
			if r.Recommendation.Change != Keep {
				s.logHeld(r)
			}
			continue
		}
		rec := r.Recommendation
		if err := Resize(job, r.Key.Group, r.Key.Task, rec.Recommended, rec.Reason, now); err != nil {
			return nil, nil, err
		}
		resized = append(resized, Resized{Key: r.Key, From: rec.Current, To: rec.Recommended, Reason: rec.Summary()})
	}
	if len(resized) == 0 {
		return res, nil, nil
	}
	return res, &JobResize{Job: job, Resized: resized}, nil
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

// runningTasks are the GPU tasks of the running allocations.
func runningTasks(allocs []*api.AllocationListStub) []TaskDevices {
	running := slices.DeleteFunc(slices.Clone(allocs), func(a *api.AllocationListStub) bool {
		return a == nil || a.ClientStatus != api.AllocClientStatusRunning
	})
	return GPUTasks(running)
}

// jobsOf are the jobs of tasks, each once, in order.
func jobsOf(tasks []TaskDevices) []JobID {
	var out []JobID
	for _, t := range tasks {
		k := JobID{Namespace: t.Key.Namespace, ID: t.Key.Job}
		if !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	slices.SortFunc(out, func(a, b JobID) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.ID, b.ID))
	})
	return out
}

// NomadCluster is the Cluster of a Nomad API client.
type NomadCluster struct{ Client *api.Client }

// DeviceStats reads the node's host stats.
func (n NomadCluster) DeviceStats(ctx context.Context, nodeID string) ([]*api.DeviceGroupStats, error) {
	st := nomadview.ReadNodeStats(ctx, n.Client, []string{nodeID}, 1, 0, nil)[0]
	if st.Err != nil {
		return nil, st.Err
	}
	return st.Host.DeviceStats, nil
}

// Job reads the job.
func (n NomadCluster) Job(ctx context.Context, namespace, id string) (*api.Job, error) {
	job, _, err := n.Client.Jobs().Info(id, (&api.QueryOptions{Namespace: namespace}).WithContext(ctx))
	return job, err
}
