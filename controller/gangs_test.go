package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/nomadview"
)

// fakeGangNomad answers plans with fits (a gang's planned at its 2
// members) and records scales.
type fakeGangNomad struct {
	fits    bool
	plans   int
	planned []string // the jobs planned, in order
	scales  []string // "group=count@index"
	// registered and deregistered are the placeholder jobs.
	registered   []*api.Job
	deregistered []string
	// preempts are what a plan says it would preempt.
	preempts []*api.AllocationListStub
	evals    int
	// nodes are the nodes' details node answers with; nodeReads counts
	// its calls. planFits, when set, decides a plan's fit instead of fits.
	nodes     map[string]*api.Node
	nodeReads int
	planFits  func(*api.Job) bool
	// allocs are the jobs' allocations allocations answers with.
	allocs map[string][]*api.AllocationListStub
}

func (f *fakeGangNomad) allocations(_ context.Context, k JobKey) ([]*api.AllocationListStub, error) {
	return f.allocs[k.ID], nil
}

func (f *fakeGangNomad) node(_ context.Context, id string) (*api.Node, error) {
	f.nodeReads++
	if n, ok := f.nodes[id]; ok {
		return n, nil
	}
	return nil, errors.New("node not found")
}

func (f *fakeGangNomad) evaluate(context.Context, JobKey) error {
	f.evals++
	return nil
}

func (f *fakeGangNomad) plan(_ context.Context, job *api.Job) (*api.JobPlanResponse, error) {
	f.plans++
	f.planned = append(f.planned, *job.ID)
	for _, tg := range job.TaskGroups {
		if job.Meta["nomad_gpu_gang"] == "true" && (tg.Count == nil || fmt.Sprint(*tg.Count) != tg.Meta["nomad_gpu_gang_members"]) {
			return nil, errors.New("planned with a count other than the members")
		}
	}
	resp := &api.JobPlanResponse{JobModifyIndex: 7, Annotations: &api.PlanAnnotations{PreemptedAllocs: f.preempts}}
	if fits := f.fits; (f.planFits == nil && !fits) || (f.planFits != nil && !f.planFits(job)) {
		resp.FailedTGAllocs = map[string]*api.AllocationMetric{"worker": {NodesEvaluated: 3, NodesExhausted: 3}}
	}
	return resp, nil
}

func (f *fakeGangNomad) register(_ context.Context, job *api.Job, _ uint64) (*api.JobRegisterResponse, *api.WriteMeta, error) {
	f.registered = append(f.registered, job)
	return &api.JobRegisterResponse{JobModifyIndex: uint64(20 + len(f.registered))}, nil, nil
}

func (f *fakeGangNomad) deregister(_ context.Context, k JobKey) error {
	f.deregistered = append(f.deregistered, k.ID)
	return nil
}

func (f *fakeGangNomad) scale(_ context.Context, _ JobKey, group string, count int, index uint64, _ string) (uint64, error) {
	f.scales = append(f.scales, fmt.Sprintf("%s=%d@%d", group, count, index))
	return uint64(10 + len(f.scales)), nil
}

// gangSpecJob is a gang of two 1-GPU members in group "worker", at count.
func gangSpecJob(count int) *api.Job {
	return &api.Job{
		ID: new("train"), Namespace: new("default"), Type: new("batch"),
		Meta: map[string]string{"nomad_gpu_gang": "true"},
		TaskGroups: []*api.TaskGroup{{
			Name: new("worker"), Count: new(count),
			Meta:             map[string]string{"nomad_gpu_gang_members": "2"},
			RestartPolicy:    &api.RestartPolicy{Attempts: new(0)},
			ReschedulePolicy: &api.ReschedulePolicy{Attempts: new(0), Unlimited: new(false)},
			Networks:         []*api.NetworkResource{{DynamicPorts: []api.Port{{Label: "rendezvous"}}}},
			Tasks: []*api.Task{{Name: "train", Driver: "gpu", Config: map[string]any{"checkpoint": []map[string]any{{}}}, Resources: &api.Resources{
				Devices: []*api.RequestedDevice{{Name: "nvidia/gpu", Count: new(uint64(1))}}}}},
		}},
	}
}

