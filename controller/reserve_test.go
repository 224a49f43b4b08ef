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
	"github.com/nomad-gpu/nomad-gpu/nomadview"
)

// reserveCase is three nodes of 4 GPUs, every GPU held by a running
// 1-GPU allocation predicted to end in 10 minutes on n0000, 20 on n0001
// and an hour on n0002, and a gang of two 4-GPU members waiting.
func reserveCase(t *testing.T) (*Gangs, *fakeGangNomad, *nomadview.Snapshot, map[JobKey]*api.Job, *float64, time.Time) {
	t.Helper()
	snap, specs := gangBenchSnapshot(3, 4, 12, 0, 0, 1)
	now := snap.Taken
	ends := map[string]time.Time{}
	for i, a := range snap.Allocs {
		ends[a.ID] = now.Add([]time.Duration{10 * time.Minute, 20 * time.Minute, time.Hour}[i%3])
	}
	cfg := DefaultGangConfig()
	cfg.Reserve = &ReserveConfig{MaxHold: time.Hour}
	g, n := NewGangs(cfg, hclog.NewNullLogger()), &fakeGangNomad{fits: false}
	g.reserver.ends = func(*nomadview.Snapshot, time.Time) map[string]time.Time { return ends }
	idle := new(float64)
	g.CountIdle(func(s float64) { *idle += s })
	return g, n, snap, specs, idle, now
}

// placeholderHolds puts the placeholder's allocations on the snapshot,
// running, in place of the allocations it waited for on its nodes.
func placeholderHolds(snap *nomadview.Snapshot, job *api.Job, nodes []string) {
	var keep []*api.AllocationListStub
	for _, a := range snap.Allocs {
		if !slices.Contains(nodes, a.NodeID) {
			keep = append(keep, a)
		}
	}
	k := JobKey{Namespace: *job.Namespace, ID: *job.ID}
	snap.Jobs[k] = &api.JobListStub{ID: k.ID, Namespace: k.Namespace, Type: api.JobTypeBatch, Priority: *job.Priority, Meta: job.Meta}
	for _, node := range nodes {
		for i := range 4 {
			keep = append(keep, &api.AllocationListStub{ID: fmt.Sprintf("hold-%s-%d", node, i), Namespace: k.Namespace, JobID: k.ID, TaskGroup: "hold",
				NodeID: node, ClientStatus: api.AllocClientStatusRunning, DesiredStatus: api.AllocDesiredStatusRun})
		}
	}
	snap.Allocs = keep
}

// The gang at the head of the queue, refused by Nomad's plan, gets the
// two nodes predicted to free soonest, kept by a placeholder one above
// its priority pinned to them; once the placeholder holds every GPU the
// members need, it is stopped and the gang admitted in the same tick,
// and the GPU-seconds it held idle are counted.
func TestReservationKeepsNodesAndAdmits(t *testing.T) {
	g, n, snap, specs, idle, now := reserveCase(t)
	ctx := context.Background()
	g.Step(ctx, now, snap, specsOf(specs), n) // planned, refused
	got := g.Step(ctx, now.Add(time.Minute), snap, specsOf(specs), n)
	if len(n.registered) != 1 || !slices.ContainsFunc(got, func(d Decision) bool { return d.Kind == "reserved" }) {
		t.Fatalf("decisions %v, placeholders %d; want one reserved", kinds(got), len(n.registered))
	}
	ph := n.registered[0]
	tg := ph.TaskGroups[0]
	if *ph.ID != contract.ReservationJobPrefix+"gang-000" || *ph.Priority != 51 || *tg.Count != 8 || *tg.Tasks[0].Resources.Devices[0].Count != 1 ||
		ph.Constraints[0].RTarget != "^(n0000|n0001)$" || ph.Meta[contract.MetaReservationFor] != "gang-000" {
		t.Fatalf("placeholder %s priority %d count %d constraint %+v meta %v", *ph.ID, *ph.Priority, *tg.Count, *ph.Constraints[0], ph.Meta)
	}
	if r := got[slices.IndexFunc(got, func(d Decision) bool { return d.Kind == "reserved" })].Reason; !strings.Contains(r, "nodes n0000, n0001 kept for its 2 members of 4 GPUs; expected free in 19m0s") {
		t.Errorf("reason %q", r)
	}

	placeholderHolds(snap, ph, []string{"n0000", "n0001"})
	n.fits = true
	got = g.Step(ctx, now.Add(2*time.Minute), snap, specsOf(specs), n)
	if !slices.Equal(kinds(got), []string{"gang-admitted", "reservation-ended"}) || len(n.deregistered) != 0 || len(n.registered) != 2 {
		t.Fatalf("full: decisions %v, registered %d, deregistered %v; want the gang admitted, registered raised, the placeholder kept", kinds(got), len(n.registered), n.deregistered)
	}
	raised := n.registered[1]
	if *raised.ID != "gang-000" || *raised.Priority != 61 || *raised.TaskGroups[0].Count != 2 || raised.Meta[contract.MetaReservationOwnPriority] != "50" {
		t.Fatalf("the gang registered as %s priority %d count %d meta %v; want gang-000 at 61 over the placeholder's 51, its 2 members, its own 50 kept",
			*raised.ID, *raised.Priority, *raised.TaskGroups[0].Count, raised.Meta)
	}
	if *idle != 8*60 {
		t.Errorf("idle GPU-seconds %g, want 8 GPUs × 60 s", *idle)
	}

	// Both members placed: the placeholder goes, the gang's own priority
	// comes back.
	k := JobKey{Namespace: "default", ID: "gang-000"}
	specs[k] = raised
	for i := range 2 {
		m := member(i, api.AllocClientStatusRunning)
		m.JobID, m.Name, m.NodeID, m.CreateIndex = "gang-000", fmt.Sprintf("gang-000.worker[%d]", i), fmt.Sprintf("n000%d", i), 100
		snap.Allocs = append(snap.Allocs, m)
	}
	got = g.Step(ctx, now.Add(3*time.Minute), snap, specsOf(specs), n)
	if !slices.Equal(n.deregistered, []string{*ph.ID}) || !slices.Contains(kinds(got), "restored") || g.reserver.cur != nil {
		t.Fatalf("placed: decisions %v, deregistered %v", kinds(got), n.deregistered)
	}
	back := n.registered[len(n.registered)-1]
	if *back.Priority != 50 || back.Meta[contract.MetaReservationOwnPriority] != "50" || *back.TaskGroups[0].Count != 2 {
		t.Errorf("restored as priority %d meta %v count %d", *back.Priority, back.Meta, *back.TaskGroups[0].Count)
	}
}

