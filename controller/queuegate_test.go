package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/controller/gang"
	"github.com/nomad-gpu/nomad-gpu/controller/queues"
	"github.com/nomad-gpu/nomad-gpu/nomadview"
)

// heldJob is a held job of one member asking gpus whole GPUs, in
// namespace ns, admitted (count 1) or waiting (count 0).
func heldJob(ns, id string, gpus int, admitted bool) *api.Job {
	job := gangSpecJob(0)
	job.ID, job.Namespace, job.JobModifyIndex = new(id), new(ns), new(uint64(1))
	tg := job.TaskGroups[0]
	tg.Meta = map[string]string{contract.MetaGangMembers: "1"}
	tg.Networks = nil
	tg.Tasks[0].Resources.Devices[0].Count = new(uint64(gpus))
	if admitted {
		tg.Count = new(1)
	}
	return job
}

// queueScene is one node of 4 GPUs, queues a and b (namespaces a and b)
// of nominal 2 each in cohort lab, and held jobs: running ones, each on
// one GPU in the order given (admitted a minute apart, the first oldest),
// and waiting ones.
type queueScene struct {
	snap  *nomadview.Snapshot
	specs map[JobKey]*api.Job
	g     *Gangs
	book  *QueueBook
}

func newQueueScene(t *testing.T, cfg queues.Config, running []string, waiting map[string]int) *queueScene {
	t.Helper()
	s := &queueScene{snap: emptySnapshot(layoutNode("n1", "whole", "whole", "whole", "whole")), specs: map[JobKey]*api.Job{}}
	s.snap.Taken = time.Unix(1_000_000, 0)
	s.g = NewGangs(DefaultGangConfig(), hclog.NewNullLogger())
	for i, key := range running {
		ns, id, _ := strings.Cut(key, "/")
		k := s.add(heldJob(ns, id, 1, true), i)
		s.snap.Allocs = append(s.snap.Allocs, &api.AllocationListStub{ID: "alloc-" + id, Name: id + ".worker[0]", Namespace: ns, JobID: id, TaskGroup: "worker",
			NodeID: "n1", ClientStatus: api.AllocClientStatusRunning, DesiredStatus: api.AllocDesiredStatusRun,
			AllocatedResources: &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{"train": {Devices: []*api.AllocatedDeviceResource{
				{Vendor: contract.Vendor, Type: contract.SliceGPU, Name: "H100", DeviceIDs: []string{fmt.Sprintf("GPU-n1-%d", i)}}}}}}})
		s.g.admitted[k] = s.snap.Taken.Add(time.Duration(i-10) * time.Minute)
	}
	for _, key := range slices.Sorted(func(yield func(string) bool) {
		for k := range waiting {
			if !yield(k) {
				return
			}
		}
	}) {
		ns, id, _ := strings.Cut(key, "/")
		s.add(heldJob(ns, id, waiting[key], false), 100)
	}
	s.book = NewQueueBook(cfg, nil)
	s.book.Step(s.snap.Taken, s.snap)
	s.g.UseQueues(s.book)
	return s
}

func (s *queueScene) add(job *api.Job, submitted int) JobKey {
	k := JobKey{Namespace: *job.Namespace, ID: *job.ID}
	s.specs[k] = job
	s.snap.Jobs[k] = &api.JobListStub{ID: k.ID, Namespace: k.Namespace, Type: api.JobTypeBatch, Priority: 50, SubmitTime: int64(submitted),
		Status: "running", Meta: map[string]string{contract.MetaGang: "true"}}
	return k
}

func labQueues(nominalA float64, cohortA string) queues.Config {
	return queues.Config{HalfLife: time.Hour, Cohorts: []string{"lab"}, Queues: []queues.Queue{
		{Name: "a", Namespaces: []string{"a"}, Nominal: nominalA, BorrowingLimit: queues.Unlimited, LendingLimit: nominalA, Weight: 1, Cohort: cohortA},
		{Name: "b", Namespaces: []string{"b"}, Nominal: 2, BorrowingLimit: queues.Unlimited, LendingLimit: 2, Weight: 1, Cohort: "lab"},
	}}
}

