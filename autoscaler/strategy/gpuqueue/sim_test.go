package gpuqueue

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/nomad-gpu/nomad-gpu/wire/autoscaler"
)

// A small GPU pool driven by the strategy the way the agent drives it, to
// measure what the look-ahead and the in-flight ledger do: tasks of one
// GPU arrive (Poisson, a ramp, a plateau, a burst), wait FIFO, run on
// 8-GPU nodes packed fullest first; new nodes are ready boot minutes after
// the count rises; scale-in removes empty nodes only (as
// node_selector_strategy = "empty_ignore_system").

type simConfig struct {
	seed      uint64
	boot      time.Duration
	runtime   time.Duration
	checks    []testCheck
	min, max  int64
	cooldown  time.Duration // after a Down
	cooldownU time.Duration // cooldown_on_scale_up
}

type simResult struct {
	meanWait, p95Wait, maxWait time.Duration
	nodeHours                  float64
	peak                       int64
	ups, downs                 int
	turns                      int // changes of direction between scalings
}

const (
	simStep     = 10 * time.Second
	simEval     = 30 * time.Second
	simHorizon  = 8 * time.Hour
	gpusPerNode = 8
)

// arrivalRate is tasks per minute at t.
func arrivalRate(t time.Duration) float64 {
	m := t.Minutes()
	switch {
	case m < 30:
		return 0.1
	case m < 90:
		return 0.1 + 2.9*(m-30)/60 // ramp to 3/min
	case m < 180:
		return 3
	case m < 210:
		return 3 - 2.9*(m-180)/30
	case m < 300:
		return 0.1
	case m < 310:
		return 6 // a burst
	}
	return 0.1
}

func simulate(t *testing.T, c simConfig) simResult {
	t.Helper()
	rng := rand.New(rand.NewPCG(c.seed, 99))
	// arrivals by thinning at the peak rate
	var arrivals []time.Duration
	for at := time.Duration(0); ; {
		at += time.Duration(rng.ExpFloat64() / 6 * float64(time.Minute))
		if at >= simHorizon {
			break
		}
		if rng.Float64() < arrivalRate(at)/6 {
			arrivals = append(arrivals, at)
		}
	}

	type node struct {
		readyAt time.Duration
		ends    []time.Duration // running tasks' end times
	}
	h := newHarness(t, c.checks)
	nodes := []*node{}
	for i := int64(0); i < c.min; i++ {
		nodes = append(nodes, &node{})
	}
	var queue []time.Duration // arrival times, FIFO
	var waits []time.Duration
	var res simResult
	var cooldownUntil time.Duration
	var last autoscaler.Direction
	next := 0
	for now := time.Duration(0); now < simHorizon; now += simStep {
		for next < len(arrivals) && arrivals[next] <= now {
			queue = append(queue, arrivals[next])
			next++
		}
		free := 0
		for _, n := range nodes {
			kept := n.ends[:0]
			for _, e := range n.ends {
				if e > now {
					kept = append(kept, e)
				}
			}
			n.ends = kept
		}
		// place FIFO, fullest ready node first
		ready := []*node{}
		for _, n := range nodes {
			if n.readyAt <= now {
				ready = append(ready, n)
			}
		}
		sort.SliceStable(ready, func(i, j int) bool { return len(ready[i].ends) > len(ready[j].ends) })
		for _, n := range ready {
			for len(n.ends) < gpusPerNode && len(queue) > 0 {
				waits = append(waits, now-queue[0])
				n.ends = append(n.ends, now+c.runtime)
				queue = queue[1:]
			}
			free += gpusPerNode - len(n.ends)
		}
		res.nodeHours += float64(len(nodes)) * simStep.Hours()

		if now%simEval != 0 {
			continue
		}
		used := 0
		for _, n := range ready {
			used += len(n.ends)
		}
		util := 0.0
		if len(ready) > 0 {
			util = 100 * float64(used) / float64(len(ready)*gpusPerNode)
		}
		wait := 0.0
		if len(queue) > 0 {
			wait = (now - queue[0]).Seconds()
		}
		needed := math.Ceil(math.Max(0, float64(len(queue)-free)) / gpusPerNode)
		count := int64(len(nodes))
		a, _ := h.eval(now, count, withNodes(vals(needed, float64(len(queue)), wait, util), float64(len(ready))))
		if now < cooldownUntil || a.Direction == none {
			continue
		}
		target := min(max(a.Count, c.min), c.max)
		if target != count {
			if last != 0 && a.Direction != last {
				res.turns++
			}
			last = a.Direction
		}
		switch {
		case target > count:
			for i := count; i < target; i++ {
				nodes = append(nodes, &node{readyAt: now + c.boot})
			}
			res.ups++
			cooldownUntil = now + c.cooldownU
		case target < count:
			remove := count - target
			kept := nodes[:0]
			for _, n := range nodes {
				if remove > 0 && n.readyAt <= now && len(n.ends) == 0 {
					remove--
					continue
				}
				kept = append(kept, n)
			}
			nodes = kept
			res.downs++
			cooldownUntil = now + c.cooldown
		}
		res.peak = max(res.peak, int64(len(nodes)))
	}
	for _, q := range queue {
		waits = append(waits, simHorizon-q)
	}
	sort.Slice(waits, func(i, j int) bool { return waits[i] < waits[j] })
	var sum time.Duration
	for _, w := range waits {
		sum += w
	}
	if len(waits) > 0 {
		res.meanWait = sum / time.Duration(len(waits))
		res.p95Wait = waits[len(waits)*95/100]
		res.maxWait = waits[len(waits)-1]
	}
	return res
}

