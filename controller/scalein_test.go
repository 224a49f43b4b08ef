package controller

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/nomadview"
)

var scaleInBudget = MoveConfig{PerHour: 4, PerJobPerDay: 2, Settle: time.Minute, HoldMax: 30 * time.Second,
	ScaleIn: ScaleInConfig{Groups: []NodeGroup{{Pool: "default"}}, Quiet: 5 * time.Minute, MinNodes: 1, Wait: 10 * time.Minute}}

// scaleInCluster is moveCluster without its queued job: two nodes of 4
// GPUs, each half full of movable checkpointing work.
func scaleInCluster() (*nomadview.Snapshot, map[JobKey]*api.Job) {
	s, specs := moveCluster(map[string]string{MetaMovable: "true"})
	s.Blocked = nil
	delete(s.Jobs, JobKey{Namespace: "default", ID: "hpc"})
	return s, specs
}

// ScaleIn empties the first quiet node whose work all moves: the node it
// picks, and every reason it picks none.
func TestMoverScaleIn(t *testing.T) {
	start := time.Unix(10_000, 0)
	for _, c := range []struct {
		name  string
		cfg   func(*MoveConfig)
		setup func(s *nomadview.Snapshot, specs map[JobKey]*api.Job)
		after time.Duration // since the nodes were first seen
		want  []string      // allocations moved, sorted; nil: no plan
	}{
		{name: "quiet for Quiet: n1's two move onto n2", after: 6 * time.Minute,
			want: []string{"alloc-train-n1-0", "alloc-train-n1-1"}},
		{name: "not quiet for Quiet yet", after: 4 * time.Minute},
		{name: "the pool is not a scale-in pool", after: 6 * time.Minute,
			cfg: func(c *MoveConfig) { c.ScaleIn.Groups = []NodeGroup{{Pool: "gpu"}} }},
		{name: "a group of the pool's burst class: n2 alone, at the minimum", after: 6 * time.Minute,
			setup: func(s *nomadview.Snapshot, _ map[JobKey]*api.Job) { s.Nodes[1].NodeClass = "gpu-burst" },
			cfg:   func(c *MoveConfig) { c.ScaleIn.Groups = []NodeGroup{{Pool: "default", Class: "gpu-burst"}} }},
		{name: "a group of the burst class of two nodes: n1 is base, n2 and n3 burst; n3 is emptied onto n2",
			after: 6 * time.Minute,
			setup: func(s *nomadview.Snapshot, _ map[JobKey]*api.Job) {
				n3 := layoutNode("n3", "whole", "whole", "whole", "whole")
				s.Nodes[1].NodeClass, n3.NodeClass = "gpu-burst", "gpu-burst"
				s.Nodes = append(s.Nodes, n3)
			},
			cfg:  func(c *MoveConfig) { c.ScaleIn.Groups = []NodeGroup{{Pool: "default", Class: "gpu-burst"}} },
			want: []string{}},
		{name: "the pool at its minimum", after: 6 * time.Minute,
			cfg: func(c *MoveConfig) { c.ScaleIn.MinNodes = 2 }},
		{name: "a queued allocation could use the nodes: nothing", after: 6 * time.Minute,
			setup: func(s *nomadview.Snapshot, _ map[JobKey]*api.Job) { queuedJob(s, "small", "nvidia/gpu", 1) }},
		{name: "a queued MPS share could use them too (the layouts relay a GPU)", after: 6 * time.Minute,
			setup: func(s *nomadview.Snapshot, _ map[JobKey]*api.Job) { queuedJob(s, "share", "nvidia/mps", 1) }},
		{name: "a queued ask for another GPU model cannot: n1 is emptied", after: 6 * time.Minute,
			setup: func(s *nomadview.Snapshot, _ map[JobKey]*api.Job) { queuedJob(s, "a100", "nvidia/gpu/A100", 1) },
			want:  []string{"alloc-train-n1-0", "alloc-train-n1-1"}},
		{name: "a queued ask of another datacenter cannot", after: 6 * time.Minute,
			setup: func(s *nomadview.Snapshot, _ map[JobKey]*api.Job) {
				queuedJob(s, "eu", "nvidia/gpu", 1)
				s.Specs[JobKey{Namespace: "default", ID: "eu"}].Datacenters = []string{"eu-*"}
			},
			want: []string{"alloc-train-n1-0", "alloc-train-n1-1"}},
		{name: "a job on n1 without checkpoints pins n1: n2 is emptied", after: 6 * time.Minute,
			setup: func(_ *nomadview.Snapshot, specs map[JobKey]*api.Job) {
				specs[JobKey{Namespace: "default", ID: "train-n1-0"}].TaskGroups[0].Tasks[0].Config = map[string]any{}
			},
			want: []string{"alloc-train-n2-0", "alloc-train-n2-1"}},
		{name: "a task without a GPU pins its node", after: 6 * time.Minute,
			setup: func(s *nomadview.Snapshot, _ map[JobKey]*api.Job) {
				s.Allocs = append(s.Allocs, &api.AllocationListStub{ID: "web", Namespace: "default", JobID: "web", JobType: api.JobTypeService,
					NodeID: "n1", ClientStatus: api.AllocClientStatusRunning, DesiredStatus: api.AllocDesiredStatusRun})
			},
			want: []string{"alloc-train-n2-0", "alloc-train-n2-1"}},
		{name: "a system job's allocation pins nothing", after: 6 * time.Minute,
			setup: func(s *nomadview.Snapshot, _ map[JobKey]*api.Job) {
				for _, n := range []string{"n1", "n2"} {
					s.Allocs = append(s.Allocs, &api.AllocationListStub{ID: "exporter-" + n, Namespace: "default", JobID: "exporter", JobType: api.JobTypeSystem,
						NodeID: n, ClientStatus: api.AllocClientStatusRunning, DesiredStatus: api.AllocDesiredStatusRun})
				}
			},
			want: []string{"alloc-train-n1-0", "alloc-train-n1-1"}},
		{name: "an ineligible node is neither emptied nor given work: nothing", after: 6 * time.Minute,
			setup: func(s *nomadview.Snapshot, _ map[JobKey]*api.Job) {
				s.Nodes[1].SchedulingEligibility = api.NodeSchedulingIneligible
			}},
		{name: "a node running nothing is marked without a move", after: 6 * time.Minute,
			setup: func(s *nomadview.Snapshot, _ map[JobKey]*api.Job) {
				s.Nodes = append(s.Nodes, layoutNode("n3", "whole", "whole", "whole", "whole"))
			},
			want: []string{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, specs := scaleInCluster()
			if c.setup != nil {
				c.setup(s, specs)
			}
			cfg := scaleInBudget
			if c.cfg != nil {
				c.cfg(&cfg)
			}
			m := NewMover(cfg, nil, hclog.NewNullLogger())
			m.noteWanted(start, s)
			now := start.Add(c.after)
			m.noteWanted(now, s)
			p, ok := m.ScaleIn(context.Background(), now, ViewOf(s), NewLedger(nil), specsOf(specs), nil)
			moved := []string{}
			for _, mv := range p.Moves {
				moved = append(moved, mv.Alloc.ID)
			}
			slices.Sort(moved)
			if ok != (c.want != nil) || ok && !slices.Equal(moved, c.want) {
				t.Errorf("ScaleIn = %v, %v (moves %v); want moves %v", p, ok, moved, c.want)
			}
			if ok && !m.Holding(now, p).Remove {
				t.Error("a scale-in plan's hold is not for removal")
			}
		})
	}
}

