package gpuqueue

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/nomad-gpu/nomad-gpu/wire/autoscaler"
)

// Bounds on what the plugin keeps.
const (
	// maxInflight bounds a pool's in-flight ledger; older entries merge.
	maxInflight = 32
	// defaultStaleAfter is how old a signal may be before its check has
	// been seen twice (so before the evaluation interval is known).
	defaultStaleAfter = 2 * time.Minute
	// minStaleAfter is the least a signal may age before it is stale.
	minStaleAfter = 30 * time.Second
	// rateTau is the growth-rate EWMA's time constant when boot_time is 0
	// (it is boot_time/2 otherwise).
	rateTau = 5 * time.Minute
)

// member is one check of a pool and what its series has shown so far.
type member struct {
	id       string // check name + "\x00" + query
	name     string
	signal   Signal
	explicit map[string]string

	runs    int
	lastRun time.Time     // plugin clock
	gap     time.Duration // between its last two runs

	seen      bool
	lastT     time.Time // metric time of the latest point taken
	value     float64
	prevT     time.Time // the point before it (zero until there is one)
	prevValue float64
	zeroSince time.Time // when value became 0 (meaningful while it is 0)
	busySince time.Time // when value rose above 0 (meaningful while above)
	rate      float64   // EWMA of d(value)/dt, per second; 0 while empty

	low      bool // util: value < floor
	lowSince time.Time
	lowFloor float64
}

func (m *member) empty() bool { return m.value <= 0 }

// observe takes one point of the member's series; it returns by how much
// the value fell (for the in-flight ledger).
func (m *member) observe(t time.Time, v float64, r rules) (fell float64) {
	if v < 0 {
		v = 0
	}
	if m.signal == SignalUtil && m.seen && m.lowFloor != r.Floor {
		// The floor changed: the low period starts again.
		m.low, m.lowSince, m.lowFloor = m.value < r.Floor, m.lastT, r.Floor
	}
	if !m.seen {
		m.seen, m.lastT, m.value = true, t, v
		if v <= 0 {
			m.zeroSince = t
		} else {
			m.busySince = t
		}
		m.low, m.lowSince, m.lowFloor = v < r.Floor, t, r.Floor
		return 0
	}
	if !t.After(m.lastT) {
		return 0 // already taken (windows overlap)
	}
	dt := t.Sub(m.lastT)
	tau := r.BootTime / 2
	if tau <= 0 {
		tau = rateTau
	}
	switch {
	case v <= 0:
		if m.value > 0 {
			m.zeroSince = t
		}
		m.rate = 0
	case m.value <= 0:
		// The queue appears: one arrival is no trend, so the rate is
		// learned only from changes while the queue is non-empty.
		m.busySince = t
	default:
		alpha := 1 - math.Exp(-dt.Seconds()/tau.Seconds())
		m.rate += alpha * ((v-m.value)/dt.Seconds() - m.rate)
	}
	if low := v < r.Floor; low != m.low {
		m.low, m.lowSince = low, t
	}
	if v < m.value {
		fell = m.value - v
	}
	m.prevT, m.prevValue = m.lastT, m.value
	m.value, m.lastT = v, t
	return fell
}

// valueAt is the member's latest value taken no later than t.
func (m *member) valueAt(t time.Time) (float64, bool) {
	switch {
	case m.seen && !m.lastT.After(t):
		return m.value, true
	case !m.prevT.IsZero() && !m.prevT.After(t):
		return m.prevValue, true
	}
	return 0, false
}

// heldSince is how long the member's condition has held since `since`
// (metric time): up to its latest point, plus the clock time since its
// check ran, at most one evaluation interval. For the check being run
// that adds nothing; for the pool's checks that run later in the same
// evaluation it assumes their value of the last evaluation still holds.
// That is safe for scale-in only, and only because a Down wins in the
// agent when every ungrouped check votes Down, each on its own signal,
// fresh; a check that stopped reporting gains at most one interval.
func (m *member) heldSince(since, now time.Time, interval time.Duration) time.Duration {
	return m.lastT.Sub(since) + min(max(0, now.Sub(m.lastRun)), interval)
}

// inflight is capacity the target's count already holds but the
// nodes_needed metric does not show yet.
type inflight struct {
	at time.Time
	n  float64
}

