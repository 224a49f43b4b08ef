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
	"github.com/nomad-gpu/nomad-gpu/controller/layoutplan"
	"github.com/nomad-gpu/nomad-gpu/nomadview"
)

// moveCluster is two nodes of 4 whole GPUs, n1 and n2, each running two
// 1-GPU allocations of jobs train-n1-0 … train-n2-1 (batch, on the gpu
// driver with a checkpoint block, meta as given), and a queued job hpc
// asking for 4 GPUs on one node.
func moveCluster(meta map[string]string) (*nomadview.Snapshot, map[JobKey]*api.Job) {
	s := emptySnapshot(layoutNode("n1", "whole", "whole", "whole", "whole"), layoutNode("n2", "whole", "whole", "whole", "whole"))
	specs := map[JobKey]*api.Job{}
	for _, node := range []string{"n1", "n2"} {
		for i := range 2 {
			id := fmt.Sprintf("train-%s-%d", node, i)
			k := JobKey{Namespace: "default", ID: id}
			s.Jobs[k] = &api.JobListStub{ID: id, Namespace: "default", Type: api.JobTypeBatch, Priority: 50, Meta: meta, JobModifyIndex: 7}
			specs[k] = &api.Job{ID: &id, JobModifyIndex: ptrTo(uint64(7)), TaskGroups: []*api.TaskGroup{{Name: ptrTo("g"), Tasks: []*api.Task{{
				Name: "t", Driver: contract.DriverName, Config: map[string]any{contract.DriverCheckpointBlock: []map[string]any{{}}},
				Resources: &api.Resources{Devices: []*api.RequestedDevice{{Name: "nvidia/gpu", Count: ptrTo(uint64(1))}}},
			}}}}}
			s.Allocs = append(s.Allocs, &api.AllocationListStub{ID: "alloc-" + id, Namespace: "default", JobID: id, TaskGroup: "g", NodeID: node,
				ClientStatus: api.AllocClientStatusRunning, DesiredStatus: api.AllocDesiredStatusRun, CreateTime: time.Unix(50, 0).UnixNano(),
				AllocatedResources: &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{"t": {Devices: []*api.AllocatedDeviceResource{
					{Vendor: contract.Vendor, Type: contract.SliceGPU, Name: "H100", DeviceIDs: []string{fmt.Sprintf("GPU-%s-%d", node, i)}}}}}}})
		}
	}
	queuedJob(s, "hpc", "nvidia/gpu", 1)
	s.Specs[JobKey{Namespace: "default", ID: "hpc"}].TaskGroups[0].Tasks[0].Resources.Devices[0].Count = ptrTo(uint64(4))
	return s, specs
}

func specsOf(m map[JobKey]*api.Job) JobSpecs {
	return func(_ context.Context, k JobKey) (*api.Job, error) {
		if j := m[k]; j != nil {
			return j, nil
		}
		return nil, fmt.Errorf("job %s not found", k.ID)
	}
}

var moveBudget = MoveConfig{PerHour: 1, PerJobPerDay: 2, Settle: time.Minute, HoldMax: 30 * time.Second}

