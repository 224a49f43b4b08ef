package topview

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

func TestQueue(t *testing.T) {
	gpu3 := &api.RequestedDevice{Name: "nvidia/gpu", Count: ptr(uint64(3))}
	tests := []struct {
		name string
		edit func(in *Input)
		want []string // job/group state devices count wait reason
	}{
		{
			name: "blocked from the summary, pending from its devices, longest wait first",
			want: []string{
				`big/g blocked nvidia/gpu x6 2 1m35s never fits: asks 6 GPUs on one node, pool "gpu" nodes have at most 2; constraint "missing devices" filtered 1 node`,
				`notebook/g pending nvidia/mps/` + gpuM + ` x2 1 30s placed on gpu-1, not running yet`,
			},
		},
		{
			name: "no summary: the eval's failures count",
			edit: func(in *Input) {
				delete(in.Jobs, JobKey{Namespace: "default", ID: "big"})
				in.Blocked[0].FailedTGAllocs["g"].CoalescedFailures = 4
			},
			want: []string{`big/g blocked nvidia/gpu x6 5 1m35s`, `notebook/g pending`},
		},
		{
			name: "summary older than the eval says 0 queued (not recorded yet): the eval's failures count",
			edit: func(in *Input) {
				in.Jobs[JobKey{Namespace: "default", ID: "big"}].JobSummary.ModifyIndex = 5
				in.Jobs[JobKey{Namespace: "default", ID: "big"}].JobSummary.Summary["g"] = api.TaskGroupSummary{}
			},
			want: []string{`big/g blocked nvidia/gpu x6 1 1m35s`, `notebook/g pending`},
		},
		{
			// The rule the APM applies too (nomadview.queuedCount): the
			// summary, not the eval's failures.
			name: "summary newer than the eval says 0 queued: the blocked eval is stale, nothing waits",
			edit: func(in *Input) {
				in.Jobs[JobKey{Namespace: "default", ID: "big"}].JobSummary.Summary["g"] = api.TaskGroupSummary{}
			},
			want: []string{`notebook/g pending`},
		},
		{
			name: "work asking for no GPU is not GPU work",
			edit: func(in *Input) {
				in.Specs[JobKey{Namespace: "default", ID: "big"}] = jobWithDevices("big", "gpu", &api.RequestedDevice{Name: "xilinx/fpga"})
			},
			want: []string{`notebook/g pending`},
		},
		{
			name: "a type-only ask is GPU work (Nomad reads a/b as vendor/type); other devices ride along",
			edit: func(in *Input) {
				in.Specs[JobKey{Namespace: "default", ID: "big"}] = jobWithDevices("big", "gpu",
					&api.RequestedDevice{Name: "mig"}, &api.RequestedDevice{Name: "xilinx/fpga", Count: ptr(uint64(1))})
			},
			want: []string{`big/g blocked mig x2, xilinx/fpga x2 2`, `notebook/g pending`},
		},
		{
			name: "stopped, unknown and unblocked evaluations' jobs are left out",
			edit: func(in *Input) {
				in.Specs[JobKey{Namespace: "default", ID: "big"}].Stop = ptr(true)
				in.Blocked = append(in.Blocked,
					blockedEval("e2", "gone", t0, missingDevices()),
					&api.Evaluation{ID: "e3", Namespace: "default", JobID: "big", Status: "complete", FailedTGAllocs: map[string]*api.AllocationMetric{"g": nil}})
			},
			want: []string{`notebook/g pending`},
		},
		{
			name: "one entry per group: the oldest blocked eval wins",
			edit: func(in *Input) {
				in.Blocked = append(in.Blocked, blockedEval("e0", "big", t0.Add(-time.Hour), missingDevices()))
			},
			want: []string{`big/g blocked nvidia/gpu x6 2 1h00m`, `notebook/g pending`},
		},
		{
			name: "a job in pool all passes a pool filter",
			edit: func(in *Input) {
				in.Filter.Pool = "gpu"
				in.Blocked[0].FailedTGAllocs["g"].NodePool = ""
				in.Specs[JobKey{Namespace: "default", ID: "big"}] = jobWithDevices("big", "all", gpu3)
			},
			want: []string{`big/g blocked`, `notebook/g pending`},
		},
		{
			name: "a job without a pool is in default",
			edit: func(in *Input) {
				in.Filter.Pool = "gpu"
				in.Blocked[0].FailedTGAllocs["g"].NodePool = ""
				in.Specs[JobKey{Namespace: "default", ID: "big"}] = jobWithDevices("big", "", gpu3)
			},
			want: []string{`notebook/g pending`},
		},
		{
			name: "a gang waiting for admission is queued with its members, though it has no evaluation",
			edit: func(in *Input) {
				k := JobKey{Namespace: "default", ID: "train"}
				in.Jobs[k] = &api.JobListStub{ID: "train", Namespace: "default", Type: "batch", Meta: map[string]string{"nomad_gpu_gang": "true"},
					SubmitTime: t0.Add(-2 * time.Hour).UnixNano()}
				job := jobWithDevices("train", "gpu", &api.RequestedDevice{Name: "nvidia/gpu", Count: ptr(uint64(1))})
				job.TaskGroups[0].Count, job.TaskGroups[0].Meta = ptr(0), map[string]string{"nomad_gpu_gang_members": "2"}
				in.Gangs = map[JobKey]*api.Job{k: job}
			},
			want: []string{
				`train/g blocked nvidia/gpu x2 2 2h00m gang: its 2 members wait to be admitted all at once (CONTROLLER says why)`,
				`big/g blocked`, `notebook/g pending`,
			},
		},
		{
			name: "a clock behind the eval waits 0",
			edit: func(in *Input) { in.Now = t0.Add(-time.Hour) },
			want: []string{`big/g blocked nvidia/gpu x6 2 0s`, `notebook/g pending nvidia/mps/` + gpuM + ` x2 1 0s`},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := fixtureInput()
			if tc.edit != nil {
				tc.edit(in)
			}
			q := buildQueue(in)
			if len(q) != len(tc.want) {
				t.Fatalf("queue %+v, want %d entries", q, len(tc.want))
			}
			for i, e := range q {
				asks := make([]string, len(e.Devices))
				for j, d := range e.Devices {
					asks[j] = fmt.Sprintf("%s x%d", d.Name, d.Count)
				}
				got := fmt.Sprintf("%s/%s %s %s %d %s %s", e.Job, e.Group, e.State, strings.Join(asks, ", "), e.Count, FormatWait(e.WaitingSeconds), e.Reason)
				if e.Gang != (e.Job == "train") {
					t.Errorf("entry %d (%s) gang %t", i, e.Job, e.Gang)
				}
				if !strings.HasPrefix(got, tc.want[i]) {
					t.Errorf("entry %d\n got %s\nwant %s…", i, got, tc.want[i])
				}
			}
		})
	}
}