// pool is the state shared by the checks of one policy that name the same
// pool, or one check alone.
type pool struct {
	name     string // "" for a check alone
	members  map[string]*member
	bySignal map[Signal]*member
	lastUsed time.Time
	maxRuns  int

	// latched says the queue opened scale-out (latchWhy says how) and has
	// not emptied since.
	latched   bool
	latchWhy  string
	haveCount bool
	lastCount int64
	ledger    []inflight
}

func newPool(name string) *pool {
	return &pool{name: name, members: map[string]*member{}, bySignal: map[Signal]*member{}}
}

// staleAfter is how long a check's signal counts: three evaluation
// intervals, the interval being the shortest gap between two runs of any
// one check (a failing check only makes its own gaps longer).
func (p *pool) staleAfter() time.Duration {
	iv := p.interval()
	if iv == 0 {
		return defaultStaleAfter
	}
	return max(3*iv, minStaleAfter)
}

// interval is the evaluation interval as seen: the shortest gap between
// two runs of any one check; 0 before any check ran twice.
func (p *pool) interval() time.Duration {
	var iv time.Duration
	for _, m := range p.members {
		if m.gap > 0 && (iv == 0 || m.gap < iv) {
			iv = m.gap
		}
	}
	return iv
}

// recent reports whether a member's check ran within staleAfter: its keys
// count for the pool and its signal is taken.
func (p *pool) recent(m *member, now time.Time, staleAfter time.Duration) bool {
	return m != nil && now.Sub(m.lastRun) <= staleAfter
}

// fresh reports whether a member's signal may be used.
func (p *pool) fresh(m *member, now time.Time, staleAfter time.Duration) bool {
	return p.recent(m, now, staleAfter) && m.seen
}

func (p *pool) label() string {
	if p.name == "" {
		return "this check"
	}
	return fmt.Sprintf("pool %q", p.name)
}

// join finds or adds the member for a check and records its run.
func (p *pool) join(check autoscaler.Check, cc checkConfig, now time.Time) (*member, error) {
	id := check.Name + "\x00" + check.Query
	m := p.members[id]
	if m != nil && m.signal != cc.Signal {
		p.remove(m)
		m = nil
	}
	if m == nil {
		if other := p.bySignal[cc.Signal]; other != nil {
			if p.recent(other, now, p.staleAfter()) {
				return nil, configError(keySignal, "%s already has a %q check, %q; give each check of a pool its own signal",
					p.label(), cc.Signal, other.name)
			}
			p.remove(other)
		}
		m = &member{id: id, name: check.Name, signal: cc.Signal}
		p.members[id] = m
		p.bySignal[cc.Signal] = m
	}
	m.explicit = cc.Explicit
	if m.runs > 0 {
		m.gap = now.Sub(m.lastRun)
	}
	m.runs++
	m.lastRun = now
	p.maxRuns = max(p.maxRuns, m.runs)
	return m, nil
}

func (p *pool) remove(m *member) {
	delete(p.members, m.id)
	if p.bySignal[m.signal] == m {
		delete(p.bySignal, m.signal)
	}
}

// rules merges the plugin defaults with every fresh member's keys. A key
// that two checks set to different values is an error.
func (p *pool) rules(defaults rules, now time.Time, staleAfter time.Duration) (rules, error) {
	r := defaults
	setBy := map[string]*member{}
	for _, sig := range signals { // a fixed order keeps errors stable
		m := p.bySignal[sig]
		if !p.recent(m, now, staleAfter) {
			continue
		}
		for _, k := range sortedKeys(m.explicit) {
			v := m.explicit[k]
			if o := setBy[k]; o != nil && o.explicit[k] != v {
				return r, configError(k, "checks %q (%s) and %q (%s) of %s disagree; set it on one check",
					o.name, o.explicit[k], m.name, v, p.label())
			}
			setBy[k] = m
			if _, err := parseRule(&r, k, v); err != nil {
				return r, err
			}
		}
	}
	return r, r.validate()
}

// observeCount keeps the in-flight ledger: a rise of the count is capacity
// on its way; a fall takes back the newest.
func (p *pool) observeCount(count int64, now time.Time, bootTime time.Duration) {
	if bootTime <= 0 {
		p.ledger = nil
	} else if p.haveCount {
		switch d := count - p.lastCount; {
		case d > 0:
			p.ledger = append(p.ledger, inflight{at: now, n: float64(d)})
			if len(p.ledger) > maxInflight {
				p.ledger[1].n += p.ledger[0].n
				p.ledger = p.ledger[1:]
			}
		case d < 0:
			left := float64(-d)
			for i := len(p.ledger) - 1; i >= 0 && left > 0; i-- {
				take := math.Min(left, p.ledger[i].n)
				p.ledger[i].n -= take
				left -= take
			}
		}
	}
	p.haveCount, p.lastCount = true, count
	p.expire(now, bootTime)
}

