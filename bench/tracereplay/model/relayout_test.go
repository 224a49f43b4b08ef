package model

import (
	"strings"
	"testing"
	"time"

	"github.com/nomad-gpu/nomad-gpu/bench/tracereplay"
)

// relayOptions model one node of gpus GPUs with layouts, in real time, a
// relayout taking 20 s: the plugin reads it 1 s after the decision (half
// its poll), the servers see the drain 16 s after (LayoutSwitch before
// the new layout), and the new layout at 20 s.
func relayOptions(gpus int) Options {
	cl := fixed(1, gpus)
	cl.LayoutShares = 4
	return Options{
		Cluster: cl, Config: tracereplay.Config{Name: "+layouts", Features: tracereplay.Features{Layouts: true}},
		Policy: tracereplay.DefaultPolicy(), Latencies: tracereplay.Latencies{Start: sec, Layout: 20 * sec},
		Compression: 1, Horizon: 400 * sec,
	}
}

func noteWith(r tracereplay.Result, part string) bool {
	for _, n := range r.Notes {
		if strings.Contains(n, part) {
			return true
		}
	}
	return false
}

// A placement made before the plugin reads a relayout holds the GPU: the
// relayout is abandoned when the controller sees that, and nothing is
// relaid while the placement holds every GPU.
func TestRelayoutAbandonedToAPlacement(t *testing.T) {
	r := mustRun(t, []tracereplay.Job{
		frac("f1", 0, 50*sec, 0.5),
		wjob("w1", sec/2, 100*sec, 2), // both GPUs, the one being relaid among them
	}, relayOptions(2))
	if got := starts(r.Jobs[1]); len(got) != 1 || got[0] != sec/2+sec {
		t.Errorf("w1 starts %v, want [1.5s]: the GPU being relaid is still offered", got)
	}
	if len(r.LayoutChanges) == 0 || r.LayoutChanges[0].At < 100*sec {
		t.Errorf("layout changes %+v, want none before w1 ends", r.LayoutChanges)
	}
	if !noteWith(r, "0 placements on a GPU being relaid were refused and placed again, and 1 relayouts were abandoned") {
		t.Errorf("notes %q, want one relayout abandoned", r.Notes)
	}
}

// A placement made after the plugin drained the GPU, before the servers
// saw it, is refused at its start, placed again by Nomad's reschedule 5 s
// later (refused again: the GPU is still offered and there is no other
// node), and then waits in no queue for the controller's forced
// reschedule, once the servers see the drain; it runs once a whole GPU
// is offered again.
func TestRelayoutRefusesAPlacement(t *testing.T) {
	r := mustRun(t, []tracereplay.Job{
		frac("f1", 0, 30*sec, 0.5),
		wjob("w1", 5*sec, 10*sec, 1),
	}, relayOptions(1))
	if got := starts(r.Jobs[0]); len(got) != 1 || got[0] != 21*sec {
		t.Errorf("f1 starts %v, want [21s]: once the GPU offers shares", got)
	}
	w := starts(r.Jobs[1])
	if len(w) != 1 || w[0] < 51*sec {
		t.Errorf("w1 starts %v, want one run after f1 ends and the GPU is whole again", w)
	}
	if !noteWith(r, "2 placements on a GPU being relaid were refused") {
		t.Errorf("notes %q, want two refused placements", r.Notes)
	}
	if len(r.LayoutChanges) != 2 {
		t.Errorf("layout changes %+v, want to MPS and back", r.LayoutChanges)
	}
}

// Without a measured tail every start is Start; with one, starts are the
// median at least and the 99th percentile at most, half of them the
// median.
func TestStartSpread(t *testing.T) {
	o := relayOptions(1)
	o.Config.Features = tracereplay.Features{}
	s := newSim(tracereplay.Trace{}, o)
	if d := s.startDelay(wholeGroup); d != sec {
		t.Errorf("start %s, want 1s without a tail", d)
	}
	o.Latencies.StartP95, o.Latencies.StartP99 = 3*sec, 5*sec
	s = newSim(tracereplay.Trace{}, o)
	median, over3 := 0, 0
	const n = 10000
	for range n {
		d := s.startDelay(wholeGroup)
		if d < sec || d > 5*sec {
			t.Fatalf("start %s outside [1s, 5s]", d)
		}
		if d == sec {
			median++
		}
		if d > 3*sec {
			over3++
		}
	}
	if median < n*45/100 || median > n*55/100 || over3 < n*3/100 || over3 > n*7/100 {
		t.Errorf("%d of %d at the median, %d over the 95th percentile; want about half and 5 %%", median, n, over3)
	}
}

// A kind whose starts the run measured takes its own latency; the others
// take Start.
func TestStartByKind(t *testing.T) {
	o := relayOptions(1)
	o.Latencies.StartByKind = map[string]tracereplay.Spread{"mps": {P50: 4 * sec}}
	s := newSim(tracereplay.Trace{}, o)
	if d := s.startDelay(wholeGroup); d != sec {
		t.Errorf("whole GPU start %s, want Start (1s)", d)
	}
	if d := s.startDelay(s.mpsGroup); d != 4*sec {
		t.Errorf("MPS start %s, want its kind's 4s", d)
	}
}

// A relayout takes Layout without a measured tail; with one, its
// latency is drawn: the median at least, the 95th percentile at most.
func TestRelayoutLatencySpread(t *testing.T) {
	for _, tc := range []struct {
		p95      time.Duration
		min, max time.Duration
	}{
		{0, 20 * sec, 20 * sec},
		{40 * sec, 20 * sec, 40 * sec},
	} {
		o := relayOptions(1)
		o.Latencies.LayoutP95 = tc.p95
		s := newSim(tracereplay.Trace{}, o)
		seen := map[time.Duration]bool{}
		for range 1000 {
			d := s.layoutLat.draw(s.layoutRng)
			if d < tc.min || d > tc.max {
				t.Fatalf("p95 %s: relayout latency %s outside [%s, %s]", tc.p95, d, tc.min, tc.max)
			}
			seen[d] = true
		}
		if tc.p95 > 0 && len(seen) < 100 {
			t.Errorf("p95 %s: %d distinct latencies in 1000 draws, want a spread", tc.p95, len(seen))
		}
	}
}
