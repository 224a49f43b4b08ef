package clusterview

import (
	"strings"
	"testing"
)

const wantTable = `nomad-gpu top  2026-12-03 10:00:00 UTC  nodes 2  GPUs 5 (3 in use, 1 unhealthy)  slices 6 (3 in use)  queued 3 (2 blocked, 1 pending), longest wait 1m35s

NODE gpu-1 (11111111)  ready  pool gpu  class h100  dc dc1
  GPU  ID               MODEL / PROFILE        MODE   HEALTH                                          UTIL  MEMORY MiB     ALLOCATIONS
  0    GPU-aaaaaaaa     NVIDIA H100 80GB HBM3  whole  ok                                              40%   30000 / 81920  train/g/t a0000001
  1    GPU-bbbbbbbb     NVIDIA H100 80GB HBM3  whole  UNHEALTHY: XID 79 (GPU has fallen off the bus)  0%    0 / 81920      free
  4    GPU-cccccccc     NVIDIA H100 80GB HBM3  mps    ok                                              55%   12000 / 81920  2/4 slices in use
       ├─ share 0       1/4                    mps    ok                                              -     0 / 20480      free
       ├─ share 1       1/4                    mps    ok                                              -     1000 / 20480   notebook/g/t a0000003
       ├─ share 2       1/4                    mps    ok                                              -     500 / 20480    notebook/g/t a0000003
       └─ share 3       1/4                    mps    ok                                              -     0 / 20480      free
  7    GPU-eeeeeeee     NVIDIA H100 80GB HBM3  mig    ok                                              -     3072 / 81920   1/2 slices in use
       ├─ MIG-11111111  1g.10gb                mig    ok                                              -     2048 / 10240   infer/g/t a0000002
       └─ MIG-22222222  1g.10gb                mig    ok                                              -     1024 / 10240   free

NODE gpu-2 (22222222)  ready  pool batch  class -  dc dc1  ineligible  draining  [stats unavailable: Unexpected response code: 500 (rpc error: no path to node)]
  GPU  ID            MODEL / PROFILE        MODE   HEALTH  UTIL  MEMORY MiB  ALLOCATIONS
  -    GPU-dddddddd  NVIDIA A100-SXM4-40GB  whole  ok      -     -           free

QUEUE
  JOB       NAMESPACE  GROUP  STATE    DEVICES                     COUNT  WAIT   PREDICTED  REASON
  big       default    g      blocked  nvidia/gpu x6               2      1m35s  -          constraint "missing devices" filtered 1 node
  notebook  default    g      pending  nvidia/mps/GPU-cccccccc x2  1      30s    -          placed on gpu-1, not running yet
`

func TestWriteTable(t *testing.T) {
	tests := []struct {
		name string
		in   *Input
		want []string // lines the output must have, in order; "" means the golden
	}{
		{"fixture", fixtureInput(), nil},
		{"empty cluster", &Input{Now: t0}, []string{
			"nomad-gpu top  2026-12-03 10:00:00 UTC  nodes 0  GPUs 0 (0 in use, 0 unhealthy)  queue empty",
			"no GPU nodes",
			"QUEUE  no GPU work waiting",
		}},
		{"a node named but without GPUs", func() *Input {
			in := fixtureInput()
			in.Filter.Nodes = []string{"cpu-1"}
			return in
		}(), []string{
			"NODE cpu-1 (33333333)  ready  pool default  class -  dc -  [stats unavailable]",
			"  no GPU devices",
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			if err := WriteTable(&b, Build(tc.in)); err != nil {
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

func TestAllocText(t *testing.T) {
	tests := []struct {
		a    AllocRef
		want string
	}{
		{AllocRef{AllocID: "0123456789", Job: "j", Group: "g", Task: "t", Namespace: "default"}, "j/g/t 01234567"},
		{AllocRef{AllocID: "0123", Job: "j", Group: "g", Task: "t", Namespace: "ml"}, "ml:j/g/t 0123"},
	}
	for _, tc := range tests {
		if got := allocText(tc.a); got != tc.want {
			t.Errorf("allocText(%+v) = %q, want %q", tc.a, got, tc.want)
		}
	}
}