func gangSnapshot(allocs ...*api.AllocationListStub) *nomadview.Snapshot {
	k := JobKey{Namespace: "default", ID: "train"}
	return &nomadview.Snapshot{
		Jobs:   map[JobKey]*api.JobListStub{k: {ID: "train", Namespace: "default", Type: "batch", Meta: map[string]string{"nomad_gpu_gang": "true"}}},
		Allocs: allocs,
	}
}

func member(i int, status string) *api.AllocationListStub {
	return &api.AllocationListStub{ID: fmt.Sprintf("a%d", i), Name: fmt.Sprintf("train.worker[%d]", i), JobID: "train", Namespace: "default",
		ClientStatus: status, DesiredStatus: api.AllocDesiredStatusRun, CreateIndex: 10}
}

// gangSpecs serves job as the gang's spec (moves_test.go's specsOf).
func gangSpecs(job *api.Job) JobSpecs {
	return specsOf(map[JobKey]*api.Job{{Namespace: "default", ID: "train"}: job})
}

func kinds(ds []Decision) []string {
	var out []string
	for _, d := range ds {
		out = append(out, d.Kind)
	}
	return out
}

// A waiting gang is admitted only when Nomad's plan places every member:
// each group is scaled to its members, the first guarded by the plan's
// job modify index; a gang that does not fit waits, said once.
func TestGangAdmission(t *testing.T) {
	ctx, now := context.Background(), time.Unix(1000, 0)
	for _, tc := range []struct {
		name   string
		fits   bool
		scales []string
		kinds  []string
	}{
		{"fits", true, []string{"worker=2@7"}, []string{"gang-admitted"}},
		{"does not fit", false, nil, []string{"gang-waiting"}},
	} {
		g, n := NewGangs(DefaultGangConfig(), hclog.NewNullLogger()), &fakeGangNomad{fits: tc.fits}
		got := g.Step(ctx, now, gangSnapshot(), gangSpecs(gangSpecJob(0)), n)
		if fmt.Sprint(n.scales) != fmt.Sprint(tc.scales) || fmt.Sprint(kinds(got)) != fmt.Sprint(tc.kinds) {
			t.Errorf("%s: scales %v, decisions %v; want %v, %v", tc.name, n.scales, kinds(got), tc.scales, tc.kinds)
		}
		if !tc.fits {
			// Free capacity as it was: not planned again before a minute.
			if again := g.Step(ctx, now.Add(time.Second), gangSnapshot(), gangSpecs(gangSpecJob(0)), n); len(again) != 0 || n.plans != 1 {
				t.Errorf("%s: planned %d times, decided %v again, with the free capacity unchanged", tc.name, n.plans, kinds(again))
			}
			g.Step(ctx, now.Add(replanEvery), gangSnapshot(), gangSpecs(gangSpecJob(0)), n)
			if n.plans != 2 {
				t.Errorf("%s: planned %d times after a minute, want 2", tc.name, n.plans)
			}
		}
	}
}

// The read model lags Nomad: a read of the gang's job older than the
// controller's own scale is taken as what the scale wrote. An admitted
// gang read still at count 0 is not admitted again (a second scale's
// index would hide its members' allocations, created before it), and a
// rolled-back one read still at its members is not rolled back twice.
func TestGangReadOlderThanItsScale(t *testing.T) {
	ctx, t0 := context.Background(), time.Unix(1000, 0)
	at := func(count int, index uint64) *api.Job {
		job := gangSpecJob(count)
		job.JobModifyIndex = new(index)
		return job
	}
	g, n := NewGangs(DefaultGangConfig(), hclog.NewNullLogger()), &fakeGangNomad{fits: true}
	g.Step(ctx, t0, gangSnapshot(), gangSpecs(at(0, 7)), n) // admitted: the scale returns 11
	for _, tc := range []struct {
		name   string
		job    *api.Job
		allocs []*api.AllocationListStub
		plans  int
		scales string
		state  string
	}{
		{"read before the admission's scale", at(0, 7), nil, 1, "[worker=2@7]", "placing"},
		{"read after it", at(2, 11), []*api.AllocationListStub{member(0, "running"), member(1, "pending")}, 1, "[worker=2@7]", "placing"},
		{"a member failed", at(2, 11), []*api.AllocationListStub{member(0, "running"), member(1, "failed")}, 1, "[worker=2@7 worker=0@0]", "placing"},
		{"read before the roll-back's scale", at(2, 11), []*api.AllocationListStub{member(0, "running"), member(1, "failed")}, 1, "[worker=2@7 worker=0@0]", "waiting"},
	} {
		for _, a := range tc.allocs {
			a.CreateIndex = 12
		}
		g.Step(ctx, t0.Add(time.Second), gangSnapshot(tc.allocs...), gangSpecs(tc.job), n)
		if n.plans != tc.plans || fmt.Sprint(n.scales) != tc.scales || len(g.statuses) != 1 || g.statuses[0].State != tc.state {
			t.Errorf("%s: %d plans, scales %v, statuses %+v; want %d, %s, %s", tc.name, n.plans, n.scales, g.statuses, tc.plans, tc.scales, tc.state)
		}
	}
}

