package apm

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/nomadview"
)

// viewFixture is one node in pool gpu with two H100s (one held by a
// running allocation, one by a pending one), a pending allocation on a node
// not listed, a finished allocation, and a blocked group of three whose
// summary (newer than its evaluation) says two still wait.
func viewFixture(t0 time.Time) *nomadview.Snapshot {
	u64 := func(n uint64) *uint64 { return &n }
	node := &api.NodeListStub{ID: "n1", Name: "node-1", NodePool: "gpu", Datacenter: "dc1", NodeClass: "a100",
		Status: api.NodeStatusReady, SchedulingEligibility: api.NodeSchedulingEligible,
		NodeResources: &api.NodeResources{Devices: []*api.NodeDeviceResource{{
			Vendor: "nvidia", Type: "gpu", Name: "H100",
			Attributes: map[string]*api.Attribute{"memory": {IntVal: ptrTo(int64(80)), Unit: "GiB"}},
			Instances: []*api.NodeDevice{
				{ID: "g0", Healthy: true, Locality: &api.NodeDeviceLocality{PciBusID: "0000:01:00.0"}},
				{ID: "g1", Healthy: true},
			},
		}}}}
	alloc := func(id, job, nodeID, status, dev string, created time.Time) *api.AllocationListStub {
		return &api.AllocationListStub{ID: id, Namespace: "default", JobID: job, TaskGroup: "g", NodeID: nodeID,
			ClientStatus: status, CreateTime: created.UnixNano(),
			AllocatedResources: &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{
				"t": {Devices: []*api.AllocatedDeviceResource{{Vendor: "nvidia", Type: "gpu", Name: "H100", DeviceIDs: []string{dev}}}},
			}}}
	}
	done := alloc("done", "train", "n1", api.AllocClientStatusComplete, "g0", t0.Add(-time.Hour))
	done.TaskStates = map[string]*api.TaskState{"t": {StartedAt: t0.Add(-50 * time.Minute), FinishedAt: t0.Add(-10 * time.Minute)}}
	eval := &api.Evaluation{ID: "e1", Namespace: "default", JobID: "big", Status: api.EvalStatusBlocked, Priority: 80,
		CreateTime: t0.Add(-time.Minute).UnixNano(), ModifyIndex: 10,
		FailedTGAllocs: map[string]*api.AllocationMetric{"g": {CoalescedFailures: 2}}}
	big := &api.Job{ID: ptrTo("big"), Namespace: ptrTo("default"), NodePool: ptrTo("gpu"),
		Constraints: []*api.Constraint{{LTarget: "${node.class}", Operand: "!=", RTarget: "cpu"}, {LTarget: "${attr.kernel.name}", RTarget: "linux"}},
		TaskGroups: []*api.TaskGroup{{Name: ptrTo("g"),
			Constraints: []*api.Constraint{{LTarget: "${node.class}", RTarget: "a100"}},
			Tasks: []*api.Task{
				{Name: "main", Resources: &api.Resources{Devices: []*api.RequestedDevice{{Name: "nvidia/gpu", Count: u64(2)}}}},
				{Name: "side", Constraints: []*api.Constraint{{LTarget: "${node.class}", Operand: "regexp", RTarget: "^a"}}},
			}}}}
	jobs := map[nomadview.JobKey]*api.JobListStub{}
	for id, prio := range map[string]int{"train": 70, "infer": 30, "big": 80} {
		jobs[nomadview.JobKey{Namespace: "default", ID: id}] = &api.JobListStub{ID: id, Namespace: "default", Priority: prio}
	}
	jobs[nomadview.JobKey{Namespace: "default", ID: "big"}].JobSummary = &api.JobSummary{ModifyIndex: 11,
		Summary: map[string]api.TaskGroupSummary{"g": {Queued: 2}}}
	return &nomadview.Snapshot{
		Taken: t0,
		Nodes: []*api.NodeListStub{node},
		Allocs: []*api.AllocationListStub{
			alloc("run", "train", "n1", api.AllocClientStatusRunning, "g0", t0.Add(-5*time.Minute)),
			alloc("pend", "infer", "n1", api.AllocClientStatusPending, "g1", t0.Add(-30*time.Second)),
			alloc("elsewhere", "infer", "gone", api.AllocClientStatusPending, "x0", t0),
		},
		Finished: []*api.AllocationListStub{done},
		Blocked:  []*api.Evaluation{eval},
		Jobs:     jobs,
		Specs:    map[nomadview.JobKey]*api.Job{{Namespace: "default", ID: "big"}: big},
	}
}

