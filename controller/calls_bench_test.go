package controller

// BenchmarkLeaderNomadCalls: the Nomad API calls a leading controller
// makes, and the bytes it reads, per minute, on a cluster of 10,000
// allocations that changes every 100ms and preempts an allocation every
// 2s, the load docs/controller.md states the leader's reads for. The
// controller runs as the command does, with its default flags (-tick 1s,
// -lock-ttl 30s), against fakeNomad for benchPeriod of wall time: a
// leader's first minute, the dearest, since it starts with whole lists.
// Every request the fake answers counts, the leader lock's and the writes
// too. Bytes are the JSON bodies, uncompressed (Nomad gzips them when
// asked), the event stream's lines included. MB/min counts them all;
// first-MB is the part of it that the first answer of each endpoint makes
// (the leader's first lists), and later-MB/min the rest: what a leader
// reads each minute after its first.
//
//	go test -run '^$' -bench LeaderNomadCalls ./controller/

import (
	"context"
	"fmt"
	"maps"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"
)

const (
	benchAllocs       = 10_000
	benchAllocsPerJob = 10
	benchPeriod       = time.Minute
	benchChangeEvery  = 100 * time.Millisecond
	// Every benchPreemptEvery-th change preempts an allocation; the next
	// one runs its replacement.
	benchPreemptEvery = 20
)

func BenchmarkLeaderNomadCalls(b *testing.B) {
	calls, bytesBy := map[string]int{}, map[string]int64{}
	var bytes, first int64
	var elapsed time.Duration
	for i := 0; i < b.N; i++ {
		f := newFakeNomad()
		f.populate(benchAllocs, benchAllocsPerJob)
		d := runLeader(b, f, benchPeriod)
		for k, v := range f.calls {
			calls[k] += v
			bytesBy[k] += f.bytesBy[k]
			first += f.first[k]
		}
		bytes, elapsed = bytes+f.bytes, elapsed+d
	}
	perMin := func(x float64) float64 { return x / elapsed.Minutes() }
	total := 0
	for _, k := range slices.Sorted(maps.Keys(calls)) {
		total += calls[k]
		b.Logf("%-34s %6.1f calls/min %8.3f MB/min", k, perMin(float64(calls[k])), perMin(float64(bytesBy[k]))/1e6)
	}
	b.ReportMetric(perMin(float64(total)), "calls/min")
	b.ReportMetric(perMin(float64(bytes))/1e6, "MB/min")
	b.ReportMetric(float64(first)/1e6/float64(b.N), "first-MB")
	b.ReportMetric(perMin(float64(bytes-first))/1e6, "later-MB/min")
	b.ReportMetric(0, "ns/op")
}

// runLeader runs a controller replica with the command's defaults against
// f, changing f every benchChangeEvery, for period; it fails unless the
// replica led and protected jobs. The counts are f's.
func runLeader(b *testing.B, f *fakeNomad, period time.Duration) (elapsed time.Duration) {
	srv := httptest.NewServer(f)
	defer srv.Close()
	cl, err := api.NewClient(&api.Config{Address: srv.URL})
	if err != nil {
		b.Fatal(err)
	}
	m := NewMetrics()
	ctl := New(cl, Config{Namespace: "default", Cooldown: 5 * time.Minute, LockTTL: 30 * time.Second, LockDelay: time.Second, Tick: time.Second}, hclog.NewNullLogger(), m)
	ctx, cancel := context.WithTimeout(context.Background(), period)
	defer cancel()
	go f.churn(ctx, benchChangeEvery)
	start := time.Now()
	if err := ctl.Run(ctx); err != nil {
		b.Fatal(err)
	}
	elapsed = time.Since(start)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.calls["PUT /v1/jobs"] == 0 {
		b.Fatalf("the controller raised no job in %s (%d preemptions): calls %v", period, f.changes/benchPreemptEvery, f.calls)
	}
	return elapsed
}

// churn changes the cluster every every until ctx ends.
func (f *fakeNomad) churn(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f.change(time.Now())
		}
	}
}

// populate makes n running allocations of n/perJob batch jobs, each
// holding one GPU; one job in ten has priority 90, the others 30.
func (f *fakeNomad) populate(n, perJob int) {
	now := time.Now()
	for j := 0; j < n/perJob; j++ {
		id, prio := fmt.Sprintf("train-%04d", j), 30
		if j%10 == 0 {
			id, prio = fmt.Sprintf("serve-%04d", j), 90
		}
		f.jobs[id] = &api.JobListStub{ID: id, Name: id, Namespace: "default", Type: "batch", Priority: prio,
			Status: "running", CreateIndex: 1, ModifyIndex: 1, JobModifyIndex: 1, SubmitTime: now.UnixNano()}
		for k := 0; k < perJob; k++ {
			f.live = append(f.live, benchAlloc(id, k, len(f.live), now))
		}
	}
}

