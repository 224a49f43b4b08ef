package devicefp

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/contract/gpulayout"
	"github.com/nomad-gpu/nomad-gpu/gpu"
)

// Following the layouts asked for each GPU
// (docs/design/gpu-layouts.md §7). The controller, or an operator's pin,
// writes the layout it wants for a GPU in the node's dynamic metadata. Only
// the device plugin can apply it: it is what offers the GPU's instances to
// Nomad, what hands them to tasks (Reserve), and so the one process that
// can stop offering them, refuse a placement that races the change and
// publish the new instances. The layout manager below reads the metadata
// from the local agent every layout.poll, waits while any allocation holds
// the GPU (held), then marks its instances unhealthy and refuses them to
// Reserve (draining) for layout.drain_grace and until a view of the node's
// allocations fetched after the drain began shows no holder, then switches
// and fingerprints the new instances (ready). Each GPU's progress is in its
// layout group (layoutgroup.go).

// migGeometrySetter is what an inventory that can change a MIG-mode GPU's
// instances offers: destroy them and make these (profile names).
type migGeometrySetter interface {
	SetMIGGeometry(gpuUUID string, profiles []string) error
}

// layoutManager follows the desired layouts of the node's GPUs.
type layoutManager struct {
	p   *Plugin
	log hclog.Logger

	// mu guards every field below. It is never held while calling into
	// the plugin's locked state, the inventory or Nomad's API.
	mu   sync.Mutex
	gpus map[string]*gpuLayout // by GPU UUID; absent: ready, nothing asked
	// applied are the whole and MPS layouts applied that differ from the
	// mps blocks, as layout.state_file keeps them.
	applied map[string]gpulayout.Layout
	// reserved holds, by device ID, when a Reserve of it succeeded, until
	// a view of the allocations fetched later has it (or not).
	reserved map[string]time.Time
	// holds are the GPUs the controller holds (contract.MetaHoldPrefix),
	// by UUID: the health description of their instances until the hold
	// ends.
	holds map[string]string
	// strayPins say which of the node's pins (contract.MetaPinPrefix)
	// name no GPU of it, "; "-joined ("" when none): published on every
	// layout group, since no GPU's own can carry them.
	strayPins string
	// lastErr is the last reason the metadata could not be read, logged
	// once.
	lastErr string
	stop    context.CancelFunc // ends the poll loop; nil when none runs
}

// gpuLayout is one GPU's progress towards its desired layout.
type gpuLayout struct {
	gpuStatus
	from, target gpulayout.Layout // the relayout being drained for
	drainSince   time.Time
	// failedFor is the desired value whose switch failed: the GPU stays in
	// error until the value changes.
	failedFor string
}

func newLayoutManager(p *Plugin) *layoutManager {
	return &layoutManager{
		p: p, log: p.logger.Named("layout"),
		gpus: map[string]*gpuLayout{}, applied: map[string]gpulayout.Layout{}, reserved: map[string]time.Time{},
	}
}

// setApplied takes the layouts read from layout.state_file.
func (lm *layoutManager) setApplied(applied map[string]gpulayout.Layout) {
	lm.mu.Lock()
	defer lm.mu.Unlock()
	lm.applied = applied
}

// start runs the poll loop, once, until close.
func (lm *layoutManager) start() {
	lm.mu.Lock()
	defer lm.mu.Unlock()
	if lm.stop != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	lm.stop = cancel
	go lm.run(ctx)
}

func (lm *layoutManager) close() {
	lm.mu.Lock()
	defer lm.mu.Unlock()
	if lm.stop != nil {
		lm.stop()
		lm.stop = nil
	}
}

func (lm *layoutManager) run(ctx context.Context) {
	for ctx.Err() == nil {
		cfg := lm.p.config()
		if cfg.Layout.Enabled {
			lm.poll(ctx, cfg)
		} else if lm.reset() {
			lm.p.wakeFingerprint()
		}
		d := cfg.Layout.Poll
		if d <= 0 {
			d = 2 * time.Second
		}
		sleep(ctx, d)
	}
}

// reset forgets every GPU's progress (layouts are not followed now);
// true if there was any.
func (lm *layoutManager) reset() bool {
	lm.mu.Lock()
	defer lm.mu.Unlock()
	had := len(lm.gpus) > 0
	clear(lm.gpus)
	return had
}