// A gang with a locality is planned in one domain a tick, tightest fit
// first, and admitted by registering the copy pinned to the one Nomad's
// plan places it in; the nodes' meta is read once per node modify index.
// A locality no node has is refused, naming the field, and never planned.
func TestGangLocality(t *testing.T) {
	ctx, t0 := context.Background(), time.Unix(1000, 0)
	snap := gangSnapshot()
	racks := map[string]string{"n1": "a", "n2": "b", "n3": "b"}
	n := &fakeGangNomad{nodes: map[string]*api.Node{}, planFits: func(job *api.Job) bool {
		return slices.ContainsFunc(job.Constraints, func(c *api.Constraint) bool { return c.LTarget == "${meta.rack}" && c.RTarget == "b" })
	}}
	for _, id := range []string{"n1", "n2", "n3"} {
		snap.Nodes = append(snap.Nodes, &api.NodeListStub{ID: id, Name: id, Datacenter: "dc1", NodePool: "default", Status: api.NodeStatusReady,
			SchedulingEligibility: api.NodeSchedulingEligible, ModifyIndex: 3,
			NodeResources: &api.NodeResources{Devices: []*api.NodeDeviceResource{{Vendor: "nvidia", Type: "gpu", Name: "H100",
				Instances: []*api.NodeDevice{{ID: id + "-0", Healthy: true}, {ID: id + "-1", Healthy: true}}}}}})
		n.nodes[id] = &api.Node{ID: id, Meta: map[string]string{"rack": racks[id]}}
	}
	withLocality := func(loc string) *api.Job {
		job := gangSpecJob(0)
		job.Meta["nomad_gpu_gang_locality"] = loc
		return job
	}

	g := NewGangs(DefaultGangConfig(), hclog.NewNullLogger())
	first := g.Step(ctx, t0, snap, gangSpecs(withLocality("${meta.rack}")), n)
	if n.plans != 1 || len(first) != 1 || !strings.HasSuffix(first[0].Reason, " in ${meta.rack}=a") || n.nodeReads != 3 {
		t.Fatalf("first tick: %d plans, decisions %+v, %d node reads; want rack a (2 free GPUs, the tightest fit) planned, 3 reads", n.plans, first, n.nodeReads)
	}
	second := g.Step(ctx, t0.Add(time.Second), snap, gangSpecs(withLocality("${meta.rack}")), n)
	if n.plans != 2 || kinds(second)[0] != "gang-admitted" || len(n.registered) != 1 || len(n.scales) != 0 || n.nodeReads != 3 {
		t.Fatalf("second tick: %d plans, decisions %+v, registered %d, scales %v, node reads %d; want rack b admitted by registering, no read again",
			n.plans, second, len(n.registered), n.scales, n.nodeReads)
	}
	reg := n.registered[0]
	if *reg.TaskGroups[0].Count != 2 || reg.Meta["nomad_gpu_gang_pinned"] != `{"${meta.rack}":"b"}` || g.admittedAt[JobKey{Namespace: "default", ID: "train"}] != 21 {
		t.Errorf("registered: count %d, meta %v, admitted at index %d", *reg.TaskGroups[0].Count, reg.Meta, g.admittedAt[JobKey{Namespace: "default", ID: "train"}])
	}

	// A node's meta that reaches the servers later (its modify index
	// moves) makes a refused gang planned again, in the new domains.
	g, n.plans, n.planFits = NewGangs(DefaultGangConfig(), hclog.NewNullLogger()), 0, func(*api.Job) bool { return false }
	n.nodes["n1"].Meta = nil
	g.Step(ctx, t0, snap, gangSpecs(withLocality("${meta.rack}")), n)
	g.Step(ctx, t0.Add(time.Second), snap, gangSpecs(withLocality("${meta.rack}")), n)
	if n.plans != 1 {
		t.Errorf("rack a unknown: %d plans, want one (rack b), then none on the same free GPUs", n.plans)
	}
	n.nodes["n1"].Meta, snap.Nodes[0].ModifyIndex = map[string]string{"rack": "a"}, 4
	got := g.Step(ctx, t0.Add(2*time.Second), snap, gangSpecs(withLocality("${meta.rack}")), n)
	if n.plans != 2 || len(got) != 1 || !strings.HasSuffix(got[0].Reason, " in ${meta.rack}=a") {
		t.Errorf("rack a known: %d plans, decisions %+v; want rack a planned", n.plans, got)
	}

	g, n.plans = NewGangs(DefaultGangConfig(), hclog.NewNullLogger()), 0
	got = g.Step(ctx, t0, snap, gangSpecs(withLocality("${meta.room}")), n)
	if n.plans != 0 || len(got) != 1 || got[0].Kind != "gang-invalid" || !strings.Contains(got[0].Reason, "meta.nomad_gpu_gang_locality") {
		t.Errorf("a locality no node has: %d plans, decisions %+v; want gang-invalid naming the field", n.plans, got)
	}
}

