package apm

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/controller/sizing"
	"github.com/nomad-gpu/nomad-gpu/nomadview"
)

// The cluster figures: pure functions of a Snapshot, which the exporter
// (exporter.go) turns into Prometheus metrics at scrape time. The package
// documentation defines each one; the names below refer to it.

// Tiers are the lower bounds of the job priority tiers, highest first:
// tier "P0" holds priorities >= Tiers[0], "P1" those >= Tiers[1] and below
// Tiers[0], and so on; the last tier, "P<len(Tiers)>", holds the rest. A
// priority of 0 (unknown) is tier "unknown".
type Tiers []int

// DefaultTiers: P0 >= 70, P1 >= 40, P2 below 40 (Nomad's default job
// priority, 50, is P1).
var DefaultTiers = Tiers{70, 40}

// TierUnknown is the tier of work whose job priority is not known.
const TierUnknown = "unknown"

// Tier returns the tier name of a job priority.
func (t Tiers) Tier(priority int) string {
	if priority <= 0 {
		return TierUnknown
	}
	for i, b := range t {
		if priority >= b {
			return tierName(i)
		}
	}
	return tierName(len(t))
}

// Names are the tier names, highest first, then TierUnknown.
func (t Tiers) Names() []string {
	out := make([]string, 0, len(t)+2)
	for i := 0; i <= len(t); i++ {
		out = append(out, tierName(i))
	}
	return append(out, TierUnknown)
}

func tierName(i int) string { return "P" + strconv.Itoa(i) }

func (t Tiers) String() string {
	parts := make([]string, len(t))
	for i, b := range t {
		parts[i] = strconv.Itoa(b)
	}
	return strings.Join(parts, ",")
}

// ParseTiers parses priority_tiers: comma-separated lower bounds, strictly
// decreasing positive integers ("70,40"). An empty string is one tier.
func ParseTiers(s string) (Tiers, error) {
	if strings.TrimSpace(s) == "" {
		return Tiers{}, nil
	}
	var t Tiers
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		b, err := strconv.Atoi(part)
		if err != nil || b < 1 {
			return nil, fmt.Errorf("%q is not a positive integer", part)
		}
		if len(t) > 0 && b >= t[len(t)-1] {
			return nil, fmt.Errorf("bounds must decrease: %d after %d", b, t[len(t)-1])
		}
		t = append(t, b)
	}
	return t, nil
}

// DeviceLabel is the device label of a device group or request:
// vendor/type/name as the jobspec would name it, except that an MPS
// group's name (its GPU's UUID: one group per GPU) is left out, so MPS
// shares are "nvidia/mps" whichever GPU they are on.
func DeviceLabel(d DeviceSpec) string {
	if d.Type == contract.SliceMPS {
		d.Name = ""
	}
	return d.String()
}

// FigureOptions are the settings the figures depend on.
type FigureOptions struct {
	// Tiers bucket job priorities (nil: DefaultTiers).
	Tiers Tiers
	// Window is how far back the task figures look (0: DefaultFinishedWindow).
	Window time.Duration
}

func (o FigureOptions) withDefaults() FigureOptions {
	if o.Tiers == nil {
		o.Tiers = DefaultTiers
	}
	if o.Window <= 0 {
		o.Window = DefaultFinishedWindow
	}
	return o
}

// Figures are the cluster figures of one snapshot.
type Figures struct {
	Capacity map[CapacityKey]*CapacityFigure
	// GPUs are the GPU-equivalent figures: capacity, allocation and
	// fragmentation (GPUFigures).
	GPUs  map[PoolKey]*GPUFigure
	Queue map[QueueKey]*QueueFigure
	Tasks map[TaskKey]*TaskFigure
	// Forecast is the runtime and wait prediction (ForecastOf).
	Forecast sizing.Forecasts
}

// ComputeFigures computes every cluster figure of s. It does not modify s.
func ComputeFigures(s *Snapshot, o FigureOptions) *Figures {
	o = o.withDefaults()
	return &Figures{
		Capacity: CapacityFigures(s),
		GPUs:     GPUFigures(s),
		Queue:    QueueFigures(s, o.Tiers),
		Tasks:    TaskFigures(s, o),
		Forecast: ForecastOf(s),
	}
}

// CapacityKey labels the device figures: a node's pool and datacenter and
// the DeviceLabel of one of its device groups.
type CapacityKey struct{ Pool, Datacenter, Device string }

