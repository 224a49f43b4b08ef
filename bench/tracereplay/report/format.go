package report

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/nomad-gpu/nomad-gpu/bench/tracereplay/figures"
)

// kind is what a figure measures: how it is printed, and how far the
// model's figure may be from the real one (calibrationError). Every row
// names its kind where it is defined.
type kind int

const (
	// percent is a share, 0–1, printed in %.
	percent kind = iota
	// ratio is a multiple, printed as 1.25×; its error is in points, as
	// a share's (0.1× is 10 points).
	ratio
	// count is a number of things (jobs, preemptions, layout changes).
	count
	// duration is seconds of trace time.
	duration
	// wall is seconds of wall-clock time, below a second printed in ms:
	// a duration.
	wall
	// amount is GPU-hours, node-hours (and other hours of resource, such
	// as the jobs' re-wait hours) or a cost.
	amount
)

// Floors of the relative calibration error: a real figure below its
// kind's floor is compared as if it were the floor, so that a real 0
// counts (by how far the model is from it) and a real figure of a few
// events or seconds does not make one event or second of difference look
// like a large error.
const (
	countFloor    = 10
	durationFloor = 60 // seconds
	amountFloor   = 1  // GPU-hours, node-hours, price units
)

// row is one figure of the tables.
type row struct {
	name string
	kind kind
	get  func(Figures) float64
	// of, when set, is what the figure is out of ("290 / 300").
	of func(Figures) int
	// check marks a figure shown but left out of the model's calibration
	// error: a cross-check (telemetry, a machine latency), or the fluid
	// reference's (the same pool in both engines, and its packing loss a
	// ratio of the wait mean, compared already).
	check bool
	// known, when set, says whether the result recorded the figure at
	// all: one it did not is printed as unknown (default "not
	// recorded") and never compared.
	known   func(Figures) bool
	unknown string
}

// recorded says whether f has the figure (see row.known).
func (rw row) recorded(f Figures) bool { return rw.known == nil || rw.known(f) }

// Figures are package figures' (one definition for both engines).
type Figures = figures.Figures

func durationRow(name string, get func(Figures) time.Duration) row {
	return row{name: name, kind: duration, get: func(f Figures) float64 { return get(f).Seconds() }}
}

func countRow(name string, get func(Figures) int) row {
	return row{name: name, kind: count, get: func(f Figures) float64 { return float64(get(f)) }}
}

func percentRow(name string, get func(Figures) float64) row {
	return row{name: name, kind: percent, get: get}
}

