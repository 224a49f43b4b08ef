package apm

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/nomad-gpu/nomad-gpu/controller/sizing"
	"github.com/nomad-gpu/nomad-gpu/controller/sizing/history"
	"github.com/nomad-gpu/nomad-gpu/controller/sizing/predict"
)

// gpuRun is an allocation of job "train"'s task t holding n whole GPUs,
// with its task run as the cache records it (sizing.RunsOf: no pool).
func gpuRun(id, job, node, pool, status string, n int, started, finished time.Time) AllocRun {
	r := AllocRun{ID: id, Namespace: "default", JobID: job, NodeID: node, Pool: pool, Status: status,
		Created: started.Add(-time.Minute), Started: started, Finished: finished}
	outcome := history.OutcomeRunning
	switch status {
	case "complete":
		outcome = history.OutcomeComplete
	case "failed":
		outcome = history.OutcomeFailed
	}
	r.Tasks = []history.Run{{Key: history.Key{Namespace: "default", Job: job, Group: "g", Task: "t"}, AllocID: id,
		Slice: history.Slice{Kind: "gpu", Count: n}, Created: r.Created, Started: started, Finished: finished, Outcome: outcome}}
	return r
}

// forecastSnapshot: node a has 4 H100s; a0 is held by "live" (15 min in),
// a1 by the pending "warm"; a2 and a3 are free. train ran 10, 20 and 30
// minutes before. Queued: "one" (1 GPU), "three" (3 GPUs, after "one"),
// "huge" (8 GPUs: never fits).
func forecastSnapshot() *Snapshot {
	m := time.Minute
	var runs []AllocRun
	for i, d := range []time.Duration{10 * m, 20 * m, 30 * m} {
		fin := t0.Add(-time.Duration(i+1) * time.Hour)
		runs = append(runs, gpuRun("done-"+string(rune('0'+i)), "train", "a", "gpu", "complete", 1, fin.Add(-d), fin))
	}
	runs = append(runs,
		gpuRun("failed", "train", "a", "gpu", "failed", 1, t0.Add(-5*time.Hour), t0.Add(-5*time.Hour+time.Second)),
		gpuRun("live", "train", "a", "gpu", "running", 1, t0.Add(-15*m), time.Time{}),
		gpuRun("warm", "train", "a", "gpu", "pending", 1, time.Time{}, time.Time{}),
	)
	q := func(job string, prio, n int) Work {
		w := blocked("gpu", 1, ask("nvidia/gpu", n))
		w.Namespace, w.JobID, w.Group, w.Task, w.Priority = "default", job, "g", "t", prio
		return w
	}
	return &Snapshot{Now: t0,
		Nodes: []Node{node("a", "gpu", "h100", []UsedDevices{{h100, ids("a", 0, 2)}}, gpus("a", 4, 0)...)},
		Work: []Work{q("one", 80, 1), q("three", 50, 3), q("huge", 50, 8),
			{Source: FromPendingAlloc, Namespace: "default", JobID: "warm", Group: "g", Pool: "gpu", Allocs: 1, Asks: []DeviceAsk{ask("nvidia/gpu", 1)}}},
		Runs: runs,
		// As the read model counts them: a2 and a3.
		Free: map[string]predict.Capacity{"gpu": {{Kind: "gpu"}: 2}},
	}
}

func TestForecastOf(t *testing.T) {
	f := ForecastOf(forecastSnapshot())
	type task struct {
		alloc, state       string
		remaining, runtime float64
		basis              string
	}
	var got []task
	for _, t := range f.Tasks {
		got = append(got, task{t.AllocID, t.State, t.Remaining.Seconds, t.Runtime.Seconds, t.Remaining.Basis})
	}
	want := []task{
		// 15 min in: of 10, 20, 30 the longer are 20, 30; median 25.
		{"live", sizing.TaskRunning, 600, 1500, "job p50 of 3 runs, 2 longer than 15m0s elapsed"},
		{"warm", sizing.TaskPending, 1200, 1200, "job p50 of 3 runs"},
	}
	if len(got) != len(want) {
		t.Fatalf("tasks %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("task %+v, want %+v", got[i], want[i])
		}
	}
	waits := map[string]predict.Estimate{}
	for _, w := range f.Queued {
		waits[w.Job] = w.Wait
	}
	for job, w := range map[string]predict.Estimate{
		"one": {Seconds: 0, Basis: "fits now", Known: true},
		// "one" takes a2 (for 1200 s: the pool's gpu×1 runs); "three"
		// needs a3 and two more: live frees a0 at 600 s, warm and one
		// free theirs at 1200 s. "huge" is ahead of it (as old, and
		// before it by name) but never fits, so never stops it.
		"three": {Seconds: 1200, Basis: "list schedule of 2 running, 2 ahead", Known: true},
		"huge":  {Basis: "ask of gpu×8 exceeds the pool's 4"},
	} {
		if waits[job] != w {
			t.Errorf("%s waits %+v, want %+v", job, waits[job], w)
		}
	}
	if _, ok := waits["warm"]; ok || len(f.Queued) != 3 {
		t.Errorf("queued %+v: want the three blocked groups only, not the pending allocation", f.Queued)
	}
}