// poll reads the desired layouts once and moves every GPU a step towards
// its own.
func (lm *layoutManager) poll(ctx context.Context, cfg *Config) {
	w := lm.p.metrics.watcher()
	if w == nil {
		lm.noteErr(errors.New("no client of the local Nomad agent (see the nomad block)"))
		return
	}
	rctx, cancel := context.WithTimeout(ctx, max(10*time.Second, 2*cfg.Layout.Poll))
	defer cancel()
	meta, err := w.readMeta(rctx)
	lm.noteErr(err)
	snap := lm.p.snapshot()
	if err != nil || snap == nil {
		return
	}
	held := lm.setHolds(heldGPUs(meta, time.Now(), lm.log))
	held = lm.setStrayPins(strayPins(meta, snap, cfg)) || held
	plans := lm.plans(snap, cfg, meta)
	view := w.current()
	if slices.ContainsFunc(plans, gpuPlan.wantsChange) {
		if view, err = w.fetchNow(rctx); err != nil {
			lm.log.Debug("cannot read this node's allocations; GPUs to relay out stay held", "error", err)
		}
	}
	changed, switches := lm.decideAll(plans, view, cfg.Layout.DrainGrace, time.Now())
	for _, pl := range switches {
		lm.finish(pl, lm.apply(pl, cfg))
	}
	if len(switches) > 0 {
		lm.p.refresh(true) // the next poll must see the new instances
	}
	if changed || held || len(switches) > 0 {
		lm.p.wakeFingerprint()
	}
}

// heldGPUs are the GPUs whose hold (contract.MetaHoldPrefix) runs at
// now, with their instances' health description. A value that is not an
// RFC 3339 time holds nothing (logged at debug level).
func heldGPUs(meta map[string]string, now time.Time, log hclog.Logger) map[string]string {
	out := map[string]string{}
	for k, v := range meta {
		uuid, ok := strings.CutPrefix(k, contract.MetaHoldPrefix)
		if !ok {
			continue
		}
		until, err := time.Parse(time.RFC3339, strings.TrimSpace(v))
		if err != nil {
			log.Debug("GPU hold ignored: its value is not an RFC 3339 time", "key", k, "value", v)
			continue
		}
		if now.Before(until) {
			out[uuid] = "held until " + until.UTC().Format(time.RFC3339) + ": the nomad-gpu controller moves work off it"
		}
	}
	return out
}

// strayPins are the node's pins that name no GPU the plugin manages (a
// typo, another node's GPU, an ignored GPU), each saying which GPUs it
// does manage, sorted by key. Nothing else would tell: a pin is read by
// the GPU's UUID only.
func strayPins(meta map[string]string, snap *gpu.Snapshot, cfg *Config) []string {
	ignored := ignoredRefs(cfg)
	var managed []string
	known := map[string]bool{}
	for i := range snap.GPUs {
		g := &snap.GPUs[i]
		if g.UUID == "" || slices.ContainsFunc(ignored, func(r gpuRef) bool { return !r.mig && r.matches(g.Index, g.UUID) }) {
			continue
		}
		known[g.UUID] = true
		managed = append(managed, g.UUID)
	}
	var out []string
	for _, k := range slices.Sorted(maps.Keys(meta)) {
		uuid, ok := strings.CutPrefix(k, contract.MetaPinPrefix)
		if !ok || known[uuid] {
			continue
		}
		gpus := "none"
		if len(managed) > 0 {
			gpus = strings.Join(managed, ", ")
		}
		out = append(out, fmt.Sprintf("%s=%s names no GPU of this node, so it is ignored (its GPUs: %s)", k, strings.TrimSpace(meta[k]), gpus))
	}
	return out
}

// setStrayPins takes the stray pins read now, logging each new one as a
// warning; true when they changed.
func (lm *layoutManager) setStrayPins(pins []string) bool {
	joined := strings.Join(pins, "; ")
	lm.mu.Lock()
	defer lm.mu.Unlock()
	if joined == lm.strayPins {
		return false
	}
	old := lm.strayPins
	for _, p := range pins {
		if !strings.Contains(old, p) {
			key, _, _ := strings.Cut(p, "=")
			lm.log.Warn("node metadata pins a GPU this node does not have; the pin is ignored", "key", key, "pin", p)
		}
	}
	lm.strayPins = joined
	return true
}

// setHolds takes the GPUs held now; true when they changed.
func (lm *layoutManager) setHolds(holds map[string]string) bool {
	lm.mu.Lock()
	defer lm.mu.Unlock()
	if maps.Equal(lm.holds, holds) || len(lm.holds) == 0 && len(holds) == 0 {
		return false
	}
	lm.holds = holds
	return true
}