var rows = []row{
	percentRow("GPU allocated", func(f Figures) float64 { return f.AllocUtil }),
	percentRow("GPU useful allocation", func(f Figures) float64 { return f.UsefulUtil }),
	percentRow("GPU busy", func(f Figures) float64 { return f.BusyUtil }),
	{name: "telemetry: allocated", kind: percent, get: func(f Figures) float64 { return f.TelemetryAlloc }, check: true},
	{name: "telemetry: busy (of held)", kind: percent, get: func(f Figures) float64 { return f.TelemetryBusy }, check: true},
	percentRow("fragmentation (FGD) of capacity", func(f Figures) float64 { return f.FragCapacity }),
	percentRow("fragmentation (FGD) of free", func(f Figures) float64 { return f.FragFree }),
	percentRow("fragmentation (FGD) of capacity, layouts as they stood", func(f Figures) float64 { return f.FragAsLaid }),
	durationRow("wait mean", func(f Figures) time.Duration { return f.Wait.Mean }),
	durationRow("wait p50", func(f Figures) time.Duration { return f.Wait.P50 }),
	durationRow("wait p95", func(f Figures) time.Duration { return f.Wait.P95 }),
	durationRow("wait max", func(f Figures) time.Duration { return f.Wait.Max }),
	durationRow("first wait mean", func(f Figures) time.Duration { return f.FirstWait.Mean }),
	durationRow("wait mean, jobs asking 4+ GPUs (gangs too)", func(f Figures) time.Duration { return f.WaitBig.Mean }),
	{name: "re-wait hours", kind: amount, get: func(f Figures) float64 { return f.ReWaitHours }},
	countRow("unstarted", func(f Figures) int { return f.Unstarted }),
	{name: "JCT mean (common jobs)", kind: duration, get: func(f Figures) float64 { return f.JCT.Mean.Seconds() }},
	durationRow("JCT p50 (common jobs)", func(f Figures) time.Duration { return f.JCT.P50 }),
	durationRow("JCT p95 (common jobs)", func(f Figures) time.Duration { return f.JCT.P95 }),
	{name: "done / jobs", kind: count, get: func(f Figures) float64 { return float64(f.Done) }, of: func(f Figures) int { return f.Jobs }},
	countRow("preemptions", func(f Figures) int { return f.Preemptions }),
	{name: "preempting placements", kind: count, get: func(f Figures) float64 { return float64(f.PreemptingPlacements) },
		known: func(f Figures) bool { return f.PreemptingPlacementsKnown }},
	countRow("moves", func(f Figures) int { return f.Moves }),
	{name: "moving GPU-hours", kind: amount, get: func(f Figures) float64 { return f.MoveGPUHours }},
	{name: "lost GPU-hours", kind: amount, get: func(f Figures) float64 { return f.LostGPUHours }},
	{name: "partial-placement GPU-hours (gangs)", kind: amount, get: func(f Figures) float64 { return f.PartialGPUHours }},
	countRow("reservations", func(f Figures) int { return f.Reservations }),
	{name: "reservation idle GPU-hours", kind: amount, get: func(f Figures) float64 { return f.ReservationIdleGPUHours }},
	{name: "commit-to-exit GPU-hours", kind: amount, get: func(f Figures) float64 { return f.StopGapGPUHours }, check: true},
	{name: "commit-to-exit p50 (wall clock)", kind: wall, get: func(f Figures) float64 { return f.StopGapP50.Seconds() }, check: true},
	{name: "layout changes to MPS", kind: count, get: func(f Figures) float64 { return float64(f.LayoutToMPS) },
		known: func(f Figures) bool { return f.LayoutsKnown }},
	{name: "layout changes to whole", kind: count, get: func(f Figures) float64 { return float64(f.LayoutToWhole) },
		known: func(f Figures) bool { return f.LayoutsKnown }},
	{name: "node-hours", kind: amount, get: func(f Figures) float64 { return f.NodeHours }},
	countRow("peak nodes", func(f Figures) int { return f.PeakNodes }),
	{name: "cost", kind: amount, get: func(f Figures) float64 { return f.Cost }},
	{name: "cost per useful GPU-hour", kind: amount, get: func(f Figures) float64 { return f.CostPerUsefulGPUHour }},
	{name: "wait mean, fluid pool", kind: duration, get: func(f Figures) float64 { return f.FluidWait.Mean.Seconds() }, check: true,
		known: func(f Figures) bool { return f.FluidWait.N > 0 }, unknown: "not run"},
	{name: "packing loss (wait mean ÷ fluid pool's)", kind: ratio, get: func(f Figures) float64 { return f.PackingLoss }, check: true,
		known: func(f Figures) bool { return f.PackingLossKnown }, unknown: "–"},
}

// spotRows are the figures of spot capacity (Features.Spot), each group
// after the row it names: the report shows them where a configuration of
// the table has spot nodes, and the calibration never compares them (the
// real engine runs no spot configuration yet).
var spotRows = []struct {
	after string
	rows  []row
}{
	{"lost GPU-hours", []row{
		countRow("spot reclaims (runs stopped)", func(f Figures) int { return f.SpotReclaims }),
		{name: "spot reclaim GPU-hours (re-waits)", kind: amount, get: func(f Figures) float64 { return f.SpotReclaimGPUHours }},
		{name: "lost GPU-hours to spot reclaims", kind: amount, get: func(f Figures) float64 { return f.SpotLostGPUHours }},
	}},
	{"node-hours", []row{
		{name: "node-hours reserved (the minimum, paid for the horizon)", kind: amount, get: func(f Figures) float64 { return f.ReservedNodeHours }},
		{name: "node-hours on demand", kind: amount, get: func(f Figures) float64 { return f.OnDemandNodeHours }},
		{name: "node-hours spot", kind: amount, get: func(f Figures) float64 { return f.SpotNodeHours }},
	}},
}

