package topview

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nomad-gpu/nomad-gpu/controller"
)

// waitView is a view of three waiting jobs: big (blocked, the longest
// wait), notebook (pending) and train, a gang of two groups held at
// count 0.
func waitView() *View {
	gpu := func(n int) []DeviceAsk { return []DeviceAsk{{Name: "nvidia/gpu", Count: n}} }
	return &View{GeneratedAt: t0, Queue: []QueueEntry{
		{Job: "big", Namespace: "default", Group: "g", State: StateBlocked, Devices: gpu(6), Count: 2, WaitingSeconds: 900, Since: t0.Add(-900 * time.Second),
			Reason: "devices exhausted on 2 nodes", PredictedWaitSeconds: ptr(int64(600)), PredictionBasis: "list_schedule"},
		{Job: "train", Namespace: "vision", Group: "head", State: StateBlocked, Devices: gpu(1), Count: 1, WaitingSeconds: 300, Since: t0.Add(-300 * time.Second),
			Reason: "gang: …", Gang: true, PredictedWaitSeconds: ptr(int64(60)), PredictionBasis: "fits_now"},
		{Job: "train", Namespace: "vision", Group: "workers", State: StateBlocked, Devices: gpu(4), Count: 2, WaitingSeconds: 200, Since: t0.Add(-200 * time.Second),
			Reason: "gang: …", Gang: true, PredictedWaitSeconds: ptr(int64(1200)), PredictionBasis: "list_schedule"},
		{Job: "notebook", Namespace: "default", Group: "g", State: StatePending, Devices: gpu(1), Count: 1, WaitingSeconds: 30, Since: t0.Add(-30 * time.Second),
			Reason: "placed on gpu-1, not running yet"},
	}}
}

func TestWaiting(t *testing.T) {
	queues := []controller.QueueStatus{{Name: "vision", Use: 8, Nominal: 6, Borrowed: 2, Active: true, Standing: 1.5, Waiting: 3}}
	tests := []struct {
		name      string
		edit      func(v *View)
		namespace string
		// want: per job, "pos queue ns/job state count wait kind start basis: reason".
		want []string
	}{
		{
			name: "no controller: a held job is one line of its groups, the rest by longest wait",
			want: []string{
				"0 - default/big blocked 2 900 capacity 10:10 list_schedule: devices exhausted on 2 nodes",
				"0 - vision/train held 3 300 gang 10:20 list_schedule: gang: its 3 members wait for the controller to admit them all at once; it has given no reason yet",
				"0 - default/notebook pending 1 30 pending - : placed on gpu-1, not running yet",
			},
		},
		{
			name: "a held job's start is unknown when one group's is",
			edit: func(v *View) { v.Queue[2].PredictedWaitSeconds, v.Queue[2].PredictionBasis = nil, "none" },
			want: []string{"0 - default/big", "0 - vision/train held 3 300 gang - none:", "0 - default/notebook"},
		},
		{
			name: "the controller's place, queue and reason; placed jobs first",
			edit: func(v *View) {
				v.Controller = &controller.Status{Leading: true, Queues: queues, Gangs: []controller.GangStatus{
					{Namespace: "vision", Job: "train", State: "waiting", Wanted: 3, Queue: "vision", Position: 2,
						Reason: "quota: vision would use 11 of its nominal 6, and it is in no cohort to borrow from"},
					{Namespace: "vision", Job: "prep", State: "waiting", Wanted: 1, Queue: "vision", Position: 1, Since: t0.Add(-time.Hour),
						Reason: "capacity: group \"g\": no node has 8 GPUs free"},
					{Namespace: "nlp", Job: "bad", State: "invalid", Wanted: 2, Since: t0.Add(-2 * time.Hour), Reason: "not admitted: group \"g\": a member never fits"},
					{Namespace: "nlp", Job: "after", State: "waiting", Wanted: 1, Queue: "nlp", Since: t0.Add(-10 * time.Second), Reason: "dependency: after prep, which has not completed yet"},
					{Namespace: "vision", Job: "running", State: "running", Wanted: 2},
				}}
			},
			want: []string{
				"1 vision vision/prep held 1 3600 capacity - : capacity:",
				"2 vision vision/train held 3 300 quota 10:20 list_schedule: quota: vision would use 11",
				"0 - nlp/bad held 2 7200 invalid - : not admitted:",
				"0 - default/big blocked 2 900 capacity",
				"0 - default/notebook pending",
				"0 nlp nlp/after held 1 10 dependency - : dependency: after prep",
			},
		},
		{
			name:      "a namespace keeps the controller's held jobs of it alone",
			namespace: "vision",
			edit: func(v *View) {
				v.Queue = v.Queue[1:3]
				v.Controller = &controller.Status{Gangs: []controller.GangStatus{
					{Namespace: "vision", Job: "prep", State: "waiting", Wanted: 1, Position: 1, Reason: "cohort: lab lends 0 now, 1 needed"},
					{Namespace: "nlp", Job: "bad", State: "invalid", Wanted: 2, Reason: "not admitted: …"},
				}}
			},
			want: []string{"1 - vision/prep held 1 0 cohort", "0 - vision/train held 3 300 gang"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := waitView()
			if tc.edit != nil {
				tc.edit(v)
			}
			r := Waiting(v, tc.namespace)
			if len(r.Jobs) != len(tc.want) {
				t.Fatalf("jobs %s, want %d", waitLines(r), len(tc.want))
			}
			for i, got := range waitLines(r) {
				if !strings.HasPrefix(got, tc.want[i]) {
					t.Errorf("job %d\n got %s\nwant %s…", i, got, tc.want[i])
				}
			}
		})
	}
}