func TestQueueEntryFields(t *testing.T) {
	q := buildQueue(fixtureInput())
	b := q[0]
	if b.Namespace != "default" || b.Pool != "gpu" || !b.Since.Equal(t0.Add(-95*time.Second)) || b.WaitingSeconds != 95 || b.Node != "" {
		t.Errorf("blocked entry %+v", b)
	}
	p := q[1]
	if p.Node != "gpu-1" || p.Pool != "gpu" || p.Count != 1 || p.WaitingSeconds != 30 {
		t.Errorf("pending entry %+v", p)
	}
}

func TestFailureReason(t *testing.T) {
	tests := []struct {
		name  string
		m     *api.AllocationMetric
		quota string
		want  string
	}{
		{"nil", nil, "", "blocked"},
		{"quota only", nil, "gpu-quota", `quota "gpu-quota" reached`},
		{"no nodes", &api.AllocationMetric{NodePool: "gpu"}, "", "no nodes were eligible for evaluation in node pool gpu"},
		{"missing devices", missingDevices(), "", `constraint "missing devices" filtered 1 node`},
		{
			"filtered and exhausted",
			&api.AllocationMetric{
				NodesEvaluated: 5, ClassFiltered: map[string]int{"cpu": 2}, ConstraintFiltered: map[string]int{"${attr.kernel.name} = linux": 1},
				NodesExhausted: 2, DimensionExhausted: map[string]int{"devices": 2},
			}, "",
			`class "cpu" filtered 2 nodes; constraint "${attr.kernel.name} = linux" filtered 1 node; devices exhausted on 2 nodes`,
		},
		{"exhausted without dimension", &api.AllocationMetric{NodesEvaluated: 3, NodesExhausted: 3}, "", "resources exhausted on 3 nodes"},
		{"quota exhausted", &api.AllocationMetric{NodesEvaluated: 1, QuotaExhausted: []string{"devices"}}, "q", `quota "q" reached; quota exhausted: devices`},
		{"evaluated, nothing recorded", &api.AllocationMetric{NodesEvaluated: 1}, "", "blocked"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := FailureReason(tc.m, tc.quota); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestFormatWait(t *testing.T) {
	for s, want := range map[int64]string{0: "0s", 59: "59s", 60: "1m00s", 3599: "59m59s", 3600: "1h00m", 86399: "23h59m", 90000: "1d01h"} {
		if got := FormatWait(s); got != want {
			t.Errorf("FormatWait(%d) = %q, want %q", s, got, want)
		}
	}
}
