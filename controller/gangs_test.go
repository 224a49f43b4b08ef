package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/nomadview"
)

// fakeGangNomad answers plans with fits and records scales.
type fakeGangNomad struct {
	fits   bool
	plans  int
	scales []string // "group=count@index"
	evals  int
}

func (f *fakeGangNomad) evaluate(context.Context, JobKey) error {
	f.evals++
	return nil
}

func (f *fakeGangNomad) plan(_ context.Context, job *api.Job) (*api.JobPlanResponse, error) {
	f.plans++
	for _, tg := range job.TaskGroups {
		if tg.Count == nil || *tg.Count != 2 {
			return nil, errors.New("planned with a count other than the members")
		}
	}
	resp := &api.JobPlanResponse{JobModifyIndex: 7}
	if !f.fits {
		resp.FailedTGAllocs = map[string]*api.AllocationMetric{"worker": {NodesEvaluated: 3, NodesExhausted: 3}}
	}
	return resp, nil
}

func (f *fakeGangNomad) scale(_ context.Context, _ JobKey, group string, count int, index uint64, _ string) error {
	f.scales = append(f.scales, fmt.Sprintf("%s=%d@%d", group, count, index))
	return nil
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
			Tasks: []*api.Task{{Name: "train", Driver: "gpu", Resources: &api.Resources{
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
// admission while another holds GPUs is scaled back to 0 and not planned
// again before the back-off; one whose members run, or whose other
// member completed, stays.
func TestGangRollback(t *testing.T) {
	ctx, t0 := context.Background(), time.Unix(1000, 0)
	cfg := DefaultGangConfig()
	done := member(1, api.AllocClientStatusComplete)
	stopped := member(1, api.AllocClientStatusComplete)
	stopped.DesiredStatus = api.AllocDesiredStatusStop
	for _, tc := range []struct {
		name   string
		allocs []*api.AllocationListStub
		after  time.Duration
		back   bool
	}{
		{"both run", []*api.AllocationListStub{member(0, "running"), member(1, "running")}, time.Minute, false},
		{"one pending within the timeout", []*api.AllocationListStub{member(0, "running"), member(1, "pending")}, 10 * time.Second, false},
		{"one pending past the timeout", []*api.AllocationListStub{member(0, "running"), member(1, "pending")}, time.Minute, true},
		{"one never placed", []*api.AllocationListStub{member(0, "running")}, time.Minute, true},
		{"the other completed", []*api.AllocationListStub{member(0, "running"), done}, time.Minute, false},
		{"the other stopped by a rollback", []*api.AllocationListStub{member(0, "running"), stopped}, time.Minute, true},
	} {
		g, n := NewGangs(cfg, hclog.NewNullLogger()), &fakeGangNomad{fits: true}
		g.admitted[JobKey{Namespace: "default", ID: "train"}] = t0
		got := g.Step(ctx, t0.Add(tc.after), gangSnapshot(tc.allocs...), gangSpecs(gangSpecJob(2)), n)
		rolled := fmt.Sprint(n.scales) == "[worker=0@0]" && len(got) == 1 && got[0].Kind == "gang-rolled-back"
		if rolled != tc.back || (!tc.back && len(n.scales) != 0) {
			t.Errorf("%s: scales %v, decisions %v; want rolled back %v", tc.name, n.scales, kinds(got), tc.back)
			continue
		}
		if !tc.back {
			continue
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
