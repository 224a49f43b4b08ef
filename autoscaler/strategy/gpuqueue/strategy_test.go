package gpuqueue

import (
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nomad-gpu/nomad-gpu/wire/autoscaler"
)

const iv = 30 * time.Second // evaluation_interval in these series

var warmup = step{at: 0, count: 2, v: vals(0, 0, 0, 50), dir: none, reason: []string{`pool "gpu" is learning its checks`}}

func TestActivation(t *testing.T) {
	cases := []struct {
		name   string
		checks []testCheck
		steps  []step
	}{
		{"below activation holds", policyChecks(), []step{warmup,
			{at: iv, count: 2, v: vals(2, 4, 60, 90), dir: none, reason: []string{"queued 4 < activation 5", "oldest queued work waited 1m0s < max_wait 30m0s"}},
		}},
		{"at activation goes straight to the needed count", policyChecks(), []step{warmup,
			{at: iv, count: 2, v: vals(3, 5, 60, 90), dir: up, want: 5, reason: []string{"queued 5 >= activation 5", "nodes_needed 3", "from 2 to 5"}},
		}},
		{"above activation", policyChecks(), []step{warmup,
			{at: iv, count: 2, v: vals(4, 9, 60, 90), dir: up, want: 6},
		}},
		{"activated queue stays activated until it empties", policyChecks(), []step{warmup,
			{at: iv, count: 2, v: vals(1, 6, 60, 90), dir: up, want: 3},
			// the added node is in flight; 4 left queued, below activation
			{at: 2 * iv, count: 3, v: vals(1, 4, 90, 90), dir: none, reason: []string{"covered by 1 in flight"}},
			// it joined (nodes_needed fell), more arrived: still activated
			{at: 3 * iv, count: 3, v: vals(0, 3, 120, 90), dir: none, reason: []string{"nodes_needed is 0"}},
			{at: 4 * iv, count: 3, v: vals(1, 4, 150, 90), dir: up, want: 4, reason: []string{"queued 4, still unplaced since scale-out opened (queued 6 >= activation 5)"}},
			// the queue empties: the latch resets
			{at: 5 * iv, count: 4, v: vals(0, 0, 0, 90), dir: none},
			{at: 6 * iv, count: 4, v: vals(1, 4, 10, 90), dir: none, reason: []string{"queued 4 < activation 5"}},
		}},
		{"a lone nodes_needed check uses activation in nodes", []testCheck{check("capacity", SignalNodesNeeded, "activation", "2")}, []step{
			{at: 0, count: 2, v: map[string]float64{"capacity": 1}, dir: none, reason: []string{"nodes_needed 1 < activation 2"}},
			{at: iv, count: 2, v: map[string]float64{"capacity": 2}, dir: up, want: 4, reason: []string{"nodes_needed 2 >= activation 2"}},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { newHarness(t, c.checks).replay(c.steps) })
	}
}

func TestWaitEscalation(t *testing.T) {
	cases := []struct {
		name   string
		checks []testCheck
		steps  []step
	}{
		{"few queued but waited max_wait scales out", policyChecks(), []step{warmup,
			{at: iv, count: 2, v: vals(1, 2, 29*60, 90), dir: none, reason: []string{"29m0s < max_wait 30m0s"}},
			{at: 2 * iv, count: 2, v: vals(1, 2, 30*60+30, 90), dir: up, want: 3,
				reason: []string{"oldest queued work waited 30m30s >= max_wait 30m0s", "queued 2 < activation 5", "to 3"}},
		}},
		{"max_wait 0 turns it off", func() []testCheck { c := policyChecks(); c[2].cfg["max_wait"] = "0"; return c }(), []step{warmup}},
		{"without a wait check, how long the queue has been non-empty counts",
			[]testCheck{check("capacity", SignalNodesNeeded, "activation", "3", "max_wait", "10m")},
			concat(
				every(0, 9*time.Minute+30*time.Second, iv, 2, map[string]float64{"capacity": 1}, none, "nodes_needed 1 < activation 3 and queue non-empty for"),
				[]step{{at: 10 * time.Minute, count: 2, v: map[string]float64{"capacity": 1}, dir: up, want: 3,
					reason: []string{"queue non-empty for 10m0s >= max_wait 10m0s"}}},
			)},
		{"a stale wait check does not escalate", policyChecks(), []step{warmup,
			{at: iv, count: 2, v: vals(1, 2, 31*60, 90), dir: up, want: 3},
			{at: 2 * iv, count: 2, v: vals(1, 2, -1, 90), dir: up, want: 3}, // one miss: still fresh
			{at: 3 * iv, count: 2, v: vals(1, 2, -1, 90), dir: up, want: 3}, // latched
			{at: 4 * iv, count: 2, v: vals(0, 0, -1, 90), dir: none},        // queue empties
			{at: 5 * iv, count: 2, v: vals(1, 2, -1, 90), dir: none, reason: []string{`the wait check "wait" has not reported for 2m0s`}},
		}},
	}
	// the "max_wait 0" case: wait far beyond 30m, still below activation
	cases[1].steps = append(cases[1].steps, step{at: iv, count: 2, v: vals(1, 2, 5*3600, 90), dir: none, reason: []string{"max_wait off"}})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { newHarness(t, c.checks).replay(c.steps) })
	}
}