// CapacityFigure is the device capacity of one CapacityKey. Device counts
// are healthy instances of schedulable nodes; utilisation is read on
// ready nodes.
type CapacityFigure struct {
	// Devices are the healthy instances, Allocated those held by a
	// pending or running allocation, Free the others.
	Devices, Allocated, Free int
	// FreeMemoryBytes is the memory of the free instances.
	FreeMemoryBytes int64
	// StrandedDevices are free instances no queued request can use;
	// StrandedSlices free slices on partly used GPUs; Stranded free
	// instances that are either (each once), and StrandedMemoryBytes
	// their memory.
	StrandedDevices, StrandedSlices, Stranded int
	StrandedMemoryBytes                       int64
	// UtilSum and UtilCount sum the utilisation (percent) of the
	// instances that report it; LoadSum and LoadCount those of them
	// held by an allocation.
	UtilSum   float64
	UtilCount int
	LoadSum   float64
	LoadCount int
}

// AllocatedRatio is Allocated / Devices, 0 without devices.
func (c *CapacityFigure) AllocatedRatio() float64 { return ratio(c.Allocated, c.Devices) }

// UtilizationRatio is the mean utilisation (0–1) of the reporting
// instances; ok is false when none report.
func (c *CapacityFigure) UtilizationRatio() (v float64, ok bool) {
	if c.UtilCount == 0 {
		return 0, false
	}
	return c.UtilSum / float64(c.UtilCount) / 100, true
}

// LoadRatio is the mean utilisation (0–1) of the reporting instances held
// by an allocation; ok is false when none report.
func (c *CapacityFigure) LoadRatio() (v float64, ok bool) {
	if c.LoadCount == 0 {
		return 0, false
	}
	return c.LoadSum / float64(c.LoadCount) / 100, true
}