// tableRows are the rows of a table, with spotRows where spot is true.
func tableRows(spot bool) []row {
	if !spot {
		return rows
	}
	var out []row
	for _, rw := range rows {
		out = append(out, rw)
		for _, g := range spotRows {
			if g.after == rw.name {
				out = append(out, g.rows...)
			}
		}
	}
	return out
}

// cell prints a figure.
func (rw row) cell(f Figures) string {
	if !rw.recorded(f) {
		if rw.unknown != "" {
			return rw.unknown
		}
		return "not recorded"
	}
	s := value(rw.kind, rw.get(f))
	if rw.of != nil {
		s += fmt.Sprintf(" / %d", rw.of(f))
	}
	return s
}

// calibrated prints model figure m with its error against real figure r.
func (rw row) calibrated(m, r Figures) string {
	if !rw.recorded(m) || !rw.recorded(r) {
		return rw.cell(m) + " (real: " + rw.cell(r) + ")"
	}
	return rw.cell(m) + " (±" + errorText(rw.kind, calibrationError(rw.kind, rw.get(m), rw.get(r))) + ")"
}

func value(k kind, v float64) string {
	switch k {
	case percent:
		return fmt.Sprintf("%.1f %%", 100*v)
	case ratio:
		return fmt.Sprintf("%.2f×", v)
	case duration:
		return Human(seconds(v))
	case wall:
		if v < 1 {
			return fmt.Sprintf("%.0f ms", 1000*v)
		}
		return Human(seconds(v))
	case count:
		return fmt.Sprintf("%.0f", v)
	}
	if v < 10 {
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.1f", v)
}

// calibrationError is how far model figure m is from real figure r, as
// a fraction (0.05 is 5 %): shares by their difference, in points,
// since a relative error of shares blows up near 0 %; counts, durations
// and amounts by their difference relative to the real figure, or to
// their kind's floor where the real figure is below it. Figures whose
// real value is 0 are compared too.
func calibrationError(k kind, m, r float64) float64 {
	d := math.Abs(m - r)
	switch k {
	case percent, ratio:
		return d
	case count:
		return d / max(math.Abs(r), countFloor)
	case duration, wall:
		return d / max(math.Abs(r), durationFloor)
	case amount:
		return d / max(math.Abs(r), amountFloor)
	}
	panic(fmt.Sprintf("report: figure kind %d has no calibration rule", k))
}

// errorText prints calibration error e of a figure of kind k: in points
// for shares and ratios, in % for the rest.
func errorText(k kind, e float64) string {
	if k == percent || k == ratio {
		return fmt.Sprintf("%.1f pp", 100*e)
	}
	return percentText(e)
}

func percentText(e float64) string {
	if e < 0.1 {
		return fmt.Sprintf("%.1f %%", 100*e)
	}
	return fmt.Sprintf("%.0f %%", 100*e)
}

// Human prints d for a reader: "1h 02m", "14m 05s", "45s", "2.5s".
// Below an hour the seconds matter; above it they are noise.
func Human(d time.Duration) string {
	if d < 0 {
		return "-" + Human(-d)
	}
	if d < 10*time.Second && d%time.Second != 0 {
		return strings.TrimSuffix(fmt.Sprintf("%.1f", d.Seconds()), ".0") + "s"
	}
	if s := d.Round(time.Second); s < time.Minute {
		return fmt.Sprintf("%ds", s/time.Second)
	} else if s < time.Hour {
		return fmt.Sprintf("%dm %02ds", s/time.Minute, s%time.Minute/time.Second)
	}
	d = d.Round(time.Minute)
	return fmt.Sprintf("%dh %02dm", d/time.Hour, d%time.Hour/time.Minute)
}

func seconds(s float64) time.Duration { return time.Duration(math.Round(s * float64(time.Second))) }