// Where the raised gang's plan would preempt more than the placeholder,
// the leader stops the placeholder and admits the gang as it is.
func TestReservationRacesWhenTheRaiseWouldPreemptOthers(t *testing.T) {
	g, n, snap, specs, _, now := reserveCase(t)
	ctx := context.Background()
	g.Step(ctx, now, snap, specsOf(specs), n)
	g.Step(ctx, now.Add(time.Minute), snap, specsOf(specs), n)
	placeholderHolds(snap, n.registered[0], []string{"n0000", "n0001"})
	n.fits, n.preempts = true, []*api.AllocationListStub{{ID: "other", JobID: "run-00002", Namespace: "default"}}
	got := g.Step(ctx, now.Add(2*time.Minute), snap, specsOf(specs), n)
	if !slices.Equal(kinds(got), []string{"gang-admitted", "reservation-ended"}) || len(n.deregistered) != 1 || len(n.registered) != 1 {
		t.Fatalf("decisions %v, registered %d, deregistered %v; want the placeholder stopped and the gang scaled", kinds(got), len(n.registered), n.deregistered)
	}
}

// A reservation held MaxHold without filling is given up, and its gang is
// not kept again for as long; one whose gang leaves the queue ends.
func TestReservationEnds(t *testing.T) {
	for _, tc := range []struct {
		name  string
		after time.Duration
		gone  bool
		kind  string
	}{{"expired", time.Hour + 2*time.Minute, false, "reservation-expired"}, {"the gang left", 2 * time.Minute, true, "reservation-ended"}} {
		g, n, snap, specs, _, now := reserveCase(t)
		ctx := context.Background()
		g.Step(ctx, now, snap, specsOf(specs), n)
		g.Step(ctx, now.Add(time.Minute), snap, specsOf(specs), n)
		k := JobKey{Namespace: "default", ID: "gang-000"}
		if tc.gone {
			delete(snap.Jobs, k)
		}
		got := g.Step(ctx, now.Add(tc.after), snap, specsOf(specs), n)
		if !slices.Contains(kinds(got), tc.kind) || len(n.deregistered) != 1 || g.reserver.cur != nil {
			t.Errorf("%s: decisions %v, deregistered %v", tc.name, kinds(got), n.deregistered)
			continue
		}
		if !tc.gone {
			g.Step(ctx, now.Add(tc.after+2*time.Minute), snap, specsOf(specs), n)
			if len(n.registered) != 1 {
				t.Errorf("%s: kept again %d times while resting", tc.name, len(n.registered)-1)
			}
		}
	}
}