// TestExporterPredictions: the running task's runtime and remaining, the
// waits that are known; the pending task, the group that never fits and
// a finished task export nothing.
func TestExporterPredictions(t *testing.T) {
	names := []string{"nomad_gpu_job_predicted_runtime_seconds", "nomad_gpu_job_predicted_remaining_seconds", "nomad_gpu_job_predicted_wait_seconds"}
	task := `{alloc_id="live",basis="job",job="train",namespace="default",task="t",task_group="g"}`
	wait := func(job, basis string) string {
		return `{basis="` + basis + `",device="nvidia/gpu",job="` + job + `",namespace="default",pool="gpu",task_group="g"}`
	}
	expected := header(names[0]) + names[0] + task + " 1500\n" +
		header(names[1]) + names[1] + task + " 600\n" +
		header(names[2]) + names[2] + wait("one", "fits_now") + " 0\n" + names[2] + wait("three", "list_schedule") + " 1200\n"
	s := forecastSnapshot()
	if err := testutil.CollectAndCompare(fixedCollector(scrapeInput{snap: s}), strings.NewReader(expected), names...); err != nil {
		t.Fatal(err)
	}
	// live finishes in 15 min: its series go, and its run joins the
	// history (10, 15, 20, 30 min: median 17.5); three waits for warm
	// and one, 1050 s each.
	s = forecastSnapshot()
	for i := range s.Runs {
		if r := &s.Runs[i]; r.ID == "live" {
			*r = gpuRun("live", "train", "a", "gpu", "complete", 1, t0.Add(-15*time.Minute), t0)
		}
	}
	s.Nodes[0].Used = []UsedDevices{{h100, ids("a", 1, 2)}}
	expected = header(names[2]) + names[2] + wait("one", "fits_now") + " 0\n" + names[2] + wait("three", "list_schedule") + " 1050\n"
	if err := testutil.CollectAndCompare(fixedCollector(scrapeInput{snap: s}), strings.NewReader(expected), names...); err != nil {
		t.Fatal(err)
	}
}

func ptrTo[T any](v T) *T { return &v }

// nodes_needed with beyond leaves out the groups the forecast places on
// the pool within beyond: "one" fits now, "three" starts in 20 minutes
// (when live and the pending warm free theirs); "huge" never fits, its
// wait unknown, so it always counts (as unfittable on nodes of 4).
func TestNodesNeededBeyond(t *testing.T) {
	for _, c := range []struct {
		query        string
		nodes        int
		servedInTime int
	}{
		{"nodes_needed{node_pool=gpu}", 1, 0},
		{"nodes_needed{node_pool=gpu,beyond=10m}", 1, 1},
		{"nodes_needed{node_pool=gpu,beyond=20m}", 0, 2},
		{"nodes_needed{node_pool=gpu,beyond=1h}", 0, 2},
	} {
		q, err := ParseQuery(c.query)
		if err != nil {
			t.Fatal(err)
		}
		r := NodesNeeded(q, forecastSnapshot())
		if r.Nodes != c.nodes || r.ServedInTime != c.servedInTime || r.Unfittable != 1 {
			t.Errorf("%s = %+v; want %d nodes, %d served in time, 1 unfittable", c.query, r, c.nodes, c.servedInTime)
		}
	}
	for _, bad := range []string{"nodes_needed{beyond=0s}", "nodes_needed{beyond=10}", "gpus_queued{beyond=10m}"} {
		if _, err := ParseQuery(bad); err == nil || !strings.Contains(err.Error(), "beyond") {
			t.Errorf("%s: %v, want an error naming beyond", bad, err)
		}
	}
}