// The gate on hand-made cases: the order (priority, then fair share),
// the quota's waits with their reasons, borrowing what the cohort lends
// but not what a lender's waiting work claims, and reclaim, newest
// admission first, of what the lender's work within its nominal needs.
func TestQueueGate(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		cfg     queues.Config
		running []string
		waiting map[string]int
		edit    func(s *queueScene)
		fits    func(*api.Job) bool
		preempt string // the job whose allocation Nomad's plan preempts
		planned []string
		scales  []string
		kinds   []string
		reason  string // a waiting job's reason, "job: words"
		victims string // the jobs reclaimed, in order
	}{
		{name: "fair share orders a tier: b has used less", cfg: labQueues(2, "lab"), running: []string{"a/a-1", "b/b-1"},
			waiting: map[string]int{"a/a-2": 1, "b/b-2": 1}, edit: func(s *queueScene) { s.book.charged = map[string]float64{"a": 3, "b": 1} },
			planned: []string{"b-2", "a-2"}, scales: []string{"worker=1@7", "worker=1@7"}, kinds: []string{"gang-admitted", "gang-admitted"}},
		{name: "an admission not placed yet is charged at once: b first", cfg: labQueues(3, "lab"), running: []string{"a/a-1", "b/b-1"},
			waiting: map[string]int{"a/a-2": 1, "b/b-2": 1}, edit: func(s *queueScene) {
				s.g.admitted[s.add(heldJob("a", "a-9", 1, true), 50)] = s.snap.Taken
			},
			planned: []string{"b-2", "a-2"}, scales: []string{"worker=1@7", "worker=1@7"}, kinds: []string{"gang-admitted", "gang-admitted"}},
		{name: "priority before fair share", cfg: labQueues(2, "lab"), running: []string{"a/a-1", "b/b-1"},
			waiting: map[string]int{"a/a-2": 1, "b/b-2": 1}, edit: func(s *queueScene) {
				s.book.charged = map[string]float64{"a": 3, "b": 1}
				s.snap.Jobs[JobKey{Namespace: "a", ID: "a-2"}].Priority = 60
			},
			planned: []string{"a-2", "b-2"}, scales: []string{"worker=1@7", "worker=1@7"}, kinds: []string{"gang-admitted", "gang-admitted"}},
		{name: "no cohort: a waits at its nominal", cfg: labQueues(2, ""), running: []string{"a/a-1", "a/a-2"}, waiting: map[string]int{"a/a-3": 1},
			kinds: []string{"gang-waiting"}, reason: "a-3: quota: a would use 3 of its nominal 2, and it is in no cohort to borrow from"},
		{name: "a borrows what idle b lends", cfg: labQueues(2, "lab"), running: []string{"a/a-1", "a/a-2"}, waiting: map[string]int{"a/a-3": 1},
			planned: []string{"a-3"}, scales: []string{"worker=1@7"}, kinds: []string{"gang-admitted"}},
		{name: "b's runs that completed hold nothing: a borrows", cfg: labQueues(2, "lab"), running: []string{"a/a-1", "a/a-2", "b/b-1", "b/b-2"},
			waiting: map[string]int{"a/a-3": 1}, edit: func(s *queueScene) {
				for _, a := range s.snap.Allocs[2:] {
					a.ClientStatus, a.AllocatedResources = api.AllocClientStatusComplete, nil
				}
				s.book.Step(s.snap.Taken, s.snap)
			},
			planned: []string{"a-3"}, scales: []string{"worker=1@7"}, kinds: []string{"gang-admitted"}},
		{name: "what b's waiting work claims is not lent", cfg: labQueues(2, "lab"), running: []string{"a/a-1", "a/a-2"},
			waiting: map[string]int{"a/a-3": 1, "b/b-1": 2}, fits: func(j *api.Job) bool { return *j.ID != "b-1" },
			planned: []string{"b-1"}, kinds: []string{"gang-waiting", "gang-waiting"}, reason: "a-3: cohort: lab lends 0 now, 1 needed"},
		{name: "b's work takes back a's newest borrowed runs", cfg: labQueues(2, "lab"), running: []string{"a/a-1", "a/a-2", "a/a-3", "a/a-4"},
			waiting: map[string]int{"b/b-1": 1, "b/b-2": 1}, fits: func(*api.Job) bool { return false },
			planned: []string{"b-1", "b-2"}, scales: []string{"worker=0@0", "worker=0@0"}, kinds: []string{"gang-waiting", "reclaimed", "reclaimed", "gang-waiting"},
			victims: "[a-4 a-3]"},
		{name: "a plan preempting a's run within its nominal is refused", cfg: labQueues(2, "lab"), running: []string{"a/a-1", "a/a-2"},
			waiting: map[string]int{"b/b-1": 1}, preempt: "a-1",
			planned: []string{"b-1"}, kinds: []string{"gang-waiting"}, reason: "b-1: quota: Nomad's plan preempts a/a-1 of queue a, which uses no more than its nominal 2"},
		{name: "a plan preempting a's borrowed run is taken", cfg: labQueues(2, "lab"), running: []string{"a/a-1", "a/a-2", "a/a-3"},
			waiting: map[string]int{"b/b-1": 1}, preempt: "a-3",
			planned: []string{"b-1"}, scales: []string{"worker=1@7"}, kinds: []string{"gang-admitted"}},
		{name: "at its nominal, a's work 10 above takes back a's lower runs, newest first", cfg: labQueues(2, ""), running: []string{"a/a-1", "a/a-2"},
			waiting: map[string]int{"a/a-3": 1}, edit: func(s *queueScene) { s.snap.Jobs[JobKey{Namespace: "a", ID: "a-3"}].Priority = 60 },
			scales: []string{"worker=0@0"}, kinds: []string{"gang-waiting", "yielded", "gang-waiting"}, victims: "[a-2]"},
		{name: "at its nominal, a's lower runs on no one node make room: a's work waits", cfg: labQueues(2, ""), running: []string{"a/a-1", "a/a-2"},
			waiting: map[string]int{"a/a-3": 2}, edit: func(s *queueScene) {
				s.snap.Jobs[JobKey{Namespace: "a", ID: "a-3"}].Priority = 60
				s.snap.Allocs[1].NodeID = "n2" // a node full of other work
			},
			kinds: []string{"gang-waiting"}, reason: "a-3: quota: a would use 4 of its nominal 2, and it is in no cohort to borrow from"},
		{name: "at its nominal, a's work less than 10 above waits", cfg: labQueues(2, ""), running: []string{"a/a-1", "a/a-2"},
			waiting: map[string]int{"a/a-3": 1}, edit: func(s *queueScene) { s.snap.Jobs[JobKey{Namespace: "a", ID: "a-3"}].Priority = 59 },
			kinds: []string{"gang-waiting"}, reason: "a-3: quota: a would use 3 of its nominal 2, and it is in no cohort to borrow from"},
		{name: "checkpointing runs are taken back first", cfg: labQueues(2, "lab"), running: []string{"a/a-1", "a/a-2", "a/a-3", "a/a-4"},
			waiting: map[string]int{"b/b-1": 1, "b/b-2": 1}, fits: func(*api.Job) bool { return false }, edit: func(s *queueScene) {
				job := s.specs[JobKey{Namespace: "a", ID: "a-4"}]
				job.Meta[contract.MetaGangCheckpoint] = "none"
				delete(job.TaskGroups[0].Tasks[0].Config, "checkpoint")
			},
			planned: []string{"b-1", "b-2"}, scales: []string{"worker=0@0", "worker=0@0"}, kinds: []string{"gang-waiting", "reclaimed", "reclaimed", "gang-waiting"},
			victims: "[a-3 a-2]"},
	} {
		s := newQueueScene(t, tc.cfg, tc.running, tc.waiting)
		if tc.edit != nil {
			tc.edit(s)
		}
		n := &fakeGangNomad{fits: true, planFits: tc.fits}
		for _, a := range s.snap.Allocs {
			if a.JobID == tc.preempt {
				n.preempts = append(n.preempts, a)
			}
		}
		var got []Decision
		for range 2 { // one admission a tick; what was refused is not planned again on the same capacity
			got = append(got, s.g.Step(ctx, s.snap.Taken, s.snap, specsOf(s.specs), n)...)
		}
		if fmt.Sprint(n.planned) != fmt.Sprint(tc.planned) || fmt.Sprint(n.scales) != fmt.Sprint(tc.scales) || fmt.Sprint(kinds(got)) != fmt.Sprint(tc.kinds) {
			t.Errorf("%s: planned %v, scales %v, decisions %v; want %v, %v, %v", tc.name, n.planned, n.scales, got, tc.planned, tc.scales, tc.kinds)
		}
		if tc.reason != "" {
			id, want, _ := strings.Cut(tc.reason, ": ")
			if !slices.ContainsFunc(got, func(d Decision) bool { return d.Job.ID == id && d.Reason == want }) {
				t.Errorf("%s: decisions %v; want %s waiting with %q", tc.name, got, id, want)
			}
		}
		var victims []string
		for _, d := range got {
			if d.Kind == "reclaimed" || d.Kind == "yielded" {
				victims = append(victims, d.Job.ID)
			}
		}
		if tc.victims != "" && fmt.Sprint(victims) != tc.victims {
			t.Errorf("%s: reclaimed %v; want %s", tc.name, victims, tc.victims)
		}
	}
}