// noteErr logs a new reason the metadata cannot be read, and its end.
func (lm *layoutManager) noteErr(err error) {
	lm.mu.Lock()
	defer lm.mu.Unlock()
	switch {
	case err == nil && lm.lastErr != "":
		lm.log.Info("reading this node's metadata again; following GPU layouts")
		lm.lastErr = ""
	case err != nil && err.Error() != lm.lastErr:
		lm.log.Warn("cannot read this node's metadata; GPU layouts are not followed until it can be read", "error", err)
		lm.lastErr = err.Error()
	}
}

// gpuPlan is one GPU's layout now and the one asked for it.
type gpuPlan struct {
	g         *gpu.GPU
	cur, want gpulayout.Layout
	text      string // the desired value as read (the want's text when it parses)
	err       error  // why want cannot be made on this GPU
	pinned    bool   // want is an operator's pin
}

func (pl gpuPlan) wantsChange() bool { return pl.err == nil && !pl.want.Equal(pl.cur) }

// plans is every GPU's plan: effective desired = pin ?? layout ?? the
// config's (the mps blocks, or the MIG geometry as enumerated).
func (lm *layoutManager) plans(snap *gpu.Snapshot, cfg *Config, meta map[string]string) []gpuPlan {
	lm.mu.Lock()
	applied := maps.Clone(lm.applied)
	lm.mu.Unlock()
	ignored := ignoredRefs(cfg)
	faults := lm.p.faults()
	var out []gpuPlan
	for i := range snap.GPUs {
		g := &snap.GPUs[i]
		if g.UUID == "" || slices.ContainsFunc(ignored, func(r gpuRef) bool { return !r.mig && r.matches(g.Index, g.UUID) }) {
			continue
		}
		pl := gpuPlan{g: g, cur: offeredLayout(cfg, g, applied), want: staticLayout(cfg, g)}
		raw, asked := meta[contract.MetaPinPrefix+g.UUID]
		pl.pinned = asked
		if !asked {
			raw, asked = meta[contract.MetaLayoutPrefix+g.UUID]
		}
		if asked {
			pl.want, pl.err = gpulayout.Parse(raw)
			if pl.err == nil {
				pl.err = fits(pl.want, g)
			}
		}
		if f := gpuFault(faults, g); f != "" && pl.err == nil && !pl.want.Equal(pl.cur) {
			pl.err = fmt.Errorf("GPU %d has failed (%s); it keeps its layout %s until it recovers", g.Index, f, pl.cur)
		}
		pl.text = pl.want.String()
		if pl.want.IsZero() {
			pl.text = strings.TrimSpace(raw)
			if pl.text == "" {
				pl.text = `""`
			}
		}
		out = append(out, pl)
	}
	return out
}

// fits says why l cannot be made on g, nil if it can. nomad-gpu never
// changes a GPU's MIG mode (that takes a GPU reset).
func fits(l gpulayout.Layout, g *gpu.GPU) error {
	if l.Kind != gpulayout.MIG {
		if g.MIGEnabled {
			return fmt.Errorf("%s: GPU %d is in MIG mode; whole and mps layouts need MIG disabled, which nomad-gpu does not change", l, g.Index)
		}
		return nil
	}
	if !g.MIGEnabled {
		return fmt.Errorf("%s: GPU %d is not in MIG mode, which nomad-gpu does not change", l, g.Index)
	}
	capacity, used, count := 0, 0, map[string]int{}
	for _, p := range g.MIGProfiles {
		capacity = max(capacity, p.Slices*p.Max)
	}
	for _, name := range l.MIG {
		i := slices.IndexFunc(g.MIGProfiles, func(p gpu.MIGProfile) bool { return p.Name == name })
		if i < 0 {
			return fmt.Errorf("%s: GPU %d (%s) makes no %s instances; it makes %s", l, g.Index, g.Name, name, profileNames(g.MIGProfiles))
		}
		p := g.MIGProfiles[i]
		if count[name]++; count[name] > p.Max {
			return fmt.Errorf("%s: GPU %d (%s) holds at most %d %s instance(s)", l, g.Index, g.Name, p.Max, name)
		}
		used += p.Slices
	}
	if used > capacity {
		return fmt.Errorf("%s: %d compute slices; GPU %d (%s) has %d", l, used, g.Index, g.Name, capacity)
	}
	return nil
}

func profileNames(ps []gpu.MIGProfile) string {
	if len(ps) == 0 {
		return "none (NVML lists no profiles)"
	}
	names := make([]string, len(ps))
	for i, p := range ps {
		names[i] = p.Name
	}
	return strings.Join(names, ", ")
}