// A hold for removal is never ended by Release (the moved jobs placed,
// or HoldMax passed), only by scaleInHold; the moved jobs' placement is
// what movedPlaced reads.
func TestScaleInHoldRelease(t *testing.T) {
	now := time.Unix(10_000, 0)
	s, specs := scaleInCluster()
	m := NewMover(scaleInBudget, nil, hclog.NewNullLogger())
	m.noteWanted(now.Add(-time.Hour), s)
	p, ok := m.ScaleIn(context.Background(), now, ViewOf(s), NewLedger(nil), specsOf(specs), nil)
	if !ok {
		t.Fatal("no plan")
	}
	h := m.Holding(now, p)
	if got := moveReason(p, p.Moves[0]); !strings.HasSuffix(got, "to empty n1 for removal") {
		t.Errorf("reason = %q", got)
	}
	if movedPlaced(h, s) {
		t.Error("moved jobs placed before any replacement exists")
	}
	for _, mv := range p.Moves {
		s.Allocs = slices.DeleteFunc(s.Allocs, func(a *api.AllocationListStub) bool { return a.ID == mv.Alloc.ID })
		s.Allocs = append(s.Allocs, &api.AllocationListStub{ID: mv.Alloc.ID + "-2", Namespace: "default", JobID: mv.Alloc.Job, NodeID: "n2",
			ClientStatus: api.AllocClientStatusRunning, CreateTime: now.Add(time.Second).UnixNano()})
	}
	if !movedPlaced(h, s) || len(s.WorkOn("n1")) != 0 {
		t.Errorf("moved jobs placed %v, n1 runs %d; want placed, nothing", movedPlaced(h, s), len(s.WorkOn("n1")))
	}
	if m.Release(now.Add(time.Hour), s) {
		t.Error("Release ended a hold for removal")
	}
	if _, ok := m.ScaleIn(context.Background(), now, ViewOf(s), NewLedger(nil), specsOf(specs), nil); ok {
		t.Error("a second node emptied while one is held for removal")
	}
}

