package apm

import (
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/e2e/cluster"
)

// benchJob is a batch job of one group of count allocations asking for one
// nvidia/gpu each, in pool gpu.
func benchJob(id string, count int) *api.Job {
	j := api.NewBatchJob(id, id, "global", 50)
	pool := "gpu"
	j.NodePool = &pool
	j.Datacenters = []string{"dc1"}
	one := uint64(1)
	task := api.NewTask("t", "raw_exec").
		SetConfig("command", "/bin/true").
		Require(&api.Resources{Devices: []*api.RequestedDevice{{Name: "nvidia/gpu", Count: &one}}})
	j.AddTaskGroup(api.NewTaskGroup("g", count).AddTask(task))
	return j
}

// evaluationQueries is what one GPU pool policy evaluation asks: a queue
// check, a wait-time check, a sizing check, a scale-in guard and the empty
// pool of another policy.
var evaluationQueries = []string{
	"gpus_queued{pool=gpu}",
	"allocs_queued{pool=gpu,state=blocked}",
	"wait_max_seconds{pool=gpu}",
	"nodes_needed{pool=gpu,gpus_per_node=8}",
	"gpu_alloc_pct{pool=gpu}",
	"gpus_queued{pool=empty}",
}

// BenchmarkQueryQueued: 10,000 queued GPU allocations (100 jobs × 100) in
// a real Nomad server. Reports query latency (p50/p90/p99 ms per query),
// Nomad calls per evaluation (len(evaluationQueries) queries) on a warm
// cache, the cold first evaluation (time and calls: what a cache-less
// plugin would pay per evaluation), and calls per cluster change.
//
//	go test ./autoscaler/apm -run '^$' -bench BenchmarkQueryQueued -benchtime 2000x
func BenchmarkQueryQueued(b *testing.B) {
	const jobs, perJob = 100, 100
	c := cluster.Start(b, cluster.Options{Clients: 0})
	nc := c.API()
	if _, err := nc.NodePools().Register(&api.NodePool{Name: "gpu"}, nil); err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, jobs)
	sem := make(chan struct{}, 8)
	for i := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			if _, _, err := nc.Jobs().Register(benchJob(fmt.Sprintf("queued-%03d", i), perJob), nil); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	// Wait for the scheduler to block every job.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		evals, _, err := nc.Evaluations().List(&api.QueryOptions{Params: map[string]string{"status": "blocked"}})
		if err == nil && len(evals) == jobs {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d blocked evaluations after 2m (err %v), want %d", len(evals), err, jobs)
		}
		time.Sleep(200 * time.Millisecond)
	}

	// Cold: a fresh plugin's first evaluation lists everything.
	p := newTestPlugin(b, c.Server().HTTPAddr(), nil)
	coldStart := time.Now()
	for _, q := range evaluationQueries {
		query(b, p, q)
	}
	cold := time.Since(coldStart)
	coldCalls := p.Stats().Calls
	// The job summaries catch up with the blocked evaluations.
	waitValue(b, p, "gpus_queued{pool=gpu}", jobs*perJob, 30*time.Second)
	waitValue(b, p, "nodes_needed{pool=gpu,gpus_per_node=8}", jobs*perJob/8, time.Second)

	lat := make([]time.Duration, 0, 1<<16)
	calls0 := p.Stats().Calls
	evaluations := 0
	for b.Loop() {
		for _, q := range evaluationQueries {
			t := time.Now()
			query(b, p, q)
			lat = append(lat, time.Since(t))
		}
		evaluations++
	}
	warmCalls := p.Stats().Calls - calls0

	// Churn: stop 10 jobs, one at a time, each seen by the plugin.
	calls1 := p.Stats().Calls
	for i := range 10 {
		if _, _, err := nc.Jobs().Deregister(fmt.Sprintf("queued-%03d", i), false, nil); err != nil {
			b.Fatal(err)
		}
		waitValue(b, p, "gpus_queued{pool=gpu}", float64((jobs-i-1)*perJob), 30*time.Second)
	}
	churnCalls := p.Stats().Calls - calls1

	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	pct := func(f float64) float64 {
		return float64(lat[int(f*float64(len(lat)-1))]) / float64(time.Millisecond)
	}
	b.ReportMetric(pct(0.50), "ms/query-p50")
	b.ReportMetric(pct(0.90), "ms/query-p90")
	b.ReportMetric(pct(0.99), "ms/query-p99")
	b.ReportMetric(float64(warmCalls)/float64(evaluations), "calls/eval")
	b.ReportMetric(float64(cold)/float64(time.Millisecond), "cold-eval-ms")
	b.ReportMetric(float64(coldCalls), "cold-eval-calls")
	b.ReportMetric(float64(churnCalls)/10, "calls/change")
	b.Logf("%d queued allocs in %d jobs; %d evaluations of %d queries; warm calls %d; cold %v with %d calls; churn %d calls for 10 stops; by endpoint %v",
		jobs*perJob, jobs, evaluations, len(evaluationQueries), warmCalls, cold, coldCalls, churnCalls, p.Stats().ByEndpoint)
}