// A placeholder no reservation of this leader holds (a dead leader's) is
// stopped, one a tick.
func TestReservationDropsOrphanPlaceholders(t *testing.T) {
	g, n, snap, specs, _, now := reserveCase(t)
	for _, id := range []string{"a", "b"} {
		k := JobKey{Namespace: "default", ID: contract.ReservationJobPrefix + id}
		snap.Jobs[k] = &api.JobListStub{ID: k.ID, Namespace: "default", Type: api.JobTypeBatch, Meta: map[string]string{contract.MetaReservationFor: id}}
	}
	got := g.Step(context.Background(), now, snap, specsOf(specs), n)
	if len(n.deregistered) != 1 || !slices.Contains(kinds(got), "reservation-ended") {
		t.Fatalf("decisions %v, deregistered %v; want one placeholder stopped this tick", kinds(got), n.deregistered)
	}
}

// A gang whose placeholder is within ten of Nomad's highest priority is
// not raised over it: the placeholder is stopped and the gang admitted as
// it is.
func TestReservationNoRaiseAboveTheHighestPriority(t *testing.T) {
	g, n, snap, specs, _, now := reserveCase(t)
	specs[JobKey{Namespace: "default", ID: "gang-000"}].Priority = new(95)
	ctx := context.Background()
	g.Step(ctx, now, snap, specsOf(specs), n)
	g.Step(ctx, now.Add(time.Minute), snap, specsOf(specs), n)
	if len(n.registered) != 1 || *n.registered[0].Priority != 96 {
		t.Fatalf("placeholders %d; want one at 96", len(n.registered))
	}
	placeholderHolds(snap, n.registered[0], []string{"n0000", "n0001"})
	n.fits = true
	got := g.Step(ctx, now.Add(2*time.Minute), snap, specsOf(specs), n)
	if !slices.Equal(kinds(got), []string{"gang-admitted", "reservation-ended"}) || len(n.deregistered) != 1 || len(n.registered) != 1 {
		t.Fatalf("decisions %v, registered %d, deregistered %v; want the placeholder stopped and the gang scaled, not raised past 100", kinds(got), len(n.registered), n.deregistered)
	}
}

// A gang admitted on its reservation that waits again past the admission
// bound (rolled back, requeued) ends the reservation and its placeholder.
func TestReservationEndsWhenItsAdmittedGangWaitsAgain(t *testing.T) {
	g, n, snap, specs, _, now := reserveCase(t)
	ctx := context.Background()
	g.Step(ctx, now, snap, specsOf(specs), n)
	g.Step(ctx, now.Add(time.Minute), snap, specsOf(specs), n)
	placeholderHolds(snap, n.registered[0], []string{"n0000", "n0001"})
	n.fits = true
	g.Step(ctx, now.Add(2*time.Minute), snap, specsOf(specs), n) // admitted, raised
	if g.reserver.cur == nil || !g.reserver.cur.admitted {
		t.Fatal("not admitted on its reservation")
	}
	// The spec still reads count 0 (the register not seen yet): within the
	// bound the reservation stays.
	g.Step(ctx, now.Add(2*time.Minute+time.Second), snap, specsOf(specs), n)
	if g.reserver.cur == nil || len(n.deregistered) != 0 {
		t.Fatalf("ended within the admission bound: deregistered %v", n.deregistered)
	}
	got := g.Step(ctx, now.Add(3*time.Minute), snap, specsOf(specs), n)
	if g.reserver.cur != nil || len(n.deregistered) != 1 || !slices.Contains(kinds(got), "reservation-ended") {
		t.Fatalf("waiting again past the bound: decisions %v, deregistered %v", kinds(got), n.deregistered)
	}
}

// A gang with a locality gets the nodes of the one domain expected to
// free soonest with enough nodes: rack a has one node, so rack b's two,
// though n0000 (rack a) frees first; the handover pins the gang to them.
func TestReservationKeepsTheLocality(t *testing.T) {
	g, n, snap, specs, _, now := reserveCase(t)
	ctx := context.Background()
	k := JobKey{Namespace: "default", ID: "gang-000"}
	specs[k].Meta["nomad_gpu_gang_locality"] = "${meta.rack}"
	n.nodes = map[string]*api.Node{}
	for id, rack := range map[string]string{"n0000": "a", "n0001": "b", "n0002": "b"} {
		n.nodes[id] = &api.Node{ID: id, Meta: map[string]string{"rack": rack}}
	}
	g.Step(ctx, now, snap, specsOf(specs), n) // planned in one rack, refused
	got := g.Step(ctx, now.Add(time.Minute), snap, specsOf(specs), n)
	if len(n.registered) != 1 || !slices.Contains(kinds(got), "reserved") || n.registered[0].Constraints[0].RTarget != "^(n0001|n0002)$" {
		t.Fatalf("decisions %+v, placeholders %d; want rack b's n0001 and n0002 kept", got, len(n.registered))
	}
	placeholderHolds(snap, n.registered[0], []string{"n0001", "n0002"})
	n.fits = true
	g.Step(ctx, now.Add(2*time.Minute), snap, specsOf(specs), n)
	raised := n.registered[len(n.registered)-1]
	if *raised.ID != "gang-000" || !slices.ContainsFunc(raised.Constraints, func(c *api.Constraint) bool { return c.RTarget == "^(n0001|n0002)$" }) {
		t.Errorf("handover %s constraints %v; want the gang pinned to rack b's nodes", *raised.ID, raised.Constraints)
	}
}