// A refused gang is planned again as soon as the free capacity changes.
func TestGangReplannedWhenCapacityFrees(t *testing.T) {
	ctx, now := context.Background(), time.Unix(1000, 0)
	g, n := NewGangs(DefaultGangConfig(), hclog.NewNullLogger()), &fakeGangNomad{}
	g.Step(ctx, now, gangSnapshot(), gangSpecs(gangSpecJob(0)), n)
	freed := gangSnapshot()
	freed.Nodes = []*api.NodeListStub{{ID: "n1", NodePool: "default", Status: api.NodeStatusReady, SchedulingEligibility: api.NodeSchedulingEligible,
		NodeResources: &api.NodeResources{Devices: []*api.NodeDeviceResource{{Vendor: "nvidia", Type: "gpu", Name: "H100",
			Instances: []*api.NodeDevice{{ID: "GPU-1", Healthy: true}}}}}}}
	n.fits = true
	got := g.Step(ctx, now.Add(time.Second), freed, gangSpecs(gangSpecJob(0)), n)
	if n.plans != 2 || len(got) != 1 || got[0].Kind != "gang-admitted" {
		t.Errorf("after a GPU freed: %d plans, decisions %v; want 2 and gang-admitted", n.plans, kinds(got))
	}
}

// One gang is admitted a tick: the next one's plan must see the first's
// members placed.
func TestGangOneAdmissionATick(t *testing.T) {
	ctx, now := context.Background(), time.Unix(1000, 0)
	snap := gangSnapshot()
	snap.Jobs[JobKey{Namespace: "default", ID: "train"}].SubmitTime = 5
	other := JobKey{Namespace: "default", ID: "eval"}
	snap.Jobs[other] = &api.JobListStub{ID: "eval", Namespace: "default", Type: "batch", SubmitTime: 1, Meta: map[string]string{"nomad_gpu_gang": "true"}}
	second := gangSpecJob(0)
	second.ID = new("eval")
	specs := specsOf(map[JobKey]*api.Job{{Namespace: "default", ID: "train"}: gangSpecJob(0), other: second})
	g, n := NewGangs(DefaultGangConfig(), hclog.NewNullLogger()), &fakeGangNomad{fits: true}
	got := g.Step(ctx, now, snap, specs, n)
	if n.plans != 1 || len(got) != 1 || got[0].Job != other {
		t.Errorf("one tick: %d plans, decisions %+v; want one plan, eval (submitted first) admitted", n.plans, got)
	}
}

// A waiting gang is evaluated again every KeepEvery after its
// submission, so that Nomad does not collect it as a dead batch job.
func TestGangKeptFromGarbageCollection(t *testing.T) {
	ctx, t0 := context.Background(), time.Unix(1000, 0)
	cfg := DefaultGangConfig()
	g, n := NewGangs(cfg, hclog.NewNullLogger()), &fakeGangNomad{}
	snap := gangSnapshot()
	snap.Jobs[JobKey{Namespace: "default", ID: "train"}].SubmitTime = t0.UnixNano()
	for _, tc := range []struct {
		at    time.Duration
		evals int
	}{
		{time.Minute, 0}, {cfg.KeepEvery, 1}, {cfg.KeepEvery + time.Minute, 1}, {2 * cfg.KeepEvery, 2},
	} {
		g.Step(ctx, t0.Add(tc.at), snap, gangSpecs(gangSpecJob(0)), n)
		if n.evals != tc.evals {
			t.Errorf("at %s: %d evaluations, want %d", tc.at, n.evals, tc.evals)
		}
	}
}

