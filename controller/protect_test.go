package controller

import (
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/nomadview"
)

// cluster is a hand-made snapshot: jobs by ID with their priority, and
// allocations.
type cluster struct {
	jobs   map[string]int
	stop   map[string]bool
	allocs []*api.AllocationListStub
}

func (c cluster) view() View {
	snap := &nomadview.Snapshot{Jobs: map[nomadview.JobKey]*api.JobListStub{}}
	for id, p := range c.jobs {
		snap.Jobs[JobKey{Namespace: "default", ID: id}] = &api.JobListStub{ID: id, Namespace: "default", Priority: p, Stop: c.stop[id], Status: "running"}
	}
	for _, a := range c.allocs {
		if a.ClientStatus == api.AllocClientStatusRunning || a.ClientStatus == api.AllocClientStatusPending {
			snap.Allocs = append(snap.Allocs, a)
		} else {
			snap.Finished = append(snap.Finished, a)
		}
	}
	return ViewOf(snap)
}

func alloc(id, job string, index uint64, status string) *api.AllocationListStub {
	return &api.AllocationListStub{ID: id, Namespace: "default", JobID: job, Name: job + ".g[0]", CreateIndex: index,
		ClientStatus: status, DesiredStatus: api.AllocDesiredStatusRun}
}

func preempted(a *api.AllocationListStub, by string) *api.AllocationListStub {
	a.PreemptedByAllocation, a.DesiredStatus, a.ClientStatus = by, api.AllocDesiredStatusEvict, api.AllocClientStatusComplete
	return a
}

// The protection's life on a job "low" (30) preempted by "high" (90):
// waiting while its replacement waits (no raise), in force once the
// replacement runs, over after the cooldown; a second look at the same
// preemption changes nothing.
func TestProtectorLifecycle(t *testing.T) {
	p := Protector{Cooldown: time.Minute}
	l := NewLedger(nil)
	low := JobKey{Namespace: "default", ID: "low"}
	jobs := map[string]int{"low": 30, "high": 90}
	victim := preempted(alloc("v1", "low", 10, ""), "h1")
	high := alloc("h1", "high", 11, api.AllocClientStatusRunning)
	waiting := cluster{jobs: jobs, allocs: []*api.AllocationListStub{victim, high}}

	steps := []struct {
		name  string
		at    time.Duration
		c     cluster
		want  int
		kinds []string
	}{
		{"preempted: waits unraised", 0, waiting, 30, []string{"protection-pending"}},
		{"seen again", time.Second, waiting, 30, nil},
		{"replacement pending", 2 * time.Second, cluster{jobs: jobs, allocs: []*api.AllocationListStub{victim, high, alloc("r1", "low", 12, api.AllocClientStatusPending)}}, 30, nil},
		{"replacement runs: raised", 3 * time.Second, cluster{jobs: jobs, allocs: []*api.AllocationListStub{victim, alloc("r1", "low", 12, api.AllocClientStatusRunning)}}, 90, []string{"protected"}},
		{"inside the cooldown", 62 * time.Second, cluster{jobs: jobs, allocs: []*api.AllocationListStub{victim, alloc("r1", "low", 12, api.AllocClientStatusRunning)}}, 90, nil},
		{"cooldown over", 63 * time.Second, cluster{jobs: jobs, allocs: []*api.AllocationListStub{victim, alloc("r1", "low", 12, api.AllocClientStatusRunning)}}, 30, []string{"protection-over"}},
	}
	for _, s := range steps {
		now := t0.Add(s.at)
		got := p.Step(now, s.c.view(), l)
		if !sameKinds(got, s.kinds) {
			t.Errorf("%s: decisions %+v, want kinds %v", s.name, got, s.kinds)
		}
		if w := l.Peek(low).Want(now); w != s.want {
			t.Errorf("%s: low wants %d, want %d (%+v)", s.name, w, s.want, l.Peek(low).Raises)
		}
	}
}

