package nomadview

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

func ptr[T any](v T) *T { return &v }

func gpuJob(id, pool string, devices ...string) *api.Job {
	t := &api.Task{Name: "train", Resources: &api.Resources{}}
	for _, d := range devices {
		t.Resources.Devices = append(t.Resources.Devices, &api.RequestedDevice{Name: d, Count: ptr(uint64(2))})
	}
	return &api.Job{ID: ptr(id), NodePool: ptr(pool), JobModifyIndex: ptr(uint64(1)),
		TaskGroups: []*api.TaskGroup{{Name: ptr("g"), Tasks: []*api.Task{t}}}}
}

func blocked(id, job string, modify uint64, coalesced int) *api.Evaluation {
	return &api.Evaluation{ID: id, Namespace: "default", JobID: job, Status: api.EvalStatusBlocked, ModifyIndex: modify,
		CreateTime: time.Unix(100, 0).UnixNano(), FailedTGAllocs: map[string]*api.AllocationMetric{"g": {CoalescedFailures: coalesced}}}
}

func listed(id string, summaryIndex uint64, queued map[string]int) *api.JobListStub {
	s := &api.JobSummary{JobID: id, Namespace: "default", ModifyIndex: summaryIndex, Summary: map[string]api.TaskGroupSummary{}}
	for tg, n := range queued {
		s.Summary[tg] = api.TaskGroupSummary{Queued: n}
	}
	return &api.JobListStub{ID: id, Namespace: "default", JobSummary: s}
}

func TestQueuedCount(t *testing.T) {
	tests := []struct {
		name string
		job  *api.JobListStub
		want int
	}{
		{"summary newer than the eval wins", listed("j", 20, map[string]int{"g": 5}), 5},
		{"summary newer than the eval says 0: a stale blocked eval", listed("j", 20, map[string]int{"g": 0}), 0},
		{"summary as new as the eval (reblocked in one write)", listed("j", 10, map[string]int{"g": 4}), 4},
		{"summary older than the eval has not caught up", listed("j", 9, map[string]int{"g": 0}), 3},
		{"summary without the group", listed("j", 20, map[string]int{"other": 7}), 3},
		{"no job listed", nil, 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := &Snapshot{Blocked: []*api.Evaluation{blocked("e", "j", 10, 2)},
				Specs: map[JobKey]*api.Job{{"default", "j"}: gpuJob("j", "gpu", "nvidia/gpu")}, Jobs: map[JobKey]*api.JobListStub{}}
			if tc.job != nil {
				s.Jobs[JobKey{Namespace: "default", ID: "j"}] = tc.job
			}
			got := 0
			for _, q := range s.QueuedGroups() {
				got += q.Count
			}
			if got != tc.want {
				t.Errorf("queued %d, want %d", got, tc.want)
			}
		})
	}
}

func TestQueuedGroups(t *testing.T) {
	stopped := gpuJob("stopped", "gpu", "nvidia/gpu")
	stopped.Stop = ptr(true)
	older := blocked("e0", "a", 10, 0)
	older.CreateTime = time.Unix(50, 0).UnixNano()
	older.FailedTGAllocs["g"].NodePool = "metric-pool"
	s := &Snapshot{
		Blocked: []*api.Evaluation{blocked("e1", "a", 10, 1), older, blocked("e2", "cpu", 10, 0),
			blocked("e3", "stopped", 10, 0), blocked("e4", "gone", 10, 0)},
		Specs: map[JobKey]*api.Job{
			{"default", "a"}:       gpuJob("a", "gpu", "nvidia/mig/1g.10gb", "nvidia/mig/1g.10gb", "acme/fpga"),
			{"default", "cpu"}:     gpuJob("cpu", "gpu", "acme/fpga"),
			{"default", "stopped"}: stopped,
		},
	}
	got := s.QueuedGroups()
	if len(got) != 1 {
		t.Fatalf("groups %+v, want job a only", got)
	}
	q := got[0]
	want := []DeviceAsk{{DeviceSpec{"nvidia", "mig", "1g.10gb"}, 4}, {DeviceSpec{"acme", "fpga", ""}, 2}}
	if fmt.Sprint(q.Asks) != fmt.Sprint(want) || q.EvalID != "e0" || q.Pool != "metric-pool" || q.Count != 1 || q.GPUTask != "train" {
		t.Errorf("group %+v", q)
	}
}

// waitingGang is a gang job of one group "worker" of members asking 2
// whole GPUs each, at count 0 as submitted.
func waitingGang(id string, members int) *api.Job {
	j := gpuJob(id, "gpu", "nvidia/gpu")
	j.Type, j.Meta = ptr("batch"), map[string]string{"nomad_gpu_gang": "true"}
	g := j.TaskGroups[0]
	g.Name, g.Count, g.Meta = ptr("worker"), ptr(0), map[string]string{"nomad_gpu_gang_members": fmt.Sprint(members)}
	return j
}