// decideAll moves each GPU's state on; it returns whether any GPU's
// attributes changed and the GPUs to switch now.
func (lm *layoutManager) decideAll(plans []gpuPlan, view allocView, grace time.Duration, now time.Time) (changed bool, switches []gpuPlan) {
	lm.mu.Lock()
	defer lm.mu.Unlock()
	seen := map[string]bool{}
	for _, pl := range plans {
		seen[pl.g.UUID] = true
		c, sw := lm.decide(pl, view, grace, now)
		changed = changed || c
		if sw {
			switches = append(switches, pl)
		}
	}
	for uuid := range lm.gpus {
		if !seen[uuid] { // gone or ignored
			delete(lm.gpus, uuid)
			changed = true
		}
	}
	return changed, switches
}

// decide is one GPU's step (lm.mu held): whether its attributes changed and
// whether to switch it now.
func (lm *layoutManager) decide(pl gpuPlan, view allocView, grace time.Duration, now time.Time) (changed, doSwitch bool) {
	st := lm.gpus[pl.g.UUID]
	if st == nil {
		st = &gpuLayout{gpuStatus: gpuStatus{state: contract.LayoutReady}}
		lm.gpus[pl.g.UUID] = st
	}
	prev := st.gpuStatus
	if st.failedFor != pl.text {
		st.failedFor = ""
	}
	switch {
	case pl.err != nil:
		lm.to(pl, st, contract.LayoutError, pl.err.Error())
	case pl.want.Equal(pl.cur):
		reason := "the GPU offers its desired layout"
		if prev.state == contract.LayoutDraining {
			reason = "the desired layout is the current one again; drain stopped"
		}
		lm.to(pl, st, contract.LayoutReady, reason)
	case st.failedFor != "":
		// Its switch failed: stays in error until the value changes.
	case st.state == contract.LayoutDraining:
		if !st.target.Equal(pl.want) {
			lm.log.Info("GPU relayout retargeted while draining", "gpu", pl.g.Index, "uuid", pl.g.UUID, "layout", arrow(st.from, st.target)+" now → "+pl.want.String())
			st.target = pl.want
			lm.to(pl, st, contract.LayoutDraining, "desired layout changed")
		}
		doSwitch = now.Sub(st.drainSince) >= grace && view.known && view.fetched.After(st.drainSince) &&
			len(lm.holders(pl.g, view)) == 0
	default:
		if held := lm.holders(pl.g, view); !view.known || len(held) > 0 {
			reason := "this node's allocations are unknown"
			if view.known {
				reason = "allocations hold " + strings.Join(held, ", ")
			}
			lm.to(pl, st, contract.LayoutHeld, reason)
			break
		}
		st.from, st.target, st.drainSince = pl.cur, pl.want, now
		lm.to(pl, st, contract.LayoutDraining, "no allocation holds the GPU")
	}
	return st.gpuStatus != prev, doSwitch
}

// to puts a GPU in state, logging the transition once.
func (lm *layoutManager) to(pl gpuPlan, st *gpuLayout, state contract.LayoutState, reason string) {
	prev := st.gpuStatus
	st.state, st.desired, st.pinned, st.err, st.drain = state, pl.text, pl.pinned, "", ""
	switch state {
	case contract.LayoutError:
		st.err = reason
	case contract.LayoutDraining:
		st.drain = "relayout " + arrow(st.from, st.target) + " pending"
	}
	if st.gpuStatus == prev {
		return
	}
	args := []any{"gpu", pl.g.Index, "uuid", pl.g.UUID, "layout", arrow(pl.cur, pl.want), "state", string(prev.state) + " → " + string(state), "reason", reason}
	if pl.want.IsZero() {
		args[5] = pl.cur.String() + " → " + pl.text
	}
	if state == contract.LayoutError {
		lm.log.Warn("GPU layout cannot be applied", args...)
	} else {
		lm.log.Info("GPU layout", args...)
	}
}

func arrow(from, to gpulayout.Layout) string { return from.String() + " → " + to.String() }

