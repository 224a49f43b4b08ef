package report

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/nomad-gpu/nomad-gpu/tracereplay/figures"
)

// kind is how a figure is printed and how its calibration error is told.
type kind int

const (
	ratio    kind = iota // a fraction, printed in %; errors in percentage points
	duration             // seconds of trace time
	wall                 // seconds of wall-clock time, below a second in ms
	count
	hours
)

// row is one figure of the tables.
type row struct {
	name string
	kind kind
	get  func(Figures) float64
	// of, when set, is what the figure is out of ("290 / 300").
	of func(Figures) int
	// check marks a cross-check (telemetry, a machine latency): shown,
	// left out of the model's calibration error.
	check bool
	// known, when set, says whether the result recorded the figure at
	// all: one it did not is printed as such and never compared.
	known func(Figures) bool
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

func ratioRow(name string, get func(Figures) float64) row {
	return row{name: name, kind: ratio, get: get}
}

var rows = []row{
	ratioRow("GPU allocated", func(f Figures) float64 { return f.AllocUtil }),
	ratioRow("GPU useful allocation", func(f Figures) float64 { return f.UsefulUtil }),
	ratioRow("GPU busy", func(f Figures) float64 { return f.BusyUtil }),
	{name: "telemetry: allocated", kind: ratio, get: func(f Figures) float64 { return f.TelemetryAlloc }, check: true},
	{name: "telemetry: busy (of held)", kind: ratio, get: func(f Figures) float64 { return f.TelemetryBusy }, check: true},
	ratioRow("fragmentation (FGD) of capacity", func(f Figures) float64 { return f.FragCapacity }),
	ratioRow("fragmentation (FGD) of free", func(f Figures) float64 { return f.FragFree }),
	ratioRow("fragmentation (FGD) of capacity, layouts as they stood", func(f Figures) float64 { return f.FragAsLaid }),
	durationRow("wait mean", func(f Figures) time.Duration { return f.Wait.Mean }),
	durationRow("wait p50", func(f Figures) time.Duration { return f.Wait.P50 }),
	durationRow("wait p95", func(f Figures) time.Duration { return f.Wait.P95 }),
	durationRow("wait max", func(f Figures) time.Duration { return f.Wait.Max }),
	durationRow("first wait mean", func(f Figures) time.Duration { return f.FirstWait.Mean }),
	{name: "re-wait hours", kind: hours, get: func(f Figures) float64 { return f.ReWaitHours }},
	countRow("unstarted", func(f Figures) int { return f.Unstarted }),
	{name: "JCT mean (common jobs)", kind: duration, get: func(f Figures) float64 { return f.JCT.Mean.Seconds() }},
	durationRow("JCT p50 (common jobs)", func(f Figures) time.Duration { return f.JCT.P50 }),
	durationRow("JCT p95 (common jobs)", func(f Figures) time.Duration { return f.JCT.P95 }),
	{name: "done / jobs", kind: count, get: func(f Figures) float64 { return float64(f.Done) }, of: func(f Figures) int { return f.Jobs }},
	countRow("preemptions", func(f Figures) int { return f.Preemptions }),
	{name: "preempting placements", kind: count, get: func(f Figures) float64 { return float64(f.PreemptingPlacements) },
		known: func(f Figures) bool { return f.PreemptingPlacementsKnown }},
	countRow("moves", func(f Figures) int { return f.Moves }),
	{name: "moving GPU-hours", kind: hours, get: func(f Figures) float64 { return f.MoveGPUHours }},
	{name: "lost GPU-hours", kind: hours, get: func(f Figures) float64 { return f.LostGPUHours }},
	{name: "commit-to-exit GPU-hours", kind: hours, get: func(f Figures) float64 { return f.StopGapGPUHours }, check: true},
	{name: "commit-to-exit p50 (wall clock)", kind: wall, get: func(f Figures) float64 { return f.StopGapP50.Seconds() }, check: true},
	{name: "layout changes to MPS", kind: count, get: func(f Figures) float64 { return float64(f.LayoutToMPS) },
		known: func(f Figures) bool { return f.LayoutsKnown }},
	{name: "layout changes to whole", kind: count, get: func(f Figures) float64 { return float64(f.LayoutToWhole) },
		known: func(f Figures) bool { return f.LayoutsKnown }},
	{name: "node-hours", kind: hours, get: func(f Figures) float64 { return f.NodeHours }},
	countRow("peak nodes", func(f Figures) int { return f.PeakNodes }),
	{name: "cost", kind: hours, get: func(f Figures) float64 { return f.Cost }},
	{name: "cost per useful GPU-hour", kind: hours, get: func(f Figures) float64 { return f.CostPerUsefulGPUHour }},
}

// cell prints a figure.
func (rw row) cell(f Figures) string {
	if !rw.recorded(f) {
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
	return rw.cell(m) + " (±" + calibrationError(rw.kind, rw.get(m), rw.get(r)) + ")"
}

func value(k kind, v float64) string {
	switch k {
	case ratio:
		return fmt.Sprintf("%.1f %%", 100*v)
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

// calibrationError tells how far model figure m is from real figure r:
// percentage points for ratios, whose relative error would blow up near
// 0 %; a relative error for the rest, or the absolute difference when r
// is 0 and a relative one does not exist.
func calibrationError(k kind, m, r float64) string {
	d := math.Abs(m - r)
	switch {
	case k == ratio:
		return fmt.Sprintf("%.1f pp", 100*d)
	case r == 0:
		return value(k, d)
	}
	return percent(d / math.Abs(r))
}

// relativeError is |m−r|/|r|; ok is false when r is 0.
func relativeError(m, r float64) (e float64, ok bool) {
	if r == 0 {
		return 0, false
	}
	return math.Abs(m-r) / math.Abs(r), true
}

func percent(e float64) string {
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
