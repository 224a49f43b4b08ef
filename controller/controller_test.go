package controller

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/nomadview"
)

// lowJobController is a replica against a fake Nomad holding one batch
// job "low" at priority 30.
func lowJobController(t *testing.T) (*fakeNomad, *Controller) {
	t.Helper()
	f := newFakeNomad()
	f.jobs["low"] = &api.JobListStub{ID: "low", Name: "low", Namespace: "default", Type: "batch", Priority: 30, JobModifyIndex: 1, Status: "running"}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	cl, err := api.NewClient(&api.Config{Address: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	return f, New(cl, Config{Namespace: "default", Tick: time.Second}, hclog.NewNullLogger(), NewMetrics())
}

// A jobs list older than the controller's own last write still shows the
// priority before it: that is no hand change. (The watches answer apart,
// and the jobs list may lag a write by a tick.)
func TestApplyTakesNoStaleListForAHandChange(t *testing.T) {
	f, c := lowJobController(t)
	k := JobKey{Namespace: "default", ID: "low"}
	ledger := NewLedger(nil)
	e := ledger.Edit(k, 30)
	e.Begin(Raise{Key: "preemption/v1", Priority: 90, Since: t0, Until: t0.Add(time.Minute)})
	e.Handled = []string{"v1"} // still listed: the entry outlives the raise
	listed := func(priority int, index uint64) View {
		stub := *f.jobs["low"]
		stub.Priority, stub.JobModifyIndex = priority, index
		return ViewOf(&nomadview.Snapshot{Jobs: map[JobKey]*api.JobListStub{k: &stub}})
	}
	ctx := context.Background()
	steps := []struct {
		name    string
		at      time.Duration
		view    View
		nomad   int // the job's priority in Nomad after the step
		ownWant int
	}{
		{"raised", time.Second, listed(30, 1), 90, 30},
		{"restored", 2 * time.Minute, listed(90, 2), 30, 30},
		{"a list from before the restore", 2*time.Minute + time.Second, listed(90, 2), 30, 30},
		{"the list caught up", 2*time.Minute + 2*time.Second, listed(30, 3), 30, 30},
		{"changed by hand", 2*time.Minute + 3*time.Second, listed(50, 4), 30, 50},
	}
	for _, s := range steps {
		now := t0.Add(s.at)
		st := ledger.Stored(k)
		if st == nil {
			t.Fatalf("%s: the entry is gone", s.name)
		}
		st.Expire(now)
		if err := c.apply(ctx, now, s.view, ledger, k); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if p := f.jobs["low"].Priority; p != s.nomad && s.name != "changed by hand" {
			t.Errorf("%s: the job is at %d in Nomad, want %d", s.name, p, s.nomad)
		}
		if st.Own != s.ownWant {
			t.Errorf("%s: own priority %d, want %d", s.name, st.Own, s.ownWant)
		}
	}
}

// A write that loses its check-and-set (another writer moved the entry)
// reads the entry again, and the next tick writes from there; the job is
// not forgotten for the rest of the lead.
func TestApplyReloadsAfterAConflict(t *testing.T) {
	f, c := lowJobController(t)
	c.now = func() time.Time { return t0.Add(time.Second) }
	ctx := context.Background()
	k := JobKey{Namespace: "default", ID: "low"}
	stored := Stored{Entry: NewEntry("default", "low", 30)}
	stored.Begin(Raise{Key: "preemption/v1", Priority: 90, Since: t0, Until: t0.Add(time.Minute)})
	if err := c.store.Put(ctx, &stored); err != nil {
		t.Fatal(err)
	}
	stale := stored
	stale.Raises = nil
	stale.Index = stored.Index - 1
	ledger := NewLedger([]Stored{stale})
	ledger.Edit(k, 30)
	view := ViewOf(&nomadview.Snapshot{Jobs: map[JobKey]*api.JobListStub{k: f.jobs["low"]}})

	c.step(ctx, view, ledger) // its write loses: the entry is read again
	if st := ledger.Stored(k); st == nil || st.Index != stored.Index || len(st.Raises) != 1 {
		t.Fatalf("after the conflict the entry is %+v, want the stored one (index %d, one raise)", st, stored.Index)
	}
	c.step(ctx, view, ledger)
	if p := f.jobs["low"].Priority; p != 90 {
		t.Errorf("the job is at %d after the next tick, want 90 (the stored raise)", p)
	}
}

// A leader that dies while it raises or restores a job's priority leaves
// the ledger saying what it was writing; the next leader, loading the
// ledger, tells that write from a change by hand, so the raised priority
// never becomes the job's own: the job is restored to its own once the
// raise is over, whether the dead leader's write landed or not.
func TestNextLeaderRestoresTheOwnPriorityAfterALeaderDiedWriting(t *testing.T) {
	const own, raised = 30, 90
	k := JobKey{Namespace: "default", ID: "low"}
	raiseAt, restoreAt := t0.Add(time.Second), t0.Add(2*time.Minute)
	tests := []struct {
		name string
		// dies is when the first leader dies: at its raise or at its
		// restore, with the write lost or landed but unanswered.
		dies  time.Time
		fault registerFault
		// nomad is the job's priority in Nomad that it leaves.
		nomad int
	}{
		{"died before its restore landed", restoreAt, registerLost, raised},
		{"died after its restore landed, before it heard", restoreAt, registerUnanswered, own},
		{"died before its raise landed", raiseAt, registerLost, own},
		{"died after its raise landed, before it heard", raiseAt, registerUnanswered, raised},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, first := lowJobController(t)
			ctx := context.Background()
			view := func() View {
				f.mu.Lock()
				defer f.mu.Unlock()
				stub := *f.jobs["low"]
				return ViewOf(&nomadview.Snapshot{Jobs: map[JobKey]*api.JobListStub{k: &stub}})
			}
			priority := func() int {
				f.mu.Lock()
				defer f.mu.Unlock()
				return f.jobs["low"].Priority
			}
			// The first leader protects the job for a minute, then
			// dies at its write at tt.dies.
			ledger := NewLedger(nil)
			ledger.Edit(k, own).Begin(Raise{Key: "preemption/v1", Priority: raised, Since: t0, Until: t0.Add(time.Minute)})
			for _, at := range []time.Time{raiseAt, restoreAt} {
				if at == tt.dies {
					f.mu.Lock()
					f.registerFault = tt.fault
					f.mu.Unlock()
				}
				first.now = func() time.Time { return at }
				first.step(ctx, view(), ledger)
				if at == tt.dies {
					break
				}
			}
			f.mu.Lock()
			f.registerFault = registerOK
			f.mu.Unlock()
			if p := priority(); p != tt.nomad {
				t.Fatalf("the first leader left the job at %d, want %d", p, tt.nomad)
			}

			// The next leader loads the ledger and runs on.
			next := New(first.api, first.cfg, hclog.NewNullLogger(), NewMetrics())
			stored, err := next.store.Load(ctx)
			if err != nil {
				t.Fatal(err)
			}
			ledger = NewLedger(stored)
			for _, at := range []time.Time{tt.dies.Add(time.Second), restoreAt.Add(time.Second), restoreAt.Add(2 * time.Second)} {
				next.now = func() time.Time { return at }
				next.step(ctx, view(), ledger)
				if st := ledger.Stored(k); st != nil && st.Own != own {
					t.Fatalf("at %s the ledger takes %d for the job's own priority, want %d", at.Sub(t0), st.Own, own)
				}
			}
			if p := priority(); p != own {
				t.Errorf("the job is at %d once the raise is over, want its own %d", p, own)
			}
		})
	}
}