func gangStub(id string, modify uint64) *api.JobListStub {
	return &api.JobListStub{ID: id, Namespace: "default", Type: "batch", Priority: 60, JobModifyIndex: modify,
		SubmitTime: time.Unix(70, 0).UnixNano(), Meta: map[string]string{"nomad_gpu_gang": "true"}}
}

// A gang waiting at count 0 has no evaluation: its member groups are
// queued all the same, each with its members; an admitted gang is left
// to its evaluations, and the controller's placeholder for a reserved
// gang is no queue of its own (its gang is counted).
func TestQueuedGroupsCountsWaitingGangs(t *testing.T) {
	admitted := waitingGang("admitted", 2)
	admitted.TaskGroups[0].Count = ptr(2)
	placeholder := gpuJob("nomad-gpu-reserve-train", "gpu", "nvidia/gpu")
	placeholder.Meta = map[string]string{"nomad_gpu_reservation_for": "train"}
	stopped := gangStub("stopped", 1)
	stopped.Stop = true
	s := &Snapshot{
		Blocked: []*api.Evaluation{blocked("e1", "nomad-gpu-reserve-train", 10, 3)},
		Specs:   map[JobKey]*api.Job{{"default", "nomad-gpu-reserve-train"}: placeholder},
		Jobs: map[JobKey]*api.JobListStub{{"default", "train"}: gangStub("train", 1), {"default", "admitted"}: gangStub("admitted", 1),
			{"default", "stopped"}: stopped},
		Gangs: map[JobKey]*api.Job{{"default", "train"}: waitingGang("train", 3), {"default", "admitted"}: admitted,
			{"default", "stopped"}: waitingGang("stopped", 2)},
	}
	got := s.QueuedGroups()
	if len(got) != 1 {
		t.Fatalf("groups %+v, want the waiting gang's only", got)
	}
	q := got[0]
	if q.JobID != "train" || q.Group != "worker" || q.Count != 3 || !q.Gang || q.Priority != 60 || q.Pool != "gpu" ||
		!q.Since.Equal(time.Unix(70, 0)) || fmt.Sprint(q.Asks) != fmt.Sprint([]DeviceAsk{{DeviceSpec{"nvidia", "gpu", ""}, 2}}) {
		t.Errorf("group %+v", q)
	}
}

func gpuNode(id, pool string, healthy bool, devs ...*api.NodeDeviceResource) *api.NodeListStub {
	for _, d := range devs {
		for _, in := range d.Instances {
			in.Healthy = in.Healthy || healthy
		}
	}
	return &api.NodeListStub{ID: id, NodePool: pool, Status: api.NodeStatusReady,
		SchedulingEligibility: api.NodeSchedulingEligible, NodeResources: &api.NodeResources{Devices: devs}}
}

func group(typ, name string, ids ...string) *api.NodeDeviceResource {
	d := &api.NodeDeviceResource{Vendor: "nvidia", Type: typ, Name: name}
	for _, id := range ids {
		d.Instances = append(d.Instances, &api.NodeDevice{ID: id})
	}
	return d
}

func holding(node, status string, typ string, ids ...string) *api.AllocationListStub {
	return &api.AllocationListStub{ID: "alloc-" + ids[0], NodeID: node, ClientStatus: status,
		AllocatedResources: &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{
			"t": {Devices: []*api.AllocatedDeviceResource{{Vendor: "nvidia", Type: typ, DeviceIDs: ids}}}}}}
}

func TestFreeSlices(t *testing.T) {
	draining := gpuNode("n3", "gpu", true, group("gpu", "H100", "g9"))
	draining.Drain = true
	s := &Snapshot{
		Nodes: []*api.NodeListStub{
			gpuNode("n1", "gpu", true, group("gpu", "H100", "g1", "g2"), group("mig", "1g.10gb", "m1", "m2", "m3"), group("mps", "GPU-x", "s1", "s2")),
			gpuNode("n2", "infer", false, group("gpu", "H100", "g3")), // unhealthy
			draining,
		},
		Allocs: []*api.AllocationListStub{
			holding("n1", "running", "gpu", "g1"), holding("n1", "pending", "mig", "m1"),
			holding("n1", "complete", "mps", "s1"), // terminal: holds nothing
		},
	}
	got := s.FreeSlices()
	want := map[string]FreeSlices{"gpu": {GPUs: 1, MIG: map[string]int{"1g.10gb": 2}, MPS: 2}, "infer": {MIG: map[string]int{}}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("free %v, want %v", got, want)
	}
	if held := s.HeldSlices()["n1"]; len(held) != 2 {
		t.Errorf("held on n1 %+v, want the running and the pending allocation's", held)
	}
}