// Preempted anyway while protected: the raise goes at once (its
// replacement waits at its own priority), and a new protection waits for
// the next replacement, at the new preemptor's priority.
func TestProtectorPreemptedAnyway(t *testing.T) {
	p := Protector{Cooldown: time.Hour}
	l := NewLedger(nil)
	low := JobKey{Namespace: "default", ID: "low"}
	jobs := map[string]int{"low": 30, "high": 90, "top": 100}
	v1 := preempted(alloc("v1", "low", 10, ""), "h1")
	p.Step(t0, cluster{jobs: jobs, allocs: []*api.AllocationListStub{v1, alloc("h1", "high", 11, api.AllocClientStatusRunning)}}.view(), l)
	r1 := alloc("r1", "low", 12, api.AllocClientStatusRunning)
	p.Step(t0.Add(time.Second), cluster{jobs: jobs, allocs: []*api.AllocationListStub{v1, r1}}.view(), l)
	if w := l.Peek(low).Want(t0.Add(time.Second)); w != 90 {
		t.Fatalf("protected at %d, want 90", w)
	}
	preempted(r1, "t1")
	now := t0.Add(2 * time.Second)
	got := p.Step(now, cluster{jobs: jobs, allocs: []*api.AllocationListStub{v1, r1, alloc("t1", "top", 13, api.AllocClientStatusRunning)}}.view(), l)
	if !sameKinds(got, []string{"protection-dropped", "protection-pending"}) {
		t.Errorf("decisions %+v, want the raise dropped and a new protection pending", got)
	}
	if w := l.Peek(low).Want(now); w != 30 {
		t.Errorf("the replacement waits at %d, want its own 30", w)
	}
	r2 := alloc("r2", "low", 14, api.AllocClientStatusRunning)
	p.Step(now.Add(time.Second), cluster{jobs: jobs, allocs: []*api.AllocationListStub{v1, r1, r2}}.view(), l)
	if w := l.Peek(low).Want(now.Add(time.Second)); w != 100 {
		t.Errorf("the next replacement is protected at %d, want 100 (its new preemptor's)", w)
	}
}

// A waiting protection goes when its job is stopped or gone.
func TestProtectorJobStopped(t *testing.T) {
	for _, tt := range []struct {
		name string
		c    func(cluster) cluster
	}{
		{"stopped", func(c cluster) cluster { c.stop = map[string]bool{"low": true}; return c }},
		{"gone", func(c cluster) cluster { c.jobs = map[string]int{"high": 90}; return c }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := Protector{Cooldown: time.Minute}
			l := NewLedger(nil)
			c := cluster{jobs: map[string]int{"low": 30, "high": 90}, allocs: []*api.AllocationListStub{
				preempted(alloc("v1", "low", 10, ""), "h1"), alloc("h1", "high", 11, api.AllocClientStatusRunning)}}
			p.Step(t0, c.view(), l)
			got := p.Step(t0.Add(time.Second), tt.c(c).view(), l)
			if !sameKinds(got, []string{"protection-over"}) || len(l.Peek(JobKey{Namespace: "default", ID: "low"}).Raises) != 0 {
				t.Errorf("decisions %+v, raises %+v; want the protection over", got, l.Peek(JobKey{Namespace: "default", ID: "low"}).Raises)
			}
		})
	}
}

func sameKinds(got []Decision, want []string) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i].Kind != want[i] {
			return false
		}
	}
	return true
}

// The lists are watched apart: a preempted allocation seen finished
// before its preemptor (or its preemptor's job) is listed is looked at
// again on the next tick, not skipped for good.
func TestProtectorWaitsForThePreemptor(t *testing.T) {
	p := Protector{Cooldown: time.Minute}
	l := NewLedger(nil)
	jobs := map[string]int{"low": 30, "high": 90}
	victim := preempted(alloc("v1", "low", 10, ""), "h1")
	if got := p.Step(t0, cluster{jobs: jobs, allocs: []*api.AllocationListStub{victim}}.view(), l); len(got) != 0 {
		t.Fatalf("decisions %+v before the preemptor is listed, want none", got)
	}
	// Its allocation listed, its job not yet.
	early := cluster{jobs: map[string]int{"low": 30}, allocs: []*api.AllocationListStub{victim, alloc("h1", "high", 11, api.AllocClientStatusRunning)}}
	if got := p.Step(t0, early.view(), l); len(got) != 0 {
		t.Fatalf("decisions %+v before the preemptor's job is listed, want none", got)
	}
	got := p.Step(t0.Add(time.Second), cluster{jobs: jobs, allocs: []*api.AllocationListStub{victim, alloc("h1", "high", 11, api.AllocClientStatusRunning)}}.view(), l)
	if !sameKinds(got, []string{"protection-pending"}) {
		t.Errorf("decisions %+v once the preemptor is listed, want the protection pending", got)
	}
}