func TestMaxStep(t *testing.T) {
	t.Run("default max_scale_up 10", func(t *testing.T) {
		newHarness(t, policyChecks()).replay([]step{warmup,
			{at: iv, count: 2, v: vals(15, 40, 60, 90), dir: up, want: 12, reason: []string{"nodes_needed 15 = +15, capped by max_scale_up 10"}},
		})
	})
	t.Run("max_scale_up 4 steps, counting what is in flight", func(t *testing.T) {
		newHarness(t, policyChecks("max_scale_up", "4")).replay([]step{warmup,
			{at: iv, count: 2, v: vals(15, 40, 60, 90), dir: up, want: 6, reason: []string{"capped by max_scale_up 4"}},
			{at: 2 * iv, count: 6, v: vals(15, 40, 90, 90), dir: up, want: 10, reason: []string{"nodes_needed 15 - 4 in flight = +11"}},
			{at: 3 * iv, count: 10, v: vals(15, 40, 120, 90), dir: up, want: 14},
			{at: 4 * iv, count: 14, v: vals(15, 40, 150, 90), dir: up, want: 17, reason: []string{"- 12 in flight = +3"}},
			{at: 5 * iv, count: 17, v: vals(15, 40, 180, 90), dir: none, reason: []string{"covered by 15 in flight"}},
		})
	})
	t.Run("max_scale_down and the busy share bound scale-in", func(t *testing.T) {
		checks := policyChecks()
		checks[3].cfg["max_scale_down"] = "8"
		checks[3].cfg["floor"] = "60"
		newHarness(t, checks).replay(concat(
			[]step{{at: 0, count: 10, v: vals(0, 0, 0, 50), dir: none}},
			every(iv, 10*time.Minute-iv, iv, 10, vals(0, 0, 0, 50), none, "of scale_in_after 10m0s"),
			[]step{{at: 10 * time.Minute, count: 10, v: vals(0, 0, 0, 50), dir: down, want: 5, reason: []string{"util 50% of 10 keeps 5"}}},
		))
	})
}

func TestScaleInDelay(t *testing.T) {
	idle := vals(0, 0, 0, 10)
	cases := []struct {
		name  string
		steps []step
	}{
		{"only after scale_in_after of empty queue and low util", concat(
			[]step{{at: 0, count: 10, v: idle, dir: none}},
			every(iv, 10*time.Minute-iv, iv, 10, idle, none, "queue empty and util 10% < floor 30% for"),
			[]step{{at: 10 * time.Minute, count: 10, v: idle, dir: down, want: 9,
				reason: []string{"scale down from 10 to 9", "for 10m0s >= scale_in_after 10m0s", "max_scale_down 1"}}},
		)},
		{"queued work resets the delay", concat(
			[]step{{at: 0, count: 10, v: idle, dir: none}},
			every(iv, 5*time.Minute-iv, iv, 10, idle, none),
			[]step{{at: 5 * time.Minute, count: 10, v: vals(0, 1, 20, 10), dir: none, reason: []string{"queued 1 < activation 5"}}},
			every(5*time.Minute+iv, 15*time.Minute, iv, 10, idle, none),
			[]step{{at: 15*time.Minute + iv, count: 10, v: idle, dir: down, want: 9}},
		)},
		{"utilisation at the floor resets the delay", concat(
			[]step{{at: 0, count: 10, v: idle, dir: none}},
			every(iv, 5*time.Minute-iv, iv, 10, idle, none),
			[]step{{at: 5 * time.Minute, count: 10, v: vals(0, 0, 0, 30), dir: none, reason: []string{"util 30% >= floor 30%"}}},
			every(5*time.Minute+iv, 15*time.Minute, iv, 10, idle, none),
			[]step{{at: 15*time.Minute + iv, count: 10, v: idle, dir: down, want: 9}},
		)},
		{"a util check that stops reporting stops scale-in", concat(
			[]step{{at: 0, count: 10, v: idle, dir: none}},
			every(iv, 9*time.Minute, iv, 10, idle, none),
			every(9*time.Minute+iv, 20*time.Minute, iv, 10, vals(0, 0, 0, -1), none),
			[]step{{at: 20*time.Minute + iv, count: 10, v: vals(0, 0, 0, -1), dir: none, reason: []string{`the util check "idle" has not reported`}}},
		)},
		{"steps continue while it holds; at zero it holds", concat(
			[]step{{at: 0, count: 2, v: idle, dir: none}},
			every(iv, 10*time.Minute-iv, iv, 2, idle, none),
			[]step{
				{at: 10 * time.Minute, count: 2, v: idle, dir: down, want: 1},
				{at: 10*time.Minute + iv, count: 1, v: vals(0, 0, 0, 0), dir: down, want: 0},
				{at: 11 * time.Minute, count: 0, v: vals(0, 0, 0, 0), dir: none, reason: []string{"hold at 0", "nothing left to remove"}},
			},
		)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { newHarness(t, policyChecks()).replay(c.steps) })
	}

	t.Run("without a util check it never scales in", func(t *testing.T) {
		h := newHarness(t, []testCheck{check("capacity", SignalNodesNeeded)})
		h.replay(every(0, 2*time.Hour, 5*time.Minute, 5, map[string]float64{"capacity": 0}, none, "has no util check"))
	})
}

