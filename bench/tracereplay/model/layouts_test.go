package model

import (
	"reflect"
	"testing"
	"time"

	"github.com/nomad-gpu/nomad-gpu/bench/tracereplay"
)

// Layouts follow the queue: on an all-whole node, fractional jobs wait
// until a free GPU becomes MPS shares (the relayout latency, × the
// compression), then run on that one GPU; a whole-GPU job that waits
// later gets the unheld MPS GPU back whole, though it changed within
// the minimum interval, as no other GPU can serve it.
func TestLayoutsFollowTheQueue(t *testing.T) {
	jobs := []tracereplay.Job{
		wjob("w1", 0, 200*sec, 1),
		frac("f1", 0, 50*sec, 0.25),
		frac("f2", 0, 50*sec, 0.5),
		wjob("w2", 100*sec, 10*sec, 1),
	}
	tests := []struct {
		name        string
		compression float64
		// relay is the relayout latency in trace time; start the start
		// latency.
		relay, start time.Duration
	}{
		{"real time", 1, 10 * sec, 1 * sec},
		{"compressed twice", 2, 20 * sec, 2 * sec},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cl := fixed(1, 2)
			cl.LayoutShares = 4
			pol := tracereplay.DefaultPolicy()
			r := mustRun(t, jobs, Options{
				Cluster: cl, Config: tracereplay.Config{Name: "+layouts", Features: tracereplay.Features{Layouts: true}},
				Policy: pol, Latencies: tracereplay.Latencies{Start: sec, Layout: 10 * sec},
				Compression: tt.compression, Horizon: 400 * sec,
			})
			byID := map[string]tracereplay.JobRecord{}
			for _, j := range r.Jobs {
				byID[j.ID] = j
			}
			toMPS := tt.relay
			fracStart := toMPS + tt.start
			if got := starts(byID["w1"]); !reflect.DeepEqual(got, []time.Duration{tt.start}) {
				t.Errorf("w1 starts %v, want [%s]: a whole GPU is free", got, tt.start)
			}
			for id, shares := range map[string]int{"f1": 1, "f2": 2} {
				j := byID[id]
				if got := starts(j); !reflect.DeepEqual(got, []time.Duration{fracStart}) {
					t.Errorf("%s starts %v, want [%s]: after the relayout", id, got, fracStart)
				}
				if want := []tracereplay.Hold{{Kind: "mps", GPU: "gpu1", Units: shares}}; len(j.Runs) == 0 || !reflect.DeepEqual(j.Runs[0].Held, want) {
					t.Errorf("%s holds %+v, want %+v: shares of the relaid GPU", id, j.Runs, want)
				}
			}
			// w2 waits from 100 s for GPU 1, unheld from fracStart + 50 s.
			toWhole := max(100*sec, fracStart+50*sec) + tt.relay
			if got := starts(byID["w2"]); !reflect.DeepEqual(got, []time.Duration{toWhole + tt.start}) {
				t.Errorf("w2 starts %v, want [%s]: once the MPS GPU is whole again", got, toWhole+tt.start)
			}
			want := []tracereplay.LayoutChange{
				{At: toMPS, Node: "node-0", GPU: "gpu1", From: "whole", To: "mps:4"},
				{At: toWhole, Node: "node-0", GPU: "gpu1", From: "mps:4", To: "whole"},
			}
			if !reflect.DeepEqual(r.LayoutChanges, want) || !r.LayoutsRecorded {
				t.Errorf("layout changes %+v (recorded %v), want %+v", r.LayoutChanges, r.LayoutsRecorded, want)
			}
			// The samples show node-0's GPU 1 as MPS between the changes only.
			for _, s := range r.Timeline {
				mps := len(s.Layouts) == 1 && s.Layouts[0].Node == "node-0" && len(s.Layouts[0].MPS) == 1 && s.Layouts[0].MPS[0].GPU == "gpu1"
				if between := s.At >= toMPS && s.At < toWhole; mps != between || !mps && len(s.Layouts) > 0 {
					t.Fatalf("sample at %s: layouts %+v", s.At, s.Layouts)
				}
			}
		})
	}
}

// The planner gets the controller's hysteresis scaled like every other
// wall-clock duration, and each GPU's last change.
func TestLayoutPlanInput(t *testing.T) {
	cl := fixed(1, 2)
	pol := tracereplay.DefaultPolicy()
	o := Options{Cluster: cl, Config: tracereplay.Config{Features: tracereplay.Features{Layouts: true}}, Policy: pol,
		Latencies: tracereplay.Latencies{Layout: 10 * sec}, Compression: 3, Horizon: time.Hour}
	s := newSim(tracereplay.Trace{Jobs: []tracereplay.Job{frac("f", 0, sec, 0.5)}}, o)
	s.now = 7 * sec
	s.startLayout(planRef{0, 1}, s.layoutOf(true))
	in, refs := s.planInput()
	if in.Bounds.MinInterval != 15*time.Minute || in.Bounds.Default.Shares != 8 {
		t.Errorf("bounds %+v, want a min interval of 5m × 3 and 8 shares", in.Bounds)
	}
	if len(in.GPUs) != 2 || len(refs) != 2 {
		t.Fatalf("GPUs %+v", in.GPUs)
	}
	g := in.GPUs[1]
	if g.Current.String() != "whole" || g.Desired.String() != "mps:8" || !g.Changed.Equal(planEpoch.Add(7*sec)) {
		t.Errorf("the GPU being relaid: %+v", g)
	}
	if !in.GPUs[0].Changed.IsZero() || !in.GPUs[0].Desired.IsZero() {
		t.Errorf("the other GPU: %+v", in.GPUs[0])
	}
	// The servers offer the GPU until they see it drained (relayout.go);
	// the planner does not.
	if n := &s.nodes[0]; n.free[wholeGroup] != 2 || s.freeWhole(n) != 1 {
		t.Errorf("free whole GPUs %d, %d not being relaid; want 2 and 1: the relaid one is still offered", n.free[wholeGroup], s.freeWhole(n))
	}
}