// A gang whose spec breaks a rule is reported and never planned.
func TestGangInvalidNotPlanned(t *testing.T) {
	job := gangSpecJob(0)
	job.TaskGroups[0].RestartPolicy.Attempts = new(3)
	g, n := NewGangs(DefaultGangConfig(), hclog.NewNullLogger()), &fakeGangNomad{fits: true}
	got := g.Step(context.Background(), time.Unix(1000, 0), gangSnapshot(), gangSpecs(job), n)
	if n.plans != 0 || len(got) != 1 || got[0].Kind != "gang-invalid" {
		t.Errorf("plans %d, decisions %+v; want none and one gang-invalid", n.plans, got)
	}
}

// An admitted gang with a member not running AdmitTimeout after its
// admission while another holds GPUs is scaled back to 0
// (gang-rolled-back); one whose member failed, was preempted or stopped
// is scaled back at once (gang-requeued). Neither is planned again before
// the back-off. One whose members run, or whose other member completed,
// stays; an allocation of an earlier run counts for nothing.
func TestGangRollback(t *testing.T) {
	ctx, t0 := context.Background(), time.Unix(1000, 0)
	cfg := DefaultGangConfig()
	done := member(1, api.AllocClientStatusComplete)
	with := func(a *api.AllocationListStub, edit func(*api.AllocationListStub)) *api.AllocationListStub {
		edit(a)
		return a
	}
	stopped := with(member(1, api.AllocClientStatusComplete), func(a *api.AllocationListStub) { a.DesiredStatus = api.AllocDesiredStatusStop })
	preempted := with(member(1, api.AllocClientStatusRunning), func(a *api.AllocationListStub) { a.DesiredStatus = api.AllocDesiredStatusEvict })
	earlier := with(member(1, api.AllocClientStatusFailed), func(a *api.AllocationListStub) { a.CreateIndex = 5 })
	for _, tc := range []struct {
		name   string
		allocs []*api.AllocationListStub
		after  time.Duration
		kind   string // "" for none
	}{
		{"both run", []*api.AllocationListStub{member(0, "running"), member(1, "running")}, time.Minute, ""},
		{"one pending within the timeout", []*api.AllocationListStub{member(0, "running"), member(1, "pending")}, 10 * time.Second, ""},
		{"one pending past the timeout", []*api.AllocationListStub{member(0, "running"), member(1, "pending")}, time.Minute, "gang-rolled-back"},
		{"one never placed", []*api.AllocationListStub{member(0, "running")}, time.Minute, "gang-rolled-back"},
		{"the other completed", []*api.AllocationListStub{member(0, "running"), done}, time.Minute, ""},
		{"one failed, within the timeout", []*api.AllocationListStub{member(0, "running"), member(1, "failed")}, time.Second, "gang-requeued"},
		{"one preempted", []*api.AllocationListStub{member(0, "running"), preempted}, time.Second, "gang-requeued"},
		{"one stopped (drained, by hand)", []*api.AllocationListStub{member(0, "running"), stopped}, time.Second, "gang-requeued"},
		{"an earlier run's failure", []*api.AllocationListStub{member(0, "running"), earlier}, time.Second, ""},
	} {
		g, n := NewGangs(cfg, hclog.NewNullLogger()), &fakeGangNomad{fits: true}
		k := JobKey{Namespace: "default", ID: "train"}
		g.admitted[k], g.admittedAt[k] = t0, 8
		got := g.Step(ctx, t0.Add(tc.after), gangSnapshot(tc.allocs...), gangSpecs(gangSpecJob(2)), n)
		rolled := fmt.Sprint(n.scales) == "[worker=0@0]" && len(got) == 1 && got[0].Kind == tc.kind
		if rolled != (tc.kind != "") || (tc.kind == "" && len(n.scales) != 0) {
			t.Errorf("%s: scales %v, decisions %v; want %q", tc.name, n.scales, kinds(got), tc.kind)
			continue
		}
		if tc.kind == "" {
			continue
		}
		// A spec read before the scale took (still at its members) is not
		// rolled back twice.
		stale := gangSpecJob(2)
		stale.JobModifyIndex = new(uint64(8))
		g.Step(ctx, t0.Add(tc.after+time.Second), gangSnapshot(tc.allocs...), gangSpecs(stale), n)
		if len(n.scales) != 1 {
			t.Errorf("%s: scaled %v; a stale spec within the back-off scaled it again", tc.name, n.scales)
		}
		// Back at count 0: not planned within the back-off, planned after.
		g.Step(ctx, t0.Add(tc.after+cfg.RetryMin/2), gangSnapshot(), gangSpecs(gangSpecJob(0)), n)
		if n.plans != 0 {
			t.Errorf("%s: planned again %d times within the back-off", tc.name, n.plans)
		}
		g.Step(ctx, t0.Add(tc.after+cfg.RetryMin), gangSnapshot(), gangSpecs(gangSpecJob(0)), n)
		if n.plans != 1 {
			t.Errorf("%s: planned %d times after the back-off, want 1", tc.name, n.plans)
		}
	}
}

