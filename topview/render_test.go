package topview

import (
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/controller"
	"github.com/nomad-gpu/nomad-gpu/nomadview"
)

const wantTable = `nomad-gpu top  2026-12-03 10:00:00 UTC  nodes 2  GPUs 5 (3 in use, 1 unhealthy)
slices 6 (3 in use)  queued 3 (2 blocked, 1 pending), longest wait 1m35s

NODE gpu-1 (11111111)  ready  pool gpu  class h100  dc dc1
  IDX  UUID          MODEL         HEALTH     UTIL    MEM GiB  TEMP  POWER  USE
  0    GPU-aaaaaaaa  H100 80GB H…  ok          40%  29.3/80.0   45C   300W  used
  1    GPU-bbbbbbbb  H100 80GB H…  UNHEALTHY    0%   0.0/80.0   30C    70W  free
    XID 79 (GPU has fallen off the bus)
  4    GPU-cccccccc  H100 80GB H…  ok          55%  11.7/80.0   51C   250W  2/4
  ├─   share 0       1/4           ok           0%   0.0/20.0               free
  ├─   share 1       1/4           ok         100%   1.0/20.0               used
  ├─   share 2       1/4           ok         100%   0.5/20.0               used
  └─   share 3       1/4           ok           0%   0.0/20.0               free
  7    GPU-eeeeeeee  H100 80GB H…  ok            -   3.0/80.0   38C   120W  1/2
  ├─   MIG-11111111  1g.10gb       ok            -   2.0/10.0               used
  └─   MIG-22222222  1g.10gb       ok            -   1.0/10.0               free
  GPU  SLICES        TASK          ALLOC     MEM GiB  PRED LEFT
  0    -             train/g/t     a0000001     29.3          -
  4    share 1,2     notebook/g/t  a0000003      1.5          -
  7    MIG-11111111  infer/g/t     a0000002      2.0          -

NODE gpu-2 (22222222)  ready  pool batch  class -  dc dc1  ineligible  draining
  [stats unavailable: Unexpected response code: 500 (rpc error: no path to node…
  IDX  UUID          MODEL           HEALTH  UTIL  MEM GiB  TEMP  POWER  USE
  -    GPU-dddddddd  A100-SXM4-40GB  ok         -        -     -      -  free

QUEUE
  JOB         STATE    DEVICES              COUNT   WAIT  PRED WAIT  PRED RUN
  big/g       blocked  gpu x6                   2  1m35s          -         -
    never fits: asks 6 GPUs on one node, pool "gpu" nodes have at most 2; const…
  notebook/g  pending  mps/GPU-cccccccc x2      1    30s          -         -
    placed on gpu-1, not running yet
`

func TestWriteTable(t *testing.T) {
	tests := []struct {
		name string
		in   *Input
		opt  TableOptions
		want []string // lines the output must have, in order; nil means the golden
	}{
		{"fixture", fixtureInput(), TableOptions{}, nil},
		{"fixture at 80", fixtureInput(), TableOptions{Width: 80}, nil},
		{"empty cluster", &Input{Now: t0, Snapshot: &nomadview.Snapshot{}}, TableOptions{}, []string{
			"nomad-gpu top  2026-12-03 10:00:00 UTC  nodes 0  GPUs 0 (0 in use, 0 unhealthy)",
			"queue empty",
			"no GPU nodes",
			"QUEUE  no GPU work waiting",
		}},
		{"a node named but without GPUs", func() *Input {
			in := fixtureInput()
			in.Filter.Nodes = []string{"cpu-1"}
			return in
		}(), TableOptions{}, []string{
			"NODE cpu-1 (33333333)  ready  pool default  class -  dc -  [stats unavailable]",
			"  no GPU devices",
		}},
		{"wider: PCI bus and mode, whole models", fixtureInput(), TableOptions{Width: 120}, []string{
			"  IDX  UUID          PCI BUS       MODEL           MODE   HEALTH     UTIL    MEM GiB  TEMP  POWER  USE",
			"  0    GPU-aaaaaaaa  0000:18:00.0  H100 80GB HBM3  whole  ok          40%  29.3/80.0   45C   300W  used",
			"  ├─   MIG-11111111                1g.10gb         mig    ok            -   2.0/10.0               used",
		}},
		{"filtered", fixtureInput(), TableOptions{Filter: "NOTE"}, []string{
			"nomad-gpu top  2026-12-03 10:00:00 UTC  filter \"NOTE\"  nodes 1",
			"GPUs 1 (1 in use, 0 unhealthy)  slices 4 (2 in use)",
			"  4    GPU-cccccccc  H100 80GB HBM3  ok       55%  11.7/80.0   51C   250W  2/4",
			"  4    share 1,2  notebook/g/t  a0000003      1.5          -",
			"  notebook/g  pending  mps/GPU-cccccccc x2      1   30s          -         -",
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			if err := WriteTable(&b, Build(tc.in), tc.opt); err != nil {
				t.Fatal(err)
			}
			got := b.String()
			if tc.want == nil {
				if got != wantTable {
					t.Errorf("got\n%s\nwant\n%s", got, wantTable)
				}
				return
			}
			rest := got
			for _, line := range tc.want {
				i := strings.Index(rest, line+"\n")
				if i < 0 {
					t.Fatalf("no line %q (in order) in\n%s", line, got)
				}
				rest = rest[i+len(line):]
			}
		})
	}
}