func TestMoverStep(t *testing.T) {
	now := time.Unix(10_000, 0)
	optedIn := map[string]string{MetaMovable: "true"}
	for _, c := range []struct {
		name  string
		meta  map[string]string
		cfg   MoveConfig
		setup func(s *nomadview.Snapshot, specs map[JobKey]*api.Job, l *Ledger, m *Mover)
		want  []string // allocations moved; nil: no plan
	}{
		{name: "opted in by meta: two move off n1", meta: optedIn, cfg: moveBudget,
			want: []string{"alloc-train-n1-0", "alloc-train-n1-1"}},
		{name: "not opted in: nothing moves", cfg: moveBudget},
		{name: "opted in by node pool", cfg: MoveConfig{Pools: []string{"default"}, PerHour: 1, PerJobPerDay: 1, Settle: time.Minute},
			want: []string{"alloc-train-n1-0", "alloc-train-n1-1"}},
		{name: "opted out by meta in a movable pool", meta: map[string]string{MetaMovable: "false"},
			cfg: MoveConfig{Pools: []string{"default"}, PerHour: 1, PerJobPerDay: 1, Settle: time.Minute}},
		{name: "no checkpoint block on one job of each node: nothing moves", meta: optedIn, cfg: moveBudget,
			setup: func(_ *nomadview.Snapshot, specs map[JobKey]*api.Job, _ *Ledger, _ *Mover) {
				for _, id := range []string{"train-n1-0", "train-n2-1"} {
					specs[JobKey{Namespace: "default", ID: id}].TaskGroups[0].Tasks[0].Config = map[string]any{}
				}
			}},
		{name: "a task on another driver cannot be moved; the other node frees", meta: optedIn, cfg: moveBudget,
			setup: func(_ *nomadview.Snapshot, specs map[JobKey]*api.Job, _ *Ledger, _ *Mover) {
				specs[JobKey{Namespace: "default", ID: "train-n1-0"}].TaskGroups[0].Tasks[0].Driver = "docker"
			},
			want: []string{"alloc-train-n2-0", "alloc-train-n2-1"}},
		{name: "a service is not moved", meta: optedIn, cfg: moveBudget,
			setup: func(s *nomadview.Snapshot, _ map[JobKey]*api.Job, _ *Ledger, _ *Mover) {
				s.Jobs[JobKey{Namespace: "default", ID: "train-n1-1"}].Type = api.JobTypeService
			},
			want: []string{"alloc-train-n2-0", "alloc-train-n2-1"}},
		{name: "a gang's member is not moved", meta: optedIn, cfg: moveBudget,
			setup: func(s *nomadview.Snapshot, _ map[JobKey]*api.Job, _ *Ledger, _ *Mover) {
				s.Jobs[JobKey{Namespace: "default", ID: "train-n1-1"}].Meta = map[string]string{MetaMovable: "true", contract.MetaGang: "true"}
			},
			want: []string{"alloc-train-n2-0", "alloc-train-n2-1"}},
		{name: "protected jobs are not moved", meta: optedIn, cfg: moveBudget,
			setup: func(s *nomadview.Snapshot, _ map[JobKey]*api.Job, l *Ledger, _ *Mover) {
				for _, id := range []string{"train-n1-1", "train-n2-0"} {
					l.Edit(JobKey{Namespace: "default", ID: id}, 50).Begin(Raise{Key: "min-runtime/x", Priority: 100,
						Reason: "inside its minimum runtime", Since: now.Add(-time.Minute), Until: now.Add(time.Hour)})
				}
			}},
		{name: "a consolidation this hour spends a budget of one", meta: optedIn, cfg: moveBudget,
			setup: func(_ *nomadview.Snapshot, _ map[JobKey]*api.Job, _ *Ledger, m *Mover) {
				m.Record(MoveRecord{At: now.Add(-30 * time.Minute), Namespace: "default", Job: "other", Alloc: "x", GPUs: 1})
			}},
		{name: "one two hours ago does not", meta: optedIn, cfg: moveBudget,
			setup: func(_ *nomadview.Snapshot, _ map[JobKey]*api.Job, _ *Ledger, m *Mover) {
				m.Record(MoveRecord{At: now.Add(-2 * time.Hour), Namespace: "default", Job: "other", Alloc: "x", GPUs: 1})
			},
			want: []string{"alloc-train-n1-0", "alloc-train-n1-1"}},
		{name: "a job moved its day's budget is not moved again", meta: optedIn, cfg: moveBudget,
			setup: func(_ *nomadview.Snapshot, _ map[JobKey]*api.Job, _ *Ledger, m *Mover) {
				for h := range 2 {
					m.Record(MoveRecord{At: now.Add(-time.Duration(3+h) * time.Hour), Namespace: "default", Job: "train-n1-0", Alloc: "x", GPUs: 1})
				}
			},
			want: []string{"alloc-train-n2-0", "alloc-train-n2-1"}},
		{name: "no node in the queued job's datacenters: nothing moves", meta: optedIn, cfg: moveBudget,
			setup: func(s *nomadview.Snapshot, _ map[JobKey]*api.Job, _ *Ledger, _ *Mover) {
				s.Specs[JobKey{Namespace: "default", ID: "hpc"}].Datacenters = []string{"eu-*"}
			}},
		{name: "GPU UUIDs shared by two nodes (simulated nodes of one seed) are held per node", meta: optedIn, cfg: moveBudget,
			setup: func(s *nomadview.Snapshot, _ map[JobKey]*api.Job, _ *Ledger, _ *Mover) {
				// n2's GPUs get n1's UUIDs, and its allocations hold the
				// two n1 does not: held across nodes, no GPU would be free.
				for _, d := range s.Nodes[1].NodeResources.Devices {
					for _, in := range d.Instances {
						in.ID = strings.Replace(in.ID, "n2", "n1", 1)
					}
				}
				for _, a := range s.Allocs {
					if a.NodeID == "n2" {
						d := a.AllocatedResources.Tasks["t"].Devices[0]
						d.DeviceIDs = []string{strings.Replace(strings.Replace(d.DeviceIDs[0], "n2", "n1", 1), "-0", "-2", 1)}
						d.DeviceIDs[0] = strings.Replace(d.DeviceIDs[0], "-1", "-3", 1)
					}
				}
			},
			want: []string{"alloc-train-n1-0", "alloc-train-n1-1"}},
		{name: "an ask naming another GPU model frees no node", meta: optedIn, cfg: moveBudget,
			setup: func(s *nomadview.Snapshot, _ map[JobKey]*api.Job, _ *Ledger, _ *Mover) {
				s.Specs[JobKey{Namespace: "default", ID: "hpc"}].TaskGroups[0].Tasks[0].Resources.Devices[0].Name = "nvidia/gpu/A100"
			}},
		{name: "an ask naming the nodes' model is served", meta: optedIn, cfg: moveBudget,
			setup: func(s *nomadview.Snapshot, _ map[JobKey]*api.Job, _ *Ledger, _ *Mover) {
				s.Specs[JobKey{Namespace: "default", ID: "hpc"}].TaskGroups[0].Tasks[0].Resources.Devices[0].Name = "nvidia/gpu/H100"
			},
			want: []string{"alloc-train-n1-0", "alloc-train-n1-1"}},
		{name: "a failed free GPU is no room: n1 cannot be freed, nor take n2's two, nothing moves", meta: optedIn, cfg: moveBudget,
			setup: func(s *nomadview.Snapshot, _ map[JobKey]*api.Job, _ *Ledger, _ *Mover) {
				failedGPU(s.Nodes[0], "GPU-n1-3")
			}},
		{name: "an allocation on a failed GPU is not moved: its move frees no usable GPU", meta: optedIn, cfg: moveBudget,
			setup: func(s *nomadview.Snapshot, _ map[JobKey]*api.Job, _ *Ledger, _ *Mover) {
				failedGPU(s.Nodes[0], "GPU-n1-0")
			},
			want: []string{"alloc-train-n2-0", "alloc-train-n2-1"}},
		{name: "a node with 4 free: Nomad places it, nothing moves", meta: optedIn, cfg: moveBudget,
			setup: func(s *nomadview.Snapshot, _ map[JobKey]*api.Job, _ *Ledger, _ *Mover) {
				s.Nodes = append(s.Nodes, layoutNode("n3", "whole", "whole", "whole", "whole"))
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, specs := moveCluster(c.meta)
			l := NewLedger(nil)
			m := NewMover(c.cfg, nil, hclog.NewNullLogger())
			if c.setup != nil {
				c.setup(s, specs, l, m)
			}
			p, ok := m.Step(context.Background(), now, ViewOf(s), l, specsOf(specs), nil)
			var moved []string
			for _, mv := range p.Moves {
				moved = append(moved, mv.Alloc.ID)
			}
			slices.Sort(moved)
			if ok != (c.want != nil) || !slices.Equal(moved, c.want) {
				t.Errorf("Step = %v, %v (moves %v); want moves %v", p, ok, moved, c.want)
			}
		})
	}
}

