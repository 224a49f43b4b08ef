package controller

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/nomadview"
)

// backfillCase is bigJobCase with its reservation made (n0000 kept for
// "big", due in 10 minutes) and its placeholder holding 3 of the node's
// 4 GPUs, and a 1-GPU batch job "small" queued behind it, predicted to
// run runtime (0: no prediction).
func backfillCase(t *testing.T, runtime time.Duration) (*Gangs, *fakeGangNomad, *nomadview.Snapshot, JobKey, time.Time) {
	t.Helper()
	ctx := context.Background()
	g, n, snap, _, now := bigJobCase(t)
	g.Step(ctx, now, snap, specsOf(nil), n)
	if len(n.registered) != 1 {
		t.Fatalf("no reservation made: placeholders %d", len(n.registered))
	}
	placeholderHolds(snap, n.registered[0], []string{"n0000"})
	snap.Allocs = slices.DeleteFunc(snap.Allocs, func(a *api.AllocationListStub) bool { return a.ID == "hold-n0000-3" })
	queuedJob(snap, "small", "nvidia/gpu", 1)
	small := JobKey{Namespace: "default", ID: "small"}
	spec := snap.Specs[small]
	spec.Type, spec.Priority = new(api.JobTypeBatch), new(40)
	g.reserver.runtimes = func(*nomadview.Snapshot, time.Time) map[groupKey]time.Duration {
		if runtime == 0 {
			return nil
		}
		return map[groupKey]time.Duration{{small, "g"}: runtime}
	}
	n.fits = true
	return g, n, snap, small, now
}

// movable makes job k opt in to moves, its GPU task checkpointing on the
// gpu driver.
func movable(snap *nomadview.Snapshot, k JobKey) {
	spec := snap.Specs[k]
	spec.Meta = map[string]string{MetaMovable: "true"}
	task := spec.TaskGroups[0].Tasks[0]
	task.Driver, task.Config = contract.DriverName, map[string]any{contract.DriverCheckpointBlock: []map[string]any{{}}}
}

// While a reservation fills, a queued job that cannot delay it is raised
// onto the GPUs its placeholder holds, pinned to the kept node, when
// Nomad's plan places it preempting the placeholder only: one predicted
// to end before the reservation is due with the margin to spare, or one
// that checkpoints and opted in to moves. Others are left in the queue.
func TestBackfill(t *testing.T) {
	for _, tc := range []struct {
		name    string
		runtime time.Duration
		setup   func(*nomadview.Snapshot, *fakeGangNomad, JobKey)
		want    string // the decision's reason holds it; "" for none
		plans   int
	}{
		{"ends before due", 2 * time.Minute, nil, "predicted to run 2m0s, ending before the reservation is due in 9m0s", 1},
		{"ends before due, but not with the margin", 7 * time.Minute, nil, "", 0},
		{"no prediction", 0, nil, "", 0},
		{"no prediction, movable", 0, func(s *nomadview.Snapshot, _ *fakeGangNomad, k JobKey) { movable(s, k) }, "opted in to moves", 1},
		{"movable on another driver", 0, func(s *nomadview.Snapshot, _ *fakeGangNomad, k JobKey) {
			movable(s, k)
			s.Specs[k].TaskGroups[0].Tasks[0].Driver = "docker"
		}, "", 0},
		{"above the reserved work's priority", 2 * time.Minute, func(s *nomadview.Snapshot, _ *fakeGangNomad, _ JobKey) {
			s.Blocked[len(s.Blocked)-1].Priority = 60
		}, "", 0},
		{"a service", 2 * time.Minute, func(s *nomadview.Snapshot, _ *fakeGangNomad, k JobKey) { s.Specs[k].Type = new(api.JobTypeService) }, "", 0},
		{"asks more GPUs than the placeholder holds", 2 * time.Minute, func(s *nomadview.Snapshot, _ *fakeGangNomad, k JobKey) {
			s.Specs[k].TaskGroups[0].Tasks[0].Resources.Devices[0].Count = new(uint64(4))
		}, "", 0},
		{"its plan would preempt other work", 2 * time.Minute, func(_ *nomadview.Snapshot, n *fakeGangNomad, _ JobKey) {
			n.preempts = []*api.AllocationListStub{{ID: "other", Namespace: "default", JobID: "run-00001"}}
		}, "", 1},
		{"its plan does not place it", 2 * time.Minute, func(_ *nomadview.Snapshot, n *fakeGangNomad, _ JobKey) { n.fits = false }, "", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, n, snap, small, now := backfillCase(t, tc.runtime)
			if tc.setup != nil {
				tc.setup(snap, n, small)
			}
			plans := n.plans
			got := g.Step(context.Background(), now.Add(time.Minute), snap, specsOf(nil), n)
			if n.plans-plans != tc.plans {
				t.Errorf("plans %d, want %d", n.plans-plans, tc.plans)
			}
			if tc.want == "" {
				if len(got) != 0 || len(n.registered) != 1 {
					t.Fatalf("decisions %+v, registered %d; want none", got, len(n.registered))
				}
				// Refused by its plan: not planned again on the same GPUs.
				plans = n.plans
				g.Step(context.Background(), now.Add(2*time.Minute), snap, specsOf(nil), n)
				if n.plans != plans {
					t.Errorf("planned again on the same GPUs")
				}
				return
			}
			if len(got) != 1 || got[0].Kind != "backfilled" || got[0].Job != small || !strings.Contains(got[0].Reason, tc.want) || len(n.registered) != 2 {
				t.Fatalf("decisions %+v, registered %d; want small backfilled: %q", got, len(n.registered), tc.want)
			}
			raised := n.registered[1]
			if *raised.ID != "small" || *raised.Priority != 61 || len(raised.Constraints) != 1 || raised.Constraints[0].RTarget != "^(n0000)$" ||
				raised.Meta[contract.MetaReservationOwnPriority] != "40" {
				t.Errorf("raised: %s priority %d constraints %v meta %v; want small at 61 over the placeholder's 51, pinned to n0000, its own 40 kept",
					*raised.ID, *raised.Priority, raised.Constraints, raised.Meta)
			}
		})
	}
}