// TestHysteresis replays noisy series that keep crossing every threshold
// and applies the decisions to the count the way the agent would (with
// cooldowns); the count's direction may change at most once.
func TestHysteresis(t *testing.T) {
	for _, lookahead := range []string{"false", "true"} {
		for seed := uint64(1); seed <= 20; seed++ {
			t.Run(fmt.Sprintf("lookahead=%s/seed=%d", lookahead, seed), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(seed, 7))
				checks := policyChecks("lookahead", lookahead, "boot_time", "5m")
				h := newHarness(t, checks)
				count := int64(3)
				var cooldownUntil time.Duration
				var dirs []autoscaler.Direction
				for at := time.Duration(0); at <= 4*time.Hour; at += iv {
					var v map[string]float64
					switch {
					case at < time.Hour: // busy: queue and wait around activation and max_wait
						q := float64(3 + rng.IntN(5)) // 3..7 around activation 5
						n := float64(rng.IntN(2))     // 0 or 1
						w := float64(28*60 + rng.IntN(4*60))
						v = vals(n, q, w, 60+float64(rng.IntN(30)))
					case at < 2*time.Hour: // quiet, but work blips in and util hovers at the floor
						q := 0.0
						if rng.IntN(8) == 0 {
							q = 1
						}
						w := 0.0
						if q > 0 {
							w = 5
						}
						v = vals(0, q, w, 25+float64(rng.IntN(11))) // 25..35 around floor 30
					default: // idle, util jittering below the floor
						v = vals(0, 0, 0, float64(5+rng.IntN(20)))
					}
					a, _ := h.eval(at, count, v)
					if at < cooldownUntil || a.Direction == none {
						continue
					}
					c := min(max(a.Count, 1), 20) // policy min 1, max 20
					if c == count {
						continue
					}
					dirs = append(dirs, a.Direction)
					count = c
					cooldownUntil = at + 2*time.Minute // cooldown_on_scale_up
					if a.Direction == down {
						cooldownUntil = at + 5*time.Minute
					}
				}
				changes := 0
				for i := 1; i < len(dirs); i++ {
					if dirs[i] != dirs[i-1] {
						changes++
					}
				}
				if changes > 1 {
					t.Fatalf("direction changed %d times: %v", changes, dirs)
				}
				if len(dirs) < 2 || dirs[0] != up || dirs[len(dirs)-1] != down || count != 1 {
					t.Fatalf("want scale-out in the busy hour and scale-in to 1 when idle; got %v, count %d", dirs, count)
				}
				t.Logf("directions %v, %d change(s)", dirs, changes)
			})
		}
	}
}

func TestScaleFromZero(t *testing.T) {
	t.Run("pool", func(t *testing.T) {
		newHarness(t, policyChecks()).replay([]step{
			{at: 0, count: 0, v: vals(0, 0, 0, 0), dir: none},
			{at: iv, count: 0, v: vals(0, 0, 0, 0), dir: none},
			{at: 2 * iv, count: 0, v: vals(2, 6, 10, 0), dir: up, want: 2, reason: []string{"scale up from 0 to 2"}},
		})
	})
	t.Run("lone check, default activation 1", func(t *testing.T) {
		newHarness(t, []testCheck{check("capacity", SignalNodesNeeded)}).replay([]step{
			{at: 0, count: 0, v: map[string]float64{"capacity": 1}, dir: up, want: 1, reason: []string{"nodes_needed 1 >= activation 1"}},
		})
	})
	t.Run("queued work that waited, below activation", func(t *testing.T) {
		newHarness(t, policyChecks()).replay([]step{
			{at: 0, count: 0, v: vals(1, 1, 0, 0), dir: none},
			{at: iv, count: 0, v: vals(1, 1, 31*60, 0), dir: up, want: 1, reason: []string{"max_wait"}},
		})
	})
}

func TestInFlight(t *testing.T) {
	t.Run("added capacity is not added again until boot_time passes", func(t *testing.T) {
		newHarness(t, policyChecks("boot_time", "5m")).replay(concat(
			[]step{warmup, {at: iv, count: 2, v: vals(3, 8, 60, 90), dir: up, want: 5}},
			// the count rise is seen at 1m; its nodes count as in flight until 6m
			every(2*iv, 6*time.Minute-iv, iv, 5, vals(3, 8, 60, 90), none, "covered by 3 in flight"),
			[]step{{at: 6 * time.Minute, count: 5, v: vals(3, 8, 60, 90), dir: up, want: 8}},
		))
	})
	t.Run("capacity that shows up leaves the ledger; new work is added", func(t *testing.T) {
		newHarness(t, policyChecks()).replay([]step{warmup,
			{at: iv, count: 2, v: vals(3, 8, 60, 90), dir: up, want: 5},
			{at: 2 * iv, count: 5, v: vals(3, 8, 90, 90), dir: none},
			{at: 3 * iv, count: 5, v: vals(0, 0, 0, 90), dir: none}, // joined, placed
			{at: 4 * iv, count: 5, v: vals(2, 6, 10, 90), dir: up, want: 7, reason: []string{"nodes_needed 2 = +2"}},
		})
	})
	t.Run("boot_time 0 turns the ledger off", func(t *testing.T) {
		newHarness(t, policyChecks("boot_time", "0")).replay([]step{warmup,
			{at: iv, count: 2, v: vals(3, 8, 60, 90), dir: up, want: 5},
			{at: 2 * iv, count: 5, v: vals(3, 8, 90, 90), dir: up, want: 8},
		})
	})
}

// withNodes adds the nodes check's value (nodes joined) to a policy's values.
func withNodes(v map[string]float64, joined float64) map[string]float64 {
	v["nodes"] = joined
	return v
}

