package sizing

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/controller/sizing/history"
	"github.com/nomad-gpu/nomad-gpu/nomadview"
)

// fakeCluster is one node with 8 MPS shares of one GPU and jobs each with
// one running allocation holding the shares its current version asks
// for, used at util %. register is what the controller does with a
// resize: the job's next version replaces its allocation.
type fakeCluster struct {
	jobs map[string]*api.Job
	util map[string]float64 // job → MPS utilisation of its shares
}

func (f *fakeCluster) shares(job string) []string {
	var ids []string
	for i := range *f.jobs[job].TaskGroups[0].Tasks[0].Resources.Devices[0].Count {
		ids = append(ids, fmt.Sprintf("%s-s%d", job, i))
	}
	return ids
}

func (f *fakeCluster) snapshot() *nomadview.Snapshot {
	instances := make([]*api.NodeDevice, 8)
	for i := range instances {
		instances[i] = &api.NodeDevice{ID: fmt.Sprintf("share-%d", i), Healthy: true}
	}
	snap := &nomadview.Snapshot{Jobs: map[nomadview.JobKey]*api.JobListStub{},
		Nodes: []*api.NodeListStub{{ID: "n1", NodePool: "default", NodeResources: &api.NodeResources{
			Devices: []*api.NodeDeviceResource{{Vendor: "nvidia", Type: "mps", Name: "GPU-a", Instances: instances}}}}}}
	for id, j := range f.jobs {
		snap.Jobs[nomadview.JobKey{Namespace: "default", ID: id}] = &api.JobListStub{ID: id, Namespace: "default", Priority: *j.Priority}
		snap.Allocs = append(snap.Allocs, &api.AllocationListStub{ID: fmt.Sprintf("%s-v%d", id, *j.JobModifyIndex), Namespace: "default", JobID: id, TaskGroup: "g", NodeID: "n1",
			ClientStatus: "running", CreateTime: time.Unix(1000, 0).UnixNano(),
			AllocatedResources: &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{
				"t": {Devices: []*api.AllocatedDeviceResource{{Vendor: "nvidia", Type: "mps", Name: "GPU-a", DeviceIDs: f.shares(id)}}}}}})
	}
	return snap
}

func (f *fakeCluster) DeviceStats(_ context.Context, node string) ([]*api.DeviceGroupStats, error) {
	if node != "n1" {
		return nil, errors.New("no such node")
	}
	inst := map[string]*api.DeviceStats{}
	for id, u := range f.util {
		used, limit := int64(1024), int64(10240)
		for _, s := range f.shares(id) {
			inst[s] = &api.DeviceStats{Stats: &api.StatObject{Attributes: map[string]*api.StatValue{
				contract.StatShareUtil: {FloatNumeratorVal: &u}, contract.StatShareUsed: {IntNumeratorVal: &used, IntDenominatorVal: &limit}}}}
		}
	}
	return []*api.DeviceGroupStats{{Vendor: "nvidia", Type: "mps", Name: "GPU-a", InstanceStats: inst}}, nil
}

func (f *fakeCluster) Job(_ context.Context, _, id string) (*api.Job, error) {
	j := f.jobs[id]
	if j == nil {
		return nil, errors.New("job not found")
	}
	// A copy, as Nomad's API gives: a resize changes the caller's.
	c := *j
	c.TaskGroups = []*api.TaskGroup{{Name: j.TaskGroups[0].Name, Tasks: []*api.Task{cloneTask(j.TaskGroups[0].Tasks[0])}}}
	return &c, nil
}

func cloneTask(t *api.Task) *api.Task {
	c := *t
	d := *t.Resources.Devices[0]
	c.Resources = &api.Resources{Devices: []*api.RequestedDevice{&d}}
	c.Meta = map[string]string{}
	for k, v := range t.Meta {
		c.Meta[k] = v
	}
	return &c
}

func (f *fakeCluster) register(j *api.Job) {
	idx := *j.JobModifyIndex + 1
	j.JobModifyIndex = &idx
	f.jobs[*j.ID] = j
}