// longNames is the fixture with every name long enough to break a table
// that does not fit its lines.
func longNames() *Input {
	in := fixtureInput()
	long := func(s string) string { return s + strings.Repeat("-and-more", 8) }
	n := in.Nodes[0]
	n.Name, n.NodeClass, n.Datacenter, n.NodePool = long("ip-10-0-12-34.eu-west-1.compute.internal"), long("h100"), long("dc"), long("gpu")
	n.SchedulingEligibility, n.Drain = api.NodeSchedulingIneligible, true
	n.NodeResources.Devices[0].Name = long("NVIDIA H100 80GB HBM3")
	n.NodeResources.Devices[0].Instances[0].HealthDescription = long("XID 79 (GPU has fallen off the bus)")
	n.NodeResources.Devices[1].Attributes["mig_profile"] = strAttr(long("1g.10gb"))
	for _, a := range in.Allocs {
		a.JobID, a.TaskGroup, a.Namespace = long(a.JobID), long("group"), long("research")
		for _, tr := range a.AllocatedResources.Tasks {
			tr.Devices[0].Name = long(tr.Devices[0].Name)
		}
	}
	in.Blocked[0].FailedTGAllocs["g"].ConstraintFiltered[long("${meta.a.very.long.constraint}")] = 3
	in.Stats[node2ID] = NodeStats{Err: errorString(long("Unexpected response code: 500 (rpc error: no path to node)"))}
	in.HistoryError = long("list finished allocations: HTTP 500")
	return in
}

// Lines fit the width asked for, however long the names: the default 80
// columns, or more where a terminal has them.
func TestWriteTableFitsWidth(t *testing.T) {
	for _, width := range []int{0, 70, 80, 100, 120, 200} {
		for name, in := range map[string]func() *Input{"fixture": fixtureInput, "long names": longNames} {
			t.Run(name+" "+time.Duration(width).String(), func(t *testing.T) {
				var b strings.Builder
				if err := WriteTable(&b, Build(in()), TableOptions{Width: width}); err != nil {
					t.Fatal(err)
				}
				limit := width
				if limit == 0 {
					limit = DefaultWidth
				}
				for _, line := range strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n") {
					if textWidth(line) > limit {
						t.Errorf("%d columns, over %d: %q", textWidth(line), limit, line)
					}
				}
				// Cut, not dropped: every GPU still shows its index and
				// UUID, every task its alloc; from 80 columns on, every
				// GPU its temperature and power.
				must := []string{"  7    GPU-eeeeeeee", "a0000002", "UNHEALTHY"}
				if limit >= 80 {
					must = append(must, "45C", "300W")
				}
				for _, w := range must {
					if !strings.Contains(b.String(), w) {
						t.Errorf("no %q in\n%s", w, b.String())
					}
				}
			})
		}
	}
}

func TestTextTableLayout(t *testing.T) {
	cols := func() []column {
		return []column{
			{head: "ID"}, {head: "EXTRA", drop: 1, extra: true}, {head: "NAME", want: 8, min: 4},
			{head: "N", right: true}, {head: "OPT", drop: 1},
		}
	}
	row := []string{"a", "x", "a-long-name", "42", "o"}
	tests := []struct {
		width int
		want  string
	}{
		{80, "ID  EXTRA  NAME          N  OPT\na   x      a-long-name  42  o\n"},
		// Cut to want before an extra column goes.
		{28, "ID  EXTRA  NAME       N  OPT\na   x      a-long-…  42  o\n"},
		// The extra column goes; what it frees widens the name again.
		{27, "ID  NAME          N  OPT\na   a-long-name  42  o\n"},
		{20, "ID  NAME      N  OPT\na   a-long…  42  o\n"},
		{17, "ID  NAME   N  OPT\na   a-l…  42  o\n"},
		// Optional columns go only once elastic ones are at their least.
		{16, "ID  NAME       N\na   a-long-…  42\n"},
		// Fixed columns are never cut: as narrow as it gets.
		{5, "ID  NAME   N\na   a-l…  42\n"},
	}
	for _, tc := range tests {
		tb := &textTable{cols: cols()}
		tb.add("", row...)
		var b strings.Builder
		tb.write(&b, tc.width)
		if got := b.String(); got != tc.want {
			t.Errorf("width %d:\n%s\nwant\n%s", tc.width, got, tc.want)
		}
	}
}

