// Package snapshot renders dashboard panels (time series with a Grafana
// unit and legend) to PNG with gonum/plot, for `make dashboard-snapshot`.
package snapshot

import (
	"fmt"
	"io"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
)

// Width and Height are the PNG's size in pixels.
const (
	Width  = 800
	Height = 400
	dpi    = 96
)

// MaxSeries is the most series a panel shows: those with the largest peak.
const MaxSeries = 8

// Point is one sample.
type Point struct {
	T time.Time
	V float64
}

// Series is one line of a panel.
type Series struct {
	Label  string
	Points []Point
}

// Panel is what one PNG shows.
type Panel struct {
	Title string
	// Unit is the Grafana unit: percent, percentunit, bytes, watt,
	// celsius, s, short.
	Unit string
	// Start is the X axis' zero; End its end (zero: the last sample).
	Start, End time.Time
	Series     []Series
}

// unitScale is how a Grafana unit is shown: a factor and the axis label.
func unitScale(unit string) (float64, string) {
	switch unit {
	case "percent":
		return 1, "%"
	case "percentunit":
		return 100, "%"
	case "bytes":
		return 1 / float64(1<<30), "GiB"
	case "watt":
		return 1, "W"
	case "celsius":
		return 1, "°C"
	case "s":
		return 1, "seconds"
	case "short", "":
		return 1, "count"
	}
	return 1, unit
}

var legendVar = regexp.MustCompile(`\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}`)

// Legend is a Grafana legendFormat with the series' labels put in; with no
// format, the labels themselves.
func Legend(format string, labels map[string]string) string {
	if format == "" {
		var ks []string
		for k := range labels {
			if k != "__name__" {
				ks = append(ks, k)
			}
		}
		sort.Strings(ks)
		var parts []string
		for _, k := range ks {
			parts = append(parts, k+"="+labels[k])
		}
		return strings.Join(parts, " ")
	}
	s := legendVar.ReplaceAllStringFunc(format, func(m string) string {
		return labels[legendVar.FindStringSubmatch(m)[1]]
	})
	return strings.Join(strings.Fields(s), " ")
}

// abbreviate shortens long words (device UUIDs) so the legend fits.
func abbreviate(label string) string {
	ws := strings.Fields(label)
	for i, w := range ws {
		if r := []rune(w); len(r) > 16 && strings.Contains(w, "-") {
			ws[i] = string(r[:9]) + "…" + string(r[len(r)-5:])
		}
	}
	return strings.Join(ws, " ")
}

// keepLargest is at most n series, those with the largest peak, in their
// order.
func keepLargest(ss []Series, n int) []Series {
	if len(ss) <= n {
		return ss
	}
	peak := func(s Series) float64 {
		m := math.Inf(-1)
		for _, p := range s.Points {
			m = math.Max(m, p.V)
		}
		return m
	}
	idx := make([]int, len(ss))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return peak(ss[idx[a]]) > peak(ss[idx[b]]) })
	idx = idx[:n]
	sort.Ints(idx)
	out := make([]Series, 0, n)
	for _, i := range idx {
		out = append(out, ss[i])
	}
	return out
}

// mmss ticks the time axis (seconds since Start) as mm:ss.
type mmss struct{}

func (mmss) Ticks(min, max float64) []plot.Tick {
	span := max - min
	step := 5.0
	for _, s := range []float64{5, 10, 15, 30, 60, 120, 300, 600, 1800, 3600} {
		step = s
		if span/s <= 10 {
			break
		}
	}
	var ts []plot.Tick
	for v := math.Ceil(min/step) * step; v <= max+1e-9; v += step {
		sec := int(math.Round(v))
		ts = append(ts, plot.Tick{Value: v, Label: fmt.Sprintf("%02d:%02d", sec/60, sec%60)})
		for m := 1; m < 5 && step >= 10; m++ {
			if mv := v + float64(m)*step/5; mv <= max {
				ts = append(ts, plot.Tick{Value: mv})
			}
		}
	}
	return ts
}

// nice ticks the value axis at 1, 2 or 5 × 10^k steps, labelled without
// trailing zeros (counts as integers).
type nice struct{}

func (nice) Ticks(min, max float64) []plot.Tick {
	span := max - min
	if span <= 0 {
		span = 1
	}
	mag := math.Pow(10, math.Floor(math.Log10(span/5)))
	step := mag
	for _, f := range []float64{1, 2, 5, 10} {
		step = f * mag
		if span/step <= 6 {
			break
		}
	}
	prec := int(math.Max(0, -math.Floor(math.Log10(step)+1e-9)))
	var ts []plot.Tick
	for v := math.Ceil(min/step) * step; v <= max+step*1e-9; v += step {
		ts = append(ts, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', prec, 64)})
		if mv := v + step/2; mv <= max {
			ts = append(ts, plot.Tick{Value: mv})
		}
	}
	return ts
}

// Render writes the panel as a Width×Height PNG.
func Render(w io.Writer, pn Panel) error {
	scale, unit := unitScale(pn.Unit)
	c := Chart{Title: pn.Title, XLabel: "time since start (mm:ss)", YLabel: unit, XTicks: mmss{}, YMax: 1}
	percent := pn.Unit == "percent" || pn.Unit == "percentunit"
	if percent {
		c.YMax = 100
	}
	end := pn.End
	for i, s := range keepLargest(pn.Series, MaxSeries) {
		xys := make(plotter.XYs, 0, len(s.Points))
		for _, pt := range s.Points {
			if math.IsNaN(pt.V) || math.IsInf(pt.V, 0) {
				continue
			}
			v := pt.V * scale
			xys = append(xys, plotter.XY{X: pt.T.Sub(pn.Start).Seconds(), Y: v})
			c.YMax = math.Max(c.YMax, v)
			c.YMin = math.Min(c.YMin, v)
			if pt.T.After(end) {
				end = pt.T
			}
		}
		if len(xys) == 0 {
			continue
		}
		c.Lines = append(c.Lines, Line{Label: abbreviate(s.Label), XYs: xys, Color: i, Dashes: i % 3})
	}
	if c.YMax > 1 && !percent {
		c.YMax *= 1.08
	}
	c.XMax = math.Max(end.Sub(pn.Start).Seconds(), 10)
	return c.Render(w)
}

// WriteFile renders the panel to path.
func WriteFile(path string, pn Panel) error {
	return writeFile(path, func(w io.Writer) error { return Render(w, pn) })
}

// Slug is a file name for a panel title: lower case, words joined by -.
func Slug(title string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(title) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			if dash && b.Len() > 0 {
				b.WriteByte('-')
			}
			b.WriteRune(r)
			dash = false
		} else {
			dash = true
		}
	}
	return b.String()
}