func TestSnapshotOf(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	s := SnapshotOf(viewFixture(t0), true)

	if len(s.Nodes) != 1 {
		t.Fatalf("nodes %d", len(s.Nodes))
	}
	n := s.Nodes[0]
	got := fmt.Sprint(n.ID, " ", n.Pool, " ", n.Datacenter, " ", n.Class, " ", n.Schedulable())
	for _, g := range n.Devices {
		got += fmt.Sprint(" ", g.DeviceSpec, g.Instances, g.MemoryBytes)
	}
	for _, u := range n.Used {
		got += fmt.Sprint(" held ", u.DeviceSpec, u.IDs)
	}
	wantNode := "n1 gpu dc1 a100 true nvidia/gpu/H100 [{g0 true {g0 0000:01:00.0}} {g1 true {g1 }}] 85899345920 held nvidia/gpu/H100 [g0] held nvidia/gpu/H100 [g1]"
	if got != wantNode {
		t.Errorf("node\n got %s\nwant %s", got, wantNode)
	}

	work := []struct {
		source                WorkSource
		job, pool, dcs, rules string
		allocs, priority      int
		asks, task            string
		since                 time.Time
		capacityBlocked       bool
	}{
		{FromBlockedEval, "big", "gpu", "[*]", "[{!= cpu} {= a100} {regexp ^a}]", 2, 80, "[{nvidia/gpu 2}]", "main", t0.Add(-time.Minute), true},
		{FromPendingAlloc, "infer", "gpu", "[dc1]", "[{= a100}]", 1, 30, "[{nvidia/gpu/H100 1}]", "", t0.Add(-30 * time.Second), false},
	}
	if len(s.Work) != len(work) {
		t.Fatalf("work %+v, want %d entries (the pending allocation of a node not listed left out)", s.Work, len(work))
	}
	for i, want := range work {
		w := s.Work[i]
		got := []any{w.Source, w.JobID, w.Pool, fmt.Sprint(w.Datacenters), fmt.Sprint(w.ClassRules), w.Allocs, w.Priority, fmt.Sprint(w.Asks), w.Task, w.Since.Equal(want.since), w.CapacityBlocked}
		exp := []any{want.source, want.job, want.pool, want.dcs, want.rules, want.allocs, want.priority, want.asks, want.task, true, want.capacityBlocked}
		if fmt.Sprint(got) != fmt.Sprint(exp) {
			t.Errorf("work %d:\n got %v\nwant %v", i, got, exp)
		}
	}

	// A blocked group carries nomadview's never-fits rule: the 2-GPU ask
	// fits the 2-GPU node; with one GPU left on it, it never would.
	if s.Work[0].NeverFits != "" {
		t.Errorf("the 2-GPU ask never fits a 2-GPU node: %s", s.Work[0].NeverFits)
	}
	small := viewFixture(t0)
	small.Nodes[0].NodeResources.Devices[0].Instances = small.Nodes[0].NodeResources.Devices[0].Instances[:1]
	if got := SnapshotOf(small, false).Work[0].NeverFits; !strings.HasPrefix(got, `never fits: asks 2 GPUs on one node, pool "gpu" nodes have at most 1`) {
		t.Errorf("never fits on a 1-GPU node: %q", got)
	}

	// Runs: the finished one first, then the pending and running ones
	// holding devices on listed nodes, with their job's priority.
	var runs []string
	for _, r := range s.Runs {
		runs = append(runs, fmt.Sprintf("%s/%s/%d/%v", r.ID, r.Pool, r.Priority, r.Terminal()))
	}
	if got, want := fmt.Sprint(runs), "[done/gpu/70/true run/gpu/70/false pend/gpu/30/false]"; got != want {
		t.Errorf("runs %s, want %s", got, want)
	}
	if d := s.Runs[0]; !d.Finished.Equal(t0.Add(-10*time.Minute)) || !d.Started.Equal(t0.Add(-50*time.Minute)) {
		t.Errorf("finished run: started %v finished %v", d.Started, d.Finished)
	}
	if s := SnapshotOf(viewFixture(t0), false); s.Runs != nil {
		t.Errorf("runs without the cluster figures: %v", s.Runs)
	}
}

// nodes_removable counts the nodes the controller emptied and marked for
// removal that run nothing but system jobs, of the query's filter.
func TestNodesRemovable(t *testing.T) {
	marked := &api.DrainMetadata{Meta: map[string]string{contract.DrainMetaScaleIn: "emptied"}}
	node := func(id, pool, eligibility string, drain *api.DrainMetadata) *api.NodeListStub {
		return &api.NodeListStub{ID: id, Name: id, NodePool: pool, Status: api.NodeStatusReady, SchedulingEligibility: eligibility, LastDrain: drain}
	}
	v := &nomadview.Snapshot{
		Nodes: []*api.NodeListStub{
			node("empty", "gpu", api.NodeSchedulingIneligible, marked),
			node("system-only", "gpu", api.NodeSchedulingIneligible, marked),
			node("still-runs", "gpu", api.NodeSchedulingIneligible, marked),
			node("eligible-again", "gpu", api.NodeSchedulingEligible, marked),
			node("maintenance", "gpu", api.NodeSchedulingIneligible, &api.DrainMetadata{Meta: map[string]string{"message": "disk"}}),
			node("other-pool", "cpu", api.NodeSchedulingIneligible, marked),
		},
		Allocs: []*api.AllocationListStub{
			{ID: "a1", NodeID: "system-only", JobType: api.JobTypeSystem, ClientStatus: api.AllocClientStatusRunning},
			{ID: "a2", NodeID: "still-runs", JobType: api.JobTypeBatch, ClientStatus: api.AllocClientStatusRunning},
		},
		Jobs: map[nomadview.JobKey]*api.JobListStub{},
	}
	s := SnapshotOf(v, false)
	for _, c := range []struct {
		query string
		want  float64
	}{
		{"nodes_removable{node_pool=gpu}", 2},
		{"nodes_removable{node_pool=cpu}", 1},
		{"nodes_removable", 3},
	} {
		q, err := ParseQuery(c.query)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := Evaluate(q, s); err != nil || got != c.want {
			t.Errorf("%s = %v, %v; want %v", c.query, got, err, c.want)
		}
	}
}