// benchAlloc is a running allocation as Nomad lists it with resources:
// one task holding one GPU, with its task state and events.
func benchAlloc(job string, k, seq int, now time.Time) *api.AllocationListStub {
	node := seq / 8
	started := now.Add(-time.Duration(seq) * time.Second)
	return &api.AllocationListStub{
		ID: fmt.Sprintf("%08x-0000-4000-8000-%012x", seq, seq), EvalID: fmt.Sprintf("%08x-eval-4000-8000-000000000000", seq),
		Name: fmt.Sprintf("%s.g[%d]", job, k), Namespace: "default", NodeID: fmt.Sprintf("%08x-node-4000-8000-000000000000", node),
		NodeName: fmt.Sprintf("gpu-%04d", node), JobID: job, JobType: "batch", TaskGroup: "g",
		AllocatedResources: &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{"t": {
			Cpu: api.AllocatedCpuResources{CpuShares: 1000}, Memory: api.AllocatedMemoryResources{MemoryMB: 4096},
			Devices: []*api.AllocatedDeviceResource{{Vendor: "nvidia", Type: "gpu", Name: "H100", DeviceIDs: []string{fmt.Sprintf("GPU-%08x-%d", node, seq%8)}}},
		}}, Shared: api.AllocatedSharedResources{DiskMB: 300}},
		DesiredStatus: api.AllocDesiredStatusRun, ClientStatus: api.AllocClientStatusRunning,
		TaskStates: map[string]*api.TaskState{"t": {State: "running", StartedAt: started, Events: []*api.TaskEvent{
			{Type: "Received", Time: started.UnixNano()}, {Type: "Task Setup", Time: started.UnixNano()}, {Type: "Started", Time: started.UnixNano()},
		}}},
		CreateIndex: 1, ModifyIndex: 1, CreateTime: started.UnixNano(), ModifyTime: started.UnixNano(),
	}
}

// change makes the cluster's next change: a preemption, the start of a
// preempted allocation's replacement, or a running allocation's update.
func (f *fakeNomad) change(now time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.changes++
	f.allocIdx = f.next()
	switch {
	case f.changes%benchPreemptEvery == 0:
		f.preempt(now)
	case len(f.starting) > 0:
		a := f.starting[0]
		f.starting = f.starting[1:]
		a.ClientStatus, a.ModifyIndex, a.ModifyTime = api.AllocClientStatusRunning, f.allocIdx, now.UnixNano()
		a.TaskStates["t"].State, a.TaskStates["t"].StartedAt = "running", now
		f.published("AllocationUpdated", a)
	default:
		a := f.live[(f.changes*7919)%len(f.live)]
		a.ModifyIndex, a.ModifyTime = f.allocIdx, now.UnixNano()
		f.published("AllocationUpdated", a)
	}
	f.moved()
}

// preempt evicts the next low-priority running allocation for a
// priority-90 one, and places its replacement, pending; the caller holds
// mu and has moved the index.
func (f *fakeNomad) preempt(now time.Time) {
	n := f.changes / benchPreemptEvery
	var by *api.AllocationListStub
	for i := 0; by == nil; i++ {
		if a := f.live[(n*131+i)%len(f.live)]; strings.HasPrefix(a.JobID, "serve-") {
			by = a
		}
	}
	for i := range f.live {
		idx := (n*977 + i) % len(f.live)
		v := f.live[idx]
		if strings.HasPrefix(v.JobID, "serve-") || v.ClientStatus != api.AllocClientStatusRunning || f.jobs[v.JobID].Priority != 30 {
			continue
		}
		gone := *v
		gone.ClientStatus, gone.DesiredStatus, gone.PreemptedByAllocation = api.AllocClientStatusComplete, api.AllocDesiredStatusEvict, by.ID
		gone.ModifyIndex, gone.ModifyTime = f.allocIdx, now.UnixNano()
		gone.TaskStates = map[string]*api.TaskState{"t": {State: "dead", StartedAt: v.TaskStates["t"].StartedAt, FinishedAt: now}}
		f.finished = append(f.finished, &gone)
		rep := benchAlloc(v.JobID, 0, idx, now)
		rep.ID = fmt.Sprintf("%08x-0000-4000-9000-%012x", n, idx)
		rep.Name, rep.ClientStatus, rep.CreateIndex, rep.ModifyIndex = v.Name, api.AllocClientStatusPending, f.allocIdx, f.allocIdx
		rep.TaskStates["t"].State = "pending"
		f.live[idx] = rep
		f.starting = append(f.starting, rep)
		f.published("PlanResult", &gone, rep)
		return
	}
}