// A consolidation under way holds the next until its ask runs or Settle
// passes; a moved job that runs again is marked, its cost counted.
func TestMoverPendingAndResumed(t *testing.T) {
	now := time.Unix(10_000, 0)
	s, specs := moveCluster(map[string]string{MetaMovable: "true"})
	cfg := moveBudget
	cfg.PerHour = 10
	m := NewMover(cfg, nil, hclog.NewNullLogger())
	l := NewLedger(nil)
	p, ok := m.Step(context.Background(), now, ViewOf(s), l, specsOf(specs), nil)
	if !ok {
		t.Fatal("no plan")
	}
	for _, mv := range p.Moves {
		m.Record(MoveRecord{At: now, Namespace: "default", Job: mv.Alloc.Job, Alloc: mv.Alloc.ID, GPUs: mv.Alloc.GPUs, Reason: moveReason(p, mv)})
	}
	if got := m.History()[0].Reason; !strings.HasPrefix(got, "moved alloc alloc-tr (train-n1-0, 1 GPU) n1 → n2 to free 4 GPUs on n1 for hpc") {
		t.Errorf("reason = %q", got)
	}
	if _, ok := m.Step(context.Background(), now.Add(30*time.Second), ViewOf(s), l, specsOf(specs), nil); ok {
		t.Error("a second plan while the first settles")
	}
	if _, ok := m.Step(context.Background(), now.Add(2*time.Minute), ViewOf(s), l, specsOf(specs), nil); !ok {
		t.Error("no plan once Settle passed with the ask still waiting")
	}
	var cost float64
	running := map[JobKey]time.Time{{Namespace: "default", ID: "train-n1-0"}: now.Add(5 * time.Second)}
	if !m.markResumed(now.Add(20*time.Second), running, func(s float64) { cost += s }) || cost != 20 {
		t.Errorf("markResumed: cost %v GPU-seconds, want 20 (1 GPU, 20 s)", cost)
	}
	if m.markResumed(now.Add(40*time.Second), running, func(s float64) { cost += s }) {
		t.Error("a move marked resumed twice")
	}
}