// consume takes capacity that showed up (nodes_needed fell) off the
// ledger, oldest first.
func (p *pool) consume(n float64) {
	for i := 0; i < len(p.ledger) && n > 0; i++ {
		take := math.Min(n, p.ledger[i].n)
		p.ledger[i].n -= take
		n -= take
	}
}

func (p *pool) expire(now time.Time, bootTime time.Duration) {
	kept := p.ledger[:0]
	for _, e := range p.ledger {
		if e.n > 1e-9 && now.Sub(e.at) < bootTime {
			kept = append(kept, e)
		}
	}
	p.ledger = kept
}

func (p *pool) inflightTotal() float64 {
	t := 0.0
	for _, e := range p.ledger {
		t += e.n
	}
	return t
}

// inflight is the capacity the count holds that the nodes_needed reading
// n does not show yet, and how it was found. With a fresh nodes check it
// is the count minus the nodes that had joined by n's reading (a join
// that reading does not show is still in flight), at most the ledger, so
// a node that never joins stops counting after boot_time. Without one it
// is the ledger.
func (p *pool) inflight(count int64, n *member, fresh func(*member) bool) (float64, string) {
	led := p.inflightTotal()
	j := p.bySignal[SignalNodes]
	if j == nil || !fresh(j) || led <= 0 {
		return led, ""
	}
	joined, ok := j.valueAt(n.lastT)
	if !ok {
		return led, ""
	}
	if ahead := float64(count) - joined; ahead <= led {
		return max(0, ahead), fmt.Sprintf("count %d - %s nodes joined", count, num(joined))
	}
	return led, ""
}

