package apm

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nomad-gpu/nomad-gpu/nomadview"
)

// The cost figures: what each pool's GPU nodes cost and how much of their
// GPU capacity allocations used. CostRates is what the cluster is at one
// instant; a costMeter integrates it over time into the exporter's
// counters of node-seconds and GPU-seconds; Prices turn node-seconds into
// money.

// CostKey labels the cost figures: a node's pool and class.
type CostKey struct{ Pool, NodeClass string }

// CostRate is what the ready GPU nodes of one CostKey are at an instant:
// how many, and their GPU capacity in GPU-equivalents split by use.
type CostRate struct {
	// Nodes are the ready nodes with GPUs, MIG instances, MPS shares or
	// GPU layout groups.
	Nodes float64
	// Allocated is the GPU-equivalents of their healthy instances held by
	// a pending or running allocation; Idle those of the other healthy
	// instances and of their relaying GPUs (Node.gpuUse, the free rule
	// of the other figures).
	Allocated, Idle float64
}

// CostRates computes the cost rates of s by CostKey, over every ready node
// with GPUs (schedulable or not: an ineligible or draining node costs as
// much). Down, disconnected and initializing nodes count nothing.
func CostRates(s *Snapshot) map[CostKey]CostRate {
	out := map[CostKey]CostRate{}
	held := map[string]bool{}
	for i := range s.Nodes {
		n := &s.Nodes[i]
		if n.Status != "ready" || !n.hasGPUs() {
			continue
		}
		allocated, idle := n.gpuUse(held)
		k := CostKey{n.Pool, n.Class}
		r := out[k]
		r.Nodes++
		r.Allocated += allocated
		r.Idle += idle
		out[k] = r
	}
	return out
}

// CostRatesOf is CostRates of the nodes of a nomadview snapshot, read as
// SnapshotOf reads them (nodeOf) but without the queue and runs the cost
// figures do not need: the cost meter takes it at every change of a list.
func CostRatesOf(v *nomadview.Snapshot) map[CostKey]CostRate {
	held := v.HeldSlices()
	s := &Snapshot{}
	for _, n := range v.Nodes {
		if n != nil && n.Status == "ready" {
			s.Nodes = append(s.Nodes, nodeOf(n, held[n.ID]))
		}
	}
	return CostRates(s)
}

// hasGPUs reports whether the node has a GPU, MIG or MPS device group, or
// GPU layout groups (a GPU in MIG mode with no instance offers none).
func (n *Node) hasGPUs() bool {
	return len(n.Layouts) > 0 || slices.ContainsFunc(n.Devices, func(g DeviceGroup) bool { return nomadview.IsGPUAsk(g.DeviceSpec) })
}

// CostTotals are one CostKey's counters: the integrals over time of its
// CostRate.
type CostTotals struct {
	// NodeSeconds are seconds of ready GPU nodes.
	NodeSeconds float64
	// AllocatedGPUSeconds and IdleGPUSeconds are GPU-equivalent-seconds
	// of healthy GPU capacity of those nodes, held or not.
	AllocatedGPUSeconds, IdleGPUSeconds float64
}

// costMeter accumulates CostTotals: the rates last observed hold until
// the next observation, and every observation and read first adds the
// time since the last one at those rates. Times never go back: one before
// the last adds nothing, so the totals only grow. Observations carry the
// generation of the cache that made them; only the current one's count
// (claim), so a cache being replaced cannot undo its successor's rates.
type costMeter struct {
	mu     sync.Mutex
	gen    uint64
	at     time.Time // of the last observation or read; zero: none yet
	rates  map[CostKey]CostRate
	totals map[CostKey]*CostTotals
}

// advance adds the time from m.at to now at the current rates (m.mu held).
func (m *costMeter) advance(now time.Time) {
	if m.at.IsZero() {
		m.at = now
		return
	}
	d := now.Sub(m.at).Seconds()
	if d <= 0 {
		return
	}
	for k, r := range m.rates {
		t := m.totals[k]
		t.NodeSeconds += r.Nodes * d
		t.AllocatedGPUSeconds += r.Allocated * d
		t.IdleGPUSeconds += r.Idle * d
	}
	m.at = now
}