// The freed node is held until every moved job has an allocation placed
// on another node since the hold, or HoldMax passes; no plan meanwhile.
func TestMoverHold(t *testing.T) {
	now := time.Unix(10_000, 0)
	s, specs := moveCluster(map[string]string{MetaMovable: "true"})
	cfg := moveBudget
	cfg.PerHour = 10
	m := NewMover(cfg, nil, hclog.NewNullLogger())
	p, ok := m.Step(context.Background(), now, ViewOf(s), NewLedger(nil), specsOf(specs), nil)
	if !ok {
		t.Fatal("no plan")
	}
	h := m.Holding(now, p)
	if h.Node != "n1" || len(h.Moved) != 2 || m.Held() == nil {
		t.Fatalf("hold %+v", h)
	}
	if _, ok := m.Step(context.Background(), now.Add(time.Second), ViewOf(s), NewLedger(nil), specsOf(specs), nil); ok {
		t.Error("a plan while a node is held")
	}
	replacement := func(job, node string) *api.AllocationListStub {
		return &api.AllocationListStub{ID: "new-" + job, Namespace: "default", JobID: job, NodeID: node,
			ClientStatus: api.AllocClientStatusPending, CreateTime: now.Add(2 * time.Second).UnixNano()}
	}
	s.Allocs = append(s.Allocs, replacement("train-n1-0", "n2"))
	if m.Release(now.Add(3*time.Second), s) {
		t.Error("released with one moved job not placed yet")
	}
	s.Allocs = append(s.Allocs, replacement("train-n1-1", "n1"))
	if m.Release(now.Add(3*time.Second), s) {
		t.Error("released with a moved job placed back on the held node")
	}
	s.Allocs[len(s.Allocs)-1] = replacement("train-n1-1", "n2")
	if !m.Release(now.Add(3*time.Second), s) {
		t.Error("not released with both moved jobs placed elsewhere")
	}
	s.Allocs = s.Allocs[:len(s.Allocs)-2]
	if !m.Release(now.Add(cfg.HoldMax), s) {
		t.Error("not released after HoldMax")
	}
	m.Released()
	if m.Held() != nil {
		t.Error("hold kept after Released")
	}
}