// EmptiedForRemoval reads the controller's drain mark, and only while the
// node is ineligible.
func TestEmptiedForRemoval(t *testing.T) {
	marked := &api.DrainMetadata{Meta: map[string]string{contract.DrainMetaScaleIn: "emptied"}}
	for _, c := range []struct {
		name        string
		eligibility string
		drain       *api.DrainMetadata
		want        bool
	}{
		{"marked, ineligible", api.NodeSchedulingIneligible, marked, true},
		{"marked, made eligible again", api.NodeSchedulingEligible, marked, false},
		{"drained by someone else", api.NodeSchedulingIneligible, &api.DrainMetadata{Meta: map[string]string{"message": "maintenance"}}, false},
		{"never drained", api.NodeSchedulingIneligible, nil, false},
	} {
		n := &api.NodeListStub{SchedulingEligibility: c.eligibility, LastDrain: c.drain}
		if got := nomadview.EmptiedForRemoval(n); got != c.want {
			t.Errorf("%s: EmptiedForRemoval = %v, want %v", c.name, got, c.want)
		}
	}
}

// A hold for removal, tick by tick: gone, drained by the autoscaler,
// wanted by the queue, out of time, marked once empty, else waiting.
// A node first seen (a new leader) is no reason to give it up.
func TestNextRemovalStep(t *testing.T) {
	since := time.Unix(10_000, 0)
	marked := &api.DrainMetadata{Meta: map[string]string{contract.DrainMetaScaleIn: "emptied"}}
	emptied := func(s *nomadview.Snapshot) {
		s.Nodes[0].SchedulingEligibility = api.NodeSchedulingIneligible
		s.Allocs = slices.DeleteFunc(s.Allocs, func(a *api.AllocationListStub) bool { return a.NodeID == "n1" })
		for _, j := range []string{"train-n1-0", "train-n1-1"} {
			s.Allocs = append(s.Allocs, &api.AllocationListStub{ID: j + "-2", Namespace: "default", JobID: j, NodeID: "n2",
				ClientStatus: api.AllocClientStatusRunning, CreateTime: since.Add(time.Second).UnixNano()})
		}
	}
	for _, c := range []struct {
		name   string
		after  time.Duration
		marked bool
		setup  func(*nomadview.Snapshot)
		want   removalStep
		why    string
	}{
		{name: "the moved jobs not placed yet: wait", after: time.Second, want: removalWait},
		{name: "placed elsewhere, the node empty: mark", after: 5 * time.Second, setup: emptied, want: removalMark},
		{name: "marked: wait for the autoscaler", after: 5 * time.Second, marked: true, setup: emptied, want: removalWait},
		{name: "the autoscaler drains it: wait, past Wait too", after: time.Hour, marked: true,
			setup: func(s *nomadview.Snapshot) {
				emptied(s)
				s.Nodes[0].Drain, s.Nodes[0].LastDrain = true, &api.DrainMetadata{Meta: map[string]string{}}
			}, want: removalWait},
		{name: "gone: forget", after: time.Minute, marked: true,
			setup: func(s *nomadview.Snapshot) { s.Nodes = s.Nodes[1:] }, want: removalGone},
		{name: "down: forget", after: time.Minute, marked: true,
			setup: func(s *nomadview.Snapshot) { s.Nodes[0].Status = api.NodeStatusDown }, want: removalGone},
		{name: "a queued allocation could use it: give up", after: time.Minute, marked: true,
			setup: func(s *nomadview.Snapshot) {
				emptied(s)
				s.Nodes[0].LastDrain = marked
				queuedJob(s, "small", "nvidia/gpu", 1)
			}, want: removalGiveUp, why: "a queued allocation could use it"},
		{name: "not removed within Wait: give up", after: 11 * time.Minute, marked: true, setup: emptied,
			want: removalGiveUp, why: "the autoscaler did not remove it within 10m0s"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, _ := scaleInCluster()
			if c.setup != nil {
				c.setup(s)
			}
			h := Hold{Node: "n1", NodeName: "n1", Since: since, Remove: true, Marked: c.marked,
				Moved: []string{"default/train-n1-0", "default/train-n1-1"}}
			got, why := nextRemovalStep(since.Add(c.after), h, s, scaleInBudget.ScaleIn.Wait)
			if got != c.want || why != c.why {
				t.Errorf("nextRemovalStep = %v %q, want %v %q", got, why, c.want, c.why)
			}
		})
	}
}