func waitLines(r WaitReport) []string {
	var out []string
	for _, j := range r.Jobs {
		start := "-"
		if j.PredictedStart != nil {
			start = j.PredictedStart.UTC().Format("15:04")
		}
		out = append(out, fmt.Sprintf("%d %s %s/%s %s %d %d %s %s %s: %s", j.Position, orDash(j.Queue), j.Namespace, j.Job, j.State, j.Count,
			j.WaitingSeconds, j.Kind, start, j.PredictionBasis, j.Reason))
	}
	return out
}

func TestWaitingFields(t *testing.T) {
	v := waitView()
	r := Waiting(v, "")
	if r.Queues != nil || r.Leading != nil || !r.GeneratedAt.Equal(t0) {
		t.Errorf("report %+v", r)
	}
	train := r.Jobs[1]
	if len(train.Asks) != 2 || train.Asks[0].Group != "head" || train.Asks[1].Group != "workers" || train.Asks[1].Count != 2 ||
		train.Asks[1].Devices[0].Count != 4 || !train.Since.Equal(t0.Add(-300*time.Second)) || *train.PredictedWaitSeconds != 1200 {
		t.Errorf("held job %+v", train)
	}
	v.Controller = &controller.Status{Queues: []controller.QueueStatus{{Name: "vision"}}}
	r = Waiting(v, "")
	if len(r.Queues) != 1 || r.Leading == nil || *r.Leading {
		t.Errorf("queues %+v, leading %v", r.Queues, r.Leading)
	}
}

func TestReasonKind(t *testing.T) {
	tests := []struct{ reason, want string }{
		{`quota "gpu-quota" reached`, "quota"},
		{"devices exhausted on 2 nodes; quota exhausted: devices", "quota"},
		{"devices exhausted on 2 nodes", "capacity"},
		{`never fits: asks 16 GPUs on one node; constraint "x" filtered 1 node`, "invalid"},
		{"placed on gpu-1, not running yet", "pending"},
		{"no node of the job's pool has its locality read yet", "other"},
		{`constraint "missing devices" filtered 1 node`, "other"},
		{"", "other"},
	}
	for _, tc := range tests {
		if got := reasonKind(tc.reason); got != tc.want {
			t.Errorf("reasonKind(%q) = %q, want %q", tc.reason, got, tc.want)
		}
	}
}

func TestWriteWaitTable(t *testing.T) {
	v := waitView()
	v.Controller = &controller.Status{Leading: false, Queues: []controller.QueueStatus{
		{Name: "vision", Use: 8.25, Nominal: 6, Borrowed: 2.25, Active: true, Standing: 1.5, Waiting: 3}, {Name: "idle", Nominal: 2, Lent: 2}}}
	v.Controller.Gangs = []controller.GangStatus{{Namespace: "vision", Job: "train", State: "waiting", Queue: "vision", Position: 1,
		Reason: "quota: vision would use 11.25 of its nominal 6, and it is in no cohort to borrow from; it waits until its own work ends"}}
	v.Queue[0].PredictedWaitSeconds = ptr(int64(20 * 3600))
	var b strings.Builder
	if err := WriteWaitTable(&b, Waiting(v, ""), WaitTableOptions{Width: 120, Location: time.UTC}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"nomad-gpu queue  2026-12-03 10:00:00 UTC  3 jobs waiting (1 held), 6 allocations\n",
		"no controller leads: no held job is admitted until one does\n",
		"POS  QUEUE   JOB               ASKS                     WAITING  PREDICTED START  KIND\n",
		"  1  vision  vision/train      1×(gpu x1) + 2×(gpu x4)    5m00s  ~10:20 (in 20m)  quota\n",
		"  quota: vision would use 11.25 of its nominal 6, and it is in no cohort to borrow from; it waits until its own work\n  ends\n",
		"  -  -       default/big       2×(gpu x6)                15m00s  ~Dec 04 06:00    capacity\n",
		"  -  -       default/notebook  1×(gpu x1)                   30s  -                pending\n",
		"QUEUE   USED  NOMINAL  BORROWED  LENT  FAIR SHARE  WAITING\n",
		"vision  8.25        6      2.25     0        1.50        3\n",
		"idle       0        2         0     2           -        0\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	b.Reset()
	if err := WriteWaitTable(&b, Waiting(v, ""), WaitTableOptions{Width: 64, Location: time.UTC}); err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		if textWidth(line) > 64 {
			t.Errorf("line wider than 64: %q", line)
		}
	}
	b.Reset()
	if err := WriteWaitTable(&b, Waiting(&View{GeneratedAt: t0}, ""), WaitTableOptions{}); err != nil || !strings.Contains(b.String(), "\nno GPU work waiting\n") {
		t.Errorf("empty report %q, %v", b.String(), err)
	}
}