// The back-off doubles for a gang that never ran whole, and starts again
// from its least for one that ran whole before a member failed: that is
// no failed admission.
func TestGangBackOff(t *testing.T) {
	ctx, t0 := context.Background(), time.Unix(1000, 0)
	cfg := DefaultGangConfig()
	k := JobKey{Namespace: "default", ID: "train"}
	for _, tc := range []struct {
		name     string
		ranWhole bool
		want     time.Duration
	}{{"never ran whole", false, 4 * cfg.RetryMin}, {"ran whole", true, cfg.RetryMin}} {
		g, n := NewGangs(cfg, hclog.NewNullLogger()), &fakeGangNomad{fits: true}
		g.retry[k] = gangRetry{at: t0, wait: 2 * cfg.RetryMin}
		g.admitted[k], g.admittedAt[k] = t0, 8
		if tc.ranWhole {
			g.Step(ctx, t0.Add(time.Minute), gangSnapshot(member(0, "running"), member(1, "running")), gangSpecs(gangSpecJob(2)), n)
		}
		g.Step(ctx, t0.Add(2*time.Minute), gangSnapshot(member(0, "running"), member(1, "failed")), gangSpecs(gangSpecJob(2)), n)
		if got := g.retry[k].wait; got != tc.want {
			t.Errorf("%s: back-off %s, want %s", tc.name, got, tc.want)
		}
	}
}

// A gang whose member no node of its pool could ever take is refused,
// naming the group and why, and never planned; one that fits a node is
// planned.
func TestGangNeverFits(t *testing.T) {
	for _, tc := range []struct {
		gpus  uint64
		plans int
		kind  string
	}{{8, 0, "gang-invalid"}, {4, 1, "gang-admitted"}} {
		snap := gangSnapshot()
		snap.Nodes = []*api.NodeListStub{layoutNode("n1", "whole", "whole", "whole", "whole")}
		job := gangSpecJob(0)
		job.TaskGroups[0].Tasks[0].Resources.Devices[0].Count = new(tc.gpus)
		g, n := NewGangs(DefaultGangConfig(), hclog.NewNullLogger()), &fakeGangNomad{fits: true}
		got := g.Step(context.Background(), time.Unix(1000, 0), snap, gangSpecs(job), n)
		if n.plans != tc.plans || len(got) != 1 || got[0].Kind != tc.kind {
			t.Errorf("%d GPUs a member on 4-GPU nodes: %d plans, decisions %v; want %d, %s", tc.gpus, n.plans, kinds(got), tc.plans, tc.kind)
			continue
		}
		if want := `group "worker": a member never fits: asks 8 GPUs on one node`; tc.plans == 0 && !strings.Contains(got[0].Reason, want) {
			t.Errorf("reason %q, want %q", got[0].Reason, want)
		}
	}
}