// TestNodesCheck: with a nodes check, capacity in flight is the count minus
// the nodes that joined, so a join that new work hides from nodes_needed
// (the joined node took work as more arrived) still leaves the ledger.
func TestNodesCheck(t *testing.T) {
	ledgerOnly := policyChecks("boot_time", "5m")
	ledgerOnly[1].cfg["activation"] = "1"
	withNodesCheck := append(slices.Clone(ledgerOnly), check("nodes", SignalNodes, "pool", "gpu"))
	// Nodes of 5 GPUs; one-GPU jobs keep arriving while the first boots.
	t.Run("a join hidden by new work leaves the count in flight", func(t *testing.T) {
		newHarness(t, withNodesCheck).replay([]step{
			{at: 0, count: 0, v: withNodes(vals(0, 0, 0, 0), 0), dir: none},
			{at: iv, count: 0, v: withNodes(vals(1, 1, 0, 0), 0), dir: up, want: 1},
			{at: 2 * iv, count: 1, v: withNodes(vals(2, 6, 30, 0), 0), dir: up, want: 2, reason: []string{"nodes_needed 2 - 1 in flight (count 1 - 0 nodes joined) = +1"}},
			// node 1 joined and took 5; 6 more queued meanwhile: nodes_needed stays 2
			{at: 3 * iv, count: 2, v: withNodes(vals(2, 6, 60, 100), 1), dir: up, want: 3, reason: []string{"nodes_needed 2 - 1 in flight (count 2 - 1 nodes joined) = +1"}},
			{at: 4 * iv, count: 3, v: withNodes(vals(2, 6, 90, 100), 1), dir: none, reason: []string{"covered by 2 in flight (count 3 - 1 nodes joined)"}},
		})
	})
	t.Run("without a nodes check the same join counts until boot_time", func(t *testing.T) {
		newHarness(t, ledgerOnly).replay([]step{
			{at: 0, count: 0, v: vals(0, 0, 0, 0), dir: none},
			{at: iv, count: 0, v: vals(1, 1, 0, 0), dir: up, want: 1},
			{at: 2 * iv, count: 1, v: vals(2, 6, 30, 0), dir: up, want: 2},
			{at: 3 * iv, count: 2, v: vals(2, 6, 60, 100), dir: none, reason: []string{"covered by 2 in flight (count rises of the last boot_time 5m0s)"}},
		})
	})
	t.Run("a node that never joins stops counting after boot_time", func(t *testing.T) {
		newHarness(t, withNodesCheck).replay(concat(
			[]step{
				{at: 0, count: 0, v: withNodes(vals(0, 0, 0, 0), 0), dir: none},
				{at: iv, count: 0, v: withNodes(vals(1, 1, 0, 0), 0), dir: up, want: 1},
			},
			// the count rise is seen at 1m; the ledger holds it until 6m
			every(2*iv, 6*time.Minute-iv, iv, 1, withNodes(vals(1, 1, 60, 0), 0), none, "covered by 1 in flight (count 1 - 0 nodes joined)"),
			[]step{{at: 6 * time.Minute, count: 1, v: withNodes(vals(1, 1, 360, 0), 0), dir: up, want: 2, reason: []string{"nodes_needed 1 = +1"}}},
		))
	})
	t.Run("joined nodes beyond the count add nothing", func(t *testing.T) {
		// a node of another group in the pool matches the nodes query
		newHarness(t, withNodesCheck).replay([]step{
			{at: 0, count: 0, v: withNodes(vals(0, 0, 0, 0), 1), dir: none},
			{at: iv, count: 0, v: withNodes(vals(1, 6, 0, 100), 1), dir: up, want: 1},
			{at: 2 * iv, count: 1, v: withNodes(vals(1, 6, 30, 100), 1), dir: up, want: 2, reason: []string{"nodes_needed 1 = +1"}},
		})
	})
}

// The nodes check runs after the capacity check of its evaluation and sees
// a join that the capacity check's nodes_needed does not show yet: it
// weighs that nodes_needed with the nodes value of its time, so it does not
// order the joined node's free GPUs a second time.
func TestNodesCheckReadAfterNodesNeeded(t *testing.T) {
	checks := policyChecks("boot_time", "5m")
	checks[1].cfg["activation"] = "1"
	checks = append(checks, check("nodes", SignalNodes, "pool", "gpu"))
	h := newHarness(t, checks)
	h.replay([]step{
		{at: 0, count: 0, v: withNodes(vals(0, 0, 0, 0), 0), dir: none},
		{at: iv, count: 0, v: withNodes(vals(2, 10, 0, 0), 0), dir: up, want: 2},
		{at: 2 * iv, count: 2, v: withNodes(vals(2, 10, 30, 0), 0), dir: none, reason: []string{"covered by 2 in flight"}},
	})
	// Evaluation at 3iv: the checks run a second apart; node 1 joins between
	// the capacity check (nodes_needed still 2) and the nodes check.
	run := func(c testCheck, dt time.Duration, v float64) autoscaler.Action {
		h.clock = t0.Add(3*iv + dt)
		return h.run(c, 2, v)
	}
	run(checks[0], 0, 2)
	run(checks[1], time.Second, 10)
	run(checks[2], 2*time.Second, 60)
	run(checks[3], 3*time.Second, 0)
	if a := run(checks[4], 4*time.Second, 1); a.Direction != none {
		t.Fatalf("the nodes check took a join newer than nodes_needed: %s to %d (%s)", a.Direction, a.Count, a.Reason)
	}
}

// A nodes reading newer than the nodes_needed reading it is weighed with is
// not used: that join may not show in nodes_needed yet.
func TestMemberValueAt(t *testing.T) {
	m := &member{signal: SignalNodes}
	m.observe(t0, 1, defaultRules)
	m.observe(t0.Add(iv), 2, defaultRules)
	for _, c := range []struct {
		at   time.Duration
		want float64
		ok   bool
	}{
		{-time.Second, 0, false},
		{0, 1, true},
		{iv - time.Second, 1, true},
		{iv, 2, true},
		{2 * iv, 2, true},
	} {
		got, ok := m.valueAt(t0.Add(c.at))
		if got != c.want || ok != c.ok {
			t.Errorf("valueAt(t0+%s) = %v, %v; want %v, %v", c.at, got, ok, c.want, c.ok)
		}
	}
}