func sizedJob(id, mode string, checkpoint bool) *api.Job {
	two, prio, idx := uint64(2), 50, uint64(1)
	cfg := map[string]any{"command": "train"}
	if checkpoint {
		cfg["checkpoint"] = []any{map[string]any{}}
	}
	return &api.Job{ID: &id, Name: &id, Namespace: ptr("default"), NodePool: ptr("default"), Priority: &prio, JobModifyIndex: &idx,
		Meta: map[string]string{MetaMode: mode, MetaInterval: "10m"},
		TaskGroups: []*api.TaskGroup{{Name: ptr("g"), Tasks: []*api.Task{{Name: "t", Driver: "gpu", Config: cfg,
			Resources: &api.Resources{Devices: []*api.RequestedDevice{{Name: "nvidia/mps", Count: &two}}}}}}}}
}

func TestSizerStep(t *testing.T) {
	cases := []struct {
		name   string
		job    *api.Job
		util   float64
		dryRun bool
		want   []uint64 // the counts resized to, in order
	}{
		// 2 → 4 once 5 minutes of samples say so, 4 → 8 not before the
		// job's 10 minute interval has passed, then 8 is the node's most.
		{"auto and starved grows, once per interval", sizedJob("starved", "auto", true), 99, false, []uint64{4, 8}},
		{"auto and idle shrinks to its floor", sizedJob("idle", "auto", true), 5, false, []uint64{1}},
		{"auto and busy keeps", sizedJob("fits", "auto", true), 70, false, nil},
		{"recommend is never resized", sizedJob("watched", "recommend", true), 99, false, nil},
		{"no checkpoint is never restarted", sizedJob("nockpt", "auto", false), 99, false, nil},
		{"a dry run records no history, so never has enough", sizedJob("dry", "auto", true), 99, true, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := &fakeCluster{jobs: map[string]*api.Job{*c.job.ID: c.job}, util: map[string]float64{*c.job.ID: c.util}}
			st, err := history.Open(filepath.Join(t.TempDir(), "h.db"), history.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			th := DefaultThresholds
			th.MinSpan = 5 * time.Minute
			s := &Sizer{Cluster: f, Store: st, DryRun: c.dryRun, Window: time.Hour, Thresholds: th, Logger: hclog.NewNullLogger()}
			start := time.Now()
			var got []uint64
			var resizedAt []time.Duration
			// 60 rounds 30 s apart: half an hour, three times the interval.
			for i := range 60 {
				at := time.Duration(i) * 30 * time.Second
				rep, err := s.Step(context.Background(), f.snapshot(), start.Add(at))
				if err != nil {
					t.Fatalf("round %d: %v", i, err)
				}
				if wantSamples := map[bool]int{false: 1, true: 0}[c.dryRun]; rep.Samples != wantSamples || rep.Runs != 1 {
					t.Fatalf("round %d: %d samples, %d runs; want %d and 1", i, rep.Samples, rep.Runs, wantSamples)
				}
				for _, r := range rep.Resizes {
					task := r.Job.TaskGroups[0].Tasks[0]
					if len(r.Resized) != 1 || !strings.Contains(r.Resized[0].Reason, "→") || task.Meta[MetaLastResize] == "" {
						t.Errorf("resize %+v: want one task, its reason and %s meta (%v)", r.Resized, MetaLastResize, task.Meta)
					}
					got = append(got, *task.Resources.Devices[0].Count)
					resizedAt = append(resizedAt, at)
					f.register(r.Job)
				}
			}
			if !slices.Equal(got, c.want) {
				t.Fatalf("resized to %v (at %v), want %v", got, resizedAt, c.want)
			}
			for i := 1; i < len(resizedAt); i++ {
				if gap := resizedAt[i] - resizedAt[i-1]; gap < 10*time.Minute {
					t.Errorf("resized again %v after the last resize, within the 10m interval", gap)
				}
			}
		})
	}
}

func TestSizerNeedsHistory(t *testing.T) {
	s := &Sizer{Cluster: &fakeCluster{}, Logger: hclog.NewNullLogger()}
	if _, err := s.Step(context.Background(), &nomadview.Snapshot{}, time.Now()); err == nil || !strings.Contains(err.Error(), "no history") {
		t.Fatalf("a sizer with neither store nor Prometheus: %v", err)
	}
}