func simPolicy(kv ...string) []testCheck {
	c := policyChecks(append([]string{"max_scale_down", "2"}, kv...)...)
	c[1].cfg["activation"] = "4"
	c[2].cfg["max_wait"] = "10m"
	return c
}

// TestLookaheadHelps measures, over 10 seeds of the same load, mean and
// 95th-percentile wait and node-hours with the look-ahead off and on, and
// with the in-flight ledger off (boot_time 0), and with a nodes check
// beside the ledger. It asserts what the method
// promises: less waiting for a bounded extra cost, and that the ledger
// keeps the pool from overshooting while nodes boot.
func TestLookaheadHelps(t *testing.T) {
	if testing.Short() {
		t.Skip("simulation")
	}
	variants := []struct {
		name   string
		checks []testCheck
	}{
		{"ledger, no lookahead", simPolicy("boot_time", "6m")},
		{"ledger + lookahead", simPolicy("boot_time", "6m", "lookahead", "true")},
		{"no ledger (boot_time 0)", simPolicy("boot_time", "0")},
		{"ledger + nodes check", append(simPolicy("boot_time", "6m"), check("nodes", SignalNodes, "pool", "gpu"))},
	}
	totals := make([]simResult, len(variants))
	const seeds = 10
	for seed := uint64(1); seed <= seeds; seed++ {
		for i, v := range variants {
			r := simulate(t, simConfig{seed: seed, boot: 6 * time.Minute, runtime: 20 * time.Minute,
				checks: v.checks, min: 1, max: 40, cooldown: 5 * time.Minute, cooldownU: time.Minute})
			totals[i].meanWait += r.meanWait / seeds
			totals[i].p95Wait += r.p95Wait / seeds
			totals[i].maxWait += r.maxWait / seeds
			totals[i].nodeHours += r.nodeHours / seeds
			totals[i].peak = max(totals[i].peak, r.peak)
			totals[i].ups += r.ups
			totals[i].downs += r.downs
			totals[i].turns += r.turns
		}
	}
	for i, v := range variants {
		r := totals[i]
		t.Logf("%-24s mean wait %6s  p95 %6s  max %6s  node-hours %5.1f  peak %2d  ups %2d downs %2d turns %.1f",
			v.name, r.meanWait.Round(time.Second), r.p95Wait.Round(time.Second), r.maxWait.Round(time.Second),
			r.nodeHours, r.peak, r.ups/seeds, r.downs/seeds, float64(r.turns)/seeds)
	}
	off, on, naive, joined := totals[0], totals[1], totals[2], totals[3]
	if joined.peak > off.peak || joined.nodeHours > off.nodeHours*1.05 {
		t.Errorf("with the nodes check the pool peaked at %d for %.1f node-hours; the ledger alone %d for %.1f",
			joined.peak, joined.nodeHours, off.peak, off.nodeHours)
	}
	if on.meanWait >= off.meanWait || on.p95Wait > off.p95Wait {
		t.Errorf("lookahead did not cut waiting: %s/%s vs %s/%s", on.meanWait, on.p95Wait, off.meanWait, off.p95Wait)
	}
	if on.nodeHours > off.nodeHours*1.15 {
		t.Errorf("lookahead cost %.1f node-hours vs %.1f", on.nodeHours, off.nodeHours)
	}
	if naive.peak <= off.peak {
		t.Errorf("without the ledger the peak (%d) should overshoot the ledger's (%d)", naive.peak, off.peak)
	}
	// Two load episodes (the day's plateau, the burst): up, down, up, down.
	for i, v := range variants[:2] {
		if turns := float64(totals[i].turns) / seeds; turns > 3 {
			t.Errorf("%s: %.1f direction changes a run; the load has two episodes (3 changes)", v.name, turns)
		}
	}
}
