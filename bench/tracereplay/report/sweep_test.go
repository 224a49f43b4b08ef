package report

import (
	"strings"
	"testing"
	"time"

	"github.com/nomad-gpu/nomad-gpu/bench/tracereplay"
	"github.com/nomad-gpu/nomad-gpu/bench/tracereplay/figures"
)

// Two windows of a reference A and a configuration B, computed by hand:
// pooled over jobs, A waits (10 s × 2 + 100 s × 8) / 10 = 82 s and B
// (20 s × 2 + 50 s × 8) / 10 = 44 s; per window B is 2× then 0.5×
// (median 1.25×, +10 s and −50 s: median −20 s), one window shorter and
// one longer; its 4+ GPU jobs wait in the second window only, 0.5×.
func TestSweepPools(t *testing.T) {
	sec := func(n int) time.Duration { return time.Duration(n) * time.Second }
	window := func(a, b, n int, a4, b4 time.Duration) []figures.Figures {
		f := func(w, w4 time.Duration, useful float64, moves int) figures.Figures {
			byKind := map[string]figures.Dist{figures.KindOneGPU: {Mean: w, N: n}}
			if w4 > 0 {
				byKind[figures.KindManyGPUs] = figures.Dist{Mean: w4, N: 1}
			}
			return figures.Figures{Wait: figures.Dist{Mean: w, N: n}, WaitByKind: byKind, UsefulUtil: useful, Moves: moves,
				MoveLooks: tracereplay.MoveLooks{Looks: 3 * moves, WithRoom: moves}}
		}
		return []figures.Figures{f(sec(a), a4, 0.2, 0), f(sec(b), b4, 0.4, 1)}
	}
	s := NewSweep([]string{"A", "B"})
	s.add(window(10, 20, 2, 0, 0))
	s.add(window(100, 50, 8, sec(60), sec(30)))

	a, b := s.acc[0], s.acc[1]
	if a.wait.mean() != sec(82) || b.wait.mean() != sec(44) {
		t.Errorf("pooled waits %s, %s; want 1m22s, 44s", a.wait.mean(), b.wait.mean())
	}
	if b.shorter != [2]int{1, 1} || b.longer != [2]int{1, 0} {
		t.Errorf("B shorter %v, longer %v; want [1 1], [1 0]", b.shorter, b.longer)
	}
	md := s.Markdown("t", "w")
	for _, want := range []string{
		"2 windows modelled, 0 holding no job skipped",
		"| wait mean, every job of every window | 1m 22s (10) | 44s (10) |",
		"| wait ÷ reference's, median window | 1.00× | 1.25× |",
		"| wait − reference's, median window | 0s | -20s |",
		"| windows with a shorter / longer mean wait | 0 / 0 of 2 | 1 / 1 of 2 |",
		"| 4+ GPU wait ÷ reference's, median window | 1.00× | 0.50× |",
		"| useful allocation, window mean | 20.0 % | 40.0 % |",
		"| moves | 0 | 2 |",
		"| consolidation rounds with room in the cluster | – | 2 of 6 |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
}

// A window's GPU-time while every team queue waited is pooled only where
// each queue had jobs: a window of b alone adds none of b's time.
func TestSweepPoolsQueuesWithEveryTeam(t *testing.T) {
	s := NewSweep([]string{"A"})
	acc := &s.acc[0]
	acc.addQueues(figures.Figures{QueueWaitGPUSeconds: map[string]float64{"a": 80, "b": 40}}, nil, 2)
	acc.addQueues(figures.Figures{QueueWaitGPUSeconds: map[string]float64{"b": 500}}, nil, 2)
	if acc.queueHeld["a"] != 80 || acc.queueHeld["b"] != 40 {
		t.Errorf("pooled GPU-seconds %v; want a 80, b 40", acc.queueHeld)
	}
}