// bigJobCase is reserveCase with the gang gone and, in its place, job
// "big" blocked: one allocation asking 4 whole GPUs.
func bigJobCase(t *testing.T) (*Gangs, *fakeGangNomad, *nomadview.Snapshot, JobKey, time.Time) {
	t.Helper()
	g, n, snap, _, _, now := reserveCase(t)
	delete(snap.Jobs, JobKey{Namespace: "default", ID: "gang-000"})
	queuedJob(snap, "big", "nvidia/gpu", 1)
	big := JobKey{Namespace: "default", ID: "big"}
	snap.Specs[big].TaskGroups[0].Tasks[0].Resources.Devices[0].Count = new(uint64(4))
	return g, n, snap, big, now
}

// A blocked job that is no gang, asking 4 whole GPUs, heads the queue:
// the node predicted to free soonest is kept for it by a placeholder one
// above its priority; once the placeholder holds the node, the job is
// registered ten above it and pinned to the node (Nomad's plan placing it
// over the placeholder only); once placed, it gets its own priority back
// and its pin taken off; its meta keeps the keys (a change would replace
// it). A job with an allocation placed is not reserved for.
func TestReservationForAJob(t *testing.T) {
	ctx := context.Background()
	g, n, snap, big, now := bigJobCase(t)
	spec := snap.Specs[big]
	spec.Priority, spec.JobModifyIndex = new(50), new(uint64(30))
	specs := map[JobKey]*api.Job{big: spec}

	got := g.Step(ctx, now, snap, specsOf(specs), n)
	if len(got) != 1 || got[0].Kind != "reserved" || len(n.registered) != 1 || *n.registered[0].Priority != 51 ||
		*n.registered[0].TaskGroups[0].Count != 4 || n.registered[0].Constraints[0].RTarget != "^(n0000)$" {
		t.Fatalf("decisions %+v, placeholders %d; want n0000 kept by a placeholder of 4 GPUs at 51", got, len(n.registered))
	}

	placeholderHolds(snap, n.registered[0], []string{"n0000"})
	n.fits = true
	got = g.Step(ctx, now.Add(time.Minute), snap, specsOf(specs), n)
	if len(got) != 1 || got[0].Kind != "reservation-raised" || len(n.registered) != 2 || len(n.deregistered) != 0 {
		t.Fatalf("full: decisions %+v, registered %d, deregistered %v; want the job handed the node", got, len(n.registered), n.deregistered)
	}
	raised := n.registered[1]
	pin := api.Constraint{LTarget: "${node.unique.id}", Operand: "regexp", RTarget: "^(n0000)$"}
	if *raised.Priority != 61 || len(raised.Constraints) != 1 || *raised.Constraints[0] != pin ||
		raised.Meta["nomad_gpu_reservation_own_priority"] != "50" || raised.Meta["nomad_gpu_reservation_pin"] != "^(n0000)$" {
		t.Fatalf("handed over: priority %d, constraints %v, meta %v", *raised.Priority, raised.Constraints, raised.Meta)
	}

	// Placed: Nomad lists it raised, with the keys in its meta.
	snap.Blocked = nil
	snap.Jobs[big] = &api.JobListStub{ID: "big", Namespace: "default", Type: api.JobTypeBatch, Priority: 61, Meta: raised.Meta}
	specs[big] = raised
	got = g.Step(ctx, now.Add(time.Minute+time.Second), snap, specsOf(specs), n)
	if !slices.Equal(kinds(got), []string{"reservation-ended", "restored"}) || len(n.deregistered) != 1 || g.reserver.cur != nil || len(n.registered) != 3 {
		t.Fatalf("placed: decisions %v, deregistered %v, registered %d; want the placeholder stopped and the job restored", kinds(got), n.deregistered, len(n.registered))
	}
	if back := n.registered[2]; *back.Priority != 50 || len(back.Constraints) != 0 || back.Meta["nomad_gpu_reservation_pin"] != "^(n0000)$" {
		t.Errorf("restored: priority %d, constraints %v, meta %v; want 50, no pin, the meta as it was", *back.Priority, back.Constraints, back.Meta)
	}

	// A job with one allocation placed and another waiting: none.
	g, n, snap, _, now = bigJobCase(t)
	snap.Allocs[0].JobID = "big"
	if got := g.Step(ctx, now, snap, specsOf(specs), n); len(got) != 0 || len(n.registered) != 0 {
		t.Errorf("a job partly placed: decisions %v, placeholders %d; want none", kinds(got), len(n.registered))
	}
}