func TestLookahead(t *testing.T) {
	// The queue grows by 1 every 30s from 1; activation 5, boot_time 5m.
	ramp := func(i int) map[string]float64 { q := float64(i); return vals(float64((i+1)/2), q, float64(30*i), 90) }
	t.Run("off: waits for activation", func(t *testing.T) {
		h := newHarness(t, policyChecks("boot_time", "5m"))
		h.replay([]step{{at: 0, count: 2, v: vals(0, 0, 0, 90), dir: none}})
		for i := 1; i <= 4; i++ {
			h.replay([]step{{at: time.Duration(i) * iv, count: 2, v: ramp(i), dir: none}})
		}
		h.replay([]step{{at: 5 * iv, count: 2, v: ramp(5), dir: up, want: 5, reason: []string{"queued 5 >= activation 5"}}})
	})
	t.Run("on: scales out before activation, sized for boot_time ahead", func(t *testing.T) {
		h := newHarness(t, policyChecks("boot_time", "5m", "lookahead", "true"))
		h.replay([]step{
			{at: 0, count: 2, v: vals(0, 0, 0, 90), dir: none},
			{at: iv, count: 2, v: ramp(1), dir: none},
			{at: 2 * iv, count: 2, v: ramp(2), dir: none},
		})
		a, _ := h.eval(3*iv, 2, ramp(3))
		if a.Direction != up || !strings.Contains(a.Reason, "(lookahead") || !strings.Contains(a.Reason, "reaches activation 5 within boot_time 5m0s") {
			t.Fatalf("want an early lookahead scale-out, got %s to %d: %s", a.Direction, a.Count, a.Reason)
		}
		if a.Count <= 4 || !strings.Contains(a.Reason, "projected over boot_time") {
			t.Fatalf("want capacity beyond nodes_needed 1 projected over boot_time, got %d: %s", a.Count, a.Reason)
		}
	})
	t.Run("on: the wait reaching max_wait within boot_time opens it", func(t *testing.T) {
		newHarness(t, policyChecks("boot_time", "5m", "lookahead", "true")).replay([]step{warmup,
			{at: iv, count: 2, v: vals(1, 1, 24*60, 90), dir: none},
			{at: 2 * iv, count: 2, v: vals(1, 1, 25*60, 90), dir: up, want: 3, reason: []string{"reaches max_wait 30m0s within boot_time 5m0s (lookahead"}},
		})
	})
	t.Run("on: never scales in early and never without a queue", func(t *testing.T) {
		newHarness(t, policyChecks("boot_time", "5m", "lookahead", "true")).replay(
			every(0, time.Hour, iv, 4, vals(0, 0, 0, 50), none))
	})
}