// claim stops the counting at the current rates (they hold until now) and
// returns the generation whose observations count from now on.
func (m *costMeter) claim(now time.Time) uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.advance(now)
	m.rates = nil
	m.gen++
	return m.gen
}

// observe, for generation gen, counts the time since the last observation
// at the rates then, and takes rates from now on; a key seen for the first
// time gets totals of 0. Another generation's observation is ignored.
func (m *costMeter) observe(gen uint64, now time.Time, rates map[CostKey]CostRate) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if gen != m.gen {
		return
	}
	m.advance(now)
	if m.totals == nil {
		m.totals = map[CostKey]*CostTotals{}
	}
	for k := range rates {
		if m.totals[k] == nil {
			m.totals[k] = &CostTotals{}
		}
	}
	m.rates = rates
}

// read counts the time since the last observation or read and returns the
// totals of every key seen so far.
func (m *costMeter) read(now time.Time) map[CostKey]CostTotals {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.advance(now)
	if len(m.totals) == 0 {
		return nil
	}
	out := make(map[CostKey]CostTotals, len(m.totals))
	for k, t := range m.totals {
		out[k] = *t
	}
	return out
}

// Prices are the price of one node-hour by pool and node class, from the
// prices key: a pool and class's own, else its pool's.
type Prices struct {
	byClass map[CostKey]float64
	byPool  map[string]float64
}

// Of returns the price of a node-hour of k's nodes; ok is false when none
// is set.
func (p Prices) Of(k CostKey) (price float64, ok bool) {
	if v, ok := p.byClass[k]; ok {
		return v, true
	}
	v, ok := p.byPool[k.Pool]
	return v, ok
}

// Empty reports whether no price is set.
func (p Prices) Empty() bool { return len(p.byClass) == 0 && len(p.byPool) == 0 }

// String is the prices as the prices key takes them, sorted.
func (p Prices) String() string {
	var parts []string
	for k, v := range p.byClass {
		parts = append(parts, k.Pool+"/"+k.NodeClass+"="+strconv.FormatFloat(v, 'g', -1, 64))
	}
	for pool, v := range p.byPool {
		parts = append(parts, pool+"="+strconv.FormatFloat(v, 'g', -1, 64))
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}

// ParsePrices parses the prices key: comma-separated pool=price or
// pool/class=price entries, each the price of one node-hour of the pool's
// nodes (of that node class), a finite number at least 0. A pool alone
// prices its nodes of every class that has no entry of its own. Each pool
// and each pool/class is given once; an empty string sets no price.
func ParsePrices(s string) (Prices, error) {
	p := Prices{byClass: map[CostKey]float64{}, byPool: map[string]float64{}}
	if strings.TrimSpace(s) == "" {
		return p, nil
	}
	for _, entry := range strings.Split(s, ",") {
		entry = strings.TrimSpace(entry)
		name, value, ok := strings.Cut(entry, "=")
		name, value = strings.TrimSpace(name), strings.TrimSpace(value)
		if !ok || name == "" || value == "" {
			return Prices{}, fmt.Errorf("entry %q is not pool=price or pool/class=price", entry)
		}
		pool, class, withClass := strings.Cut(name, "/")
		if pool == "" || withClass && class == "" || strings.ContainsFunc(name, isSpace) {
			return Prices{}, fmt.Errorf("entry %q: %q is not a pool or pool/class", entry, name)
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) {
			return Prices{}, fmt.Errorf("entry %q: price %q is not a number at least 0", entry, value)
		}
		if withClass {
			k := CostKey{pool, class}
			if _, dup := p.byClass[k]; dup {
				return Prices{}, fmt.Errorf("%q is priced twice", name)
			}
			p.byClass[k] = v
			continue
		}
		if _, dup := p.byPool[pool]; dup {
			return Prices{}, fmt.Errorf("%q is priced twice", name)
		}
		p.byPool[pool] = v
	}
	return p, nil
}

func isSpace(r rune) bool { return r == ' ' || r == '\t' || r == '\n' || r == '\r' }