// The controller's section: who leads, and each raise of the ledger, in
// force (to what, until when) or waiting for its job's replacement.
func TestWriteController(t *testing.T) {
	until := time.Date(2026, 12, 5, 4, 1, 20, 0, time.UTC)
	tests := []struct {
		name string
		v    View
		want []string
		not  []string
	}{
		{"not read", View{}, nil, []string{"CONTROLLER"}},
		{"unreadable", View{ControllerError: "403 permission denied"}, []string{"CONTROLLER  unknown: 403 permission denied"}, nil},
		{"no leader", View{Controller: &controller.Status{}}, []string{"CONTROLLER  no leader: nothing protects preempted jobs"}, []string{"PRIORITY"}},
		{"raises", View{Controller: &controller.Status{Leading: true, Leader: "alloc 1a2b3c4d", Raises: []controller.JobRaise{
			{Namespace: "default", Job: "low-a", Own: 30, Priority: 90, Reason: "preempted by alloc 8c41938a", InForce: true, Until: &until},
			{Namespace: "ml", Job: "low-b", Own: 30, Priority: 90, Reason: "preempted by alloc 9e1970e6"},
		}}}, []string{"CONTROLLER  leader alloc 1a2b3c4d", "low-a", "30 → 90", "04:01:20", "preempted by alloc 8c41938a", "ml:low-b", "30 (→ 90)", "waits"}, []string{"MOVED"}},
		{"moves", View{Controller: &controller.Status{Leading: true, Hold: &controller.Hold{NodeName: "gpu-2", Since: until}, Moves: []controller.MoveRecord{
			{At: until, Namespace: "default", Job: "train-7", Alloc: "1a2b3c4d-0000", GPUs: 1, From: "gpu-2", For: "to free 4 GPUs on gpu-2 for hpc-3", Resumed: until.Add(12 * time.Second)},
			{At: until, Namespace: "default", Job: "train-8", Alloc: "5e6f7a8b-0000", GPUs: 1, From: "gpu-2", For: "to free 4 GPUs on gpu-2 for hpc-3"},
		}}}, []string{"node gpu-2 held ineligible since 04:01:20", "MOVED", "train-7", "1a2b3c4d", "gpu-2", "04:01:20", "runs again after 12s", "to free 4 GPUs on gpu-2 for hpc-3", "train-8", "moving"}, []string{"PRIORITY"}},
		{"relief", View{Controller: &controller.Status{Leading: true, Hold: &controller.Hold{NodeName: "gpu-1", GPU: "GPU-4", Since: until,
			Stop: &controller.MoveRecord{Alloc: "9a8b7c6d-0000"}}, Moves: []controller.MoveRecord{
			{At: until, Namespace: "default", Job: "infer-2", Alloc: "1a2b3c4d-0000", Shares: 2, SharesPerGPU: 8, From: "gpu-1", For: "to relieve GPU-4 on gpu-1 at 92% (above 80% for 5m0s)"},
		}}}, []string{"GPU GPU-4 on gpu-1 held since 04:01:20: alloc 9a8b7c6d moves off it", "infer-2", "2/8", "to relieve GPU-4 on gpu-1 at 92%"}, []string{"held ineligible"}},
		{"gangs", View{GeneratedAt: until.Add(90 * time.Second), Controller: &controller.Status{Leading: true, Gangs: []controller.GangStatus{
			{Namespace: "default", Job: "torchrun", State: "placing", Wanted: 2, Placed: 2, Running: 1, Since: until},
			{Namespace: "ml", Job: "mpi", State: "waiting", Wanted: 3, Reason: `group "rank": resources (devices: no devices match request on 3)`, Since: until.Add(time.Minute)},
		}}}, []string{"GANG", "torchrun", "placing", "2/2", "1/2", "1m30s", "ml:mpi", "waiting", "0/3", "30s", "resources (devices: no devices match"}, []string{"MOVED"}},
		{"queues", View{Controller: &controller.Status{Leading: true, Queues: []controller.QueueStatus{
			{Name: "vision", Use: 8.25, Nominal: 6, Borrowed: 2.25, Standing: 1.4, Active: true, Waiting: 3},
			{Name: "speech", Nominal: 6, Lent: 6},
		}}}, []string{"TEAM QUEUE", "FAIR SHARE", "vision", "8.25/6", "2.25", "1.40", "speech", "0/6"}, []string{"GANG"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b strings.Builder
			writeController(&b, &tt.v, 100)
			for _, w := range tt.want {
				if !strings.Contains(b.String(), w) {
					t.Errorf("missing %q in:\n%s", w, b.String())
				}
			}
			for _, w := range tt.not {
				if strings.Contains(b.String(), w) {
					t.Errorf("unexpected %q in:\n%s", w, b.String())
				}
			}
		})
	}
}
