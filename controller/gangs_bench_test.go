package controller

// BenchmarkGangAdmissionRound: one tick of the gang module on a snapshot
// of 1,000 nodes of 8 GPUs, 7,000 of them held by running 1-GPU
// allocations, with 10,000 allocations queued: 9,800 of 980 blocked jobs
// and 200 gang members, of 100 waiting gangs of two 8-GPU members. Each
// round is a fresh leader's, the dearest: every gang is due a plan. The
// target (issue 37) is 100 ms and 200 MiB a round, and Nomad calls a
// round independent of the queue's length: plans/round must stay 1.
//
//	go test -run '^$' -bench GangAdmissionRound -benchmem ./controller/

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/controller/queues"
	"github.com/nomad-gpu/nomad-gpu/nomadview"
)

func BenchmarkGangAdmissionRound(b *testing.B) {
	snap, specs := gangBenchSnapshot(1000, 8, 7000, 980, 10, 100)
	var plans, evals int
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		g, n := NewGangs(DefaultGangConfig(), hclog.NewNullLogger()), &fakeGangNomad{fits: false}
		if ds := g.Step(context.Background(), snap.Taken, snap, specsOf(specs), n); len(ds) != 1 || ds[0].Kind != "gang-waiting" {
			b.Fatalf("decisions %v, want one gang-waiting", kinds(ds))
		}
		plans, evals = plans+n.plans, evals+n.evals
	}
	b.ReportMetric(float64(plans)/float64(b.N), "plans/round")
	b.ReportMetric(float64(evals)/float64(b.N), "evals/round")
}

// gangBenchSnapshot is nodes nodes of gpus whole GPUs, running 1-GPU
// allocations on the first GPUs of the nodes in turn, blocked jobs of
// queuedPerJob queued allocations each, and gangs waiting gangs of two
// gpus-GPU members, with the gangs' specs.
func gangBenchSnapshot(nodes, gpus, running, blocked, queuedPerJob, gangs int) (*nomadview.Snapshot, map[JobKey]*api.Job) {
	layouts := make([]string, gpus)
	for i := range layouts {
		layouts[i] = "whole"
	}
	snap := emptySnapshot()
	snap.Taken = time.Unix(1_000_000, 0)
	for i := range nodes {
		snap.Nodes = append(snap.Nodes, layoutNode(fmt.Sprintf("n%04d", i), layouts...))
	}
	for i := range running {
		node, gpu := i%nodes, i/nodes
		id := fmt.Sprintf("run-%05d", i)
		snap.Jobs[JobKey{Namespace: "default", ID: id}] = &api.JobListStub{ID: id, Namespace: "default", Type: api.JobTypeBatch, Priority: 50}
		snap.Allocs = append(snap.Allocs, &api.AllocationListStub{ID: "alloc-" + id, Namespace: "default", JobID: id, TaskGroup: "g",
			NodeID: fmt.Sprintf("n%04d", node), ClientStatus: api.AllocClientStatusRunning, DesiredStatus: api.AllocDesiredStatusRun,
			AllocatedResources: &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{"t": {Devices: []*api.AllocatedDeviceResource{
				{Vendor: contract.Vendor, Type: contract.SliceGPU, Name: "H100", DeviceIDs: []string{fmt.Sprintf("GPU-n%04d-%d", node, gpu)}}}}}}})
	}
	for i := range blocked {
		id := fmt.Sprintf("queued-%04d", i)
		queuedJob(snap, id, "nvidia/gpu", queuedPerJob)
	}
	specs := map[JobKey]*api.Job{}
	for i := range gangs {
		id := fmt.Sprintf("gang-%03d", i)
		k := JobKey{Namespace: "default", ID: id}
		snap.Jobs[k] = &api.JobListStub{ID: id, Namespace: "default", Type: api.JobTypeBatch, Priority: 50, SubmitTime: int64(i),
			Meta: map[string]string{contract.MetaGang: "true"}}
		job := gangSpecJob(0)
		job.ID = &id
		job.TaskGroups[0].Tasks[0].Resources.Devices[0].Count = new(uint64(gpus))
		specs[k] = job
	}
	return snap, specs
}

// BenchmarkQueueGateRound: one tick of the gang module with a queue file
// of 50 queues (namespaces q00 … q49, nominal 160 each, one cohort) on
// 1,000 nodes of 8 GPUs, 7,000 of them held by the queues' running
// allocations, and 10,000 held 1-GPU jobs waiting, 200 a queue: a fresh
// leader's round, every job due, ordered, and the first planned (refused:
// no reclaim, as every queue is within its nominal). The target
// is for the order alone (queues.BenchmarkOrder, 50 ms for 10,000 jobs
// over 50 queues); this is the whole round around it: about 130 ms and
// 59 MB on a 2-core machine, most of it reading and checking 10,000
// specs (neverFits answers once per shape of ask a tick).
//
//	go test -run '^$' -bench QueueGateRound -benchmem ./controller/
func BenchmarkQueueGateRound(b *testing.B) {
	snap, _ := gangBenchSnapshot(1000, 8, 7000, 0, 0, 0)
	cfg := queues.Config{HalfLife: time.Hour, Cohorts: []string{"lab"}}
	for q := range 50 {
		name := fmt.Sprintf("q%02d", q)
		cfg.Queues = append(cfg.Queues, queues.Queue{Name: name, Namespaces: []string{name}, Nominal: 160, BorrowingLimit: queues.Unlimited,
			LendingLimit: 160, Weight: float64(1 + q%3), Cohort: "lab"})
	}
	for i, a := range snap.Allocs {
		a.Namespace = fmt.Sprintf("q%02d", i%50)
	}
	specs := map[JobKey]*api.Job{}
	for i := range 10000 {
		ns, id := fmt.Sprintf("q%02d", i%50), fmt.Sprintf("held-%05d", i)
		job := heldJob(ns, id, 1, false)
		k := JobKey{Namespace: ns, ID: id}
		specs[k] = job
		snap.Jobs[k] = &api.JobListStub{ID: id, Namespace: ns, Type: api.JobTypeBatch, Priority: 50, SubmitTime: int64(i),
			Meta: map[string]string{contract.MetaGang: "true"}}
	}
	book := NewQueueBook(cfg, nil)
	book.Step(snap.Taken, snap)
	var plans int
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		g, n := NewGangs(DefaultGangConfig(), hclog.NewNullLogger()), &fakeGangNomad{fits: false}
		g.UseQueues(book)
		if ds := g.Step(context.Background(), snap.Taken, snap, specsOf(specs), n); len(ds) != 1 || ds[0].Kind != "gang-waiting" {
			b.Fatalf("decisions %v, want one gang-waiting", kinds(ds))
		}
		plans += n.plans
	}
	b.ReportMetric(float64(plans)/float64(b.N), "plans/round")
}
