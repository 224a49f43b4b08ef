package gpuqueue

import (
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/nomad-gpu/nomad-gpu/wire/autoscaler"
)

const (
	up   = autoscaler.DirectionUp
	down = autoscaler.DirectionDown
	none = autoscaler.DirectionNone
)

var t0 = time.Date(2026, 3, 1, 8, 0, 0, 0, time.UTC)

// testCheck is one check of a policy, as the agent would send it.
type testCheck struct {
	name, query string
	cfg         map[string]string
}

func check(name string, sig Signal, kv ...string) testCheck {
	cfg := map[string]string{"signal": string(sig)}
	for i := 0; i+1 < len(kv); i += 2 {
		cfg[kv[i]] = kv[i+1]
	}
	return testCheck{name: name, query: string(sig) + "{node_pool=gpu}", cfg: cfg}
}

// policyChecks is the documented four-check policy, pool "gpu".
func policyChecks(extra ...string) []testCheck {
	c := []testCheck{
		check("capacity", SignalNodesNeeded, "pool", "gpu"),
		check("queue", SignalQueued, "pool", "gpu", "activation", "5"),
		check("wait", SignalWait, "pool", "gpu", "max_wait", "30m"),
		check("idle", SignalUtil, "pool", "gpu", "floor", "30", "scale_in_after", "10m"),
	}
	for i := 0; i+1 < len(extra); i += 2 {
		c[0].cfg[extra[i]] = extra[i+1]
	}
	return c
}

// harness replays evaluations through one Strategy with a fake clock.
type harness struct {
	t      *testing.T
	s      *Strategy
	clock  time.Time
	checks []testCheck
}

func newHarness(t *testing.T, checks []testCheck) *harness {
	t.Helper()
	h := &harness{t: t, s: New(nil), clock: t0, checks: checks}
	h.s.now = func() time.Time { return h.clock }
	return h
}

// eval runs, in order, every check that has a value (a check without one
// failed its query: the agent does not call the strategy for it and counts
// an empty None action for it), at t0+at,
// and returns the agent's winner: Up beats None beats Down, and within a
// direction the larger count wins.
func (h *harness) eval(at time.Duration, count int64, values map[string]float64) (autoscaler.Action, []autoscaler.Action) {
	h.t.Helper()
	h.clock = t0.Add(at)
	var acts []autoscaler.Action
	for _, c := range h.checks {
		v, ok := values[c.name]
		if !ok {
			// The agent ignores the failed check (on_error "ignore"):
			// an empty action, direction None.
			acts = append(acts, autoscaler.Action{Direction: none})
			continue
		}
		acts = append(acts, h.run(c, count, v))
	}
	// Checks that ran earlier saw the others' values of the previous
	// evaluation; of the actions equal to the winner, report the reason of
	// the one that ran last (it saw every value of this evaluation).
	w := winner(acts)
	for _, a := range acts {
		if a.Direction == w.Direction && a.Count == w.Count {
			w.Reason = a.Reason
		}
	}
	return w, acts
}

// run is one check's run as the agent makes it, at the harness clock.
func (h *harness) run(c testCheck, count int64, v float64) autoscaler.Action {
	h.t.Helper()
	a, err := h.s.Run(autoscaler.Check{Name: c.name, Source: "nomad-gpu", Query: c.query,
		QueryWindow: time.Minute, Strategy: PluginName, Config: maps.Clone(c.cfg)},
		[]autoscaler.Metric{{Time: h.clock, Value: v}}, count)
	if err != nil {
		h.t.Fatalf("at %s check %q: %v", h.clock.Sub(t0), c.name, err)
	}
	if a.Direction < none || a.Direction > up {
		h.t.Fatalf("at %s check %q: direction %v unset", h.clock.Sub(t0), c.name, a.Direction)
	}
	return a
}

func winner(acts []autoscaler.Action) autoscaler.Action {
	rank := map[autoscaler.Direction]int{down: -1, none: 0, up: 1}
	best := acts[0]
	for _, a := range acts[1:] {
		if rank[a.Direction] > rank[best.Direction] || a.Direction == best.Direction && a.Count > best.Count {
			best = a
		}
	}
	return best
}

// vals builds the values of the four-check policy; a negative value
// leaves that check out (its query failed).
func vals(nodes, queued, waitSec, util float64) map[string]float64 {
	m := map[string]float64{}
	for k, v := range map[string]float64{"capacity": nodes, "queue": queued, "wait": waitSec, "idle": util} {
		if v >= 0 {
			m[k] = v
		}
	}
	return m
}

// step is one evaluation and what it must decide.
type step struct {
	at     time.Duration
	count  int64
	v      map[string]float64
	dir    autoscaler.Direction
	want   int64    // the count, for up and down
	reason []string // substrings of the winner's reason
}

func (h *harness) replay(steps []step) {
	h.t.Helper()
	for i, s := range steps {
		a, _ := h.eval(s.at, s.count, s.v)
		if a.Direction != s.dir || (s.dir != none && a.Count != s.want) {
			h.t.Fatalf("step %d (at %s, count %d): got %s to %d (%q); want %s to %d",
				i, s.at, s.count, a.Direction, a.Count, a.Reason, s.dir, s.want)
		}
		for _, sub := range s.reason {
			if !strings.Contains(a.Reason, sub) {
				h.t.Fatalf("step %d (at %s): reason %q lacks %q", i, s.at, a.Reason, sub)
			}
		}
	}
}

// every returns evaluations every interval from `from` to `to` (inclusive)
// with the same count and values, all expected to decide dir.
func every(from, to, interval time.Duration, count int64, v map[string]float64, dir autoscaler.Direction, reason ...string) []step {
	var s []step
	for at := from; at <= to; at += interval {
		s = append(s, step{at: at, count: count, v: v, dir: dir, want: count, reason: reason})
	}
	return s
}

func concat(parts ...[]step) []step {
	var s []step
	for _, p := range parts {
		s = append(s, p...)
	}
	return s
}