// Jobs that are not gangs are left alone.
func TestGangIgnoresOtherJobs(t *testing.T) {
	snap := gangSnapshot()
	snap.Jobs[JobKey{Namespace: "default", ID: "train"}].Meta = nil
	g, n := NewGangs(DefaultGangConfig(), hclog.NewNullLogger()), &fakeGangNomad{fits: true}
	if got := g.Step(context.Background(), time.Unix(1000, 0), snap, gangSpecs(gangSpecJob(0)), n); len(got) != 0 || n.plans != 0 {
		t.Errorf("a job without the gang meta: decisions %v, %d plans", kinds(got), n.plans)
	}
}

// The gang module reads the nodes: a refused gang is planned again when
// their free GPUs change.
func TestGangsWatchNodes(t *testing.T) {
	on := NewGangs(DefaultGangConfig(), hclog.NewNullLogger()).cfg
	for _, tc := range []struct {
		gangs *GangConfig
		want  bool
	}{{nil, false}, {&on, true}} {
		c := &Controller{cfg: Config{Gangs: tc.gangs}}
		if got := slices.Contains(c.viewLists(), nomadview.Nodes); got != tc.want {
			t.Errorf("gangs %v: nodes watched %v, want %v", tc.gangs != nil, got, tc.want)
		}
	}
}

// The census counts gangs by state and their members.
func TestGangCensus(t *testing.T) {
	k := JobKey{Namespace: "default", ID: "train"}
	for _, tc := range []struct {
		name   string
		count  int
		allocs []*api.AllocationListStub
		want   GangCensus
	}{
		{"waiting", 0, nil, GangCensus{Waiting: 1, Wanted: 2}},
		{"placing", 2, []*api.AllocationListStub{member(0, "running"), member(1, "pending")}, GangCensus{Placing: 1, Wanted: 2, Placed: 2, MembersRunning: 1}},
		{"running", 2, []*api.AllocationListStub{member(0, "running"), member(1, "running")}, GangCensus{Running: 1, Wanted: 2, Placed: 2, MembersRunning: 2}},
	} {
		g, n := NewGangs(DefaultGangConfig(), hclog.NewNullLogger()), &fakeGangNomad{fits: false}
		g.admitted[k] = time.Unix(1000, 0)
		g.Step(context.Background(), time.Unix(1001, 0), gangSnapshot(tc.allocs...), gangSpecs(gangSpecJob(tc.count)), n)
		if got := g.Census(); got != tc.want {
			t.Errorf("%s: census %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// One plan a tick at most, however many gangs wait: never-planned gangs
// first in priority order, then the one whose last plan is oldest, so a
// gang refused while the cluster changes keeps none of the others from
// theirs.
func TestGangPlansOneATick(t *testing.T) {
	snap := &nomadview.Snapshot{Jobs: map[JobKey]*api.JobListStub{}}
	specs := map[JobKey]*api.Job{}
	for i, id := range []string{"low", "high", "mid"} {
		k := JobKey{Namespace: "default", ID: id}
		snap.Jobs[k] = &api.JobListStub{ID: id, Namespace: "default", Type: "batch", Priority: []int{30, 90, 60}[i],
			Meta: map[string]string{"nomad_gpu_gang": "true"}}
		job := gangSpecJob(0)
		job.ID = new(id)
		specs[k] = job
	}
	g, n := NewGangs(DefaultGangConfig(), hclog.NewNullLogger()), &fakeGangNomad{fits: false}
	t0 := time.Unix(1000, 0)
	for tick := range 5 {
		// A minute apart: every refused gang is due again each tick.
		g.Step(context.Background(), t0.Add(time.Duration(tick)*replanEvery), snap, specsOf(specs), n)
		if n.plans != tick+1 {
			t.Fatalf("tick %d: %d plans in all, want one a tick", tick, n.plans)
		}
	}
	if want := []string{"high", "mid", "low", "high", "mid"}; !slices.Equal(n.planned, want) {
		t.Errorf("planned %v, want %v", n.planned, want)
	}

	// A new leader finds every gang due to be kept from Nomad's garbage
	// collection: it keeps one a tick.
	g, n = NewGangs(DefaultGangConfig(), hclog.NewNullLogger()), &fakeGangNomad{fits: false}
	late := time.Unix(0, 0).Add(10 * time.Hour)
	for tick, want := range []int{1, 2, 3, 3} {
		g.Step(context.Background(), late.Add(time.Duration(tick)*time.Second), snap, specsOf(specs), n)
		if n.evals != want {
			t.Errorf("tick %d: %d evaluations in all, want %d", tick, n.evals, want)
		}
	}
}