// holders are the GPU's instances that allocations hold in view, or that a
// Reserve handed out since view was fetched (lm.mu held).
func (lm *layoutManager) holders(g *gpu.GPU, view allocView) []string {
	var out []string
	for id := range view.byDevice {
		if ofGPU(id, g) {
			out = append(out, id)
		}
	}
	for id, at := range lm.reserved {
		if !view.fetched.After(at) && ofGPU(id, g) && !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// ofGPU reports a device ID that is one of g's instances in any layout:
// the GPU itself, one of its MPS shares or MIG instances.
func ofGPU(id string, g *gpu.GPU) bool {
	if id == g.UUID {
		return true
	}
	if u, _, ok := contract.ParseShareID(id); ok {
		return u == g.UUID
	}
	return slices.ContainsFunc(g.MIG, func(mi gpu.MIGDevice) bool { return mi.UUID == id })
}

// apply switches a GPU to pl.want. MIG geometries are made through the
// inventory. Whole and MPS layouts are the plugin's own record of what it
// offers: a GPU's MPS layout changes only when its MPS daemon has no
// clients, and the plugin does not talk to the daemon (the task driver
// runs it), so the condition used is that no allocation holds a share,
// which decide checked on a view fetched after the drain began (a share's
// clients are its allocation's tasks).
func (lm *layoutManager) apply(pl gpuPlan, cfg *Config) error {
	if pl.want.Kind == gpulayout.MIG {
		inv, err := lm.p.inventory()
		if err != nil {
			return err
		}
		s, ok := inv.(migGeometrySetter)
		if !ok {
			return errors.New("this inventory cannot change MIG geometries")
		}
		return s.SetMIGGeometry(pl.g.UUID, pl.want.MIG)
	}
	lm.mu.Lock()
	next := maps.Clone(lm.applied)
	lm.mu.Unlock()
	if pl.want.Equal(staticLayout(cfg, pl.g)) {
		delete(next, pl.g.UUID)
	} else {
		next[pl.g.UUID] = pl.want
	}
	if err := saveLayoutState(cfg.Layout.StateFile, next); err != nil {
		return fmt.Errorf("layout.state_file: %w", err)
	}
	lm.mu.Lock()
	lm.applied = next
	lm.mu.Unlock()
	return nil
}

// finish records a switch's outcome: ready, or error with the reason (the
// instances healthy again, the layout unchanged).
func (lm *layoutManager) finish(pl gpuPlan, err error) {
	lm.mu.Lock()
	defer lm.mu.Unlock()
	st := lm.gpus[pl.g.UUID]
	if st == nil {
		return
	}
	if err != nil {
		st.failedFor = pl.text
		lm.to(pl, st, contract.LayoutError, fmt.Sprintf("switching %s failed: %v", arrow(pl.cur, pl.want), err))
		return
	}
	lm.to(pl, st, contract.LayoutReady, "switched")
}

// admit refuses the devices of a draining GPU to Reserve, naming the
// device and the relayout; otherwise, when track, it notes them as held
// from now and returns the time noted (for unadmit).
func (lm *layoutManager) admit(ids []string, m *model, track bool) (time.Time, error) {
	lm.mu.Lock()
	defer lm.mu.Unlock()
	for _, id := range ids {
		s, ok := m.byID[id]
		if !ok {
			continue // reserve says it is gone
		}
		if st := lm.gpus[s.gpuUUID]; st != nil && st.state == contract.LayoutDraining {
			return time.Time{}, fmt.Errorf("device %s: GPU %s %s %s; Nomad will place the allocation again", id, s.gpuUUID, contract.ReserveRefusedRelayout, arrow(st.from, st.target))
		}
	}
	now := time.Now()
	if track {
		for _, id := range ids {
			lm.reserved[id] = now
		}
	}
	return now, nil
}

// unadmit forgets what admit noted at t, for a Reserve that failed after.
func (lm *layoutManager) unadmit(ids []string, t time.Time) {
	lm.mu.Lock()
	defer lm.mu.Unlock()
	for _, id := range ids {
		if lm.reserved[id].Equal(t) {
			delete(lm.reserved, id)
		}
	}
}

// inputs is what the next model takes from the manager, with view the
// allocations last seen. Without layout.enabled every GPU keeps its
// configured layout and nothing is asked.
func (lm *layoutManager) inputs(cfg *Config, view allocView) *layoutInputs {
	lm.mu.Lock()
	defer lm.mu.Unlock()
	if view.known {
		for id, at := range lm.reserved {
			if view.fetched.After(at) {
				delete(lm.reserved, id)
			}
		}
	}
	in := &layoutInputs{status: map[string]gpuStatus{}, sharesInUse: map[string]int{}, publish: cfg.Layout.Enabled}
	if cfg.Layout.Enabled {
		in.applied = maps.Clone(lm.applied)
		in.holds = maps.Clone(lm.holds)
		in.strayPins = lm.strayPins
		for uuid, st := range lm.gpus {
			in.status[uuid] = st.gpuStatus
		}
	}
	held := map[string]bool{}
	for id := range view.byDevice {
		held[id] = true
	}
	for id := range lm.reserved {
		held[id] = true
	}
	for id := range held {
		if u, _, ok := contract.ParseShareID(id); ok {
			in.sharesInUse[u]++
		}
	}
	return in
}