// A held job with meta nomad_gpu_after waits, with the reason, until
// each job it names completed its latest run: written since its job was
// last written, the newest of a rescheduling chain, every allocation
// complete. With no queue file too.
func TestDependencies(t *testing.T) {
	ctx, now := context.Background(), time.Unix(1000, 0)
	alloc := func(status, next string, created uint64) *api.AllocationListStub {
		return &api.AllocationListStub{ClientStatus: status, DesiredStatus: api.AllocDesiredStatusRun, NextAllocation: next, CreateIndex: created}
	}
	for _, tc := range []struct {
		name   string
		after  string
		prep   *api.JobListStub
		allocs []*api.AllocationListStub
		kind   string
		reason string
	}{
		{"missing", "prep", nil, nil, "gang-waiting", "dependency: after default/prep, which does not exist (never submitted, or garbage-collected); run it, or change meta nomad_gpu_after"},
		{"running", "prep", &api.JobListStub{Status: "running"}, nil, "gang-waiting", "dependency: after default/prep, which has not completed yet"},
		{"dead, no run since its last write", "prep", &api.JobListStub{Status: "dead", JobModifyIndex: 50}, []*api.AllocationListStub{alloc("complete", "", 40)},
			"gang-waiting", "dependency: after default/prep, which has not completed yet"},
		{"failed", "prep", &api.JobListStub{Status: "dead", JobModifyIndex: 50}, []*api.AllocationListStub{alloc("complete", "", 51), alloc("failed", "", 52)},
			"gang-waiting", "dependency: after default/prep, whose latest run failed; it waits until default/prep runs again and completes"},
		{"stopped", "prep", &api.JobListStub{Status: "dead", Stop: true}, nil,
			"gang-waiting", "dependency: after default/prep, whose latest run failed; it waits until default/prep runs again and completes"},
		{"completed after a rescheduled failure", "prep", &api.JobListStub{Status: "dead", JobModifyIndex: 50},
			[]*api.AllocationListStub{alloc("failed", "x", 51), alloc("complete", "", 52), alloc("failed", "", 10)}, "gang-admitted", ""},
		{"names itself", "train", nil, nil, "gang-invalid", `not admitted: meta nomad_gpu_after: "train" names the job itself; allowed: other jobs`},
	} {
		snap := gangSnapshot()
		if tc.prep != nil {
			tc.prep.ID, tc.prep.Namespace = "prep", "default"
			snap.Jobs[JobKey{Namespace: "default", ID: "prep"}] = tc.prep
		}
		job := gangSpecJob(0)
		job.Meta[contract.MetaAfter] = tc.after
		g, n := NewGangs(DefaultGangConfig(), hclog.NewNullLogger()), &fakeGangNomad{fits: true, allocs: map[string][]*api.AllocationListStub{"prep": tc.allocs}}
		got := g.Step(ctx, now, snap, gangSpecs(job), n)
		if len(got) != 1 || got[0].Kind != tc.kind || got[0].Reason != tc.reason && tc.reason != "" {
			t.Errorf("%s: decisions %v; want one %s %q", tc.name, got, tc.kind, tc.reason)
		}
	}
}