func TestGPUEquivalents(t *testing.T) {
	tests := []struct {
		ask    string
		count  int
		shares int
		want   float64
	}{
		{"nvidia/gpu", 2, 0, 2},
		{"gpu", 1, 0, 1},
		{"nvidia/mig/3g.40gb", 7, 0, 3},
		{"nvidia/mig/1c.3g.40gb", 7, 0, 1},
		{"nvidia/mps", 2, 4, 0.5},
		{"nvidia/mps", 2, 0, 2},
		{"acme/fpga", 3, 0, 0},
		{"nvidia/nic", 3, 0, 0},
	}
	for _, tc := range tests {
		got := DeviceAsk{ParseRequest(tc.ask), tc.count}.GPUEquivalents(tc.shares)
		if got != tc.want {
			t.Errorf("%d × %s (shares %d) = %v, want %v", tc.count, tc.ask, tc.shares, got, tc.want)
		}
	}
}

func TestIsNotFound(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/job/gone":
			http.Error(w, "job not found", http.StatusNotFound)
		default:
			http.Error(w, "404 of them failed", http.StatusInternalServerError)
		}
	}))
	defer srv.Close()
	cl, err := api.NewClient(&api.Config{Address: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	_, _, gone := cl.Jobs().Info("gone", nil)
	_, _, broken := cl.Jobs().Info("other", nil)
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"404 from the API", gone, true},
		{"404 wrapped", fmt.Errorf("reading: %w", gone), true},
		{"500 whose text says 404", broken, false},
		{"plain text 404", errors.New("404"), false},
		{"variable path not found", api.ErrVariablePathNotFound, true},
		{"typed", NotFound(gone), true},
	}
	for _, tc := range tests {
		if got := IsNotFound(tc.err); got != tc.want {
			t.Errorf("%s: IsNotFound(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
	if !errors.Is(NotFound(gone), ErrNotFound) || errors.Is(NotFound(broken), ErrNotFound) {
		t.Error("NotFound wraps only 404s")
	}
}

func TestDatacenterMatch(t *testing.T) {
	cases := []struct {
		p, s string
		want bool
	}{
		{"dc1", "dc1", true}, {"dc1", "dc10", false}, {"*", "x", true}, {"dc*", "dc1", true},
		{"dc*", "eu1", false}, {"eu-*-1", "eu-west-1", true}, {"eu-*-1", "eu-west-2", false},
		{"*a", "ba", true}, {"a*b*c", "abc", true}, {"a*b*c", "acb", false}, {"a*a", "a", false},
		// A middle part that recurs later must be matched at its first
		// place, leaving the rest for the parts after it.
		{"*b*b", "xbyb", true}, {"*b*b", "xb", false}, {"a*b*b", "abb", true}, {"dc-*-*-1", "dc-a-b-1", true},
	}
	for _, c := range cases {
		if got := DatacenterMatch(c.p, c.s); got != c.want {
			t.Errorf("DatacenterMatch(%q, %q) = %v", c.p, c.s, got)
		}
	}
}

// A blocked evaluation outlives the queue it recorded: once a summary at
// least as new as it says a group has nothing queued, the group must not
// be listed at all, not listed with a count of 0, or the APM, `top` and
// the controller would each see a queue that is gone.
func TestQueuedGroupsLeavesOutGroupsWithNothingQueued(t *testing.T) {
	tests := []struct {
		name   string
		queued map[string]int
		want   []string
	}{
		{"the only group has nothing queued", map[string]int{"g": 0}, nil},
		{"one group of two has nothing queued", map[string]int{"g": 0, "h": 2}, []string{"h"}},
		{"both groups queued", map[string]int{"g": 1, "h": 2}, []string{"g", "h"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			job := gpuJob("j", "gpu", "nvidia/gpu")
			h := *job.TaskGroups[0]
			h.Name = ptr("h")
			job.TaskGroups = append(job.TaskGroups, &h)
			e := blocked("e", "j", 10, 2)
			for tg := range tc.queued {
				e.FailedTGAllocs[tg] = &api.AllocationMetric{CoalescedFailures: 2}
			}
			s := &Snapshot{Blocked: []*api.Evaluation{e},
				Specs: map[JobKey]*api.Job{{"default", "j"}: job},
				Jobs:  map[JobKey]*api.JobListStub{{"default", "j"}: listed("j", 20, tc.queued)}}
			var got []string
			for _, q := range s.QueuedGroups() {
				got = append(got, q.Group)
				if q.Count < 1 {
					t.Errorf("group %s listed with count %d", q.Group, q.Count)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("queued groups %v, want %v", got, tc.want)
			}
		})
	}
}