// decide turns the pool's signals into one action. Every check of the
// pool returns it; the agent's winner rule then only matters while the
// checks' views differ by an evaluation (see the package documentation).
func (p *pool) decide(own *member, r rules, count int64, now time.Time, staleAfter time.Duration) autoscaler.Action {
	fresh := func(m *member) bool { return p.fresh(m, now, staleAfter) }
	n := p.bySignal[SignalNodesNeeded]
	q := p.bySignal[SignalQueued]
	if q == nil {
		q = n
	}
	w := p.bySignal[SignalWait]
	u := p.bySignal[SignalUtil]

	meta := map[string]any{"gpu-queue.pool": p.name}
	for _, m := range []*member{n, p.bySignal[SignalQueued], w, u, p.bySignal[SignalRemovable]} {
		if fresh(m) {
			meta["gpu-queue."+string(m.signal)] = m.value
		}
	}
	hold := func(rule, why string) autoscaler.Action {
		meta["gpu-queue.rule"] = rule
		return autoscaler.Action{Count: count, Direction: autoscaler.DirectionNone, Meta: meta,
			Reason: fmt.Sprintf("hold at %d: %s", count, why)}
	}

	// Scale out.
	if q == nil {
		return hold("none", fmt.Sprintf("%s has no nodes_needed or queued check", p.label()))
	}
	if !fresh(q) {
		return hold("stale", staleWhy(q, now))
	}
	if !q.empty() {
		open, rule, why := p.gate(r, q, w, fresh, now)
		if !open {
			if a, ok := p.removable(r, count, fresh, meta); ok {
				return a
			}
			return hold("gate", why)
		}
		if !p.latched {
			p.latched, p.latchWhy = true, why
		}
		if n == nil {
			return hold(rule, fmt.Sprintf("%s, but %s has no nodes_needed check to size a scale-out", why, p.label()))
		}
		if !fresh(n) {
			return hold(rule, why+", but "+staleWhy(n, now))
		}
		needed := n.value
		extra := 0.0
		if r.Lookahead && n.rate > 0 {
			extra = math.Floor(n.rate * r.BootTime.Seconds())
		}
		infl, inflWhy := p.inflight(count, n, fresh)
		add := int64(math.Ceil(needed + extra - infl - 1e-9))
		if add < 1 {
			if needed+extra <= 0 {
				return hold(rule, fmt.Sprintf("%s, but nodes_needed is 0: the queued work needs no new capacity", why))
			}
			if inflWhy == "" {
				inflWhy = "count rises of the last boot_time " + r.BootTime.String()
			}
			return hold(rule, fmt.Sprintf("%s, but nodes_needed %s is covered by %s in flight (%s)",
				why, num(needed+extra), num(infl), inflWhy))
		}
		step := min(add, r.MaxScaleUp)
		desired := count + step
		var b strings.Builder
		fmt.Fprintf(&b, "scale up from %d to %d: %s; nodes_needed %s", count, desired, why, num(needed))
		if extra > 0 {
			fmt.Fprintf(&b, " + %s projected over boot_time %s (lookahead: growing %s/min)", num(extra), r.BootTime, num(n.rate*60))
		}
		if infl > 0 {
			fmt.Fprintf(&b, " - %s in flight", num(infl))
			if inflWhy != "" {
				fmt.Fprintf(&b, " (%s)", inflWhy)
			}
		}
		fmt.Fprintf(&b, " = +%d", add)
		if step < add {
			fmt.Fprintf(&b, ", capped by max_scale_up %d", r.MaxScaleUp)
		}
		meta["gpu-queue.rule"] = rule
		return autoscaler.Action{Count: desired, Direction: autoscaler.DirectionUp, Reason: b.String(), Meta: meta}
	}
	p.latched, p.latchWhy = false, ""
	if a, ok := p.removable(r, count, fresh, meta); ok {
		return a
	}

	// Scale in: every queue signal empty and utilisation below the floor,
	// all of it for scale_in_after.
	if u == nil {
		return hold("none", fmt.Sprintf("queue empty; %s has no util check, and gpu-queue scales in only on one", p.label()))
	}
	if r.Floor <= 0 {
		return hold("none", "queue empty; scale-in is off (floor 0)")
	}
	held := time.Duration(math.MaxInt64)
	for _, m := range []*member{p.bySignal[SignalQueued], n, w} {
		if m == nil {
			continue
		}
		if !fresh(m) {
			return hold("stale", "queue empty, but "+staleWhy(m, now))
		}
		if !m.empty() {
			return hold("gate", fmt.Sprintf("%s %s: scale-in waits for an empty queue", signalLabel(m.signal), valueText(m)))
		}
		held = min(held, m.heldSince(m.zeroSince, now, p.interval()))
	}
	if !fresh(u) {
		return hold("stale", "queue empty, but "+staleWhy(u, now))
	}
	if !u.low {
		return hold("floor", fmt.Sprintf("queue empty, util %s >= floor %s", pct(u.value), pct(r.Floor)))
	}
	held = min(held, u.heldSince(u.lowSince, now, p.interval()))
	if held < r.ScaleInAfter {
		return hold("scale_in_after", fmt.Sprintf("queue empty and util %s < floor %s for %s of scale_in_after %s",
			pct(u.value), pct(r.Floor), held.Round(time.Second), r.ScaleInAfter))
	}
	// The util check bounds the step by the share of the count in use, on
	// its own fresh value; the others only by max_scale_down (the agent
	// keeps the largest Down count, so the util check's bound holds).
	busy := int64(0)
	if own == u {
		busy = int64(math.Ceil(float64(count)*u.value/100 - 1e-9))
	}
	desired := max(count-r.MaxScaleDown, busy, 0)
	if count == 0 {
		return hold("scale_in_after", fmt.Sprintf("queue empty and util %s < floor %s for %s; nothing left to remove",
			pct(u.value), pct(r.Floor), held.Round(time.Second)))
	}
	if desired >= count {
		return hold("scale_in_after", fmt.Sprintf("queue empty and util %s < floor %s for %s, but util %s of %d needs all %d",
			pct(u.value), pct(r.Floor), held.Round(time.Second), pct(u.value), count, count))
	}
	meta["gpu-queue.rule"] = "scale_in"
	limit := ""
	if desired == count-r.MaxScaleDown {
		limit = fmt.Sprintf(" (max_scale_down %d)", r.MaxScaleDown)
	} else {
		limit = fmt.Sprintf(" (util %s of %d keeps %d)", pct(u.value), count, desired)
	}
	return autoscaler.Action{Count: desired, Direction: autoscaler.DirectionDown, Meta: meta,
		Reason: fmt.Sprintf("scale down from %d to %d: queue empty and util %s < floor %s for %s >= scale_in_after %s; -%d%s",
			count, desired, pct(u.value), pct(r.Floor), held.Round(time.Second), r.ScaleInAfter, count-desired, limit)}
}