// The kinds of the reasons the gate writes.
func TestWaitKind(t *testing.T) {
	for _, tc := range []struct{ state, reason, want string }{
		{"waiting", "quota: a would use 3 of its nominal 2, and it is in no cohort to borrow from", WaitQuota},
		{"waiting", "cohort: lab lends 0 now, 1 needed", WaitCohort},
		{"waiting", "dependency: after default/prep, which has not completed yet", WaitDependency},
		{"waiting", `gang does not fit: group "worker": resources (exhausted on 3 nodes)`, WaitGang},
		{"waiting", `capacity: group "worker": resources (exhausted on 3 nodes)`, WaitCapacity},
		{"invalid", "not admitted: type: \"service\"", WaitInvalid},
		{"waiting", "no node of the job's pool has its locality read yet", WaitOther},
	} {
		if got := WaitKind(tc.state, tc.reason); got != tc.want {
			t.Errorf("%s %q: %s, want %s", tc.state, tc.reason, got, tc.want)
		}
	}
}

// A held job that Nomad's plan did not place waits for another job's
// reservation where the placeholder holds GPUs on a node that, with its
// free GPUs, would fit one member: on a node of 4 GPUs, three held by a's
// runs and one by the placeholder, a 1-GPU job waits for the reservation;
// a 2-GPU job, which the placeholder's one GPU would not fit, for
// capacity; and the reservation's own job for none.
func TestReservationHolds(t *testing.T) {
	s := newQueueScene(t, labQueues(2, "lab"), []string{"a/a-1", "a/a-2", "a/a-3"}, nil)
	s.snap.Allocs = append(s.snap.Allocs, &api.AllocationListStub{ID: "hold-0", Namespace: "default", JobID: "train-reserve", TaskGroup: "hold",
		NodeID: "n1", ClientStatus: api.AllocClientStatusRunning, DesiredStatus: api.AllocDesiredStatusRun,
		AllocatedResources: &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{"hold": {Devices: []*api.AllocatedDeviceResource{
			{Vendor: contract.Vendor, Type: contract.SliceGPU, Name: "H100", DeviceIDs: []string{"GPU-n1-3"}}}}}}})
	s.g.reserver = &reserver{cur: &reservation{gang: JobKey{Namespace: "default", ID: "train"}, placeholder: JobKey{Namespace: "default", ID: "train-reserve"},
		due: time.Date(2026, 12, 7, 15, 0, 0, 0, time.UTC)}}
	for _, tc := range []struct {
		k    JobKey
		gpus int
		want string
	}{
		{JobKey{Namespace: "b", ID: "one"}, 1, "the reservation for default/train, due by 2026-12-07T15:00:00Z, holds GPUs it would fit on (1 on 1 of its nodes)"},
		{JobKey{Namespace: "b", ID: "two"}, 2, ""},
		{JobKey{Namespace: "default", ID: "train"}, 1, ""},
	} {
		job := heldJob(tc.k.Namespace, tc.k.ID, tc.gpus, false)
		spec, _, err := gang.ParseSpec(waitingCopy(job))
		if err != nil {
			t.Fatal(err)
		}
		if got := s.g.reservationHolds(s.snap, tc.k, job, spec); got != tc.want {
			t.Errorf("%s asking %d: %q, want %q", tc.k.ID, tc.gpus, got, tc.want)
		}
	}
	if kind := WaitKind("waiting", "reservation: the reservation for default/train, due by 2026-12-07T15:00:00Z"); kind != WaitReservation {
		t.Errorf("kind %q, want %q", kind, WaitReservation)
	}
}