// A node whose GPU layout is changing is neither freed nor given moved
// work: its free whole GPUs are in flux.
func TestMoverSkipsRelayingNodes(t *testing.T) {
	now := time.Unix(10_000, 0)
	s, specs := moveCluster(map[string]string{MetaMovable: "true"})
	m := NewMover(moveBudget, nil, hclog.NewNullLogger())
	p, ok := m.Step(context.Background(), now, ViewOf(s), NewLedger(nil), specsOf(specs), nil)
	if !ok {
		t.Fatal("no plan")
	}
	m = NewMover(moveBudget, nil, hclog.NewNullLogger())
	if q, ok := m.Step(context.Background(), now, ViewOf(s), NewLedger(nil), specsOf(specs), map[string]bool{p.Node.ID: true}); ok {
		t.Errorf("planned %s with %s relaying", q, p.Node.Name)
	}
}

func TestLayoutsRelaying(t *testing.T) {
	n1, n2, n3 := layoutNode("n1", "whole", "whole"), layoutNode("n2", "whole", "whole"), layoutNode("n3", "whole", "whole")
	n2.NodeResources.Devices[1].Attributes[contract.AttrLayoutDesired].StringVal = ptrTo("mps:8")
	// A GPU in error keeps its layout: its node is not relaying.
	n1.NodeResources.Devices[0].Attributes[contract.AttrLayoutDesired].StringVal = ptrTo("mps:99")
	n1.NodeResources.Devices[0].Attributes[contract.AttrLayoutState].StringVal = ptrTo(string(contract.LayoutError))
	s := emptySnapshot(n1, n2, n3)
	l := NewLayouts(layoutplan.Bounds{}, nil, hclog.NewNullLogger(), NewMetrics())
	l.asked[LayoutKey("n3", "GPU-n3-0")] = asked{layout: "mps:8", at: time.Unix(1000, 0)}
	if got := l.Relaying(s); len(got) != 2 || !got["n2"] || !got["n3"] {
		t.Errorf("relaying %v, want n2 (desired ≠ current) and n3 (asked, not applied)", got)
	}
	if (*Layouts)(nil).Relaying(s) != nil {
		t.Error("layouts off: relaying something")
	}
}

// A waiting gang's members are queued but moved for by no one: the move
// module's hold of one freed node would keep the gang's plan, which needs
// every member at once, from ever placing it.
func TestWholeGPUAsksLeaveOutGangs(t *testing.T) {
	s := emptySnapshot()
	queuedJob(s, "plain", "nvidia/gpu/H100", 1)
	s.Specs[JobKey{Namespace: "default", ID: "plain"}].TaskGroups[0].Tasks[0].Resources.Devices[0].Count = new(uint64(4))
	gang := gangSpecJob(0)
	gang.TaskGroups[0].Tasks[0].Resources.Devices[0].Count = new(uint64(4))
	k := JobKey{Namespace: "default", ID: "train"}
	s.Jobs[k] = &api.JobListStub{ID: "train", Namespace: "default", Type: "batch", Meta: map[string]string{"nomad_gpu_gang": "true"}}
	s.Gangs = map[JobKey]*api.Job{k: gang}
	if n := len(s.QueuedGroups()); n != 2 {
		t.Fatalf("%d queued groups, want the plain job's and the gang's", n)
	}
	asks := wholeGPUAsks(s)
	if len(asks) != 1 || asks[0].ask.Job != "plain" {
		t.Errorf("asks %+v, want the plain job's only", asks)
	}
}