// A job backfilled as movable counts toward the reservation's GPUs: with
// the placeholder's 3 the node is full, and the handover's plan may
// preempt it with the placeholder (checkpointed, placed again by Nomad).
// One backfilled on its prediction does not count, and a handover plan
// preempting it is refused.
func TestBackfillMovableHandedOver(t *testing.T) {
	for _, tc := range []struct {
		name    string
		movable bool
		want    string
	}{{"movable", true, "reservation-raised"}, {"predicted", false, ""}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			g, n, snap, small, now := backfillCase(t, 2*time.Minute)
			if tc.movable {
				movable(snap, small)
			}
			if got := g.Step(ctx, now.Add(time.Minute), snap, specsOf(nil), n); len(got) != 1 || got[0].Kind != "backfilled" {
				t.Fatalf("decisions %+v; want small backfilled", got)
			}
			// Placed on the kept node's fourth GPU, its own priority back.
			snap.Blocked = snap.Blocked[:len(snap.Blocked)-1]
			snap.Allocs = append(snap.Allocs, &api.AllocationListStub{ID: "small-0", Namespace: "default", JobID: "small", TaskGroup: "g", NodeID: "n0000",
				ClientStatus: api.AllocClientStatusRunning, DesiredStatus: api.AllocDesiredStatusRun})
			n.preempts = []*api.AllocationListStub{{ID: "small-0", Namespace: "default", JobID: "small"}, {ID: "hold-n0000-0", Namespace: "default", JobID: "nomad-gpu-reserve-big"}}
			got := g.Step(ctx, now.Add(2*time.Minute), snap, specsOf(nil), n)
			if tc.want == "" {
				if len(got) != 0 || *n.registered[len(n.registered)-1].ID != "small" {
					t.Fatalf("decisions %+v; want the reservation still filling", got)
				}
				return
			}
			if len(got) != 1 || got[0].Kind != tc.want || *n.registered[len(n.registered)-1].ID != "big" {
				t.Fatalf("decisions %+v; want big handed the node over small", got)
			}
		})
	}
}