func TestReasons(t *testing.T) {
	// Each rule's reason names the metric value, the rule and the count.
	cases := []struct {
		name  string
		steps []step
	}{
		{"activation", []step{warmup, {at: iv, count: 2, v: vals(3, 7, 60, 90), dir: up, want: 5,
			reason: []string{"scale up from 2 to 5", "queued 7", "activation 5", "nodes_needed 3"}}}},
		{"max_wait", []step{warmup, {at: iv, count: 2, v: vals(2, 1, 3600, 90), dir: up, want: 4,
			reason: []string{"scale up from 2 to 4", "waited 1h0m0s", "max_wait 30m0s", "queued 1"}}}},
		{"max_scale_up", []step{warmup, {at: iv, count: 1, v: vals(30, 90, 60, 90), dir: up, want: 11,
			reason: []string{"scale up from 1 to 11", "nodes_needed 30", "capped by max_scale_up 10"}}}},
		{"hold below activation", []step{warmup, {at: iv, count: 2, v: vals(1, 3, 60, 90), dir: none,
			reason: []string{"hold at 2", "queued 3 < activation 5", "1m0s < max_wait 30m0s"}}}},
		{"hold on floor", []step{warmup, {at: iv, count: 2, v: vals(0, 0, 0, 42.5), dir: none,
			reason: []string{"hold at 2", "util 42.5% >= floor 30%"}}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { newHarness(t, policyChecks()).replay(c.steps) })
	}
	t.Run("scale_in", func(t *testing.T) {
		newHarness(t, policyChecks()).replay(concat(
			every(0, 10*time.Minute-iv, iv, 6, vals(0, 0, 0, 12), none),
			[]step{{at: 10 * time.Minute, count: 6, v: vals(0, 0, 0, 12), dir: down, want: 5,
				reason: []string{"scale down from 6 to 5", "util 12% < floor 30%", "scale_in_after 10m0s", "queue empty"}}},
		))
	})
	t.Run("meta is a JSON object naming the rule", func(t *testing.T) {
		h := newHarness(t, policyChecks())
		h.eval(0, 2, vals(0, 0, 0, 90))
		a, _ := h.eval(iv, 2, vals(3, 7, 60, 90))
		b, err := json.Marshal(a.Meta)
		if err != nil || !strings.Contains(string(b), `"gpu-queue.rule":"activation"`) || !strings.Contains(string(b), `"gpu-queue.queued":7`) {
			t.Fatalf("meta %s (%v)", b, err)
		}
	})
}

// TestCheckOrder replays the same series with the policy's checks in
// every order: the agent's winner is the same each time.
func TestCheckOrder(t *testing.T) {
	series := concat(
		[]step{{at: 0, count: 2, v: vals(0, 0, 0, 90)}},
		[]step{{at: iv, count: 2, v: vals(1, 3, 60, 90)}, {at: 2 * iv, count: 2, v: vals(3, 7, 90, 90)}},
		every(3*iv, 10*time.Minute, iv, 5, vals(0, 0, 0, 10), none),
		every(10*time.Minute+iv, 30*time.Minute, iv, 5, vals(0, 0, 0, 10), none),
		[]step{{at: 40 * time.Minute, count: 5, v: vals(1, 2, 31*60, 10)}},
	)
	var first []string
	perms := [][]int{{0, 1, 2, 3}, {3, 2, 1, 0}, {1, 3, 0, 2}, {2, 0, 3, 1}, {3, 0, 1, 2}}
	for _, perm := range perms {
		base := policyChecks()
		checks := make([]testCheck, len(base))
		for i, j := range perm {
			checks[i] = base[j]
		}
		h := newHarness(t, checks)
		var got []string
		for _, s := range series {
			a, _ := h.eval(s.at, s.count, s.v)
			got = append(got, fmt.Sprintf("%s %s %d", s.at, a.Direction, a.Count))
		}
		if first == nil {
			first = got
			continue
		}
		for i := range got {
			if got[i] != first[i] {
				t.Fatalf("order %v: step %d gives %s, order %v gave %s", perm, i, got[i], perms[0], first[i])
			}
		}
	}
	want := map[string]bool{"1m0s up 5": true, "11m30s down 4": true, "40m0s up 6": true}
	for _, g := range first {
		delete(want, g)
	}
	if len(want) > 0 {
		t.Fatalf("missing decisions %v in %v", want, first)
	}
}

func TestRangeSeries(t *testing.T) {
	// An APM that answers a range (one point a second, 15m window): the
	// first evaluation after the warm-up already sees 15m of empty queue
	// and low utilisation; overlapping windows are taken once.
	s := New(nil)
	now := t0
	s.now = func() time.Time { return now }
	series := func(v float64) []autoscaler.Metric {
		var m []autoscaler.Metric
		for at := now.Add(-15 * time.Minute); !at.After(now); at = at.Add(time.Second) {
			m = append(m, autoscaler.Metric{Time: at, Value: v})
		}
		return m
	}
	run := func(name string, sig Signal, v float64) autoscaler.Action {
		a, err := s.Run(autoscaler.Check{Name: name, Query: name, Config: map[string]string{"signal": string(sig), "pool": "p"}}, series(v), 4)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	for i := 0; i < 2; i++ {
		run("capacity", SignalNodesNeeded, 0)
		a := run("idle", SignalUtil, 5)
		if i == 1 && (a.Direction != down || a.Count != 3) {
			t.Fatalf("want down to 3, got %s %d: %s", a.Direction, a.Count, a.Reason)
		}
		now = now.Add(iv)
	}
}

func TestSignalPerPool(t *testing.T) {
	s := New(nil)
	now := t0
	s.now = func() time.Time { return now }
	cfg := map[string]string{"signal": "util", "pool": "gpu"}
	if _, err := s.Run(autoscaler.Check{Name: "idle", Config: cfg}, []autoscaler.Metric{{Time: now, Value: 1}}, 1); err != nil {
		t.Fatal(err)
	}
	_, err := s.Run(autoscaler.Check{Name: "busy", Config: cfg}, []autoscaler.Metric{{Time: now, Value: 1}}, 1)
	if err == nil || !strings.Contains(err.Error(), `gpu-queue: signal: pool "gpu" already has a "util" check, "idle"`) {
		t.Fatalf("got %v", err)
	}
	// Once the first is stale (renamed away), the new one takes its place.
	now = now.Add(10 * time.Minute)
	if _, err := s.Run(autoscaler.Check{Name: "busy", Config: cfg}, []autoscaler.Metric{{Time: now, Value: 1}}, 1); err != nil {
		t.Fatal(err)
	}
}

func TestStateIsBounded(t *testing.T) {
	s := New(nil)
	now := t0
	s.now = func() time.Time { return now }
	for i := 0; i < maxPools+500; i++ {
		if _, err := s.Run(autoscaler.Check{Name: fmt.Sprint("c", i), Query: "nodes_needed"}, []autoscaler.Metric{{Time: now, Value: 0}}, 1); err != nil {
			t.Fatal(err)
		}
		now = now.Add(time.Millisecond)
	}
	if len(s.pools) > maxPools {
		t.Fatalf("%d pools kept, bound %d", len(s.pools), maxPools)
	}
	now = now.Add(poolTTL + time.Minute)
	s.Run(autoscaler.Check{Name: "last"}, []autoscaler.Metric{{Time: now, Value: 0}}, 1)
	if len(s.pools) != 1 {
		t.Fatalf("idle pools kept: %d", len(s.pools))
	}
}

func TestConcurrentRuns(t *testing.T) {
	s := New(nil)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 300; i++ {
				for _, c := range []testCheck{
					check("capacity", SignalNodesNeeded, "pool", fmt.Sprint("p", g%3)),
					check("idle", SignalUtil, "pool", fmt.Sprint("p", g%3)),
					check(fmt.Sprint("lone", g), SignalNodesNeeded),
				} {
					a, err := s.Run(autoscaler.Check{Name: c.name, Query: c.query, Config: c.cfg},
						[]autoscaler.Metric{{Time: time.Now(), Value: float64(i % 4)}}, int64(i%5))
					if err != nil && !strings.Contains(err.Error(), "already has") {
						t.Error(err)
						return
					}
					if a.Direction < none || a.Direction > up {
						t.Errorf("direction unset: %+v", a)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
}

// TestAnyDeviceQueries: a pool whose layouts follow the queue, read with
// device=any (GPU-equivalents, so a queue of MPS shares is a fraction of
// a GPU): the strategy reads the values as it reads any others, and an
// activation below 1 lets fractional work open a scale-out.
func TestAnyDeviceQueries(t *testing.T) {
	q := func(name string, sig Signal, query string, kv ...string) testCheck {
		c := check(name, sig, append([]string{"pool", "frac"}, kv...)...)
		c.query = query
		return c
	}
	checks := []testCheck{
		q("capacity", SignalNodesNeeded, "nodes_needed{node_pool=frac,device=any}"),
		q("queue", SignalQueued, "gpus_queued{node_pool=frac,device=any,state=blocked}", "activation", "0.25"),
		q("wait", SignalWait, "wait_max_seconds{node_pool=frac,device=any,state=blocked}", "max_wait", "30m"),
		q("idle", SignalUtil, "gpu_alloc_pct{node_pool=frac,device=any}", "floor", "30", "scale_in_after", "10m"),
	}
	newHarness(t, checks).replay([]step{
		{at: 0, count: 1, v: vals(0, 0, 0, 100), dir: none},
		{at: iv, count: 1, v: vals(0, 0.125, 20, 100), dir: none, reason: []string{"queued 0.13 < activation 0.25"}},
		// three MPS shares wait with the pool full: nodes_needed 1
		{at: 2 * iv, count: 1, v: vals(1, 0.375, 40, 100), dir: up, want: 2, reason: []string{"queued 0.38 >= activation 0.25", "nodes_needed 1", "from 1 to 2"}},
	})
}

// removablePolicy is the four-check policy plus a removable check, run last.
func removablePolicy(extra ...string) []testCheck {
	return append(policyChecks(extra...), check("removable", SignalRemovable, "pool", "gpu"))
}

// withRemovable adds the removable check's value (nodes the controller
// emptied for removal) to a policy's values; a negative one leaves the
// check out (its query failed).
func withRemovable(v map[string]float64, removable float64) map[string]float64 {
	if removable >= 0 {
		v["removable"] = removable
	}
	return v
}

// TestRemovable: nodes the controller emptied for removal go at once, at
// most max_scale_down at a time, unless the pool scales out.
func TestRemovable(t *testing.T) {
	busy := func(r float64) map[string]float64 { return withRemovable(vals(0, 0, 0, 50), r) }
	cases := []struct {
		name   string
		checks []testCheck
		steps  []step
	}{
		{"empty queue, util above floor: down by 1 at once", removablePolicy(), []step{
			{at: 0, count: 3, v: busy(1), dir: none},
			{at: iv, count: 3, v: busy(1), dir: down, want: 2,
				reason: []string{"scale down from 3 to 2: removable 1 (nodes the controller emptied for removal); -1"}},
		}},
		{"capped by max_scale_down", removablePolicy("max_scale_down", "1"), []step{
			{at: 0, count: 3, v: busy(2), dir: none},
			{at: iv, count: 3, v: busy(2), dir: down, want: 2,
				reason: []string{"scale down from 3 to 2: removable 2 (nodes the controller emptied for removal); -1, capped by max_scale_down 1"}},
		}},
		{"all of them within max_scale_down", removablePolicy("max_scale_down", "5"), []step{
			{at: 0, count: 4, v: busy(2), dir: none},
			{at: iv, count: 4, v: busy(2), dir: down, want: 2, reason: []string{"removable 2 (nodes the controller emptied for removal); -2"}},
		}},
		{"capped by the count", removablePolicy("max_scale_down", "5"), []step{
			{at: 0, count: 1, v: busy(2), dir: none},
			{at: iv, count: 1, v: busy(2), dir: down, want: 0, reason: []string{"-1, capped by the count 1"}},
		}},
		{"queue below activation: down", removablePolicy(), []step{
			{at: 0, count: 3, v: withRemovable(vals(1, 2, 30, 90), 1), dir: none},
			{at: iv, count: 3, v: withRemovable(vals(1, 2, 60, 90), 1), dir: down, want: 2, reason: []string{"removable 1"}},
		}},
		{"removable 0: as without it", removablePolicy(), concat(
			[]step{
				{at: 0, count: 3, v: busy(0), dir: none},
				{at: iv, count: 3, v: busy(0), dir: none, reason: []string{"util 50% >= floor 30%"}},
				{at: 2 * iv, count: 3, v: withRemovable(vals(1, 2, 60, 90), 0), dir: none, reason: []string{"queued 2 < activation 5"}},
			},
			every(3*iv, 11*time.Minute, iv, 3, withRemovable(vals(0, 0, 0, 10), 0), none, "of scale_in_after 10m0s"),
			[]step{{at: 11*time.Minute + iv, count: 3, v: withRemovable(vals(0, 0, 0, 10), 0), dir: down, want: 2,
				reason: []string{"queue empty and util 10% < floor 30% for 10m0s >= scale_in_after 10m0s"}}},
		)},
		{"count 0: hold", removablePolicy(), []step{
			{at: 0, count: 0, v: withRemovable(vals(0, 0, 0, 0), 1), dir: none},
			{at: iv, count: 0, v: withRemovable(vals(0, 0, 0, 0), 1), dir: none, reason: []string{"hold at 0"}},
		}},
		// The checks that run before the removable check see its value of
		// the previous evaluation: a new removable node goes one evaluation
		// later, and one that is gone is not removed again.
		{"the removable check's own value decides", removablePolicy(), []step{
			{at: 0, count: 3, v: busy(0), dir: none},
			{at: iv, count: 3, v: busy(1), dir: none, reason: []string{"util 50% >= floor 30%"}},
			{at: 2 * iv, count: 3, v: busy(1), dir: down, want: 2},
			{at: 3 * iv, count: 2, v: busy(0), dir: none, reason: []string{"util 50% >= floor 30%"}},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { newHarness(t, c.checks).replay(c.steps) })
	}

	// Up beats down in the agent, so the winner cannot show this: while
	// the pool scales out, no check votes down, the removable one included.
	// (A check that runs before the queue check sees the queue of the
	// previous evaluation: the capacity check, when the queue first
	// reaches activation.)
	t.Run("a scale-out wins in every check", func(t *testing.T) {
		h := newHarness(t, removablePolicy())
		for _, s := range []struct {
			at    time.Duration
			count int64
			v     map[string]float64
			dir   autoscaler.Direction
			from  int // the first check that sees this evaluation's queue
		}{
			{0, 3, busy(1), none, 0},
			{iv, 3, withRemovable(vals(3, 5, 60, 90), 1), up, 1},        // queue at activation
			{2 * iv, 6, withRemovable(vals(3, 2, 90, 90), 1), none, 0},  // latched; covered by capacity in flight
			{3 * iv, 6, withRemovable(vals(3, 2, 120, 90), 1), none, 0}, // latched; covered by capacity in flight
		} {
			w, acts := h.eval(s.at, s.count, s.v)
			if w.Direction != s.dir {
				t.Fatalf("at %s: %s to %d (%q); want %s", s.at, w.Direction, w.Count, w.Reason, s.dir)
			}
			for i, a := range acts[s.from:] {
				i += s.from
				if a.Direction != s.dir || strings.Contains(a.Reason, "removable") {
					t.Fatalf("at %s check %q: %s to %d (%q); want %s", s.at, h.checks[i].name, a.Direction, a.Count, a.Reason, s.dir)
				}
			}
		}
		// the queue empties: the checks after the queue check see it; the
		// next evaluation all do
		h.replay([]step{
			{at: 4 * iv, count: 6, v: busy(1), dir: none},
			{at: 5 * iv, count: 6, v: busy(1), dir: down, want: 5, reason: []string{"removable 1"}},
		})
	})

	t.Run("removable 0 decides as without the check", func(t *testing.T) {
		series := concat(
			[]step{{at: 0, count: 2, v: vals(0, 0, 0, 90)}},
			[]step{{at: iv, count: 2, v: vals(1, 3, 60, 90)}, {at: 2 * iv, count: 2, v: vals(3, 7, 90, 90)}},
			every(3*iv, 12*time.Minute, iv, 5, vals(0, 0, 0, 10), none),
			[]step{{at: 40 * time.Minute, count: 4, v: vals(1, 2, 31*60, 10)}},
		)
		without, with := newHarness(t, policyChecks()), newHarness(t, removablePolicy())
		downs := 0
		for _, s := range series {
			a, acts := without.eval(s.at, s.count, s.v)
			b, bacts := with.eval(s.at, s.count, withRemovable(maps.Clone(s.v), 0))
			if a.Direction == down {
				downs++
			}
			if a.Direction != b.Direction || a.Count != b.Count || a.Reason != b.Reason {
				t.Fatalf("at %s: without %s to %d (%q), with removable 0 %s to %d (%q)", s.at, a.Direction, a.Count, a.Reason, b.Direction, b.Count, b.Reason)
			}
			for i := range acts {
				if acts[i].Direction != bacts[i].Direction || acts[i].Count != bacts[i].Count || acts[i].Reason != bacts[i].Reason {
					t.Fatalf("at %s check %q: without %+v, with removable 0 %+v", s.at, without.checks[i].name, acts[i], bacts[i])
				}
			}
		}
		if downs == 0 {
			t.Fatal("the series never scales in")
		}
	})

	t.Run("meta names the rule and the value", func(t *testing.T) {
		h := newHarness(t, removablePolicy())
		h.eval(0, 3, busy(1))
		a, _ := h.eval(iv, 3, busy(1))
		b, err := json.Marshal(a.Meta)
		if err != nil || !strings.Contains(string(b), `"gpu-queue.rule":"removable"`) || !strings.Contains(string(b), `"gpu-queue.removable":1`) {
			t.Fatalf("meta %s (%v)", b, err)
		}
	})

	// The agent counts a check that did not run as a vote for none, so the
	// winner cannot show this: each check's own action must not use a
	// removable value that has gone stale.
	t.Run("a stale removable check never scales in", func(t *testing.T) {
		h := newHarness(t, removablePolicy())
		h.replay([]step{
			{at: 0, count: 3, v: busy(1), dir: none},
			{at: iv, count: 3, v: busy(1), dir: down, want: 2},
		})
		for at := 2 * iv; at <= 10*iv; at += iv {
			_, acts := h.eval(at, 3, busy(-1)) // the removable query fails
			stale := at-iv > 3*iv              // three evaluation intervals without a run
			for i, a := range acts[:4] {
				removed := a.Direction == down && strings.Contains(a.Reason, "removable")
				if removed == stale {
					t.Fatalf("at %s (stale %v) check %q: %s to %d (%q)", at, stale, h.checks[i].name, a.Direction, a.Count, a.Reason)
				}
				if _, ok := a.Meta["gpu-queue.removable"]; ok == stale {
					t.Fatalf("at %s (stale %v) check %q: meta %v", at, stale, h.checks[i].name, a.Meta)
				}
			}
		}
	})
}