// removable is the scale-in of nodes the controller emptied for removal:
// with a fresh removable check above 0 and no scale-out, the pool drops
// them at once, at most max_scale_down at a time. No wait, empty queue or
// utilisation applies: those nodes are ineligible and run nothing, so
// removing them takes no capacity from the queue. ok is false where the
// rule does not apply (no such check, a stale one, 0, or a count of 0):
// the other rules decide.
func (p *pool) removable(r rules, count int64, fresh func(*member) bool, meta map[string]any) (a autoscaler.Action, ok bool) {
	m := p.bySignal[SignalRemovable]
	if m == nil || !fresh(m) || count <= 0 {
		return a, false
	}
	k := math.Floor(m.value + 1e-9) // a node count; whole nodes only
	if k < 1 {
		return a, false
	}
	step := min(int64(min(k, float64(count))), r.MaxScaleDown)
	var b strings.Builder
	fmt.Fprintf(&b, "scale down from %d to %d: removable %s (nodes the controller emptied for removal); -%d",
		count, count-step, num(k), step)
	switch {
	case float64(step) == k:
	case step == r.MaxScaleDown:
		fmt.Fprintf(&b, ", capped by max_scale_down %d", r.MaxScaleDown)
	default:
		fmt.Fprintf(&b, ", capped by the count %d", count)
	}
	meta["gpu-queue.rule"] = string(SignalRemovable)
	return autoscaler.Action{Count: count - step, Direction: autoscaler.DirectionDown, Reason: b.String(), Meta: meta}, true
}

// gate says whether queued work may scale out: it reached activation, or
// waited max_wait, or, with lookahead, will do either within boot_time;
// once open it stays open until the queue empties (the latch).
func (p *pool) gate(r rules, q, w *member, fresh func(*member) bool, now time.Time) (open bool, rule, why string) {
	ql := fmt.Sprintf("%s %s", signalLabel(q.signal), num(q.value))
	if q.value >= r.Activation {
		return true, "activation", fmt.Sprintf("%s >= activation %s", ql, num(r.Activation))
	}
	var waited time.Duration
	var waitText string
	known := true
	switch {
	case w == nil:
		waited = q.lastT.Sub(q.busySince)
		waitText = fmt.Sprintf("queue non-empty for %s", waited.Round(time.Second))
	case fresh(w):
		waited = time.Duration(w.value * float64(time.Second))
		waitText = fmt.Sprintf("oldest queued work waited %s", waited.Round(time.Second))
	default:
		known = false
		waitText = staleWhy(w, now)
	}
	if known && r.MaxWait > 0 && waited >= r.MaxWait {
		return true, "max_wait", fmt.Sprintf("%s >= max_wait %s (%s < activation %s)", waitText, r.MaxWait, ql, num(r.Activation))
	}
	if r.Lookahead {
		h := r.BootTime.Seconds()
		if q.rate > 0 && q.value+q.rate*h >= r.Activation {
			return true, "lookahead", fmt.Sprintf("%s growing %s/min reaches activation %s within boot_time %s (lookahead)",
				ql, num(q.rate*60), num(r.Activation), r.BootTime)
		}
		if known && r.MaxWait > 0 && waited+r.BootTime >= r.MaxWait {
			return true, "lookahead", fmt.Sprintf("%s reaches max_wait %s within boot_time %s (lookahead; %s < activation %s)",
				waitText, r.MaxWait, r.BootTime, ql, num(r.Activation))
		}
	}
	if p.latched {
		return true, "latched", fmt.Sprintf("%s, still unplaced since scale-out opened (%s)", ql, p.latchWhy)
	}
	wait := "max_wait off"
	if r.MaxWait > 0 {
		wait = fmt.Sprintf("%s < max_wait %s", waitText, r.MaxWait)
		if !known {
			wait = waitText
		}
	}
	return false, "gate", fmt.Sprintf("%s < activation %s and %s", ql, num(r.Activation), wait)
}

func staleWhy(m *member, now time.Time) string {
	return fmt.Sprintf("the %s check %q has not reported for %s", m.signal, m.name, now.Sub(m.lastRun).Round(time.Second))
}

func signalLabel(s Signal) string {
	if s == SignalWait {
		return "oldest wait"
	}
	return string(s)
}

func valueText(m *member) string {
	switch m.signal {
	case SignalWait:
		return time.Duration(m.value * float64(time.Second)).Round(time.Second).String()
	case SignalUtil:
		return pct(m.value)
	}
	return num(m.value)
}

// num prints a value with at most two decimals.
func num(v float64) string {
	return strconv.FormatFloat(math.Round(v*100)/100, 'f', -1, 64)
}

func pct(v float64) string { return num(v) + "%" }