// A handover whose plan would preempt other work than the placeholder's
// is not made: the placeholder is stopped and the job races the queue.
func TestReservationForAJobNotRaisedOverOthers(t *testing.T) {
	ctx := context.Background()
	g, n, snap, _, now := bigJobCase(t)
	g.Step(ctx, now, snap, specsOf(nil), n)
	placeholderHolds(snap, n.registered[0], []string{"n0000"})
	n.fits, n.preempts = true, []*api.AllocationListStub{{ID: "other", Namespace: "default", JobID: "run-00001"}}
	got := g.Step(ctx, now.Add(time.Minute), snap, specsOf(nil), n)
	if len(got) != 1 || got[0].Kind != "reservation-ended" || !strings.Contains(got[0].Reason, "preempt other work") ||
		len(n.registered) != 1 || len(n.deregistered) != 1 {
		t.Errorf("decisions %+v, registered %d, deregistered %v; want the placeholder stopped, no handover", got, len(n.registered), n.deregistered)
	}
}

// A handover is undone while its pin is on the job: the pin taken off,
// the own priority back; the meta keys stay, and once the pin is off a
// priority changed by hand is the job's (nothing to undo).
func TestUnreserved(t *testing.T) {
	job := gangSpecJob(0)
	job.Priority = new(50)
	own := &api.Constraint{LTarget: "${attr.kernel.name}", Operand: "=", RTarget: "linux"}
	job.Constraints = []*api.Constraint{own}
	handed := handover(job, 50, 61, []string{"n1", "n2"})
	for _, tc := range []struct {
		name     string
		job      *api.Job
		priority int
		same     bool
	}{
		{"handed over", handed, 50, false},
		{"never handed over", job, 50, true},
		{"restored, then changed by hand", func() *api.Job {
			back := *unreserved(handed)
			back.Priority = new(70)
			return &back
		}(), 70, true},
	} {
		got := unreserved(tc.job)
		if (got == tc.job) != tc.same || *got.Priority != tc.priority || len(got.Constraints) != 1 || *got.Constraints[0] != *own {
			t.Errorf("%s: priority %d, constraints %v, same %v; want %d, the job's own constraint only, same %v",
				tc.name, *got.Priority, got.Constraints, got == tc.job, tc.priority, tc.same)
		}
	}
	if handed.Meta[contract.MetaReservationPin] != "^(n1|n2)$" || unreserved(handed).Meta[contract.MetaReservationPin] != "^(n1|n2)$" {
		t.Errorf("meta %v: the pin's record stays", handed.Meta)
	}
}

// A gang rolled back while still handed over (raised, pinned to its
// reserved nodes) is admitted next at its own priority and unpinned: the
// admission registers that copy instead of scaling.
func TestGangAdmittedAgainUnreserved(t *testing.T) {
	job := gangSpecJob(0)
	job.Priority = new(50)
	handed := handover(job, 50, 61, []string{"n1", "n2"})
	g, n := NewGangs(DefaultGangConfig(), hclog.NewNullLogger()), &fakeGangNomad{fits: true}
	got := g.Step(context.Background(), time.Unix(1000, 0), gangSnapshot(), gangSpecs(handed), n)
	if len(got) != 1 || got[0].Kind != "gang-admitted" || len(n.scales) != 0 || len(n.registered) != 1 {
		t.Fatalf("decisions %v, scales %v, registered %d; want admitted by a registration", kinds(got), n.scales, len(n.registered))
	}
	if reg := n.registered[0]; *reg.Priority != 50 || len(reg.Constraints) != 0 || *reg.TaskGroups[0].Count != 2 {
		t.Errorf("registered at priority %d, constraints %v, count %d; want 50, unpinned, its 2 members", *reg.Priority, reg.Constraints, *reg.TaskGroups[0].Count)
	}
}