func ratio(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// gpuKey is the physical GPU an instance is or is part of.
func gpuKey(in *DeviceInstance) string {
	if k := in.GPU.Key(); k != "" {
		return k
	}
	return in.ID
}

// CapacityFigures computes the device figures of every ready node's device
// groups, by CapacityKey:
//
//   - Devices, Allocated, Free: healthy instances of schedulable nodes,
//     held (by a pending or running allocation) or not.
//   - StrandedDevices: on a schedulable node n, the free instances of a
//     group g when some queued request could go to n (the node demand
//     D(n): the device asks of capacity-blocked blocked evaluations whose
//     job's pool — or "all" —, datacenters and class constraints accept n)
//     and none of D(n) fits g: no ask compatible with g asks for at most
//     free(g) instances (Nomad fills one request from one group).
//   - StrandedSlices: free instances on a physical GPU that has more than
//     one instance (MIG instances, MPS shares) of which at least one is
//     held.
//   - Stranded, StrandedMemoryBytes: the free instances that are either,
//     counted once, and their memory.
//   - UtilSum/UtilCount: the Util of every instance of a ready node;
//     LoadSum/LoadCount: of those held.
func CapacityFigures(s *Snapshot) map[CapacityKey]*CapacityFigure {
	out := map[CapacityKey]*CapacityFigure{}
	demand := demandIndex{s: s, memo: map[placement][]DeviceAsk{}}
	labels := map[DeviceSpec]string{}
	held := map[string]bool{}
	perGPU := map[string][2]int{} // instances, held
	util := map[string]float64{}
	for i := range s.Nodes {
		n := &s.Nodes[i]
		if n.Status != "ready" || len(n.Devices) == 0 {
			continue
		}
		clear(perGPU)
		clear(util)
		n.markHeld(held)
		for _, u := range s.Util[n.ID] {
			util[u.ID] = u.Pct
		}
		for gi := range n.Devices {
			for ii := range n.Devices[gi].Instances {
				in := &n.Devices[gi].Instances[ii]
				k := gpuKey(in)
				c := perGPU[k]
				c[0]++
				if held[in.ID] {
					c[1]++
				}
				perGPU[k] = c
			}
		}
		sched := n.Schedulable()
		var asks []DeviceAsk
		if sched {
			asks = demand.of(n)
		}
		for gi := range n.Devices {
			g := &n.Devices[gi]
			if g.Type == contract.SliceLayout {
				continue // no capacity, and a series per GPU
			}
			label, ok := labels[g.DeviceSpec]
			if !ok {
				label = DeviceLabel(g.DeviceSpec)
				labels[g.DeviceSpec] = label
			}
			key := CapacityKey{n.Pool, n.Datacenter, label}
			f := out[key]
			if f == nil {
				f = &CapacityFigure{}
				out[key] = f
			}
			free := 0
			for ii := range g.Instances {
				in := &g.Instances[ii]
				h := held[in.ID]
				if pct, ok := util[in.ID]; ok {
					f.UtilSum += pct
					f.UtilCount++
					if h {
						f.LoadSum += pct
						f.LoadCount++
					}
				}
				if sched && in.Healthy {
					f.Devices++
					if freeRule.Free(in.Healthy, h) {
						free++
					} else {
						f.Allocated++
					}
				}
			}
			if free == 0 {
				continue
			}
			f.Free += free
			f.FreeMemoryBytes += int64(free) * g.MemoryBytes
			unfit := len(asks) > 0 && !fits(asks, g.DeviceSpec, free)
			for ii := range g.Instances {
				in := &g.Instances[ii]
				if !freeRule.Free(in.Healthy, held[in.ID]) {
					continue
				}
				c := perGPU[gpuKey(in)]
				partial := c[0] > 1 && c[1] > 0
				if unfit {
					f.StrandedDevices++
				}
				if partial {
					f.StrandedSlices++
				}
				if unfit || partial {
					f.Stranded++
					f.StrandedMemoryBytes += g.MemoryBytes
				}
			}
		}
	}
	return out
}

// placement is what decides which queued work a node accepts.
type placement struct{ pool, dc, class string }

// demandIndex memoises the node demand D(n) by placement.
type demandIndex struct {
	s    *Snapshot
	memo map[placement][]DeviceAsk
}

// of returns D(n): per device asked for, the smallest count asked, over
// the capacity-blocked blocked work that n's placement accepts.
func (d *demandIndex) of(n *Node) []DeviceAsk {
	k := placement{n.Pool, n.Datacenter, n.Class}
	if a, ok := d.memo[k]; ok {
		return a
	}
	var out []DeviceAsk
	for i := range d.s.Work {
		w := &d.s.Work[i]
		if w.Source != FromBlockedEval || !w.CapacityBlocked || w.Allocs <= 0 || !w.accepts(n) {
			continue
		}
	asks:
		for _, a := range w.Asks {
			if a.Count <= 0 {
				continue
			}
			for j := range out {
				if out[j].Device == a.Device {
					out[j].Count = min(out[j].Count, a.Count)
					continue asks
				}
			}
			out = append(out, a)
		}
	}
	d.memo[k] = out
	return out
}

// fits reports whether one of asks could be filled from a group g with
// free instances.
func fits(asks []DeviceAsk, g DeviceSpec, free int) bool {
	for _, a := range asks {
		if a.Count <= free && g.Compatible(a.Device) {
			return true
		}
	}
	return false
}

// accepts reports whether the work's job could be placed on n: its pool is
// n's (or "all"), one of its datacenter patterns matches n's datacenter
// (no patterns: any), and every class rule holds for n's class.
func (w *Work) accepts(n *Node) bool {
	if w.Pool != n.Pool && w.Pool != "all" {
		return false
	}
	if len(w.Datacenters) > 0 {
		ok := false
		for _, p := range w.Datacenters {
			if nomadview.DatacenterMatch(p, n.Datacenter) {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	for _, r := range w.ClassRules {
		if !r.Satisfied(n.Class) {
			return false
		}
	}
	return true
}

// Queue states as the queue figures label them.
const (
	QueueBlocked = "blocked"
	QueuePending = "pending"
)

// QueueKey labels the queue figures: the work's pool (the job's node pool;
// for a pending allocation its node's), the DeviceLabel of what it asks
// for (a blocked group's request name; a pending allocation's device
// group), its job's priority tier and QueueBlocked or QueuePending.
type QueueKey struct{ Pool, Device, Priority, State string }

// QueueFigure is the queued work of one QueueKey. An allocation asking for
// two kinds of device counts under both.
type QueueFigure struct {
	// Allocs are the queued allocations; Devices the devices they ask
	// for (per-allocation ask × allocations).
	Allocs, Devices int
	// WaitMaxSeconds is the longest wait; WaitSumSeconds the sum over
	// allocations of their wait.
	WaitMaxSeconds, WaitSumSeconds float64
	// NeverFitAllocs are the queued allocations that no node of their
	// pool could ever take (Work.NeverFits): they wait for ever unless
	// the job changes or bigger nodes join.
	NeverFitAllocs int
}

// WaitMeanSeconds is the per-allocation mean wait, 0 with nothing queued.
func (q *QueueFigure) WaitMeanSeconds() float64 {
	if q.Allocs == 0 {
		return 0
	}
	return q.WaitSumSeconds / float64(q.Allocs)
}

// QueueFigures computes the queue figures, by QueueKey: the gpus_queued,
// allocs_queued, wait_max_seconds and wait_mean_seconds of the queries,
// broken down by pool, requested device, priority tier and state. Waits
// are measured as the queries measure them.
func QueueFigures(s *Snapshot, tiers Tiers) map[QueueKey]*QueueFigure {
	out := map[QueueKey]*QueueFigure{}
	type perLabel struct {
		label string
		n     int
	}
	var devs []perLabel
	for i := range s.Work {
		w := &s.Work[i]
		if w.Allocs <= 0 {
			continue
		}
		devs = devs[:0]
	asks:
		for _, a := range w.Asks {
			if a.Count <= 0 {
				continue
			}
			l := DeviceLabel(a.Device)
			for j := range devs {
				if devs[j].label == l {
					devs[j].n += a.Count
					continue asks
				}
			}
			devs = append(devs, perLabel{l, a.Count})
		}
		if len(devs) == 0 {
			continue
		}
		state := QueueBlocked
		if w.Source == FromPendingAlloc {
			state = QueuePending
		}
		wait := s.Now.Sub(w.Since).Seconds()
		if wait < 0 || w.Since.IsZero() {
			wait = 0
		}
		tier := tiers.Tier(w.Priority)
		for _, d := range devs {
			k := QueueKey{w.Pool, d.label, tier, state}
			f := out[k]
			if f == nil {
				f = &QueueFigure{}
				out[k] = f
			}
			f.Allocs += w.Allocs
			if w.NeverFits != "" {
				f.NeverFitAllocs += w.Allocs
			}
			f.Devices += d.n * w.Allocs
			f.WaitMaxSeconds = max(f.WaitMaxSeconds, wait)
			f.WaitSumSeconds += wait * float64(w.Allocs)
		}
	}
	return out
}

// TaskKey labels the task figures: the allocation's node's pool and its
// job's priority tier.
type TaskKey struct{ Pool, Priority string }

// Outcomes of a finished allocation (its client status).
const (
	OutcomeComplete = "complete"
	OutcomeFailed   = "failed"
	OutcomeLost     = "lost"
)

// TaskFigure is what the GPU allocations of one TaskKey did within the
// window.
type TaskFigure struct {
	// WaitSeconds are, sorted, the waits (first task start − create time)
	// of the allocations whose first task started within the window.
	WaitSeconds []float64
	// RunSeconds are, sorted, the run times (finish − first task start)
	// of the allocations that finished within the window after starting.
	RunSeconds []float64
	// Complete, Failed and Lost count the allocations that finished
	// within the window, by client status.
	Complete, Failed, Lost int
}

// Finished is how many allocations finished within the window.
func (t *TaskFigure) Finished() int { return t.Complete + t.Failed + t.Lost }

// FailureRatio is (Failed + Lost) / Finished, 0 with none finished.
func (t *TaskFigure) FailureRatio() float64 { return ratio(t.Failed+t.Lost, t.Finished()) }

// TaskFigures computes the task figures over the allocations of s.Runs:
// an allocation counts for wait when its first task started in
// [Now − Window, Now], and for run time and outcome when it finished then.
func TaskFigures(s *Snapshot, o FigureOptions) map[TaskKey]*TaskFigure {
	o = o.withDefaults()
	cut := s.Now.Add(-o.Window)
	out := map[TaskKey]*TaskFigure{}
	for i := range s.Runs {
		r := &s.Runs[i]
		started := !r.Started.IsZero() && !r.Started.Before(cut) && !r.Created.IsZero()
		finished := r.Terminal() && !r.Finished.IsZero() && !r.Finished.Before(cut)
		if !started && !finished {
			continue
		}
		k := TaskKey{r.Pool, o.Tiers.Tier(r.Priority)}
		f := out[k]
		if f == nil {
			f = &TaskFigure{}
			out[k] = f
		}
		if started {
			f.WaitSeconds = append(f.WaitSeconds, max(0, r.Started.Sub(r.Created).Seconds()))
		}
		if !finished {
			continue
		}
		switch r.Status {
		case OutcomeComplete:
			f.Complete++
		case OutcomeFailed:
			f.Failed++
		case OutcomeLost:
			f.Lost++
		}
		if !r.Started.IsZero() {
			f.RunSeconds = append(f.RunSeconds, max(0, r.Finished.Sub(r.Started).Seconds()))
		}
	}
	for _, f := range out {
		sort.Float64s(f.WaitSeconds)
		sort.Float64s(f.RunSeconds)
	}
	return out
}

// Distribution summarises a set of durations.
type Distribution struct {
	N                        int
	P50, P90, P99, Max, Mean float64
}

// Summarize summarises sorted values: nearest-rank quantiles (the value at
// rank ⌈q·N⌉), the maximum and the mean; all 0 when empty.
func Summarize(sorted []float64) Distribution {
	n := len(sorted)
	if n == 0 {
		return Distribution{}
	}
	q := func(p float64) float64 {
		i := int(math.Ceil(p*float64(n)-1e-9)) - 1
		return sorted[min(max(i, 0), n-1)]
	}
	var sum float64
	for _, v := range sorted {
		sum += v
	}
	return Distribution{N: n, P50: q(0.5), P90: q(0.9), P99: q(0.99), Max: sorted[n-1], Mean: sum / float64(n)}
}
